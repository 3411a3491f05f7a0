//! `maxUnavailable` on the Kubernetes side: reading it from a DaemonSet and converting it to and
//! from the API's `IntOrString`, with the reference's "default strategy" test and Kubernetes'
//! scaled value kept apart on purpose.
//!
//! The value type is the state machine's [`MaxUnavailable`] (and [`LiveMaxUnavailable`] for the
//! raw live value): this module is only the converter. The reference reads `maxUnavailable` with
//! Go's `IntOrString.IntValue()`, so `"10%"` reads as 0 ([`reference_max_unavailable`], spec
//! quirk 3). Kubernetes scales it against the desired pod count, rounding up
//! ([`MaxUnavailable::scaled`], [`kubernetes_max_unavailable`]).

use canary_state_machine::{LiveMaxUnavailable, MaxUnavailable};
use k8s_openapi::api::apps::v1::{DaemonSet, RollingUpdateDaemonSet};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The DaemonSet's `spec.updateStrategy.rollingUpdate`, if any.
fn rolling_update(ds: &DaemonSet) -> Option<&RollingUpdateDaemonSet> {
    ds.spec
        .as_ref()?
        .update_strategy
        .as_ref()?
        .rolling_update
        .as_ref()
}

/// The live `spec.updateStrategy.rollingUpdate.maxUnavailable` field as the API has it, if set.
pub fn max_unavailable_field(ds: &DaemonSet) -> Option<&IntOrString> {
    rolling_update(ds)?.max_unavailable.as_ref()
}

/// The live `spec.updateStrategy.rollingUpdate.maxSurge`, if set.
pub fn live_max_surge(ds: &DaemonSet) -> Option<&IntOrString> {
    rolling_update(ds)?.max_surge.as_ref()
}

/// The live `maxUnavailable` of a DaemonSet, exactly as the API returned it: no `rollingUpdate`
/// block, no value in it, an int or a string. The state machine reads this (its sync gate and
/// the reference's `IntValue` quirk); nothing is validated, because the controller must read
/// whatever is there, including values written by hand.
pub fn live_max_unavailable(ds: &DaemonSet) -> LiveMaxUnavailable {
    match rolling_update(ds) {
        None => LiveMaxUnavailable::NoRollingUpdate,
        Some(rolling) => match &rolling.max_unavailable {
            None => LiveMaxUnavailable::Unset,
            Some(IntOrString::Int(value)) => LiveMaxUnavailable::Int(i64::from(*value)),
            Some(IntOrString::String(text)) => LiveMaxUnavailable::Str(text.clone()),
        },
    }
}

/// KubeVirt's `getMaxUnavailable`, quirks included:
///
/// - no `rollingUpdate` block (including an `OnDelete` strategy or no spec) → 0;
/// - `rollingUpdate` without `maxUnavailable` → 1;
/// - an int → its value;
/// - a string → Go's `strconv.Atoi` of it, 0 when that fails: `"1"` → 1, `"10%"` → 0, `"100%"` → 0.
///
/// Go's `Atoi` accepts a leading `+` or `-` and decimal digits only; a number out of range saturates
/// (Go saturates at the 64-bit limits, this at the `i32` limits, which never changes the `== 1` test).
/// It is [`LiveMaxUnavailable::reference_int_value`] of [`live_max_unavailable`].
///
/// The object is read as given. On a live object the API server has already defaulted a missing
/// `updateStrategy` / `rollingUpdate` / `maxUnavailable` to `RollingUpdate` / 1, so "no
/// `rollingUpdate`" then means `OnDelete`; a manifest that omits them reads 0 here.
pub fn reference_max_unavailable(ds: &DaemonSet) -> i32 {
    let value = live_max_unavailable(ds).reference_int_value();
    i32::try_from(value).unwrap_or(if value < 0 { i32::MIN } else { i32::MAX })
}

/// KubeVirt's `hasDefaultRolloutStrategy`: [`reference_max_unavailable`] is 1. Anything else is an
/// "ongoing rollout" for the reference, including int 2, `"100%"` and a missing `rollingUpdate`.
pub fn has_default_rollout_strategy(ds: &DaemonSet) -> bool {
    reference_max_unavailable(ds) == 1
}

/// Why a `maxUnavailable` value is rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidMaxUnavailable {
    /// A negative pod count.
    #[error("maxUnavailable must not be negative, got {0}")]
    NegativeCount(i64),
    /// A string that is neither a non-negative integer nor a percentage (only [`MaxUnavailableWire::from_str_value`]).
    #[error(
        "maxUnavailable {0:?} is neither a pod count such as \"1\" nor a percentage such as \"10%\""
    )]
    MalformedCount(String),
    /// A number in a string, which Kubernetes rejects in an `IntOrString` ([`MaxUnavailableWire::parse`]).
    #[error(
        "maxUnavailable string {0:?} is not a percentage: Kubernetes accepts a string only in the form \"10%\""
    )]
    NotAPercentage(String),
    /// A string ending in `%` whose number is not made of decimal digits (`"-5%"`, `"abc%"`, `"%"`).
    #[error("maxUnavailable {0:?} is not a whole percentage such as \"10%\"")]
    MalformedPercent(String),
    /// A percentage above 100.
    #[error("maxUnavailable {0:?} is above 100%")]
    PercentAbove100(String),
}

/// The Kubernetes wire form of the state machine's [`MaxUnavailable`]: parsing an `IntOrString`
/// with the API server's rules, and writing one. Bring it into scope to call
/// `MaxUnavailable::parse(..)` and `value.to_int_or_string()`.
pub trait MaxUnavailableWire: Sized {
    /// Validates an `IntOrString` as the Kubernetes API server does for a DaemonSet
    /// (`ValidatePositiveIntOrPercent` and `IsNotMoreThan100Percent`):
    ///
    /// - an int must be ≥ 0;
    /// - a string must be digits followed by `%`, at most 100%. A plain number in a string (`"3"`)
    ///   is rejected, as `intstr.GetScaledValueFromIntOrPercent` rejects it ("string is not a
    ///   percentage"), although the reference's `IntValue` reads it as 3.
    ///
    /// ```
    /// use canary_predicates::{MaxUnavailable, MaxUnavailableWire};
    /// use canary_predicates::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    /// assert_eq!(MaxUnavailable::parse(&IntOrString::String("10%".into())), Ok(MaxUnavailable::Percent(10)));
    /// assert_eq!(MaxUnavailable::parse(&IntOrString::Int(1)), Ok(MaxUnavailable::Count(1)));
    /// assert!(MaxUnavailable::parse(&IntOrString::String("3".into())).is_err());
    /// assert!(MaxUnavailable::parse(&IntOrString::String("150%".into())).is_err());
    /// ```
    fn parse(value: &IntOrString) -> Result<Self, InvalidMaxUnavailable>;

    /// Parses a user-typed value (CLI flag, configuration): `"N%"` as [`MaxUnavailable::Percent`]
    /// (same rules as [`MaxUnavailableWire::parse`]), and a plain non-negative integer up to
    /// `i32::MAX` as [`MaxUnavailable::Count`]. Unlike [`MaxUnavailableWire::parse`], `"3"` is
    /// accepted here: it is the `Display` form of `Count(3)`, and it becomes an int in
    /// [`MaxUnavailableWire::to_int_or_string`]. Zero is accepted (Kubernetes accepts it); the
    /// rollout settings' stricter reading is `MaxUnavailable`'s `FromStr`.
    fn from_str_value(text: &str) -> Result<Self, InvalidMaxUnavailable>;

    /// The Kubernetes wire form: a count as an int (saturating at `i32::MAX`), a percentage as the
    /// string `"N%"`.
    fn to_int_or_string(&self) -> IntOrString;
}

impl MaxUnavailableWire for MaxUnavailable {
    fn parse(value: &IntOrString) -> Result<Self, InvalidMaxUnavailable> {
        match value {
            IntOrString::Int(count) => u32::try_from(*count)
                .map(MaxUnavailable::Count)
                .map_err(|_| InvalidMaxUnavailable::NegativeCount(i64::from(*count))),
            IntOrString::String(text) => match text.strip_suffix('%') {
                Some(number) => parse_percent(text, number),
                None => Err(InvalidMaxUnavailable::NotAPercentage(text.clone())),
            },
        }
    }

    fn from_str_value(text: &str) -> Result<Self, InvalidMaxUnavailable> {
        if let Some(number) = text.strip_suffix('%') {
            return parse_percent(text, number);
        }
        if let Some(magnitude) = text.strip_prefix('-').filter(|m| is_decimal(m)) {
            let negative = magnitude.parse::<i64>().map_or(i64::MIN, |m| -m);
            return Err(InvalidMaxUnavailable::NegativeCount(negative));
        }
        if !is_decimal(text) {
            return Err(InvalidMaxUnavailable::MalformedCount(text.to_owned()));
        }
        text.parse::<i32>()
            .ok()
            .and_then(|count| u32::try_from(count).ok())
            .map(MaxUnavailable::Count)
            .ok_or_else(|| InvalidMaxUnavailable::MalformedCount(text.to_owned()))
    }

    fn to_int_or_string(&self) -> IntOrString {
        match *self {
            MaxUnavailable::Count(count) => {
                IntOrString::Int(i32::try_from(count).unwrap_or(i32::MAX))
            }
            MaxUnavailable::Percent(percent) => IntOrString::String(format!("{percent}%")),
        }
    }
}

/// Kubernetes' `^[0-9]+%$` plus the 100% limit; `text` is the whole value, `number` the part before `%`.
fn parse_percent(text: &str, number: &str) -> Result<MaxUnavailable, InvalidMaxUnavailable> {
    if !is_decimal(number) {
        return Err(InvalidMaxUnavailable::MalformedPercent(text.to_owned()));
    }
    match number.parse::<u32>() {
        Ok(percent) if percent <= 100 => Ok(MaxUnavailable::Percent(percent)),
        // Only digits remain, so a parse failure is an overflow: far above 100 as well.
        _ => Err(InvalidMaxUnavailable::PercentAbove100(text.to_owned())),
    }
}

fn is_decimal(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// How many pods the Kubernetes DaemonSet controller lets be unavailable at once, for `desired`
/// scheduled pods (`pkg/controller/daemon/update.go` `updatedDesiredNodeCounts`, with
/// `util.UnavailableCount` / `SurgeCount`):
///
/// - both values are scaled with [`MaxUnavailable::scaled`] (percentages rounded up), a missing
///   `max_surge` counts as 0;
/// - "if the daemonset returned with an impossible configuration, obey the default of
///   unavailable=1": when `desired > 0` and both scale to 0, the budget is 1.
///
/// Invalid values are the caller's to reject first ([`MaxUnavailable::parse`]): the controller then
/// returns an error and updates nothing. See [`kubernetes_max_unavailable`] for a whole DaemonSet.
///
/// ```
/// use canary_predicates::{MaxUnavailable, daemonset_controller_max_unavailable};
/// assert_eq!(daemonset_controller_max_unavailable(MaxUnavailable::Percent(10), None, 25), 3);
/// // 0% of 5 and no surge: the controller still replaces one pod at a time.
/// assert_eq!(daemonset_controller_max_unavailable(MaxUnavailable::Percent(0), None, 5), 1);
/// ```
pub fn daemonset_controller_max_unavailable(
    max_unavailable: MaxUnavailable,
    max_surge: Option<MaxUnavailable>,
    desired: u32,
) -> u32 {
    let unavailable = max_unavailable.scaled(desired);
    let surge = max_surge.map_or(0, |value| value.scaled(desired));
    if desired > 0 && unavailable == 0 && surge == 0 {
        1
    } else {
        unavailable
    }
}

/// The Kubernetes `updateStrategy.type` that rolls pods.
const ROLLING_UPDATE: &str = "RollingUpdate";

/// How many of `desired` pods Kubernetes would take down at once for this DaemonSet: the opposite
/// reading to [`reference_max_unavailable`].
///
/// The API server's defaults are applied first (`SetDefaults_DaemonSet`: type `RollingUpdate`,
/// `maxUnavailable` 1, `maxSurge` 0), so a manifest and the live object it becomes read the same;
/// then [`daemonset_controller_max_unavailable`]. An `OnDelete` DaemonSet is never rolled: 0.
///
/// # Errors
///
/// An invalid `maxUnavailable` or `maxSurge` ([`MaxUnavailable::parse`]); the DaemonSet controller
/// refuses to roll such a DaemonSet.
pub fn kubernetes_max_unavailable(
    ds: &DaemonSet,
    desired: u32,
) -> Result<u32, InvalidMaxUnavailable> {
    let strategy = ds
        .spec
        .as_ref()
        .and_then(|spec| spec.update_strategy.as_ref());
    let strategy_type = strategy
        .and_then(|s| s.type_.as_deref())
        .unwrap_or(ROLLING_UPDATE);
    if strategy_type != ROLLING_UPDATE {
        return Ok(0);
    }
    let max_unavailable = max_unavailable_field(ds)
        .map(MaxUnavailable::parse)
        .transpose()?
        .unwrap_or(MaxUnavailable::ONE);
    let max_surge = live_max_surge(ds).map(MaxUnavailable::parse).transpose()?;
    Ok(daemonset_controller_max_unavailable(
        max_unavailable,
        max_surge,
        desired,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DaemonSetSpec, DaemonSetUpdateStrategy};

    fn ds(rolling: Option<RollingUpdateDaemonSet>) -> DaemonSet {
        DaemonSet {
            spec: Some(DaemonSetSpec {
                update_strategy: Some(DaemonSetUpdateStrategy {
                    type_: Some(
                        if rolling.is_some() {
                            "RollingUpdate"
                        } else {
                            "OnDelete"
                        }
                        .into(),
                    ),
                    rolling_update: rolling,
                }),
                ..DaemonSetSpec::default()
            }),
            ..DaemonSet::default()
        }
    }

    fn with_max_unavailable(value: Option<IntOrString>) -> DaemonSet {
        ds(Some(RollingUpdateDaemonSet {
            max_unavailable: value,
            max_surge: None,
        }))
    }

    fn int(value: i32) -> Option<IntOrString> {
        Some(IntOrString::Int(value))
    }

    fn string(value: &str) -> Option<IntOrString> {
        Some(IntOrString::String(value.into()))
    }

    #[test]
    fn reference_int_value_quirk_table() {
        // spec §2 getMaxUnavailable and quirk 3
        let rows = [
            ("no spec", DaemonSet::default(), 0, false),
            ("no rollingUpdate (OnDelete): ongoing", ds(None), 0, false),
            (
                "nil maxUnavailable: default",
                with_max_unavailable(None),
                1,
                true,
            ),
            ("int 1", with_max_unavailable(int(1)), 1, true),
            ("string \"1\"", with_max_unavailable(string("1")), 1, true),
            (
                "string \"+1\" (Atoi accepts a sign)",
                with_max_unavailable(string("+1")),
                1,
                true,
            ),
            ("string \"01\"", with_max_unavailable(string("01")), 1, true),
            ("int 2", with_max_unavailable(int(2)), 2, false),
            ("int 0", with_max_unavailable(int(0)), 0, false),
            ("int -1", with_max_unavailable(int(-1)), -1, false),
            ("\"-7\"", with_max_unavailable(string("-7")), -7, false),
            (
                "huge saturates",
                with_max_unavailable(string("99999999999999999999999")),
                i32::MAX,
                false,
            ),
            (
                "huge negative saturates",
                with_max_unavailable(string("-99999999999")),
                i32::MIN,
                false,
            ),
        ];
        for (case, ds, expected, default) in rows {
            assert_eq!(reference_max_unavailable(&ds), expected, "{case}");
            assert_eq!(has_default_rollout_strategy(&ds), default, "{case}");
        }
        // Every string Atoi refuses, a percentage among them, reads as 0 (ongoing).
        for value in ["10%", "25%", "100%", "1%", "abc", "", "-", " 1", "1_0"] {
            let ds = with_max_unavailable(string(value));
            assert_eq!(reference_max_unavailable(&ds), 0, "{value:?} reads as 0");
            assert!(!has_default_rollout_strategy(&ds), "{value:?} reads as 0");
        }
    }

    #[test]
    fn live_values_are_read_through() {
        let with_both = ds(Some(RollingUpdateDaemonSet {
            max_unavailable: string("100%"),
            max_surge: int(0),
        }));
        assert_eq!(max_unavailable_field(&with_both), string("100%").as_ref());
        assert_eq!(live_max_surge(&with_both), int(0).as_ref());
        assert_eq!(max_unavailable_field(&ds(None)), None);
        assert_eq!(live_max_surge(&DaemonSet::default()), None);
    }

    #[test]
    fn parse_table() {
        use InvalidMaxUnavailable as E;
        use MaxUnavailable::{Count, Percent};
        let s = |value: &str| IntOrString::String(value.into());
        let rows: [(IntOrString, Result<MaxUnavailable, E>); 14] = [
            (IntOrString::Int(1), Ok(Count(1))),
            (IntOrString::Int(0), Ok(Count(0))),
            (IntOrString::Int(i32::MAX), Ok(Count(i32::MAX as u32))),
            (IntOrString::Int(-5), Err(E::NegativeCount(-5))),
            (s("10%"), Ok(Percent(10))),
            (s("0%"), Ok(Percent(0))),
            (s("100%"), Ok(Percent(100))),
            (s("150%"), Err(E::PercentAbove100("150%".into()))),
            (
                s("99999999999%"),
                Err(E::PercentAbove100("99999999999%".into())),
            ),
            (s("-5%"), Err(E::MalformedPercent("-5%".into()))),
            (s("+5%"), Err(E::MalformedPercent("+5%".into()))),
            (s("%"), Err(E::MalformedPercent("%".into()))),
            (s("abc"), Err(E::NotAPercentage("abc".into()))),
            (s("3"), Err(E::NotAPercentage("3".into()))),
        ];
        for (value, expected) in rows {
            assert_eq!(MaxUnavailable::parse(&value), expected, "{value:?}");
        }
    }

    #[test]
    fn from_str_value_table() {
        use InvalidMaxUnavailable as E;
        use MaxUnavailable::{Count, Percent};
        let rows = [
            ("1", Ok(Count(1))),
            ("3", Ok(Count(3))),
            ("0", Ok(Count(0))),
            ("2147483647", Ok(Count(2_147_483_647))),
            ("2147483648", Err(E::MalformedCount("2147483648".into()))),
            ("10%", Ok(Percent(10))),
            ("150%", Err(E::PercentAbove100("150%".into()))),
            ("-5%", Err(E::MalformedPercent("-5%".into()))),
            ("-5", Err(E::NegativeCount(-5))),
            ("abc", Err(E::MalformedCount("abc".into()))),
            ("", Err(E::MalformedCount(String::new()))),
            (" 1", Err(E::MalformedCount(" 1".into()))),
            ("1.5", Err(E::MalformedCount("1.5".into()))),
        ];
        for (text, expected) in rows {
            assert_eq!(MaxUnavailable::from_str_value(text), expected, "{text:?}");
            // `FromStr` is the state machine's stricter reading of a rollout setting: it agrees
            // on every value a rollout may use (zero is not one).
            if let Ok(value) = &expected
                && value.validate().is_ok()
            {
                assert_eq!(
                    text.parse::<MaxUnavailable>().as_ref(),
                    Ok(value),
                    "{text:?}"
                );
            }
        }
    }

    #[test]
    fn scaled_rounds_percentages_up() {
        use MaxUnavailable::{Count, Percent};
        let rows = [
            (Percent(10), 0, 0),
            (Percent(10), 1, 1),
            (Percent(10), 10, 1),
            (Percent(10), 11, 2),
            (Percent(10), 25, 3),
            (Percent(10), 500, 50),
            (Percent(25), 3, 1),
            (Percent(100), 3, 3),
            (Percent(0), 100, 0),
            (Percent(1), 1, 1),
            (Count(1), 0, 1),
            (Count(5), 3, 5),
            (Percent(u32::MAX), u32::MAX, u32::MAX),
        ];
        for (value, desired, expected) in rows {
            assert_eq!(value.scaled(desired), expected, "{value} of {desired}");
        }
    }

    #[test]
    fn controller_budget_falls_back_to_one() {
        use MaxUnavailable::{Count, Percent};
        let rows = [
            ("10% of 25", Percent(10), None, 25, 3),
            (
                "0 unavailable, 0 surge: default 1",
                Count(0),
                Some(Count(0)),
                5,
                1,
            ),
            ("0% of 5, no surge: 1", Percent(0), None, 5, 1),
            (
                "surge-only rollout keeps 0 unavailable",
                Count(0),
                Some(Count(1)),
                5,
                0,
            ),
            (
                "0% surge of 5 scales to 0: fallback",
                Count(0),
                Some(Percent(0)),
                5,
                1,
            ),
            ("no pods: 0", Count(0), None, 0, 0),
            ("100% of 3 (longhorn)", Percent(100), Some(Count(0)), 3, 3),
        ];
        for (case, unavailable, surge, desired, expected) in rows {
            assert_eq!(
                daemonset_controller_max_unavailable(unavailable, surge, desired),
                expected,
                "{case}"
            );
        }
    }

    #[test]
    fn kubernetes_reading_applies_api_defaults() {
        let on_delete = ds(None);
        let no_strategy = DaemonSet {
            spec: Some(DaemonSetSpec::default()),
            ..DaemonSet::default()
        };
        let rolling_without_block = DaemonSet {
            spec: Some(DaemonSetSpec {
                update_strategy: Some(DaemonSetUpdateStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: None,
                }),
                ..DaemonSetSpec::default()
            }),
            ..DaemonSet::default()
        };
        let rows = [
            ("OnDelete is never rolled", on_delete, 10, Ok(0)),
            ("no spec: defaults to 1", DaemonSet::default(), 10, Ok(1)),
            ("no strategy: defaults to 1", no_strategy, 10, Ok(1)),
            (
                "RollingUpdate without a block: 1",
                rolling_without_block,
                10,
                Ok(1),
            ),
            (
                "nil maxUnavailable: 1",
                with_max_unavailable(None),
                10,
                Ok(1),
            ),
            ("10% of 25", with_max_unavailable(string("10%")), 25, Ok(3)),
            ("10% of 0", with_max_unavailable(string("10%")), 0, Ok(0)),
            ("int 4 of 2", with_max_unavailable(int(4)), 2, Ok(4)),
            (
                "\"10\" is invalid",
                with_max_unavailable(string("10")),
                25,
                Err(InvalidMaxUnavailable::NotAPercentage("10".into())),
            ),
            (
                "-1 is invalid",
                with_max_unavailable(int(-1)),
                25,
                Err(InvalidMaxUnavailable::NegativeCount(-1)),
            ),
        ];
        for (case, ds, desired, expected) in rows {
            assert_eq!(kubernetes_max_unavailable(&ds, desired), expected, "{case}");
        }
        let bad_surge = ds(Some(RollingUpdateDaemonSet {
            max_unavailable: int(1),
            max_surge: string("200%"),
        }));
        assert_eq!(
            kubernetes_max_unavailable(&bad_surge, 3),
            Err(InvalidMaxUnavailable::PercentAbove100("200%".into()))
        );
    }

    #[test]
    fn wire_form() {
        assert_eq!(MaxUnavailable::ONE.to_int_or_string(), IntOrString::Int(1));
        assert_eq!(
            MaxUnavailable::TEN_PERCENT.to_int_or_string(),
            IntOrString::String("10%".into())
        );
        assert_eq!(
            MaxUnavailable::Count(u32::MAX).to_int_or_string(),
            IntOrString::Int(i32::MAX)
        );
        assert_eq!(MaxUnavailable::TEN_PERCENT.to_string(), "10%");
        assert_eq!(MaxUnavailable::Count(3).to_string(), "3");
    }
}
