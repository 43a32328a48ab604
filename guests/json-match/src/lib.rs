//! Exact JSON equality, the one comparison gatehouse uses to tell whether an
//! approval request's claimed `tool_params` are the arguments of a real call:
//! the host when it binds an approval to one of several calls in flight
//! (`gatehouse_gateway::calls`), and the reference guardian when it checks an
//! approval against its related call.
//!
//! Nothing goes through `f64` that is not a float on both sides, so a server
//! cannot pass `9007199254740992.0` off as the agent's `9007199254740993`.

use serde_json::Value;

/// JSON equality as a reviewer must read it: objects without regard to key
/// order, arrays in order, strings exactly, and numbers exactly: integers
/// against integers by exact value (never through `f64`, so
/// `9007199254740993` is not `9007199254740992.0`), floats against floats,
/// and an integer never equals a float (`1` is not `1.0`: a text that
/// differs is a different claim, and a float may stand for an integer it
/// only rounds to).
///
/// ```
/// use gatehouse_json_match::same_json;
/// use serde_json::json;
/// assert!(same_json(&json!({"a": 1, "b": [true]}), &json!({"b": [true], "a": 1})));
/// assert!(!same_json(&json!(1), &json!(1.0)));
/// let big: serde_json::Value = serde_json::from_str("9007199254740993").unwrap();
/// let near: serde_json::Value = serde_json::from_str("9007199254740992.0").unwrap();
/// assert!(!same_json(&big, &near));
/// ```
pub fn same_json(left: &Value, right: &Value) -> bool {
    match (left, right) {
        (Value::Number(left), Value::Number(right)) => same_number(left, right),
        (Value::Array(left), Value::Array(right)) => {
            left.len() == right.len() && left.iter().zip(right).all(|(l, r)| same_json(l, r))
        }
        (Value::Object(left), Value::Object(right)) => {
            left.len() == right.len()
                && left
                    .iter()
                    .all(|(key, value)| right.get(key).is_some_and(|other| same_json(value, other)))
        }
        _ => left == right,
    }
}

/// Exact numeric equality (see [`same_json`]).
fn same_number(left: &serde_json::Number, right: &serde_json::Number) -> bool {
    match (integer(left), integer(right)) {
        (Some(left), Some(right)) => left == right,
        (None, None) => matches!((left.as_f64(), right.as_f64()), (Some(l), Some(r)) if l == r),
        // An integer and a float: never the same claim.
        _ => false,
    }
}

/// A JSON integer's exact value.
fn integer(number: &serde_json::Number) -> Option<i128> {
    number
        .as_i64()
        .map(i128::from)
        .or_else(|| number.as_u64().map(i128::from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_exactly() {
        let number = |text: &str| serde_json::from_str::<Value>(text).expect("JSON");
        let same = |left: &str, right: &str| same_json(&number(left), &number(right));
        assert!(!same("9007199254740993", "9007199254740992.0"));
        assert!(!same("9007199254740992.0", "9007199254740993"));
        // 9007199254740993.0 is read as the float 2^53: still not the
        // integer 2^53.
        assert!(!same("9007199254740993.0", "9007199254740992"));
        assert!(!same("9007199254740992", "9007199254740992.0"));
        assert!(same("9007199254740993", "9007199254740993"));
        assert!(same("18446744073709551615", "18446744073709551615"));
        assert!(!same("18446744073709551615", "18446744073709551616.0"));
        assert!(!same("-9223372036854775808", "9223372036854775808"));
        assert!(!same("1", "1.0"));
        assert!(same("1.0", "1.0"));
        assert!(same("0.5", "5e-1"));
        assert!(!same("1.5", "1"));
        assert!(!same("1e300", "1"));
        assert!(same("[1, {\"a\": 2.5}]", "[1, {\"a\": 2.5}]"));
        assert!(!same("[1, {\"a\": 2}]", "[1.0, {\"a\": 2.0}]"));
        assert!(!same("[1, 2]", "[2, 1]"));
        assert!(!same("{\"a\": 1}", "{\"a\": 1, \"b\": 1}"));
    }
}
