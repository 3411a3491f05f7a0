//! Encoding /metrics for 100 CanaryDaemonSets: what one Prometheus scrape costs the controller.
//!
//! Each rollout has its six phase series, phase start, pod counts and maxUnavailable; the
//! histograms and counters hold a realistic history (every rollout went through every phase
//! once, reconciles and writes were counted).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::hint::black_box;

use canary_state_machine::Phase;
use criterion::{Criterion, criterion_group, criterion_main};
use daemonset_canary::metrics::{Metrics, Mode, PodCounts, RolloutKey};

const ROLLOUTS: u32 = 100;

fn populated() -> Metrics {
    let metrics = Metrics::new().unwrap();
    for i in 0..ROLLOUTS {
        let key = RolloutKey {
            namespace: format!("team-{}", i % 10),
            name: format!("node-agent-{i}"),
            mode: Mode::Driven,
        };
        let mut previous: Option<&str> = None;
        for (step, phase) in Phase::ALL.map(Phase::as_str).iter().take(5).enumerate() {
            let started = 1_767_225_600.0 + f64::from(i) + 60.0 * step as f64;
            metrics.enter_phase(&key, phase, started, previous.map(|p| (p, 60.0)));
            previous = Some(phase);
        }
        let counts = PodCounts {
            desired: 500,
            updated: 500,
            updated_ready: 500 - i % 3,
        };
        metrics.set_counts(&key, counts, 1);
        metrics.rollout_ended(Mode::Driven, "successful", None, 240.0);
        for purpose in ["start", "widen", "finish"] {
            metrics.daemonset_write(purpose, "ok");
        }
        metrics.reconcile(Mode::Driven, 0.000_4, None);
    }
    metrics
}

fn bench_encode(c: &mut Criterion) {
    let metrics = populated();
    let text = metrics.encode().unwrap();
    // Every rollout must be in the exposition, or the figure is for a smaller scrape.
    let phase_series = text
        .lines()
        .filter(|l| l.starts_with("canary_rollout_phase{"))
        .count();
    assert_eq!(phase_series, Phase::ALL.len() * ROLLOUTS as usize);

    c.bench_function("encode_metrics_100_canary_daemonsets", |b| {
        b.iter(|| black_box(&metrics).encode().unwrap().len())
    });
}

criterion_group!(benches, bench_encode);
criterion_main!(benches);
