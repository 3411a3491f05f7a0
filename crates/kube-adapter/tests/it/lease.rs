//! Leader election against canary-sim on tokio's paused clock: one test per rule of the
//! `coordination.k8s.io/v1` protocol as `canary_kube_adapter::lease::rules` lists them, plus the
//! write guard. Time is virtual, so a takeover after a 15 s lease takes no real time.

use std::sync::atomic::Ordering;
use std::time::Duration;

use canary_kube_adapter::clock::Clock;
use canary_kube_adapter::controller::LeaderElection;
use canary_kube_adapter::lease::{self, Elector, Leadership};
use canary_sim::Sim;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::support::{NS, killable_client};

const LEASE: &str = "daemonset-canary";
/// The default timing: 15 s lease, renew deadline 10 s, a retry every 2.5 s.
const DURATION: Duration = Duration::from_secs(15);
const RENEW_DEADLINE: Duration = Duration::from_secs(10);
const RETRY: Duration = Duration::from_millis(2500);

fn sim() -> Sim {
    Sim::builder().nodes(0).build().unwrap()
}

fn clock(sim: &Sim) -> Clock {
    let clock = sim.store().clock().clone();
    Clock::from_fn(move || clock.now())
}

/// One candidate campaigning through `client` until stopped.
struct Candidate {
    leadership: Leadership,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Candidate {
    fn start(sim: &Sim, client: Client, identity: &str) -> Self {
        let election = LeaderElection::new(NS, identity);
        let leadership = Leadership::new(clock(sim));
        let elector = Elector::new(&client, &election, clock(sim));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(elector.campaign(leadership.clone(), async move {
            let _ = stopped.await;
        }));
        Self {
            leadership,
            stop: Some(stop),
            task,
        }
    }

    fn leads(&self) -> bool {
        *self.leadership.subscribe().borrow() && self.leadership.may_write()
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .unwrap()
            .unwrap();
    }
}

fn lease(sim: &Sim) -> Option<Lease> {
    sim.store().get::<Lease>(Some(NS), LEASE)
}

fn holder(sim: &Sim) -> Option<String> {
    lease(sim)?.spec?.holder_identity.filter(|h| !h.is_empty())
}

fn now(sim: &Sim) -> Timestamp {
    clock(sim).now()
}

/// Candidate `a` started on its own connection, once it leads.
async fn a_leading(sim: &Sim) -> Candidate {
    let a = Candidate::start(sim, sim.client(), "a");
    wait_for(Duration::from_secs(5), "a leading", || a.leads()).await;
    a
}

/// Steps virtual time by 100 ms until `check` holds, at most `limit`; the virtual time it took.
async fn wait_for(limit: Duration, what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let start = tokio::time::Instant::now();
    while start.elapsed() < limit {
        if check() {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out after {limit:?} (virtual) waiting for {what}");
}

#[tokio::test(start_paused = true)]
async fn rule_1_a_missing_lease_is_created_and_led() {
    let sim = sim();
    assert!(lease(&sim).is_none());
    let a = a_leading(&sim).await;
    let spec = lease(&sim).and_then(|l| l.spec).unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(spec.lease_transitions, Some(0));
    assert_eq!(spec.lease_duration_seconds, Some(15));
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn rule_2_the_leader_renews_only_the_renew_time() {
    let sim = sim();
    let a = a_leading(&sim).await;
    let first = lease(&sim).and_then(|l| l.spec).unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let later = lease(&sim).and_then(|l| l.spec).unwrap();
    assert!(a.leads(), "a renewed for a minute");
    assert_eq!(later.acquire_time, first.acquire_time);
    assert_eq!(later.lease_transitions, Some(0));
    let renewed = later.renew_time.unwrap().0;
    assert!(
        now(&sim).duration_since(renewed).unsigned_abs() <= RETRY,
        "renewed within a retry period: {renewed} at {}",
        now(&sim)
    );
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn rule_3_a_renewed_lease_is_never_taken() {
    let sim = sim();
    let a = a_leading(&sim).await;
    let b = Candidate::start(&sim, sim.client(), "b");
    for _ in 0..1200 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!b.leads(), "b took a lease a keeps renewing");
        assert_eq!(holder(&sim).as_deref(), Some("a"));
    }
    b.stop().await;
    a.stop().await;
}

/// Rules 4 and 7 together: a leader cut off stops writing at its renew deadline; the standby
/// takes over a lease duration after the last renewal it saw, later than that.
#[tokio::test(start_paused = true)]
async fn rules_4_and_7_a_cut_off_leader_stops_before_the_standby_takes_over() {
    let sim = sim();
    let (connection, alive) = killable_client(&sim);
    let a = Candidate::start(&sim, connection, "a");
    wait_for(Duration::from_secs(5), "a leading", || a.leads()).await;
    let b = Candidate::start(&sim, sim.client(), "b");
    tokio::time::sleep(Duration::from_secs(7)).await;

    alive.store(false, Ordering::Release);
    let cut = now(&sim);
    let last_renewal = lease(&sim)
        .and_then(|l| l.spec?.renew_time)
        .map(|t| t.0)
        .unwrap();
    let mut a_stopped = None;
    let mut b_took_over = None;
    while b_took_over.is_none() {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            now(&sim).duration_since(cut).unsigned_abs() < Duration::from_secs(40),
            "no takeover 40 s after the cut"
        );
        assert!(!(a.leads() && b.leads()), "both lead");
        if a_stopped.is_none() && !a.leadership.may_write() {
            a_stopped = Some(now(&sim));
        }
        if b.leads() {
            b_took_over = Some(now(&sim));
        }
    }
    let (a_stopped, b_took_over) = (a_stopped.unwrap(), b_took_over.unwrap());
    let since_renewal = |t: Timestamp| t.duration_since(last_renewal).unsigned_abs();
    assert!(
        since_renewal(a_stopped) <= RENEW_DEADLINE,
        "a stopped writing {:?} after its last renewal",
        since_renewal(a_stopped)
    );
    assert!(
        since_renewal(b_took_over) >= DURATION,
        "b took over {:?} after the last renewal, before the lease ran out",
        since_renewal(b_took_over)
    );
    assert!(
        since_renewal(b_took_over) <= DURATION + 2 * RETRY,
        "b took over late: {:?}",
        since_renewal(b_took_over)
    );
    let spec = lease(&sim).and_then(|l| l.spec).unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
    assert_eq!(
        spec.acquire_time.map(|t| t.0 >= b_took_over - DURATION),
        Some(true)
    );
    assert!(!*a.leadership.subscribe().borrow(), "a stepped down");

    // Rule 8's other half: a comes back, sees b, and its stop writes nothing.
    alive.store(true, Ordering::Release);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!a.leads(), "a, back, does not lead over b");
    a.stop().await;
    assert_eq!(holder(&sim).as_deref(), Some("b"));
    assert!(b.leads());
    // b's renewals move the version; a's stop may not have written in between.
    let spec = lease(&sim).and_then(|l| l.spec).unwrap();
    assert_eq!(spec.lease_transitions, Some(1), "a's stop released nothing");
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn rules_5_and_8_a_clean_stop_releases_and_the_standby_takes_it_at_once() {
    let sim = sim();
    let a = a_leading(&sim).await;
    let b = Candidate::start(&sim, sim.client(), "b");
    tokio::time::sleep(Duration::from_secs(5)).await;
    a.stop().await;
    let released = lease(&sim).and_then(|l| l.spec).unwrap();
    assert!(
        released
            .holder_identity
            .as_deref()
            .is_none_or(str::is_empty)
            || released.holder_identity.as_deref() == Some("b"),
        "a released: {released:?}"
    );
    let took = wait_for(DURATION, "b leading", || b.leads()).await;
    assert!(
        took <= RETRY + Duration::from_millis(200),
        "b took a released lease in {took:?}, not at its next attempt"
    );
    assert_eq!(lease(&sim).and_then(|l| l.spec?.lease_transitions), Some(1));
    b.stop().await;
}

/// Rule 6: candidates acting on one observation race with the resourceVersion read; the
/// loser gets 409. Here every takeover is slowed so that both read the released Lease before
/// either write lands.
#[tokio::test(start_paused = true)]
async fn rule_6_candidates_racing_for_one_lease_never_both_lead() {
    let sim = sim();
    sim.faults().add(canary_sim::FaultRule::new(
        Some(canary_sim::Verb::Update),
        Some("leases"),
        canary_sim::FaultAction::Latency(Duration::from_millis(300)),
    ));
    sim.faults().add(canary_sim::FaultRule::new(
        Some(canary_sim::Verb::Create),
        Some("leases"),
        canary_sim::FaultAction::Latency(Duration::from_millis(300)),
    ));
    let candidates: Vec<Candidate> = ["a", "b", "c"]
        .iter()
        .map(|identity| Candidate::start(&sim, sim.client(), identity))
        .collect();
    let mut leaders_seen = std::collections::BTreeSet::new();
    for round in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let leading: Vec<usize> = (0..candidates.len())
            .filter(|i| candidates[*i].leads())
            .collect();
        assert!(
            leading.len() <= 1,
            "round {round}: {leading:?} lead at once"
        );
        leaders_seen.extend(leading);
    }
    assert_eq!(leaders_seen.len(), 1, "one leader, kept: {leaders_seen:?}");
    for candidate in candidates {
        candidate.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_guard_refuses_writes_unless_leading_and_lets_reads_and_leases_through() {
    let sim = sim();
    let leadership = Leadership::new(clock(&sim));
    let client = lease::guarded(sim.client(), leadership.clone());
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), NS);
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some("x".to_owned()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    let refused = config_maps
        .create(&PostParams::default(), &config_map)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("leader lease")
            || format!("{refused:?}").contains("NotLeading"),
        "{refused}"
    );
    assert!(
        config_maps.get_opt("x").await.unwrap().is_none(),
        "reads pass"
    );

    // The campaign writes the Lease through the same guard, and then writes pass.
    let elector = Elector::new(&client, &LeaderElection::new(NS, "a"), clock(&sim));
    let (stop, stopped) = oneshot::channel::<()>();
    let campaign = tokio::spawn(elector.campaign(leadership.clone(), async move {
        let _ = stopped.await;
    }));
    wait_for(Duration::from_secs(5), "leading", || leadership.may_write()).await;
    config_maps
        .create(&PostParams::default(), &config_map)
        .await
        .unwrap();
    let _ = stop.send(());
    campaign.await.unwrap();
    assert!(!leadership.may_write(), "not leading after the stop");
    let refused = config_maps.delete("x", &Default::default()).await;
    assert!(refused.is_err(), "a write after the stop is refused");
}

/// A frozen leader: its requests hang (not fail) from one moment on. Its writes stop at the
/// deadline although no answer ever says so, and a write its controller tries after waking
/// is refused by the guard.
#[tokio::test(start_paused = true)]
async fn a_frozen_leader_writes_nothing_when_it_wakes() {
    let sim = sim();
    let (connection, alive) = killable_client(&sim);
    let leadership = Leadership::new(clock(&sim));
    let client = lease::guarded(connection, leadership.clone());
    let elector = Elector::new(&client, &LeaderElection::new(NS, "a"), clock(&sim));
    let (stop, stopped) = oneshot::channel::<()>();
    let campaign = tokio::spawn(elector.campaign(leadership.clone(), async move {
        let _ = stopped.await;
    }));
    wait_for(Duration::from_secs(5), "leading", || leadership.may_write()).await;
    let b = Candidate::start(&sim, sim.client(), "b");
    alive.store(false, Ordering::Release);
    wait_for(Duration::from_secs(60), "b leading", || b.leads()).await;
    assert!(!leadership.may_write());
    assert!(
        !*leadership.subscribe().borrow(),
        "a stepped down without an answer"
    );
    alive.store(true, Ordering::Release);
    let written = Api::<ConfigMap>::namespaced(client, NS)
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("late".to_owned()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            },
        )
        .await;
    assert!(written.is_err(), "the woken leader's write was sent");
    assert!(sim.store().get::<ConfigMap>(Some(NS), "late").is_none());
    let _ = stop.send(());
    campaign.await.unwrap();
    assert_eq!(holder(&sim).as_deref(), Some("b"));
    b.stop().await;
}
