//! `maxUnavailable`: the validated value the controller writes, and the raw value a live DaemonSet has.

use std::fmt;
use std::num::IntErrorKind;
use std::str::FromStr;

/// A `maxUnavailable` the controller writes: a pod count (`"1"`) or a percentage (`"10%"`).
///
/// Valid values are a count of at least 1 or a percentage in `1..=100`: 0 would stop a
/// rolling update, so it is never a valid rollout setting. [`MaxUnavailable::validate`]
/// checks a value built from the variants directly; [`FromStr`] only returns valid values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MaxUnavailable {
    /// A number of pods (written as an integer).
    Count(u32),
    /// A percentage of the desired pods, which Kubernetes rounds **up** (written as `"<n>%"`).
    Percent(u32),
}

/// Why a `maxUnavailable` value is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MaxUnavailableError {
    /// The text is empty.
    #[error("maxUnavailable is empty")]
    Empty,
    /// The text is neither digits nor digits followed by `%`.
    #[error("maxUnavailable {0:?} is neither a pod count (\"1\") nor a percentage (\"10%\")")]
    Malformed(String),
    /// A count of 0 pods would never replace a pod.
    #[error("maxUnavailable count must be at least 1, got 0")]
    ZeroCount,
    /// A count that does not fit in 32 bits.
    #[error("maxUnavailable count {0} is too large")]
    CountTooLarge(String),
    /// A percentage outside `1..=100`.
    #[error("maxUnavailable percentage must be within 1%..=100%, got {0}%")]
    PercentOutOfRange(u32),
}

impl MaxUnavailable {
    /// The reference's canary and resting value: one pod.
    pub const ONE: MaxUnavailable = MaxUnavailable::Count(1);
    /// The reference's fast value: `10%` of the desired pods.
    pub const TEN_PERCENT: MaxUnavailable = MaxUnavailable::Percent(10);

    /// Checks the bounds: a count of at least 1, a percentage in `1..=100`.
    pub fn validate(self) -> Result<(), MaxUnavailableError> {
        match self {
            MaxUnavailable::Count(0) => Err(MaxUnavailableError::ZeroCount),
            MaxUnavailable::Percent(p) if !(1..=100).contains(&p) => {
                Err(MaxUnavailableError::PercentOutOfRange(p))
            }
            _ => Ok(()),
        }
    }

    /// The number of pods this allows out of `desired`, as Kubernetes'
    /// `GetScaledValueFromIntOrPercent(value, desired, roundUp = true)`: a count as is (even above
    /// `desired`), a percentage of `desired` rounded **up** (10% of 11 is 2; 1% of 1 is 1; 0% is 0).
    ///
    /// This is the raw value; the DaemonSet controller's fallback to 1 when both `maxUnavailable`
    /// and `maxSurge` scale to 0 is `canary_predicates::daemonset_controller_max_unavailable`. A
    /// percentage above 100 (not produced by parsing) scales proportionally, saturating at
    /// `u32::MAX`.
    pub fn scaled(&self, desired: u32) -> u32 {
        match *self {
            MaxUnavailable::Count(count) => count,
            MaxUnavailable::Percent(percent) => {
                let scaled = (u64::from(percent) * u64::from(desired)).div_ceil(100);
                u32::try_from(scaled).unwrap_or(u32::MAX)
            }
        }
    }

    /// The same value as a live DaemonSet would carry it after the controller wrote it.
    pub fn to_live(self) -> LiveMaxUnavailable {
        match self {
            MaxUnavailable::Count(n) => LiveMaxUnavailable::Int(i64::from(n)),
            MaxUnavailable::Percent(_) => LiveMaxUnavailable::Str(self.to_string()),
        }
    }
}

impl fmt::Display for MaxUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaxUnavailable::Count(n) => write!(f, "{n}"),
            MaxUnavailable::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl FromStr for MaxUnavailable {
    type Err = MaxUnavailableError;

    /// Parses `"1"` as `Count(1)` and `"10%"` as `Percent(10)`; only ASCII digits are accepted
    /// (no sign, no spaces), and the result is validated.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(MaxUnavailableError::Empty);
        }
        let (digits, is_percent) = match s.strip_suffix('%') {
            Some(digits) => (digits, true),
            None => (s, false),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(MaxUnavailableError::Malformed(s.to_owned()));
        }
        let value: u32 = match digits.parse() {
            Ok(value) => value,
            // Only overflow can fail here: all digits were checked above.
            Err(_) if is_percent => return Err(MaxUnavailableError::PercentOutOfRange(u32::MAX)),
            Err(_) => return Err(MaxUnavailableError::CountTooLarge(digits.to_owned())),
        };
        let parsed = if is_percent {
            MaxUnavailable::Percent(value)
        } else {
            MaxUnavailable::Count(value)
        };
        parsed.validate().map(|()| parsed)
    }
}

/// The `maxUnavailable` a live DaemonSet has, exactly as the API returned it.
///
/// Kept raw (not validated) because the controller must read whatever is there, including
/// values written by hand or by other tools.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum LiveMaxUnavailable {
    /// `spec.updateStrategy.rollingUpdate` is absent (for example an `OnDelete` strategy).
    NoRollingUpdate,
    /// `rollingUpdate` is present but `maxUnavailable` is absent.
    #[default]
    Unset,
    /// An integer `maxUnavailable`.
    Int(i64),
    /// A string `maxUnavailable` (normally a percentage such as `"10%"`).
    Str(String),
}

impl LiveMaxUnavailable {
    /// The reference's `getMaxUnavailable`, built on Go's `IntOrString.IntValue()`.
    ///
    /// No `rollingUpdate` gives 0, an absent `maxUnavailable` gives 1, an integer gives itself,
    /// and a string gives Go's `strconv.Atoi` of it: 0 when it does not parse (so `"10%"` and
    /// `"100%"` give 0) and the saturated bound when it overflows. KubeVirt mode treats every
    /// value other than 1 as an ongoing rollout (spec quirk 3).
    pub fn reference_int_value(&self) -> i64 {
        match self {
            LiveMaxUnavailable::NoRollingUpdate => 0,
            LiveMaxUnavailable::Unset => 1,
            LiveMaxUnavailable::Int(value) => *value,
            LiveMaxUnavailable::Str(text) => go_atoi(text),
        }
    }

    /// The value Kubernetes' DaemonSet controller works with: an absent `maxUnavailable` is the
    /// API default 1, a non-negative int a count, a `"<n>%"` string a percentage (not bounded
    /// here: `"150%"` is `Percent(150)`). `None` without a rolling update, for a negative int, or
    /// for a string Kubernetes would reject.
    pub fn value(&self) -> Option<MaxUnavailable> {
        match self {
            LiveMaxUnavailable::NoRollingUpdate => None,
            LiveMaxUnavailable::Unset => Some(MaxUnavailable::ONE),
            LiveMaxUnavailable::Int(value) => u32::try_from(*value).ok().map(MaxUnavailable::Count),
            LiveMaxUnavailable::Str(text) => {
                let digits = text.strip_suffix('%')?;
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                digits.parse().ok().map(MaxUnavailable::Percent)
            }
        }
    }

    /// Literal comparison with a value the controller writes (the default strategy's test).
    ///
    /// `Int(n)` matches `Count(n)`, `Str("p%")` matches `Percent(p)` spelled exactly so, and an
    /// absent `maxUnavailable` matches `Count(1)` (the API server's default). A string count
    /// such as `"1"` matches nothing: Kubernetes rejects it as a percentage without `%`.
    pub fn matches(&self, value: MaxUnavailable) -> bool {
        match (self, value) {
            (LiveMaxUnavailable::Unset, MaxUnavailable::Count(1)) => true,
            (LiveMaxUnavailable::Int(live), MaxUnavailable::Count(count)) => {
                *live == i64::from(count)
            }
            (LiveMaxUnavailable::Str(live), MaxUnavailable::Percent(_)) => {
                *live == value.to_string()
            }
            _ => false,
        }
    }
}

impl fmt::Display for LiveMaxUnavailable {
    /// The value as `kubectl` shows it (`1`, `10%`), or `<unset>` / `<no rollingUpdate>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LiveMaxUnavailable::NoRollingUpdate => f.write_str("<no rollingUpdate>"),
            LiveMaxUnavailable::Unset => f.write_str("<unset>"),
            LiveMaxUnavailable::Int(value) => write!(f, "{value}"),
            LiveMaxUnavailable::Str(text) => f.write_str(text),
        }
    }
}

impl From<MaxUnavailable> for LiveMaxUnavailable {
    fn from(value: MaxUnavailable) -> Self {
        value.to_live()
    }
}

/// Go's `strconv.Atoi` as `IntValue()` uses it: the error is dropped, so a syntax error is 0
/// and an out-of-range value is the bound of its sign.
fn go_atoi(text: &str) -> i64 {
    match text.parse::<i64>() {
        Ok(value) => value,
        Err(error) => match error.kind() {
            IntErrorKind::PosOverflow => i64::MAX,
            IntErrorKind::NegOverflow => i64::MIN,
            _ => 0,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counts_and_percentages() {
        assert_eq!("1".parse(), Ok(MaxUnavailable::Count(1)));
        assert_eq!("25".parse(), Ok(MaxUnavailable::Count(25)));
        assert_eq!("10%".parse(), Ok(MaxUnavailable::Percent(10)));
        assert_eq!("100%".parse(), Ok(MaxUnavailable::Percent(100)));
    }

    #[test]
    fn rejects_invalid_text() {
        assert_eq!(
            "".parse::<MaxUnavailable>(),
            Err(MaxUnavailableError::Empty)
        );
        assert_eq!(
            "0".parse::<MaxUnavailable>(),
            Err(MaxUnavailableError::ZeroCount)
        );
        assert_eq!(
            "0%".parse::<MaxUnavailable>(),
            Err(MaxUnavailableError::PercentOutOfRange(0))
        );
        assert_eq!(
            "101%".parse::<MaxUnavailable>(),
            Err(MaxUnavailableError::PercentOutOfRange(101))
        );
        assert_eq!(
            "99999999999".parse::<MaxUnavailable>(),
            Err(MaxUnavailableError::CountTooLarge("99999999999".into()))
        );
        for bad in ["%", "+1", "-1", " 1", "1 ", "1.5", "10 %", "ten", "1%%"] {
            assert_eq!(
                bad.parse::<MaxUnavailable>(),
                Err(MaxUnavailableError::Malformed(bad.into())),
                "{bad:?}"
            );
        }
        assert_eq!(
            "99999999999%".parse::<MaxUnavailable>(),
            Err(MaxUnavailableError::PercentOutOfRange(u32::MAX))
        );
    }

    #[test]
    fn display_round_trips() {
        for value in [
            MaxUnavailable::Count(1),
            MaxUnavailable::Count(7),
            MaxUnavailable::Percent(10),
            MaxUnavailable::Percent(100),
        ] {
            assert_eq!(value.to_string().parse(), Ok(value));
        }
        assert_eq!(MaxUnavailable::TEN_PERCENT.to_string(), "10%");
    }

    #[test]
    fn reference_int_value_reproduces_go_int_value() {
        use LiveMaxUnavailable::*;
        assert_eq!(NoRollingUpdate.reference_int_value(), 0);
        assert_eq!(Unset.reference_int_value(), 1);
        assert_eq!(Int(1).reference_int_value(), 1);
        assert_eq!(Int(2).reference_int_value(), 2);
        assert_eq!(Str("1".into()).reference_int_value(), 1);
        assert_eq!(Str("+1".into()).reference_int_value(), 1);
        assert_eq!(Str("10%".into()).reference_int_value(), 0);
        assert_eq!(Str("100%".into()).reference_int_value(), 0);
        assert_eq!(Str("".into()).reference_int_value(), 0);
        assert_eq!(
            Str("99999999999999999999".into()).reference_int_value(),
            i64::MAX
        );
        assert_eq!(
            Str("-99999999999999999999".into()).reference_int_value(),
            i64::MIN
        );
    }

    #[test]
    fn matches_compares_literally() {
        use LiveMaxUnavailable::*;
        let one = MaxUnavailable::ONE;
        let ten = MaxUnavailable::TEN_PERCENT;
        assert!(Unset.matches(one));
        assert!(Int(1).matches(one));
        assert!(Str("10%".into()).matches(ten));
        assert!(!Str("1".into()).matches(one));
        assert!(!Str("010%".into()).matches(ten));
        assert!(!Int(10).matches(ten));
        assert!(!NoRollingUpdate.matches(one));
        assert!(!Unset.matches(MaxUnavailable::Count(2)));
        assert!(Int(3).matches(MaxUnavailable::Count(3)));
    }

    #[test]
    fn display_is_what_kubectl_shows() {
        use LiveMaxUnavailable::*;
        assert_eq!(Str("10%".into()).to_string(), "10%");
        assert_eq!(Int(1).to_string(), "1");
        assert_eq!(Unset.to_string(), "<unset>");
        assert_eq!(NoRollingUpdate.to_string(), "<no rollingUpdate>");
    }

    /// Pins Kubernetes' scaling (`GetScaledValueFromIntOrPercent`, rounding up): a count as
    /// is, a percentage of the desired pods rounded up. Rows: (value, desired, scaled).
    #[test]
    fn scaled_rounds_percentages_up_and_keeps_counts() {
        let rows = [
            (MaxUnavailable::Count(3), 10, 3),
            (MaxUnavailable::Count(3), 1, 3),
            (MaxUnavailable::Percent(10), 25, 3),
            (MaxUnavailable::Percent(10), 11, 2),
            (MaxUnavailable::Percent(10), 10, 1),
            (MaxUnavailable::Percent(1), 1, 1),
            (MaxUnavailable::Percent(50), 7, 4),
            (MaxUnavailable::Percent(100), 7, 7),
            (MaxUnavailable::Percent(10), 0, 0),
            (MaxUnavailable::Percent(200), u32::MAX, u32::MAX),
        ];
        for (value, desired, scaled) in rows {
            assert_eq!(value.scaled(desired), scaled, "{value} of {desired}");
        }
    }

    #[test]
    fn value_reads_what_the_daemon_set_controller_reads() {
        use LiveMaxUnavailable::*;
        // A sign is no digit: "+5%" is rejected as Kubernetes' `^[0-9]+%$` does (Rust's `u32`
        // parser alone would accept it).
        assert_eq!(Str("+5%".into()).value(), None);
        assert_eq!(Str("5%".into()).value(), Some(MaxUnavailable::Percent(5)));
        assert_eq!(Unset.value(), Some(MaxUnavailable::ONE));
        assert_eq!(Int(3).value(), Some(MaxUnavailable::Count(3)));
        assert_eq!(Str("10%".into()).value(), Some(MaxUnavailable::TEN_PERCENT));
        assert_eq!(Int(-1).value(), None);
        assert_eq!(Str("1".into()).value(), None);
        assert_eq!(Str("%".into()).value(), None);
        assert_eq!(NoRollingUpdate.value(), None);
    }

    #[test]
    fn to_live_is_what_matches() {
        for value in [MaxUnavailable::Count(4), MaxUnavailable::Percent(33)] {
            assert!(value.to_live().matches(value));
            assert_eq!(LiveMaxUnavailable::from(value), value.to_live());
        }
    }

    #[test]
    fn validate_checks_bounds() {
        assert!(MaxUnavailable::Count(0).validate().is_err());
        assert!(MaxUnavailable::Percent(0).validate().is_err());
        assert!(MaxUnavailable::Percent(101).validate().is_err());
        assert!(MaxUnavailable::Percent(100).validate().is_ok());
        assert!(MaxUnavailable::Count(u32::MAX).validate().is_ok());
    }
}
