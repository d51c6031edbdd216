//! What `kvcc check` prints and writes about its results: a table for people
//! ([`table`]), JSON lines for tools ([`json`], documented in `harness/FORMATS.md`),
//! JUnit XML for CI dashboards ([`junit`]) and GitHub Actions annotations and job
//! summaries ([`github`]).

pub mod github;
pub mod json;
pub mod junit;
pub mod table;

use crate::out::outln;
use crate::run::Outcome;
use kvcc_model::InputError;

/// `3 checks: 2 as expected, 1 mismatched`.
pub fn summary(outcomes: &[Outcome]) -> String {
    let mismatched = outcomes.iter().filter(|o| !o.matches).count();
    let checks = if outcomes.len() == 1 {
        "check"
    } else {
        "checks"
    };
    format!(
        "{} {checks}: {} as expected, {mismatched} mismatched",
        outcomes.len(),
        outcomes.len() - mismatched
    )
}

/// What the fingerprints behind the *holds* verdicts could hide: the largest chance
/// that a collision hid a state in any of them. None without a holds verdict.
pub fn collision_note(outcomes: &[Outcome]) -> Option<String> {
    let holds: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.observed == crate::run::Observed::Holds)
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

/// Prints errors the way every kvcc command does: `error: ...` on stderr, one a line;
/// under GitHub Actions also an `::error` annotation at the file and line.
pub fn print_errors(errors: &[InputError]) {
    for error in errors {
        eprintln!("error: {error}");
        if let (true, Some(file)) = (github::active(), &error.file) {
            let line = error.at.map_or(1, |(line, _)| line);
            let message = match &error.field {
                Some(field) => format!("{field}: {}", error.message),
                None => error.message.clone(),
            };
            outln!(
                "{}",
                github::annotation(file, line, "kvcc: invalid input", &message)
            );
        }
    }
}
