//! Criterion bench of `decide()`: one pass of each kind a rollout goes through.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::hint::black_box;
use std::time::Duration;

use canary_state_machine::{
    CrashLoopSeen, LiveMaxUnavailable, Observation, Phase, PreviousPass, Strategy, decide,
};
use criterion::{Criterion, criterion_group, criterion_main};

fn passes() -> Vec<(&'static str, Observation)> {
    let base = Observation {
        name: "node-agent".into(),
        desired_pods: 1_000,
        live_max_unavailable: LiveMaxUnavailable::Int(1),
        previous: Some(PreviousPass {
            phase: Phase::Canary,
            failure: None,
            updated_ready: 0,
            since_progress: Duration::from_secs(30),
            drifted: false,
        }),
        ..Observation::default()
    };
    let after_start = Observation {
        generation_known: false,
        ..base.clone()
    };
    vec![
        ("quiet", base.clone()),
        (
            "start",
            Observation {
                object_changed: true,
                ..base.clone()
            },
        ),
        (
            "canary",
            Observation {
                updated_pods: 1,
                ..after_start.clone()
            },
        ),
        (
            "widen",
            Observation {
                updated_pods: 1,
                updated_ready_pods: 1,
                ..after_start.clone()
            },
        ),
        (
            "waiting",
            Observation {
                generation_known: true,
                updated_pods: 500,
                updated_ready_pods: 400,
                live_max_unavailable: LiveMaxUnavailable::Str("10%".into()),
                ..after_start.clone()
            },
        ),
        (
            "crash_loop",
            Observation {
                updated_pods: 1,
                crash_loop: Some(CrashLoopSeen {
                    pod: "node-agent-x7k2p".into(),
                    reason: "CrashLoopBackOff".into(),
                }),
                ..after_start.clone()
            },
        ),
        (
            "finish",
            Observation {
                updated_pods: 1_000,
                updated_ready_pods: 1_000,
                live_max_unavailable: LiveMaxUnavailable::Str("10%".into()),
                ..after_start
            },
        ),
    ]
}

fn bench_decide(c: &mut Criterion) {
    for (label, strategy) in [
        ("fixed", Strategy::default()),
        ("kubevirt", Strategy::kubevirt()),
    ] {
        let mut group = c.benchmark_group(format!("decide/{label}"));
        for (pass, observation) in passes() {
            group.bench_function(pass, |b| {
                b.iter(|| decide(black_box(&strategy), black_box(&observation)))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench_decide);
criterion_main!(benches);
