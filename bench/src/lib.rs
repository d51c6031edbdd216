//! `kvcc-bench`: how fast and how compactly the checker explores real topologies, and how
//! many rank-reports per second the aggregator counts (issue 6).
//!
//! Each check (a spec at a matrix point) runs `runs` times, every run in a child process
//! of the same binary (`kvcc-bench --one SPEC --point ...`): the peak resident set
//! (`VmHWM`) is a process-wide high-water mark, so only a fresh process measures one
//! check's memory. The child runs the check through [`kvcc::run::check`], exactly as
//! `kvcc check` does, and prints one [`RunRecord`] as a JSON line. The parent judges the
//! verdict against the spec's expectation (a benchmark of a wrong model is worthless),
//! insists that every run explored the same graph, and reports medians: [`Measured`],
//! printed as a table or as the JSON lines of [`json_line`] (harness/FORMATS.md).
//!
//! [`aggregator`] measures the aggregator core and its concurrent front in-process.

pub mod aggregator;
pub mod recorded_run;
pub mod schedule;

use kvcc::cmd::conform::peak_rss_bytes;
use kvcc::run::{self, Outcome, Settings};
use kvcc::spec::point::Point;
use kvcc::spec::{Case, Expectation, Spec};
use kvcc_model::InputError;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::{Command, Stdio};

/// The version of `kvcc-bench --format json` lines.
pub const FORMAT_VERSION: u32 = 1;

/// Where `kvcc-bench` looks without a PATH.
pub const DEFAULT_PATH: &str = "specs/bench";

/// Whether this binary was built with optimisations for measuring: debug assertions are
/// off in the release profile only (the dev profile is optimised too, but not the same).
pub const RELEASE_BUILD: bool = !cfg!(debug_assertions);

/// One run of one check, as a child process reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// `holds`, `violated` or `inconclusive`.
    pub verdict: String,
    /// The verdict as `kvcc check` prints it, with clauses or the limit.
    pub verdict_text: String,
    /// Violated properties, each once, in clause order.
    pub violated: Vec<String>,
    pub matches: bool,
    pub unique_states: u64,
    pub transitions: u64,
    pub max_depth: u32,
    /// The search's wall-clock time (not the process's start-up or the spec's loading).
    pub seconds: f64,
    /// The child's peak resident set (`VmHWM`), where /proc tells it.
    pub peak_rss_bytes: Option<u64>,
}

impl RunRecord {
    pub fn new(outcome: &Outcome, peak_rss_bytes: Option<u64>) -> RunRecord {
        RunRecord {
            verdict: outcome.observed.word().to_string(),
            verdict_text: outcome.verdict_text(),
            violated: outcome.violated_properties(),
            matches: outcome.matches,
            unique_states: outcome.unique_states,
            transitions: outcome.transitions,
            max_depth: outcome.max_depth,
            seconds: outcome.seconds,
            peak_rss_bytes,
        }
    }

    /// What must not differ between runs of one check: the checker is deterministic.
    fn explored(&self) -> (&str, &[String], u64, u64, u32) {
        (
            &self.verdict,
            &self.violated,
            self.unique_states,
            self.transitions,
            self.max_depth,
        )
    }
}

/// The 1-minute load average, where the kernel tells it: other work on the machine skews
/// every figure, so each one records the load it was measured under.
pub fn load_average() -> Option<f64> {
    <procfs::LoadAverage as procfs::Current>::current()
        .ok()
        .map(|load| f64::from(load.one))
}

/// How a benchmark's checks run: worker threads, and whether every request is explored
/// even where one stands for all (`kvcc check --no-independence`: the raw search speed
/// is measured so).
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub threads: usize,
    pub no_independence: bool,
}

/// Runs one check in this process (the child's side) and returns its record.
pub fn run_here(spec: &Spec, case: &Case, run: Run) -> Result<RunRecord, InputError> {
    let settings = Settings {
        threads: run.threads,
        no_independence: run.no_independence,
        ..Settings::default()
    };
    let outcome = run::check(spec, case, &settings)?;
    Ok(RunRecord::new(&outcome, peak_rss_bytes()))
}

/// Runs one check in a child process of `exe` (this binary) and returns its record.
pub fn run_child(exe: &Path, file: &str, point: &Point, run: Run) -> Result<RunRecord, String> {
    let output = Command::new(exe)
        .args(["--one", file, "--threads", &run.threads.to_string()])
        .args(run.no_independence.then_some("--no-independence"))
        .args(point.args())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    if !output.status.success() {
        return Err(format!("the child run failed ({})", output.status));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .map_err(|e| format!("the child run printed no record ({e}): {line:?}"))
}

/// Every run of one check, and what they add up to.
#[derive(Clone, Debug)]
pub struct Measured {
    pub spec: String,
    pub file: String,
    pub point: Point,
    pub expectation: Expectation,
    pub threads: usize,
    /// At least one.
    pub runs: Vec<RunRecord>,
    /// The 1-minute load average when the first run started.
    pub load_average: Option<f64>,
}

impl Measured {
    /// `name` or `name [prefill.pcp=2]`.
    pub fn title(&self) -> String {
        if self.point.is_empty() {
            self.spec.clone()
        } else {
            format!("{} [{}]", self.spec, self.point)
        }
    }

    fn first(&self) -> &RunRecord {
        &self.runs[0]
    }

    /// Every run explored the same graph and reached the same verdict.
    pub fn runs_agree(&self) -> bool {
        self.runs
            .iter()
            .all(|r| r.explored() == self.first().explored())
    }

    /// Every run's verdict meets the expectation, and the runs agree.
    pub fn matches(&self) -> bool {
        self.runs_agree() && self.runs.iter().all(|r| r.matches)
    }

    pub fn seconds_all(&self) -> Vec<f64> {
        self.runs.iter().map(|r| r.seconds).collect()
    }

    pub fn seconds_median(&self) -> f64 {
        median(&self.seconds_all())
    }

    pub fn states_per_second_median(&self) -> f64 {
        let rates: Vec<f64> = self
            .runs
            .iter()
            .map(|r| r.unique_states as f64 / r.seconds.max(1e-9))
            .collect();
        median(&rates)
    }

    /// The most any run held resident: the figure a memory budget must cover.
    pub fn peak_rss_bytes(&self) -> Option<u64> {
        self.runs.iter().map(|r| r.peak_rss_bytes).max().flatten()
    }

    /// Peak resident bytes per unique state (the process's baseline included).
    pub fn bytes_per_state(&self) -> Option<f64> {
        let states = self.first().unique_states.max(1);
        self.peak_rss_bytes().map(|b| b as f64 / states as f64)
    }
}

/// The median; the mean of the middle two for an even count; 0 for none.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// One check's JSON line, in the documented field order (harness/FORMATS.md).
#[derive(Serialize)]
struct Line<'a> {
    format_version: u32,
    kvcc_version: &'static str,
    kind: &'static str,
    spec: &'a str,
    file: &'a str,
    point: serde_json::Value,
    threads: usize,
    runs: usize,
    release_build: bool,
    load_average: Option<f64>,
    verdict: &'a str,
    violated: &'a [String],
    expected: serde_json::Value,
    matches: bool,
    runs_agree: bool,
    unique_states: u64,
    transitions: u64,
    max_depth: u32,
    seconds: f64,
    seconds_all: Vec<f64>,
    states_per_second: f64,
    peak_rss_bytes: Option<u64>,
    bytes_per_state: Option<f64>,
}

/// One check's JSON line.
pub fn json_line(m: &Measured) -> String {
    let first = m.first();
    let line = Line {
        format_version: FORMAT_VERSION,
        kvcc_version: kvcc::VERSION,
        kind: "check",
        spec: &m.spec,
        file: &m.file,
        point: m.point.to_json(),
        threads: m.threads,
        runs: m.runs.len(),
        release_build: RELEASE_BUILD,
        load_average: m.load_average,
        verdict: &first.verdict,
        violated: &first.violated,
        expected: kvcc::report::json::expected(&m.expectation),
        matches: m.matches(),
        runs_agree: m.runs_agree(),
        unique_states: first.unique_states,
        transitions: first.transitions,
        max_depth: first.max_depth,
        seconds: m.seconds_median(),
        seconds_all: m.seconds_all(),
        states_per_second: m.states_per_second_median(),
        peak_rss_bytes: m.peak_rss_bytes(),
        bytes_per_state: m.bytes_per_state(),
    };
    serde_json::to_string(&line).unwrap_or_default()
}

const HEADER: [&str; 11] = [
    "SPEC",
    "VERDICT",
    "EXPECTED",
    "MATCH",
    "STATES",
    "TRANSITIONS",
    "DEPTH",
    "SECONDS",
    "STATES/S",
    "PEAK RSS",
    "B/STATE",
];

/// The human table: one row per check, medians of its runs.
pub fn table(measured: &[Measured]) -> String {
    let rows: Vec<Vec<String>> = measured
        .iter()
        .map(|m| {
            let first = m.first();
            let matched = match (m.runs_agree(), m.matches()) {
                (false, _) => "RUNS DIFFER",
                (true, true) => "ok",
                (true, false) => "MISMATCH",
            };
            vec![
                m.title(),
                first.verdict_text.clone(),
                m.expectation.to_string(),
                matched.to_string(),
                first.unique_states.to_string(),
                first.transitions.to_string(),
                first.max_depth.to_string(),
                format!("{:.3}", m.seconds_median()),
                format!("{:.0}", m.states_per_second_median()),
                m.peak_rss_bytes()
                    .map_or("-".into(), |b| format!("{:.1} MiB", b as f64 / MIB)),
                m.bytes_per_state()
                    .map_or("-".into(), |b| format!("{b:.0}")),
            ]
        })
        .collect();
    render_table(&HEADER, &rows, 4)
}

const MIB: f64 = 1024.0 * 1024.0;

/// Columns aligned, those from `numeric_from` on right-aligned.
pub fn render_table(header: &[&str], rows: &[Vec<String>], numeric_from: usize) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            let width = *width;
            if i >= numeric_from {
                out += &format!("{cell:>width$}");
            } else {
                out += &format!("{cell:<width$}");
            }
            if i + 1 < cells.len() {
                out += "  ";
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out += &line(row.iter().map(String::as_str).collect());
    }
    out
}

/// `kvcc 0.1.0 bench, 2 threads per check: median of 3 runs, release build, load average
/// 0.52 at start`.
pub fn banner(what: &str, runs: usize, load_average: Option<f64>) -> String {
    let build = if RELEASE_BUILD {
        "release build"
    } else {
        "DEBUG-ASSERTIONS BUILD (figures not comparable)"
    };
    let load = load_average.map_or("unknown".into(), |l| format!("{l:.2}"));
    let runs = if runs == 1 {
        "1 run".to_string()
    } else {
        format!("median of {runs} runs")
    };
    format!(
        "kvcc {} bench, {what}: {runs}, {build}, load average {load} at start",
        kvcc::VERSION
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_no_values() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
