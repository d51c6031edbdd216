//! GitHub Actions: an `::error` annotation at the spec line that states each unmet
//! expectation (a `::warning` for each met by a run a limit cut short), and a job summary (`$GITHUB_STEP_SUMMARY`): a Markdown table and the
//! Markdown trace, Mermaid diagram included, of every mismatch.

use crate::report::diagnostic;
use crate::run::Outcome;
use kvcc_model::InputError;
use std::fmt::Write;

/// Whether we run under GitHub Actions.
pub fn active() -> bool {
    std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true")
}

/// One workflow command per mismatch (`::error`), and per check that met its expectation
/// with a run a limit cut short (`::warning`: past the cut, more may break).
pub fn annotations(outcomes: &[Outcome]) -> Vec<String> {
    outcomes
        .iter()
        .filter(|o| !o.matches || o.observed.incomplete().is_some())
        .map(|o| {
            let title = format!("kvcc: {}", o.title());
            let mut message = format!("expected {}, got {}", o.expectation, o.verdict_text());
            if o.matches {
                message += "; clauses past the limit were not checked";
                return command("warning", &o.file, o.expect_line, &title, &message);
            }
            if !o.unreached.is_empty() {
                message += &format!(
                    "; {} not reached before the limit: inconclusive",
                    o.unreached.join(", ")
                );
            }
            annotation(&o.file, o.expect_line, &title, &message)
        })
        .collect()
}

/// `::error file=FILE,line=LINE,title=TITLE::MESSAGE`, escaped.
pub fn annotation(file: &str, line: usize, title: &str, message: &str) -> String {
    command("error", file, line, title, message)
}

/// `::KIND file=FILE,line=LINE,title=TITLE::MESSAGE`, escaped.
fn command(kind: &str, file: &str, line: usize, title: &str, message: &str) -> String {
    format!(
        "::{kind} file={},line={line},title={}::{}",
        property(file),
        property(title),
        data(message)
    )
}

/// The job summary: one table row per check, then for each mismatch the Markdown trace
/// (with its Mermaid diagram) of every counterexample it wrote; or the input errors.
pub fn summary(outcomes: &[Outcome], errors: &[InputError]) -> String {
    let mut out = String::from("### kvcc check\n\n");
    if !errors.is_empty() {
        out += "Nothing was concluded: the input has errors.\n\n```\n";
        for error in errors {
            out += &diagnostic::render(error, false);
            out += "\n";
        }
        out += "```\n\n";
        return out;
    }
    out += "| spec | verdict | expected | | states | depth | time |\n";
    out += "|---|---|---|---|--:|--:|--:|\n";
    for o in outcomes {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.2}s |",
            cell(&o.title()),
            cell(&o.verdict_text()),
            cell(&o.expectation.to_string()),
            match (o.matches, o.unreached.is_empty()) {
                (true, _) => "✅",
                (false, true) => "❌ mismatch",
                (false, false) => "❌ inconclusive",
            },
            o.unique_states,
            o.max_depth,
            o.seconds
        );
    }
    let _ = writeln!(out, "\n{}\n", super::summary(outcomes));
    for o in outcomes.iter().filter(|o| !o.matches) {
        out += &mismatch_traces(o);
    }
    out
}

/// The Markdown traces of a mismatch, each folded under its name.
fn mismatch_traces(o: &Outcome) -> String {
    let markdown: Vec<&std::path::PathBuf> = o
        .traces
        .iter()
        .filter(|t| t.extension().is_some_and(|e| e == "md"))
        .collect();
    let mut out = format!("#### ❌ {}\n\n", o.title());
    let _ = writeln!(
        out,
        "expected {}, got {}\n",
        o.expectation,
        o.verdict_text()
    );
    if markdown.is_empty() && o.violations.is_empty() {
        return out;
    }
    if markdown.is_empty() {
        out += "(no trace: run `kvcc check` with `--trace-dir` to write the counterexamples)\n\n";
    }
    for path in markdown {
        let name = path
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| format!("(trace {} not readable here: {e})\n", path.display()));
        let _ = write!(
            out,
            "<details><summary>{name}</summary>\n\n{text}\n</details>\n\n"
        );
    }
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
