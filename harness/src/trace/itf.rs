//! `NAME.itf.json`: the Informal Trace Format
//! (<https://apalache-mc.org/docs/adr/015adr-trace.html>), which other tools read (the
//! `itf` crate, Quint's `ofItf`) and `kvcc replay` re-executes.
//!
//! Trace format 3 gives every variable one type in every state of every trace, so one
//! typed struct reads the traces of every topology: facts are records in maps keyed by
//! request, rank and read handle, a fact a state or its topology may lack is Quint's
//! `Option` (`{"tag": "Some", "value": v}` or `{"tag": "None", "value": {"#tup": []}}`),
//! and each step's action is a variant, as Quint writes them for model-based testing:
//!
//! ```json
//! {"#meta": {"format": "ITF", "source": "specs/x.toml", "point": "{\"prefill.pcp\":2}",
//!            "property": "eventually-freed", "clause": "delay-freed-request-never-freed",
//!            "trace-format-version": "3", ...},
//!  "vars": ["P_requests", "D_requests", "P_ranks", ..., "action", "mbt::actionTaken",
//!           "mbt::nondetPicks"],
//!  "states": [{"#meta": {"index": 0, "description": "initial state"},
//!              "P_requests": {"#map": [[{"#bigint": "0"}, {"phase": "prefilling", ...}]]},
//!              "P_aggregator": {"E": {"#bigint": "2"}, "finished_sending": {"#map": []}, ...},
//!              "action": {"tag": "Init", "value": {"#tup": []}},
//!              "mbt::actionTaken": "init",
//!              "mbt::nondetPicks": {"request": {"tag": "None", "value": {"#tup": []}}, ...}},
//!             ...]}
//! ```
//!
//! `harness/FORMATS.md` lists every variable and field. `#meta` holds only strings (a
//! state's `index` is a number), as the ITF readers require, so the matrix point is JSON
//! text. Format 2 (flat facts named with their rank and request numbers) is still read:
//! [`super::itf_v2`].

use super::itf_v2;
use super::Trace;
use kvcc_model::describe::{self, Described, Record, Slot, Value};
use kvcc_model::Action;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value as Json};
use std::collections::BTreeMap;

/// The version of the ITF layout kvcc writes (`#meta.trace-format-version`). Version 1
/// wrote every value as display text and non-strings into `#meta`; version 2 wrote flat
/// facts named with their rank and request numbers, `""` for a fact a state lacked, and
/// actions as records of varying fields.
pub const TRACE_FORMAT_VERSION: u32 = 3;

/// The versions `kvcc replay`, `explore --trace` and `confirm` read.
pub const READ_VERSIONS: [u32; 2] = [itf_v2::VERSION, TRACE_FORMAT_VERSION];

/// The state variable that holds each step's action, a variant.
pub const ACTION_VAR: &str = "action";

/// The action's name, as Quint's model-based testing writes it (`init` first).
pub const ACTION_TAKEN_VAR: &str = "mbt::actionTaken";

/// The action's parameters, every one in every state, each an `Option`, as Quint's
/// model-based testing writes its nondeterministic picks.
pub const NONDET_PICKS_VAR: &str = "mbt::nondetPicks";

/// The facts' variables, in the order `vars` lists them.
pub const FACT_VARS: [&str; 9] = [
    "P_requests",
    "D_requests",
    "P_ranks",
    "D_ranks",
    "transfers",
    "P_aggregator",
    "D_aggregator",
    "D_free_blocks",
    "incidents",
];

/// Every parameter an action has (`mbt::nondetPicks`' fields): a unit test checks that
/// every action's fields are among them.
pub const PICKS: [&str; 12] = [
    "request",
    "rank",
    "decoder",
    "handle",
    "ok",
    "prefix_hit",
    "notification_lost",
    "notification_duplicated",
    "output_lost",
    "announces_count",
    "raised",
    "stores_done",
];

/// The variant tag and `mbt::actionTaken` of the initial state.
const INIT_TAG: &str = "Init";
const INIT_TAKEN: &str = "init";

pub fn render(trace: &Trace) -> String {
    let all: Vec<&Described> = std::iter::once(&trace.initial_described)
        .chain(trace.steps.iter().map(|s| &s.described))
        .collect();
    let mut states = Vec::new();
    for (index, described) in all.iter().enumerate() {
        let step = index.checked_sub(1).map(|i| &trace.steps[i]);
        let meta = StateMeta {
            index: index as u64,
            description: Some(step.map_or("initial state".into(), |s| s.description.clone())),
        };
        let mut vars = fact_vars(described);
        vars.extend(action_vars(step.map(|s| &s.action)));
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
    let vars = FACT_VARS
        .iter()
        .chain(&[ACTION_VAR, ACTION_TAKEN_VAR, NONDET_PICKS_VAR])
        .map(|v| v.to_string())
        .collect();
    let doc = ItfTrace { meta, vars, states };
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

/// A state's facts as format 3 writes them: [`FACT_VARS`] to their values.
pub fn fact_vars(d: &Described) -> BTreeMap<String, Json> {
    let by_request = |records: &[Record], extra: &dyn Fn(usize) -> Vec<(&'static str, Json)>| {
        int_map(records.iter().enumerate().map(|(i, r)| {
            let mut record = record(r);
            for (name, value) in extra(i) {
                record.insert(name.into(), value);
            }
            Json::Object(record)
        }))
    };
    let none = |_| Vec::new();
    let p_ranks = int_map(d.p_ranks.iter().map(|(replica, requests)| {
        let role = if *replica { "replica" } else { "transfer" };
        by_request(requests, &|_| vec![("role", Json::from(role))])
    }));
    let d_ranks = int_map(d.d_ranks.iter().map(|requests| by_request(requests, &none)));
    let kind = describe::transfer_noun_of(d.push);
    let transfers = int_map(d.transfers.iter().map(|t| {
        int_map(t.phases.iter().map(|phase| {
            json!({
                "p_rank": int(i64::from(t.p_rank)),
                "d_rank": int(i64::from(t.d_rank)),
                "kind": kind,
                "phase": value(phase),
            })
        }))
    }));
    let [p_aggregator, d_aggregator] = &d.aggregators;
    [
        ("P_requests", by_request(&d.p_requests, &none)),
        ("D_requests", by_request(&d.d_requests, &none)),
        ("P_ranks", p_ranks),
        ("D_ranks", d_ranks),
        ("transfers", transfers),
        ("P_aggregator", Json::Object(record(p_aggregator))),
        ("D_aggregator", Json::Object(record(d_aggregator))),
        ("D_free_blocks", option(d.d_free_blocks.as_ref())),
        ("incidents", value(&d.incidents)),
    ]
    .into_iter()
    .map(|(name, v)| (name.to_string(), v))
    .collect()
}

/// `action`, `mbt::actionTaken` and `mbt::nondetPicks` of a state: of the step's action,
/// or of the initial state (None).
pub fn action_vars(action: Option<&Action>) -> BTreeMap<String, Json> {
    let unit = json!({"#tup": []});
    let (tag, taken, fields) = match action {
        None => (INIT_TAG, INIT_TAKEN, Map::new()),
        Some(a) => {
            let name = describe::action_name(a);
            (name, name, action_fields(a))
        }
    };
    let variant = if fields.is_empty() && action.is_none() {
        unit
    } else {
        Json::Object(fields.clone())
    };
    let picks: Map<String, Json> = PICKS
        .iter()
        .map(|p| (p.to_string(), quint_option(fields.get(*p).cloned())))
        .collect();
    [
        (ACTION_VAR, json!({"tag": tag, "value": variant})),
        (ACTION_TAKEN_VAR, Json::from(taken)),
        (NONDET_PICKS_VAR, Json::Object(picks)),
    ]
    .into_iter()
    .map(|(name, v)| (name.to_string(), v))
    .collect()
}

/// An action's fields (its serde form without the tag), named in snake case, in ITF's
/// forms: integers `#bigint`, the stores a step finds done a `#set` of records.
fn action_fields(action: &Action) -> Map<String, Json> {
    let Ok(Json::Object(plain)) = serde_json::to_value(action) else {
        return Map::new();
    };
    plain
        .into_iter()
        .filter(|(k, _)| k != "action")
        .map(|(k, v)| {
            let v = match v {
                Json::Array(items) => {
                    json!({"#set": items.iter().map(itf_of_plain).collect::<Vec<_>>()})
                }
                other => itf_of_plain(&other),
            };
            (k.replace('-', "_"), v)
        })
        .collect()
}

/// The action a format-3 state records; None for the initial state's `Init`.
fn action_of(state: &ItfState) -> Result<Option<Action>, String> {
    let variant = state
        .vars
        .get(ACTION_VAR)
        .ok_or_else(|| format!("no `{ACTION_VAR}` variable"))?;
    let tag = variant["tag"]
        .as_str()
        .ok_or_else(|| format!("not a variant (`{{\"tag\": ..., \"value\": ...}}`): {variant}"))?;
    if tag == INIT_TAG {
        return Ok(None);
    }
    let mut plain = Map::new();
    plain.insert("action".into(), Json::from(kebab(tag)));
    if let Some(fields) = variant["value"].as_object() {
        for (k, v) in fields {
            let v = match v.get("#set") {
                Some(items) => plain_of_itf(items)?,
                None => plain_of_itf(v)?,
            };
            plain.insert(k.replace('_', "-"), v);
        }
    }
    serde_json::from_value(Json::Object(plain))
        .map(Some)
        .map_err(|e| format!("`{tag}`: {e}"))
}

/// `PrefillFinishes` as serde names the variant: `prefill-finishes`.
fn kebab(tag: &str) -> String {
    let mut out = String::new();
    for (i, c) in tag.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// A record's fields by name, each in ITF's forms.
fn record(fields: &Record) -> Map<String, Json> {
    fields
        .iter()
        .map(|f| {
            let v = match &f.value {
                Slot::Always(v) => value(v),
                Slot::Maybe(v) => option(v.as_ref()),
            };
            (f.name.to_string(), v)
        })
        .collect()
}

/// Quint's `Option`: `Some(v)` or `None`, as its ITF writes variants.
fn option(v: Option<&Value>) -> Json {
    quint_option(v.map(value))
}

fn quint_option(v: Option<Json>) -> Json {
    match v {
        Some(v) => json!({"tag": "Some", "value": v}),
        None => json!({"tag": "None", "value": {"#tup": []}}),
    }
}

fn int(n: i64) -> Json {
    json!({ "#bigint": n.to_string() })
}

/// A map keyed by position (a request, rank or handle number).
fn int_map(items: impl Iterator<Item = Json>) -> Json {
    let pairs: Vec<Json> = items
        .enumerate()
        .map(|(i, v)| json!([int(i as i64), v]))
        .collect();
    json!({ "#map": pairs })
}

/// A fact's value in ITF's typed forms; a request is its number.
fn value(v: &Value) -> Json {
    match v {
        Value::Text(s) => Json::from(s.as_str()),
        Value::Request(r) => int(i64::from(*r)),
        Value::Int(n) | Value::Remaining(n) => int(*n),
        Value::Set(items) => json!({ "#set": items.iter().map(value).collect::<Vec<_>>() }),
        Value::Map(pairs) => json!({
            "#map": pairs.iter().map(|(k, v)| json!([value(k), value(v)])).collect::<Vec<_>>()
        }),
        Value::Tup(items) => json!({ "#tup": items.iter().map(value).collect::<Vec<_>>() }),
    }
}

/// Plain JSON (an action's serde form) in ITF's forms: integers as `#bigint`, objects as
/// records, arrays as lists.
pub(crate) fn itf_of_plain(json: &Json) -> Json {
    match json {
        Json::Number(n) => json!({ "#bigint": n.to_string() }),
        Json::Array(items) => Json::Array(items.iter().map(itf_of_plain).collect()),
        Json::Object(o) => Json::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), itf_of_plain(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The inverse of [`itf_of_plain`], also reading plain JSON integers.
pub(crate) fn plain_of_itf(json: &Json) -> Result<Json, String> {
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
                out.insert(k.clone(), plain_of_itf(v)?);
            }
            Json::Object(out)
        }
        Json::Array(items) => {
            Json::Array(items.iter().map(plain_of_itf).collect::<Result<_, _>>()?)
        }
        other => other.clone(),
    })
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
    /// The step's action; None for the initial state. `version` is the trace's.
    pub fn action(&self, version: u32) -> Result<Option<Action>, String> {
        if version == itf_v2::VERSION {
            itf_v2::action(self)
        } else {
            action_of(self)
        }
    }

    /// The state's facts in ITF's forms (every variable but the action's).
    pub fn facts(&self) -> BTreeMap<String, Json> {
        self.vars
            .iter()
            .filter(|(name, _)| {
                ![ACTION_VAR, ACTION_TAKEN_VAR, NONDET_PICKS_VAR].contains(&name.as_str())
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvcc_model::offload::StoresDone;

    /// One action of every kind (`describe::ACTION_NAMES` checks none is missing).
    fn every_action() -> Vec<Action> {
        let stores: StoresDone =
            serde_json::from_value(json!([{"rank": 1, "request": 0}])).unwrap();
        vec![
            Action::PrefillFinishes { request: 1 },
            Action::PrefillWorkerLoads {
                rank: 1,
                request: 0,
            },
            Action::PrefillEngineSteps {
                output_lost: true,
                announces_count: false,
                stores_done: stores,
                raised: true,
            },
            Action::LeaseExpires {
                rank: 0,
                request: 1,
            },
            Action::NotificationArrives {
                rank: 1,
                request: 0,
            },
            Action::OffloadStoreRaises {
                rank: 0,
                request: 0,
            },
            Action::PrefillPreempted { request: 0 },
            Action::PrefillPreemptedInFinalStep { request: 0 },
            Action::StaleStoreCompletes {
                rank: 0,
                request: 0,
            },
            Action::DecodeAdmits {
                request: 0,
                prefix_hit: true,
            },
            Action::DecoderCrashes { request: 0 },
            Action::DecodeRejects { request: 0 },
            Action::HandshakeCompletes {
                decoder: 1,
                request: 0,
                ok: false,
            },
            Action::ReadCompletes {
                handle: 2,
                request: 1,
                notification_lost: false,
                notification_duplicated: true,
            },
            Action::ReadFails {
                handle: 0,
                request: 0,
            },
            Action::DecodeChildLoads {
                decoder: 0,
                request: 0,
            },
            Action::ChildReportsAgain {
                decoder: 0,
                request: 0,
            },
            Action::DecodeEngineSteps {
                output_lost: false,
                raised: true,
            },
            Action::ClientAborts { request: 0 },
            Action::DecodeFinishes { request: 0 },
            Action::LookupAnswers { request: 0 },
            Action::DecodePreempted { request: 0 },
        ]
    }

    #[test]
    fn every_action_is_a_variant_that_reads_back() {
        let actions = every_action();
        let mut names: Vec<&str> = actions.iter().map(describe::action_name).collect();
        names.sort_unstable();
        let mut all = describe::ACTION_NAMES.to_vec();
        all.sort_unstable();
        assert_eq!(names, all, "one action of every kind");
        for action in actions {
            let vars = action_vars(Some(&action));
            let state = ItfState {
                meta: StateMeta {
                    index: 1,
                    description: None,
                },
                vars: vars.clone(),
            };
            assert_eq!(state.action(TRACE_FORMAT_VERSION), Ok(Some(action)));
            let fields = vars[ACTION_VAR]["value"].as_object().unwrap();
            for name in fields.keys() {
                assert!(PICKS.contains(&name.as_str()), "{name} is not in PICKS");
            }
            let picks = vars[NONDET_PICKS_VAR].as_object().unwrap();
            assert_eq!(picks.len(), PICKS.len());
            for (name, pick) in picks {
                match fields.get(name) {
                    Some(v) => assert_eq!(pick, &json!({"tag": "Some", "value": v})),
                    None => assert_eq!(pick["tag"], "None"),
                }
            }
        }
    }

    #[test]
    fn actions_are_tagged_variants_with_every_field() {
        let vars = action_vars(Some(&Action::DecodeEngineSteps {
            output_lost: true,
            raised: false,
        }));
        assert_eq!(
            vars[ACTION_VAR],
            json!({"tag": "DecodeEngineSteps", "value": {"output_lost": true, "raised": false}})
        );
        assert_eq!(vars[ACTION_TAKEN_VAR], "DecodeEngineSteps");
        let init = action_vars(None);
        assert_eq!(
            init[ACTION_VAR],
            json!({"tag": "Init", "value": {"#tup": []}})
        );
        assert_eq!(init[ACTION_TAKEN_VAR], "init");
    }

    #[test]
    fn facts_a_state_may_lack_are_options() {
        let v = Value::Tup(vec![Value::Int(1), Value::Int(2)]);
        assert_eq!(
            option(Some(&v)),
            json!({"tag": "Some", "value": {"#tup": [{"#bigint": "1"}, {"#bigint": "2"}]}})
        );
        assert_eq!(option(None), json!({"tag": "None", "value": {"#tup": []}}));
        assert_eq!(
            value(&Value::Map(vec![(Value::Request(1), Value::Remaining(2))])),
            json!({"#map": [[{"#bigint": "1"}, {"#bigint": "2"}]]})
        );
    }
}
