//! CanaryDaemonSets that do not decode: each is reported on itself (failed status with reason
//! `InvalidSpec`, the `Degraded` condition, one Warning event), and the report is retried with
//! backoff until it lands, for as long as the object stays undecodable.
//!
//! The controller lists and watches CanaryDaemonSets untyped and decodes them one by one
//! (`controller::typed_event`): an object that does not decode is kept out of the typed store,
//! so kube-runtime's Controller never reconciles it, and comes here instead.
//!
//! # Invariants
//!
//! - An object is reported from its latest undecodable version only; one that decodes again,
//!   or is deleted, is forgotten ([`Notice::Cleared`]) and never reported over.
//! - A failed report (an API error) is retried after the context's error backoff; nothing else
//!   waits for it.

use std::collections::HashMap;
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::warn;

use crate::crd::CanaryDaemonSet;
use crate::reconcile::Context;

/// What the watch tells the reporter.
#[derive(Debug)]
pub(crate) enum Notice {
    /// The object's latest version does not decode: its stand-in (metadata and status) and why.
    Invalid(Box<CanaryDaemonSet>, String),
    /// The object decodes again, or is gone: nothing to report any more.
    Cleared(ObjectRef<CanaryDaemonSet>),
}

/// One object waiting to be reported.
struct Pending {
    stand_in: CanaryDaemonSet,
    why: String,
    /// When to (re)try; `None`: reported.
    due: Option<Instant>,
}

/// Reports the undecodable objects `notices` names until the channel closes.
pub(crate) async fn report(mut notices: mpsc::UnboundedReceiver<Notice>, ctx: Arc<Context>) {
    let mut pending: HashMap<ObjectRef<CanaryDaemonSet>, Pending> = HashMap::new();
    loop {
        let next_due = pending.values().filter_map(|p| p.due).min();
        let notice = match next_due {
            Some(due) => tokio::select! {
                // In order, not at random: a simulation seed replays exactly.
                biased;
                notice = notices.recv() => notice,
                () = tokio::time::sleep_until(due) => {
                    retry_due(&mut pending, &ctx).await;
                    continue;
                }
            },
            None => notices.recv().await,
        };
        match notice {
            None => return,
            Some(Notice::Cleared(key)) => {
                pending.remove(&key);
            }
            Some(Notice::Invalid(stand_in, why)) => {
                let key = ObjectRef::from_obj(&*stand_in);
                pending.insert(
                    key,
                    Pending {
                        stand_in: *stand_in,
                        why,
                        due: Some(Instant::now()),
                    },
                );
                retry_due(&mut pending, &ctx).await;
            }
        }
    }
}

/// Reports every pending object that is due; a failure is tried again after the backoff.
async fn retry_due(pending: &mut HashMap<ObjectRef<CanaryDaemonSet>, Pending>, ctx: &Context) {
    let now = Instant::now();
    for entry in pending.values_mut() {
        if entry.due.is_none_or(|due| due > now) {
            continue;
        }
        match ctx.undecodable(&entry.stand_in, entry.why.clone()).await {
            Ok(()) => entry.due = None,
            Err(error) => {
                let delay = ctx.error_delay(&entry.stand_in);
                warn!(
                    namespace = entry.stand_in.namespace().unwrap_or_default(),
                    name = %entry.stand_in.name_any(),
                    %error,
                    ?delay,
                    "cannot report an object that does not decode, retrying"
                );
                entry.due = Some(Instant::now() + delay);
            }
        }
    }
}
