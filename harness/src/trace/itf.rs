//! `NAME.itf.json`: the Informal Trace Format
//! (<https://apalache-mc.org/docs/adr/015adr-trace.html>), which other tools read (the
//! `itf` crate, Quint's `ofItf`) and `kvcc replay` re-executes.
//!
//! ```json
//! {"#meta": {"format": "ITF", "source": "specs/x.toml", "point": "{\"prefill.pcp\":2}",
//!            "property": "eventually-freed", "clause": "delay-freed-request-never-freed",
//!            "clause-index": "17", "kvcc-version": "0.1.0", "trace-format-version": "2",
//!            "command": "kvcc check specs/x.toml --trace-dir traces", ...},
//!  "vars": ["D aggregator E", "P req0", ..., "action"],
//!  "states": [{"#meta": {"index": 0, "description": "initial state"},
//!              "action": {"action": "init"}, "P req0": "prefilling",
//!              "P aggregator E": {"#bigint": "2"},
//!              "P aggregator finished_sending": {"#map": [["req0", {"#bigint": "1"}]]}, ...},
//!             ...]}
//! ```
//!
//! Values are ITF's typed forms: integers `{"#bigint": "N"}`, sets `{"#set": [...]}`, maps
//! `{"#map": [[key, value], ...]}`, tuples `{"#tup": [...]}`, phases strings. `#meta`
//! holds only what the ITF spec and its readers accept: strings (a state's `index` is a
//! number), so the matrix point is JSON text. The action of each step is the state
//! variable `action`, a record (`{"action": "init"}` in the initial state). Every state
//! holds every variable; a fact a state does not have is the empty string.

use super::{Trace, Values};
use kvcc_model::describe::Value;
use kvcc_model::Action;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value as Json};
use std::collections::{BTreeMap, BTreeSet};

/// The version of the ITF layout kvcc writes (`#meta.trace-format-version`). Version 1
/// wrote every value as display text and non-strings into `#meta`.
pub const TRACE_FORMAT_VERSION: u32 = 2;

/// The state variable that holds each step's action.
pub const ACTION_VAR: &str = "action";

/// The `action` of the initial state.
const INIT: &str = "init";

pub fn render(trace: &Trace) -> String {
    let all: Vec<&Values> = std::iter::once(&trace.initial_values)
        .chain(trace.steps.iter().map(|s| &s.values))
        .collect();
    let facts: BTreeSet<&String> = all.iter().flat_map(|f| f.keys()).collect();
    let mut states = Vec::new();
    for (index, values) in all.iter().enumerate() {
        let step = index.checked_sub(1).map(|i| &trace.steps[i]);
        let meta = StateMeta {
            index: index as u64,
            description: Some(step.map_or("initial state".into(), |s| s.description.clone())),
        };
        let action = match step {
            Some(s) => to_itf(&serde_json::to_value(s.action).unwrap_or_default()),
            None => json!({ "action": INIT }),
        };
        let mut vars: BTreeMap<String, Json> = facts
            .iter()
            .map(|f| {
                let value = values.get(*f).map_or(Json::from(""), value_to_itf);
                ((*f).clone(), value)
            })
            .collect();
        vars.insert(ACTION_VAR.into(), action);
        states.push(ItfState { meta, vars });
    }
    let meta = ItfMeta {
        format: "ITF".into(),
        format_description: Some("https://apalache-mc.org/docs/adr/015adr-trace.html".into()),
        description: Some(format!(
            "kvcc counterexample to {}: {}",
            trace.clause_name(),
            trace.meaning
        )),
        source: trace.spec_file.clone(),
        spec: Some(trace.spec_name.clone()),
        point: trace.point.to_json().to_string(),
        property: trace.property.clone(),
        clause: trace.clause.clone(),
        clause_index: Some(trace.clause_index.to_string()),
        kind: Some(format!("{:?}", trace.kind).to_lowercase()),
        kvcc_version: Some(crate::VERSION.into()),
        trace_format_version: TRACE_FORMAT_VERSION.to_string(),
        command: Some(trace.command.clone()),
        cost: Some(trace.cost_line()),
        diagnosis: Some(trace.diagnosis.join("\n")),
        other: BTreeMap::new(),
    };
    let mut vars: Vec<String> = facts.into_iter().cloned().collect();
    vars.push(ACTION_VAR.into());
    let doc = ItfTrace { meta, vars, states };
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

/// A trace as `kvcc replay` reads it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ItfTrace {
    #[serde(rename = "#meta")]
    pub meta: ItfMeta,
    pub vars: Vec<String>,
    pub states: Vec<ItfState>,
}

/// The trace's `#meta`: strings only, as the ITF readers require.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ItfMeta {
    pub format: String,
    #[serde(default)]
    pub format_description: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// The spec path as given to `kvcc check`.
    pub source: String,
    #[serde(default)]
    pub spec: Option<String>,
    /// The matrix point, Config field paths to values, as JSON text.
    pub point: String,
    pub property: String,
    pub clause: String,
    /// The clause's position in kvcc's clause list (informative).
    #[serde(default)]
    pub clause_index: Option<String>,
    /// `safety` or `liveness`.
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub kvcc_version: Option<String>,
    pub trace_format_version: String,
    /// The command that reproduces the run.
    #[serde(default)]
    pub command: Option<String>,
    /// `0 faults, 0 expiries, 6 steps (...)`: what the counterexample costs.
    #[serde(default)]
    pub cost: Option<String>,
    /// The trace's diagnosis, one line per `\n`.
    #[serde(default)]
    pub diagnosis: Option<String>,
    /// Any other strings a writer adds (a diagnosis, another tool's notes): kept as they
    /// are, never interpreted by replay.
    #[serde(flatten)]
    pub other: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ItfState {
    #[serde(rename = "#meta")]
    pub meta: StateMeta,
    /// The facts and the `action`, typed.
    #[serde(flatten)]
    pub vars: BTreeMap<String, Json>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StateMeta {
    pub index: u64,
    #[serde(default)]
    pub description: Option<String>,
}

impl ItfState {
    /// The step's action; None for the initial state's `init`.
    pub fn action(&self) -> Result<Option<Action>, String> {
        let value = self
            .vars
            .get(ACTION_VAR)
            .ok_or_else(|| format!("no `{ACTION_VAR}` variable"))?;
        let plain = from_itf(value)?;
        if plain.get("action").and_then(Json::as_str) == Some(INIT) {
            return Ok(None);
        }
        serde_json::from_value(plain)
            .map(Some)
            .map_err(|e| e.to_string())
    }

    /// The state's facts in ITF's forms (every variable but `action`), each checked to be
    /// a value kvcc writes.
    pub fn facts(&self) -> Result<BTreeMap<String, Json>, String> {
        let mut facts = BTreeMap::new();
        for (name, v) in self.vars.iter().filter(|(name, _)| *name != ACTION_VAR) {
            value_from_itf(v).map_err(|e| format!("`{name}`: {e}"))?;
            facts.insert(name.clone(), v.clone());
        }
        Ok(facts)
    }
}

/// A fact's value in ITF's typed forms.
pub fn value_to_itf(value: &Value) -> Json {
    match value {
        Value::Text(s) => Json::from(s.as_str()),
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

/// Plain JSON (an action's serde form) in ITF's forms: integers as `#bigint`, objects as
/// records, arrays as lists.
fn to_itf(json: &Json) -> Json {
    match json {
        Json::Number(n) => json!({ "#bigint": n.to_string() }),
        Json::Array(items) => Json::Array(items.iter().map(to_itf).collect()),
        Json::Object(o) => Json::Object(o.iter().map(|(k, v)| (k.clone(), to_itf(v))).collect()),
        other => other.clone(),
    }
}

/// The inverse of [`to_itf`], also reading plain JSON integers.
fn from_itf(json: &Json) -> Result<Json, String> {
    Ok(match json {
        Json::Object(o) if o.len() == 1 && o.contains_key("#bigint") => {
            let text = o["#bigint"].as_str().unwrap_or_default();
            let n: i64 = text
                .parse()
                .map_err(|_| format!("not a #bigint kvcc reads: {json}"))?;
            Json::from(n)
        }
        Json::Object(o) => {
            let mut out = Map::new();
            for (k, v) in o {
                out.insert(k.clone(), from_itf(v)?);
            }
            Json::Object(out)
        }
        Json::Array(items) => Json::Array(items.iter().map(from_itf).collect::<Result<_, _>>()?),
        other => other.clone(),
    })
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
    }

    #[test]
    fn actions_round_trip_through_records_of_bigints() {
        let action = Action::PrefillFinishes { request: 1 };
        let itf = to_itf(&serde_json::to_value(action).unwrap());
        assert_eq!(
            itf,
            json!({"action": "prefill-finishes", "request": {"#bigint": "1"}})
        );
        let back: Action = serde_json::from_value(from_itf(&itf).unwrap()).unwrap();
        assert_eq!(back, action);
    }
}
