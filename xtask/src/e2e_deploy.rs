//! The deploy suite of `cargo xtask e2e`: what deploy/ installs, on the real control plane.
//!
//! Job, in order (each step checks what the cluster holds, not what was asked):
//! - **Helm install** of `deploy/helm/daemonset-canary` with real Helm 4 on a cluster without the
//!   CRD: the CRD Helm creates is the generated one and carries the keep policy. The controller
//!   then runs as the chart's Deployment says: its container's arguments and environment as
//!   Helm applied them (`$(VAR)` expanded as the kubelet does, fieldRefs filled in), with a token
//!   of the chart's ServiceAccount, out of the cluster (KWOK runs no container, so the binary
//!   stands in for the image; only `--metrics-addr` moves to a free loopback port). It rolls a
//!   Pods-driver CanaryDaemonSet out in another namespace, and the chart's admission policy
//!   (`policy.enabled`) refuses the real `daemonset-canary promote --full` of a user outside the
//!   allowed group and lets one inside through.
//! - **Helm upgrade** to `scope=Namespace`, plain logs and an analysis allow-list: the
//!   ClusterRole goes, a Role comes, the Deployment's arguments and environment follow; the
//!   controller, started again from the new Deployment, rolls out in the release namespace and
//!   no longer acts (nor may act) elsewhere.
//! - **Helm uninstall** keeps the CRD and with it the CanaryDaemonSets and their DaemonSets.
//! - **deploy/policy**, the kustomize overlay, applied as shipped: it refuses `promote --full`,
//!   `abort` and `undo` from users outside its group (cluster admins too), and allows them from
//!   one inside, a plain promote from anyone, and any write that leaves the annotations as they
//!   were.
//!
//! Invariants: everything this suite creates is named with this process's id and deleted at
//! the end, passed or failed (the CRD too: the next run starts from a cluster without it);
//! every controller it starts is stopped; no step skips.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use crate::cluster::{self, Cluster, Layout};
use crate::e2e::{Controller, spawn_controller};
use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The chart, the policy overlay and the CRD's name.
const CHART: &str = "deploy/helm/daemonset-canary";
const POLICY_OVERLAY: &str = "deploy/policy";
const CRD: &str = "canarydaemonsets.canary.daemonset.dev";
/// The release; named like the chart, so its objects have deploy/'s names.
const RELEASE: &str = "daemonset-canary";
/// The group the policy lets skip safety by default (values.yaml, deploy/policy).
const ADMINS: &str = "daemonset-canary:rollout-admins";
/// The CanaryDaemonSet every step rolls out.
const AGENT: &str = "agent";
/// The admission policy's name, and its binding's, in deploy/policy and a release named
/// [`RELEASE`] with `scope: Cluster`.
const POLICY: &str = "daemonset-canary-safety-overrides";
/// The namespace of deploy/default, where the migration from kustomize installs.
const KUSTOMIZE_NAMESPACE: &str = "daemonset-canary-system";
/// The pod name the controller is given (its Lease identity).
const POD_NAME: &str = "daemonset-canary-e2e-0";

/// Runs the suite.
pub fn run(layout: &Layout, cluster: &Cluster, binary: &Path) -> Result<()> {
    let helm = crate::tools::ensure_helm()?;
    let suite = Suite {
        layout,
        cluster,
        binary: binary.to_path_buf(),
        helm,
        release_namespace: format!("canary-helm-{}", std::process::id()),
        workload_namespace: format!("canary-helm-workload-{}", std::process::id()),
        policy_namespace: format!("canary-policy-{}", std::process::id()),
        second_namespace: format!("canary-helm-second-{}", std::process::id()),
    };
    let started = Instant::now();
    let chart = suite.helm_install_upgrade_uninstall();
    eprintln!(
        "==> e2e deploy: the Helm chart {} in {:.0} s",
        if chart.is_ok() { "passed" } else { "FAILED" },
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let policy = suite.policy_overlay();
    eprintln!(
        "==> e2e deploy: deploy/policy {} in {:.0} s",
        if policy.is_ok() { "passed" } else { "FAILED" },
        started.elapsed().as_secs_f64()
    );
    suite.clean_up();
    match (chart, policy) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(error), Ok(())) | (Ok(()), Err(error)) => Err(error),
        (Err(chart), Err(policy)) => bail!("{chart:#}\nand deploy/policy: {policy:#}"),
    }
}

struct Suite<'a> {
    layout: &'a Layout,
    cluster: &'a Cluster,
    binary: PathBuf,
    helm: PathBuf,
    release_namespace: String,
    workload_namespace: String,
    policy_namespace: String,
    second_namespace: String,
}

/// How a user reaches the cluster in the policy checks: a name and groups, impersonated with
/// the admin's credentials (the API server authorizes and admits the request as them).
struct User {
    name: &'static str,
    groups: &'static [&'static str],
}

const OUTSIDER: User = User {
    name: "mallory",
    groups: &[],
};
const ADMIN: User = User {
    name: "alice",
    groups: &[ADMINS],
};

impl Suite<'_> {
    fn kubectl(&self, args: &[&str]) -> Result<String> {
        self.cluster.kubectl(args)
    }

    fn apply(&self, object: &Value) -> Result<String> {
        self.cluster.kubectl_with_input(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=xtask-e2e-deploy",
                "-f",
                "-",
            ],
            &object.to_string(),
        )
    }

    fn get(&self, args: &[&str]) -> Result<Value> {
        let mut all = vec!["get"];
        all.extend(args);
        all.extend(["-o", "json"]);
        let text = self.kubectl(&all)?;
        serde_json::from_str(&text).with_context(|| format!("kubectl get {args:?}: no JSON"))
    }

    /// `helm <args>` against the cluster, with its homes under `target/helm-home/`.
    fn helm(&self, args: &[&str]) -> Result<String> {
        let home = crate::tools::target_dir()?.join("helm-home");
        let output = Command::new(&self.helm)
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.cluster.kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .output()
            .with_context(|| format!("cannot run {}", self.helm.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        ensure!(
            output.status.success(),
            "helm {} failed: {}{}",
            args.join(" "),
            stdout,
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(stdout)
    }

    fn helm_install_upgrade_uninstall(&self) -> Result<()> {
        let (release_ns, workload_ns) = (&self.release_namespace, &self.workload_namespace);
        // A cluster without the chart's cluster-wide objects: the main suite installed the CRD
        // and deploy/default's RBAC without Helm, which Helm would refuse to take over.
        for (kind, name) in [
            ("crd", CRD),
            ("clusterrolebinding", RELEASE),
            ("clusterrole", RELEASE),
            ("validatingadmissionpolicybinding", POLICY),
            ("validatingadmissionpolicy", POLICY),
        ] {
            self.kubectl(&[
                "delete",
                kind,
                name,
                "--ignore-not-found",
                "--wait=true",
                "--timeout=120s",
            ])?;
        }
        self.helm(&[
            "install",
            RELEASE,
            CHART,
            "--namespace",
            release_ns,
            "--create-namespace",
            "--set",
            "policy.enabled=true",
        ])?;
        eprintln!("helm install {RELEASE} {CHART} -n {release_ns} --set policy.enabled=true");
        self.cluster.wait_crd_established(CRD)?;
        self.check_crd_is_the_generated_one()?;
        let kubeconfig = self.service_account_kubeconfig()?;

        let deployment = self.get(&["deployment", RELEASE, "-n", release_ns])?;
        ensure_args(
            &deployment,
            &["run", "--leader-election", "--log-format=json"],
            &["--namespace=$(POD_NAMESPACE)"],
        )?;
        let controller = self.start_from(&deployment, &kubeconfig, "helm-install")?;
        let lease = self.get(&["lease", "daemonset-canary", "-n", release_ns])?;
        ensure!(
            lease["spec"]["holderIdentity"] == POD_NAME,
            "the Lease in {release_ns} is held by {}, not by the controller ({POD_NAME})",
            lease["spec"]["holderIdentity"]
        );

        self.kubectl(&["create", "namespace", workload_ns])?;
        self.grant_steering(workload_ns)?;
        self.apply(&pods_driver_agent(workload_ns, "v1"))?;
        self.wait_phase(workload_ns, "successful", Duration::from_secs(300))?;
        self.apply(&pods_driver_agent(workload_ns, "v2"))?;
        self.wait_phase(workload_ns, "paused", Duration::from_secs(300))?;
        // The real verb, as each user: the chart's policy decides.
        let refused = self.promote_full(&OUTSIDER, workload_ns)?;
        ensure!(
            !refused.0 && refused.1.contains(&format!("only members of {ADMINS}")),
            "promote --full by {} (no group) was not refused by the chart's policy: {}",
            OUTSIDER.name,
            refused.1
        );
        eprintln!(
            "ok promote --full by {}: {}",
            OUTSIDER.name,
            last_line(&refused.1)
        );
        let allowed = self.promote_full(&ADMIN, workload_ns)?;
        ensure!(
            allowed.0,
            "promote --full by {} ({ADMINS}) failed: {}",
            ADMIN.name,
            allowed.1
        );
        eprintln!(
            "ok promote --full by {} ({ADMINS}): {}",
            ADMIN.name,
            last_line(&allowed.1)
        );
        self.wait_phase(workload_ns, "successful", Duration::from_secs(300))?;
        self.ensure_every_pod_on(workload_ns, "v2")?;
        drop(controller);

        self.helm(&[
            "upgrade",
            RELEASE,
            CHART,
            "--namespace",
            release_ns,
            "--set",
            "policy.enabled=true",
            "--set",
            "scope=Namespace",
            "--set",
            "logFormat=plain",
            "--set",
            "analysis.allowedAddresses={http://prometheus.example:9090/}",
        ])?;
        eprintln!(
            "helm upgrade {RELEASE} --set scope=Namespace,logFormat=plain,analysis.allowedAddresses=..."
        );
        ensure!(
            self.kubectl(&[
                "get",
                "clusterrole",
                RELEASE,
                "--ignore-not-found",
                "-o",
                "name"
            ])?
            .trim()
            .is_empty(),
            "the ClusterRole {RELEASE} is still there after the upgrade to scope=Namespace"
        );
        self.get(&["role", RELEASE, "-n", release_ns])
            .context("no Role after the upgrade to scope=Namespace")?;
        let deployment = self.get(&["deployment", RELEASE, "-n", release_ns])?;
        ensure_args(
            &deployment,
            &["--namespace=$(POD_NAMESPACE)", "--log-format=plain"],
            &["--log-format=json"],
        )?;
        let env = container_env(&deployment, release_ns)?;
        ensure!(
            env.iter().any(|(k, v)| k == "CANARY_ALLOW_ANALYSIS_ADDRESS"
                && v == "http://prometheus.example:9090/"),
            "the upgraded Deployment has no CANARY_ALLOW_ANALYSIS_ADDRESS: {env:?}"
        );
        let binding = self.get(&[
            "validatingadmissionpolicybinding",
            // A namespaced release's cluster-scoped objects carry its namespace.
            &format!("{RELEASE}-safety-overrides-{release_ns}"),
        ])?;
        ensure!(
            binding.pointer(
                "/spec/matchResources/namespaceSelector/matchLabels/kubernetes.io~1metadata.name"
            ) == Some(&json!(release_ns)),
            "the policy binding is not narrowed to {release_ns}: {}",
            binding["spec"]
        );
        // A second namespaced release beside it: its cluster-wide objects carry its namespace.
        self.helm(&[
            "install",
            RELEASE,
            CHART,
            "--namespace",
            &self.second_namespace,
            "--create-namespace",
            "--set",
            "scope=Namespace",
            "--set",
            "crds.install=false",
            "--set",
            "policy.enabled=true",
        ])
        .context("a second namespaced release cannot be installed beside the first")?;
        self.helm(&["uninstall", RELEASE, "--namespace", &self.second_namespace])?;
        eprintln!("ok a second namespaced release installs beside the first");
        let controller = self.start_from(&deployment, &kubeconfig, "helm-upgrade")?;
        self.apply(&pods_driver_agent(release_ns, "v1"))?;
        self.wait_phase(release_ns, "successful", Duration::from_secs(300))?;
        let service_account = format!("--as=system:serviceaccount:{release_ns}:{RELEASE}");
        let may = |namespace: &str| -> Result<bool> {
            let answer = self.cluster.kubectl(&[
                "auth",
                "can-i",
                "patch",
                "daemonsets",
                "-n",
                namespace,
                &service_account,
            ]);
            Ok(answer.is_ok_and(|text| text.trim() == "yes"))
        };
        ensure!(
            may(release_ns)?,
            "the namespaced controller may not patch DaemonSets in {release_ns}"
        );
        ensure!(
            !may(workload_ns)?,
            "the namespaced controller may still patch DaemonSets in {workload_ns}"
        );
        // The CanaryDaemonSet left in the other namespace is no longer the controller's.
        let before = self.get(&["cds", AGENT, "-n", workload_ns])?;
        self.apply(&pods_driver_agent(workload_ns, "v3"))?;
        std::thread::sleep(Duration::from_secs(10));
        let after = self.get(&["cds", AGENT, "-n", workload_ns])?;
        ensure!(
            after["status"]["observedGeneration"] == before["status"]["observedGeneration"],
            "the namespaced controller acted on {workload_ns}/{AGENT}: {}",
            after["status"]
        );
        eprintln!(
            "ok scope=Namespace: rolled out in {release_ns}, may not and did not act in {workload_ns}"
        );
        drop(controller);

        self.helm(&["uninstall", RELEASE, "--namespace", release_ns])?;
        let crd = self
            .get(&["crd", CRD])
            .context("helm uninstall deleted the CRD")?;
        ensure!(
            crd["metadata"]["deletionTimestamp"].is_null(),
            "helm uninstall is deleting the CRD"
        );
        self.get(&["cds", AGENT, "-n", workload_ns])
            .context("a CanaryDaemonSet is gone after helm uninstall")?;
        self.get(&["daemonset", AGENT, "-n", workload_ns])
            .context("a DaemonSet is gone after helm uninstall")?;
        eprintln!("ok helm uninstall kept the CRD, the CanaryDaemonSets and their DaemonSets");
        self.take_over_a_kustomize_install()
    }

    /// deploy/default applied with kustomize, then taken over by a Helm release as
    /// docs/operations.md says ("From kustomize to Helm"): nothing is replaced, and the
    /// Deployment keeps its ReplicaSet (no pod is restarted).
    fn take_over_a_kustomize_install(&self) -> Result<()> {
        let built = self.kubectl(&["kustomize", "deploy/default"])?;
        let objects: Vec<Value> =
            serde_saphyr::from_multiple(&built).context("kubectl kustomize printed no YAML")?;
        for object in &objects {
            self.apply(object)?;
        }
        self.cluster.wait_crd_established(CRD)?;
        // What a takeover must keep: each object's UID (not replaced), and the Deployment's
        // revision (its ReplicaSet: no pod replaced). Not the Deployment's generation, which
        // any change of its annotations raises.
        let identity = |kind: &str, name: &str| -> Result<(Value, Value)> {
            let object = self.get(&[kind, name, "-n", KUSTOMIZE_NAMESPACE])?;
            Ok((
                object["metadata"]["uid"].clone(),
                object["metadata"]["annotations"]["deployment.kubernetes.io/revision"].clone(),
            ))
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while identity("deployment", RELEASE)?.1.is_null() {
            ensure!(
                Instant::now() < deadline,
                "the kustomize Deployment has no revision after 60 s"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        let watched = [
            ("deployment", RELEASE),
            ("crd", CRD),
            ("clusterrole", RELEASE),
            ("serviceaccount", RELEASE),
        ];
        let before: Vec<(Value, Value)> = watched
            .iter()
            .map(|(kind, name)| identity(kind, name))
            .collect::<Result<_>>()?;
        // As docs/operations.md says: every object of the build, the Namespace too.
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string();
        let release = format!("meta.helm.sh/release-name={RELEASE}");
        let namespace = format!("meta.helm.sh/release-namespace={KUSTOMIZE_NAMESPACE}");
        self.cluster.kubectl_with_input(
            &[
                "label",
                "-f",
                "-",
                "--overwrite",
                "app.kubernetes.io/managed-by=Helm",
            ],
            &list,
        )?;
        self.cluster.kubectl_with_input(
            &["annotate", "-f", "-", "--overwrite", &release, &namespace],
            &list,
        )?;
        // Helm 4 applies server-side: kubectl's apply owns the fields Helm sets to the same
        // values, and the API server counts an atomic field it defaulted (a fieldRef's
        // apiVersion) as different, so Helm must take them over.
        self.helm(&[
            "install",
            RELEASE,
            CHART,
            "--namespace",
            KUSTOMIZE_NAMESPACE,
            "--force-conflicts",
        ])
        .context("helm install cannot take over deploy/default")?;
        for ((kind, name), was) in watched.iter().zip(&before) {
            let now = identity(kind, name)?;
            ensure!(
                now == *was,
                "{kind} {name} was replaced by the takeover: (uid, revision) {was:?} -> {now:?}"
            );
        }
        eprintln!(
            "ok helm install took deploy/default over: nothing replaced, the Deployment on its first revision"
        );
        self.helm(&["uninstall", RELEASE, "--namespace", KUSTOMIZE_NAMESPACE])?;
        Ok(())
    }

    /// The CRD on the cluster is `daemonset-canary crd`'s, with Helm's keep policy.
    fn check_crd_is_the_generated_one(&self) -> Result<()> {
        let output = Command::new(&self.binary)
            .arg("crd")
            .output()
            .with_context(|| format!("cannot run {} crd", self.binary.display()))?;
        ensure!(output.status.success(), "daemonset-canary crd failed");
        let generated: Value = serde_saphyr::from_str(&String::from_utf8_lossy(&output.stdout))
            .context("daemonset-canary crd printed no YAML")?;
        let served = self.get(&["crd", CRD])?;
        ensure!(
            served["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep",
            "the CRD Helm installed lacks helm.sh/resource-policy: keep"
        );
        // The API server fills in defaults (listKind, conversion), so what the generator sets
        // must be there as it set it.
        ensure!(
            is_within(&generated["spec"], &served["spec"]),
            "the CRD Helm installed differs from `daemonset-canary crd`"
        );
        eprintln!("ok the CRD Helm installed is `daemonset-canary crd`'s, kept on uninstall");
        Ok(())
    }

    /// A kubeconfig with a token of the chart's ServiceAccount.
    fn service_account_kubeconfig(&self) -> Result<PathBuf> {
        let token = self.kubectl(&[
            "create",
            "token",
            RELEASE,
            "-n",
            &self.release_namespace,
            "--duration=2h",
        ])?;
        let path = self.layout.run_dir().join("helm-e2e-controller.kubeconfig");
        self.cluster
            .write_kubeconfig_with_token(token.trim(), &path)?;
        Ok(path)
    }

    /// Starts the binary as `deployment`'s container would run it.
    fn start_from(&self, deployment: &Value, kubeconfig: &Path, name: &str) -> Result<Controller> {
        let namespace = &self.release_namespace;
        let env = container_env(deployment, namespace)?;
        let metrics_port = cluster::free_port()?;
        let mut args = container_args(deployment, &env, metrics_port)?;
        args.extend(["--kubeconfig".to_owned(), kubeconfig.display().to_string()]);
        let log = self
            .layout
            .logs()
            .join(format!("daemonset-canary-{name}.log"));
        eprintln!(
            "==> e2e deploy: daemonset-canary {} (log {})",
            args.join(" "),
            log.display()
        );
        spawn_controller(&self.binary, &args, &env, metrics_port, &log)
    }

    /// Lets both users read and annotate CanaryDaemonSets in `namespace`, so that only the
    /// admission policy tells them apart.
    fn grant_steering(&self, namespace: &str) -> Result<()> {
        let role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "steer-canaries", "namespace": namespace},
            "rules": [{"apiGroups": ["canary.daemonset.dev"], "resources": ["canarydaemonsets"],
                       "verbs": ["get", "list", "watch", "create", "patch", "update"]}]
        });
        let subjects: Vec<Value> = [OUTSIDER.name, ADMIN.name]
            .iter()
            .map(|user| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}))
            .collect();
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "steer-canaries", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "steer-canaries"},
            "subjects": subjects
        });
        self.apply(&role)?;
        self.apply(&binding)?;
        Ok(())
    }

    /// `daemonset-canary promote AGENT --full` as `user`: (exit 0, stdout and stderr).
    fn promote_full(&self, user: &User, namespace: &str) -> Result<(bool, String)> {
        let kubeconfig = self.impersonating_kubeconfig(user)?;
        let output = Command::new(&self.binary)
            .args(["promote", AGENT, "--full", "-n", namespace, "--kubeconfig"])
            .arg(&kubeconfig)
            .output()
            .with_context(|| format!("cannot run {} promote", self.binary.display()))?;
        Ok((
            output.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        ))
    }

    /// The admin kubeconfig with `as` and `as-groups`: kube-rs sends the impersonation headers.
    fn impersonating_kubeconfig(&self, user: &User) -> Result<PathBuf> {
        let text = std::fs::read_to_string(&self.cluster.kubeconfig)
            .with_context(|| format!("cannot read {}", self.cluster.kubeconfig.display()))?;
        let mut config: Value =
            serde_saphyr::from_str(&text).context("the kubeconfig is not YAML")?;
        let Some(users) = config["users"].as_array_mut() else {
            bail!("the kubeconfig has no users");
        };
        for entry in users {
            entry["user"]["as"] = json!(user.name);
            entry["user"]["as-groups"] = json!(user.groups);
        }
        let path = self
            .layout
            .run_dir()
            .join(format!("e2e-{}.kubeconfig", user.name));
        std::fs::write(&path, config.to_string())
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }

    /// Waits until the agent of `namespace` reports `phase` for its current generation.
    fn wait_phase(&self, namespace: &str, phase: &str, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let cds = self.get(&["cds", AGENT, "-n", namespace])?;
            let current = cds["status"]["observedGeneration"] == cds["metadata"]["generation"];
            let now = cds["status"]["phase"].as_str().unwrap_or_default();
            if current && now == phase {
                eprintln!("ok {namespace}/{AGENT} is {phase}");
                return Ok(());
            }
            ensure!(
                !(current && now == "failed"),
                "{namespace}/{AGENT} failed instead of {phase}: {}",
                cds["status"]
            );
            ensure!(
                Instant::now() < deadline,
                "{namespace}/{AGENT} not {phase} after {timeout:?}: {}",
                cds["status"]
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Every node runs a ready pod of the agent at `version`.
    fn ensure_every_pod_on(&self, namespace: &str, version: &str) -> Result<()> {
        let nodes = self.get(&["nodes"])?["items"]
            .as_array()
            .map_or(0, Vec::len);
        let pods = self.get(&[
            "pods",
            "-n",
            namespace,
            "-l",
            &format!("app.kubernetes.io/name={AGENT}"),
        ])?;
        let on_version = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|pod| pod["metadata"]["deletionTimestamp"].is_null())
            .filter(|pod| {
                pod["spec"]["containers"][0]["image"]
                    .as_str()
                    .is_some_and(|image| image.ends_with(&format!(":{version}")))
            })
            .count();
        ensure!(
            on_version == nodes,
            "{on_version} of {nodes} nodes run {AGENT} {version}"
        );
        eprintln!("ok every one of {nodes} nodes runs {AGENT} {version}");
        Ok(())
    }

    /// deploy/policy as shipped: who may skip a rollout's safety.
    fn policy_overlay(&self) -> Result<()> {
        let namespace = &self.policy_namespace;
        let built = self.kubectl(&["kustomize", POLICY_OVERLAY])?;
        let objects: Vec<Value> =
            serde_saphyr::from_multiple(&built).context("kubectl kustomize printed no YAML")?;
        ensure!(
            objects.len() == 2,
            "{POLICY_OVERLAY} builds {} objects, not a policy and its binding",
            objects.len()
        );
        for object in &objects {
            self.apply(object)?;
        }
        // The CRD is there (kept by the chart's uninstall); install it if this runs alone.
        if self.kubectl(&["get", "crd", CRD]).is_err() {
            crate::e2e::install_crd(self.cluster, &self.binary)?;
        }
        self.kubectl(&["create", "namespace", namespace])?;
        self.grant_steering(namespace)?;
        self.apply(&pods_driver_agent(namespace, "v1"))?;

        let annotate = |user: Option<&User>, annotation: &str| -> Result<String> {
            let mut args = vec![
                "annotate".to_owned(),
                "cds".to_owned(),
                AGENT.to_owned(),
                "-n".to_owned(),
                namespace.clone(),
                "--overwrite".to_owned(),
                annotation.to_owned(),
            ];
            if let Some(user) = user {
                args.push(format!("--as={}", user.name));
                args.extend(user.groups.iter().map(|g| format!("--as-group={g}")));
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            self.kubectl(&args)
        };
        // The API server loads a new policy within a moment: until the first refusal, undo what
        // got through and try again.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match annotate(Some(&OUTSIDER), "canary.daemonset.dev/promote=full@1") {
                Err(error) => {
                    let text = format!("{error:#}");
                    ensure!(
                        text.contains(&format!("only members of {ADMINS}"))
                            && text.contains("mallory"),
                        "the refusal does not name the group and the user: {text}"
                    );
                    eprintln!("ok refused: {}", last_line(&text));
                    break;
                }
                Ok(_) => {
                    annotate(None, "canary.daemonset.dev/promote-")?;
                    ensure!(
                        Instant::now() < deadline,
                        "{POLICY_OVERLAY} refuses nothing after 60 s"
                    );
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }
        let cases: &[(Option<&User>, &str, bool, &str)] = &[
            (
                Some(&OUTSIDER),
                "canary.daemonset.dev/promote=1",
                true,
                "a plain promote (ends one pause) by anyone",
            ),
            (
                Some(&OUTSIDER),
                "canary.daemonset.dev/abort=1",
                false,
                "abort outside the group",
            ),
            (
                Some(&OUTSIDER),
                "canary.daemonset.dev/undo=1@1",
                false,
                "undo outside the group",
            ),
            (
                None,
                "canary.daemonset.dev/promote=full@2",
                false,
                "promote --full by a cluster admin outside the group",
            ),
            (
                Some(&ADMIN),
                "canary.daemonset.dev/promote=full@3",
                true,
                "promote --full inside the group",
            ),
            (
                Some(&ADMIN),
                "canary.daemonset.dev/abort=3",
                true,
                "abort inside the group",
            ),
            (
                Some(&OUTSIDER),
                "canary.daemonset.dev/paused=true",
                true,
                "another annotation, the overrides left as they were",
            ),
            (
                Some(&OUTSIDER),
                "canary.daemonset.dev/abort-",
                true,
                "removing an override",
            ),
        ];
        for (user, annotation, allowed, what) in cases {
            let who = user.map_or("the cluster admin", |u| u.name);
            match (annotate(*user, annotation), allowed) {
                (Ok(_), true) => eprintln!("ok allowed: {what} ({who}: {annotation})"),
                (Err(error), false) if format!("{error:#}").contains("only members of") => {
                    eprintln!("ok refused: {what} ({who}: {annotation})");
                }
                (Ok(_), false) => bail!("{POLICY_OVERLAY} allowed {what} ({who}: {annotation})"),
                (Err(error), _) => bail!("{what} ({who}: {annotation}): {error:#}"),
            }
        }
        // A CanaryDaemonSet created with an override is refused like an update.
        let mut aborting = pods_driver_agent(namespace, "v1");
        aborting["metadata"]["name"] = json!("created-aborting");
        aborting["metadata"]["annotations"] = json!({"canary.daemonset.dev/abort": "1"});
        let created = self.cluster.kubectl_with_input(
            &["create", "-f", "-", &format!("--as={}", OUTSIDER.name)],
            &aborting.to_string(),
        );
        ensure!(
            created
                .as_ref()
                .is_err_and(|e| format!("{e:#}").contains("only members of")),
            "{POLICY_OVERLAY} allowed creating a CanaryDaemonSet with abort set: {created:?}"
        );
        eprintln!("ok refused: a CanaryDaemonSet created with abort set, outside the group");
        Ok(())
    }

    /// Deletes what the suite created; reports, never fails.
    fn clean_up(&self) {
        let _ = self.helm(&[
            "uninstall",
            RELEASE,
            "--namespace",
            &self.release_namespace,
            "--ignore-not-found",
        ]);
        let _ = self.helm(&[
            "uninstall",
            RELEASE,
            "--namespace",
            KUSTOMIZE_NAMESPACE,
            "--ignore-not-found",
        ]);
        for namespace in [
            &self.release_namespace,
            &self.workload_namespace,
            &self.policy_namespace,
            &self.second_namespace,
        ] {
            let _ = self.kubectl(&[
                "delete",
                "namespace",
                namespace,
                "--ignore-not-found",
                "--wait=false",
            ]);
        }
        let _ = self.kubectl(&["delete", "-k", POLICY_OVERLAY, "--ignore-not-found"]);
        let _ = self.kubectl(&["delete", "crd", CRD, "--ignore-not-found", "--wait=false"]);
    }
}

/// A Pods-driver agent at `version`: one canary node, a pause until promoted, then every node.
fn pods_driver_agent(namespace: &str, version: &str) -> Value {
    let labels = json!({"app.kubernetes.io/name": AGENT});
    json!({
        "apiVersion": "canary.daemonset.dev/v1alpha1",
        "kind": "CanaryDaemonSet",
        "metadata": {"name": AGENT, "namespace": namespace},
        "spec": {
            "target": {"version": version, "registry": "registry.example"},
            "strategy": {
                "driver": "Pods",
                "steps": [{"nodes": "1"}, {"pause": {}}, {"nodes": "100%"}]
            },
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "tolerations": [{"operator": "Exists"}],
                            "containers": [{"name": AGENT, "image": format!("registry.example/node-agent:{version}")}]
                        }
                    }
                }
            }
        }
    })
}

/// The Deployment's only container.
fn container(deployment: &Value) -> Result<&Value> {
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .context("the Deployment has no containers")?;
    match containers.as_slice() {
        [one] => Ok(one),
        _ => bail!(
            "the Deployment has {} containers, expected one",
            containers.len()
        ),
    }
}

/// The container's environment as the kubelet makes it: values as they are, the pod's name
/// and namespace for their fieldRefs.
fn container_env(deployment: &Value, namespace: &str) -> Result<Vec<(String, String)>> {
    let mut env = Vec::new();
    for variable in container(deployment)?["env"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = variable["name"]
            .as_str()
            .context("an env entry without a name")?;
        let value = if let Some(value) = variable["value"].as_str() {
            value.to_owned()
        } else {
            match variable
                .pointer("/valueFrom/fieldRef/fieldPath")
                .and_then(Value::as_str)
            {
                Some("metadata.name") => POD_NAME.to_owned(),
                Some("metadata.namespace") => namespace.to_owned(),
                _ => bail!(
                    "env {name}: {} is not emulated out of the cluster",
                    variable
                ),
            }
        };
        env.push((name.to_owned(), value));
    }
    Ok(env)
}

/// The container's arguments with `$(VAR)` expanded from `env` (as the kubelet does) and the
/// metrics address moved to `127.0.0.1:metrics_port`. The image's entrypoint is the binary, so
/// a `command` would be a Deployment this stand-in cannot run.
fn container_args(
    deployment: &Value,
    env: &[(String, String)],
    metrics_port: u16,
) -> Result<Vec<String>> {
    let container = container(deployment)?;
    ensure!(
        container["command"].is_null(),
        "the container overrides the image's entrypoint"
    );
    let mut moved = false;
    let mut args = Vec::new();
    for arg in container["args"].as_array().into_iter().flatten() {
        let arg = arg.as_str().context("a non-string argument")?;
        if arg.starts_with("--metrics-addr=") {
            moved = true;
            args.push(format!("--metrics-addr=127.0.0.1:{metrics_port}"));
            continue;
        }
        let mut expanded = arg.to_owned();
        for (name, value) in env {
            expanded = expanded.replace(&format!("$({name})"), value);
        }
        args.push(expanded);
    }
    ensure!(moved, "the container has no --metrics-addr argument");
    Ok(args)
}

/// The Deployment's arguments include every one of `present` and none of `absent`.
fn ensure_args(deployment: &Value, present: &[&str], absent: &[&str]) -> Result<()> {
    let args: Vec<&str> = container(deployment)?["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for wanted in present {
        ensure!(
            args.contains(wanted),
            "the Deployment's arguments lack {wanted}: {args:?}"
        );
    }
    for unwanted in absent {
        ensure!(
            !args.contains(unwanted),
            "the Deployment's arguments have {unwanted}: {args:?}"
        );
    }
    Ok(())
}

/// Whether every field of `part` is in `whole` with the same value (lists element by element,
/// numbers by value).
fn is_within(part: &Value, whole: &Value) -> bool {
    match (part, whole) {
        (Value::Object(fields), Value::Object(all)) => fields
            .iter()
            .all(|(key, value)| all.get(key).is_some_and(|other| is_within(value, other))),
        (Value::Array(items), Value::Array(all)) => {
            items.len() == all.len() && items.iter().zip(all).all(|(a, b)| is_within(a, b))
        }
        // `maximum: 100.0` in the generated YAML comes back as `100` in the API server's JSON.
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => part == whole,
    }
}

fn last_line(text: &str) -> &str {
    text.trim().lines().last().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(args: Value, env: Value) -> Value {
        json!({"spec": {"template": {"spec": {"containers": [{"name": "manager", "args": args, "env": env}]}}}})
    }

    #[test]
    fn the_container_runs_as_the_kubelet_would_start_it() {
        let deployment = deployment(
            json!([
                "run",
                "--metrics-addr=0.0.0.0:8080",
                "--lease-namespace=$(POD_NAMESPACE)",
                "--x=$(UNSET)"
            ]),
            json!([
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "CANARY_ALLOW_ANALYSIS_ADDRESS", "value": "http://p:9090/"},
            ]),
        );
        let env = container_env(&deployment, "ns").unwrap();
        assert_eq!(
            env,
            [
                ("POD_NAME".to_owned(), POD_NAME.to_owned()),
                ("POD_NAMESPACE".to_owned(), "ns".to_owned()),
                (
                    "CANARY_ALLOW_ANALYSIS_ADDRESS".to_owned(),
                    "http://p:9090/".to_owned()
                ),
            ]
        );
        let args = container_args(&deployment, &env, 4242).unwrap();
        assert_eq!(
            args,
            [
                "run",
                "--metrics-addr=127.0.0.1:4242",
                "--lease-namespace=ns",
                "--x=$(UNSET)"
            ]
        );
    }

    #[test]
    fn a_served_object_may_add_defaults_but_not_change_a_field() {
        let generated =
            json!({"names": {"kind": "K", "plural": "ks"}, "versions": [{"name": "v1"}]});
        let served = json!({"names": {"kind": "K", "plural": "ks", "listKind": "KList"},
            "versions": [{"name": "v1", "storage": true}], "conversion": {"strategy": "None"}});
        assert!(is_within(&generated, &served));
        assert!(!is_within(&served, &generated));
        let changed = json!({"names": {"kind": "K", "plural": "kz"}, "versions": [{"name": "v1"}]});
        assert!(!is_within(&changed, &served));
        assert!(is_within(
            &json!({"maximum": 100.0}),
            &json!({"maximum": 100})
        ));
        assert!(!is_within(
            &json!({"maximum": 100.5}),
            &json!({"maximum": 100})
        ));
    }

    #[test]
    fn what_cannot_run_out_of_the_cluster_is_refused() {
        let secret = deployment(
            json!(["--metrics-addr=:1"]),
            json!([{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
        );
        assert!(container_env(&secret, "ns").is_err());
        let no_metrics = deployment(json!(["run"]), json!([]));
        assert!(container_args(&no_metrics, &[], 1).is_err());
        assert!(ensure_args(&no_metrics, &["run"], &["--leader-election"]).is_ok());
        assert!(ensure_args(&no_metrics, &["--leader-election"], &[]).is_err());
    }
}
