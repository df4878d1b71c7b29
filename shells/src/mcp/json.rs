//! Tool arguments and structured results between `google.protobuf.Struct`
//! (what the journal holds) and JSON (what MCP speaks).
//!
//! Invariant: no number changes on the way. A Struct number is an f64, so a
//! JSON integer beyond ±2^53 would be rounded: it is refused, naming where
//! it sits (keys and indices, never values). Integral f64 within ±2^53 go
//! out as JSON integers (servers validating `"type": "integer"` want them);
//! non-finite f64 have no JSON form and are refused. Nesting is bounded so a
//! Struct we write still decodes under prost's recursion limit of 100 (each
//! JSON level is two messages: Value and Struct or ListValue).

use pbjson_types::value::Kind;
use pbjson_types::{ListValue, Struct, Value as PbValue};
use serde_json::{Map, Number, Value};

/// Largest integer an f64 carries exactly (2^53).
pub const MAX_SAFE_INTEGER: u64 = 1 << 53;
/// Deepest JSON nesting converted either way.
pub const MAX_DEPTH: usize = 32;
/// Longest location kept in an error.
const MAX_AT: usize = 96;

/// Why a value could not cross between JSON and Struct.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    #[error("integer at {at} is beyond ±2^53 and would be rounded")]
    IntegerOutOfRange { at: String },
    #[error("number at {at} is not finite")]
    NotFinite { at: String },
    #[error("value nests deeper than {limit} levels")]
    TooDeep { limit: usize },
    #[error("structured content is not a JSON object")]
    NotObject,
}

/// A tool call's arguments as the JSON object MCP sends.
pub fn args_to_json(args: &Struct) -> Result<Map<String, Value>, JsonError> {
    struct_to_map(args, &mut String::new(), 0)
}

/// A JSON object (structured tool output) as a Struct.
pub fn json_to_struct(obj: &Map<String, Value>) -> Result<Struct, JsonError> {
    map_to_struct(obj, &mut String::new(), 0)
}

/// Any JSON value that must be an object (`structuredContent`) as a Struct.
pub fn json_value_to_struct(v: &Value) -> Result<Struct, JsonError> {
    match v {
        Value::Object(m) => json_to_struct(m),
        _ => Err(JsonError::NotObject),
    }
}

fn at(path: &str) -> String {
    if path.is_empty() {
        return "/".to_owned();
    }
    if path.len() <= MAX_AT {
        return path.to_owned();
    }
    let mut cut = MAX_AT;
    while !path.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &path[..cut])
}

/// Runs `f` with `seg` appended to `path` (JSON-pointer style), then
/// restores it, so one buffer serves the whole walk.
fn with_seg<T>(path: &mut String, seg: &str, f: impl FnOnce(&mut String) -> T) -> T {
    let len = path.len();
    path.push('/');
    path.push_str(seg);
    let out = f(path);
    path.truncate(len);
    out
}

fn struct_to_map(
    s: &Struct,
    path: &mut String,
    depth: usize,
) -> Result<Map<String, Value>, JsonError> {
    if depth >= MAX_DEPTH {
        return Err(JsonError::TooDeep { limit: MAX_DEPTH });
    }
    // Sorted keys: the JSON sent is the same for the same Struct.
    let mut keys: Vec<&String> = s.fields.keys().collect();
    keys.sort();
    let mut out = Map::new();
    for k in keys {
        let v = &s.fields[k];
        let j = with_seg(path, k, |p| pb_to_json(v, p, depth + 1))?;
        out.insert(k.clone(), j);
    }
    Ok(out)
}

fn pb_to_json(v: &PbValue, path: &mut String, depth: usize) -> Result<Value, JsonError> {
    Ok(match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::NumberValue(n)) => number_to_json(*n, path)?,
        Some(Kind::StructValue(s)) => Value::Object(struct_to_map(s, path, depth)?),
        Some(Kind::ListValue(l)) => {
            if depth >= MAX_DEPTH {
                return Err(JsonError::TooDeep { limit: MAX_DEPTH });
            }
            let mut out = Vec::with_capacity(l.values.len());
            for (i, item) in l.values.iter().enumerate() {
                out.push(with_seg(path, &i.to_string(), |p| {
                    pb_to_json(item, p, depth + 1)
                })?);
            }
            Value::Array(out)
        }
    })
}

fn number_to_json(n: f64, path: &str) -> Result<Value, JsonError> {
    if !n.is_finite() {
        return Err(JsonError::NotFinite { at: at(path) });
    }
    // Exact: n is integral and within ±2^53, so the cast loses nothing.
    if n.fract() == 0.0 && n.abs() <= MAX_SAFE_INTEGER as f64 {
        return Ok(Value::Number(Number::from(n as i64)));
    }
    // Finite, so from_f64 cannot fail; the fallback only keeps this total.
    Ok(Number::from_f64(n).map_or(Value::Null, Value::Number))
}

fn map_to_struct(
    m: &Map<String, Value>,
    path: &mut String,
    depth: usize,
) -> Result<Struct, JsonError> {
    if depth >= MAX_DEPTH {
        return Err(JsonError::TooDeep { limit: MAX_DEPTH });
    }
    let mut fields = std::collections::HashMap::with_capacity(m.len());
    for (k, v) in m {
        let pb = with_seg(path, k, |p| json_to_pb(v, p, depth + 1))?;
        fields.insert(k.clone(), pb);
    }
    Ok(Struct { fields })
}

fn json_to_pb(v: &Value, path: &mut String, depth: usize) -> Result<PbValue, JsonError> {
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Number(n) => Kind::NumberValue(json_number(n, path)?),
        Value::Object(m) => Kind::StructValue(map_to_struct(m, path, depth)?),
        Value::Array(a) => {
            if depth >= MAX_DEPTH {
                return Err(JsonError::TooDeep { limit: MAX_DEPTH });
            }
            let mut values = Vec::with_capacity(a.len());
            for (i, item) in a.iter().enumerate() {
                values.push(with_seg(path, &i.to_string(), |p| {
                    json_to_pb(item, p, depth + 1)
                })?);
            }
            Kind::ListValue(ListValue { values })
        }
    };
    Ok(PbValue { kind: Some(kind) })
}

fn json_number(n: &Number, path: &str) -> Result<f64, JsonError> {
    let out_of_range = || JsonError::IntegerOutOfRange { at: at(path) };
    if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(out_of_range());
        }
        return Ok(i as f64); // within ±2^53: exact
    }
    if let Some(u) = n.as_u64() {
        if u > MAX_SAFE_INTEGER {
            return Err(out_of_range());
        }
        return Ok(u as f64); // within 2^53: exact
    }
    // A float: carried as the f64 it already is. (serde_json, without
    // arbitrary_precision, also reads an integer literal past the u64 range
    // as a float; that rounding happened in the parser, before us, and
    // cannot be told apart from a float such as 6.02e23.)
    let f = n
        .as_f64()
        .ok_or_else(|| JsonError::NotFinite { at: at(path) })?;
    if !f.is_finite() {
        return Err(JsonError::NotFinite { at: at(path) });
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn json_round_trips_through_struct() {
        let v = obj(json!({
            "s": "x", "b": true, "n": null, "i": 42, "neg": -7, "f": 1.5,
            "max": 9_007_199_254_740_992_u64, "min": -9_007_199_254_740_992_i64,
            "list": [1, "two", [3], {"four": 4}], "o": {"p": {"q": []}}
        }));
        let s = json_to_struct(&v).unwrap();
        assert_eq!(args_to_json(&s).unwrap(), v);
    }

    #[test]
    fn integers_beyond_two_to_the_53_are_refused_not_rounded() {
        for big in [
            json!(9_007_199_254_740_993_u64),
            json!(-9_007_199_254_740_993_i64),
            json!(u64::MAX),
        ] {
            let v = obj(json!({"a": [0, {"b": big}]}));
            assert_eq!(
                json_to_struct(&v),
                Err(JsonError::IntegerOutOfRange {
                    at: "/a/1/b".into()
                })
            );
        }
        // Past u64, serde_json reads the literal as an already rounded f64.
        let v: Map<String, Value> =
            serde_json::from_str(r#"{"a": 123456789012345678901234567890}"#).unwrap();
        assert!(
            json_to_struct(&v).is_ok(),
            "a float-typed value is carried as the f64 it already is"
        );
    }

    #[test]
    fn integral_numbers_go_out_as_json_integers() {
        let mut s = Struct::default();
        s.fields.insert("i".into(), PbValue::from(3.0));
        s.fields.insert("f".into(), PbValue::from(0.25));
        s.fields.insert("big".into(), PbValue::from(1e300));
        let j = args_to_json(&s).unwrap();
        assert_eq!(serde_json::to_string(&j["i"]).unwrap(), "3");
        assert_eq!(j["f"], json!(0.25));
        assert_eq!(j["big"], json!(1e300));
    }

    #[test]
    fn non_finite_numbers_are_refused() {
        let mut s = Struct::default();
        s.fields.insert("x".into(), PbValue::from(f64::NAN));
        assert_eq!(
            args_to_json(&s),
            Err(JsonError::NotFinite { at: "/x".into() })
        );
    }

    #[test]
    fn deep_nesting_is_refused_both_ways() {
        let mut v = json!(1);
        for _ in 0..MAX_DEPTH + 1 {
            v = json!({ "k": v });
        }
        let m = obj(v);
        assert_eq!(
            json_to_struct(&m),
            Err(JsonError::TooDeep { limit: MAX_DEPTH })
        );
        let mut v = json!(1);
        for _ in 0..MAX_DEPTH - 1 {
            v = json!([v]);
        }
        let m = obj(json!({ "k": v }));
        let s = json_to_struct(&m).unwrap();
        assert_eq!(args_to_json(&s).unwrap(), m);
    }

    #[test]
    fn structured_content_must_be_an_object() {
        assert_eq!(json_value_to_struct(&json!([1])), Err(JsonError::NotObject));
        assert!(json_value_to_struct(&json!({})).is_ok());
    }
}
