//! `kvcc check --junit FILE`: JUnit XML (written by `quick-junit`), one `<testsuite>` per
//! spec file and one `<testcase>` per check, with the spec's `file` and the `line` of its
//! expectation; a mismatch is a `<failure>` (`type="inconclusive"` when an incomplete run
//! did not reach an expected property). A run cut after a violation says `incomplete` in
//! its verdict, in the failure message and in `<system-out>`. An input error (exit 2) is a testcase of its
//! own with an `<error>`, in a testsuite named after its file, so CI shows why nothing was
//! checked. Every testsuite has the properties `kvcc_version`, `kvcc_commit` and
//! `kvcc_dirty` (`true`, `false` or `unknown`): the code that checked it.

use crate::report::diagnostic;
use crate::run::Outcome;
use crate::Build;
use kvcc_model::InputError;
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use std::time::Duration;

pub fn render(outcomes: &[Outcome], errors: &[InputError], build: &Build) -> String {
    let mut report = Report::new("kvcc");
    let mut files: Vec<&str> = Vec::new();
    for o in outcomes {
        if !files.contains(&o.file.as_str()) {
            files.push(&o.file);
        }
    }
    let mut total = Duration::ZERO;
    for file in files {
        let mut suite = TestSuite::new(file);
        let mut time = Duration::ZERO;
        for o in outcomes.iter().filter(|o| o.file == file) {
            time += seconds(o.seconds);
            suite.add_test_case(testcase(o));
        }
        suite.set_time(time);
        total += time;
        add_build(&mut suite, build);
        report.add_test_suite(suite);
    }
    for error in errors {
        let mut suite = error_suite(error);
        add_build(&mut suite, build);
        report.add_test_suite(suite);
    }
    report.set_time(total);
    // quick-junit writes to memory here; an error would be a bug in it, not bad input.
    report
        .to_string()
        .unwrap_or_else(|e| format!("<!-- JUnit report could not be written: {e} -->\n"))
}

/// The code that checked the suite, as properties: JUnit has no place for it on the
/// report itself.
fn add_build(suite: &mut TestSuite, build: &Build) {
    let dirty = build.dirty.map_or("unknown".to_string(), |d| d.to_string());
    suite.add_properties([
        ("kvcc_version", build.version.as_str()),
        ("kvcc_commit", build.commit.as_str()),
        ("kvcc_dirty", dirty.as_str()),
    ]);
}

fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or_default()
}

/// An input error as a testsuite with one errored testcase, at the error's file and line.
fn error_suite(error: &InputError) -> TestSuite {
    let file = error.file.as_deref().unwrap_or("kvcc");
    let line = error.at.map_or(1, |(line, _)| line);
    let message = match &error.field {
        Some(field) => format!("{field}: {}", error.message),
        None => error.message.clone(),
    };
    let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
    status
        .set_type("input")
        .set_message(message)
        .set_description(diagnostic::render(error, false));
    let mut case = TestCase::new("input error", status);
    case.set_classname("kvcc.input").set_time(Duration::ZERO);
    case.extra.insert("file".into(), file.into());
    case.extra.insert("line".into(), line.to_string().into());
    let mut suite = TestSuite::new(file);
    suite.set_time(Duration::ZERO);
    suite.add_test_case(case);
    suite
}

fn testcase(o: &Outcome) -> TestCase {
    let status = if o.matches {
        TestCaseStatus::success()
    } else {
        let mut message = format!("expected {}, got {}", o.expectation, o.verdict_text());
        // An incomplete run that did not reach an expected property proves no mismatch.
        let kind = if o.unreached.is_empty() {
            "mismatch"
        } else {
            message += &format!("; {} not reached before the limit", o.unreached.join(", "));
            "inconclusive"
        };
        let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
        status
            .set_type(kind)
            .set_message(message.clone())
            .set_description(message);
        status
    };
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
    let mut case = TestCase::new(o.title(), status);
    case.set_classname(format!("kvcc.{}", o.spec))
        .set_time(seconds(o.seconds))
        .set_system_out(details);
    case.extra.insert("file".into(), o.file.as_str().into());
    case.extra
        .insert("line".into(), o.expect_line.to_string().into());
    case
}
