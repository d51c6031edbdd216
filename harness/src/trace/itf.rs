//! `NAME.itf.json`: the Informal Trace Format
//! (<https://apalache-mc.org/docs/adr/015adr-trace.html>), which other tools read and
//! `kvcc replay` re-executes.
//!
//! ```json
//! {"#meta": {"format": "ITF", "source": "specs/x.toml", "point": {"prefill.pcp": 2},
//!            "property": "eventually-freed", "clause": "delay-freed-request-never-freed",
//!            "clause-index": 17, "kvcc-version": "0.1.0", "trace-format-version": 1,
//!            "command": "kvcc check specs/x.toml --trace-dir traces", ...},
//!  "vars": ["D agg ...", "P req0", ...],
//!  "states": [{"#meta": {"index": 0, "action": null, "description": "initial state"},
//!              "P req0": "prefilling", ...}, ...]}
//! ```
//!
//! Every state holds every var; a fact a state does not have is the empty string.

use super::{Facts, Trace};
use kvcc_model::Action;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The version of the ITF layout kvcc writes (`#meta.trace-format-version`).
pub const TRACE_FORMAT_VERSION: u32 = 1;

pub fn render(trace: &Trace) -> String {
    let all: Vec<&Facts> = std::iter::once(&trace.initial)
        .chain(trace.steps.iter().map(|s| &s.facts))
        .collect();
    let vars: BTreeSet<&String> = all.iter().flat_map(|f| f.keys()).collect();
    let mut states = Vec::new();
    for (index, facts) in all.iter().enumerate() {
        let step = index.checked_sub(1).map(|i| &trace.steps[i]);
        let meta = StateMeta {
            index,
            action: step.map(|s| s.action),
            description: Some(step.map_or("initial state".into(), |s| s.description.clone())),
        };
        let facts = vars
            .iter()
            .map(|v| {
                (
                    (*v).clone(),
                    Value::String(facts.get(*v).cloned().unwrap_or_default()),
                )
            })
            .collect();
        states.push(ItfState { meta, facts });
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
        point: match trace.point.to_json() {
            Value::Object(m) => m,
            _ => Map::new(),
        },
        property: trace.property.clone(),
        clause: trace.clause.clone(),
        clause_index: trace.clause_index,
        kind: Some(format!("{:?}", trace.kind).to_lowercase()),
        kvcc_version: Some(crate::VERSION.into()),
        trace_format_version: TRACE_FORMAT_VERSION,
        command: Some(trace.command.clone()),
        cost: Some(trace.cost_line()),
        diagnosis: Some(trace.diagnosis.join("\n")),
    };
    let doc = ItfTrace {
        meta,
        vars: vars.into_iter().cloned().collect(),
        states,
    };
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
    /// The matrix point: Config field paths to values.
    #[serde(default)]
    pub point: Map<String, Value>,
    pub property: String,
    pub clause: String,
    pub clause_index: usize,
    /// `safety` or `liveness`.
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub kvcc_version: Option<String>,
    pub trace_format_version: u32,
    /// The command that reproduces the run.
    #[serde(default)]
    pub command: Option<String>,
    /// `0 faults, 0 expiries, 6 steps (...)`: what the counterexample costs.
    #[serde(default)]
    pub cost: Option<String>,
    /// The trace's diagnosis, one line per `\n`.
    #[serde(default)]
    pub diagnosis: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ItfState {
    #[serde(rename = "#meta")]
    pub meta: StateMeta,
    #[serde(flatten)]
    pub facts: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StateMeta {
    pub index: usize,
    pub action: Option<Action>,
    #[serde(default)]
    pub description: Option<String>,
}

impl ItfState {
    /// The state's facts as strings (a non-string value as its JSON text).
    pub fn fact_strings(&self) -> Facts {
        self.facts
            .iter()
            .map(|(k, v)| {
                let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                (k.clone(), text)
            })
            .collect()
    }
}
