//! GitHub Actions: an `::error` annotation at the spec line that states each unmet
//! expectation, and a Markdown table for the job summary (`$GITHUB_STEP_SUMMARY`).

use crate::run::Outcome;
use std::fmt::Write;

/// Whether we run under GitHub Actions.
pub fn active() -> bool {
    std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true")
}

/// One workflow command per mismatch.
pub fn annotations(outcomes: &[Outcome]) -> Vec<String> {
    outcomes
        .iter()
        .filter(|o| !o.matches)
        .map(|o| {
            annotation(
                &o.file,
                o.expect_line,
                &format!("kvcc: {}", o.title()),
                &format!("expected {}, got {}", o.expectation, o.verdict_text()),
            )
        })
        .collect()
}

/// `::error file=FILE,line=LINE,title=TITLE::MESSAGE`, escaped.
pub fn annotation(file: &str, line: usize, title: &str, message: &str) -> String {
    format!(
        "::error file={},line={line},title={}::{}",
        property(file),
        property(title),
        data(message)
    )
}

/// The job summary: one table row per check.
pub fn summary(outcomes: &[Outcome]) -> String {
    let mut out = String::from("### kvcc check\n\n");
    out += "| spec | verdict | expected | | states | depth | time |\n";
    out += "|---|---|---|---|--:|--:|--:|\n";
    for o in outcomes {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.2}s |",
            cell(&o.title()),
            cell(&o.verdict_text()),
            cell(&o.expectation.to_string()),
            if o.matches { "✅" } else { "❌ mismatch" },
            o.unique_states,
            o.max_depth,
            o.seconds
        );
    }
    let _ = writeln!(out, "\n{}\n", super::summary(outcomes));
    out
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// Escapes a workflow command's message.
fn data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escapes a workflow command's property value.
fn property(text: &str) -> String {
    data(text).replace(':', "%3A").replace(',', "%2C")
}
