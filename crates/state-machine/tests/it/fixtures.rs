//! Real DaemonSets from `testdata/daemonsets/` through the sync gate and the decision table.
//!
//! This crate has no YAML dependency on purpose, so the few scalar fields it needs are read with
//! a line scanner (`key: value`, first occurrence, indentation ignored). That is enough for these
//! files; the structured parsing of the same fixtures is tested in `canary-predicates`.

use std::path::PathBuf;

use canary_state_machine::{LiveMaxUnavailable, Observation, Phase, Strategy, SyncFlags, decide};

fn fixture(name: &str) -> String {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "..",
        "testdata",
        "daemonsets",
        name,
    ]
    .iter()
    .collect();
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn scalar<'a>(yaml: &'a str, key: &str) -> Option<&'a str> {
    let prefix = format!("{key}:");
    yaml.lines()
        .map(str::trim)
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .map(|value| value.trim().trim_matches(|c| c == '"' || c == '\''))
}

/// What the live object's `spec.updateStrategy` says, as the adapter reports it.
fn live_max_unavailable(yaml: &str) -> LiveMaxUnavailable {
    if scalar(yaml, "rollingUpdate").is_none() {
        // A manifest without the block; the reference reads an absent rollingUpdate as 0.
        return LiveMaxUnavailable::NoRollingUpdate;
    }
    match scalar(yaml, "maxUnavailable") {
        None => LiveMaxUnavailable::Unset,
        Some(value) => match value.parse::<i64>() {
            Ok(count) => LiveMaxUnavailable::Int(count),
            Err(_) => LiveMaxUnavailable::Str(value.to_owned()),
        },
    }
}

fn count(yaml: &str, key: &str) -> u32 {
    scalar(yaml, key).map_or(0, |value| value.parse().unwrap())
}

#[test]
fn scanned_values_match_the_fixture_readme() {
    assert_eq!(
        live_max_unavailable(&fixture("node-exporter.yaml")),
        LiveMaxUnavailable::Str("10%".into())
    );
    assert_eq!(
        live_max_unavailable(&fixture("longhorn-manager-live-unavailable.yaml")),
        LiveMaxUnavailable::Str("100%".into())
    );
    for name in [
        "nvidia-device-plugin.yaml",
        "kube-flannel-ds.yaml",
        "fluentd-elasticsearch.yaml",
    ] {
        assert_eq!(
            live_max_unavailable(&fixture(name)),
            LiveMaxUnavailable::NoRollingUpdate,
            "{name}"
        );
    }
}

#[test]
fn percent_fixtures_look_like_an_ongoing_rollout_in_both_modes() {
    // Quirk 3 on real values: neither "10%" nor "100%" is the resting value 1, so adopting these
    // DaemonSets as they are enters the canary flow (the next write brings them to rest).
    for name in [
        "node-exporter.yaml",
        "longhorn-manager-live-unavailable.yaml",
    ] {
        let observation = Observation {
            live_max_unavailable: live_max_unavailable(&fixture(name)),
            ..Observation::default()
        };
        for strategy in [Strategy::kubevirt(), Strategy::default()] {
            let flags = SyncFlags::of(&strategy, &observation);
            assert!(flags.ongoing_rollout, "{name} {:?}", strategy.compatibility);
        }
        assert_eq!(
            observation.live_max_unavailable.reference_int_value(),
            0,
            "{name}: Go IntValue of a percentage"
        );
    }
}

#[test]
fn manifests_without_rolling_update_enter_the_flow_in_both_modes() {
    // The reference reads a missing rollingUpdate as 0, so ongoing; the default does not match
    // it with the canary value either. Both go into the flow and write the resting value.
    let observation = Observation {
        live_max_unavailable: live_max_unavailable(&fixture("nvidia-device-plugin.yaml")),
        desired_pods: 2,
        updated_pods: 2,
        updated_ready_pods: 2,
        ..Observation::default()
    };
    for strategy in [Strategy::kubevirt(), Strategy::default()] {
        let decision = decide(&strategy, &observation);
        assert!(!decision.action.quiet);
        let write = decision.write.unwrap();
        assert_eq!(write.max_unavailable, Some(strategy.canary_max_unavailable));
    }
}

#[test]
fn longhorn_live_object_in_trouble_waits_in_both_modes() {
    let yaml = fixture("longhorn-manager-live-unavailable.yaml");
    let desired = count(&yaml, "desiredNumberScheduled");
    let updated = count(&yaml, "updatedNumberScheduled");
    let ready = count(&yaml, "numberReady");
    assert_eq!((desired, updated, ready), (3, 3, 2));
    // No metadata.generation and no status.observedGeneration in this object.
    assert_eq!(scalar(&yaml, "generation"), None);
    assert_eq!(scalar(&yaml, "observedGeneration"), None);

    let observation = Observation {
        name: "longhorn-manager".into(),
        generation_known: false,
        desired_pods: desired,
        updated_pods: updated,
        updated_ready_pods: ready,
        live_max_unavailable: live_max_unavailable(&yaml),
        rollout_observed: false,
        ..Observation::default()
    };
    for strategy in [Strategy::kubevirt(), Strategy::default()] {
        let decision = decide(&strategy, &observation);
        assert_eq!(
            decision.phase,
            Phase::Waiting,
            "{:?}",
            strategy.compatibility
        );
        assert_eq!(decision.write, None);
        assert!(!decision.done);
    }
    // With the status trusted, the default strategy still waits: 100% is not the canary value,
    // so it never widens, and 2 of 3 ready is not finished.
    let observed = Observation {
        rollout_observed: true,
        ..observation
    };
    let decision = decide(&Strategy::default(), &observed);
    assert_eq!(decision.phase, Phase::Waiting);
    assert_eq!(decision.write, None);
}
