//! What `kvcc check` and `kvcc merge` print and write about their results: a table for
//! people ([`table`]), JSON lines for tools ([`json`], documented in `harness/FORMATS.md`),
//! JUnit XML for CI dashboards ([`junit`]), SARIF for code scanning ([`sarif`]), GitHub
//! Actions annotations and job summaries ([`github`]), and input errors as a compiler shows them ([`diagnostic`]). Input errors
//! reach every output too: JSON has an error line, JUnit an errored testcase.

pub mod diagnostic;
pub mod github;
pub mod json;
pub mod junit;
pub mod sarif;
pub mod table;

use crate::out::outln;
use crate::run::{Observed, Outcome};
use crate::{Build, Exit};
use kvcc_model::InputError;
use std::io::Write;

/// How results are reported: the flags `check` and `merge` share.
#[derive(Clone, Debug, Default)]
pub struct Output {
    pub json: bool,
    pub junit: Option<String>,
    pub sarif: Option<String>,
    pub quiet: bool,
    /// `--trace-dir`, to say where the traces went.
    pub trace_dir: Option<String>,
    /// Annotations and a job summary, when under GitHub Actions ([`github::active`]). Off
    /// for a shard (`check --shard`): `kvcc merge` annotates and summarises the whole run,
    /// and annotations from the shards' jobs too would mark each mismatch twice in the
    /// workflow run (issue 27).
    pub github: bool,
}

/// `3 checks: 2 as expected, 1 mismatched`, and `, 1 not reached before the cut` when an
/// incomplete run left an expected property undecided (neither as expected nor a
/// mismatch it can prove: `run::Judgement::Unreached`).
pub fn summary(outcomes: &[Outcome]) -> String {
    let undecided = outcomes
        .iter()
        .filter(|o| !o.matches && !o.unreached.is_empty())
        .count();
    let mismatched = outcomes.iter().filter(|o| !o.matches).count() - undecided;
    let checks = if outcomes.len() == 1 {
        "check"
    } else {
        "checks"
    };
    let mut line = format!(
        "{} {checks}: {} as expected, {mismatched} mismatched",
        outcomes.len(),
        outcomes.len() - mismatched - undecided
    );
    if undecided > 0 {
        line.push_str(&format!(", {undecided} not reached before the cut"));
    }
    line
}

/// What the fingerprints behind the *holds* verdicts could hide: the largest chance
/// that a collision hid a state in any of them. None without a holds verdict.
pub fn collision_note(outcomes: &[Outcome]) -> Option<String> {
    let holds: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.observed == Observed::Holds)
        .collect();
    let worst = holds
        .iter()
        .filter_map(|o| o.collision_probability.map(|p| (p, o.unique_states)))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match (holds.is_empty(), worst) {
        (true, _) => None,
        (false, Some((p, states))) => Some(format!(
            "holds verdicts rest on {}-bit state fingerprints: the chance a collision hid a state is at most {p:.1e} (the largest check, {states} states); --exact compares states in full",
            kvcc_model::checker::FINGERPRINT_BITS
        )),
        (false, None) => Some("holds verdicts compared every state in full (--exact): no fingerprint collision hid a state".to_string()),
    }
}

/// Which *holds* verdicts one request gave for all of a check's requests, and why that
/// is enough. None when no check did.
pub fn independence_note(outcomes: &[Outcome]) -> Option<String> {
    let reduced = outcomes
        .iter()
        .filter(|o| o.one_request_for.is_some())
        .count();
    (reduced > 0).then(|| {
        format!(
            "{reduced} holds {} from one request among others that may keep the engines stepping: no behaviour of {} couples requests and every clause is about one request, so one stands for all (model/src/independence.rs); --no-independence explores every request",
            if reduced == 1 { "verdict comes" } else { "verdicts come" },
            if reduced == 1 { "its check" } else { "their checks" },
        )
    })
}

/// Why checks of several requests that held explored every request, each reason with
/// its count of checks. None when no such check did. (A violated check's
/// counterexamples are of every request by design; it needs no note.)
pub fn every_request_note(outcomes: &[Outcome]) -> Option<String> {
    let mut reasons: Vec<(&str, usize)> = Vec::new();
    let held = outcomes.iter().filter(|o| o.observed == Observed::Holds);
    for why in held.filter_map(|o| o.every_request.as_ref()) {
        match reasons.iter_mut().find(|(r, _)| *r == why.text()) {
            Some((_, n)) => *n += 1,
            None => reasons.push((why.text(), 1)),
        }
    }
    (!reasons.is_empty()).then(|| {
        let reasons: Vec<String> = reasons
            .iter()
            .map(|(reason, n)| match n {
                1 => format!("1 check: {reason}"),
                n => format!("{n} checks: {reason}"),
            })
            .collect();
        format!(
            "holds verdicts of several requests that explored every request: {}; --no-independence skips the one-request search",
            reasons.join("; ")
        )
    })
}

/// Prints errors the way every kvcc command does, compiler-style on stderr; under GitHub
/// Actions also an `::error` annotation at the file and line.
pub fn print_errors(errors: &[InputError]) {
    print_errors_annotated(errors, github::active());
}

/// [`print_errors`], with the annotations only when `annotate`.
fn print_errors_annotated(errors: &[InputError], annotate: bool) {
    for error in errors {
        anstream::eprintln!("{}", diagnostic::render(error, true));
        if let (true, Some(file)) = (annotate, &error.file) {
            let line = error.at.map_or(1, |(line, _)| line);
            let mut message = match &error.field {
                Some(field) => format!("{field}: {}", error.message),
                None => error.message.clone(),
            };
            if let Some(help) = &error.help {
                message += &format!("\nhelp: {help}");
            }
            outln!(
                "{}",
                github::annotation(file, line, "kvcc: invalid input", &message)
            );
        }
    }
}

/// Reports the results (and any input errors) everywhere `out` asks for, and says how the
/// command ends: 2 on an input error, 1 on a mismatch, else 0. JSON lines of checks are
/// printed as they finish, by the caller; this prints the error lines. `build` is the code
/// that checked the outcomes, which the JUnit report names.
pub fn finish(out: &Output, build: &Build, outcomes: &[Outcome], errors: &[InputError]) -> Exit {
    if !errors.is_empty() {
        print_errors_annotated(errors, out.github);
        if out.json {
            for error in errors {
                outln!("{}", json::error_line(error));
            }
        }
    } else {
        if !out.json {
            print_human(out, outcomes);
        }
        if let (Some(dir), false) = (&out.trace_dir, out.quiet) {
            if let Some(note) = no_traces_note(dir, outcomes) {
                eprintln!("{note}");
            }
        }
    }
    if out.github {
        for line in github::annotations(outcomes) {
            // stdout stays JSON lines with --format json; the runner reads both streams.
            if out.json {
                eprintln!("{line}");
            } else {
                outln!("{line}");
            }
        }
        if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY") {
            let appended = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .and_then(|mut f| f.write_all(github::summary(outcomes, errors).as_bytes()));
            if let Err(e) = appended {
                eprintln!("warning: cannot append to GITHUB_STEP_SUMMARY: {e}");
            }
        }
    }
    if let Some(file) = &out.junit {
        let xml = junit::render(outcomes, errors, build);
        if let Err(e) = crate::atomic::write(std::path::Path::new(file), xml.as_bytes()) {
            print_errors(&[InputError::file(
                file,
                format!("cannot write JUnit XML: {e}"),
            )]);
            return Exit::Input;
        }
    }
    if let Some(file) = &out.sarif {
        let log = sarif::render(outcomes, errors, build);
        if let Err(e) = crate::atomic::write(std::path::Path::new(file), log.as_bytes()) {
            print_errors(&[InputError::file(file, format!("cannot write SARIF: {e}"))]);
            return Exit::Input;
        }
    }
    if !errors.is_empty() {
        Exit::Input
    } else if outcomes.iter().all(|o| o.matches) {
        Exit::Ok
    } else {
        Exit::Finding
    }
}

/// The line under the table: what `ok` means and where to look next.
fn footer(out: &Output, outcomes: &[Outcome]) -> String {
    let mut files: Vec<&str> = outcomes.iter().map(|o| o.file.as_str()).collect();
    files.dedup();
    let spec = match files.as_slice() {
        [one] => crate::trace::shell_quote(one),
        _ => "SPEC".to_string(),
    };
    let meaning = if outcomes.iter().all(|o| o.matches) {
        "ok: the verdict is as the spec expects (its [expect])."
    } else {
        "ok: the verdict is as the spec expects (its [expect]); MISMATCH: it is not (exit 1)."
    };
    let written = outcomes.iter().any(|o| !o.traces.is_empty());
    let next = match (&out.trace_dir, written) {
        (Some(dir), true) => format!("Next: the traces in {dir} (*.txt: the steps, *.md: a diagram)."),
        _ => format!(
            "Next: each violation's steps with `kvcc check {spec} --all-traces --trace-dir traces`; \
             why a spec expects what it does: its header comment."
        ),
    };
    format!("{meaning} {next}")
}

/// Why `--trace-dir DIR` wrote nothing, and how to get traces; None when it wrote some.
/// A user who asked for traces and finds an empty directory must not have to guess.
pub fn no_traces_note(dir: &str, outcomes: &[Outcome]) -> Option<String> {
    if outcomes.iter().any(|o| !o.traces.is_empty()) {
        return None;
    }
    let expected: usize = outcomes
        .iter()
        .filter(|o| o.matches)
        .map(|o| o.violations.len())
        .sum();
    let why = if outcomes.iter().all(|o| o.violations.is_empty()) {
        "no check found a violation, so there is no counterexample to write".to_string()
    } else if outcomes.iter().all(|o| o.matches) {
        format!(
            "every verdict is as its spec expects, and --trace-dir writes only the traces of \
             checks whose verdict differs; add --all-traces to write the {expected} violated \
             clauses' traces too"
        )
    } else {
        format!(
            "the mismatched checks found no violation to trace; add --all-traces to write the \
             {expected} violated clauses' traces of the checks that are as expected"
        )
    };
    Some(format!("kvcc: no trace written to {dir}: {why}"))
}

/// The table (only the mismatches when quiet), the summary line and where traces went.
fn print_human(out: &Output, outcomes: &[Outcome]) {
    let shown: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| !out.quiet || !o.matches)
        .collect();
    let width = table::width();
    if !shown.is_empty() {
        let footer = match out.quiet {
            true => String::new(),
            false => format!("\n{}", table::wrap(&footer(out, outcomes), width)),
        };
        outln!("{}{footer}\n", table::render(&shown, width));
    }
    outln!("{}", summary(outcomes));
    if out.quiet {
        return;
    }
    if let Some(note) = collision_note(outcomes) {
        outln!("{}", table::wrap(&note, width));
    }
    if let Some(note) = independence_note(outcomes) {
        outln!("{}", table::wrap(&note, width));
    }
    if let Some(note) = every_request_note(outcomes) {
        outln!("{}", table::wrap(&note, width));
    }
    let traces = outcomes.iter().map(|o| o.traces.len()).sum::<usize>();
    if let (Some(dir), true) = (&out.trace_dir, traces > 0) {
        outln!("counterexamples: {traces} trace files in {dir}");
    }
}
