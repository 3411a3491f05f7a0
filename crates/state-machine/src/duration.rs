//! Durations as a spec spells them: `30s`, `10m`, `1h30m` (hours, minutes and seconds, the
//! way `kubectl` users write them), for pause steps and analysis intervals and timeouts alike.
//!
//! One home for the text form: the parser ([`parse_duration`]) and the CEL rule a CRD checks
//! the same text with ([`DURATION_RULE`]) stand side by side, so that what the API server
//! admits and what the controller reads cannot drift apart. The parser checks again what the
//! rule checks: an API server that does not run the rule (an old one, a simulator, an object
//! stored before the rule existed) must not make the controller act on a text it rejects.
//!
//! Pure; never panics: an overflow is a malformed duration.

use std::time::Duration;

/// The CEL rule of a duration field: one or more groups of at most seven digits and a unit
/// (`h`, `m` or `s`).
pub const DURATION_RULE: &str = "self.matches('^([0-9]{1,7}(h|m|s))+$')";

/// The longest duration: 30 days, like the progress deadline.
pub const MAX_DURATION: Duration = Duration::from_secs(2_592_000);

/// Why a text is no duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidDuration {
    /// Not groups of digits and a unit.
    #[error("{0:?} is not a duration such as 30s, 10m or 1h30m")]
    Malformed(String),
    /// Zero, or longer than [`MAX_DURATION`].
    #[error("{0:?} must be more than 0s and at most 720h")]
    OutOfRange(String),
}

/// `30s`, `10m`, `1h30m`: hours, minutes and seconds, as [`DURATION_RULE`] allows; more than
/// zero, at most [`MAX_DURATION`].
///
/// ```
/// use std::time::Duration;
/// use canary_state_machine::{InvalidDuration, parse_duration};
///
/// assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
/// assert!(matches!(parse_duration("1d"), Err(InvalidDuration::Malformed(_))));
/// assert!(matches!(parse_duration("0s"), Err(InvalidDuration::OutOfRange(_))));
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, InvalidDuration> {
    let malformed = || InvalidDuration::Malformed(text.to_owned());
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit: u64 = match c {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return Err(malformed()),
        };
        let value: u64 = digits.parse().map_err(|_| malformed())?;
        digits.clear();
        total = value
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(malformed)?;
    }
    if !digits.is_empty() || text.is_empty() {
        return Err(malformed());
    }
    let duration = Duration::from_secs(total);
    if duration.is_zero() || duration > MAX_DURATION {
        return Err(InvalidDuration::OutOfRange(text.to_owned()));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kubectl_users_write_them() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h1m1s"), Ok(Duration::from_secs(3661)));
        assert_eq!(parse_duration("720h"), Ok(MAX_DURATION));
        for bad in [
            "",
            "10",
            "m",
            "1d",
            "0s",
            "-1s",
            "721h",
            "99999999999999999999s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_messages_say_what_a_duration_is() {
        assert_eq!(
            parse_duration("1d").map_err(|e| e.to_string()),
            Err(r#""1d" is not a duration such as 30s, 10m or 1h30m"#.to_owned())
        );
        assert_eq!(
            parse_duration("721h").map_err(|e| e.to_string()),
            Err(r#""721h" must be more than 0s and at most 720h"#.to_owned())
        );
    }
}
