//! Validation of a custom resource by its structural schema's value constraints, as
//! kube-apiserver does it: kube-openapi's schema validator
//! (`k8s.io/kube-openapi/pkg/validation/validate`: `type.go`, `validator.go`,
//! `object_validator.go`, `slice_validator.go`, `values.go`, `errors/schema.go`) turned into field
//! errors by `kubeOpenAPIResultToFieldErrors` (`apiextensions-apiserver/pkg/apiserver/validation/
//! validation.go`), with the ratcheting of unchanged values on update (`ratcheting.go`).
//!
//! Per value, in kube-openapi's order: the type (`nullable`, `x-kubernetes-int-or-string`); for a
//! string its `maxLength`, else `minLength`, else `pattern` (one error at most), then its
//! `format`; for a number `multipleOf`, `minimum`, `maximum` (`exclusiveMinimum`/`Maximum`); for
//! a list its items, `minItems`, `maxItems`, `uniqueItems`; `enum`; for an object `minProperties`,
//! `maxProperties`, the values under `additionalProperties`, the declared properties, then
//! `required`. Each check that fails gives one error, and the checks that do not apply to the
//! value's kind are skipped (a string where an integer is declared is one type error, no range).
//!
//! Ratcheting (`CRDValidationRatcheting`, on by default since 1.30): on an update, the errors
//! of a value equal to the old object's value at the same place are dropped, so an object
//! stored before its CRD tightened can still be written where it did not change. Values are
//! matched by object key only (list items are matched only as a whole list: `x-kubernetes-list-
//! type: map` is not modelled).
//!
//! Not modelled: `allOf`/`anyOf`/`oneOf`/`not` (a structural schema may carry value checks
//! there), `patternProperties`, and the formats `uri`, `email`, `hostname`, `mac`, `isbn*`,
//! `creditcard`, `ssn`, `hexcolor`, `rgbcolor`, `bsonobjectid`, `duration`, `k8s-short-name` and
//! `k8s-long-name`, which are accepted as any string. `date-time`, `date`, `byte`, `uuid*`,
//! `ipv4`, `ipv6`, `cidr` and `password` are checked; any other format is stripped by the API
//! server (`int32`, `int64`, `double`, `uint32`, ... check nothing).

use std::cmp::Ordering;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use serde_json::{Map, Number, Value};

use super::StructuralSchema;
use super::field::{BadValue, FieldError, FieldErrorType, go_float, go_quote};

/// A `pattern`, compiled once; equal when the source is.
#[derive(Clone, Debug)]
pub(super) struct Pattern {
    source: String,
    /// `None`: the pattern does not compile (every string fails, as in kube-openapi).
    regex: Option<regex::Regex>,
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Pattern {
    pub(super) fn new(source: &str) -> Self {
        Self {
            source: source.to_owned(),
            regex: regex::Regex::new(source).ok(),
        }
    }
}

/// The value constraints of one schema node (`JSONSchemaProps` minus structure and defaults).
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Constraints {
    /// `type` (`object`, `array`, `string`, `integer`, `number`, `boolean`); empty: any.
    pub(super) types: Vec<&'static str>,
    /// A string format the API server checks: as the schema names it (for the message), and
    /// normalized (`date-time` is `datetime`).
    pub(super) format: Option<(String, String)>,
    pub(super) enumeration: Vec<Value>,
    pub(super) maximum: Option<f64>,
    pub(super) exclusive_maximum: bool,
    pub(super) minimum: Option<f64>,
    pub(super) exclusive_minimum: bool,
    pub(super) multiple_of: Option<f64>,
    pub(super) max_length: Option<i64>,
    pub(super) min_length: Option<i64>,
    pub(super) pattern: Option<Pattern>,
    pub(super) max_items: Option<i64>,
    pub(super) min_items: Option<i64>,
    pub(super) unique_items: bool,
    pub(super) max_properties: Option<i64>,
    pub(super) min_properties: Option<i64>,
    pub(super) required: Vec<String>,
}

impl Constraints {
    /// The constraints `props` declares.
    pub(super) fn of(props: &JSONSchemaProps) -> Self {
        Self {
            types: types_of(
                props.type_.as_deref(),
                props.x_kubernetes_int_or_string == Some(true),
            ),
            format: checked_format(props.format.as_deref()),
            enumeration: props
                .enum_
                .iter()
                .flatten()
                .map(|json| json.0.clone())
                .collect(),
            maximum: props.maximum,
            exclusive_maximum: props.exclusive_maximum == Some(true),
            minimum: props.minimum,
            exclusive_minimum: props.exclusive_minimum == Some(true),
            multiple_of: props.multiple_of,
            max_length: props.max_length,
            min_length: props.min_length,
            pattern: props.pattern.as_deref().map(Pattern::new),
            max_items: props.max_items,
            min_items: props.min_items,
            unique_items: props.unique_items == Some(true),
            max_properties: props.max_properties,
            min_properties: props.min_properties,
            required: props.required.clone().unwrap_or_default(),
        }
    }
}

/// The types of a schema's `type` and `x-kubernetes-int-or-string`, as kube-openapi reads them.
pub(super) fn types_of(declared: Option<&str>, int_or_string: bool) -> Vec<&'static str> {
    if int_or_string {
        return vec!["integer", "string"];
    }
    match declared {
        Some("object") => vec!["object"],
        Some("array") => vec!["array"],
        Some("string") => vec!["string"],
        Some("integer") => vec!["integer"],
        Some("number") => vec!["number"],
        Some("boolean") => vec!["boolean"],
        _ => Vec::new(),
    }
}

/// The formats kube-apiserver checks among those it keeps; any other is stripped or accepted.
pub(super) fn checked_format(format: Option<&str>) -> Option<(String, String)> {
    let named = format?;
    let normalized = named.replace('-', "");
    matches!(
        normalized.as_str(),
        "datetime"
            | "date"
            | "byte"
            | "uuid"
            | "uuid3"
            | "uuid4"
            | "uuid5"
            | "ipv4"
            | "ipv6"
            | "cidr"
            | "password"
    )
    .then(|| (named.to_owned(), normalized))
}

/// The kind of a JSON value as kube-openapi names it, and the format Go's decoding gives it
/// (an integer decodes to `int64`, any other number to `float64`).
fn kind_of(value: &Value) -> (&'static str, &'static str) {
    match value {
        Value::Null => ("null", ""),
        Value::Bool(_) => ("boolean", ""),
        Value::String(_) => ("string", ""),
        Value::Number(number) if number.is_i64() => ("integer", "int64"),
        Value::Number(_) => ("number", "double"),
        Value::Array(_) => ("array", ""),
        Value::Object(_) => ("object", ""),
    }
}

/// Whether a float is a whole number JSON could write as an integer (`swag.IsFloat64AJSONInteger`).
fn is_json_integer(float: f64) -> bool {
    float.is_finite() && float.fract() == 0.0 && float.abs() < 9_007_199_254_740_992.0
}

/// `parent.key` (the name kube-openapi gives a property), or `key` at the root.
fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

impl StructuralSchema {
    /// The schema errors of `value` at `path` (kube-openapi's name of it: `spec.replicas`), with
    /// ratcheting against `old`, the old object's value at the same place (`None`: none, or not
    /// correlated).
    pub(super) fn check(
        &self,
        value: &Value,
        old: Option<&Value>,
        path: &str,
        errors: &mut Vec<FieldError>,
    ) {
        let before = errors.len();
        self.check_value(value, old, path, errors);
        if errors.len() > before && old.is_some_and(|old| self.unchanged(value, old)) {
            errors.truncate(before);
        }
    }

    fn check_value(
        &self,
        value: &Value,
        old: Option<&Value>,
        path: &str,
        errors: &mut Vec<FieldError>,
    ) {
        let constraints = &self.constraints;
        if value.is_null() {
            if !constraints.types.is_empty() && !self.nullable {
                errors.push(type_error(path, &constraints.types.join(","), "null"));
            }
            self.check_enum(value, path, errors);
            return;
        }
        self.check_type(value, path, errors);
        match value {
            Value::String(text) => {
                check_string(constraints, text, path, errors);
                if let Some((named, format)) = &constraints.format
                    && !format_holds(format, text)
                {
                    errors.push(FieldError::new(
                        FieldErrorType::TypeInvalid,
                        path,
                        BadValue::Value(value.clone()),
                        format!("{path} in body must be of type {named}: {}", go_quote(text)),
                    ));
                }
            }
            Value::Number(number) => check_number(constraints, number, path, errors),
            Value::Array(items) => self.check_items(items, path, errors),
            _ => {}
        }
        self.check_enum(value, path, errors);
        if let Value::Object(map) = value {
            self.check_object(map, old.and_then(Value::as_object), path, errors);
        }
    }

    /// `typeValidator.Validate` (formats that are not checked are stripped, so only the type
    /// is compared, with kube-openapi's leniency for a whole float where an integer is declared
    /// and an integer where a number is).
    fn check_type(&self, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
        let types = &self.constraints.types;
        if types.is_empty() {
            return;
        }
        let (kind, _) = kind_of(value);
        let float_as_int = kind == "number"
            && types.contains(&"integer")
            && value.as_f64().is_some_and(is_json_integer);
        let int_as_float = kind == "integer" && types.contains(&"number");
        if !(types.contains(&kind) || float_as_int || int_as_float) {
            errors.push(type_error(path, &types.join(","), kind));
        }
    }

    fn check_enum(&self, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
        let allowed = &self.constraints.enumeration;
        if allowed.is_empty() || allowed.iter().any(|candidate| same_value(value, candidate)) {
            return;
        }
        let listed: Vec<String> = allowed
            .iter()
            .map(|candidate| match candidate {
                Value::String(text) => go_quote(text),
                other => go_quote(&other.to_string()),
            })
            .collect();
        errors.push(FieldError::new(
            FieldErrorType::NotSupported,
            path,
            BadValue::Value(value.clone()),
            format!("supported values: {}", listed.join(", ")),
        ));
    }

    /// `schemaSliceValidator.Validate`: items (never ratcheted one by one), then the counts.
    fn check_items(&self, items: &[Value], path: &str, errors: &mut Vec<FieldError>) {
        if let Some(schema) = &self.items {
            for (index, item) in items.iter().enumerate() {
                schema.check(item, None, &format!("{path}[{index}]"), errors);
            }
        }
        let constraints = &self.constraints;
        let size = i64::try_from(items.len()).unwrap_or(i64::MAX);
        if let Some(min) = constraints.min_items
            && size < min
        {
            errors.push(FieldError::invalid(
                path,
                &Value::from(size),
                format!("{path} in body should have at least {min} items"),
            ));
        }
        if let Some(max) = constraints.max_items
            && size > max
        {
            errors.push(too_many(path, size, max));
        }
        if constraints.unique_items
            && items
                .iter()
                .enumerate()
                .any(|(index, item)| items.iter().take(index).any(|earlier| earlier == item))
        {
            errors.push(FieldError::invalid(
                path,
                &Value::String(String::new()),
                format!("{path} in body shouldn't contain duplicates"),
            ));
        }
    }

    /// `objectValidator.Validate`: property counts, the values under `additionalProperties`,
    /// the declared properties (each ratcheted against the old object's value of that key),
    /// then `required` (a key present with `null` is there).
    fn check_object(
        &self,
        map: &Map<String, Value>,
        old: Option<&Map<String, Value>>,
        path: &str,
        errors: &mut Vec<FieldError>,
    ) {
        let constraints = &self.constraints;
        let size = i64::try_from(map.len()).unwrap_or(i64::MAX);
        if let Some(min) = constraints.min_properties
            && size < min
        {
            errors.push(FieldError::invalid(
                path,
                &Value::from(size),
                format!("{path} in body should have at least {min} properties"),
            ));
        }
        if let Some(max) = constraints.max_properties
            && size > max
        {
            errors.push(too_many(path, size, max));
        }
        let old_of = |key: &str| old.and_then(|old| old.get(key));
        if let Some(super::Additional::Schema(schema)) = &self.additional {
            for (key, child) in map {
                if !self.properties.contains_key(key) {
                    schema.check(child, old_of(key), &format!("{path}.{key}"), errors);
                }
            }
        }
        for (key, schema) in &self.properties {
            if let Some(child) = map.get(key) {
                schema.check(child, old_of(key), &join(path, key), errors);
            }
        }
        for key in &constraints.required {
            if !map.contains_key(key) {
                errors.push(FieldError::required(join(path, key)));
            }
        }
    }

    /// `CorrelatedObject.CachedDeepEqual`: equal values, where an object's keys must all be
    /// declared (or under an `additionalProperties` schema) to compare equal.
    pub(super) fn unchanged(&self, value: &Value, old: &Value) -> bool {
        match (value, old) {
            (Value::Object(new), Value::Object(old)) => {
                new.len() == old.len()
                    && new
                        .iter()
                        .all(|(key, child)| match (self.child(key), old.get(key)) {
                            (Some(Some(schema)), Some(old_child)) => {
                                schema.unchanged(child, old_child)
                            }
                            _ => false,
                        })
            }
            (Value::Object(_), _) | (_, Value::Object(_)) => false,
            (new, old) => new == old,
        }
    }
}

/// An `InvalidType` error: `<path> in body must be of type <types>: "<kind>"`.
fn type_error(path: &str, types: &str, kind: &str) -> FieldError {
    FieldError::new(
        FieldErrorType::TypeInvalid,
        path,
        BadValue::Value(Value::String(kind.to_owned())),
        format!("{path} in body must be of type {types}: {}", go_quote(kind)),
    )
}

/// `field.TooMany(path, actual, max)`.
fn too_many(path: &str, actual: i64, max: i64) -> FieldError {
    let noun = if max == 1 { "item" } else { "items" };
    FieldError::new(
        FieldErrorType::TooMany,
        path,
        BadValue::Value(Value::from(actual)),
        format!("must have at most {max} {noun}"),
    )
}

/// `stringValidator.Validate`: the first of `maxLength`, `minLength`, `pattern` that fails.
/// Lengths count characters (Unicode code points).
fn check_string(constraints: &Constraints, text: &str, path: &str, errors: &mut Vec<FieldError>) {
    let length = i64::try_from(text.chars().count()).unwrap_or(i64::MAX);
    if let Some(max) = constraints.max_length
        && length > max
    {
        let unit = if max == 1 { "byte" } else { "bytes" };
        errors.push(FieldError::new(
            FieldErrorType::TooLong,
            path,
            BadValue::Omitted,
            format!("may not be more than {max} {unit}"),
        ));
        return;
    }
    if let Some(min) = constraints.min_length
        && length < min
    {
        errors.push(FieldError::invalid(
            path,
            &Value::String(text.to_owned()),
            format!("{path} in body should be at least {min} chars long"),
        ));
        return;
    }
    if let Some(pattern) = &constraints.pattern {
        let matches = pattern
            .regex
            .as_ref()
            .is_some_and(|regex| regex.is_match(text));
        if !matches {
            let shown = match &pattern.regex {
                Some(_) => pattern.source.clone(),
                None => format!("{}, but pattern is invalid", pattern.source),
            };
            errors.push(FieldError::invalid(
                path,
                &Value::String(text.to_owned()),
                format!("{path} in body should match '{shown}'"),
            ));
        }
    }
}

/// `numberValidator.Validate`: `multipleOf`, `minimum`, `maximum`, compared as integers for an
/// integer (the bound truncated, as Go's `int64(max)`) and as floats otherwise.
fn check_number(
    constraints: &Constraints,
    number: &Number,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let shown = Value::Number(number.clone());
    let integer = number.as_i64();
    let float = number.as_f64().unwrap_or(f64::NAN);
    // A bound as the message prints it: `%v` of an int64 for an integer, of a float64 else.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "Go's int64(bound), which saturates the same way for the bounds a CRD can hold"
    )]
    let bound_text = |bound: f64| match integer {
        Some(_) => (bound as i64).to_string(),
        None => go_float(bound),
    };
    if let Some(factor) = constraints.multiple_of {
        #[expect(
            clippy::cast_possible_truncation,
            reason = "Go's int64(multipleOf) for an integer value"
        )]
        let fails = match integer {
            Some(value) => {
                let factor = factor as i64;
                factor <= 0 || value % factor != 0
            }
            None => {
                let quotient = if factor < 1.0 {
                    1.0 / factor * float
                } else {
                    float / factor
                };
                factor <= 0.0 || !is_json_integer(quotient)
            }
        };
        if fails {
            let detail = if factor <= 0.0 {
                format!(
                    "factor MultipleOf declared for {path} must be positive: {}",
                    bound_text(factor)
                )
            } else {
                format!(
                    "{path} in body should be a multiple of {}",
                    bound_text(factor)
                )
            };
            errors.push(FieldError::invalid(path, &shown, detail));
        }
    }
    // Go's comparisons: int64(bound) against an integer, float64 against a float (a NaN is
    // neither below nor above).
    #[expect(
        clippy::cast_possible_truncation,
        reason = "Go's int64(bound) against an integer"
    )]
    let against = |bound: f64| match integer {
        Some(value) => Some(value.cmp(&(bound as i64))),
        None => float.partial_cmp(&bound),
    };
    let below = |bound: f64, exclusive: bool| match against(bound) {
        Some(Ordering::Less) => true,
        Some(Ordering::Equal) => exclusive,
        _ => false,
    };
    let above = |bound: f64, exclusive: bool| match against(bound) {
        Some(Ordering::Greater) => true,
        Some(Ordering::Equal) => exclusive,
        _ => false,
    };
    if let Some(min) = constraints.minimum
        && below(min, constraints.exclusive_minimum)
    {
        let words = if constraints.exclusive_minimum {
            "greater than"
        } else {
            "greater than or equal to"
        };
        errors.push(FieldError::invalid(
            path,
            &shown,
            format!("{path} in body should be {words} {}", bound_text(min)),
        ));
    }
    if let Some(max) = constraints.maximum
        && above(max, constraints.exclusive_maximum)
    {
        let words = if constraints.exclusive_maximum {
            "less than"
        } else {
            "less than or equal to"
        };
        errors.push(FieldError::invalid(
            path,
            &shown,
            format!("{path} in body should be {words} {}", bound_text(max)),
        ));
    }
}

/// Whether two JSON values are the same enum value (numbers compared as numbers, as Go's
/// conversion of the value to the enum entry's type does).
fn same_value(value: &Value, candidate: &Value) -> bool {
    match (value, candidate) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (a, b) => a == b,
    }
}

/// Whether `text` has the string `format` (normalized, from [`checked_format`]).
fn format_holds(format: &str, text: &str) -> bool {
    match format {
        "datetime" => is_date_time(text),
        "date" => is_date(text),
        "byte" => is_base64(text),
        "uuid" | "uuid3" | "uuid4" | "uuid5" => is_uuid(format, text),
        "ipv4" => text.contains('.') && text.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => text.parse::<Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(text),
        _ => true,
    }
}

/// `strfmt.IsDate`: Go's `time.Parse("2006-01-02", text)`.
fn is_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    if bytes.len() != 10 || bytes.get(4) != Some(&b'-') || bytes.get(7) != Some(&b'-') {
        return false;
    }
    let number = |range: std::ops::Range<usize>| {
        text.get(range)
            .filter(|part| part.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|part| part.parse::<u32>().ok())
    };
    let (Some(year), Some(month), Some(day)) = (number(0..4), number(5..7), number(8..10)) else {
        return false;
    };
    let leap = year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400));
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&day)
}

/// `strfmt.IsDateTime`: a date, `t`, then `hh:mm:ss[.frac](z|±hh:mm)`, case-insensitive.
fn is_date_time(text: &str) -> bool {
    if text.len() < 4 {
        return false;
    }
    let lower = text.to_ascii_lowercase();
    let mut parts = lower.split('t');
    let (Some(date), Some(time)) = (parts.next(), parts.next()) else {
        return false;
    };
    if !is_date(date) {
        return false;
    }
    let bytes = time.as_bytes();
    let two = |at: usize| {
        bytes
            .get(at..at + 2)
            .filter(|pair| pair.iter().all(u8::is_ascii_digit))
            .map(|pair| pair.to_vec())
    };
    let (Some(hours), Some(minutes), Some(seconds)) = (two(0), two(3), two(6)) else {
        return false;
    };
    if bytes.get(2) != Some(&b':') || bytes.get(5) != Some(&b':') {
        return false;
    }
    let mut rest = time.get(8..).unwrap_or("");
    // `(.[0-9]+)?`: any one character, then digits.
    if let Some(after) = rest.get(1..)
        && !rest.starts_with(['z', '+', '-'])
    {
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        rest = after.get(digits..).unwrap_or("");
    }
    let zone_ok = rest == "z"
        || (rest.len() == 6
            && rest.starts_with(['+', '-'])
            && rest.as_bytes().get(3) == Some(&b':')
            && [1, 2, 4, 5]
                .iter()
                .all(|&at| rest.as_bytes().get(at).is_some_and(u8::is_ascii_digit)));
    zone_ok
        && hours.as_slice() <= &b"23"[..]
        && minutes.as_slice() <= &b"59"[..]
        && seconds.as_slice() <= &b"59"[..]
}

/// govalidator's `IsBase64`: standard alphabet, padded, in groups of four.
fn is_base64(text: &str) -> bool {
    let bytes = text.as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(4) {
        return false;
    }
    let padding = bytes.iter().rev().take_while(|&&b| b == b'=').count();
    padding <= 2
        && bytes
            .iter()
            .take(bytes.len() - padding)
            .all(|&b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

/// strfmt's UUID patterns (any case, each dash optional; versions 3, 4 and 5 checked).
fn is_uuid(format: &str, text: &str) -> bool {
    static PATTERNS: LazyLock<[Option<regex::Regex>; 4]> = LazyLock::new(|| {
        [
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
        ]
        .map(|pattern| regex::Regex::new(pattern).ok())
    });
    let index = match format {
        "uuid3" => 1,
        "uuid4" => 2,
        "uuid5" => 3,
        _ => 0,
    };
    PATTERNS
        .get(index)
        .and_then(Option::as_ref)
        .is_some_and(|regex| regex.is_match(text))
}

/// `net.ParseCIDR`: an address, `/`, a prefix length that fits it.
fn is_cidr(text: &str) -> bool {
    let Some((address, length)) = text.split_once('/') else {
        return false;
    };
    let Ok(length) = length.parse::<u8>() else {
        return false;
    };
    match address.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => length <= 32,
        Ok(IpAddr::V6(_)) => length <= 128,
        Err(_) => false,
    }
}
