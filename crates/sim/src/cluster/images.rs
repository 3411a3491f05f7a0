//! The images on one node: which are present, which are being pulled and until when. The
//! kubelet pulls one image at a time (`serializeImagePulls`, true by default:
//! `pkg/kubelet/images/puller.go`, `serialImagePuller`), so a pull waits for the ones asked
//! before it; a pod asking for an image already being pulled waits for that pull; an image
//! pulled once stays (image garbage collection is not modelled).
//!
//! Times are the cluster model's own (a [`Duration`] since the cluster started, at its
//! speed), so that a 30 s pull is 30 s of the model whatever `speed` says.
//!
//! Invariant: an image counts as present from the end of its pull on, whether or not the
//! pod that asked for it still exists (the runtime finishes a pull it started): a
//! short-lived pod pre-pulls an image for the pods after it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::kubelet::go_duration;

/// What a request for an image on the node amounts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullPlan {
    /// The image is there: no pull.
    Present,
    /// Another pod's pull of the image ends at `until`.
    Joined {
        /// End of that pull.
        until: Duration,
    },
    /// A pull of the image runs from `starts` (after the node's earlier pulls) to `until`.
    Queued {
        /// When the pull begins.
        starts: Duration,
        /// When it ends.
        until: Duration,
    },
}

impl PullPlan {
    /// When the image is there (`now` when it is already).
    pub fn ready_at(self, now: Duration) -> Duration {
        match self {
            Self::Present => now,
            Self::Joined { until } | Self::Queued { until, .. } => until,
        }
    }
}

/// What a kubelet reports about one image it needs: an event at once (`Pulling`, or `Pulled`
/// for an image already present), and the message of the `Pulled` event due when the image
/// is there (`pkg/kubelet/images/image_manager.go`, `EnsureImageExists`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullReport {
    /// Reason and message of the event written when the image is asked for.
    pub at_once: Option<(&'static str, String)>,
    /// Message of the `Pulled` event written when the image is there.
    pub when_pulled: Option<String>,
}

impl PullPlan {
    /// What the kubelet reports for `image` (its pull taking `pull`) asked for at `asked_at`
    /// and planned as `self`. A pod that joins another's pull finds the image there when its
    /// own turn comes: its pull took no time, all of it was waiting.
    pub fn report(self, image: &str, pull: Duration, asked_at: Duration) -> PullReport {
        let waited = self.ready_at(asked_at).saturating_sub(asked_at);
        let pulled = |took: Duration| {
            format!(
                "Successfully pulled image {image:?} in {} ({} including waiting). Image size: 0 bytes.",
                go_duration(took),
                go_duration(waited)
            )
        };
        match self {
            Self::Present => PullReport {
                at_once: Some((
                    "Pulled",
                    format!("Container image {image:?} already present on machine"),
                )),
                when_pulled: None,
            },
            Self::Joined { .. } => PullReport {
                at_once: None,
                when_pulled: Some(pulled(Duration::ZERO)),
            },
            Self::Queued { .. } => PullReport {
                at_once: Some(("Pulling", format!("Pulling image {image:?}"))),
                when_pulled: Some(pulled(pull)),
            },
        }
    }
}

/// The images of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeImages {
    present: HashSet<String>,
    /// Pulls not known to be over, by image: their end.
    pulling: HashMap<String, Duration>,
    /// When the last pull asked for so far ends.
    busy_until: Duration,
}

impl NodeImages {
    /// Moves the pulls over by `now` to the present images.
    fn settle(&mut self, now: Duration) {
        let present = &mut self.present;
        self.pulling.retain(|image, until| {
            if *until <= now {
                present.insert(image.clone());
                false
            } else {
                true
            }
        });
    }

    /// Whether `image` is on the node at `now`.
    pub fn is_present(&mut self, image: &str, now: Duration) -> bool {
        self.settle(now);
        self.present.contains(image)
    }

    /// A pod needs `image`, whose pull takes `pull`, at `now`.
    pub fn request(&mut self, image: &str, pull: Duration, now: Duration) -> PullPlan {
        self.settle(now);
        if self.present.contains(image) {
            return PullPlan::Present;
        }
        if let Some(until) = self.pulling.get(image) {
            return PullPlan::Joined { until: *until };
        }
        let starts = self.busy_until.max(now);
        let until = starts.saturating_add(pull);
        self.busy_until = until;
        self.pulling.insert(image.to_owned(), until);
        PullPlan::Queued { starts, until }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    #[test]
    fn an_image_is_pulled_once_per_node() {
        let mut images = NodeImages::default();
        assert_eq!(
            images.request("agent:v2", s(30), s(10)),
            PullPlan::Queued {
                starts: s(10),
                until: s(40)
            }
        );
        assert!(!images.is_present("agent:v2", s(39)));
        // A second pod asking meanwhile waits for the same pull.
        assert_eq!(
            images.request("agent:v2", s(30), s(20)),
            PullPlan::Joined { until: s(40) }
        );
        assert!(images.is_present("agent:v2", s(40)));
        assert_eq!(images.request("agent:v2", s(30), s(50)), PullPlan::Present);
    }

    #[test]
    fn pulls_of_different_images_run_one_after_the_other() {
        let mut images = NodeImages::default();
        let first = images.request("a", s(30), s(0));
        let second = images.request("b", s(10), s(5));
        assert_eq!(first.ready_at(s(0)), s(30));
        assert_eq!(
            second,
            PullPlan::Queued {
                starts: s(30),
                until: s(40)
            }
        );
        // Once the node is idle, a pull starts at once.
        assert_eq!(
            images.request("c", s(1), s(100)),
            PullPlan::Queued {
                starts: s(100),
                until: s(101)
            }
        );
        assert_eq!(PullPlan::Present.ready_at(s(7)), s(7));
    }

    #[test]
    fn reports_are_the_kubelets_events() {
        let queued = PullPlan::Queued {
            starts: s(30),
            until: s(40),
        };
        assert_eq!(
            queued.report("b", s(10), s(5)),
            PullReport {
                at_once: Some(("Pulling", r#"Pulling image "b""#.to_owned())),
                when_pulled: Some(
                    r#"Successfully pulled image "b" in 10s (35s including waiting). Image size: 0 bytes."#
                        .to_owned()
                ),
            }
        );
        assert_eq!(
            PullPlan::Joined { until: s(40) }
                .report("b", s(10), Duration::from_millis(38_500))
                .when_pulled
                .as_deref(),
            Some(
                r#"Successfully pulled image "b" in 0s (1.5s including waiting). Image size: 0 bytes."#
            )
        );
        assert_eq!(
            PullPlan::Present.report("b", s(10), s(50)).at_once,
            Some((
                "Pulled",
                r#"Container image "b" already present on machine"#.to_owned()
            ))
        );
    }
}
