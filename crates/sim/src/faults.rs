//! Injectable API faults and the request counters.
//!
//! A [`FaultRule`] matches requests by verb and resource and, when its [`Trigger`] fires,
//! applies its [`FaultAction`]: an error `Status` (500, 429 with `Retry-After`, 409, ...),
//! added latency, a watch stream that ends early, or `410 Gone` for the next watch that resumes
//! from a `resourceVersion`. Random triggers draw from one RNG seeded by the simulator's seed,
//! so a run is reproducible.
//!
//! Every request the API server answers is counted by verb and resource
//! ([`Faults::requests`]), which is how tests prove that a controller made no writes; the
//! warnings it answers with ([`Faults::warnings`]: a field a custom resource's schema does not
//! declare) are kept, which is how they prove a controller writes only declared fields.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The Kubernetes API verb of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// GET of a collection with `watch=true`.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH (any patch type, including server-side apply).
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
    /// Discovery, `/version`, OpenAPI and unknown paths.
    Discovery,
}

impl Verb {
    /// Whether the verb changes state.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Self::Create | Self::Update | Self::Patch | Self::Delete | Self::DeleteCollection
        )
    }

    /// The lower-case name Kubernetes uses (`get`, `list`, `watch`, `create`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
            Self::DeleteCollection => "deletecollection",
            Self::Discovery => "discovery",
        }
    }
}

/// When a matching rule fires.
#[derive(Clone, Debug, PartialEq)]
pub enum Trigger {
    /// On every matching request.
    Always,
    /// On each matching request with this probability (0.0..=1.0), from the seeded RNG.
    Rate(f64),
    /// Only on the Nth matching request (1-based).
    Nth(u64),
    /// On the first N matching requests.
    FirstN(u64),
}

/// What a fired rule does.
#[derive(Clone, Debug, PartialEq)]
pub enum FaultAction {
    /// Answer with this error instead of serving the request.
    Error {
        /// HTTP status code (500, 429, 409, ...).
        code: u16,
        /// `reason` of the Status body (`InternalError`, `TooManyRequests`, `Conflict`, ...).
        reason: String,
        /// `Retry-After` header, in seconds.
        retry_after_seconds: Option<u64>,
    },
    /// Serve the request after this much (tokio) time.
    Latency(Duration),
    /// Serve the watch, but end the stream after this many events.
    EndWatchAfterEvents(u64),
    /// Serve the watch, but end the stream after this much time.
    EndWatchAfter(Duration),
    /// Answer a watch that resumes from a `resourceVersion` with `410 Gone`.
    GoneOnResume,
}

impl FaultAction {
    /// `500 InternalError`.
    pub fn internal_error() -> Self {
        Self::Error {
            code: 500,
            reason: "InternalError".into(),
            retry_after_seconds: None,
        }
    }

    /// `429 TooManyRequests` with `Retry-After`.
    pub fn too_many_requests(retry_after_seconds: u64) -> Self {
        Self::Error {
            code: 429,
            reason: "TooManyRequests".into(),
            retry_after_seconds: Some(retry_after_seconds),
        }
    }

    /// `409 Conflict`.
    pub fn conflict() -> Self {
        Self::Error {
            code: 409,
            reason: "Conflict".into(),
            retry_after_seconds: None,
        }
    }
}

/// One fault: which requests, when, and what happens.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultRule {
    /// Verb to match (`None`: any).
    pub verb: Option<Verb>,
    /// Resource to match, as `plural` or `plural/subresource` (`daemonsets/status`); `None`: any.
    pub resource: Option<String>,
    /// When it fires.
    pub trigger: Trigger,
    /// What it does.
    pub action: FaultAction,
}

impl FaultRule {
    /// A rule firing on every request of `verb` to `resource`.
    pub fn new(verb: Option<Verb>, resource: Option<&str>, action: FaultAction) -> Self {
        Self {
            verb,
            resource: resource.map(str::to_owned),
            trigger: Trigger::Always,
            action,
        }
    }

    /// The same rule with another trigger.
    pub fn when(mut self, trigger: Trigger) -> Self {
        self.trigger = trigger;
        self
    }

    fn matches(&self, verb: Verb, resource: &str) -> bool {
        self.verb.is_none_or(|v| v == verb)
            && self.resource.as_deref().is_none_or(|r| r == resource)
    }
}

/// The faults that fire for one request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FiredFaults {
    /// Error to answer with, if any.
    pub error: Option<FaultAction>,
    /// Total latency to add.
    pub latency: Duration,
    /// End the watch after this many events.
    pub end_watch_after_events: Option<u64>,
    /// End the watch after this duration.
    pub end_watch_after: Option<Duration>,
    /// Answer a resuming watch with 410 Gone.
    pub gone_on_resume: bool,
}

/// Counts of answered requests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestCounts {
    counts: BTreeMap<(Verb, String), u64>,
}

impl RequestCounts {
    /// Requests with `verb` to `resource` (`plural` or `plural/subresource`).
    pub fn count(&self, verb: Verb, resource: &str) -> u64 {
        self.counts
            .get(&(verb, resource.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// Write requests (create, update, patch, delete) to `resource`, subresources included
    /// (`daemonsets` counts `daemonsets/status` too).
    pub fn writes_to(&self, resource: &str) -> u64 {
        self.counts
            .iter()
            .filter(|((verb, res), _)| {
                verb.is_write()
                    && (res == resource
                        || res
                            .strip_prefix(resource)
                            .is_some_and(|rest| rest.starts_with('/')))
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// All write requests.
    pub fn writes(&self) -> u64 {
        self.counts
            .iter()
            .filter(|((verb, _), _)| verb.is_write())
            .map(|(_, n)| n)
            .sum()
    }

    /// All requests.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// Every (verb, resource, count), sorted.
    pub fn iter(&self) -> impl Iterator<Item = (Verb, &str, u64)> {
        self.counts
            .iter()
            .map(|((verb, resource), n)| (*verb, resource.as_str(), *n))
    }
}

/// One answered request, as kept in the request log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    /// The verb.
    pub verb: Verb,
    /// `plural` or `plural/subresource` (empty for discovery).
    pub resource: String,
    /// Namespace from the path.
    pub namespace: Option<String>,
    /// Object name from the path.
    pub name: Option<String>,
}

/// How many requests the log keeps (the oldest are dropped first).
pub const REQUEST_LOG_CAPACITY: usize = 10_000;

struct RuleState {
    rule: FaultRule,
    matched: u64,
}

struct Inner {
    rules: Vec<RuleState>,
    rng: u64,
    counts: RequestCounts,
    log: std::collections::VecDeque<RequestRecord>,
    warnings: Vec<String>,
}

/// How many answered warnings [`Faults::warnings`] keeps (the first ones).
pub const WARNING_LOG_CAPACITY: usize = 100;

/// The fault rules and request counters of one simulator. Clones share state.
#[derive(Clone)]
pub struct Faults {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("rules", &self.lock().rules.len())
            .finish_non_exhaustive()
    }
}

impl Faults {
    /// No rules; random triggers draw from an RNG seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                rules: Vec::new(),
                rng: seed,
                counts: RequestCounts::default(),
                log: std::collections::VecDeque::new(),
                warnings: Vec::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds a rule.
    pub fn add(&self, rule: FaultRule) {
        self.lock().rules.push(RuleState { rule, matched: 0 });
    }

    /// Removes every rule.
    pub fn clear(&self) {
        self.lock().rules.clear();
    }

    /// The request counters so far.
    pub fn requests(&self) -> RequestCounts {
        self.lock().counts.clone()
    }

    /// The last [`REQUEST_LOG_CAPACITY`] requests, oldest first: which writes happened, when a
    /// count says there were some.
    pub fn request_log(&self) -> Vec<RequestRecord> {
        self.lock().log.iter().cloned().collect()
    }

    /// Resets the request counters, the request log and the warnings.
    pub fn reset_requests(&self) {
        let mut inner = self.lock();
        inner.counts = RequestCounts::default();
        inner.log.clear();
        inner.warnings.clear();
    }

    /// Keeps the `Warning` header values an answer to `resource` carried (the first
    /// [`WARNING_LOG_CAPACITY`] of the run).
    pub fn record_warnings<'a>(&self, resource: &str, warnings: impl Iterator<Item = &'a str>) {
        let mut inner = self.lock();
        for warning in warnings {
            if inner.warnings.len() < WARNING_LOG_CAPACITY {
                inner.warnings.push(format!("{resource}: {warning}"));
            }
        }
    }

    /// The warnings answered so far, each `<resource>: <Warning header value>`
    /// (`canarydaemonsets/status: 299 - "unknown field \"status.x\""`).
    pub fn warnings(&self) -> Vec<String> {
        self.lock().warnings.clone()
    }

    /// Counts and logs the request, and decides which faults fire for it.
    pub fn on_request_to(
        &self,
        verb: Verb,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> FiredFaults {
        {
            let mut inner = self.lock();
            if inner.log.len() >= REQUEST_LOG_CAPACITY {
                inner.log.pop_front();
            }
            inner.log.push_back(RequestRecord {
                verb,
                resource: resource.to_owned(),
                namespace: namespace.map(str::to_owned),
                name: name.map(str::to_owned),
            });
        }
        self.on_request(verb, resource)
    }

    /// Counts the request and decides which faults fire for it.
    pub fn on_request(&self, verb: Verb, resource: &str) -> FiredFaults {
        let mut inner = self.lock();
        *inner
            .counts
            .counts
            .entry((verb, resource.to_owned()))
            .or_default() += 1;
        let mut fired = FiredFaults::default();
        let Inner { rules, rng, .. } = &mut *inner;
        for state in rules.iter_mut().filter(|s| s.rule.matches(verb, resource)) {
            state.matched += 1;
            let fires = match state.rule.trigger {
                Trigger::Always => true,
                Trigger::Rate(p) => unit_interval(next_random(rng)) < p,
                Trigger::Nth(n) => state.matched == n,
                Trigger::FirstN(n) => state.matched <= n,
            };
            if !fires {
                continue;
            }
            match &state.rule.action {
                FaultAction::Error { .. } => {
                    fired.error.get_or_insert_with(|| state.rule.action.clone());
                }
                FaultAction::Latency(d) => fired.latency += *d,
                FaultAction::EndWatchAfterEvents(n) => fired.end_watch_after_events = Some(*n),
                FaultAction::EndWatchAfter(d) => fired.end_watch_after = Some(*d),
                FaultAction::GoneOnResume => fired.gone_on_resume = true,
            }
        }
        fired
    }
}

/// splitmix64: small, fast and good enough to draw fault decisions reproducibly.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn unit_interval(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nth_fires_once_on_the_nth_match_only() {
        let faults = Faults::new(1);
        faults.add(
            FaultRule::new(
                Some(Verb::Patch),
                Some("daemonsets"),
                FaultAction::internal_error(),
            )
            .when(Trigger::Nth(2)),
        );
        let fired: Vec<bool> = (0..4)
            .map(|_| faults.on_request(Verb::Patch, "daemonsets").error.is_some())
            .collect();
        assert_eq!(fired, [false, true, false, false]);
        assert!(faults.on_request(Verb::Get, "daemonsets").error.is_none());
        assert!(faults.on_request(Verb::Patch, "pods").error.is_none());
    }

    #[test]
    fn rate_is_seeded_and_roughly_right() {
        let run = |seed| {
            let faults = Faults::new(seed);
            faults.add(
                FaultRule::new(None, None, FaultAction::too_many_requests(1))
                    .when(Trigger::Rate(0.25)),
            );
            (0..4000)
                .map(|_| faults.on_request(Verb::Get, "pods").error.is_some())
                .collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7), "same seed, same decisions");
        assert_ne!(a, run(8));
        let hits = a.iter().filter(|x| **x).count();
        assert!((850..1150).contains(&hits), "{hits} of 4000 at rate 0.25");
    }

    #[test]
    fn counters_split_reads_and_writes() {
        let faults = Faults::new(0);
        faults.on_request(Verb::List, "daemonsets");
        faults.on_request(Verb::Patch, "daemonsets");
        faults.on_request(Verb::Patch, "daemonsets/status");
        faults.on_request(Verb::Create, "events");
        faults.on_request_to(Verb::Delete, "pods", Some("ns"), Some("p"));
        let log = faults.request_log();
        assert_eq!(log.len(), 1, "only on_request_to logs");
        assert_eq!(
            (log[0].verb, log[0].name.as_deref()),
            (Verb::Delete, Some("p"))
        );
        let counts = faults.requests();
        assert_eq!(counts.count(Verb::Delete, "pods"), 1);
        faults.on_request(Verb::Delete, "pods");
        let counts = faults.requests();
        assert_eq!(counts.count(Verb::Delete, "pods"), 2);
        assert_eq!(counts.writes(), 5);
        assert_eq!(counts.writes_to("daemonsets"), 2);
        assert_eq!(counts.writes_to("daemonsets/status"), 1);
        assert_eq!(counts.count(Verb::List, "daemonsets"), 1);
        assert_eq!(counts.total(), 6);
    }
}
