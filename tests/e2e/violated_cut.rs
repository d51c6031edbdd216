//! Issue 28, item 2, "violated means violated": a run cut by a limit after a
//! replay-verified violation answers *violated* with the clauses found so far, marked
//! incomplete in the table, JSON lines, JUnit and GitHub annotations; a cut before any
//! violation stays inconclusive; an expected property the cut run did not reach leaves
//! the check inconclusive, never a mismatch it cannot prove (`run::judge`).
//!
//! Issue 28, item 1: `--first-violation` is such a cut, chosen by the user: the run ends
//! with the first BFS level that breaks a clause.

use crate::common::{fixture, kvcc, output, run};

const CUT: &str = "issue28-cut-after-violation.toml";
const HOLDS: &str = "issue28-cut-expects-holds.toml";

fn json_line(args: &[&str]) -> (i32, serde_json::Value) {
    let mut args = args.to_vec();
    args.extend(["--format", "json"]);
    let (code, stdout, stderr) = run(&args);
    let line = stdout.lines().next().unwrap_or_else(|| panic!("{stderr}"));
    (code, serde_json::from_str(line).expect("a JSON line"))
}

#[test]
fn issue28_cut_after_violations_is_violated_incomplete_and_matches() {
    let (code, stdout, _) = run(&["check", &fixture(CUT)]);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("incomplete: state limit 600 reached"),
        "{stdout}"
    );
    assert!(!stdout.contains("inconclusive"), "{stdout}");
    assert!(stdout.contains("1 check: 1 as expected"), "{stdout}");

    let (code, line) = json_line(&["check", &fixture(CUT)]);
    assert_eq!(code, 0);
    assert_eq!(line["format_version"], 3);
    assert_eq!(line["verdict"], "violated");
    assert_eq!(line["incomplete_reason"], "state limit 600 reached");
    assert_eq!(line["inconclusive_reason"], serde_json::Value::Null);
    assert_eq!(line["matches"], true);
    assert_eq!(line["unreached"], serde_json::json!([]));
    assert_eq!(line["unique_states"], 600);
    let found: Vec<&str> = line["violations"]
        .as_array()
        .expect("violations")
        .iter()
        .map(|v| v["property"].as_str().expect("a property"))
        .collect();
    assert_eq!(
        found,
        ["no-free-under-rdma", "exactly-once", "aggregator-drains"]
    );
}

#[test]
fn issue28_cut_after_a_violation_refutes_holds() {
    let (code, stdout, _) = run(&["check", &fixture(HOLDS)]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("MISMATCH: expected holds"), "{stdout}");
    assert!(stdout.contains("incomplete: state limit 600"), "{stdout}");
    let (_, line) = json_line(&["check", &fixture(HOLDS)]);
    assert_eq!(line["verdict"], "violated");
    assert_eq!(line["matches"], false);
    assert_eq!(line["unreached"], serde_json::json!([]));
}

#[test]
fn issue28_broken_twin_cut_before_any_violation_is_inconclusive() {
    let (code, line) = json_line(&["check", &fixture(CUT), "--max-states", "100"]);
    assert_eq!(code, 1);
    assert_eq!(line["verdict"], "inconclusive");
    assert_eq!(line["inconclusive_reason"], "state limit 100 reached");
    assert_eq!(line["incomplete_reason"], serde_json::Value::Null);
    assert_eq!(line["violations"], serde_json::json!([]));
    assert_eq!(line["matches"], false);
    // Nor does holds pass: nothing was found, nothing is known.
    let (code, line) = json_line(&["check", &fixture(HOLDS), "--max-states", "100"]);
    assert_eq!(code, 1);
    assert_eq!(line["verdict"], "inconclusive");
}

#[test]
fn issue28_an_expected_property_not_reached_is_inconclusive_not_a_mismatch() {
    let args = ["check", &fixture(CUT), "--max-states", "200"];
    let (code, stdout, _) = output(kvcc().args(args).env("COLUMNS", "400"));
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("violated (no-free-under-rdma; incomplete: state limit 200 reached)"),
        "{stdout}"
    );
    // MATCH is the last column, wrapped: read it without the spaces.
    let squeezed: String = stdout.split_whitespace().collect();
    assert!(
        squeezed.contains("INCONCLUSIVE:expectedviolated(")
            && squeezed.contains("exactly-once,aggregator-drainsnotreached"),
        "{stdout}"
    );
    // The footer names MISMATCH as a meaning; no row is one.
    assert!(
        !stdout
            .lines()
            .any(|l| l.contains("MISMATCH:") && !l.starts_with("ok:")),
        "{stdout}"
    );
    let (code, line) = json_line(&args);
    assert_eq!(code, 1);
    assert_eq!(line["verdict"], "violated");
    assert_eq!(line["matches"], false);
    assert_eq!(
        line["unreached"],
        serde_json::json!(["exactly-once", "aggregator-drains"])
    );
}

#[test]
fn issue28_junit_and_github_mark_the_cut_run_incomplete() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let xml = dir.path().join("kvcc.xml");
    let summary = dir.path().join("summary.md");
    let (code, stdout, _) = output(
        kvcc()
            .args(["check", &fixture(CUT), &fixture(HOLDS), "--junit"])
            .arg(&xml)
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_STEP_SUMMARY", &summary),
    );
    assert_eq!(code, 1, "{stdout}");
    let warnings: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("::warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stdout}");
    assert!(
        warnings[0].contains("issue28-cut-after-violation"),
        "{}",
        warnings[0]
    );
    assert!(warnings[0].contains("incomplete"), "{}", warnings[0]);
    let errors: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("::error"))
        .collect();
    assert_eq!(errors.len(), 1, "{stdout}");
    assert!(
        errors[0].contains("issue28-cut-expects-holds"),
        "{}",
        errors[0]
    );
    let summary = std::fs::read_to_string(&summary).expect("a job summary");
    assert!(
        summary.contains("incomplete: state limit 600 reached"),
        "{summary}"
    );

    let junit = std::fs::read_to_string(&xml).expect("JUnit written");
    let doc = roxmltree::Document::parse(&junit).expect("JUnit XML");
    let case = |name: &str| {
        doc.descendants()
            .find(|n| n.has_tag_name("testcase") && n.attribute("name") == Some(name))
            .unwrap_or_else(|| panic!("testcase {name}: {junit}"))
    };
    let met = case("issue28-cut-after-violation");
    assert!(
        met.children().all(|c| !c.has_tag_name("failure")),
        "{junit}"
    );
    let out = met
        .children()
        .find(|c| c.has_tag_name("system-out"))
        .and_then(|c| c.text())
        .unwrap_or_default();
    assert!(
        out.contains("incomplete: state limit 600 reached"),
        "{junit}"
    );
    let failure = case("issue28-cut-expects-holds")
        .children()
        .find(|c| c.has_tag_name("failure"))
        .expect("a failure");
    assert_eq!(failure.attribute("type"), Some("mismatch"));

    // Undecided: a JUnit failure of type inconclusive, an error annotation saying why.
    let (code, stdout, _) = output(
        kvcc()
            .args(["check", &fixture(CUT), "--max-states", "200", "--junit"])
            .arg(&xml)
            .env("GITHUB_ACTIONS", "true"),
    );
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("::error") && l.contains("not reached before the limit")),
        "{stdout}"
    );
    let junit = std::fs::read_to_string(&xml).expect("JUnit written");
    assert!(junit.contains("type=\"inconclusive\""), "{junit}");
}

#[test]
fn issue28_merge_reads_an_incomplete_violation_back() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let lines = dir.path().join("run.jsonl");
    let (code, stdout, _) = run(&[
        "check",
        &fixture(CUT),
        "--max-states",
        "200",
        "--format",
        "json",
    ]);
    assert_eq!(code, 1);
    std::fs::write(&lines, &stdout).expect("written");
    let (code, merged, stderr) = output(
        kvcc()
            .args(["merge", "--format", "json"])
            .arg(&lines)
            .env("COLUMNS", "400"),
    );
    assert_eq!(code, 1, "{stderr}");
    let line: serde_json::Value =
        serde_json::from_str(merged.lines().next().expect("a line")).expect("JSON");
    assert_eq!(line["incomplete_reason"], "state limit 200 reached");
    assert_eq!(
        line["unreached"],
        serde_json::json!(["exactly-once", "aggregator-drains"])
    );
}

fn properties(line: &serde_json::Value) -> Vec<String> {
    line["violations"]
        .as_array()
        .expect("violations")
        .iter()
        .map(|v| v["property"].as_str().expect("a property").to_string())
        .collect()
}

#[test]
fn issue28_first_violation_is_the_whole_runs_shallowest_violations() {
    let cut = fixture(CUT);
    let whole = ["check", &cut, "--max-states", "1000000", "--shortest"];
    let (code, line) = json_line(&whole);
    assert_eq!(code, 0, "{line}");
    let all = line["violations"].as_array().expect("violations").clone();
    let shallowest = all
        .iter()
        .map(|v| v["depth"].as_u64().expect("a depth"))
        .min()
        .expect("the whole run finds violations");
    let expected: Vec<&str> = all
        .iter()
        .filter(|v| v["depth"].as_u64() == Some(shallowest))
        .map(|v| v["property"].as_str().expect("a property"))
        .collect();
    // The broken twin of stopping early: the whole run breaks more, and deeper.
    assert!(all.len() > expected.len(), "{line}");

    let first = [
        "check",
        &cut,
        "--max-states",
        "1000000",
        "--first-violation",
    ];
    let (code, stdout, _) = run(&first);
    assert_eq!(code, 1, "expected clauses not reached: {stdout}");
    assert!(
        stdout.contains("1 check: 0 as expected, 0 mismatched, 1 not reached before the cut"),
        "{stdout}"
    );
    let (code, line) = json_line(&first);
    assert_eq!(code, 1, "expected clauses not reached: {line}");
    assert_eq!(line["verdict"], "violated");
    assert_eq!(properties(&line), expected);
    assert_eq!(
        line["incomplete_reason"],
        format!(
            "stopped after depth {shallowest}, the first to break a clause (first violation asked for)"
        )
    );
    assert_eq!(
        line["unreached"],
        serde_json::json!(["exactly-once", "aggregator-drains"])
    );
    assert_eq!(line["settings"]["first_violation"], true);
    for v in line["violations"].as_array().expect("violations") {
        assert_eq!(v["depth"].as_u64(), Some(shallowest), "{line}");
    }
    // The level is finished: the states through the shallowest depth, at any thread
    // count, as many as a run cut one depth earlier counts (that run also counts the
    // states it found at the depth it did not expand).
    let states = line["unique_states"].clone();
    let mut two = first.to_vec();
    two.extend(["--threads", "2"]);
    let (_, line2) = json_line(&two);
    assert_eq!(line2["unique_states"], states);
    assert_eq!(properties(&line2), expected);
    let depth = (shallowest - 1).to_string();
    let (_, bounded) = json_line(&["check", &cut, "--max-depth", &depth]);
    assert_eq!(bounded["unique_states"], states, "{bounded}");
}

#[test]
fn issue28_first_violation_leaves_a_holding_check_whole() {
    let holds = [
        "check",
        "specs/pr59325-fix.toml",
        "--point",
        "prefill.pcp=2",
        "--point",
        "requests=2",
    ];
    let (code, whole) = json_line(&holds);
    assert_eq!(code, 0, "{whole}");
    assert_eq!(whole["verdict"], "holds");
    let mut first = holds.to_vec();
    first.push("--first-violation");
    let (code, first) = json_line(&first);
    assert_eq!(code, 0, "{first}");
    assert_eq!(first["verdict"], "holds");
    assert_eq!(first["incomplete_reason"], serde_json::Value::Null);
    assert_eq!(first["unique_states"], whole["unique_states"]);
}

#[test]
fn issue28_first_violation_and_past_violations_are_refused_together() {
    let (code, _, stderr) = run(&[
        "check",
        &fixture(CUT),
        "--first-violation",
        "--past-violations",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}
