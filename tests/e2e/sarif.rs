//! `--sarif FILE`: a SARIF 2.1.0 log that the SARIF crate's types read back, with one
//! result per mismatch at the spec line of its expectation, none for a check that met
//! its expectation, and one per input error at its file and line; `kvcc merge` writes the
//! same log as the unsharded run.

use crate::common::{root, run};
use serde_sarif::sarif::{Result as SarifResult, Sarif};

/// Runs kvcc with `args` and `--sarif`; (exit code, the log read back as SARIF).
fn sarif(args: &[&str]) -> (i32, Sarif) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kvcc.sarif");
    let mut args = args.to_vec();
    args.extend(["--sarif", file.to_str().unwrap()]);
    let (code, _, stderr) = run(&args);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let log: Sarif = serde_json::from_str(&text).expect("a SARIF 2.1.0 log");
    assert_eq!(log.version, "2.1.0");
    assert_eq!(log.runs.len(), 1);
    assert_eq!(log.runs[0].tool.driver.name, "kvcc");
    (code, log)
}

fn results(log: &Sarif) -> &[SarifResult] {
    log.runs[0].results.as_deref().unwrap_or_default()
}

/// (rule, file, line) of a result.
fn placed(result: &SarifResult) -> (String, String, i64) {
    let location = &result.locations.as_ref().expect("a location")[0];
    let physical = location
        .physical_location
        .as_ref()
        .expect("a file location");
    let file = physical
        .artifact_location
        .as_ref()
        .unwrap()
        .uri
        .clone()
        .unwrap();
    let line = physical.region.as_ref().unwrap().start_line.unwrap();
    (result.rule_id.clone().unwrap(), file, line)
}

/// The 1-based line of `needle` in a fixture.
fn line_of(fixture: &str, needle: &str) -> i64 {
    let text = std::fs::read_to_string(root().join(fixture)).unwrap();
    let index = text.lines().position(|l| l.trim() == needle).unwrap();
    i64::try_from(index + 1).unwrap()
}

#[test]
fn a_mismatch_is_a_result_at_its_expect_line() {
    let file = "tests/fixtures/mismatch.toml";
    let (code, log) = sarif(&["check", file]);
    assert_eq!(code, 1);
    let found: Vec<_> = results(&log).iter().map(placed).collect();
    assert_eq!(
        found,
        [(
            "kvcc/mismatch".to_string(),
            file.to_string(),
            line_of(file, "[expect]")
        )]
    );
    let message = results(&log)[0].message.text.clone().unwrap();
    assert!(
        message.contains("expected holds, got violated"),
        "{message}"
    );
}

/// The twin: the same bug with the right expectation is no result.
#[test]
fn a_met_expectation_is_no_result() {
    let (code, log) = sarif(&["check", "tests/fixtures/seed-59325.toml"]);
    assert_eq!(code, 0);
    assert!(results(&log).is_empty(), "{:?}", results(&log));
}

#[test]
fn an_input_error_is_a_result_at_its_line() {
    let file = "tests/fixtures/typo.toml";
    let (code, log) = sarif(&["check", file]);
    assert_eq!(code, 2);
    let found: Vec<_> = results(&log).iter().map(placed).collect();
    assert_eq!(
        found,
        [(
            "kvcc/input-error".to_string(),
            file.to_string(),
            line_of(file, "requets = 1")
        )]
    );
}

#[test]
fn merge_writes_the_unsharded_results() {
    let file = "tests/fixtures/mismatch.toml";
    let (_, whole) = sarif(&["check", file]);
    let dir = tempfile::tempdir().unwrap();
    let mut shards = Vec::new();
    for shard in ["1/2", "2/2"] {
        let (_, lines, _) = run(&["check", file, "--shard", shard, "--format", "json"]);
        let path = dir.path().join(shard.replace('/', "-"));
        std::fs::write(&path, lines).unwrap();
        shards.push(path.display().to_string());
    }
    let mut args = vec!["merge"];
    args.extend(shards.iter().map(String::as_str));
    let (code, merged) = sarif(&args);
    assert_eq!(code, 1);
    let placed_all = |log: &Sarif| results(log).iter().map(placed).collect::<Vec<_>>();
    assert_eq!(placed_all(&merged), placed_all(&whole));
}
