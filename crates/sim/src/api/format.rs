//! How Kubernetes renders values for people: ages (`duration.HumanDuration` and
//! `ShortHumanDuration` in `staging/src/k8s.io/apimachinery/pkg/util/duration`), label maps
//! (`labels.FormatLabels`) and label selectors (`metav1.FormatLabelSelector`), as the Table
//! printers use them.

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

/// `labels.FormatLabels`: `k=v,...` sorted by key, `<none>` when empty.
pub(super) fn format_labels(labels: &Value) -> String {
    let pairs: Vec<String> = labels
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", text(v)))
        .collect();
    if pairs.is_empty() {
        "<none>".to_owned()
    } else {
        pairs.join(",")
    }
}

/// `metav1.FormatLabelSelector`: requirements sorted by key, `<none>` when it selects all.
pub(super) fn format_label_selector(selector: &Value) -> String {
    let mut requirements: Vec<(String, String)> = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), format!("{k}={}", text(v))))
        .collect();
    for expression in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let key = text(&expression["key"]);
        let mut values: Vec<String> = expression["values"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        values.sort();
        let rendered = match expression["operator"].as_str() {
            Some("In") => format!("{key} in ({})", values.join(",")),
            Some("NotIn") => format!("{key} notin ({})", values.join(",")),
            Some("Exists") => key.clone(),
            Some("DoesNotExist") => format!("!{key}"),
            _ => return "<error>".to_owned(),
        };
        requirements.push((key, rendered));
    }
    requirements.sort();
    if requirements.is_empty() {
        "<none>".to_owned()
    } else {
        requirements
            .into_iter()
            .map(|(_, r)| r)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// `translateTimestampSince`: `<unknown>` for no time, else `HumanDuration` since it.
pub(super) fn age_since(timestamp: &Value, now: Timestamp) -> String {
    match timestamp.as_str().and_then(|t| t.parse::<Timestamp>().ok()) {
        Some(at) => human_duration(now.duration_since(at).as_secs()),
        None => "<unknown>".to_owned(),
    }
}

/// `duration.HumanDuration` of a whole number of seconds.
pub(super) fn human_duration(seconds: i64) -> String {
    // `5m` when the smaller unit is zero, else `5m30s`: two significant units.
    let two = |major: i64, major_unit: &str, minor: i64, minor_unit: &str| match minor {
        0 => format!("{major}{major_unit}"),
        minor => format!("{major}{major_unit}{minor}{minor_unit}"),
    };
    let (minutes, hours, days) = (seconds / 60, seconds / 3600, seconds / 86400);
    match seconds {
        s if s < -1 => "<invalid>".to_owned(),
        s if s < 0 => "0s".to_owned(),
        s if s < 60 * 2 => format!("{s}s"),
        _ if minutes < 10 => two(minutes, "m", seconds % 60, "s"),
        _ if minutes < 60 * 3 => format!("{minutes}m"),
        _ if hours < 8 => two(hours, "h", minutes % 60, "m"),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 24 * 8 => two(days, "d", hours % 24, "h"),
        _ if hours < 24 * 365 * 2 => format!("{days}d"),
        _ if hours < 24 * 365 * 8 => two(days / 365, "y", days % 365, "d"),
        _ => format!("{}y", days / 365),
    }
}

/// `duration.ShortHumanDuration` of a whole number of seconds.
pub(super) fn short_human_duration(seconds: i64) -> String {
    match seconds {
        s if s < -1 => "<invalid>".to_owned(),
        s if s < 0 => "0s".to_owned(),
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 24 * 3600 => format!("{}h", s / 3600),
        s if s < 365 * 24 * 3600 => format!("{}d", s / 86400),
        s => format!("{}y", s / (365 * 86400)),
    }
}

/// A JSON value as the text a printer shows: strings as they are, nothing for null.
pub(super) fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations_read_as_kubernetes_prints_them() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (119, "119s"),
            (150, "2m30s"),
            (600, "10m"),
            (3 * 3600 + 120, "3h2m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 3600, "3d1h"),
            (40 * 86400, "40d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
        ];
        for (seconds, expected) in cases {
            assert_eq!(human_duration(seconds), expected, "{seconds}s");
        }
        assert_eq!(short_human_duration(150), "2m");
        assert_eq!(short_human_duration(30 * 3600), "1d");
    }

    #[test]
    fn label_selectors_format_like_kubectl() {
        let selector = json!({"matchLabels": {"b": "2", "a": "1"}, "matchExpressions": [
            {"key": "c", "operator": "In", "values": ["y", "x"]},
            {"key": "d", "operator": "DoesNotExist"}]});
        assert_eq!(format_label_selector(&selector), "a=1,b=2,c in (x,y),!d");
        assert_eq!(format_label_selector(&json!({})), "<none>");
        assert_eq!(
            format_labels(&json!({"kubernetes.io/os": "linux"})),
            "kubernetes.io/os=linux"
        );
    }
}
