//! Counterexample traces end to end: `kvcc check --trace-dir` writes four files per
//! violated clause, and `kvcc replay` re-executes the ITF one (issue 4's acceptance:
//! the #59325 regression spec, then the same trace against the fixed spec).

use crate::common::{fixture, kvcc, output, run};
use kvcc_model::checker::replay_path;
use kvcc_model::properties::CLAUSES;
use kvcc_model::{describe, Action, ContractModel};
use std::path::{Path, PathBuf};

const CLAUSE: &str = "eventually-freed__delay-freed-request-never-freed";

/// Checks `spec` with `--trace-dir dir --all-traces` (these specs' violations are
/// expected, which alone write no trace) plus `extra` arguments; returns stdout.
fn check_with_traces(spec: &str, dir: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "check",
        spec,
        "--trace-dir",
        dir.to_str().unwrap(),
        "--all-traces",
    ];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = run(&args);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    stdout
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn itf(path: &Path) -> serde_json::Value {
    serde_json::from_str(&read(path)).expect("ITF is JSON")
}

#[test]
fn issue_4_seed_59325_trace_dir_writes_four_files_per_violation() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("seed-59325.toml");
    check_with_traces(&spec, dir.path(), &[]);
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want = Vec::new();
    for clause in ["aggregator-drains__countdown-left-open", CLAUSE] {
        for ext in ["itf.json", "md", "sh", "txt"] {
            want.push(format!("seed-59325__{clause}.{ext}"));
        }
    }
    assert_eq!(names, want);

    let base = dir.path().join(format!("seed-59325__{CLAUSE}"));
    let command = format!(
        "kvcc check {spec} --all-traces --trace-dir {}",
        dir.path().display()
    );
    let txt = read(&base.with_extension("txt"));
    assert!(txt.starts_with("kvcc "), "{txt}");
    assert!(
        txt.contains("clause:   eventually-freed: delay-freed-request-never-freed (liveness)"),
        "{txt}"
    );
    assert!(
        txt.contains("meaning:  a delay-freed request's P blocks are never freed"),
        "{txt}"
    );
    assert!(
        txt.contains("\n1. P scheduler: req0 finishes prefill"),
        "{txt}"
    );
    assert!(
        txt.contains("   P req0: prefilling -> finished, free delayed (blocks held)"),
        "{txt}"
    );
    assert!(txt.contains("\nVIOLATED eventually-freed: delay-freed-request-never-freed — a delay-freed request's P blocks are never freed"), "{txt}");
    assert!(txt.contains(&format!("\nreproduce: {command}\n")), "{txt}");

    let md = read(&base.with_extension("md"));
    assert!(md.contains("```mermaid\nsequenceDiagram\n"), "{md}");
    assert!(md.contains("participant Prank1 as P rank 1"), "{md}");
    assert!(
        md.contains("Drank0->>Prank0: 4. read req0 done + notify"),
        "{md}"
    );
    assert!(
        md.contains("Note over Psched,Dsched: VIOLATED eventually-freed"),
        "{md}"
    );
    assert!(md.contains(&format!("```sh\n{command}\n")), "{md}");
    assert!(md.contains(&format!("\nkvcc explore {spec}\n```")), "{md}");

    let sh = read(&base.with_extension("sh"));
    assert!(sh.starts_with("#!/bin/sh\n"), "{sh}");
    assert!(sh.lines().any(|l| l == "set -eu"), "{sh}");
    assert!(sh.lines().any(|l| l == format!("exec {command}")), "{sh}");

    let trace = itf(&base.with_extension("itf.json"));
    let meta = &trace["#meta"];
    assert_eq!(meta["format"], "ITF");
    assert_eq!(meta["source"], spec.as_str());
    assert_eq!(meta["property"], "eventually-freed");
    assert_eq!(meta["clause"], "delay-freed-request-never-freed");
    assert_eq!(meta["kvcc-version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(meta["trace-format-version"], 1);
    assert_eq!(meta["command"], command.as_str());
    assert_eq!(meta["point"], serde_json::json!({}));
    let states = trace["states"].as_array().unwrap();
    assert_eq!(states.len(), 7, "the initial state and 6 steps");
    let vars: Vec<&str> = trace["vars"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(vars.contains(&"P req0"), "{vars:?}");
    for (i, state) in states.iter().enumerate() {
        assert_eq!(state["#meta"]["index"], i);
        assert_eq!(state["#meta"]["action"].is_null(), i == 0);
        for var in &vars {
            assert!(state[*var].is_string(), "state {i} lacks {var}");
        }
    }
    assert_eq!(
        states[1]["#meta"]["action"],
        serde_json::json!({"action": "prefill-finishes", "request": 0})
    );
    assert_eq!(states[6]["P req0"], "finished, free delayed (blocks held)");
}

#[test]
fn itf_round_trip_replays_to_the_same_violation() {
    let dir = tempfile::tempdir().unwrap();
    let spec_file = fixture("seed-59325.toml");
    check_with_traces(&spec_file, dir.path(), &[]);
    let trace = itf(&dir.path().join(format!("seed-59325__{CLAUSE}.itf.json")));
    let actions: Vec<Action> = trace["states"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .map(|s| serde_json::from_value(s["#meta"]["action"].clone()).expect("an Action"))
        .collect();
    let clause = trace["#meta"]["clause-index"].as_u64().unwrap() as usize;
    assert_eq!(CLAUSES[clause].property, "eventually-freed");
    let spec =
        kvcc::spec::Spec::load(crate::common::root().join(&spec_file).to_str().unwrap()).unwrap();
    let config = spec.config(&kvcc::spec::point::Point::default()).unwrap();
    let model = ContractModel::new(config);
    let states = replay_path(&model, &actions, clause).expect("the trace reproduces");
    let last = describe::facts(states.last().unwrap());
    let recorded = trace["states"].as_array().unwrap().last().unwrap();
    for (fact, value) in &last {
        assert_eq!(recorded[fact], value.as_str(), "{fact}");
    }
}

#[test]
fn issue_4_replay_reproduces_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    check_with_traces(&fixture("seed-59325.toml"), dir.path(), &[]);
    let trace = dir.path().join(format!("seed-59325__{CLAUSE}.itf.json"));
    let (code, stdout, stderr) = run(&["replay", trace.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(
        stdout,
        "reproduces: eventually-freed: delay-freed-request-never-freed at step 6\n"
    );
}

/// The spec copied into `dir`, checked there with its traces beside it (replay follows a
/// trace's spec only inside the working tree or the trace's own directory).
fn traced_copy(dir: &Path) -> (PathBuf, PathBuf) {
    let spec = dir.join("seed-59325.toml");
    std::fs::copy(
        crate::common::root().join(fixture("seed-59325.toml")),
        &spec,
    )
    .unwrap();
    check_with_traces(spec.to_str().unwrap(), dir, &[]);
    (spec, dir.join(format!("seed-59325__{CLAUSE}.itf.json")))
}

#[test]
fn issue_4_replay_after_switching_the_spec_to_the_fix_does_not_reproduce_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, trace) = traced_copy(dir.path());
    let fixed = read(&spec).replace("clear-replicated = true", "clear-replicated = false");
    std::fs::write(&spec, fixed).unwrap();
    let (code, stdout, stderr) = run(&["replay", trace.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.starts_with("does not reproduce: "), "{stdout}");
    assert!(
        stdout.contains("fact `P aggregator finished_sending`"),
        "{stdout}"
    );
}

#[test]
fn replay_spec_flag_replaces_the_recorded_spec() {
    let dir = tempfile::tempdir().unwrap();
    let (_, trace) = traced_copy(dir.path());
    let (code, stdout, _) = run(&[
        "replay",
        trace.to_str().unwrap(),
        "--spec",
        &fixture("seed-59325-fixed.toml"),
    ]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.starts_with("does not reproduce: "), "{stdout}");
}

#[test]
fn replay_of_an_edited_action_does_not_reproduce_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let (_, trace) = traced_copy(dir.path());
    let mut doc = itf(&trace);
    // Step 2 becomes D's read, which is not even posted yet.
    doc["states"][2]["#meta"]["action"] = serde_json::json!({"action": "read-completes", "handle": 0, "request": 0, "notification-lost": false});
    std::fs::write(&trace, serde_json::to_string(&doc).unwrap()).unwrap();
    let (code, stdout, _) = run(&["replay", trace.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("step 2 (`D rank 0 (from P rank 0): read of req0 completes"),
        "{stdout}"
    );
}

#[test]
fn replay_input_errors_exit_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, trace) = traced_copy(dir.path());
    let (code, _, stderr) = run(&["replay", "no-such-trace.itf.json"]);
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with("error: no-such-trace.itf.json: cannot read trace"),
        "{stderr}"
    );

    let broken = dir.path().join("broken.itf.json");
    std::fs::write(
        &broken,
        "{\n  \"#meta\": {\"format\": \"ITF\"},\n  \"vars\": [",
    )
    .unwrap();
    let (code, _, stderr) = run(&["replay", broken.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains(&format!("{}:2:", broken.display())),
        "{stderr}"
    );

    let mut doc = itf(&trace);
    doc["states"][1]["#meta"]["action"] = serde_json::json!({"action": "prefill-explodes"});
    std::fs::write(&broken, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    let (code, _, stderr) = run(&["replay", broken.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(stderr.contains("states[1].#meta.action"), "{stderr}");
    assert!(
        stderr.contains("unknown variant `prefill-explodes`"),
        "{stderr}"
    );

    std::fs::remove_file(&spec).unwrap();
    let (code, _, stderr) = run(&["replay", trace.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains(&format!("error: {}: #meta.source: names", trace.display())),
        "{stderr}"
    );
    assert!(stderr.contains("pass --spec PATH"), "{stderr}");
}

#[test]
fn matrix_point_traces_name_the_point_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    check_with_traces(
        &fixture("seed-59325-matrix.toml"),
        dir.path(),
        &["--point", "prefill.pcp=2"],
    );
    let trace = dir
        .path()
        .join(format!("seed-59325-pcp__prefill.pcp=2__{CLAUSE}.itf.json"));
    let doc = itf(&trace);
    assert_eq!(doc["#meta"]["point"], serde_json::json!({"prefill.pcp": 2}));
    let command = doc["#meta"]["command"].as_str().unwrap();
    assert!(command.contains(" --point prefill.pcp=2 "), "{command}");
    let (code, stdout, _) = run(&["replay", trace.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}");
}

#[test]
fn the_reproduce_command_rewrites_identical_traces() {
    let dir = tempfile::tempdir().unwrap();
    check_with_traces(&fixture("seed-59325.toml"), dir.path(), &["--threads", "1"]);
    let trace = dir.path().join(format!("seed-59325__{CLAUSE}.itf.json"));
    let first = read(&trace);
    let command = itf(&trace)["#meta"]["command"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::remove_file(&trace).unwrap();
    let args: Vec<&str> = command.split(' ').collect();
    assert_eq!(args[0], "kvcc");
    // Another thread count must not change a counterexample.
    let (code, _, _) = output(kvcc().args(&args[1..]).args(["--threads", "3"]));
    assert_eq!(code, 0);
    assert_eq!(read(&trace), first);
}

#[test]
fn replay_against_a_spec_with_another_matrix_names_the_value_it_picked() {
    let dir = tempfile::tempdir().unwrap();
    let (_, trace) = traced_copy(dir.path());
    let (code, stdout, stderr) = run(&[
        "replay",
        trace.to_str().unwrap(),
        "--spec",
        &fixture("seed-59325-matrix.toml"),
    ]);
    // pcp = 1, the matrix's first value, has no replicated rank to clear.
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.starts_with("does not reproduce: "), "{stdout}");
    assert!(
        stderr.contains("does not name matrix path `prefill.pcp`; using its first value, 1"),
        "{stderr}"
    );
}

#[test]
fn replay_of_a_step_outside_the_topology_does_not_reproduce_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let (_, trace) = traced_copy(dir.path());
    let mut doc = itf(&trace);
    doc["states"][2]["#meta"]["action"] = serde_json::json!(
        {"action": "read-completes", "handle": 99, "request": 0, "notification-lost": false}
    );
    std::fs::write(&trace, serde_json::to_string(&doc).unwrap()).unwrap();
    let (code, stdout, stderr) = run(&["replay", trace.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("step 2 ("), "{stdout}");
    assert!(stdout.contains("this model does not have"), "{stdout}");
}

/// A P step under MultiConnector names the offloading stores its poll finds done: the
/// action carries them through ITF, the text and the diagram say which, and the trace
/// replays.
#[test]
fn issue6_a_step_that_finds_stores_done_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    check_with_traces(&fixture("multi-offload-lost-output.toml"), dir.path(), &[]);
    let name = format!("multi-offload-lost-output__{CLAUSE}");
    let doc = itf(&dir.path().join(format!("{name}.itf.json")));
    let stores = serde_json::json!([{"rank": 0, "request": 0}, {"rank": 1, "request": 0}]);
    let step = doc["states"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["#meta"]["action"]["stores-done"] == stores)
        .expect("a step finds both stores done");
    assert_eq!(step["P rank1 req0 offload store"], "stored");
    let text = read(&dir.path().join(format!("{name}.txt")));
    assert!(
        text.contains("[offloading stores done by the poll: req0 on ranks 0, 1]"),
        "{text}"
    );
    let diagram = read(&dir.path().join(format!("{name}.md")));
    assert!(
        diagram.contains("[stores done: req0 on ranks 0, 1]"),
        "{diagram}"
    );
    let trace = dir.path().join(format!("{name}.itf.json"));
    let (code, stdout, stderr) = run(&["replay", trace.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
}

#[test]
fn issue6_a_store_outside_the_topology_does_not_reproduce_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    check_with_traces(&fixture("multi-offload-lost-output.toml"), dir.path(), &[]);
    let trace = dir
        .path()
        .join(format!("multi-offload-lost-output__{CLAUSE}.itf.json"));
    let mut doc = itf(&trace);
    let states = doc["states"].as_array_mut().unwrap();
    let step = states
        .iter_mut()
        .find(|s| s["#meta"]["action"]["stores-done"].is_array())
        .expect("a step finds stores done");
    step["#meta"]["action"]["stores-done"] = serde_json::json!([{"rank": 7, "request": 0}]);
    std::fs::write(&trace, serde_json::to_string(&doc).unwrap()).unwrap();
    let (code, stdout, stderr) = run(&["replay", trace.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("this model does not have"), "{stdout}");
}

#[test]
fn issue11_a_run_with_every_verdict_as_expected_writes_no_trace() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    let (code, stdout, _) = run(&["check", "--trace-dir", traces.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}");
    assert!(!traces.exists() || std::fs::read_dir(&traces).unwrap().next().is_none());
    // The twin: --all-traces writes the expected violations' traces.
    let (code, _, _) = run(&[
        "check",
        &fixture("seed-59325.toml"),
        "--trace-dir",
        traces.to_str().unwrap(),
        "--all-traces",
    ]);
    assert_eq!(code, 0);
    assert_eq!(std::fs::read_dir(&traces).unwrap().count(), 8);
}

#[test]
fn issue11_a_mismatch_script_runs_from_any_directory_with_kvcc_on_path() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    let (code, stdout, _) = run(&[
        "check",
        &fixture("mismatch.toml"),
        "--trace-dir",
        traces.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(crate::common::KVCC, bin.join("kvcc")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let scripts: Vec<_> = std::fs::read_dir(&traces)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sh"))
        .collect();
    assert!(!scripts.is_empty(), "a mismatch writes its traces");
    let elsewhere = tempfile::tempdir().unwrap();
    for script in scripts {
        let mode = std::fs::metadata(&script).unwrap().permissions().mode();
        assert_eq!(mode & 0o111, 0o111, "{} is executable", script.display());
        let (code, stdout, stderr) = output(
            std::process::Command::new(&script)
                .current_dir(elsewhere.path())
                .env("PATH", &path),
        );
        assert!(
            code == 0 || code == 1,
            "{}: {code}\n{stdout}{stderr}",
            script.display()
        );
        assert!(stdout.contains("mismatched"), "{stdout}{stderr}");
    }
}
