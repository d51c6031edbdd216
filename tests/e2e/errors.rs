//! Input errors as a compiler shows them (issue 13): the source line with the key
//! underlined and the closest valid key, exit 2, and JUnit and JSON still written.

use crate::common::{error_at, fixture, line_of, root, run};

#[test]
fn issue_13_a_typo_shows_the_line_underlined_a_suggestion_and_still_writes_junit() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("kvcc.xml");
    let file = fixture("typo.toml");
    let line = line_of(&file, "requets");
    let (code, stdout, stderr) = run(&["check", &file, "--junit", junit.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        error_at(&stderr, "requets: unknown field `requets`", &file, line, 1),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{line} | requets = 1\n")),
        "{stderr}"
    );
    assert!(
        stderr.contains("  | ^^^^^^^\n"),
        "the key, and only the key, underlined: {stderr}"
    );
    assert!(
        stderr.contains("= help: did you mean `requests`?"),
        "{stderr}"
    );

    let xml = std::fs::read_to_string(&junit).expect("JUnit is written on exit 2");
    let doc = roxmltree::Document::parse(&xml).expect("well-formed XML");
    assert_eq!(doc.root_element().attribute("errors"), Some("1"));
    // No check ran: no time, and not the "-0.000" an empty float sum prints.
    assert_eq!(doc.root_element().attribute("time"), Some("0.000"));
    let case = doc
        .descendants()
        .find(|n| n.has_tag_name("testcase"))
        .expect("a testcase for the error");
    assert_eq!(case.attribute("file"), Some(file.as_str()));
    assert_eq!(case.attribute("line"), Some(line.to_string().as_str()));
    let error = case
        .children()
        .find(|n| n.has_tag_name("error"))
        .expect("an <error>");
    assert!(error
        .attribute("message")
        .unwrap()
        .contains("unknown field `requets`"));
    assert!(error.text().unwrap().contains("did you mean `requests`?"));
}

#[test]
fn json_output_has_an_error_line_on_exit_2() {
    let file = fixture("typo.toml");
    let (code, stdout, _) = run(&["check", &file, "--format", "json"]);
    assert_eq!(code, 2);
    let line: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(line["format_version"], 3);
    assert_eq!(line["error"]["file"], file.as_str());
    assert_eq!(line["error"]["line"], line_of(&file, "requets"));
    assert_eq!(line["error"]["field"], "requets");
    assert_eq!(line["error"]["help"], "did you mean `requests`?");
}

#[test]
fn misspelt_values_properties_and_matrix_paths_get_suggestions() {
    let dir = tempfile::tempdir().unwrap();
    let base =
        std::fs::read_to_string(crate::common::root().join(fixture("seed-59325-matrix.toml")))
            .unwrap();
    for (from, to, help) in [
        (
            "\"prefill.pcp\" = [1, 2, 4]",
            "\"prefill.pcq\" = [1, 2, 4]",
            "did you mean `prefill.pcp`?",
        ),
        (
            "\"aggregator-drains\"]",
            "\"aggregator-drain\"]",
            "did you mean `aggregator-drains`?",
        ),
        (
            "expected-count = \"world-size\"",
            "expected-count = \"world-sise\"",
            "did you mean `world-size`?",
        ),
    ] {
        assert!(base.contains(from), "{from}");
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, base.replace(from, to)).unwrap();
        let (code, _, stderr) = run(&["check", file.to_str().unwrap()]);
        assert_eq!(code, 2, "{to}: {stderr}");
        assert!(
            stderr.contains(&format!("= help: {help}")),
            "{to}: {stderr}"
        );
        assert!(stderr.contains(" | "), "the source line: {stderr}");
    }
    // Nothing close: no guess.
    let file = dir.path().join("far.toml");
    std::fs::write(&file, base.replace("[prefill]", "[zzzzzzzzzz]\n[prefill]")).unwrap();
    let (code, _, stderr) = run(&["check", file.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(!stderr.contains("did you mean"), "{stderr}");
}

/// A syntax error inside a value names the field it is in, as every other input error
/// does; one outside any value (an unclosed header, a comment) or under an
/// array-of-tables header (whose element the line cannot tell) names none rather than a
/// wrong one.
/// The broken twin: before, every syntax error read `invalid TOML: ...` with no field.
#[test]
fn a_syntax_error_in_a_value_names_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let spec = std::fs::read_to_string(root().join(fixture("seed-59325-matrix.toml"))).unwrap();
    let cases = [
        (
            "requests = 1\n",
            "requests = 99999999999999999999\n",
            "requests",
        ),
        (
            "[prefill]\n",
            "[prefill]  # P\nrole = x y\n",
            "prefill.role",
        ),
        (
            "\"prefill.pcp\" = [",
            "\"prefill.pcp\" = [x, ",
            "matrix.\"prefill.pcp\"",
        ),
        ("[prefill]\n", "[prefill\n", ""),
        ("requests = 1\n", "requests = 1 # \u{1}\n", ""),
        ("[prefill]\n", "[[prefill]]\nrole = x y\n", ""),
    ];
    for (i, (from, to, field)) in cases.into_iter().enumerate() {
        assert!(spec.contains(from), "the fixture has `{from}`");
        let file = dir.path().join(format!("bad-{i}.toml"));
        std::fs::write(&file, spec.replacen(from, to, 1)).unwrap();
        let file = file.display().to_string();
        let (code, _, stderr) = run(&["check", &file]);
        assert_eq!(code, 2, "{stderr}");
        // Without a field, the message leads, or (with no span to show) the place does.
        let leads = match field {
            "" => vec![
                "error: invalid TOML: ".to_string(),
                format!("error: {file}:"),
            ],
            field => vec![format!("error: {field}: invalid TOML: ")],
        };
        assert!(
            leads.iter().any(|lead| stderr.starts_with(lead)),
            "want one of {leads:?}: {stderr}"
        );
        assert!(stderr.contains("invalid TOML: "), "{stderr}");
    }
}
