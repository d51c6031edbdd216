//! `kvcc check --format json`: one JSON object per check, one per line, in check order.
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
//!  "fingerprint_bits": 64, "collision_probability": 4.2e-18, "traces": []}
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
//!
//! Fields are only ever added within one `format_version`.

use crate::run::{Observed, Outcome};
use crate::spec::Expectation;
use serde::Serialize;
use serde_json::{json, Value};

/// The version of this line format.
pub const FORMAT_VERSION: u32 = 1;

/// One check, in the documented field order.
#[derive(Serialize)]
struct Line<'a> {
    format_version: u32,
    kvcc_version: &'static str,
    spec: &'a str,
    file: &'a str,
    point: Value,
    verdict: &'static str,
    inconclusive_reason: Option<&'a str>,
    violations: Vec<Value>,
    expected: Value,
    matches: bool,
    unique_states: u64,
    transitions: u64,
    max_depth: u32,
    seconds: f64,
    states_per_second: f64,
    /// 64, or null when states were compared in full (`--exact`).
    fingerprint_bits: Option<u32>,
    /// The chance a fingerprint collision hid a state; null under `--exact`.
    collision_probability: Option<f64>,
    traces: Vec<String>,
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

/// The JSON line of one check.
pub fn line(o: &Outcome) -> String {
    let (verdict, reason) = match &o.observed {
        Observed::Holds => ("holds", None),
        Observed::Violated => ("violated", None),
        Observed::Inconclusive(r) => ("inconclusive", Some(r.as_str())),
    };
    let expected = expected(&o.expectation);
    let line = Line {
        format_version: FORMAT_VERSION,
        kvcc_version: crate::VERSION,
        spec: &o.spec,
        file: &o.file,
        point: o.point.to_json(),
        verdict,
        inconclusive_reason: reason,
        violations: o
            .violations
            .iter()
            .map(|v| json!({"property": v.property, "clause": v.clause, "depth": v.depth}))
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
    };
    serde_json::to_string(&line).unwrap_or_default()
}
