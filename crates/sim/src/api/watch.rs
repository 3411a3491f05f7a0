//! Watch streams: newline-delimited `{"type": ..., "object": ...}` events, as
//! `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/watch.go` writes them.

#![expect(
    clippy::indexing_slicing,
    reason = "only serde_json::Value is indexed here: a missing key or index reads as Null, and \
              writes by index go to objects this module built"
)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures::stream;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio::time::Instant;

use super::ResponseBody;
use super::selector::{FieldSelector, LabelSelector};
use super::table::TableView;
use crate::clock::SimClock;
use crate::registry::ResourceInfo;
use crate::store::{EventKind, Store, StoreError, StoreEvent};

/// How often a watch with `allowWatchBookmarks=true` gets a `BOOKMARK` (Kubernetes sends one
/// about every minute).
pub const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

/// Which objects a watch (or list) selects.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Only this namespace (`None`: all).
    pub namespace: Option<String>,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
}

impl Selection {
    /// Whether the object is selected.
    pub fn matches(&self, object: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| object["metadata"]["namespace"].as_str() == Some(ns))
            && self.labels.matches(object)
            && self.fields.matches(object)
    }

    /// Whether a label or field selector narrows the objects (the namespace does not count).
    pub fn filters(&self) -> bool {
        !self.labels.is_empty() || !self.fields.is_empty()
    }
}

/// Everything a watch request asked for.
#[derive(Clone, Debug)]
pub struct WatchRequest {
    /// The resource watched.
    pub info: ResourceInfo,
    /// Which objects.
    pub selection: Selection,
    /// `resourceVersion`; `None` (or 0) starts with synthetic `ADDED` events for every object.
    pub resource_version: Option<u64>,
    /// `sendInitialEvents=true`: end the initial events with a bookmark annotated
    /// `k8s.io/initial-events-end`.
    pub send_initial_events: bool,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// `timeoutSeconds` (or the fault-injected duration, when shorter).
    pub timeout: Duration,
    /// End after this many events (a fault).
    pub max_events: Option<u64>,
    /// Answer with 410 Gone if resuming from a resourceVersion (a fault).
    pub gone_on_resume: bool,
    /// Send each object as a one-row Table (kubectl's `get --watch`).
    pub table: Option<TableView>,
}

struct WatchState {
    request: WatchRequest,
    clock: SimClock,
    /// Whether a Table with the column definitions was sent (only the first carries them).
    table_headers_sent: bool,
    pending: VecDeque<Bytes>,
    receiver: Option<broadcast::Receiver<StoreEvent>>,
    last_resource_version: u64,
    sent: u64,
    finished: bool,
    deadline: Instant,
    next_bookmark: Instant,
}

/// The body of a watch response.
pub fn watch_body(store: &Store, request: WatchRequest) -> ResponseBody {
    let now = Instant::now();
    let mut state = WatchState {
        clock: store.clock().clone(),
        table_headers_sent: false,
        pending: VecDeque::new(),
        receiver: None,
        last_resource_version: 0,
        sent: 0,
        finished: false,
        deadline: now + request.timeout,
        next_bookmark: now + BOOKMARK_INTERVAL,
        request,
    };
    state.start(store);
    let events = stream::unfold(state, |mut state| async move {
        let line = state.next_line().await?;
        Some((Ok::<_, Infallible>(Frame::data(line)), state))
    });
    StreamBody::new(events).boxed_unsync()
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = format!("{{\"type\":\"{kind}\",\"object\":").into_bytes();
    // Serializing a Value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut line, object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

impl WatchState {
    fn start(&mut self, store: &Store) {
        let key = self.request.info.key.clone();
        match self.request.resource_version.filter(|rv| *rv > 0) {
            Some(rv) if self.request.gone_on_resume => self.fail(StoreError::Gone {
                requested: rv,
                oldest: store.resource_version(),
            }),
            Some(rv) => match store.watch_from(Some(&key), rv) {
                Ok((replay, receiver)) => {
                    self.last_resource_version = rv;
                    for event in replay {
                        self.on_event(&event);
                    }
                    self.receiver = Some(receiver);
                }
                Err(gone) => self.fail(gone),
            },
            None => {
                let (objects, rv, receiver) = store.snapshot_and_subscribe(&key);
                for object in &objects {
                    if self.request.selection.matches(object) {
                        self.push_event("ADDED", object);
                    }
                }
                self.last_resource_version = rv;
                if self.request.send_initial_events {
                    self.push_bookmark(true);
                }
                self.receiver = Some(receiver);
            }
        }
    }

    fn fail(&mut self, error: StoreError) {
        self.pending
            .push_back(event_line("ERROR", &error.to_status()));
        self.finished = true;
    }

    fn push_event(&mut self, kind: &str, object: &Value) {
        if self.finished {
            return;
        }
        match &self.request.table {
            Some(view) => {
                let resource_version = object["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default();
                let headers = !std::mem::replace(&mut self.table_headers_sent, true);
                let table = view.table([object], resource_version, headers, self.clock.now());
                self.pending.push_back(event_line(kind, &table));
            }
            None => self.pending.push_back(event_line(kind, object)),
        }
        self.sent += 1;
        if self.request.max_events.is_some_and(|max| self.sent >= max) {
            self.finished = true;
        }
    }

    fn push_bookmark(&mut self, initial_events_end: bool) {
        let mut metadata = json!({"resourceVersion": self.last_resource_version.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let bookmark = json!({
            "kind": self.request.info.kind,
            "apiVersion": self.request.info.api_version(),
            "metadata": metadata,
        });
        self.pending.push_back(event_line("BOOKMARK", &bookmark));
    }

    fn on_event(&mut self, event: &StoreEvent) {
        if event.resource_version <= self.last_resource_version {
            return;
        }
        self.last_resource_version = event.resource_version;
        let Some((object, previous)) = event.served_as(&self.request.info.key) else {
            return;
        };
        let selection = &self.request.selection;
        let now = selection.matches(&object);
        let before = previous.as_deref().is_some_and(|p| selection.matches(p));
        let kind = match (event.kind, before, now) {
            (EventKind::Added, _, true) => "ADDED",
            (EventKind::Modified, true, true) => "MODIFIED",
            (EventKind::Modified, false, true) => "ADDED",
            (EventKind::Modified, true, false) => "DELETED",
            (EventKind::Deleted, _, true) => "DELETED",
            _ => return,
        };
        self.push_event(kind, &object);
    }

    async fn next_line(&mut self) -> Option<Bytes> {
        loop {
            if let Some(line) = self.pending.pop_front() {
                return Some(line);
            }
            if self.finished {
                return None;
            }
            let receiver = self.receiver.as_mut()?;
            let bookmarks = self.request.bookmarks;
            tokio::select! {
                biased;
                received = receiver.recv() => match received {
                    Ok(event) => self.on_event(&event),
                    // A lagging watcher is dropped, as the API server drops slow watchers;
                    // the client re-watches from its last resourceVersion.
                    Err(_) => return None,
                },
                () = tokio::time::sleep_until(self.deadline) => return None,
                () = tokio::time::sleep_until(self.next_bookmark), if bookmarks => {
                    self.next_bookmark += BOOKMARK_INTERVAL;
                    self.push_bookmark(false);
                }
            }
        }
    }
}
