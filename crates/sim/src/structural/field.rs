//! Field errors as kube-apiserver words them: apimachinery's `field.Error`
//! (`staging/src/k8s.io/apimachinery/pkg/util/validation/field/errors.go`), what a 422 Invalid
//! answer lists as its causes and joins into its message.
//!
//! A cause's message is the error's *body*, `<type>: <bad value>: <detail>`: the value is
//! left out for `Required`, `Forbidden`, `TooLong` and an omitted value; a string is quoted as Go's
//! `%q` quotes it, a number or a boolean printed as Go's `%v` prints it, anything else written as
//! JSON. The whole message is `<field>: <body>`, and several are joined as Go's aggregate error
//! joins them (`[a, b]`, duplicates dropped). Invariant: the texts are byte for byte those of
//! kube-apiserver v1.35 for the same error (the table test of `docs/simulator.md`).

use serde_json::Value;

/// The kind of a field error: its `reason` in a `StatusCause`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldErrorType {
    /// `FieldValueInvalid`.
    Invalid,
    /// `FieldValueTypeInvalid`: the value has the wrong type (worded as `Invalid value`).
    TypeInvalid,
    /// `FieldValueRequired`.
    Required,
    /// `FieldValueNotSupported`: not one of the enumerated values.
    NotSupported,
    /// `FieldValueForbidden`.
    Forbidden,
    /// `FieldValueDuplicate`.
    Duplicate,
    /// `FieldValueTooLong`.
    TooLong,
    /// `FieldValueTooMany`.
    TooMany,
    /// `InternalError`.
    Internal,
}

impl FieldErrorType {
    /// The `reason` of the `StatusCause`.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Invalid => "FieldValueInvalid",
            Self::TypeInvalid => "FieldValueTypeInvalid",
            Self::Required => "FieldValueRequired",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Forbidden => "FieldValueForbidden",
            Self::Duplicate => "FieldValueDuplicate",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
            Self::Internal => "InternalError",
        }
    }

    /// The words that open the error's body.
    fn words(self) -> &'static str {
        match self {
            Self::Invalid | Self::TypeInvalid => "Invalid value",
            Self::Required => "Required value",
            Self::NotSupported => "Unsupported value",
            Self::Forbidden => "Forbidden",
            Self::Duplicate => "Duplicate value",
            Self::TooLong => "Too long",
            Self::TooMany => "Too many",
            Self::Internal => "Internal error",
        }
    }
}

/// The value a field error shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadValue {
    /// No value is shown (`field.OmitValueType`: a rule on an object or a list).
    Omitted,
    /// This value.
    Value(Value),
}

/// One field at fault, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// What kind of error.
    pub kind: FieldErrorType,
    /// The field's path (`spec.strategy.driver`, `spec.steps[0]`), `<nil>` for none.
    pub field: String,
    /// The value at fault.
    pub value: BadValue,
    /// Why.
    pub detail: String,
}

impl FieldError {
    /// An error of `kind` at `field` on `value`.
    pub fn new(
        kind: FieldErrorType,
        field: impl Into<String>,
        value: BadValue,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            field: field.into(),
            value,
            detail: detail.into(),
        }
    }

    /// `field.Invalid`.
    pub fn invalid(field: impl Into<String>, value: &Value, detail: impl Into<String>) -> Self {
        Self::new(
            FieldErrorType::Invalid,
            field,
            BadValue::Value(value.clone()),
            detail,
        )
    }

    /// `field.Required` with no detail.
    pub fn required(field: impl Into<String>) -> Self {
        Self::new(
            FieldErrorType::Required,
            field,
            BadValue::Value(Value::String(String::new())),
            "",
        )
    }

    /// The body: what a `StatusCause` says (`Invalid value: -1: ...`).
    pub fn body(&self) -> String {
        let words = self.kind.words();
        let mut body = match (self.kind, &self.value) {
            (
                FieldErrorType::Required
                | FieldErrorType::Forbidden
                | FieldErrorType::TooLong
                | FieldErrorType::Internal,
                _,
            )
            | (_, BadValue::Omitted) => words.to_owned(),
            (_, BadValue::Value(value)) => format!("{words}: {}", go_value(value)),
        };
        if !self.detail.is_empty() {
            body.push_str(": ");
            body.push_str(&self.detail);
        }
        body
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// `errs.ToAggregate().Error()`: one error's text, or `[a, b]`, each text once.
pub fn aggregate(errors: &[FieldError]) -> String {
    let mut texts: Vec<String> = Vec::with_capacity(errors.len());
    for text in errors.iter().map(ToString::to_string) {
        if !texts.contains(&text) {
            texts.push(text);
        }
    }
    match texts.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// A value as `field.Error` prints it: `%q` for a string, `%v` for a number or a boolean, JSON
/// for the rest (`null` included).
pub fn go_value(value: &Value) -> String {
    match value {
        Value::String(text) => go_quote(text),
        Value::Number(number) => go_number(number),
        other => other.to_string(),
    }
}

/// A JSON number as Go's `%v` prints the `int64` or `float64` it decodes to.
pub fn go_number(number: &serde_json::Number) -> String {
    match (number.as_i64(), number.as_f64()) {
        (Some(integer), _) => integer.to_string(),
        (None, Some(float)) => go_float(float),
        (None, None) => number.to_string(),
    }
}

/// A `float64` as Go's `%v` prints it (`strconv.FormatFloat(f, 'g', -1, 64)`): the shortest
/// digits that read back the same, in exponent form (`2.592e+06`) when the exponent is below -4
/// or at least 6.
pub fn go_float(float: f64) -> String {
    if float.is_nan() {
        return "NaN".to_owned();
    }
    if float.is_infinite() {
        return if float > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    let scientific = format!("{float:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..6).contains(&exponent) {
        return format!("{float}");
    }
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.abs())
}

/// A string as Go's `%q` (`strconv.Quote`) writes it: in double quotes, with `"` and `\`
/// escaped, control characters as `\n`, `\t`, `\x1b` or `\u0085`, printable Unicode kept.
pub fn go_quote(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\n' => quoted.push_str("\\n"),
            '\t' => quoted.push_str("\\t"),
            '\r' => quoted.push_str("\\r"),
            '\u{7}' => quoted.push_str("\\a"),
            '\u{8}' => quoted.push_str("\\b"),
            '\u{c}' => quoted.push_str("\\f"),
            '\u{b}' => quoted.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                quoted.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() || c == '\u{feff}' => {
                quoted.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_printed_as_go_prints_them() {
        // `fmt.Sprintf("%v", f)` and `%q` in Go 1.25.
        assert_eq!(go_float(2_592_000.0), "2.592e+06");
        assert_eq!(go_float(3_000_000.5), "3.0000005e+06");
        assert_eq!(go_float(0.5), "0.5");
        assert_eq!(go_float(123_456.0), "123456");
        assert_eq!(go_float(0.000_01), "1e-05");
        assert_eq!(go_float(-1.5), "-1.5");
        assert_eq!(go_quote("a\"b\\c\nd\u{1b}é"), r#""a\"b\\c\nd\x1bé""#);
        assert_eq!(go_value(&serde_json::json!(null)), "null");
        assert_eq!(go_value(&serde_json::json!([1, "a"])), r#"[1,"a"]"#);
    }

    #[test]
    fn several_errors_are_joined_once_each_in_brackets() {
        let one = FieldError::required("spec.target");
        let two = FieldError::invalid("spec.x", &serde_json::json!(-1), "too small");
        assert_eq!(
            aggregate(std::slice::from_ref(&one)),
            "spec.target: Required value"
        );
        assert_eq!(
            aggregate(&[one.clone(), two, one]),
            "[spec.target: Required value, spec.x: Invalid value: -1: too small]"
        );
    }
}
