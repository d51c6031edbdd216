//! Reading trace format 2 (`#meta.trace-format-version` "2"), which kvcc wrote before
//! format 3: every fact a flat variable named with its rank and request numbers
//! (`P rank1 (replica) req0`), `""` for a fact a state lacks, and each step's action a
//! record `{"action": "prefill-finishes", "request": {"#bigint": "0"}}` (the initial
//! state's `{"action": "init"}`). `kvcc replay` compares such a trace's facts with
//! [`kvcc_model::describe::values`] in this encoding.

use super::itf::{plain_of_itf, ItfState, ACTION_VAR};
use kvcc_model::describe::Value;
use kvcc_model::Action;
use serde_json::{json, Value as Json};

pub const VERSION: u32 = 2;

/// The `action` of the initial state.
const INIT: &str = "init";

/// The step's action; None for the initial state's `init`.
pub fn action(state: &ItfState) -> Result<Option<Action>, String> {
    let value = state
        .vars
        .get(ACTION_VAR)
        .ok_or_else(|| format!("no `{ACTION_VAR}` variable"))?;
    let plain = plain_of_itf(value)?;
    if plain.get("action").and_then(Json::as_str) == Some(INIT) {
        return Ok(None);
    }
    serde_json::from_value(plain)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// A fact's value in ITF's typed forms.
pub fn value_to_itf(value: &Value) -> Json {
    match value {
        Value::Text(s) => Json::from(s.as_str()),
        Value::Request(r) => Json::from(format!("req{r}")),
        Value::Int(n) | Value::Remaining(n) => json!({ "#bigint": n.to_string() }),
        Value::Set(items) => json!({ "#set": items.iter().map(value_to_itf).collect::<Vec<_>>() }),
        Value::Map(pairs) => json!({
            "#map": pairs.iter().map(|(k, v)| json!([value_to_itf(k), value_to_itf(v)])).collect::<Vec<_>>()
        }),
        Value::Tup(items) => json!({ "#tup": items.iter().map(value_to_itf).collect::<Vec<_>>() }),
    }
}

/// The inverse of [`value_to_itf`] (an integer reads as `Int`, whatever it counts); an
/// integer may also be a plain JSON number, as ITF allows.
pub fn value_from_itf(json: &Json) -> Result<Value, String> {
    let list = |items: &Json| -> Result<Vec<Value>, String> {
        items
            .as_array()
            .ok_or_else(|| format!("not a list: {items}"))?
            .iter()
            .map(value_from_itf)
            .collect()
    };
    match json {
        Json::String(s) => Ok(Value::Text(s.clone())),
        Json::Number(n) => n
            .as_i64()
            .map(Value::Int)
            .ok_or_else(|| format!("not an integer: {n}")),
        Json::Object(o) if o.len() == 1 => {
            let (tag, inner) = o.iter().next().expect("one entry");
            match tag.as_str() {
                "#bigint" => inner
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .map(Value::Int)
                    .ok_or_else(|| format!("not a #bigint kvcc reads: {inner}")),
                "#set" => list(inner).map(Value::Set),
                "#tup" => list(inner).map(Value::Tup),
                "#map" => inner
                    .as_array()
                    .ok_or_else(|| format!("not a #map: {inner}"))?
                    .iter()
                    .map(|pair| match pair.as_array().map(Vec::as_slice) {
                        Some([k, v]) => Ok((value_from_itf(k)?, value_from_itf(v)?)),
                        _ => Err(format!("not a [key, value] pair: {pair}")),
                    })
                    .collect::<Result<_, _>>()
                    .map(Value::Map),
                _ => Err(format!("not a value kvcc writes: {json}")),
            }
        }
        _ => Err(format!("not a value kvcc writes: {json}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_values_round_trip() {
        let value = Value::Map(vec![(
            Value::Text("req0".into()),
            Value::Tup(vec![Value::Int(1), Value::Set(vec![])]),
        )]);
        let itf = value_to_itf(&value);
        assert_eq!(
            itf,
            json!({"#map": [["req0", {"#tup": [{"#bigint": "1"}, {"#set": []}]}]]})
        );
        assert_eq!(value_from_itf(&itf), Ok(value));
        assert_eq!(value_from_itf(&json!(3)), Ok(Value::Int(3)));
        assert!(value_from_itf(&json!({"#unserializable": "x"})).is_err());
        assert_eq!(value_to_itf(&Value::Request(2)), json!("req2"));
    }

    #[test]
    fn actions_are_records_of_bigints() {
        let state = ItfState {
            meta: super::super::itf::StateMeta {
                index: 1,
                description: None,
            },
            vars: [(
                ACTION_VAR.to_string(),
                json!({"action": "prefill-finishes", "request": {"#bigint": "1"}}),
            )]
            .into_iter()
            .collect(),
        };
        assert_eq!(
            action(&state),
            Ok(Some(Action::PrefillFinishes { request: 1 }))
        );
    }
}
