//! The simulator's `PATCH` bodies: RFC 6902 JSON Patch, RFC 7386 merge patch, strategic merge
//! patch and the server-side apply body (YAML or JSON).

use canary_sim::api::patch::{
    apply_json_patch, apply_merge_patch, apply_strategic_merge, parse_apply_body,
};
use serde_json::Value;

/// Fuzz target `sim_patch`: the first byte selects the patch type, the rest is the target
/// document and the patch (split at the first NUL byte; without one the same bytes are both).
/// Checked: a JSON Patch that fails leaves the document unchanged (the API server answers 422
/// and stores nothing); a merge patch applied twice equals once (RFC 7386); a strategic merge
/// patch without lists and `$` directives gives what a merge patch gives (Kubernetes merges
/// maps the same way and drops the nulls of a value it adds); an apply body that is JSON
/// parses as that JSON.
pub fn sim_patch(data: &[u8]) {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let (target_bytes, patch_bytes) = crate::two_parts(rest);
    if kind % 4 == 3 {
        let parsed = parse_apply_body(patch_bytes);
        if let Ok(json) = serde_json::from_slice::<Value>(patch_bytes) {
            assert_eq!(parsed.ok(), Some(json));
        }
        return;
    }
    let Ok(target) = serde_json::from_slice::<Value>(target_bytes) else {
        return;
    };
    match kind % 4 {
        0 => {
            let mut document = target.clone();
            if apply_json_patch(&mut document, patch_bytes).is_err() {
                assert_eq!(document, target, "a failed JSON Patch changes nothing");
            }
        }
        1 => {
            let Ok(patch) = serde_json::from_slice::<Value>(patch_bytes) else {
                return;
            };
            let mut once = target.clone();
            apply_merge_patch(&mut once, &patch);
            let mut twice = once.clone();
            apply_merge_patch(&mut twice, &patch);
            assert_eq!(twice, once, "a merge patch is idempotent");
        }
        _ => {
            let Ok(patch) = serde_json::from_slice::<Value>(patch_bytes) else {
                return;
            };
            let mut strategic = target.clone();
            let result = apply_strategic_merge(&mut strategic, &patch);
            if result.is_ok() && patch.is_object() && plain(&patch) {
                let mut merged = target.clone();
                apply_merge_patch(&mut merged, &patch);
                assert_eq!(
                    strategic, merged,
                    "a plain strategic patch is a merge patch"
                );
            }
        }
    }
}

/// No list and no `$` directive anywhere: a patch whose strategic and merge readings agree.
fn plain(value: &Value) -> bool {
    match value {
        Value::Array(_) => false,
        Value::Object(map) => map.iter().all(|(k, v)| !k.starts_with('$') && plain(v)),
        _ => true,
    }
}
