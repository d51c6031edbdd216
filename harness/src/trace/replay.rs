//! `kvcc replay`: re-executes an ITF counterexample against the model built from the spec
//! it names, confirming every state's facts and the violation at the end.

use crate::spec::point::Point;
use crate::spec::Spec;
use crate::trace::itf::{self, ItfTrace, ACTION_VAR, READ_VERSIONS};
use crate::trace::itf_v2::{self, value_from_itf, value_to_itf};
use kvcc_model::checker::replay_path;
use kvcc_model::properties::CLAUSES;
use kvcc_model::InputError;
use kvcc_model::{describe, Action, ContractModel};
use std::collections::{BTreeMap, BTreeSet};

/// What a replay concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replayed {
    /// The trace replays step by step and ends in the violation it records.
    Reproduces { clause: String, step: usize },
    /// It does not, and why.
    DoesNotReproduce(String),
}

/// The first fact where the replayed run and the trace disagree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// 0 for the initial state, else the step after which the states differ.
    pub step: usize,
    pub fact: String,
    pub trace: String,
    pub model: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let when = match self.step {
            0 => "in the initial state".to_string(),
            n => format!("after step {n}"),
        };
        let show = |s: &str| {
            if s.is_empty() {
                "(absent)".to_string()
            } else {
                format!("`{s}`")
            }
        };
        write!(
            f,
            "{when}, fact `{}` is {} in the trace but {} in the model",
            self.fact,
            show(&self.trace),
            show(&self.model)
        )
    }
}

/// A trace read and checked: its document, and each state's action and typed facts.
pub struct Loaded {
    pub trace: ItfTrace,
    /// Its `#meta.trace-format-version`, one of [`READ_VERSIONS`].
    pub version: u32,
    /// The action of each step (the initial state has none).
    pub actions: Vec<Action>,
    /// Each state's facts, in ITF's typed forms.
    pub facts: Vec<ItfFacts>,
}

/// A state's facts as a trace stores them: variable to ITF value (format 2: a flat fact's
/// name).
pub type ItfFacts = BTreeMap<String, serde_json::Value>;

/// Reads and checks the shape of an ITF trace; errors name the file, line and field.
pub fn load(file: &str) -> Result<Loaded, InputError> {
    let text = kvcc_model::input::read_text(std::path::Path::new(file), "trace")?;
    parse(file, &text)
}

/// Checks the shape of an ITF trace's text; `file` names it in errors.
pub fn parse(file: &str, text: &str) -> Result<Loaded, InputError> {
    let bad = |field: &str, message: String| InputError {
        file: Some(file.to_string()),
        field: Some(field.to_string()),
        message,
        ..InputError::default()
    };
    // The version first: a trace of another layout fails on it, not on its first field.
    if let Ok(raw) = serde_json::from_str::<serde_json::Value>(text) {
        let meta = &raw["#meta"];
        if meta["format"].as_str().is_some_and(|f| f != "ITF") {
            return Err(bad(
                "#meta.format",
                format!("is `{}`, not `ITF`", meta["format"]),
            ));
        }
        let version = match &meta["trace-format-version"] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if !READ_VERSIONS.iter().any(|v| v.to_string() == version) {
            let read: Vec<String> = READ_VERSIONS.iter().map(u32::to_string).collect();
            return Err(bad(
                "#meta.trace-format-version",
                format!(
                    "version {version} is not read by kvcc {} (it reads {}); re-run the reproduce command to write the trace again",
                    crate::VERSION,
                    read.join(" and ")
                ),
            ));
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let trace: ItfTrace = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let (line, column) = (inner.line(), inner.column());
        let message = inner.to_string();
        let message = message
            .strip_suffix(&format!(" at line {line} column {column}"))
            .unwrap_or(&message);
        InputError {
            file: Some(file.to_string()),
            at: Some((line, column)),
            field: (path != ".").then_some(path),
            message: format!("not a kvcc ITF trace: {message}"),
            ..InputError::default()
        }
    })?;
    // A trace is one JSON value: anything after it (a second trace appended, a torn
    // write) means the file is not the trace it seems, whatever the first value says.
    de.end().map_err(|e| InputError {
        file: Some(file.to_string()),
        at: Some((e.line(), e.column())),
        message: "not a kvcc ITF trace: data after the JSON value".into(),
        ..InputError::default()
    })?;
    if trace.states.is_empty() {
        return Err(bad("states", "has no state".into()));
    }
    let version: u32 = trace
        .meta
        .trace_format_version
        .parse()
        .ok()
        .filter(|v| READ_VERSIONS.contains(v))
        .ok_or_else(|| {
            bad(
                "#meta.trace-format-version",
                format!(
                    "`{}` is not a version kvcc reads",
                    trace.meta.trace_format_version
                ),
            )
        })?;
    let mut actions = Vec::new();
    let mut facts = Vec::new();
    for (i, state) in trace.states.iter().enumerate() {
        let field = format!("states[{i}].{ACTION_VAR}");
        match (i, state.action(version).map_err(|m| bad(&field, m))?) {
            (0, Some(_)) => return Err(bad(&field, "the initial state has no action".into())),
            (0, None) => {}
            (_, None) => return Err(bad(&field, "missing".into())),
            (_, Some(action)) => actions.push(action),
        }
        let state_facts = state.facts();
        if version == itf_v2::VERSION {
            // Each checked to be a value kvcc writes.
            for (name, v) in &state_facts {
                value_from_itf(v)
                    .map_err(|m| bad(&format!("states[{i}]"), format!("`{name}`: {m}")))?;
            }
        } else if let Some(var) = itf::FACT_VARS
            .iter()
            .find(|v| !state_facts.contains_key(**v))
        {
            return Err(bad(&format!("states[{i}].{var}"), "missing".into()));
        }
        facts.push(state_facts);
    }
    Ok(Loaded {
        trace,
        version,
        actions,
        facts,
    })
}

/// Replays `file`; `spec_override` replaces the spec path recorded in `#meta.source`.
pub fn replay(file: &str, spec_override: Option<&str>) -> Result<Replayed, InputError> {
    let Loaded {
        trace,
        version,
        actions,
        facts: recorded,
    } = load(file)?;
    let model = model_of(file, &trace, spec_override)?;
    let Some(clause) = CLAUSES
        .iter()
        .position(|c| c.property == trace.meta.property && c.clause == trace.meta.clause)
    else {
        // Nothing was replayed: the trace cannot be used, which is an input error.
        return Err(InputError {
            field: Some("#meta.clause".into()),
            ..InputError::file(
                file,
                format!(
                    "kvcc {} has no clause `{}: {}`",
                    crate::VERSION,
                    trace.meta.property,
                    trace.meta.clause
                ),
            )
        });
    };
    // A hand-edited or foreign trace may name ranks or handles this topology lacks; the
    // model's own descriptions index by them, so such a step is refused up front.
    if let Some((step, action)) = actions
        .iter()
        .enumerate()
        .find(|(_, a)| !in_topology(&model, a))
    {
        let json = serde_json::to_string(action).unwrap_or_default();
        return Ok(Replayed::DoesNotReproduce(format!(
            "step {} ({json}) names a request, rank or read handle this model does not have",
            step + 1
        )));
    }
    let difference = first_difference(&model, version, &actions, &recorded);
    let name = format!("{}: {}", CLAUSES[clause].property, CLAUSES[clause].clause);
    Ok(match (replay_path(&model, &actions, clause), difference) {
        (Ok(_), None) => Replayed::Reproduces {
            clause: name,
            step: actions.len(),
        },
        (Ok(_), Some(d)) => {
            Replayed::DoesNotReproduce(format!("the run still ends in `{name}`, but {d}"))
        }
        (Err(e), None) => Replayed::DoesNotReproduce(e.to_string()),
        (Err(e), Some(d)) => Replayed::DoesNotReproduce(format!("{e}; first difference: {d}")),
    })
}

/// The model a trace was found in: its spec (`#meta.source`, or `spec_override`) at its
/// matrix point (`#meta.point`), the override's other matrix paths as the trace's own
/// spec had them. Notes on the point go to stderr.
pub fn model_of(
    file: &str,
    trace: &ItfTrace,
    spec_override: Option<&str>,
) -> Result<ContractModel, InputError> {
    case_of(file, trace, spec_override).map(|(_, _, model)| model)
}

/// [`model_of`], with the spec and the point it was built from (`kvcc explore --trace`).
pub fn case_of(
    file: &str,
    trace: &ItfTrace,
    spec_override: Option<&str>,
) -> Result<(Spec, Point, ContractModel), InputError> {
    let spec_file = match spec_override {
        Some(spec) => spec.to_string(),
        None => recorded_spec(file, &trace.meta.source)?,
    };
    let spec = Spec::load(&spec_file)?;
    let point = serde_json::from_str(&trace.meta.point)
        .map_err(|e| e.to_string())
        .and_then(|json| Point::from_json(&json))
        .map_err(|m| InputError {
            field: Some("#meta.point".into()),
            ..InputError::file(file, m)
        })?;
    // Against another spec, its matrix paths the point leaves out take the values the
    // trace was found with, read from the trace's own spec where it may be read (else
    // the other spec's first values, with a note).
    let recorded = spec_override
        .and_then(|_| recorded_spec(file, &trace.meta.source).ok())
        .and_then(|own| Spec::load(&own).ok())
        .and_then(|own| own.config_for_recorded(&point, None).ok())
        .map(|(config, _)| config);
    // A value the trace's point wrote is the trace's to answer for, not the spec's.
    let (config, notes) = spec
        .config_for_recorded(&point, recorded.as_ref())
        .map_err(|e| match e.field.as_deref() {
            Some(path) if point.get(path).is_some() => InputError {
                field: Some("#meta.point".into()),
                ..InputError::file(file, format!("{path}: {}", e.message))
            },
            _ => e,
        })?;
    for note in notes {
        eprintln!("note: {note}");
    }
    // A trace the spec's search found past a safety violation replays past it too.
    let model = ContractModel::new(config).past_violations(spec.expect.past_violations);
    Ok((spec, point, model))
}

/// Where the spec a trace names (`#meta.source`) is, followed only as [`crate::named`]
/// allows; anything else is refused, naming `--spec`.
fn recorded_spec(trace_file: &str, source: &str) -> Result<String, InputError> {
    let named = crate::named::Named {
        file: trace_file,
        field: "#meta.source",
        path: source,
        extensions: &["toml"],
        advice: "pass --spec PATH to replay against a spec you name",
    };
    let Some(shown) = named.resolve()? else {
        return Err(named.refuse(format!(
            "names `{source}`, which is in neither the working directory nor the trace's directory"
        )));
    };
    if shown != source {
        eprintln!("note: the trace's spec `{source}` found as `{shown}`");
    }
    Ok(shown)
}

/// Whether every request, rank and handle an action names exists in the model.
pub(crate) fn in_topology(model: &ContractModel, action: &Action) -> bool {
    let t = &model.topology;
    let request_ok = |r: u8| usize::from(r) < usize::from(model.config.requests);
    let prefill_ok = |rank: u16| rank < t.prefill_world;
    let handle_ok = |h: u16| usize::from(h) < t.handles.len();
    match *action {
        Action::PrefillFinishes { request }
        | Action::DecodeAdmits { request, .. }
        | Action::DecoderCrashes { request }
        | Action::DecodeRejects { request }
        | Action::PrefillPreempted { request }
        | Action::PrefillPreemptedInFinalStep { request }
        | Action::DecodeFinishes { request }
        | Action::LookupAnswers { request }
        | Action::DecodePreempted { request }
        | Action::ClientAborts { request } => request_ok(request),
        Action::PrefillWorkerLoads { rank, request }
        | Action::LeaseExpires { rank, request }
        | Action::NotificationArrives { rank, request }
        | Action::OffloadStoreRaises { rank, request }
        | Action::StaleStoreCompletes { rank, request } => prefill_ok(rank) && request_ok(request),
        Action::HandshakeCompletes {
            decoder, request, ..
        }
        | Action::DecodeChildLoads { decoder, request }
        | Action::ChildReportsAgain { decoder, request } => {
            decoder < t.decode_world && request_ok(request)
        }
        Action::ReadCompletes {
            handle, request, ..
        }
        | Action::ReadFails { handle, request } => handle_ok(handle) && request_ok(request),
        Action::PrefillEngineSteps { stores_done, .. } => stores_done
            .iter()
            .all(|(rank, request)| prefill_ok(rank) && request_ok(request)),
        Action::DecodeEngineSteps { .. } => true,
    }
}

/// `value` (read from ITF, where every integer is an `Int`) with the integers that `like`
/// (the model's value of the same fact) holds as reports to go made `Remaining` again,
/// and those it holds as requests `Request`.
fn retyped(like: &describe::Value, value: describe::Value) -> describe::Value {
    use describe::Value;
    let first = |items: &[Value]| items.first().cloned();
    match (like, value) {
        (Value::Remaining(_), Value::Int(n)) => Value::Remaining(n),
        // Format 3 writes a request as its number.
        (Value::Request(_), Value::Int(n)) => u8::try_from(n).map_or(Value::Int(n), Value::Request),
        (Value::Map(pairs), Value::Map(got)) => Value::Map(
            got.into_iter()
                .map(|(k, v)| {
                    let k = match pairs.first() {
                        Some((lk, _)) => retyped(lk, k),
                        None => k,
                    };
                    let like = pairs
                        .iter()
                        .find(|(lk, _)| *lk == k)
                        .or_else(|| pairs.first())
                        .map(|(_, lv)| lv.clone());
                    let v = match like {
                        Some(like) => retyped(&like, v),
                        None => v,
                    };
                    (k, v)
                })
                .collect(),
        ),
        (Value::Set(items) | Value::Tup(items), Value::Set(got)) => Value::Set(
            got.into_iter()
                .map(|v| match first(items) {
                    Some(like) => retyped(&like, v),
                    None => v,
                })
                .collect(),
        ),
        (Value::Tup(items) | Value::Set(items), Value::Tup(got)) => Value::Tup(
            got.into_iter()
                .enumerate()
                .map(|(i, v)| match items.get(i).cloned() {
                    Some(like) => retyped(&like, v),
                    None => v,
                })
                .collect(),
        ),
        (_, value) => value,
    }
}

/// Steps the model through `actions` while they are enabled and compares each state's
/// facts with the recorded ones, encoded as the trace's format `version` encodes them.
fn first_difference(
    model: &ContractModel,
    version: u32,
    actions: &[Action],
    recorded: &[ItfFacts],
) -> Option<Difference> {
    use stateright::Model;
    let mut state = model.initial_state();
    let mut enabled = Vec::new();
    for (step, facts) in recorded.iter().enumerate() {
        if step > 0 {
            let action = actions[step - 1];
            enabled.clear();
            model.actions(&state, &mut enabled);
            if !enabled.contains(&action) {
                return None;
            }
            state = model.apply(&state, action)?;
        }
        let difference = if version == itf_v2::VERSION {
            flat_difference(&state, facts)
        } else {
            let described = describe::describe(&state);
            typed_difference(&described, &itf::fact_vars(&described), facts)
        };
        if let Some((fact, trace, model)) = difference {
            return Some(Difference {
                step,
                fact,
                trace,
                model,
            });
        }
    }
    None
}

/// Format 2: the first flat fact that differs, (name, in the trace, in the model).
fn flat_difference(
    state: &kvcc_model::State,
    facts: &ItfFacts,
) -> Option<(String, String, String)> {
    // Compared as the trace stores them, in ITF's forms.
    let typed = describe::values(state);
    let replayed: ItfFacts = typed
        .iter()
        .map(|(name, value)| (name.clone(), value_to_itf(value)))
        .collect();
    let names: BTreeSet<&String> = facts.keys().chain(replayed.keys()).collect();
    // A fact a state does not have is written as the empty string.
    let absent = serde_json::Value::from("");
    // Printed as the trace's text prints them: ITF keeps an integer, not what it
    // counts, so the model's value of the same fact says which integers are `N to go`.
    let text = |name: &str, json: &serde_json::Value| {
        value_from_itf(json).map_or_else(
            |_| json.to_string(),
            |v| match typed.get(name) {
                Some(like) => retyped(like, v).to_string(),
                None => v.to_string(),
            },
        )
    };
    let difference = names.into_iter().find_map(|name| {
        let want = facts.get(name).unwrap_or(&absent);
        let got = replayed.get(name).unwrap_or(&absent);
        (want != got).then(|| (name.clone(), text(name, want), text(name, got)))
    });
    difference
}

/// Format 3: the first place where a variable differs, as a path into it
/// (`P_ranks[1][0].send`), with both values there printed as the trace's text prints the
/// fact (the model's value of it says which integers are requests and which reports to
/// go), or as ITF JSON where the model has no such fact.
fn typed_difference(
    described: &describe::Described,
    replayed: &ItfFacts,
    facts: &ItfFacts,
) -> Option<(String, String, String)> {
    let absent = serde_json::Value::String(String::new());
    let names: BTreeSet<&String> = facts.keys().chain(replayed.keys()).collect();
    names.into_iter().find_map(|name| {
        let want = facts.get(name).unwrap_or(&absent);
        let got = replayed.get(name).unwrap_or(&absent);
        (want != got).then(|| {
            let (place, want, got) = innermost(Place::new(name), want, got);
            let like = model_value(described, &place);
            (place.path, shown(want, like), shown(got, like))
        })
    })
}

/// A place in a format-3 state: its variable, the map keys (request, rank, handle) taken
/// down to a record, and the record's field.
struct Place {
    path: String,
    variable: String,
    keys: Vec<usize>,
    field: Option<String>,
}

impl Place {
    fn new(variable: &str) -> Place {
        Place {
            path: variable.to_string(),
            variable: variable.to_string(),
            keys: Vec::new(),
            field: None,
        }
    }
}

/// Where two differing values differ: down the maps keyed by request, rank and handle
/// (same keys, same order) to the record field that differs; the field's value is a
/// fact, compared whole.
fn innermost<'a>(
    mut place: Place,
    want: &'a serde_json::Value,
    got: &'a serde_json::Value,
) -> (Place, &'a serde_json::Value, &'a serde_json::Value) {
    if place.field.is_some() {
        return (place, want, got);
    }
    let entries = |v: &'a serde_json::Value| v.get("#map").and_then(|m| m.as_array());
    if let (Some(a), Some(b)) = (entries(want), entries(got)) {
        if a.len() == b.len() {
            let differing = a.iter().zip(b).find(|(x, y)| x != y);
            if let Some((x, y)) = differing.filter(|(x, y)| x.get(0) == y.get(0)) {
                if let Some(key) = x[0]["#bigint"].as_str().and_then(|k| k.parse().ok()) {
                    place.path += &format!("[{key}]");
                    place.keys.push(key);
                    return innermost(place, &x[1], &y[1]);
                }
            }
        }
    } else if let (Some(a), Some(b)) = (want.as_object(), got.as_object()) {
        let same_keys = a.len() == b.len() && a.keys().all(|k| b.contains_key(k));
        let record = !a.keys().any(|k| k.starts_with('#')) && !a.contains_key("tag");
        if same_keys && record {
            if let Some((k, x)) = a.iter().find(|(k, x)| b[*k] != **x) {
                place.path += &format!(".{k}");
                place.field = Some(k.clone());
                return innermost(place, x, &b[k]);
            }
        }
    }
    (place, want, got)
}

/// The model's fact at `place`, typed.
fn model_value<'a>(d: &'a describe::Described, place: &Place) -> Option<&'a describe::Value> {
    let in_record = |record: &'a describe::Record| {
        let field = place.field.as_deref()?;
        record.iter().find(|f| f.name == field)?.value.value()
    };
    let keys = &place.keys;
    match (place.variable.as_str(), keys.as_slice()) {
        ("P_requests", [r]) => in_record(d.p_requests.get(*r)?),
        ("D_requests", [r]) => in_record(d.d_requests.get(*r)?),
        ("P_ranks", [rank, r]) => in_record(d.p_ranks.get(*rank)?.1.get(*r)?),
        ("D_ranks", [rank, r]) => in_record(d.d_ranks.get(*rank)?.get(*r)?),
        ("transfers", [h, r]) if place.field.as_deref() == Some("phase") => {
            d.transfers.get(*h)?.phases.get(*r)
        }
        ("P_aggregator", []) => in_record(&d.aggregators[0]),
        ("D_aggregator", []) => in_record(&d.aggregators[1]),
        ("D_free_blocks", []) => d.d_free_blocks.as_ref(),
        ("incidents", []) => Some(&d.incidents),
        _ => None,
    }
}

/// A format-3 value as a trace's text prints the fact (`None` as absent), typed like the
/// model's value of it; its JSON when it is no value kvcc writes.
fn shown(v: &serde_json::Value, like: Option<&describe::Value>) -> String {
    match (v["tag"].as_str(), v.get("value")) {
        (Some("Some"), Some(inner)) => shown(inner, like),
        (Some("None"), _) => String::new(),
        _ => value_from_itf(v).map_or_else(
            |_| v.to_string(),
            |v| match like {
                Some(like) => retyped(like, v).to_string(),
                None => v.to_string(),
            },
        ),
    }
}
