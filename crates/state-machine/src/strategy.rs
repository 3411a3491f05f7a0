//! The rollout strategy: compatibility mode, the two `maxUnavailable` values, the progress deadline.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::max_unavailable::{MaxUnavailable, MaxUnavailableError};

/// Which decision table [`decide`](crate::decide) follows.
///
/// The one compatibility switch of the project: the custom resource's `spec.strategy.compatibility`
/// (with the `serde` feature), the demo's `--compatibility` flag ([`FromStr`]) and the metrics'
/// labels all read this type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)
)]
pub enum Compatibility {
    /// The reference (KubeVirt virt-operator) table, row by row and quirk by quirk.
    KubeVirt,
    /// The same phases and writes with the reference quirks fixed (see `docs/phases.md`).
    #[default]
    Fixed,
}

impl Compatibility {
    /// The stable name (`"KubeVirt"`, `"Fixed"`), as the custom resource spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Compatibility::KubeVirt => "KubeVirt",
            Compatibility::Fixed => "Fixed",
        }
    }

    /// Both modes, reference first.
    pub const ALL: [Compatibility; 2] = [Compatibility::KubeVirt, Compatibility::Fixed];
}

impl fmt::Display for Compatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names neither compatibility mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown compatibility {0:?}: expected KubeVirt or Fixed")]
pub struct ParseCompatibilityError(pub String);

impl FromStr for Compatibility {
    type Err = ParseCompatibilityError;

    /// `KubeVirt` or `Fixed`, in any letter case (command-line flags are typed in lower case).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Compatibility::ALL
            .into_iter()
            .find(|mode| mode.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| ParseCompatibilityError(s.to_owned()))
    }
}

/// How the new template reaches the pods.
///
/// The one driver switch of the project: the custom resource's `spec.strategy.driver` (with the
/// `serde` feature) and the demo's `--driver` flag ([`FromStr`]) read this type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)
)]
pub enum Driver {
    /// The reference's: the DaemonSet controller replaces pods (`RollingUpdate`), the controller
    /// steers it through `maxUnavailable` (1, then 10%, then back to 1); [`decide`](crate::decide).
    #[default]
    MaxUnavailable,
    /// The DaemonSet is `OnDelete` and the controller deletes old pods node by node, through
    /// steps; [`decide_pods`](crate::decide_pods).
    Pods,
}

impl Driver {
    /// The stable name (`"MaxUnavailable"`, `"Pods"`), as the custom resource spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Driver::MaxUnavailable => "MaxUnavailable",
            Driver::Pods => "Pods",
        }
    }

    /// Both drivers, the reference's first.
    pub const ALL: [Driver; 2] = [Driver::MaxUnavailable, Driver::Pods];
}

impl fmt::Display for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names neither driver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown driver {0:?}: expected MaxUnavailable or Pods")]
pub struct ParseDriverError(pub String);

impl FromStr for Driver {
    type Err = ParseDriverError;

    /// `MaxUnavailable` or `Pods`, in any letter case, `max-unavailable` too.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.replace('-', "");
        Driver::ALL
            .into_iter()
            .find(|driver| driver.as_str().eq_ignore_ascii_case(&wanted))
            .ok_or_else(|| ParseDriverError(s.to_owned()))
    }
}

/// What the controller does when someone else changes the live DaemonSet's template or update
/// strategy (drift). Only the default table reads it; KubeVirt mode reverts at the next row 3a or
/// 4 write, unsupervised, as the reference does (spec quirk 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)
)]
pub enum DriftPolicy {
    /// Write the desired template back at once, supervised like any rollout: the canary first
    /// (the default).
    #[default]
    Revert,
    /// Leave the DaemonSet as it is, report the drift (condition, event) and write nothing
    /// until the desired state changes.
    Report,
}

impl DriftPolicy {
    /// The stable name (`"Revert"`, `"Report"`), as the custom resource spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            DriftPolicy::Revert => "Revert",
            DriftPolicy::Report => "Report",
        }
    }
}

/// What the controller does when a rollout fails for a reason that says something about the
/// new version (a crash-looping pod, a progress deadline: [`FailureReason::is_sticky`]).
///
/// [`FailureReason::is_sticky`]: crate::FailureReason::is_sticky
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)
)]
pub enum OnFailure {
    /// Stay `failed`, nothing more written, until the spec changes or a `retry` (the default,
    /// and the reference's behaviour).
    #[default]
    Hold,
    /// Roll back in place to the last revision that finished `successful`, supervised like any
    /// rollout (canary first): `failed`, then `rollingBack`, then `rolledBack`.
    Rollback,
}

impl OnFailure {
    /// The stable name (`"Hold"`, `"Rollback"`), as the custom resource spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            OnFailure::Hold => "Hold",
            OnFailure::Rollback => "Rollback",
        }
    }
}

/// How a rollout proceeds. Build it with [`Strategy::default`] (fixed quirks) or
/// [`Strategy::kubevirt`] (reference behaviour), adjust the fields, then [`Strategy::validate`].
///
/// [`decide`](crate::decide) validates the strategy itself and answers an invalid one with a
/// [`FailureReason::InvalidStrategy`](crate::FailureReason::InvalidStrategy) decision, never a panic.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Strategy {
    /// Reference table or fixed table.
    pub compatibility: Compatibility,
    /// The `maxUnavailable` of the canary step, which is also the resting value (default `1`).
    pub canary_max_unavailable: MaxUnavailable,
    /// The `maxUnavailable` once the canary is ready (default `10%`).
    pub fast_max_unavailable: MaxUnavailable,
    /// A phase that makes no progress for longer than this fails with
    /// `ProgressDeadlineExceeded`. Default 10 minutes; `None` in KubeVirt mode (the reference
    /// has no deadline) and when switched off.
    pub progress_deadline: Option<Duration>,
    /// What a drift of the live DaemonSet leads to (default table only).
    pub drift_policy: DriftPolicy,
}

/// The default progress deadline: 10 minutes, like a Deployment's `progressDeadlineSeconds`.
pub const DEFAULT_PROGRESS_DEADLINE: Duration = Duration::from_secs(600);

/// Why a strategy is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrategyError {
    /// The canary `maxUnavailable` is out of bounds.
    #[error("invalid canary maxUnavailable: {0}")]
    InvalidCanaryMaxUnavailable(MaxUnavailableError),
    /// The fast `maxUnavailable` is out of bounds.
    #[error("invalid fast maxUnavailable: {0}")]
    InvalidFastMaxUnavailable(MaxUnavailableError),
    /// Canary and fast are the same value: the widen step could not be told from the resting
    /// state, so the rollout would look finished as soon as it was widened.
    #[error("the canary and fast maxUnavailable are both {0}; they must differ")]
    CanaryEqualsFast(MaxUnavailable),
    /// KubeVirt mode detects an ongoing rollout by "maxUnavailable is not 1" (Go `IntValue`),
    /// so its canary value can only be the integer 1.
    #[error("KubeVirt compatibility requires a canary maxUnavailable of 1, got {0}")]
    KubeVirtCanaryNotOne(MaxUnavailable),
    /// A zero deadline would fail every rollout on its first waiting pass.
    #[error("the progress deadline must be longer than zero")]
    ZeroProgressDeadline,
    /// More steps than [`MAX_STEPS`](crate::MAX_STEPS).
    #[error("{0} steps, more than the {max} allowed", max = crate::MAX_STEPS)]
    TooManySteps(usize),
    /// A step of the Pods driver is out of bounds.
    #[error("step {index}: {reason}")]
    InvalidStep {
        /// The step's index in `spec.strategy.steps`.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The Pods driver decides pod by pod, which the reference never does: it cannot be
    /// combined with the reference's table.
    #[error(
        "the Pods driver needs compatibility Fixed; KubeVirt compatibility supports only the MaxUnavailable driver"
    )]
    PodsDriverNeedsFixed,
    /// Both values are pod counts and the canary one is the larger: the rollout would narrow
    /// after its canary instead of widening.
    #[error("the canary maxUnavailable {canary} is larger than the fast maxUnavailable {fast}")]
    CanaryAboveFast {
        /// The canary value.
        canary: MaxUnavailable,
        /// The fast value.
        fast: MaxUnavailable,
    },
}

impl Strategy {
    /// The reference behaviour: canary `1`, fast `10%`, no progress deadline, KubeVirt table.
    pub fn kubevirt() -> Self {
        Strategy {
            compatibility: Compatibility::KubeVirt,
            canary_max_unavailable: MaxUnavailable::ONE,
            fast_max_unavailable: MaxUnavailable::TEN_PERCENT,
            progress_deadline: None,
            drift_policy: DriftPolicy::Revert,
        }
    }

    /// Checks every field; the first problem found is returned.
    pub fn validate(&self) -> Result<(), StrategyError> {
        self.canary_max_unavailable
            .validate()
            .map_err(StrategyError::InvalidCanaryMaxUnavailable)?;
        self.fast_max_unavailable
            .validate()
            .map_err(StrategyError::InvalidFastMaxUnavailable)?;
        if self.canary_max_unavailable == self.fast_max_unavailable {
            return Err(StrategyError::CanaryEqualsFast(self.canary_max_unavailable));
        }
        if let (MaxUnavailable::Count(canary), MaxUnavailable::Count(fast)) =
            (self.canary_max_unavailable, self.fast_max_unavailable)
            && canary > fast
        {
            return Err(StrategyError::CanaryAboveFast {
                canary: self.canary_max_unavailable,
                fast: self.fast_max_unavailable,
            });
        }
        if self.compatibility == Compatibility::KubeVirt
            && self.canary_max_unavailable != MaxUnavailable::ONE
        {
            return Err(StrategyError::KubeVirtCanaryNotOne(
                self.canary_max_unavailable,
            ));
        }
        if self.progress_deadline == Some(Duration::ZERO) {
            return Err(StrategyError::ZeroProgressDeadline);
        }
        Ok(())
    }
}

impl Default for Strategy {
    /// The fixed table: canary `1`, fast `10%`, a 10-minute progress deadline.
    fn default() -> Self {
        Strategy {
            compatibility: Compatibility::Fixed,
            canary_max_unavailable: MaxUnavailable::ONE,
            fast_max_unavailable: MaxUnavailable::TEN_PERCENT,
            progress_deadline: Some(DEFAULT_PROGRESS_DEADLINE),
            drift_policy: DriftPolicy::Revert,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(Strategy::default().validate(), Ok(()));
        assert_eq!(Strategy::kubevirt().validate(), Ok(()));
        assert_eq!(Strategy::default().compatibility, Compatibility::Fixed);
        assert_eq!(Strategy::kubevirt().progress_deadline, None);
        assert_eq!(
            Strategy::default().progress_deadline,
            Some(Duration::from_secs(600))
        );
    }

    #[test]
    fn rejects_each_invalid_field() {
        let strategy = Strategy {
            canary_max_unavailable: MaxUnavailable::Count(0),
            ..Strategy::default()
        };
        assert_eq!(
            strategy.validate(),
            Err(StrategyError::InvalidCanaryMaxUnavailable(
                MaxUnavailableError::ZeroCount
            ))
        );

        let strategy = Strategy {
            fast_max_unavailable: MaxUnavailable::Percent(150),
            ..Strategy::default()
        };
        assert_eq!(
            strategy.validate(),
            Err(StrategyError::InvalidFastMaxUnavailable(
                MaxUnavailableError::PercentOutOfRange(150)
            ))
        );

        let strategy = Strategy {
            fast_max_unavailable: MaxUnavailable::ONE,
            ..Strategy::default()
        };
        assert_eq!(
            strategy.validate(),
            Err(StrategyError::CanaryEqualsFast(MaxUnavailable::ONE))
        );

        let strategy = Strategy {
            progress_deadline: Some(Duration::ZERO),
            ..Strategy::default()
        };
        assert_eq!(
            strategy.validate(),
            Err(StrategyError::ZeroProgressDeadline)
        );
    }

    #[test]
    fn a_canary_count_above_the_fast_count_is_refused() {
        let strategy = Strategy {
            canary_max_unavailable: MaxUnavailable::Count(5),
            fast_max_unavailable: MaxUnavailable::Count(2),
            ..Strategy::default()
        };
        assert_eq!(
            strategy.validate(),
            Err(StrategyError::CanaryAboveFast {
                canary: MaxUnavailable::Count(5),
                fast: MaxUnavailable::Count(2)
            })
        );
        // A count against a percentage depends on the pod count: both are fine.
        let mixed = Strategy {
            canary_max_unavailable: MaxUnavailable::Count(5),
            ..Strategy::default()
        };
        assert_eq!(mixed.validate(), Ok(()));
    }

    #[test]
    fn kubevirt_mode_needs_a_canary_of_one() {
        let mut strategy = Strategy::kubevirt();
        strategy.canary_max_unavailable = MaxUnavailable::Count(2);
        assert_eq!(
            strategy.validate(),
            Err(StrategyError::KubeVirtCanaryNotOne(MaxUnavailable::Count(
                2
            )))
        );
        let mut fixed = strategy.clone();
        fixed.compatibility = Compatibility::Fixed;
        assert_eq!(fixed.validate(), Ok(()));
    }

    /// Pins the stable names (the CRD's and the metrics' spelling) and the parser of the
    /// compatibility switch: any letter case, nothing else.
    #[test]
    fn names_are_stable_and_parse_back() {
        let rows = [
            (Compatibility::KubeVirt.to_string(), "KubeVirt"),
            (Compatibility::Fixed.to_string(), "Fixed"),
            (DriftPolicy::Revert.as_str().to_owned(), "Revert"),
            (DriftPolicy::Report.as_str().to_owned(), "Report"),
            (OnFailure::Hold.as_str().to_owned(), "Hold"),
            (OnFailure::Rollback.as_str().to_owned(), "Rollback"),
            (Driver::Pods.to_string(), "Pods"),
            (Driver::MaxUnavailable.to_string(), "MaxUnavailable"),
        ];
        for (name, expected) in rows {
            assert_eq!(name, expected);
        }
        let parsed = [
            ("KubeVirt", Ok(Compatibility::KubeVirt)),
            ("kubevirt", Ok(Compatibility::KubeVirt)),
            ("FIXED", Ok(Compatibility::Fixed)),
            (
                "reference",
                Err(ParseCompatibilityError("reference".into())),
            ),
            ("", Err(ParseCompatibilityError(String::new()))),
        ];
        for (text, expected) in parsed {
            assert_eq!(text.parse::<Compatibility>(), expected, "{text:?}");
        }
    }

    #[test]
    fn custom_values_validate() {
        let strategy = Strategy {
            canary_max_unavailable: MaxUnavailable::Count(2),
            fast_max_unavailable: MaxUnavailable::Percent(25),
            progress_deadline: None,
            ..Strategy::default()
        };
        assert_eq!(strategy.validate(), Ok(()));
        assert!(strategy.validate().is_ok());
        assert_eq!(Compatibility::KubeVirt.as_str(), "KubeVirt");
        assert_eq!(Compatibility::default().as_str(), "Fixed");
    }

    #[test]
    fn drivers_parse_as_users_type_them() {
        for (text, driver) in [
            ("pods", Driver::Pods),
            ("Pods", Driver::Pods),
            ("max-unavailable", Driver::MaxUnavailable),
            ("MaxUnavailable", Driver::MaxUnavailable),
        ] {
            assert_eq!(text.parse(), Ok(driver));
        }
        assert!("nodes".parse::<Driver>().is_err());
        assert_eq!(Driver::default(), Driver::MaxUnavailable);
    }
}
