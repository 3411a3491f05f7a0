//! ControllerRevisions: one per pod template, named `<daemonset>-<hash>`, as
//! `constructHistory` / `snapshot` / `cleanupHistory` manage them
//! (kubernetes `pkg/controller/daemon/update.go`; the hash is `controller.ComputeHash`
//! in `pkg/controller/controller_utils.go`).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::{Value, json};

use super::ownership::{REVISION_HASH_LABEL, controller_ref};

/// Default `spec.revisionHistoryLimit` (API defaulting in `pkg/apis/apps/v1/defaults.go`).
pub const DEFAULT_REVISION_HISTORY_LIMIT: i32 = 10;

/// `rand.SafeEncodeString`'s alphabet (no vowels, so no words).
const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The stable hash of a pod template, like `controller.ComputeHash`: FNV-1a (32 bit) of
/// the template, then the collision count, encoded with `SafeEncodeString`.
///
/// Kubernetes hashes a `spew` dump of the Go struct; this hashes the canonical JSON
/// (k8s-openapi serializes fields in a fixed order, maps sorted), so hashes are stable
/// for a template but differ from a real cluster's.
pub fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut hasher = Fnv1a32::new();
    hasher.write(&serde_json::to_vec(template).unwrap_or_default());
    if let Some(count) = collision_count {
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&count.to_le_bytes());
        hasher.write(&bytes);
    }
    hasher
        .finish()
        .to_string()
        .bytes()
        .filter_map(|b| SAFE_ALPHABET.get(usize::from(b) % SAFE_ALPHABET.len()))
        .map(|b| char::from(*b))
        .collect()
}

struct Fnv1a32(u32);

impl Fnv1a32 {
    fn new() -> Self {
        Self(0x811c_9dc5)
    }
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u32::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0193);
        }
    }
    fn finish(&self) -> u32 {
        self.0
    }
}

/// The revision payload (`getPatch`): a strategic merge patch replacing `spec.template`.
pub fn revision_data(ds: &DaemonSet) -> Value {
    let template = ds
        .spec
        .as_ref()
        .map(|spec| serde_json::to_value(&spec.template).unwrap_or(Value::Null))
        .unwrap_or(Value::Null);
    let mut template = match template {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    template.insert("$patch".to_owned(), Value::String("replace".to_owned()));
    json!({ "spec": { "template": Value::Object(template) } })
}

/// A new ControllerRevision for the DaemonSet's current template (`snapshot`).
pub fn new_revision(ds: &DaemonSet, hash: &str, revision: i64) -> ControllerRevision {
    let ds_name = ds.metadata.name.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = ds
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(REVISION_HASH_LABEL.to_owned(), hash.to_owned());
    let mut cr = ControllerRevision {
        data: Some(RawExtension(revision_data(ds))),
        revision,
        ..ControllerRevision::default()
    };
    cr.metadata.name = Some(format!("{ds_name}-{hash}"));
    cr.metadata.namespace = ds.metadata.namespace.clone();
    cr.metadata.labels = Some(labels);
    cr.metadata.annotations = ds.metadata.annotations.clone();
    cr.metadata.owner_references = Some(vec![controller_ref(ds)]);
    cr
}

/// What `constructHistory` + `cleanupHistory` do to a DaemonSet's revisions.
#[derive(Debug, Default)]
pub struct HistoryPlan {
    /// The hash of the current template: the value of `controller-revision-hash` on new pods.
    pub hash: String,
    /// A revision to create (no stored revision matches the template).
    pub create: Option<ControllerRevision>,
    /// An existing revision (by name) that must be bumped to a new `.revision` number
    /// (the template was rolled back to it).
    pub bump: Option<(String, i64)>,
    /// Old revisions to delete (beyond `revisionHistoryLimit` and used by no pod).
    pub delete: Vec<String>,
}

/// Plans the revision history of `ds` from the revisions it owns and the hashes its
/// live pods carry. `data` is [`revision_data`] of `ds` (callers cache it).
pub fn plan_history<'a>(
    ds: &DaemonSet,
    data: &Value,
    owned: impl IntoIterator<Item = &'a ControllerRevision>,
    live_hashes: impl IntoIterator<Item = &'a str>,
) -> HistoryPlan {
    let (current, old): (Vec<&ControllerRevision>, Vec<&ControllerRevision>) = owned
        .into_iter()
        .partition(|r| r.data.as_ref().is_some_and(|d| d.0 == *data));
    let next_revision = old.iter().map(|r| r.revision).max().unwrap_or(0) + 1;
    let mut plan = HistoryPlan::default();
    match current.iter().max_by_key(|r| r.revision) {
        Some(cur) => {
            plan.hash = cur
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(REVISION_HASH_LABEL))
                .cloned()
                .unwrap_or_else(|| revision_hash_from_name(ds, cur));
            if cur.revision < next_revision {
                plan.bump = Some((cur.metadata.name.clone().unwrap_or_default(), next_revision));
            }
        }
        None => {
            let collision_count = ds.status.as_ref().and_then(|s| s.collision_count);
            let template = ds
                .spec
                .as_ref()
                .map(|s| s.template.clone())
                .unwrap_or_default();
            plan.hash = template_hash(&template, collision_count);
            plan.create = Some(new_revision(ds, &plan.hash, next_revision));
        }
    }
    let limit = ds
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT)
        .max(0) as usize;
    let live: Vec<&str> = live_hashes.into_iter().collect();
    let mut old = old;
    old.sort_by_key(|r| r.revision);
    let mut to_kill = old.len().saturating_sub(limit);
    for revision in old {
        if to_kill == 0 {
            break;
        }
        let hash = revision
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(REVISION_HASH_LABEL));
        if hash.is_some_and(|h| live.contains(&h.as_str())) {
            continue;
        }
        plan.delete
            .push(revision.metadata.name.clone().unwrap_or_default());
        to_kill -= 1;
    }
    plan
}

fn revision_hash_from_name(ds: &DaemonSet, revision: &ControllerRevision) -> String {
    let prefix = format!("{}-", ds.metadata.name.as_deref().unwrap_or(""));
    let name = revision.metadata.name.as_deref().unwrap_or("");
    name.strip_prefix(&prefix).unwrap_or(name).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn ds(image: &str) -> DaemonSet {
        let mut ds =
            canary_testkit::agent_daemonset("kube-system", "agent", image, IntOrString::Int(1));
        ds.metadata.uid = Some("uid-1".to_owned());
        ds
    }

    fn template(ds: &DaemonSet) -> PodTemplateSpec {
        ds.spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default()
    }

    #[test]
    fn hash_is_stable_per_template_and_changes_with_it() {
        let a = template_hash(&template(&ds("agent:v1")), None);
        assert_eq!(a, template_hash(&template(&ds("agent:v1")), None));
        assert_ne!(a, template_hash(&template(&ds("agent:v2")), None));
        assert_ne!(a, template_hash(&template(&ds("agent:v1")), Some(1)));
        assert!(a.bytes().all(|b| SAFE_ALPHABET.contains(&b)), "{a}");
        assert!(
            (8..=10).contains(&a.len()),
            "a decimal u32, one character per digit: {a}"
        );
    }

    #[test]
    fn first_sync_creates_revision_one_with_the_template_patch() {
        let ds = ds("agent:v1");
        let plan = plan_history(&ds, &revision_data(&ds), [], []);
        let created = plan.create.expect("a revision is created");
        assert_eq!(created.revision, 1);
        assert_eq!(created.metadata.name, Some(format!("agent-{}", plan.hash)));
        assert_eq!(
            created
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(REVISION_HASH_LABEL)),
            Some(&plan.hash)
        );
        let data = created.data.expect("data").0;
        assert_eq!(data["spec"]["template"]["$patch"], "replace");
        assert_eq!(
            data["spec"]["template"]["spec"]["containers"][0]["image"],
            "agent:v1"
        );
        let owner = &created.metadata.owner_references.expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("DaemonSet", Some(true))
        );
    }

    #[test]
    fn template_change_creates_the_next_revision_and_rollback_bumps_the_old_one() {
        let v1 = ds("agent:v1");
        let r1 = plan_history(&v1, &revision_data(&v1), [], [])
            .create
            .expect("r1");
        let v2 = ds("agent:v2");
        let plan2 = plan_history(&v2, &revision_data(&v2), [&r1], []);
        let r2 = plan2.create.expect("r2");
        assert_eq!(r2.revision, 2);
        let back = plan_history(&v1, &revision_data(&v1), [&r1, &r2], []);
        assert!(back.create.is_none());
        assert_eq!(
            back.bump,
            Some((r1.metadata.name.clone().unwrap_or_default(), 3))
        );
        assert_eq!(
            Some(&back.hash),
            r1.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(REVISION_HASH_LABEL))
        );
    }

    #[test]
    fn history_beyond_the_limit_is_deleted_oldest_first_unless_a_pod_uses_it() {
        let mut current = ds("agent:v9");
        if let Some(spec) = current.spec.as_mut() {
            spec.revision_history_limit = Some(1);
        }
        let old: Vec<ControllerRevision> = (1..=3)
            .map(|i| {
                {
                    let d = ds(&format!("agent:v{i}"));
                    plan_history(&d, &revision_data(&d), [], [])
                }
                .create
                .map(|mut r| {
                    r.revision = i;
                    r
                })
                .expect("revision")
            })
            .collect();
        let live_hash = old[0]
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(REVISION_HASH_LABEL))
            .cloned()
            .unwrap_or_default();
        let plan = plan_history(
            &current,
            &revision_data(&current),
            &old,
            [live_hash.as_str()],
        );
        // Three old, keep one: delete two, skipping revision 1 (a pod still runs it).
        assert_eq!(
            plan.delete,
            vec![
                old[1].metadata.name.clone().unwrap_or_default(),
                old[2].metadata.name.clone().unwrap_or_default()
            ]
        );
        assert_eq!(plan.create.map(|r| r.revision), Some(4));
    }
}
