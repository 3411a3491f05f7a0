//! What `kubectl get` shows for each kind: the columns and the cells of the API server's Table
//! form. Built-in kinds follow `pkg/printers/internalversion/printers.go` (the server always
//! prints the wide form; kubectl hides the columns of priority 1 unless `-o wide`); custom
//! resources follow their CRD's `additionalPrinterColumns` as
//! `staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor`
//! evaluates them (an `Age` column when the CRD declares none); other kinds get the default
//! `Name`, `Created At` (`staging/src/k8s.io/apiserver/pkg/registry/rest/table.go`).
//!
//! Invariants: ages are rendered by the server from its own clock (`HumanDuration` for
//! built-in kinds, `ShortHumanDuration` for `date` columns of custom resources), as the API
//! server does; a missing field gives the placeholder Kubernetes prints, never an error.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceColumnDefinition;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::format::{
    age_since, format_label_selector, format_labels, human_duration, short_human_duration, text,
};
use super::jsonpath::JsonPath;
use crate::conversion::ServedForm;
use crate::registry::{BuiltinKind, ResourceInfo};

/// `(name, type, format, priority)` of a column.
type ColumnSpec = (&'static str, &'static str, &'static str, i32);

const NAME: ColumnSpec = ("Name", "string", "name", 0);
const AGE: ColumnSpec = ("Age", "string", "", 0);

const POD_COLUMNS: &[ColumnSpec] = &[
    NAME,
    ("Ready", "string", "", 0),
    ("Status", "string", "", 0),
    ("Restarts", "string", "", 0),
    AGE,
    ("IP", "string", "", 1),
    ("Node", "string", "", 1),
    ("Nominated Node", "string", "", 1),
    ("Readiness Gates", "string", "", 1),
];
const DAEMONSET_COLUMNS: &[ColumnSpec] = &[
    NAME,
    ("Desired", "integer", "", 0),
    ("Current", "integer", "", 0),
    ("Ready", "integer", "", 0),
    ("Up-to-date", "integer", "", 0),
    ("Available", "integer", "", 0),
    ("Node Selector", "string", "", 0),
    AGE,
    ("Containers", "string", "", 1),
    ("Images", "string", "", 1),
    ("Selector", "string", "", 1),
];
const NODE_COLUMNS: &[ColumnSpec] = &[
    NAME,
    ("Status", "string", "", 0),
    ("Roles", "string", "", 0),
    AGE,
    ("Version", "string", "", 0),
    ("Internal-IP", "string", "", 1),
    ("External-IP", "string", "", 1),
    ("OS-Image", "string", "", 1),
    ("Kernel-Version", "string", "", 1),
    ("Container-Runtime", "string", "", 1),
];
const EVENT_COLUMNS: &[ColumnSpec] = &[
    ("Last Seen", "string", "", 0),
    ("Type", "string", "", 0),
    ("Reason", "string", "", 0),
    ("Object", "string", "", 0),
    ("Subobject", "string", "", 1),
    ("Source", "string", "", 1),
    ("Message", "string", "", 0),
    ("First Seen", "string", "", 1),
    ("Count", "string", "", 1),
    ("Name", "string", "name", 1),
];
const NAMESPACE_COLUMNS: &[ColumnSpec] = &[NAME, ("Status", "string", "", 0), AGE];
const REVISION_COLUMNS: &[ColumnSpec] = &[
    NAME,
    ("Controller", "string", "", 0),
    ("Revision", "integer", "", 0),
    AGE,
];
const LEASE_COLUMNS: &[ColumnSpec] = &[NAME, ("Holder", "string", "", 0), AGE];
const CONFIGMAP_COLUMNS: &[ColumnSpec] = &[NAME, ("Data", "integer", "", 0), AGE];
const SECRET_COLUMNS: &[ColumnSpec] = &[
    NAME,
    ("Type", "string", "", 0),
    ("Data", "integer", "", 0),
    AGE,
];
const SERVICE_ACCOUNT_COLUMNS: &[ColumnSpec] = &[NAME, ("Secrets", "integer", "", 0), AGE];
const DEFAULT_COLUMNS: &[ColumnSpec] = &[NAME, ("Created At", "date", "", 0)];

/// How one resource is printed.
#[derive(Clone, Debug)]
pub enum Printer {
    /// A built-in kind with a printer of its own, printing the form the object is stored in
    /// (`events.k8s.io` Events print as core Events, as the API server prints them).
    Builtin(BuiltinKind, ServedForm),
    /// A custom resource: `Name`, then its CRD's printer columns.
    Custom(Vec<(CustomResourceColumnDefinition, Option<JsonPath>)>),
    /// Any other kind: `Name`, `Created At`.
    Default,
}

impl Printer {
    /// The printer of a served resource.
    pub fn for_resource(info: &ResourceInfo) -> Self {
        if let Some(columns) = &info.printer_columns {
            let columns = if columns.is_empty() {
                vec![CustomResourceColumnDefinition {
                    name: "Age".into(),
                    type_: "date".into(),
                    json_path: ".metadata.creationTimestamp".into(),
                    ..CustomResourceColumnDefinition::default()
                }]
            } else {
                columns.clone()
            };
            return Self::Custom(
                columns
                    .into_iter()
                    .map(|column| {
                        let path = JsonPath::parse(&column.json_path).ok();
                        (column, path)
                    })
                    .collect(),
            );
        }
        match info.key.builtin_kind() {
            None | Some(BuiltinKind::CustomResourceDefinition) => Self::Default,
            Some(kind) => Self::Builtin(kind, ServedForm::of(&info.key).1),
        }
    }

    /// The Table's `columnDefinitions`.
    pub fn columns(&self) -> Vec<Value> {
        let specs = match self {
            Self::Builtin(kind, _) => match kind {
                BuiltinKind::Pod => POD_COLUMNS,
                BuiltinKind::DaemonSet => DAEMONSET_COLUMNS,
                BuiltinKind::Node => NODE_COLUMNS,
                BuiltinKind::Namespace => NAMESPACE_COLUMNS,
                BuiltinKind::Event => EVENT_COLUMNS,
                BuiltinKind::ControllerRevision => REVISION_COLUMNS,
                BuiltinKind::Lease => LEASE_COLUMNS,
                BuiltinKind::ConfigMap => CONFIGMAP_COLUMNS,
                BuiltinKind::Secret => SECRET_COLUMNS,
                BuiltinKind::ServiceAccount => SERVICE_ACCOUNT_COLUMNS,
                BuiltinKind::CustomResourceDefinition => DEFAULT_COLUMNS,
            },
            Self::Default => DEFAULT_COLUMNS,
            Self::Custom(columns) => {
                let mut definitions = vec![column(NAME, "Name must be unique within a namespace.")];
                definitions.extend(columns.iter().map(|(c, _)| {
                    let description = c.description.clone().unwrap_or_else(|| {
                        format!(
                            "Custom resource definition column (in JSONPath format): {}",
                            c.json_path
                        )
                    });
                    json!({
                        "name": c.name,
                        "type": c.type_,
                        "format": c.format.clone().unwrap_or_default(),
                        "description": description,
                        "priority": c.priority.unwrap_or(0),
                    })
                }));
                return definitions;
            }
        };
        specs.iter().map(|spec| column(*spec, spec.0)).collect()
    }

    /// One row's `cells` for `object`, at `now`.
    pub fn cells(&self, object: &Value, now: Timestamp) -> Vec<Value> {
        let name = json!(text(&object["metadata"]["name"]));
        let age = || json!(age_since(&object["metadata"]["creationTimestamp"], now));
        let kind = match self {
            Self::Builtin(kind, ServedForm::AsStored) => *kind,
            Self::Builtin(kind, form) => {
                return Self::Builtin(*kind, ServedForm::AsStored)
                    .cells(&form.to_storage(object.clone()), now);
            }
            Self::Default => return vec![name, object["metadata"]["creationTimestamp"].clone()],
            Self::Custom(columns) => {
                let mut cells = vec![name];
                cells.extend(columns.iter().map(|(column, path)| {
                    let found = path.as_ref().and_then(|p| p.find(object).first().copied());
                    found.map_or(Value::Null, |value| custom_cell(&column.type_, value, now))
                }));
                return cells;
            }
        };
        match kind {
            BuiltinKind::Pod => pod_cells(object, now),
            BuiltinKind::DaemonSet => {
                let status = &object["status"];
                let template = &object["spec"]["template"]["spec"];
                let (containers, images) = container_cells(template);
                vec![
                    name,
                    int(&status["desiredNumberScheduled"]),
                    int(&status["currentNumberScheduled"]),
                    int(&status["numberReady"]),
                    int(&status["updatedNumberScheduled"]),
                    int(&status["numberAvailable"]),
                    json!(format_labels(&template["nodeSelector"])),
                    age(),
                    json!(containers),
                    json!(images),
                    json!(format_label_selector(&object["spec"]["selector"])),
                ]
            }
            BuiltinKind::Node => node_cells(object, now),
            BuiltinKind::Namespace => vec![name, json!(text(&object["status"]["phase"])), age()],
            BuiltinKind::Event => event_cells(object, now),
            BuiltinKind::ControllerRevision => {
                let owner = object["metadata"]["ownerReferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|r| r["controller"] == true);
                let controller = owner.map_or_else(
                    || "<none>".to_owned(),
                    |r| {
                        let api_version = text(&r["apiVersion"]);
                        let group = api_version.split_once('/').map_or("", |(g, _)| g);
                        let kind = text(&r["kind"]).to_lowercase();
                        let kind = if group.is_empty() {
                            kind
                        } else {
                            format!("{kind}.{group}")
                        };
                        format!("{kind}/{}", text(&r["name"]))
                    },
                );
                vec![name, json!(controller), int(&object["revision"]), age()]
            }
            BuiltinKind::Lease => vec![name, json!(text(&object["spec"]["holderIdentity"])), age()],
            BuiltinKind::ConfigMap => vec![
                name,
                json!(len(&object["data"]) + len(&object["binaryData"])),
                age(),
            ],
            BuiltinKind::Secret => vec![
                name,
                json!(text(&object["type"])),
                json!(len(&object["data"])),
                age(),
            ],
            BuiltinKind::ServiceAccount => vec![name, json!(len(&object["secrets"])), age()],
            BuiltinKind::CustomResourceDefinition => {
                vec![name, object["metadata"]["creationTimestamp"].clone()]
            }
        }
    }
}

fn column((name, type_, format, priority): ColumnSpec, description: &str) -> Value {
    json!({
        "name": name,
        "type": type_,
        "format": format,
        "description": description,
        "priority": priority,
    })
}

/// `cellForJSONValue`, and the jsonpath printing of `string` columns.
fn custom_cell(type_: &str, value: &Value, now: Timestamp) -> Value {
    match (type_, value) {
        ("string", Value::String(s)) => json!(s),
        ("string", Value::Null) => Value::Null,
        ("string", other) => json!(other.to_string()),
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map_or(Value::Null, |i| json!(i)),
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, |f| json!(f)),
        ("boolean", Value::Bool(b)) => json!(b),
        ("date", Value::String(s)) => match s.parse::<Timestamp>() {
            Ok(at) => json!(short_human_duration(now.duration_since(at).as_secs())),
            Err(_) => json!("<invalid>"),
        },
        _ => Value::Null,
    }
}

/// What kubectl's `printPod` gathers for the READY, STATUS and RESTARTS columns.
struct PodColumns {
    /// The STATUS column.
    reason: String,
    /// Ready containers (and started sidecars).
    ready: usize,
    /// Containers, sidecars (restartable init containers) counted.
    total: usize,
    /// Restarts counted, and when the last one ended.
    restarts: i64,
    last_restart: Option<Timestamp>,
}

/// When `container`'s last run ended.
fn finished_at(container: &Value) -> Option<Timestamp> {
    container["lastState"]["terminated"]["finishedAt"]
        .as_str()
        .and_then(|t| t.parse::<Timestamp>().ok())
}

fn pod_cells(pod: &Value, now: Timestamp) -> Vec<Value> {
    let spec = &pod["spec"];
    let status = &pod["status"];
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    let mut columns = PodColumns {
        reason: text(&status["phase"]),
        ready: 0,
        total: len(&spec["containers"]),
        restarts: 0,
        last_restart: None,
    };
    if let Some(status_reason) = status["reason"].as_str().filter(|r| !r.is_empty()) {
        columns.reason = status_reason.to_owned();
    }
    if conditions
        .iter()
        .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated")
    {
        columns.reason = "SchedulingGated".to_owned();
    }
    let (initializing, sidecar_restarts) = columns.read_init_containers(spec, status);
    let initialized = conditions
        .iter()
        .any(|c| c["type"] == "Initialized" && c["status"] == "True");
    if !initializing || initialized {
        // Only the sidecars' restarts count beside the containers' once the pod is initialized.
        (columns.restarts, columns.last_restart) = sidecar_restarts;
        columns.read_containers(status, &conditions);
    }
    let PodColumns {
        mut reason,
        ready,
        total,
        restarts,
        last_restart,
    } = columns;
    let deleting = !pod["metadata"]["deletionTimestamp"].is_null();
    let terminal = matches!(status["phase"].as_str(), Some("Failed" | "Succeeded"));
    if deleting && status["reason"] == "NodeLost" {
        reason = "Unknown".to_owned();
    } else if deleting && !terminal {
        reason = "Terminating".to_owned();
    }
    let restarts_cell = match last_restart {
        Some(at) if restarts != 0 => format!(
            "{restarts} ({} ago)",
            human_duration(now.duration_since(at).as_secs())
        ),
        _ => restarts.to_string(),
    };
    let or_none = |value: &Value| {
        Some(text(value))
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| "<none>".to_owned())
    };
    vec![
        json!(text(&pod["metadata"]["name"])),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_cell),
        json!(age_since(&pod["metadata"]["creationTimestamp"], now)),
        json!(or_none(&status["podIPs"][0]["ip"])),
        json!(or_none(&spec["nodeName"])),
        json!(or_none(&status["nominatedNodeName"])),
        json!(readiness_gates_cell(spec, &conditions)),
    ]
}

impl PodColumns {
    /// The init containers, as `printPod` reads them: every restart counted, the sidecars
    /// (restartable init containers) among the containers, and the STATUS of the first init
    /// container that has not finished. Returns whether the pod is still initializing, and the
    /// sidecars' restarts with when the last ended (all that counts once it is initialized).
    fn read_init_containers(
        &mut self,
        spec: &Value,
        status: &Value,
    ) -> (bool, (i64, Option<Timestamp>)) {
        let init_containers = spec["initContainers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let restartable = |name: &Value| {
            init_containers
                .iter()
                .any(|c| &c["name"] == name && c["restartPolicy"] == "Always")
        };
        self.total += init_containers
            .iter()
            .filter(|c| c["restartPolicy"] == "Always")
            .count();
        let (mut sidecar_restarts, mut last_sidecar_restart) = (0, None);
        for (index, container) in status["initContainerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let count = container["restartCount"].as_i64().unwrap_or(0);
            self.restarts += count;
            self.last_restart = self.last_restart.max(finished_at(container));
            if restartable(&container["name"]) {
                sidecar_restarts += count;
                last_sidecar_restart = last_sidecar_restart.max(finished_at(container));
            }
            let state = &container["state"];
            let terminated = &state["terminated"];
            let waiting_reason = text(&state["waiting"]["reason"]);
            if terminated.is_object() && terminated["exitCode"].as_i64() == Some(0) {
                continue;
            }
            if restartable(&container["name"]) && container["started"] == true {
                if container["ready"] == true {
                    self.ready += 1;
                }
                continue;
            }
            self.reason = if terminated.is_object() {
                match terminated["reason"].as_str().filter(|r| !r.is_empty()) {
                    Some(r) => format!("Init:{r}"),
                    None => match terminated["signal"].as_i64().filter(|s| *s != 0) {
                        Some(signal) => format!("Init:Signal:{signal}"),
                        None => format!("Init:ExitCode:{}", terminated["exitCode"]),
                    },
                }
            } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
                format!("Init:{waiting_reason}")
            } else {
                format!("Init:{index}/{}", init_containers.len())
            };
            return (true, (sidecar_restarts, last_sidecar_restart));
        }
        (false, (sidecar_restarts, last_sidecar_restart))
    }

    /// The containers, last first as `printPod` walks them: their restarts, the ready ones, and
    /// the STATUS from a waiting or terminated one (`Running` or `NotReady` when one completed
    /// beside running ones).
    fn read_containers(&mut self, status: &Value, conditions: &[Value]) {
        let mut has_running = false;
        let statuses = status["containerStatuses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for container in statuses.iter().rev() {
            self.restarts += container["restartCount"].as_i64().unwrap_or(0);
            self.last_restart = self.last_restart.max(finished_at(container));
            let state = &container["state"];
            let terminated = &state["terminated"];
            if let Some(waiting) = state["waiting"]["reason"]
                .as_str()
                .filter(|r| !r.is_empty())
            {
                self.reason = waiting.to_owned();
            } else if let Some(r) = terminated["reason"].as_str().filter(|r| !r.is_empty()) {
                self.reason = r.to_owned();
            } else if terminated.is_object() {
                self.reason = match terminated["signal"].as_i64().filter(|s| *s != 0) {
                    Some(signal) => format!("Signal:{signal}"),
                    None => format!("ExitCode:{}", terminated["exitCode"]),
                };
            } else if container["ready"] == true && state["running"].is_object() {
                has_running = true;
                self.ready += 1;
            }
        }
        if self.reason == "Completed" && has_running {
            let pod_ready = conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            self.reason = if pod_ready { "Running" } else { "NotReady" }.to_owned();
        }
    }
}

/// The READINESS GATES column: met of declared, `<none>` without any.
fn readiness_gates_cell(spec: &Value, conditions: &[Value]) -> String {
    let gates = spec["readinessGates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if gates.is_empty() {
        return "<none>".to_owned();
    }
    let met = gates
        .iter()
        .filter(|gate| {
            conditions
                .iter()
                .find(|c| c["type"] == gate["conditionType"])
                .is_some_and(|c| c["status"] == "True")
        })
        .count();
    format!("{met}/{}", gates.len())
}

fn node_cells(node: &Value, now: Timestamp) -> Vec<Value> {
    let ready = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready");
    let mut status = vec![match ready {
        Some(c) if c["status"] == "True" => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if node["spec"]["unschedulable"] == true {
        status.push("SchedulingDisabled");
    }
    let mut roles: Vec<String> = node["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(
            |(key, value)| match key.strip_prefix("node-role.kubernetes.io/") {
                Some(role) if !role.is_empty() => Some(role.to_owned()),
                _ if key == "kubernetes.io/role" => {
                    value.as_str().filter(|v| !v.is_empty()).map(str::to_owned)
                }
                _ => None,
            },
        )
        .collect();
    roles.sort();
    roles.dedup();
    let address = |kind: &str| {
        node["status"]["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["type"] == kind)
            .map_or_else(|| "<none>".to_owned(), |a| text(&a["address"]))
    };
    let info = &node["status"]["nodeInfo"];
    let unknown = |value: &Value| {
        Some(text(value))
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| "<unknown>".to_owned())
    };
    vec![
        json!(text(&node["metadata"]["name"])),
        json!(status.join(",")),
        json!(if roles.is_empty() {
            "<none>".to_owned()
        } else {
            roles.join(",")
        }),
        json!(age_since(&node["metadata"]["creationTimestamp"], now)),
        json!(text(&info["kubeletVersion"])),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(unknown(&info["osImage"])),
        json!(unknown(&info["kernelVersion"])),
        json!(unknown(&info["containerRuntimeVersion"])),
    ]
}

/// `printEvent`, on the core form.
fn event_cells(event: &Value, now: Timestamp) -> Vec<Value> {
    let first_seen = if event["firstTimestamp"].is_null() {
        age_since(&event["eventTime"], now)
    } else {
        age_since(&event["firstTimestamp"], now)
    };
    let mut last_seen = if event["lastTimestamp"].is_null() {
        first_seen.clone()
    } else {
        age_since(&event["lastTimestamp"], now)
    };
    let mut count = event["count"].as_i64().unwrap_or(0);
    if event["series"].is_object() {
        last_seen = age_since(&event["series"]["lastObservedTime"], now);
        count = event["series"]["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let involved = &event["involvedObject"];
    let kind = text(&involved["kind"]).to_lowercase();
    let target = match text(&involved["name"]) {
        name if name.is_empty() => kind,
        name => format!("{kind}/{name}"),
    };
    let first_non_empty = |a: String, b: String| if a.is_empty() { b } else { a };
    let component = first_non_empty(
        text(&event["source"]["component"]),
        text(&event["reportingComponent"]),
    );
    let instance = first_non_empty(
        text(&event["source"]["host"]),
        text(&event["reportingInstance"]),
    );
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last_seen),
        json!(text(&event["type"])),
        json!(text(&event["reason"])),
        json!(target),
        json!(text(&involved["fieldPath"])),
        json!(source),
        json!(text(&event["message"]).trim()),
        json!(first_seen),
        json!(count),
        json!(text(&event["metadata"]["name"])),
    ]
}

/// `layoutContainerCells`: container names and images, comma-separated.
fn container_cells(pod_spec: &Value) -> (String, String) {
    let containers = pod_spec["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<String> = containers.iter().map(|c| text(&c["name"])).collect();
    let images: Vec<String> = containers.iter().map(|c| text(&c["image"])).collect();
    (names.join(","), images.join(","))
}

fn int(value: &Value) -> Value {
    json!(value.as_i64().unwrap_or(0))
}

fn len(value: &Value) -> usize {
    match value {
        Value::Array(items) => items.len(),
        Value::Object(map) => map.len(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_looping_pod_prints_its_reason_and_restarts() {
        let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let pod = json!({
            "metadata": {"name": "agent-x", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": "node-1", "containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.128.0.5"}], "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 0, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 3,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-01-01T00:09:20Z"}}},
            ]},
        });
        let cells = Printer::Builtin(BuiltinKind::Pod, ServedForm::AsStored).cells(&pod, now);
        assert_eq!(
            cells,
            [
                json!("agent-x"),
                json!("1/2"),
                json!("CrashLoopBackOff"),
                json!("3 (40s ago)"),
                json!("10m"),
                json!("10.128.0.5"),
                json!("node-1"),
                json!("<none>"),
                json!("<none>"),
            ]
        );
        let mut terminating = pod;
        terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:10:30Z");
        assert_eq!(
            Printer::Builtin(BuiltinKind::Pod, ServedForm::AsStored).cells(&terminating, now)[2],
            "Terminating"
        );
    }

    /// Init containers as kubectl prints them: the first unfinished one names the STATUS, every
    /// restart counts while the pod initializes, then only the sidecars' beside the
    /// containers'; a readiness gate counts as met or not.
    #[test]
    fn init_containers_and_sidecars_print_as_kubectl_does() {
        let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let cells =
            |pod: &Value| Printer::Builtin(BuiltinKind::Pod, ServedForm::AsStored).cells(pod, now);
        let initializing = json!({
            "metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}], "initContainers": [
                {"name": "done"}, {"name": "sidecar", "restartPolicy": "Always"}, {"name": "pull"}, {"name": "later"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [
                {"name": "done", "restartCount": 1, "state": {"terminated": {"exitCode": 0}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-01-01T00:05:00Z"}}},
                {"name": "sidecar", "restartCount": 2, "started": true, "ready": true, "state": {"running": {}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-01-01T00:08:00Z"}}},
                {"name": "pull", "restartCount": 0, "state": {"waiting": {"reason": "ErrImagePull"}}},
                {"name": "later", "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]},
        });
        let row = cells(&initializing);
        assert_eq!(
            (&row[1], &row[2], &row[3]),
            (
                &json!("1/2"),
                &json!("Init:ErrImagePull"),
                &json!("3 (2m ago)")
            )
        );
        let mut initialized = initializing.clone();
        initialized["status"] = json!({"phase": "Running",
            "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"},
                           {"type": "example.com/gate", "status": "False"}],
            "initContainerStatuses": initializing["status"]["initContainerStatuses"].clone(),
            "containerStatuses": [{"name": "a", "ready": true, "restartCount": 1, "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-01-01T00:09:00Z"}}}]});
        for finished in [2, 3] {
            initialized["status"]["initContainerStatuses"][finished]["state"] =
                json!({"terminated": {"exitCode": 0}});
        }
        initialized["spec"]["readinessGates"] = json!([{"conditionType": "example.com/gate"}]);
        let row = cells(&initialized);
        assert_eq!(
            (&row[1], &row[2], &row[3], &row[8]),
            (
                &json!("2/2"),
                &json!("Running"),
                &json!("3 (60s ago)"),
                &json!("0/1")
            )
        );
        let mut failed_init = initializing;
        failed_init["status"]["initContainerStatuses"][0]["state"] =
            json!({"terminated": {"exitCode": 2}});
        assert_eq!(cells(&failed_init)[2], "Init:ExitCode:2");
    }
}
