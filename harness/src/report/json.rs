//! `kvcc check --format json`: one JSON object per check, one per line, in check order;
//! `kvcc merge` reads them back. An input error is a line of its own, `{"error": {...}}`.
//!
//! ```json
//! {"format_version": 1, "kvcc_version": "0.1.0",
//!  "spec": "seed-59325", "file": "specs/seed-59325.toml", "point": {"prefill.pcp": 2},
//!  "verdict": "violated", "inconclusive_reason": null,
//!  "violations": [{"property": "eventually-freed",
//!                  "clause": "delay-freed-request-never-freed", "depth": 6}],
//!  "expected": {"verdict": "violated", "violates": ["eventually-freed"]},
//!  "matches": true, "unique_states": 13, "transitions": 19, "max_depth": 6,
//!  "seconds": 0.002, "states_per_second": 6500.0,
//!  "fingerprint_bits": 64, "collision_probability": 4.2e-18, "traces": [],
//!  "point_paths": ["prefill.pcp"], "line": 12, "check": 0, "checks": 1, "shard": null}
//! ```
//!
//! - `verdict`: `holds`, `violated` or `inconclusive` (a limit cut the run:
//!   `inconclusive_reason` says which; `violations` lists what was found before it).
//! - `point`: the matrix point's Config field paths and values (`{}` without a matrix).
//! - `expected.violates`: present (possibly empty) for `"violated"` only.
//! - `depth`: steps of the violation's shortest counterexample.
//! - `collision_probability`: the chance that two of the explored states shared a
//!   `fingerprint_bits`-bit fingerprint, which could have hidden a state (and so a
//!   violation); both null under `--exact`, which compares states in full.
//! - `traces`: files written by `--trace-dir` (empty without it).
//! - `point_paths`: the point's paths in matrix order (`point`'s keys are sorted).
//! - `line`: the spec line that states the expectation.
//! - `check`, `checks`: this check's position in the whole (unsharded) run and how many
//!   checks that run has; `shard`: `"I/N"` under `--shard`, else null.
//!
//! Fields are only ever added within one `format_version`.

use crate::run::{Observed, Outcome, Violation};
use crate::shard::Shard;
use crate::spec::point::Point;
use crate::spec::Expectation;
use kvcc_model::properties::CLAUSES;
use kvcc_model::InputError;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::path::PathBuf;

/// The version of this line format.
pub const FORMAT_VERSION: u32 = 1;

/// Where a check stands in the whole run, for `kvcc merge` to put shards back together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub check: usize,
    pub checks: usize,
    pub shard: Option<Shard>,
}

/// One check, in the documented field order.
#[derive(Serialize, Deserialize)]
pub struct Line {
    pub format_version: u32,
    pub kvcc_version: String,
    pub spec: String,
    pub file: String,
    pub point: Value,
    pub verdict: String,
    pub inconclusive_reason: Option<String>,
    pub violations: Vec<ViolationLine>,
    pub expected: Value,
    pub matches: bool,
    pub unique_states: u64,
    pub transitions: u64,
    pub max_depth: u32,
    pub seconds: f64,
    pub states_per_second: f64,
    /// 64, or null when states were compared in full (`--exact`).
    pub fingerprint_bits: Option<u32>,
    /// The chance a fingerprint collision hid a state; null under `--exact`.
    pub collision_probability: Option<f64>,
    pub traces: Vec<String>,
    /// The point's paths in matrix (file) order; `point` is a JSON object, whose keys
    /// are sorted.
    pub point_paths: Vec<String>,
    pub line: usize,
    pub check: usize,
    pub checks: usize,
    pub shard: Option<String>,
}

#[derive(Serialize, Deserialize)]
pub struct ViolationLine {
    pub property: String,
    pub clause: String,
    pub depth: usize,
}

/// An input error, as `{"format_version": 1, "kvcc_version": ..., "error": {...}}`.
#[derive(Serialize, Deserialize)]
pub struct ErrorLine {
    pub format_version: u32,
    pub kvcc_version: String,
    pub error: ErrorFields,
}

#[derive(Serialize, Deserialize)]
pub struct ErrorFields {
    pub file: Option<String>,
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub field: Option<String>,
    pub message: String,
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
fn read_expected(json: &Value) -> Result<Expectation, String> {
    let names = |key: &str| -> Result<Vec<String>, String> {
        serde_json::from_value(json[key].clone()).map_err(|e| format!("expected.{key}: {e}"))
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
        _ => Err(format!("`expected` is not an expectation: {json}")),
    }
}

/// The JSON line of one check.
pub fn line(o: &Outcome, at: Position) -> String {
    let (verdict, reason) = match &o.observed {
        Observed::Holds => ("holds", None),
        Observed::Violated => ("violated", None),
        Observed::Inconclusive(r) => ("inconclusive", Some(r.clone())),
    };
    let expected = expected(&o.expectation);
    let line = Line {
        format_version: FORMAT_VERSION,
        kvcc_version: crate::VERSION.to_string(),
        spec: o.spec.clone(),
        file: o.file.clone(),
        point: o.point.to_json(),
        verdict: verdict.to_string(),
        inconclusive_reason: reason,
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
        unique_states: o.unique_states,
        transitions: o.transitions,
        max_depth: o.max_depth,
        seconds: o.seconds,
        states_per_second: o.states_per_second,
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
    };
    serde_json::to_string(&line).unwrap_or_default()
}

/// The JSON line of an input error.
pub fn error_line(e: &InputError) -> String {
    let line = ErrorLine {
        format_version: FORMAT_VERSION,
        kvcc_version: crate::VERSION.to_string(),
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
    Check(Position, Box<Outcome>),
    Error(InputError),
}

/// Reads a line written by [`line`] or [`error_line`] back.
pub fn read(text: &str) -> Result<Read, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let version = value.get("format_version").and_then(Value::as_u64);
    if version != Some(u64::from(FORMAT_VERSION)) {
        return Err(format!(
            "format_version {} is not read by kvcc {} (it reads {FORMAT_VERSION})",
            version.map_or("(none)".to_string(), |v| v.to_string()),
            crate::VERSION
        ));
    }
    if value.get("error").is_some() {
        let e: ErrorLine = serde_json::from_value(value).map_err(|e| e.to_string())?;
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
    let l: Line = serde_json::from_value(value).map_err(|e| e.to_string())?;
    let shard = l.shard.as_deref().map(str::parse::<Shard>).transpose()?;
    let observed = match l.verdict.as_str() {
        "holds" => Observed::Holds,
        "violated" => Observed::Violated,
        "inconclusive" => Observed::Inconclusive(l.inconclusive_reason.unwrap_or_default()),
        other => return Err(format!("unknown verdict `{other}`")),
    };
    let expectation = read_expected(&l.expected)?;
    let violations = l
        .violations
        .into_iter()
        .map(|v| {
            let clause_index = CLAUSES
                .iter()
                .position(|c| c.property == v.property && c.clause == v.clause)
                .ok_or_else(|| format!("unknown clause `{}: {}`", v.property, v.clause))?;
            Ok(Violation {
                property: v.property,
                clause: v.clause,
                clause_index,
                depth: v.depth,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut point = Point::from_json(&l.point)?;
    point
        .0
        .sort_by_key(|(path, _)| l.point_paths.iter().position(|p| p == path));
    let outcome = Outcome {
        spec: l.spec,
        file: l.file,
        point,
        expectation,
        expect_line: l.line,
        observed,
        violations,
        matches: l.matches,
        unique_states: l.unique_states,
        transitions: l.transitions,
        max_depth: l.max_depth,
        seconds: l.seconds,
        states_per_second: l.states_per_second,
        collision_probability: l.collision_probability,
        traces: l.traces.into_iter().map(PathBuf::from).collect(),
    };
    let at = Position {
        check: l.check,
        checks: l.checks,
        shard,
    };
    Ok(Read::Check(at, Box::new(outcome)))
}
