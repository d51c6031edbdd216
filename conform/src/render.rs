//! What `kvcc conform` prints: text for people, Markdown for a PR comment or job
//! summary, JSON lines for tools — the same three readers as `kvcc check` and its traces.
//!
//! JSON (`--format json`), one object per run, in run order:
//!
//! ```json
//! {"format_version": 1, "kvcc_version": "0.1.0", "run": "out/run-0000/prefill",
//!  "engine": "prefill", "world_size": 2, "expected": 2, "policy": "countdown",
//!  "steps": 7, "events": 2, "bytes": 1234, "verdict": "violated",
//!  "properties": ["eventually-freed", "aggregator-drains"],
//!  "findings": [{"property": "eventually-freed", "clause": "delay-freed-request-never-freed",
//!                "request": "req0", "direction": "finished_sending", "step": null,
//!                "ranks": [1], "at": ["out/run-0000/prefill/scheduler.jsonl:1"],
//!                "message": "..."}],
//!  "omitted": [], "seconds": 0.001}
//! ```
//!
//! - `verdict`: `conforms` or `violated`; `properties` lists the violated ones.
//! - `step`: the engine step of the evidence, null for what is pending at the end.
//! - `ranks`: the rank that reported, or the ranks that never did.
//! - `at`: `FILE:LINE`, the decisive line first.
//! - `omitted`: `{"property", "clause", "count"}` for findings beyond the kept maximum.
//!
//! Fields are only ever added within one `format_version`.

use super::monitor::Finding;
use super::RunReport;
use serde::Serialize;
use std::fmt::Write;

/// The version of the JSON line format.
pub const FORMAT_VERSION: u32 = 1;

/// Findings shown per (property, clause) in text and Markdown; JSON has them all.
const SHOWN_PER_CLAUSE_MAX: usize = 10;

fn verdict(report: &RunReport) -> String {
    if report.conforms() {
        return "conforms".into();
    }
    let count = report.findings.len() as u64 + report.omitted.values().sum::<u64>();
    let noun = if count == 1 { "finding" } else { "findings" };
    format!("{count} {noun} ({})", report.properties().join(", "))
}

fn describe(report: &RunReport) -> String {
    format!(
        "{} engine, world_size {}, E = {}, {} policy, {} steps, {} scheduler events",
        report.header.engine.name(),
        report.header.world_size,
        report.expected,
        report.policy.name(),
        report.steps,
        report.events
    )
}

/// Findings grouped so that at most [`SHOWN_PER_CLAUSE_MAX`] of each clause are shown;
/// returns them with, per clause, how many are not shown.
fn shown(report: &RunReport) -> (Vec<&Finding>, Vec<(String, u64)>) {
    let mut counts: Vec<((&str, &str), usize)> = Vec::new();
    let mut shown = Vec::new();
    for f in &report.findings {
        let key = (f.property, f.clause);
        let i = match counts.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                counts.push((key, 0));
                counts.len() - 1
            }
        };
        counts[i].1 += 1;
        if counts[i].1 <= SHOWN_PER_CLAUSE_MAX {
            shown.push(f);
        }
    }
    let mut hidden: Vec<(String, u64)> = counts
        .iter()
        .filter(|(_, n)| *n > SHOWN_PER_CLAUSE_MAX)
        .map(|((p, c), n)| {
            let omitted = report.omitted.get(&(*p, *c)).copied().unwrap_or(0);
            (
                format!("{p}: {c}"),
                (*n - SHOWN_PER_CLAUSE_MAX) as u64 + omitted,
            )
        })
        .collect();
    for ((p, c), n) in &report.omitted {
        if !counts.iter().any(|(k, _)| k == &(*p, *c)) {
            hidden.push((format!("{p}: {c}"), *n));
        }
    }
    (shown, hidden)
}

fn heading(f: &Finding) -> String {
    let mut text = format!("{}: {}", f.property, f.clause);
    // A finding about an engine step as a whole names no request.
    if !f.request.is_empty() {
        let _ = write!(text, " — request {}", f.request);
    }
    if let Some(d) = f.direction {
        let _ = write!(text, " ({d})");
    }
    match (f.step, f.request.is_empty()) {
        (Some(step), false) => {
            let _ = write!(text, ", step {step}");
        }
        (Some(step), true) => {
            let _ = write!(text, " — step {step}");
        }
        (None, _) => text.push_str(", at end of run"),
    }
    text
}

/// Human text for one run.
pub fn text(report: &RunReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "run {}: {}", report.run, describe(report));
    let (shown, hidden) = shown(report);
    for f in shown {
        let _ = writeln!(out, "  {}", heading(f));
        let _ = writeln!(out, "    {}", f.message);
        if let Some((first, rest)) = f.at.split_first() {
            let _ = writeln!(out, "    at {first}");
            for at in rest {
                let _ = writeln!(out, "       {at}");
            }
        }
    }
    for (clause, n) in hidden {
        let _ = writeln!(
            out,
            "  ... and {n} more {clause} (all of them: --format json)"
        );
    }
    let _ = writeln!(out, "  {}", verdict(report));
    out
}

/// The closing line of a text report.
pub fn summary(reports: &[RunReport]) -> String {
    let bad = reports.iter().filter(|r| !r.conforms()).count();
    let runs = if reports.len() == 1 { "run" } else { "runs" };
    format!(
        "{} {runs}: {} conform, {bad} with findings",
        reports.len(),
        reports.len() - bad
    )
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// Markdown for one run: a summary table, then one row per finding.
pub fn markdown(report: &RunReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### kvcc conform: `{}` — {}\n",
        report.run,
        verdict(report)
    );
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(
        out,
        "| engine | {} (world_size {}, E = {}, `{}`) |",
        report.header.engine.name(),
        report.header.world_size,
        report.expected,
        report.policy.name()
    );
    let _ = writeln!(
        out,
        "| connector | `{}` |",
        cell(&report.header.kv_connector)
    );
    let _ = writeln!(
        out,
        "| steps | {} ({} scheduler events) |",
        report.steps, report.events
    );
    let _ = writeln!(out, "| kvcc | {} |\n", kvcc_model::VERSION);
    let (shown, hidden) = shown(report);
    if shown.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "| property | clause | request | step | ranks | evidence | what happened |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    for f in shown {
        let ranks: Vec<String> = f.ranks.iter().map(u16::to_string).collect();
        let at: Vec<String> = f.at.iter().map(|a| format!("`{}`", cell(a))).collect();
        let _ = writeln!(
            out,
            "| `{}` | `{}` | `{}` | {} | {} | {} | {} |",
            f.property,
            f.clause,
            cell(&f.request),
            f.step.map_or("end".into(), |s| s.to_string()),
            ranks.join(", "),
            at.join("<br>"),
            cell(&f.message)
        );
    }
    for (clause, n) in hidden {
        let _ = writeln!(
            out,
            "\n… and {n} more `{clause}` (all of them: `--format json`)."
        );
    }
    out
}

/// One finding, in the documented field order.
#[derive(Serialize)]
struct FindingLine<'a> {
    property: &'a str,
    clause: &'a str,
    request: &'a str,
    direction: Option<String>,
    step: Option<u64>,
    ranks: &'a [u16],
    at: &'a [String],
    message: &'a str,
}

#[derive(Serialize)]
struct Omitted<'a> {
    property: &'a str,
    clause: &'a str,
    count: u64,
}

/// One run, in the documented field order.
#[derive(Serialize)]
struct Line<'a> {
    format_version: u32,
    kvcc_version: &'static str,
    run: &'a str,
    engine: &'static str,
    world_size: u32,
    expected: u32,
    policy: &'static str,
    steps: u64,
    events: u64,
    bytes: u64,
    verdict: &'static str,
    properties: Vec<&'static str>,
    findings: Vec<FindingLine<'a>>,
    omitted: Vec<Omitted<'a>>,
    seconds: f64,
}

/// The JSON line of one run.
pub fn json_line(report: &RunReport) -> String {
    let line = Line {
        format_version: FORMAT_VERSION,
        kvcc_version: kvcc_model::VERSION,
        run: &report.run,
        engine: report.header.engine.name(),
        world_size: report.header.world_size,
        expected: report.expected,
        policy: report.policy.name(),
        steps: report.steps,
        events: report.events,
        bytes: report.bytes,
        verdict: if report.conforms() {
            "conforms"
        } else {
            "violated"
        },
        properties: report.properties(),
        findings: report
            .findings
            .iter()
            .map(|f| FindingLine {
                property: f.property,
                clause: f.clause,
                request: &f.request,
                direction: f.direction.map(|d| d.to_string()),
                step: f.step,
                ranks: &f.ranks,
                at: &f.at,
                message: &f.message,
            })
            .collect(),
        omitted: report
            .omitted
            .iter()
            .map(|((property, clause), count)| Omitted {
                property,
                clause,
                count: *count,
            })
            .collect(),
        seconds: report.seconds,
    };
    serde_json::to_string(&line).unwrap_or_default()
}
