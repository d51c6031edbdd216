//! `kvcc check --junit FILE`: JUnit XML, one `<testsuite>` per spec file and one
//! `<testcase>` per check; a mismatch is a `<failure>`. An input error (exit 2) is a
//! testcase of its own with an `<error>`, in a testsuite named after its file, so CI
//! shows why nothing was checked.

use crate::report::diagnostic;
use crate::run::Outcome;
use kvcc_model::InputError;
use std::fmt::Write;

pub fn render(outcomes: &[Outcome], errors: &[InputError]) -> String {
    let mut files: Vec<&str> = Vec::new();
    for o in outcomes {
        if !files.contains(&o.file.as_str()) {
            files.push(&o.file);
        }
    }
    let failures = outcomes.iter().filter(|o| !o.matches).count();
    let seconds: f64 = outcomes.iter().map(|o| o.seconds).sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let errored = if errors.is_empty() {
        String::new()
    } else {
        format!(" errors=\"{}\"", errors.len())
    };
    let _ = writeln!(
        out,
        "<testsuites name=\"kvcc\" tests=\"{}\" failures=\"{failures}\"{errored} time=\"{seconds:.3}\">",
        outcomes.len() + errors.len()
    );
    for file in files {
        let cases: Vec<&Outcome> = outcomes.iter().filter(|o| o.file == file).collect();
        let failures = cases.iter().filter(|o| !o.matches).count();
        let seconds: f64 = cases.iter().map(|o| o.seconds).sum();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" time=\"{seconds:.3}\">",
            escape(file),
            cases.len()
        );
        for o in cases {
            testcase(&mut out, o);
        }
        out += "  </testsuite>\n";
    }
    for error in errors {
        error_suite(&mut out, error);
    }
    out += "</testsuites>\n";
    out
}

/// An input error as a testsuite with one errored testcase, at the error's file and line.
fn error_suite(out: &mut String, error: &InputError) {
    let file = error.file.as_deref().unwrap_or("kvcc");
    let line = error.at.map_or(1, |(line, _)| line);
    let message = match &error.field {
        Some(field) => format!("{field}: {}", error.message),
        None => error.message.clone(),
    };
    let _ = writeln!(
        out,
        "  <testsuite name=\"{}\" tests=\"1\" failures=\"0\" errors=\"1\" time=\"0.000\">",
        escape(file)
    );
    let _ = writeln!(
        out,
        "    <testcase classname=\"kvcc.input\" name=\"input error\" file=\"{}\" line=\"{line}\" time=\"0.000\">",
        escape(file)
    );
    let _ = writeln!(
        out,
        "      <error type=\"input\" message=\"{}\">{}</error>",
        escape(&message),
        escape(&diagnostic::render(error, false))
    );
    out.push_str("    </testcase>\n  </testsuite>\n");
}

fn testcase(out: &mut String, o: &Outcome) {
    let _ = writeln!(
        out,
        "    <testcase classname=\"kvcc.{}\" name=\"{}\" file=\"{}\" line=\"{}\" time=\"{:.3}\">",
        escape(&o.spec),
        escape(&o.title()),
        escape(&o.file),
        o.expect_line,
        o.seconds
    );
    if !o.matches {
        let message = format!("expected {}, got {}", o.expectation, o.verdict_text());
        let _ = writeln!(
            out,
            "      <failure type=\"mismatch\" message=\"{}\">{}</failure>",
            escape(&message),
            escape(&message)
        );
    }
    let mut details = format!(
        "verdict: {}\nunique states: {}, transitions: {}, depth: {}\n",
        o.verdict_text(),
        o.unique_states,
        o.transitions,
        o.max_depth
    );
    match o.collision_probability {
        Some(p) => {
            details += &format!(
                "fingerprints: {}-bit, chance a collision hid a state: {p:.1e}\n",
                kvcc_model::checker::FINGERPRINT_BITS
            )
        }
        None => details += "fingerprints: none, states compared in full (--exact)\n",
    }
    for t in &o.traces {
        details += &format!("trace: {}\n", t.display());
    }
    let _ = writeln!(out, "      <system-out>{}</system-out>", escape(&details));
    out.push_str("    </testcase>\n");
}

/// Escapes text for XML 1.0 content and attributes, dropping characters it forbids.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out += "&amp;",
            '<' => out += "&lt;",
            '>' => out += "&gt;",
            '"' => out += "&quot;",
            '\'' => out += "&apos;",
            '\n' | '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => {}
            c => out.push(c),
        }
    }
    out
}
