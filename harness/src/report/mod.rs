//! What `kvcc check` prints and writes about its results: a table for people
//! ([`table`]), JSON lines for tools ([`json`], documented in `harness/FORMATS.md`),
//! JUnit XML for CI dashboards ([`junit`]) and GitHub Actions annotations and job
//! summaries ([`github`]).

pub mod github;
pub mod json;
pub mod junit;
pub mod table;

use crate::run::Outcome;

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
