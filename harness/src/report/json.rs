//! `kvcc check --format json`: one JSON object per check, one per line, in check order;
//! `kvcc merge` reads them back. An input error is a line of its own, `{"error": {...}}`.
//!
//! ```json
//! {"format_version": 3, "kvcc_version": "0.1.0", "kvcc_commit": "64282b6...",
//!  "kvcc_dirty": false, "spec": "seed-59325", "file": "specs/seed-59325.toml",
//!  "spec_hash": "5f0c6a8d2e4b1c37", "point": {"prefill.pcp": 2},
//!  "verdict": "violated", "inconclusive_reason": null, "incomplete_reason": null,
//!  "violations": [{"property": "eventually-freed",
//!                  "clause": "delay-freed-request-never-freed", "depth": 6}],
//!  "expected": {"verdict": "violated", "violates": ["eventually-freed"]},
//!  "matches": true, "unreached": [], "unique_states": 13, "transitions": 19, "max_depth": 6,
//!  "seconds": 0.002, "states_per_second": 6500.0, "one_request_for": null,
//!  "every_request": null,
//!  "fingerprint_bits": 64, "collision_probability": 4.2e-18, "traces": [],
//!  "point_paths": ["prefill.pcp"], "line": 12, "check": 0, "checks": 1, "shard": null,
//!  "settings": {"max_states": null, "max_depth": null, "timeout_seconds": null,
//!               "max_memory": null, "shortest": false, "exact": false,
//!               "symmetry": true, "independence": true, "past_violations": false, "first_violation": false,
//!               "points": []},
//!  "run": "9a3e0c1d7b2f4e65"}
//! ```
//!
//! - `kvcc_commit`: the commit kvcc was built from (`unknown` outside a checkout).
//! - `kvcc_dirty`: whether a file kvcc was built from differed from that commit (see
//!   `kvcc --version`); null when not known (not built from a git checkout, or the commit
//!   was given by the builder as `KVCC_COMMIT`). Absent from lines of a kvcc before it.
//! - `spec_hash`: xxh3-64 of the spec file's bytes, 16 hex digits.
//! - `verdict`: `holds`, `violated` or `inconclusive` (a limit cut the run before any
//!   violation: `inconclusive_reason` says which). A run cut after a violation is
//!   `violated`, and `incomplete_reason` says which limit cut it: `violations` lists what
//!   was found before the cut (each replayed, so certain); others may lie past it.
//! - `unreached`: the expected properties an incomplete run did not reach, which leave the
//!   check undecided (`matches` false, never a proven mismatch); empty otherwise.
//! - `point`: the matrix point's Config field paths and values (`{}` without a matrix).
//! - `expected.violates`: present (possibly empty) for `"violated"` only.
//! - `depth`: steps of the violation's shortest counterexample.
//! - `collision_probability`: the chance that two of the explored states shared a
//!   `fingerprint_bits`-bit fingerprint, which could have hidden a state (and so a
//!   violation); both null under `--exact`, which compares states in full.
//! - `one_request_for`: for a check that held for one request standing for all of its
//!   requests, where no behaviour couples them (`kvcc_model::independence`), their
//!   number; the counts are that one request's search. Null when every request was
//!   explored (absent from lines of a kvcc before it).
//! - `every_request`: for a check of several requests that explored every request, why
//!   one could not stand for them: the behaviour coupling them, or that the one request
//!   did not hold. Null otherwise and under `--no-independence`.
//! - `traces`: files written by `--trace-dir` (empty without it).
//! - `point_paths`: the point's paths in matrix order (`point`'s keys are sorted).
//! - `line`: the spec line that states the expectation.
//! - `check`, `checks`: this check's position in the whole (unsharded) run and how many
//!   checks that run has; `shard`: `"I/N"` under `--shard`, else null.
//! - `settings`: the command-line settings that can change a verdict or which checks run.
//! - `run`: xxh3-64 of the run's identity: kvcc's version, commit and tree state, the settings, every
//!   spec file of the run with its `spec_hash`, and `checks`. Shards of one run share it.
//!
//! Fields are only ever added within one `format_version`. Version 2 added `kvcc_commit`,
//! `spec_hash`, `settings` and `run`, which `kvcc merge` requires; later, `kvcc_dirty`, and
//! `kvcc_commit` and `kvcc_dirty` on error lines. Version 3 changed what `verdict` means
//! for a run cut after a violation (`violated`, was `inconclusive`) and added
//! `incomplete_reason` and `unreached`.

use crate::run::{Observed, Outcome, Violation};
use crate::shard::Shard;
use crate::spec::point::Point;
use crate::spec::Expectation;
use kvcc_model::checker::fingerprint_bytes;
use kvcc_model::properties::{CLAUSES, PROPERTIES};
use kvcc_model::InputError;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// The version of this line format.
pub const FORMAT_VERSION: u32 = 3;

/// The settings of `kvcc check` that can change a verdict, a counterexample or which
/// checks run. Threads are not among them (the checker is deterministic), nor are the
/// outputs (`--format`, `--junit`, `--trace-dir`, `--all-traces`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunSettings {
    /// `--max-states` as given; null: the spec's limit.
    pub max_states: Option<u64>,
    /// `--max-depth` as given; null: the spec's limit.
    pub max_depth: Option<u32>,
    /// `--timeout` as given; null: the spec's limit.
    pub timeout_seconds: Option<u64>,
    /// As given; null is the default, a share of the machine's memory.
    pub max_memory: Option<u64>,
    /// `--shortest`.
    pub shortest: bool,
    /// `--exact`.
    pub exact: bool,
    /// False under `--no-symmetry`.
    pub symmetry: bool,
    /// False under `--no-independence` (absent from lines of a kvcc before it, which
    /// explored every request: false).
    #[serde(default)]
    pub independence: bool,
    /// `--past-violations` (absent from lines of a kvcc before it: false).
    #[serde(default)]
    pub past_violations: bool,
    /// `--first-violation` (absent from lines of a kvcc before it: false).
    #[serde(default)]
    pub first_violation: bool,
    /// The `--point` selectors, as `path=value`.
    pub points: Vec<String>,
}

/// Which run a line belongs to: the code that checked it, its settings and the content
/// of every spec it checked. `kvcc merge` refuses lines of different runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunIdentity {
    pub kvcc_version: String,
    pub kvcc_commit: String,
    pub kvcc_dirty: Option<bool>,
    pub settings: RunSettings,
    /// Each spec file of the run, as given, to the [`spec_hash`] of its content.
    pub spec_hashes: BTreeMap<String, String>,
    /// A hash of all the above and the run's check count.
    pub run: String,
}

/// What the `run` hash covers, in a fixed field order.
#[derive(Serialize)]
struct Hashed<'a> {
    kvcc_version: &'a str,
    kvcc_commit: &'a str,
    kvcc_dirty: Option<bool>,
    settings: &'a RunSettings,
    specs: &'a [(String, String)],
    checks: usize,
}

impl RunIdentity {
    /// The identity of this kvcc's run over `specs` (file as given, content), in plan
    /// order, planning `checks` checks.
    pub fn new(settings: RunSettings, specs: &[(&str, &str)], checks: usize) -> RunIdentity {
        let specs: Vec<(String, String)> = specs
            .iter()
            .map(|(file, text)| (file.to_string(), spec_hash(text)))
            .collect();
        let hashed = Hashed {
            kvcc_version: crate::VERSION,
            kvcc_commit: crate::COMMIT,
            kvcc_dirty: crate::dirty(),
            settings: &settings,
            specs: &specs,
            checks,
        };
        let text = serde_json::to_string(&hashed).unwrap_or_default();
        RunIdentity {
            kvcc_version: crate::VERSION.to_string(),
            kvcc_commit: crate::COMMIT.to_string(),
            kvcc_dirty: crate::dirty(),
            settings,
            spec_hashes: specs.into_iter().collect(),
            run: format!("{:016x}", fingerprint_bytes(text.as_bytes())),
        }
    }
}

/// xxh3-64 of a spec file's content, as 16 hex digits.
pub fn spec_hash(text: &str) -> String {
    format!("{:016x}", fingerprint_bytes(text.as_bytes()))
}

/// Where a check stands in the whole run, for `kvcc merge` to put shards back together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub check: usize,
    pub checks: usize,
    pub shard: Option<Shard>,
}

/// One check, in the documented field order.
#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(title = "check")]
pub struct Line {
    /// This format's version.
    #[schemars(schema_with = "format_version")]
    pub format_version: u32,
    /// The kvcc that produced the line.
    pub kvcc_version: String,
    /// The commit kvcc was built from (`unknown` outside a git checkout of kvcc).
    pub kvcc_commit: String,
    /// Whether a file kvcc is built from differed from that commit at build time; null
    /// when not known. Absent from lines of a kvcc before it: null.
    #[serde(default)]
    pub kvcc_dirty: Option<bool>,
    /// The spec's name.
    pub spec: String,
    /// The spec path as given on the command line.
    pub file: String,
    /// xxh3-64 of the spec file's bytes, 16 hex digits.
    #[schemars(regex(pattern = "^[0-9a-f]{16}$"))]
    pub spec_hash: String,
    /// The matrix point: Config field path to value (`{}` without a matrix).
    #[schemars(with = "BTreeMap<String, Value>")]
    pub point: Value,
    /// The verdict the checker reached.
    #[schemars(schema_with = "verdict")]
    pub verdict: String,
    /// Which limit cut the run before any violation was found (with `inconclusive`).
    pub inconclusive_reason: Option<String>,
    /// For `violated`: the limit that cut the run after its violations; null when the
    /// run explored every reachable state.
    pub incomplete_reason: Option<String>,
    /// One per violated clause, in clause order.
    pub violations: Vec<ViolationLine>,
    /// The expectation, as the spec wrote it.
    #[schemars(schema_with = "expectation")]
    pub expected: Value,
    /// The verdict meets the expectation.
    pub matches: bool,
    /// Expected properties an incomplete run did not reach.
    #[schemars(with = "Vec<Property>")]
    pub unreached: Vec<String>,
    /// Unique states explored.
    pub unique_states: u64,
    /// Transitions explored.
    pub transitions: u64,
    /// The deepest state's distance from the initial state.
    pub max_depth: u32,
    /// Wall-clock seconds; not reproducible.
    pub seconds: f64,
    /// Unique states per wall-clock second; not reproducible.
    pub states_per_second: f64,
    /// For a check that held for one request standing for all of its requests (nothing
    /// couples them: `kvcc_model::independence`), how many requests that one stood for;
    /// the counts are that search's. Null when every request was explored. Absent from
    /// lines of a kvcc before it: null.
    #[serde(default)]
    pub one_request_for: Option<u8>,
    /// For a check of several requests that explored every request: why one could not
    /// stand for them (a behaviour coupling them, or the one request not holding). Null
    /// otherwise, and under `--no-independence`; absent from lines of a kvcc before it.
    #[serde(default)]
    pub every_request: Option<String>,
    /// 64, or null when states were compared in full (`--exact`).
    pub fingerprint_bits: Option<u32>,
    /// The chance a fingerprint collision hid a state; null under `--exact`.
    pub collision_probability: Option<f64>,
    /// Files written by `--trace-dir` (empty without it).
    pub traces: Vec<String>,
    /// The point's paths in matrix (file) order; `point` is a JSON object, whose keys
    /// are sorted.
    pub point_paths: Vec<String>,
    /// The spec line that states the expectation.
    pub line: usize,
    /// This check's position (0-based) in the whole, unsharded run.
    pub check: usize,
    /// How many checks the whole run has.
    pub checks: usize,
    /// `I/N` under `--shard`, else null.
    #[schemars(regex(pattern = "^[0-9]+/[0-9]+$"))]
    pub shard: Option<String>,
    /// The command-line settings that can change a verdict, a counterexample or which
    /// checks run.
    pub settings: RunSettings,
    /// xxh3-64 of the run's identity; every line of one run, in every shard, has the same.
    #[schemars(regex(pattern = "^[0-9a-f]{16}$"))]
    pub run: String,
}

/// A violated clause.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct ViolationLine {
    #[schemars(with = "Property")]
    pub property: String,
    /// The clause of the property (`kvcc_model::properties::CLAUSES`).
    #[schemars(schema_with = "clause")]
    pub clause: String,
    /// The length of the reported counterexample.
    pub depth: usize,
}

/// A line of `kvcc check --format json` (and of `kvcc merge --format json`): a check, or an
/// input error.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)] // only its schema is used: `read` tells the two apart by `error`
enum JsonLine {
    Check(Box<Line>),
    Error(ErrorLine),
}

/// The JSON Schema (draft 2020-12) of one line, as `kvcc schema json-lines` prints it.
pub fn schema() -> Value {
    let mut root = schemars::schema_for!(JsonLine).to_value();
    root["$id"] = format!("urn:kvcc:json-lines:{FORMAT_VERSION}").into();
    root["title"] = format!("kvcc check --format json line, format {FORMAT_VERSION}").into();
    root
}

fn format_version(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "const": FORMAT_VERSION })
}

fn verdict(_: &mut SchemaGenerator) -> Schema {
    let words = [
        Observed::Holds,
        Observed::Violated { incomplete: None },
        Observed::Inconclusive(String::new()),
    ]
    .map(|o| o.word());
    json_schema!({ "enum": words })
}

fn clause(_: &mut SchemaGenerator) -> Schema {
    let clauses: BTreeSet<&str> = CLAUSES.iter().map(|c| c.clause).collect();
    json_schema!({ "enum": clauses })
}

/// A contract property (`kvcc_model::properties::PROPERTIES`).
struct Property;

impl JsonSchema for Property {
    fn schema_name() -> Cow<'static, str> {
        "property".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "enum": PROPERTIES })
    }
}

/// [`expected`]'s shapes.
fn expectation(generator: &mut SchemaGenerator) -> Schema {
    let property = generator.subschema_for::<Property>();
    let list = serde_json::json!({ "type": "array", "items": property });
    let violated = |key: &str| {
        serde_json::json!({
            "type": "object",
            "properties": { "verdict": { "const": "violated" }, key: list },
            "required": ["verdict", key],
            "additionalProperties": false
        })
    };
    json_schema!({
        "oneOf": [
            {
                "type": "object",
                "properties": { "verdict": { "const": "holds" } },
                "required": ["verdict"],
                "additionalProperties": false
            },
            violated("violates"),
            violated("violates-all"),
            violated("violates-any")
        ]
    })
}

/// An input error, as `{"format_version": 3, "kvcc_version": ..., "kvcc_commit": ...,
/// "kvcc_dirty": ..., "error": {...}}`.
#[derive(Serialize, Deserialize, JsonSchema)]
#[schemars(title = "error")]
pub struct ErrorLine {
    /// This format's version.
    #[schemars(schema_with = "format_version")]
    pub format_version: u32,
    /// The kvcc that produced the line.
    pub kvcc_version: String,
    /// The commit kvcc was built from.
    #[serde(default)]
    pub kvcc_commit: Option<String>,
    /// Whether kvcc's tree differed from that commit; null when not known.
    #[serde(default)]
    pub kvcc_dirty: Option<bool>,
    pub error: ErrorFields,
}

/// An input error, as kvcc prints it on stderr.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct ErrorFields {
    /// The file at fault, if any.
    pub file: Option<String>,
    /// Its line, 1-based.
    pub line: Option<usize>,
    /// Its column, 1-based.
    pub column: Option<usize>,
    /// The field at fault (`prefill.pcp`).
    pub field: Option<String>,
    pub message: String,
    /// What to do about it (`did you mean ...?`).
    pub help: Option<String>,
}

/// An expectation as JSON, the way its spec wrote it (FORMATS.md; `kvcc-bench` too).
pub fn expected(expectation: &Expectation) -> serde_json::Value {
    match expectation {
        Expectation::Holds => json!({"verdict": "holds"}),
        Expectation::Violated(p) => json!({"verdict": "violated", "violates": p}),
        Expectation::ViolatedAll(p) => json!({"verdict": "violated", "violates-all": p}),
        Expectation::ViolatedAny(p) => json!({"verdict": "violated", "violates-any": p}),
    }
}

/// The inverse of [`expected`].
fn read_expected(json: &Value) -> Result<Expectation, InputError> {
    let names = |key: &str| -> Result<Vec<String>, InputError> {
        serde_json::from_value(json[key].clone())
            .map_err(|e| field(&format!("expected.{key}"), e.to_string()))
    };
    match json.get("verdict").and_then(Value::as_str) {
        Some("holds") => Ok(Expectation::Holds),
        Some("violated") if json.get("violates").is_some() => {
            names("violates").map(Expectation::Violated)
        }
        Some("violated") if json.get("violates-all").is_some() => {
            names("violates-all").map(Expectation::ViolatedAll)
        }
        Some("violated") if json.get("violates-any").is_some() => {
            names("violates-any").map(Expectation::ViolatedAny)
        }
        _ => Err(field("expected", format!("`{json}` is not an expectation"))),
    }
}

/// An error about one field of a line.
fn field(path: &str, message: impl Into<String>) -> InputError {
    InputError {
        field: Some(path.to_string()),
        message: message.into(),
        ..InputError::default()
    }
}

/// The JSON line of one check of the run `run`.
pub fn line(o: &Outcome, at: Position, run: &RunIdentity) -> String {
    let reason = match &o.observed {
        Observed::Inconclusive(r) => Some(r.clone()),
        _ => None,
    };
    let expected = expected(&o.expectation);
    let line = Line {
        format_version: FORMAT_VERSION,
        kvcc_version: run.kvcc_version.clone(),
        kvcc_commit: run.kvcc_commit.clone(),
        kvcc_dirty: run.kvcc_dirty,
        spec: o.spec.clone(),
        file: o.file.clone(),
        spec_hash: run.spec_hashes.get(&o.file).cloned().unwrap_or_default(),
        point: o.point.to_json(),
        verdict: o.observed.word().to_string(),
        inconclusive_reason: reason,
        incomplete_reason: o.observed.incomplete().map(str::to_string),
        violations: o
            .violations
            .iter()
            .map(|v| ViolationLine {
                property: v.property.clone(),
                clause: v.clause.clone(),
                depth: v.depth,
            })
            .collect(),
        expected,
        matches: o.matches,
        unreached: o.unreached.clone(),
        unique_states: o.unique_states,
        transitions: o.transitions,
        max_depth: o.max_depth,
        seconds: o.seconds,
        states_per_second: o.states_per_second,
        one_request_for: o.one_request_for,
        every_request: o.every_request.as_ref().map(|w| w.text().to_string()),
        fingerprint_bits: o
            .collision_probability
            .map(|_| kvcc_model::checker::FINGERPRINT_BITS),
        collision_probability: o.collision_probability,
        traces: o.traces.iter().map(|p| p.display().to_string()).collect(),
        point_paths: o.point.0.iter().map(|(path, _)| path.clone()).collect(),
        line: o.expect_line,
        check: at.check,
        checks: at.checks,
        shard: at.shard.map(|s| s.to_string()),
        settings: run.settings.clone(),
        run: run.run.clone(),
    };
    serde_json::to_string(&line).unwrap_or_default()
}

/// The JSON line of an input error.
pub fn error_line(e: &InputError) -> String {
    let line = ErrorLine {
        format_version: FORMAT_VERSION,
        kvcc_version: crate::VERSION.to_string(),
        kvcc_commit: Some(crate::COMMIT.to_string()),
        kvcc_dirty: crate::dirty(),
        error: ErrorFields {
            file: e.file.clone(),
            line: e.at.map(|(l, _)| l),
            column: e.at.map(|(_, c)| c),
            field: e.field.clone(),
            message: e.message.clone(),
            help: e.help.as_deref().map(str::to_string),
        },
    };
    serde_json::to_string(&line).unwrap_or_default()
}

/// What one line read back holds.
pub enum Read {
    Check(Box<Checked>),
    Error(InputError),
}

/// A check's line read back, with what `kvcc merge` verifies it by.
pub struct Checked {
    pub at: Position,
    /// The check, its `matches` and `unreached` recomputed from its verdict and
    /// expectation.
    pub outcome: Outcome,
    /// The `matches` the line states, which is never used, only compared.
    pub matches_stated: bool,
    pub kvcc_version: String,
    pub kvcc_commit: String,
    pub kvcc_dirty: Option<bool>,
    pub spec_hash: String,
    pub settings: RunSettings,
    pub run: String,
}

/// `serde_json`'s message without the position it appends (the error carries it).
fn json_message(e: &serde_json::Error) -> String {
    let message = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    message
        .strip_suffix(&suffix)
        .unwrap_or(&message)
        .to_string()
}

/// Reads a line written by [`line`] or [`error_line`] back. An error names the field (and
/// for JSON syntax the column; its line is the line's own, 1): the caller adds the file
/// and line.
pub fn read(text: &str) -> Result<Read, InputError> {
    let value: Value = serde_json::from_str(text).map_err(|e| InputError {
        at: Some((e.line(), e.column())),
        message: format!("not JSON: {}", json_message(&e)),
        ..InputError::default()
    })?;
    let version = value.get("format_version").and_then(Value::as_u64);
    if version != Some(u64::from(FORMAT_VERSION)) {
        return Err(field(
            "format_version",
            format!(
                "{} is not read by kvcc {} (it reads {FORMAT_VERSION}): check the shards again with this kvcc",
                version.map_or("(none)".to_string(), |v| v.to_string()),
                crate::VERSION
            ),
        ));
    }
    let typed = |e: serde_path_to_error::Error<serde_json::Error>| {
        let path = e.path().to_string();
        let message = json_message(e.inner());
        // A missing field is reported by the object that lacks it: name the field.
        match message.strip_prefix("missing field `") {
            Some(rest) if path == "." => field(rest.trim_end_matches('`'), "missing"),
            _ => field(&path, message),
        }
    };
    if value.get("error").is_some() {
        let e: ErrorLine = serde_path_to_error::deserialize(value).map_err(typed)?;
        let e = e.error;
        return Ok(Read::Error(InputError {
            file: e.file,
            at: e.line.zip(e.column),
            field: e.field,
            message: e.message,
            len: 0,
            help: e.help.map(String::into_boxed_str),
        }));
    }
    let l: Line = serde_path_to_error::deserialize(value).map_err(typed)?;
    let shard = l
        .shard
        .as_deref()
        .map(str::parse::<Shard>)
        .transpose()
        .map_err(|m| field("shard", m))?;
    if l.verdict != "violated" && l.incomplete_reason.is_some() {
        return Err(field(
            "incomplete_reason",
            format!(
                "set on a `{}` verdict: only `violated` is incomplete",
                l.verdict
            ),
        ));
    }
    if l.verdict != "inconclusive" && l.inconclusive_reason.is_some() {
        return Err(field(
            "inconclusive_reason",
            format!("set on a `{}` verdict", l.verdict),
        ));
    }
    let observed = match l.verdict.as_str() {
        "holds" => Observed::Holds,
        "violated" => Observed::Violated {
            incomplete: l.incomplete_reason,
        },
        "inconclusive" => Observed::Inconclusive(l.inconclusive_reason.unwrap_or_default()),
        other => return Err(field("verdict", format!("unknown verdict `{other}`"))),
    };
    match (&observed, l.violations.is_empty()) {
        (Observed::Violated { .. }, true) => {
            return Err(field(
                "violations",
                "a `violated` verdict lists no violation",
            ))
        }
        (Observed::Holds | Observed::Inconclusive(_), false) => {
            return Err(field(
                "violations",
                format!("a `{}` verdict lists violations", l.verdict),
            ))
        }
        _ => {}
    }
    let expectation = read_expected(&l.expected)?;
    let violations = l
        .violations
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let clause_index = CLAUSES
                .iter()
                .position(|c| c.property == v.property && c.clause == v.clause)
                .ok_or_else(|| {
                    field(
                        &format!("violations[{i}]"),
                        format!("unknown clause `{}: {}`", v.property, v.clause),
                    )
                })?;
            Ok(Violation {
                property: v.property,
                clause: v.clause,
                clause_index,
                depth: v.depth,
            })
        })
        .collect::<Result<Vec<_>, InputError>>()?;
    let mut point = Point::from_json(&l.point).map_err(|m| field("point", m))?;
    point
        .0
        .sort_by_key(|(path, _)| l.point_paths.iter().position(|p| p == path));
    let mut outcome = Outcome {
        spec: l.spec,
        file: l.file,
        point,
        expectation,
        expect_line: l.line,
        observed,
        violations,
        matches: false,
        unreached: Vec::new(),
        unique_states: l.unique_states,
        transitions: l.transitions,
        max_depth: l.max_depth,
        seconds: l.seconds,
        states_per_second: l.states_per_second,
        collision_probability: l.collision_probability,
        traces: l.traces.into_iter().map(PathBuf::from).collect(),
        one_request_for: l.one_request_for,
        every_request: l.every_request.map(crate::run::EveryRequest::from_text),
    };
    // Recomputed, never read: `matches_stated` is only compared.
    outcome.judge();
    Ok(Read::Check(Box::new(Checked {
        at: Position {
            check: l.check,
            checks: l.checks,
            shard,
        },
        outcome,
        matches_stated: l.matches,
        kvcc_version: l.kvcc_version,
        kvcc_commit: l.kvcc_commit,
        kvcc_dirty: l.kvcc_dirty,
        spec_hash: l.spec_hash,
        settings: l.settings,
        run: l.run,
    })))
}
