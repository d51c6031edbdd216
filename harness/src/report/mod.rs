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
