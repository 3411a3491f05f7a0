//! From a `CanaryDaemonSet` spec to the settings a pass acts on: the state machine's
//! [`Strategy`], the install-strategy target, the crash-loop policy and the TLS plan.
//!
//! Pure. A spec that cannot be acted on is an `Err` with the message the user sees in the
//! status and the `InvalidSpec` event; nothing here panics on any spec the API server stored.

use std::sync::Arc;
use std::time::Duration;

use canary_analysis::AnalysisPlan;
use canary_predicates::{AnnotationKeys, CrashLoopPolicy, Target, label_selector_matches};
use canary_state_machine::health::{DEFAULT_NODE_CONDITIONS, MAX_HEALTH_DURATION};
use canary_state_machine::{
    Compatibility, Driver, HealthPolicy, InvalidDuration, MaxUnavailable, NeighbourPolicy, Step,
    StepPlan, Strategy, parse_duration,
};
use canary_tls_migration::{ContainerSelector, InsertMode, TlsConfig};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::crd::{
    CanaryDaemonSet, CrashLoopPolicyName, CrashLoopSpec, NeighboursSpec, StepSpec, StrategySpec,
    TlsMigrationSpec,
};
use crate::desired::{RollingUpdateWrite, target_of};

/// The settings derived from a spec.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The decision table and its values.
    pub(crate) strategy: Strategy,
    /// The install-strategy annotation keys.
    pub(crate) keys: AnnotationKeys,
    /// The target every pod must reach.
    pub(crate) target: Target,
    /// What counts as a crash-looping pod.
    pub(crate) crash_loop: CrashLoopPolicy,
    /// The TLS migration, when enabled.
    pub(crate) tls: Option<TlsConfig>,
    /// Which driver moves the pods, and its settings.
    pub(crate) driver: DriverPlan,
    /// The health gates (`spec.health`, issue 46).
    pub(crate) health: HealthPlan,
    /// The analysis (`spec.analysis`), measured from the first updated pod to the end of a
    /// rollout on either driver (issue 46).
    pub(crate) analysis: Option<Arc<AnalysisPlan>>,
    /// Image pre-pull (`spec.prePull`, issue 50): how many nodes pull at once; `None`: off.
    pub(crate) pre_pull: Option<u32>,
    /// `spec.strategy.surge` (issue 50): the step values are written as `maxSurge`.
    pub(crate) surge: bool,
}

impl Plan {
    /// How a step value is written into the DaemonSet's `rollingUpdate`.
    pub(crate) fn rolling_update_write(&self) -> RollingUpdateWrite {
        if self.surge {
            RollingUpdateWrite::Surge
        } else {
            self.strategy.compatibility.into()
        }
    }
}

/// The health gates' settings: the state machine's policy, and which node conditions make a
/// node unhealthy (the adapter's reading of a node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HealthPlan {
    /// Window, soak, what evidence leads to.
    pub(crate) policy: HealthPolicy,
    /// Condition types that make a node unhealthy when `True`, beside `Ready` not `True`.
    pub(crate) node_conditions: Vec<String>,
}

/// The driver and, for the Pods driver, its steps and node choice.
#[derive(Debug)]
pub(crate) enum DriverPlan {
    /// The reference's: `maxUnavailable` steers the DaemonSet controller.
    MaxUnavailable,
    /// Old pods deleted node by node.
    Pods(PodsPlan),
}

/// The Pods driver's settings.
#[derive(Debug)]
pub(crate) struct PodsPlan {
    /// The steps (a last all-nodes step included), zoned when a topology key is set.
    pub(crate) steps: StepPlan,
    /// Nodes the first nodes step prefers.
    pub(crate) canary_selector: Option<LabelSelector>,
    /// The node label that names zones.
    pub(crate) topology_key: Option<String>,
    /// The referenced DaemonSet, when someone else owns it (`spec.workloadRef`).
    pub(crate) workload: Option<String>,
}

/// The plan of `cds`, or why its spec cannot be acted on.
///
/// Everything the CRD's schema and CEL rules say is checked here again: an API server that
/// does not run them (an old one, a simulator, an object stored before the rules existed) must
/// not make the controller act on a spec the rules reject.
pub(crate) fn plan(cds: &CanaryDaemonSet) -> Result<Plan, String> {
    let spec = &cds.spec;
    // The version first: a spec naming no version, or a container that is not there, says so.
    let (keys, target) = match target_of(cds) {
        Ok(resolved) => resolved,
        Err(crate::Error::InvalidSpec(message)) => return Err(message),
        Err(error) => return Err(error.to_string()),
    };
    check_names(cds)?;
    let strategy = strategy_plan(&spec.strategy)?;
    let compatibility = strategy.compatibility;
    if let Some(limit) = spec.revision_history_limit
        && !(1..=MAX_REVISION_HISTORY_LIMIT).contains(&limit)
    {
        // 0 would delete the revision `undo` and a rollback return to; the CRD allows 1 to 100.
        return Err(format!(
            "spec.revisionHistoryLimit {limit} is out of range (1 to {MAX_REVISION_HISTORY_LIMIT})"
        ));
    }
    let crash_loop = crash_loop_plan(spec.strategy.crash_loop.as_ref(), compatibility)?;
    let tls = tls_plan(&spec.tls_migration, compatibility);
    let driver = driver_plan(cds)?;
    let surge = spec.strategy.surge;
    check_driver_combinations(&driver, tls.is_some(), surge, compatibility)?;
    let health = health_plan(cds, compatibility)?;
    let analysis = analysis_plan(cds)?;
    Ok(Plan {
        surge,
        strategy,
        keys,
        target,
        crash_loop,
        tls,
        driver,
        health,
        analysis,
        pre_pull: pre_pull_plan(cds),
    })
}

/// The state machine's [`Strategy`] of `spec.strategy`: its step values, deadline and drift
/// policy, validated.
fn strategy_plan(spec: &StrategySpec) -> Result<Strategy, String> {
    let parse = |field: &str, value: &str| {
        value
            .parse::<MaxUnavailable>()
            .map_err(|e| format!("spec.strategy.{field} {value:?}: {e}"))
    };
    let compatibility = spec.compatibility;
    let seconds = spec.progress_deadline_seconds;
    let progress_deadline = match compatibility {
        Compatibility::KubeVirt => None,
        Compatibility::Fixed => u64::try_from(seconds)
            .ok()
            .filter(|s| *s > 0)
            .map(Duration::from_secs),
    };
    let strategy = Strategy {
        compatibility,
        canary_max_unavailable: parse("canaryMaxUnavailable", &spec.canary_max_unavailable)?,
        fast_max_unavailable: parse("fastMaxUnavailable", &spec.fast_max_unavailable)?,
        progress_deadline,
        drift_policy: spec.drift_policy,
    };
    strategy
        .validate()
        .map_err(|e| format!("spec.strategy: {e}"))?;
    if !(0..=MAX_PROGRESS_DEADLINE_SECONDS).contains(&seconds) {
        return Err(format!(
            "spec.strategy.progressDeadlineSeconds {seconds} is out of range (0 to {MAX_PROGRESS_DEADLINE_SECONDS})"
        ));
    }
    Ok(strategy)
}

/// What counts as a crash-looping pod (`spec.strategy.crashLoop`).
fn crash_loop_plan(
    spec: Option<&CrashLoopSpec>,
    compatibility: Compatibility,
) -> Result<CrashLoopPolicy, String> {
    Ok(match spec {
        // The reference's rule comes with the reference's table unless asked otherwise.
        None => match compatibility {
            Compatibility::KubeVirt => CrashLoopPolicy::KubeVirt,
            Compatibility::Fixed => CrashLoopPolicy::default(),
        },
        Some(crash) => match crash.policy {
            CrashLoopPolicyName::KubeVirt => CrashLoopPolicy::KubeVirt,
            CrashLoopPolicyName::Strict => {
                if !(1..=MAX_RESTART_THRESHOLD).contains(&crash.restart_threshold) {
                    return Err(format!(
                        "spec.strategy.crashLoop.restartThreshold {} is out of range (1 to {MAX_RESTART_THRESHOLD})",
                        crash.restart_threshold
                    ));
                }
                CrashLoopPolicy::Strict {
                    restart_threshold: crash.restart_threshold,
                    include_init_containers: crash.include_init_containers,
                }
            }
        },
    })
}

/// The TLS migration of `spec.tlsMigration`, when enabled.
fn tls_plan(spec: &TlsMigrationSpec, compatibility: Compatibility) -> Option<TlsConfig> {
    spec.enabled.then(|| TlsConfig {
        support_label: spec.support_label.clone(),
        support_value: spec.support_value.clone(),
        flag: spec.flag.clone(),
        flag_value: spec.flag_value.clone(),
        cert_volume: spec.cert_secret_volume.clone(),
        container: spec
            .container
            .clone()
            .map_or(ContainerSelector::Index(0), ContainerSelector::Name),
        insert: match compatibility {
            Compatibility::KubeVirt => InsertMode::Reference,
            Compatibility::Fixed => InsertMode::Idempotent,
        },
    })
}

/// The settings that each stand alone but not together: TLS migration and surge are the
/// MaxUnavailable driver's, and surge is not the reference's.
fn check_driver_combinations(
    driver: &DriverPlan,
    tls: bool,
    surge: bool,
    compatibility: Compatibility,
) -> Result<(), String> {
    let pods_driver = matches!(driver, DriverPlan::Pods(_));
    if pods_driver && tls {
        return Err(
            "spec.tlsMigration is KubeVirt's and runs with the MaxUnavailable driver only; disable it or use driver MaxUnavailable".to_owned(),
        );
    }
    if surge && compatibility == Compatibility::KubeVirt {
        return Err(
            "spec.strategy.surge needs compatibility Fixed: the reference (virt-operator) has no surge, and its readers take maxUnavailable 0 for a rollout under way".to_owned(),
        );
    }
    if surge && pods_driver {
        return Err(
            "spec.strategy.surge is for the MaxUnavailable driver: the Pods driver deletes old pods itself (OnDelete), so a new pod never starts beside the old one; use driver MaxUnavailable for surge".to_owned(),
        );
    }
    Ok(())
}

/// How many nodes pull at once when `spec.prePull` is on (default 10; the CRD bounds it to 1
/// to 1000, and a stored value out of range is clamped rather than refused: it only paces).
fn pre_pull_plan(cds: &CanaryDaemonSet) -> Option<u32> {
    let spec = cds.spec.pre_pull.as_ref()?;
    spec.enabled.unwrap_or(true).then(|| {
        spec.max_concurrent
            .unwrap_or(DEFAULT_PRE_PULL_CONCURRENCY)
            .clamp(1, 1000)
    })
}

/// Nodes that pull at once by default: a tenth of the default widen of a 1,000-node
/// cluster, which a registry and the nodes' links bear beside the running agents.
pub(crate) const DEFAULT_PRE_PULL_CONCURRENCY: u32 = 10;

/// `spec.analysis`, on either driver (issue 46): measured from the first updated pod to the
/// end of the rollout, pause steps or not.
fn analysis_plan(cds: &CanaryDaemonSet) -> Result<Option<Arc<AnalysisPlan>>, String> {
    let Some(analysis) = &cds.spec.analysis else {
        return Ok(None);
    };
    let prometheus = &analysis.prometheus;
    for (field, secret) in [
        ("bearerTokenSecret", &prometheus.bearer_token_secret),
        ("caSecret", &prometheus.ca_secret),
    ] {
        check_secret_key_ref(field, secret.as_ref())?;
    }
    AnalysisPlan::new(analysis)
        .map(|plan| Some(Arc::new(plan)))
        .map_err(|e| e.to_string())
}

/// `spec.health`, checked as the CRD's rules do, with the defaults of `compatibility`.
fn health_plan(cds: &CanaryDaemonSet, compatibility: Compatibility) -> Result<HealthPlan, String> {
    let defaults = match compatibility {
        Compatibility::KubeVirt => HealthPolicy::kubevirt(),
        Compatibility::Fixed => HealthPolicy::default(),
    };
    let Some(spec) = &cds.spec.health else {
        return Ok(HealthPlan {
            policy: defaults,
            node_conditions: DEFAULT_NODE_CONDITIONS.map(str::to_owned).to_vec(),
        });
    };
    let duration = |field: &str, text: Option<&String>, default: Duration, least: Duration| {
        let Some(text) = text else {
            return Ok(default);
        };
        // `0s` is a duration here (no soak); the parser's rule is for pauses, never zero.
        let value = match parse_duration(text) {
            Err(InvalidDuration::OutOfRange(_))
                if text.chars().all(|c| c == '0' || c.is_ascii_alphabetic()) =>
            {
                Duration::ZERO
            }
            parsed => parsed.map_err(|e| format!("spec.health.{field} {text:?}: {e}"))?,
        };
        if value < least || value > MAX_HEALTH_DURATION {
            return Err(format!(
                "spec.health.{field} {text:?} is out of range ({}s to 24h)",
                least.as_secs()
            ));
        }
        Ok(value)
    };
    let window = duration(
        "window",
        spec.window.as_ref(),
        defaults.window,
        Duration::from_secs(1),
    )?;
    let canary_soak = duration(
        "canarySoak",
        spec.canary_soak.as_ref(),
        defaults.canary_soak,
        Duration::ZERO,
    )?;
    let node_conditions = match &spec.node_conditions {
        None => DEFAULT_NODE_CONDITIONS.map(str::to_owned).to_vec(),
        Some(conditions) => {
            if conditions.len() > MAX_NODE_CONDITIONS {
                return Err(format!(
                    "spec.health.nodeConditions names {} conditions (at most {MAX_NODE_CONDITIONS})",
                    conditions.len()
                ));
            }
            for (index, condition) in conditions.iter().enumerate() {
                let well_formed = condition.len() <= 63
                    && condition
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_alphabetic())
                    && condition.chars().all(|c| c.is_ascii_alphanumeric());
                if !well_formed || condition == "Ready" {
                    return Err(format!(
                        "spec.health.nodeConditions[{index}] {condition:?}: a node condition type such as NetworkUnavailable or KernelDeadlock (Ready is always judged)"
                    ));
                }
                if conditions.iter().take(index).any(|c| c == condition) {
                    return Err(format!(
                        "spec.health.nodeConditions[{index}] {condition:?} is named twice"
                    ));
                }
            }
            conditions.clone()
        }
    };
    Ok(HealthPlan {
        policy: HealthPolicy {
            window,
            canary_soak,
            on_unhealthy: spec.on_unhealthy,
            neighbours: neighbours_policy(spec.neighbours.as_ref())?,
        },
        node_conditions,
    })
}

/// `spec.health.neighbours`, checked as the CRD's bounds do.
fn neighbours_policy(spec: Option<&NeighboursSpec>) -> Result<NeighbourPolicy, String> {
    let defaults = NeighbourPolicy::default();
    let Some(spec) = spec else {
        return Ok(defaults);
    };
    let bounded = |field: &str, value: Option<u32>, default: u32, most: u32| match value {
        None => Ok(default),
        Some(value) if (1..=most).contains(&value) => Ok(value),
        Some(value) => Err(format!(
            "spec.health.neighbours.{field} {value} is out of range (1 to {most})"
        )),
    };
    Ok(NeighbourPolicy {
        enabled: spec.enabled.unwrap_or(defaults.enabled),
        min_pods: bounded("minPods", spec.min_pods, defaults.min_pods, 1000)?,
        min_percent: bounded("minPercent", spec.min_percent, defaults.min_percent, 100)?,
    })
}

/// The CRD's bound on `spec.health.nodeConditions`.
const MAX_NODE_CONDITIONS: usize = 16;

/// The driver of `cds` and its settings, checked as the CRD's rules do.
fn driver_plan(cds: &CanaryDaemonSet) -> Result<DriverPlan, String> {
    let spec = &cds.spec;
    let strategy = &spec.strategy;
    match (&spec.template, &spec.workload_ref) {
        (Some(_), Some(_)) | (None, None) => {
            return Err("set exactly one of spec.template (the controller owns the DaemonSet) and spec.workloadRef (Helm, Argo CD or Flux owns it)".to_owned());
        }
        (None, Some(_)) if strategy.driver != Driver::Pods => {
            return Err("spec.workloadRef needs spec.strategy.driver: Pods (the controller never writes a referenced DaemonSet's template)".to_owned());
        }
        (None, Some(_)) if spec.adopt => {
            return Err("spec.adopt takes over a DaemonSet's template; with spec.workloadRef the template stays its owner's: remove spec.adopt".to_owned());
        }
        _ => {}
    }
    if strategy.driver == Driver::MaxUnavailable {
        let pods_only = [
            (!strategy.steps.is_empty(), "steps"),
            (
                strategy.canary_node_selector.is_some(),
                "canaryNodeSelector",
            ),
            (strategy.topology_key.is_some(), "topologyKey"),
        ];
        if let Some((_, field)) = pods_only.iter().find(|(set, _)| *set) {
            return Err(format!(
                "spec.strategy.{field} is a setting of the Pods driver; set spec.strategy.driver: Pods"
            ));
        }
        return Ok(DriverPlan::MaxUnavailable);
    }
    if strategy.compatibility == Compatibility::KubeVirt {
        return Err("spec.strategy.driver Pods needs compatibility Fixed: KubeVirt compatibility supports only the MaxUnavailable driver".to_owned());
    }
    let steps = step_plan(cds)?;
    if let Some(selector) = &strategy.canary_node_selector {
        label_selector_matches(selector, &std::collections::BTreeMap::new())
            .map_err(|e| format!("spec.strategy.canaryNodeSelector: {e}"))?;
    }
    if let Some(key) = &strategy.topology_key
        && !is_qualified_name(key)
    {
        return Err(format!(
            "spec.strategy.topologyKey {key:?} is not a label key such as topology.kubernetes.io/zone"
        ));
    }
    Ok(DriverPlan::Pods(PodsPlan {
        steps,
        canary_selector: strategy.canary_node_selector.clone(),
        topology_key: strategy.topology_key.clone(),
        workload: spec.workload_ref.as_ref().map(|w| w.name.clone()),
    }))
}

/// The Pods driver's steps of `cds` (the appended all-nodes step included), checked, or why
/// they cannot be acted on: what a pass walks and what `status` draws.
pub fn step_plan(cds: &CanaryDaemonSet) -> Result<StepPlan, String> {
    let strategy = &cds.spec.strategy;
    let steps = strategy
        .steps
        .iter()
        .enumerate()
        .map(|(index, step)| parse_step(index, step))
        .collect::<Result<Vec<_>, _>>()?;
    let steps = StepPlan::new(steps).zoned(strategy.topology_key.is_some());
    steps
        .validate()
        .map_err(|e| format!("spec.strategy.steps: {e}"))?;
    Ok(steps)
}

fn parse_step(index: usize, step: &StepSpec) -> Result<Step, String> {
    let field = |name: &str| format!("spec.strategy.steps[{index}].{name}");
    let amount = |name: &str, value: &str| {
        value.parse::<MaxUnavailable>().map_err(|_| {
            format!(
                "{} {value:?}: a positive count such as \"1\" or a percentage from \"1%\" to \"100%\"",
                field(name)
            )
        })
    };
    match (&step.nodes, &step.pause) {
        (Some(nodes), None) => Ok(Step::Nodes {
            nodes: amount("nodes", nodes)?,
            max_unavailable: step
                .max_unavailable
                .as_deref()
                .map(|max| amount("maxUnavailable", max))
                .transpose()?,
        }),
        (None, Some(pause)) if step.max_unavailable.is_none() => Ok(Step::Pause {
            duration: pause
                .duration
                .as_deref()
                .map(|text| {
                    parse_duration(text).map_err(|e| format!("{}: {e}", field("pause.duration")))
                })
                .transpose()?,
        }),
        _ => Err(format!(
            "spec.strategy.steps[{index}]: a step is either {{nodes: ...}} (with an optional maxUnavailable) or {{pause: ...}}"
        )),
    }
}

/// The CRD's bound on `restartThreshold`.
const MAX_RESTART_THRESHOLD: i32 = 1000;
/// The CRD's bound on `progressDeadlineSeconds` (30 days).
const MAX_PROGRESS_DEADLINE_SECONDS: i64 = 2_592_000;
/// The CRD's bound on `spec.revisionHistoryLimit` (the `range` on its field).
const MAX_REVISION_HISTORY_LIMIT: i32 = 100;

/// The CRD's name rules: the DaemonSet name a DNS-1123 subdomain, the object's name a label
/// value, the annotation keys qualified names, and the DaemonSet name as it was (the status
/// remembers the name the controller owns; the CEL rule `self == oldSelf` does the same on an
/// API server that runs it).
fn check_names(cds: &CanaryDaemonSet) -> Result<(), String> {
    let name = cds.metadata.name.as_deref().unwrap_or_default();
    if name.len() > 63 {
        return Err(format!(
            "metadata.name {name:?} is longer than 63 characters: it becomes the value of the canary.daemonset.dev/owner label"
        ));
    }
    let daemon_set = cds.daemon_set_name();
    if !is_dns1123_subdomain(&daemon_set) {
        return Err(format!(
            "spec.daemonSetName {daemon_set:?} is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters)"
        ));
    }
    let owned = cds
        .status
        .as_ref()
        .and_then(|s| s.daemon_set_name.as_deref());
    if let Some(owned) = owned.filter(|owned| *owned != daemon_set) {
        return Err(format!(
            "spec.daemonSetName changed from {owned:?} to {daemon_set:?}: the DaemonSet's name is immutable (a new name would create a second DaemonSet beside the first); set it back, or create a new CanaryDaemonSet"
        ));
    }
    if let Some(keys) = &cds.spec.annotation_keys {
        for key in [&keys.version, &keys.registry, &keys.id] {
            if !is_qualified_name(key) {
                return Err(format!(
                    "spec.annotationKeys: {key:?} is not a qualified name such as example.com/version"
                ));
            }
        }
    }
    Ok(())
}

/// A Secret's name must be a DNS-1123 subdomain and its key Kubernetes' `IsConfigMapKey`
/// (`[-._a-zA-Z0-9]+`): anything else is no Secret the controller should ask for (issue 47).
fn check_secret_key_ref(
    field: &str,
    secret: Option<&canary_analysis::SecretKeyRef>,
) -> Result<(), String> {
    let Some(secret) = secret else {
        return Ok(());
    };
    if !is_dns1123_subdomain(&secret.name) {
        return Err(format!(
            "spec.analysis.prometheus.{field}.name {:?} is not a Secret name (a DNS-1123 subdomain: lower-case letters, digits, '-' and '.')",
            canary_state_machine::cut(&secret.name, 64)
        ));
    }
    let key_ok = !secret.key.is_empty()
        && secret.key.len() <= 253
        && secret
            .key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !key_ok || secret.key == "." || secret.key == ".." {
        return Err(format!(
            "spec.analysis.prometheus.{field}.key {:?} is not a Secret key (letters, digits, '-', '_' and '.')",
            canary_state_machine::cut(&secret.key, 64)
        ));
    }
    Ok(())
}

/// Kubernetes' `IsDNS1123Subdomain`.
fn is_dns1123_subdomain(text: &str) -> bool {
    !text.is_empty() && text.len() <= 253 && text.split('.').all(is_dns1123_label_part)
}

/// A label of a DNS-1123 subdomain: lower-case alphanumerics and '-', alphanumeric at both ends.
fn is_dns1123_label_part(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes.iter().all(|b| alnum(b) || *b == b'-')
}

/// Kubernetes' `IsQualifiedName`: `[prefix/]name`, the prefix a DNS-1123 subdomain, the name at
/// most 63 alphanumerics, '-', '_' and '.', alphanumeric at both ends.
fn is_qualified_name(text: &str) -> bool {
    let (prefix, name) = match text.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, text),
    };
    let bytes = name.as_bytes();
    let name_ok = !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    name_ok && prefix.is_none_or(is_dns1123_subdomain)
}

#[cfg(test)]
pub(super) mod tests;
