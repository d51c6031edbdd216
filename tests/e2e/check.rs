//! `kvcc check` end to end: verdicts against expectations, every exit code, every output
//! format. Fixtures are in tests/fixtures/ (single request, tp = 1, pcp = 2: fast).

use crate::common::{error_at, fixture, kvcc, line_of, output, root, run};
use std::path::Path;

#[test]
fn seed_59325_regression_and_fix_check_as_expected_exit_0() {
    let (code, stdout, stderr) = run(&[
        "check",
        &fixture("seed-59325.toml"),
        &fixture("seed-59325-fixed.toml"),
    ]);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("SPEC"), "{stdout}");
    // The table names the violated properties; the clauses are in JSON and JUnit.
    assert!(
        stdout.contains("violated (eventually-freed, aggregator-drains)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("2 checks: 2 as expected, 0 mismatched"),
        "{stdout}"
    );
    assert!(!stdout.contains("MISMATCH"), "{stdout}");
}

#[test]
fn matrix_expands_and_expect_when_overrides_per_point() {
    let (code, stdout, _) = run(&["check", &fixture("seed-59325-matrix.toml")]);
    assert_eq!(code, 0, "{stdout}");
    for pcp in [1, 2, 4] {
        assert!(
            stdout.contains(&format!("seed-59325-pcp prefill.pcp={pcp} ")),
            "{stdout}"
        );
    }
    let pcp1 = stdout
        .lines()
        .find(|l| l.contains("prefill.pcp=1 "))
        .expect("a row for pcp=1");
    assert!(pcp1.contains("holds  "), "{pcp1}");
}

#[test]
fn point_selects_one_matrix_point() {
    let (code, stdout, _) = run(&[
        "check",
        &fixture("seed-59325-matrix.toml"),
        "--point",
        "prefill.pcp=4",
    ]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("prefill.pcp=4"), "{stdout}");
    assert!(!stdout.contains("prefill.pcp=2"), "{stdout}");
    assert!(stdout.contains("1 check: 1 as expected"), "{stdout}");
}

#[test]
fn point_outside_the_matrix_exits_2() {
    let (code, _, stderr) = run(&[
        "check",
        &fixture("seed-59325-matrix.toml"),
        "--point",
        "prefill.pcp=3",
    ]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("not a value of the matrix (1, 2, 4)"),
        "{stderr}"
    );
}

#[test]
fn mismatching_expectation_exits_1() {
    let (code, stdout, _) = run(&["check", &fixture("mismatch.toml")]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("MISMATCH"), "{stdout}");
    assert!(
        stdout.contains("1 check: 0 as expected, 1 mismatched"),
        "{stdout}"
    );
}

#[test]
fn issue_4_typo_exits_2_naming_file_line_and_field() {
    let file = fixture("typo.toml");
    let line = line_of(&file, "requets");
    let (code, stdout, stderr) = run(&["check", &file]);
    assert_eq!(code, 2, "{stdout}");
    assert!(
        error_at(&stderr, "requets: unknown field `requets`", &file, line, 1),
        "{stderr}"
    );
    assert!(
        stdout.is_empty(),
        "nothing is checked on an input error: {stdout}"
    );
}

#[test]
fn typo_in_a_nested_table_names_the_full_field_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pcq.toml");
    let text = std::fs::read_to_string(root().join(fixture("seed-59325.toml")))
        .unwrap()
        .replace("pcp = 2", "pcq = 2");
    std::fs::write(&file, &text).unwrap();
    let line = text.lines().position(|l| l.starts_with("pcq")).unwrap() + 1;
    let (code, _, stderr) = run(&["check", file.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        error_at(
            &stderr,
            "prefill.pcq: unknown field `pcq`",
            file.to_str().unwrap(),
            line,
            1
        ),
        "{stderr}"
    );
    assert!(stderr.contains("= help: did you mean `pcp`?"), "{stderr}");
}

#[test]
fn impossible_topology_exits_2_naming_the_field() {
    let file = fixture("impossible.toml");
    let line = line_of(&file, "layout");
    let (code, _, stderr) = run(&["check", &file]);
    assert_eq!(code, 2);
    assert!(
        error_at(
            &stderr,
            "prefill.layout: a sharded layout needs dcp == pcp",
            &file,
            line,
            10
        ),
        "{stderr}"
    );
}

#[test]
fn malformed_toml_exits_2_with_position() {
    let file = fixture("malformed.toml");
    let line = line_of(&file, "[prefill");
    let (code, _, stderr) = run(&["check", &file]);
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with(&format!("error: {file}:{line}:")),
        "{stderr}"
    );
    assert!(stderr.contains("invalid TOML"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line per error: {stderr}");
}

/// The matrix fixture with its `prefill.pcp` entry replaced by `entry`, written to `dir`
/// as `name`: its path, and the line of that entry.
fn matrix_fixture_with(dir: &Path, name: &str, entry: &str) -> (String, usize) {
    let file = dir.join(name).display().to_string();
    let text = std::fs::read_to_string(root().join(fixture("seed-59325-matrix.toml")))
        .unwrap()
        .replace("\"prefill.pcp\" = [1, 2, 4]", entry);
    std::fs::write(&file, text).unwrap();
    let line = line_of(&file, "\"prefill.pcp\"");
    (file, line)
}

#[test]
fn matrix_value_errors_point_at_the_matrix_entry() {
    let dir = tempfile::tempdir().unwrap();
    let (file, line) = matrix_fixture_with(dir.path(), "zero.toml", "\"prefill.pcp\" = [1, 0]");
    let (code, _, stderr) = run(&["check", &file]);
    assert_eq!(code, 2);
    assert!(
        error_at(
            &stderr,
            "prefill.pcp: must be at least 1 (from [matrix] \"prefill.pcp\")",
            &file,
            line,
            21
        ),
        "{stderr}"
    );
}

/// A topology the matrix makes impossible (each value fine alone, their product beyond
/// kvcc's world size) points at the matrix values that made it, naming each, not at the
/// `[prefill]` table the spec wrote.
#[test]
fn a_world_size_the_matrix_makes_impossible_points_at_the_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let (file, line) = matrix_fixture_with(
        dir.path(),
        "big.toml",
        "\"prefill.pcp\" = [1, 16]\n\"prefill.tp\" = [1, 16]",
    );
    let (code, _, stderr) = run(&["check", &file]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("(from [matrix] \"prefill.pcp\" = 16, \"prefill.tp\" = 16)"),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("big.toml:{line}:")), "{stderr}");
}

#[test]
fn bad_matrix_path_and_bad_property_name_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(root().join(fixture("seed-59325-matrix.toml"))).unwrap();
    for (from, to, want) in [
        (
            "\"prefill.pcp\" = [1, 2, 4]",
            "\"prefill.pcq\" = [1, 2, 4]",
            "matrix.\"prefill.pcq\": `prefill.pcq` is not a Config field path",
        ),
        (
            "\"prefill.pcp\" = [1, 2, 4]",
            "\"prefill.pcp\" = [1, 2, 2]",
            "matrix.\"prefill.pcp\": 2 is in the list twice",
        ),
        (
            "violates = [\"eventually-freed\", \"aggregator-drains\"]",
            "violates = [\"eventually-freed\", \"aggregator-drain\"]",
            "expect.violates[1]: unknown property `aggregator-drain`",
        ),
        (
            "match = { \"prefill.pcp\" = 1 }",
            "match = { \"prefill.tp\" = 1 }",
            "expect.when[0].match.\"prefill.tp\": `prefill.tp` is not a path of this spec's [matrix]",
        ),
        ("version = 1", "version = 2", "version: spec format version 2 is not supported"),
    ] {
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, base.replace(from, to)).unwrap();
        let (code, _, stderr) = run(&["check", file.to_str().unwrap()]);
        assert_eq!(code, 2, "{to}: {stderr}");
        assert!(stderr.contains(want), "{to}: {stderr}");
    }
}

#[test]
fn unreadable_spec_and_missing_path_exit_2() {
    let (code, _, stderr) = run(&["check", "tests/fixtures/no-such-spec.toml"]);
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with("error: tests/fixtures/no-such-spec.toml: cannot read"),
        "{stderr}"
    );
}

#[test]
fn usage_errors_exit_2() {
    let (code, _, stderr) = run(&["check", "--threads", "0"]);
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = run(&["check", "--point", "no-equals-sign"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("KEY=VALUE"), "{stderr}");
    let (code, _, _) = run(&["frobnicate"]);
    assert_eq!(code, 2);
}

#[test]
fn inconclusive_never_passes_as_holds() {
    let (code, stdout, _) = run(&[
        "check",
        &fixture("seed-59325-fixed.toml"),
        "--max-states",
        "5",
    ]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("inconclusive (state limit"), "{stdout}");
    assert!(stdout.contains("MISMATCH"), "{stdout}");
    // The spec's own [limits] cut it too.
    let (code, stdout, _) = run(&["check", &fixture("limited.toml")]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("inconclusive (state limit 5"), "{stdout}");
    // And a command-line limit overrides the spec's.
    let (code, stdout, _) = run(&["check", &fixture("limited.toml"), "--max-states", "1000000"]);
    assert_eq!(code, 0, "{stdout}");
}

#[test]
fn json_lines_parse_and_carry_the_documented_fields() {
    let (code, stdout, _) = run(&[
        "check",
        &fixture("seed-59325-matrix.toml"),
        &fixture("mismatch.toml"),
        "--format",
        "json",
    ]);
    assert_eq!(code, 1);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON object"))
        .collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    for line in &lines {
        for field in [
            "spec",
            "file",
            "point",
            "verdict",
            "violations",
            "expected",
            "matches",
            "unique_states",
            "transitions",
            "max_depth",
            "seconds",
            "states_per_second",
            "kvcc_version",
            "format_version",
        ] {
            assert!(line.get(field).is_some(), "{field} missing in {line}");
        }
        assert_eq!(line["format_version"], 3);
    }
    let pcp2 = &lines[1];
    assert_eq!(pcp2["spec"], "seed-59325-pcp");
    assert_eq!(pcp2["point"]["prefill.pcp"], 2);
    assert_eq!(pcp2["verdict"], "violated");
    assert_eq!(pcp2["matches"], true);
    assert_eq!(pcp2["violations"][0]["property"], "eventually-freed");
    assert_eq!(
        pcp2["violations"][0]["clause"],
        "delay-freed-request-never-freed"
    );
    assert_eq!(pcp2["violations"][0]["depth"], 8);
    assert_eq!(pcp2["unique_states"], 23);
    assert_eq!(lines[3]["spec"], "mismatch");
    assert_eq!(lines[3]["matches"], false);
    assert_eq!(lines[3]["expected"]["verdict"], "holds");
}

#[test]
fn junit_is_valid_xml_with_one_testcase_per_check() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("kvcc.xml");
    let (code, _, _) = run(&[
        "check",
        &fixture("seed-59325-matrix.toml"),
        &fixture("mismatch.toml"),
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).expect("well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    assert_eq!(root.attribute("tests"), Some("4"));
    assert_eq!(root.attribute("failures"), Some("1"));
    let cases: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    assert_eq!(cases.len(), 4);
    let failed: Vec<_> = cases
        .iter()
        .filter(|c| c.children().any(|n| n.has_tag_name("failure")))
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].attribute("name"), Some("mismatch"));
}

#[test]
fn github_actions_get_annotations_at_the_expect_line_and_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("summary.md");
    let file = fixture("mismatch.toml");
    let line = line_of(&file, "[expect]");
    let (code, stdout, _) = output(
        kvcc()
            .args(["check", &file, &fixture("seed-59325.toml")])
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_STEP_SUMMARY", &summary),
    );
    assert_eq!(code, 1);
    let annotations: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("::error "))
        .collect();
    assert_eq!(annotations.len(), 1, "{stdout}");
    assert!(
        annotations[0].starts_with(&format!("::error file={file},line={line},")),
        "{}",
        annotations[0]
    );
    assert!(
        annotations[0].contains("::expected holds, got violated ("),
        "{}",
        annotations[0]
    );
    let summary = std::fs::read_to_string(&summary).unwrap();
    assert!(
        summary.contains("| spec | verdict | expected |"),
        "{summary}"
    );
    assert!(summary.contains("❌ mismatch"), "{summary}");
}

#[test]
fn expect_when_mismatch_is_annotated_at_its_own_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("when.toml");
    let text = std::fs::read_to_string(root().join(fixture("seed-59325-matrix.toml")))
        .unwrap()
        .replace(
            "match = { \"prefill.pcp\" = 1 }",
            "match = { \"prefill.pcp\" = 2 }",
        );
    std::fs::write(&file, &text).unwrap();
    let line = text
        .lines()
        .position(|l| l.starts_with("[[expect.when]]"))
        .unwrap()
        + 1;
    let (code, stdout, _) = output(
        kvcc()
            .args(["check", file.to_str().unwrap()])
            .env("GITHUB_ACTIONS", "true"),
    );
    assert_eq!(code, 1);
    let annotations: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("::error "))
        .collect();
    // pcp = 1 now expects the [expect] default (violated) and pcp = 2 the override (holds).
    assert_eq!(annotations.len(), 2, "{stdout}");
    assert!(
        annotations
            .iter()
            .any(|a| a.contains(&format!(",line={line},"))),
        "{stdout}"
    );
}

#[test]
fn shipped_specs_check_as_expected() {
    // `kvcc check` with no argument checks specs/ (issue 4's first acceptance item).
    let (code, stdout, stderr) = run(&["check"]);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
}

#[test]
fn a_misspelt_spec_table_is_an_unknown_field_not_a_missing_expect() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("expected.toml");
    let text = std::fs::read_to_string(root().join(fixture("seed-59325.toml")))
        .unwrap()
        .replace("[expect]", "[expected]");
    std::fs::write(&file, &text).unwrap();
    let line = text.lines().position(|l| l == "[expected]").unwrap() + 1;
    let (code, _, stderr) = run(&["check", file.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        error_at(
            &stderr,
            "expected: unknown field `expected`",
            file.to_str().unwrap(),
            line,
            2
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("`expect`"),
        "the spec keys are listed: {stderr}"
    );
}

#[test]
fn a_spec_named_twice_is_checked_once_and_two_specs_may_not_share_a_name() {
    let (code, stdout, _) = run(&[
        "check",
        "tests/fixtures/seed-59325.toml",
        "tests/fixtures/seed-59325.toml",
    ]);
    assert_eq!(code, 0);
    assert!(stdout.contains("1 check: 1 as expected"), "{stdout}");
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("seed-59325.toml");
    std::fs::copy(root().join(fixture("seed-59325.toml")), &copy).unwrap();
    let (code, _, stderr) = run(&["check", &fixture("seed-59325.toml"), copy.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("spec name `seed-59325` is also used by tests/fixtures/seed-59325.toml"),
        "{stderr}"
    );
}

#[test]
fn input_errors_are_annotated_under_github_actions() {
    let file = fixture("typo.toml");
    let line = line_of(&file, "requets");
    let (code, stdout, _) = output(kvcc().args(["check", &file]).env("GITHUB_ACTIONS", "true"));
    assert_eq!(code, 2);
    assert!(
        stdout.starts_with(&format!(
            "::error file={file},line={line},title=kvcc%3A invalid input::requets: unknown field"
        )),
        "{stdout}"
    );
}

#[test]
fn long_matrix_points_keep_trace_names_short_and_distinct() {
    use kvcc::spec::point::Point;
    let long = |v: i64| {
        Point(
            (0..20)
                .map(|i| {
                    (
                        format!("faults.some-long-field-name-{i}"),
                        toml::Value::Integer(v),
                    )
                })
                .collect(),
        )
    };
    let (a, b) = (long(1).file_label(), long(2).file_label());
    assert!(a.len() <= 120, "{a}");
    assert_ne!(a, b);
    assert_eq!(a, long(1).file_label(), "deterministic");
}

/// Issue 12: reviewers know "at least this one" or "one of these" as often as the exact
/// set; `violates` stays exact.
#[test]
fn issue12_violates_all_and_violates_any_expectations() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join(fixture("seed-59325.toml"))).unwrap();
    let exact = "violates = [\"eventually-freed\", \"aggregator-drains\"]";
    assert!(text.contains(exact), "{text}");
    for (expect, code) in [
        (exact, 0),
        ("violates = [\"eventually-freed\"]", 1),
        ("violates-all = [\"eventually-freed\"]", 0),
        (
            "violates-all = [\"eventually-freed\", \"no-free-under-rdma\"]",
            1,
        ),
        (
            "violates-any = [\"no-free-under-rdma\", \"aggregator-drains\"]",
            0,
        ),
        (
            "violates-any = [\"no-free-under-rdma\", \"exactly-once\"]",
            1,
        ),
    ] {
        let spec = dir.path().join("expect.toml");
        std::fs::write(&spec, text.replace(exact, expect)).unwrap();
        let (got, stdout, stderr) = run(&["check", spec.to_str().unwrap()]);
        assert_eq!(got, code, "{expect}: {stdout}{stderr}");
    }
    let spec = dir.path().join("both.toml");
    std::fs::write(
        &spec,
        text.replace(
            exact,
            &format!("{exact}\nviolates-any = [\"exactly-once\"]"),
        ),
    )
    .unwrap();
    let (got, _, stderr) = run(&["check", spec.to_str().unwrap()]);
    assert_eq!(got, 2);
    assert!(
        stderr.contains("expect.violates-any: give one of"),
        "{stderr}"
    );
}

/// Issue 14: every holds verdict says what its fingerprints could hide, and `--exact`
/// (states compared in full) explores the same states on every shipped spec.
#[test]
fn issue14_holds_shows_the_collision_estimate_and_exact_agrees() {
    let lines = |args: &[&str]| -> Vec<serde_json::Value> {
        let (code, stdout, stderr) = run(args);
        assert_eq!(code, 0, "{stderr}");
        stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let plain = lines(&["check", "--format", "json"]);
    let exact = lines(&["check", "--format", "json", "--exact"]);
    assert_eq!(plain.len(), exact.len());
    for (p, e) in plain.iter().zip(&exact) {
        assert_eq!(p["unique_states"], e["unique_states"], "{}", p["spec"]);
        assert_eq!(p["verdict"], e["verdict"], "{}", p["spec"]);
        assert_eq!(p["fingerprint_bits"], 64);
        let chance = p["collision_probability"].as_f64().unwrap();
        assert!(chance > 0.0 && chance < 1e-9, "{chance}");
        assert!(e["collision_probability"].is_null());
        assert!(e["fingerprint_bits"].is_null());
    }
    let (_, table, _) = run(&["check"]);
    assert!(
        table.contains("holds verdicts rest on 64-bit state fingerprints: the chance a collision hid a state is at most"),
        "{table}"
    );
    let (_, table, _) = run(&["check", "--exact"]);
    assert!(
        table.contains("compared every state in full (--exact)"),
        "{table}"
    );
}

/// Issue 13: `--quiet` prints only the summary on an all-expected run, and the
/// mismatches when there are some.
#[test]
fn issue13_quiet_prints_only_mismatches_and_the_summary() {
    let (code, stdout, _) = run(&["check", "--quiet"]);
    assert_eq!(code, 0);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.ends_with("as expected, 0 mismatched\n"), "{stdout}");
    let (code, stdout, _) = run(&[
        "check",
        "-q",
        &fixture("mismatch.toml"),
        &fixture("seed-59325.toml"),
    ]);
    assert_eq!(code, 1);
    assert!(stdout.contains("mismatch "), "{stdout}");
    assert!(!stdout.contains("seed-59325 "), "{stdout}");
    assert!(
        stdout.ends_with("2 checks: 1 as expected, 1 mismatched\n"),
        "{stdout}"
    );
}

/// `--no-symmetry` explores the unreduced graph: more states where ranks or requests are
/// interchangeable, the same verdicts and violated clauses, and the flag is repeated in
/// the reproduce command so a trace reproduces the run that found it.
#[test]
fn issue15_no_symmetry_explores_more_states_with_the_same_verdicts() {
    // The seed fix with two requests (holds), and a family that violates.
    let checks = |extra: &[&str]| -> Vec<(String, String, u64)> {
        let runs: [&[&str]; 2] = [
            &["specs/pr59325-fix.toml", "--point", "requests=2"],
            &["specs/multiconnector-repeated-load-report.toml"],
        ];
        let mut lines = Vec::new();
        for spec in runs {
            let mut args = vec!["check", "--format", "json"];
            args.extend(spec);
            args.extend(extra);
            let (_, stdout, stderr) = run(&args);
            assert!(!stderr.contains("error"), "{stderr}");
            for l in stdout.lines() {
                let v: serde_json::Value = serde_json::from_str(l).expect("JSON line");
                let clauses: Vec<String> = v["violations"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| format!("{}: {}", c["property"], c["clause"]))
                    .collect();
                lines.push((
                    format!("{} {}", v["spec"], v["point"]),
                    format!("{} {clauses:?}", v["verdict"]),
                    v["unique_states"].as_u64().unwrap(),
                ));
            }
        }
        lines
    };
    let reduced = checks(&[]);
    let full = checks(&["--no-symmetry"]);
    assert_eq!(reduced.len(), full.len());
    assert!(!reduced.is_empty());
    let mut larger = 0;
    for (r, f) in reduced.iter().zip(&full) {
        assert_eq!(
            (&r.0, &r.1),
            (&f.0, &f.1),
            "same check, same verdict and clauses"
        );
        assert!(f.2 >= r.2, "{}: {} unreduced < {} reduced", r.0, f.2, r.2);
        larger += usize::from(f.2 > r.2);
    }
    assert!(larger > 0, "the reduction bites somewhere");
}
