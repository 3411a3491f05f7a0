//! The cluster task's one timer queue: kubelet steps, graceful-deletion ends, DaemonSet
//! resyncs and pods' effects on their nodes, ordered by due time and then by scheduling order, so that equal deadlines fire
//! in a reproducible order. Every delay is divided by the cluster's speed here, the one place
//! all of them pass.

use std::cmp::{Ordering, Reverse};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::time::Instant;

use super::super::kubelet::KubeletStep;
use super::{Driver, ObjKey};

#[derive(Clone, Debug)]
pub(super) enum Timer {
    PodStep {
        key: ObjKey,
        epoch: u64,
        step: KubeletStep,
    },
    FinishDeletion {
        key: ObjKey,
        uid: String,
    },
    SyncDaemonSet {
        key: ObjKey,
    },
    DelayedSync {
        key: ObjKey,
    },
    /// Effect `index` of the pod `key` (if it is still the one with `uid`) begins.
    Effect {
        key: ObjKey,
        uid: String,
        index: usize,
    },
}

impl Timer {
    fn is_perpetual(&self) -> bool {
        matches!(self, Self::PodStep { step, .. } if step.is_perpetual())
    }
}

pub(super) struct TimerEntry {
    at: Instant,
    seq: u64,
    timer: Timer,
}

impl PartialEq for TimerEntry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for TimerEntry {}
impl PartialOrd for TimerEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for TimerEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl Driver {
    /// `delay` of the cluster model as it elapses at the cluster's speed.
    pub(super) fn scaled(&self, delay: Duration) -> Duration {
        if self.speed == 1.0 {
            delay
        } else {
            delay.div_f64(self.speed)
        }
    }

    /// Fires `timer` once `delay` (of the cluster model, see [`Driver::scaled`]) has elapsed.
    pub(super) fn schedule(&mut self, delay: Duration, timer: Timer) {
        let delay = self.scaled(delay);
        if !timer.is_perpetual() {
            self.finite_timers += 1;
        }
        self.timer_seq += 1;
        let entry = TimerEntry {
            at: Instant::now() + delay,
            seq: self.timer_seq,
            timer,
        };
        self.timers.push(Reverse(entry));
    }

    pub(super) fn fire_due_timers(&mut self) -> bool {
        let now = Instant::now();
        let mut fired = false;
        while self
            .timers
            .peek()
            .is_some_and(|Reverse(entry)| entry.at <= now)
        {
            let Some(Reverse(entry)) = self.timers.pop() else {
                break;
            };
            if !entry.timer.is_perpetual() {
                self.finite_timers = self.finite_timers.saturating_sub(1);
            }
            fired = true;
            match entry.timer {
                Timer::PodStep { key, epoch, step } => self.run_pod_step(&key, epoch, step),
                Timer::FinishDeletion { key, uid } => {
                    if self.pods.get(&key).is_some_and(|p| p.uid == uid)
                        && let Err(error) = self.store.remove_now::<Pod>(Some(&key.0), &key.1)
                    {
                        tracing::debug!(pod = %key.1, %error, "terminated pod already gone");
                    }
                }
                Timer::SyncDaemonSet { key } => {
                    if let Some(state) = self.daemonsets.get_mut(&key)
                        && state.requeue_at.is_some_and(|at| at <= now)
                    {
                        state.requeue_at = None;
                    }
                    self.dirty_daemonsets.insert(key);
                }
                Timer::Effect { key, uid, index } => self.start_effect(&key, &uid, index),
                Timer::DelayedSync { key } => {
                    self.delayed_syncs = self.delayed_syncs.saturating_sub(1);
                    if let Some(state) = self.daemonsets.get_mut(&key) {
                        state.sync_scheduled = false;
                    }
                    self.due_daemonsets.insert(key);
                }
            }
        }
        fired
    }

    /// When the earliest pending timer is due.
    pub(super) fn next_timer_at(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse(entry)| entry.at)
    }
}

pub(super) async fn sleep_until_or_forever(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
