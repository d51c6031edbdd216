//! Counterexample traces end to end: `kvcc check --trace-dir` writes four files per
//! violated clause, and `kvcc replay` re-executes the ITF one (issue 4's acceptance:
//! the #59325 regression spec, then the same trace against the fixed spec).

use crate::common::{fixture, kvcc, output, root, run};
use kvcc_model::checker::replay_path;
use kvcc_model::properties::CLAUSES;
use kvcc_model::{describe, ContractModel};
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
        md.contains("Drank0->>Prank0: 6. read req0 done + notify"),
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
    assert_eq!(meta["trace-format-version"], "3");
    assert_eq!(meta["command"], command.as_str());
    assert_eq!(meta["point"], "{}");
    // ITF's #meta holds strings only (the `itf` crate refuses anything else).
    for (key, value) in meta.as_object().unwrap() {
        assert!(value.is_string(), "#meta.{key} is {value}");
    }
    let states = trace["states"].as_array().unwrap();
    assert_eq!(states.len(), 9, "the initial state and 8 steps");
    let vars: Vec<&str> = trace["vars"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(vars.contains(&"P_requests"), "{vars:?}");
    for (i, state) in states.iter().enumerate() {
        assert_eq!(state["#meta"]["index"], i);
        for var in &vars {
            assert!(state.get(*var).is_some(), "state {i} lacks {var}");
        }
    }
    assert_eq!(
        states[0]["action"],
        serde_json::json!({"tag": "Init", "value": {"#tup": []}})
    );
    assert_eq!(states[0]["mbt::actionTaken"], "init");
    assert_eq!(
        states[1]["action"],
        serde_json::json!({"tag": "PrefillFinishes", "value": {"request": {"#bigint": "0"}}})
    );
    assert_eq!(
        states[1]["mbt::nondetPicks"]["request"],
        serde_json::json!({"tag": "Some", "value": {"#bigint": "0"}})
    );
    let req0 = |state: &serde_json::Value, var: &str| state[var]["#map"][0].clone();
    assert_eq!(
        req0(&states[8], "P_requests")[0],
        serde_json::json!({"#bigint": "0"})
    );
    assert_eq!(
        req0(&states[8], "P_requests")[1]["phase"],
        "finished, free delayed (blocks held)"
    );
    // Counts are integers, open countdowns a map, held-back failures a set.
    assert_eq!(
        states[0]["P_aggregator"]["E"],
        serde_json::json!({"#bigint": "2"})
    );
    assert_eq!(
        states[0]["P_aggregator"]["failed_recving_pending"],
        serde_json::json!({"#set": []})
    );
    assert!(
        states[8]["P_aggregator"]["finished_sending"]["#map"].is_array(),
        "{}",
        states[8]
    );
}

#[test]
fn itf_round_trip_replays_to_the_same_violation() {
    let dir = tempfile::tempdir().unwrap();
    let spec_file = fixture("seed-59325.toml");
    check_with_traces(&spec_file, dir.path(), &[]);
    let path = dir.path().join(format!("seed-59325__{CLAUSE}.itf.json"));
    let loaded = kvcc::trace::replay::load(path.to_str().unwrap()).expect("a kvcc trace");
    let clause: usize = loaded
        .trace
        .meta
        .clause_index
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(CLAUSES[clause].property, "eventually-freed");
    let spec = kvcc::spec::Spec::load(root().join(&spec_file).to_str().unwrap()).unwrap();
    let config = spec.config(&kvcc::spec::point::Point::default()).unwrap();
    let model = ContractModel::new(config);
    let states = replay_path(&model, &loaded.actions, clause).expect("the trace reproduces");
    let last = kvcc::trace::itf::fact_vars(&describe::describe(states.last().unwrap()));
    assert_eq!(&last, loaded.facts.last().unwrap());
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
        "reproduces: eventually-freed: delay-freed-request-never-freed at step 8\n"
    );
}

/// The spec copied into `dir`, checked there with its traces beside it (replay follows a
/// trace's spec only inside the working tree or the trace's own directory).
fn traced_copy(dir: &Path) -> (PathBuf, PathBuf) {
    let spec = dir.join("seed-59325.toml");
    std::fs::copy(root().join(fixture("seed-59325.toml")), &spec).unwrap();
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
        stdout.contains(
            "fact `P_aggregator.finished_sending` is `0: 1` in the trace but `-` in the model"
        ),
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
    doc["states"][2]["action"] = serde_json::json!({"tag": "ReadCompletes", "value":
        {"handle": 0, "request": 0, "notification_lost": false, "notification_duplicated": false}});
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
    doc["states"][1]["action"] = serde_json::json!({"tag": "PrefillExplodes", "value": {}});
    std::fs::write(&broken, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    let (code, _, stderr) = run(&["replay", broken.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(stderr.contains("states[1].action"), "{stderr}");
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
    assert_eq!(doc["#meta"]["point"], r#"{"prefill.pcp":2}"#);
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

/// Against another spec (`--spec`), a matrix path the trace's point leaves out takes the
/// value the trace was found with, read from the trace's own spec: "does the fix remove
/// it?" compares like with like. Where that spec cannot be read, the other spec's first
/// value stands in; a note says which either way.
#[test]
fn replay_against_a_spec_with_another_matrix_takes_the_traces_own_value() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, trace) = traced_copy(dir.path());
    let replay = || {
        run(&[
            "replay",
            trace.to_str().unwrap(),
            "--spec",
            &fixture("seed-59325-matrix.toml"),
        ])
    };
    // The trace was found at pcp 2, where the matrix spec breaks the same clause.
    let (code, stdout, stderr) = replay();
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.starts_with("reproduces: "), "{stdout}");
    assert!(
        stderr.contains(
            "does not name matrix path `prefill.pcp`; using the trace's own spec's value, 2"
        ),
        "{stderr}"
    );
    // The twin: without the trace's spec, pcp = 1, the matrix's first value, has no
    // replicated rank to clear.
    std::fs::remove_file(&spec).unwrap();
    let (code, stdout, stderr) = replay();
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
    doc["states"][2]["action"] = serde_json::json!({"tag": "ReadCompletes", "value":
        {"handle": 99, "request": 0, "notification_lost": false, "notification_duplicated": false}});
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
    let int = |n: u32| serde_json::json!({"#bigint": n.to_string()});
    let stores = serde_json::json!({"#set": [
        {"rank": int(0), "request": int(0)},
        {"rank": int(1), "request": int(0)}
    ]});
    let step = doc["states"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["action"]["value"]["stores_done"] == stores)
        .expect("a step finds both stores done");
    assert_eq!(
        step["mbt::nondetPicks"]["stores_done"],
        serde_json::json!({"tag": "Some", "value": stores})
    );
    // P_ranks[1][0].offload_store
    assert_eq!(
        step["P_ranks"]["#map"][1][1]["#map"][0][1]["offload_store"],
        serde_json::json!({"tag": "Some", "value": "stored"})
    );
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
        .find(|s| {
            s["action"]["value"]["stores_done"]["#set"]
                .as_array()
                .is_some_and(|s| !s.is_empty())
        })
        .expect("a step finds stores done");
    // A plain JSON integer is an ITF integer too.
    step["action"]["value"]["stores_done"] =
        serde_json::json!({"#set": [{"rank": 7, "request": 0}]});
    std::fs::write(&trace, serde_json::to_string(&doc).unwrap()).unwrap();
    let (code, stdout, stderr) = run(&["replay", trace.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("this model does not have"), "{stdout}");
}

/// Every `*.itf.json` under `dir`, recursively.
fn itf_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let path = entry.path();
        if path.is_dir() {
            itf_files(&path, found);
        } else if path.to_string_lossy().ends_with(".itf.json") {
            found.push(path);
        }
    }
}

/// Every trace the suite writes for the shipped specs and the fixtures it traces
/// (`--all-traces`), then those kept under docs/: written once per test run, into the
/// target's scratch directory, for every test that reads them all.
pub fn every_trace() -> &'static [PathBuf] {
    static TRACES: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    TRACES.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("every-trace");
        let _ = std::fs::remove_dir_all(&dir);
        let (code, _, stderr) = run(&[
            "check",
            "specs",
            &fixture("seed-59325.toml"),
            &fixture("seed-59325-matrix.toml"),
            &fixture("multi-offload-lost-output.toml"),
            "--trace-dir",
            dir.to_str().unwrap(),
            "--all-traces",
            "--quiet",
        ]);
        assert_eq!(code, 0, "{stderr}");
        let mut traces = Vec::new();
        itf_files(&dir, &mut traces);
        itf_files(&crate::common::root().join("docs"), &mut traces);
        assert!(
            traces.len() > 50,
            "every violated clause of the matrix: {}",
            traces.len()
        );
        traces
    })
}

/// Issue 13: ITF traces load with the `itf` crate (the Rust reference reader, which
/// refuses non-string `#meta` values and untyped integers in typed positions) and replay
/// with kvcc: every trace of the shipped specs and of the fixtures the suite traces, and
/// any trace kept under docs/.
#[test]
fn issue_13_every_trace_loads_with_the_itf_crate_and_replays() {
    let traces = every_trace();
    for path in traces {
        let text = read(path);
        // Untyped: `typed_itf.rs` reads every trace into one typed struct.
        let trace = serde_json::from_str::<itf::Trace<itf::Value>>(&text)
            .unwrap_or_else(|e| panic!("{}: the itf crate refuses it: {e:?}", path.display()));
        assert_eq!(trace.meta.format.as_deref(), Some("ITF"));
        assert!(trace.states.len() >= 2, "{}", path.display());
        // kvcc's replay, in process: a process per trace would cost more than the checks.
        let source = trace.meta.source.clone().expect("#meta.source");
        let spec = crate::common::root().join(&source);
        let replayed = kvcc::trace::replay::replay(path.to_str().unwrap(), spec.to_str());
        assert!(
            matches!(
                replayed,
                Ok(kvcc::trace::replay::Replayed::Reproduces { .. })
            ),
            "{}: {replayed:?}",
            path.display()
        );
    }
    // And once through the command, as a user replays.
    let (code, stdout, stderr) = run(&["replay", traces[0].to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.starts_with("reproduces: "), "{stdout}");
}

/// The twin: what trace-format-version 1 wrote (numbers in `#meta`) is what the `itf`
/// crate refuses, so the test above would catch a relapse.
#[test]
fn the_itf_crate_refuses_non_string_meta() {
    let text = r##"{"#meta": {"format": "ITF", "clause-index": 17}, "vars": ["x"],
                   "states": [{"#meta": {"index": 0}, "x": "a"}]}"##;
    assert!(serde_json::from_str::<itf::Trace<itf::Value>>(text).is_err());
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

/// Checks a Mermaid `sequenceDiagram` against the subset of its grammar kvcc writes:
/// declared participants, well-formed arrows and notes between declared ones, labels
/// free of `;` and `#` (a statement break and an entity to Mermaid), balanced `rect`.
fn mermaid_errors(diagram: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let mut lines = diagram.lines().map(str::trim).filter(|l| !l.is_empty());
    if lines.next() != Some("sequenceDiagram") {
        errors.push("does not start with sequenceDiagram".to_string());
    }
    let id_ok =
        |id: &str| !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let mut participants = std::collections::BTreeSet::new();
    let mut open_rects = 0i32;
    let label_ok =
        |label: &str| !label.trim().is_empty() && !label.contains(';') && !label.contains('#');
    for line in lines {
        if let Some(rest) = line.strip_prefix("participant ") {
            let id = rest.split(" as ").next().unwrap_or_default();
            if !id_ok(id) {
                errors.push(format!("bad participant id: {line}"));
            }
            participants.insert(id.to_string());
        } else if let Some(rest) = line.strip_prefix("Note over ") {
            let (who, label) = rest.split_once(": ").unwrap_or((rest, ""));
            for id in who.split(',') {
                if !participants.contains(id) {
                    errors.push(format!("note over an undeclared participant: {line}"));
                }
            }
            if !label_ok(label) {
                errors.push(format!("bad label: {line}"));
            }
        } else if line.starts_with("rect ") {
            open_rects += 1;
        } else if line == "end" {
            open_rects -= 1;
        } else {
            let Some((arrow_part, label)) = line.split_once(": ") else {
                errors.push(format!("not a statement: {line}"));
                continue;
            };
            let arrow = ["-->>", "->>", "--x", "-x"]
                .into_iter()
                .find(|a| arrow_part.contains(a));
            let Some(arrow) = arrow else {
                errors.push(format!("no arrow: {line}"));
                continue;
            };
            let (from, to) = arrow_part.split_once(arrow).unwrap();
            for id in [from, to] {
                if !participants.contains(id) {
                    errors.push(format!("undeclared participant `{id}`: {line}"));
                }
            }
            if !label_ok(label) {
                errors.push(format!("bad label: {line}"));
            }
        }
        if open_rects < 0 {
            errors.push(format!("`end` without `rect`: {line}"));
        }
    }
    if open_rects != 0 {
        errors.push("unbalanced rect/end".to_string());
    }
    errors
}

#[test]
fn issue11_every_diagram_is_well_formed_mermaid() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) = run(&[
        "check",
        "--trace-dir",
        dir.path().to_str().unwrap(),
        "--all-traces",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let md = read(&path);
        let start = md.find("```mermaid\n").expect("a diagram") + "```mermaid\n".len();
        let diagram = &md[start..start + md[start..].find("```").unwrap()];
        let errors = mermaid_errors(diagram);
        assert!(
            errors.is_empty(),
            "{}: {errors:?}\n{diagram}",
            path.display()
        );
        checked += 1;
    }
    assert!(checked >= 70, "{checked} diagrams");
    // The validator's broken twins.
    for bad in [
        "sequenceDiagram\n    participant A\n    A->>B: 1. to nobody",
        "sequenceDiagram\n    participant A\n    participant B\n    A->>B: 1. a; b",
        "sequenceDiagram\n    participant A\n    rect rgb(1,1,1)\n    Note over A: x",
        "graph TD\n    A-->B",
    ] {
        assert!(!mermaid_errors(bad).is_empty(), "{bad}");
    }
}

#[test]
fn issue11_the_seed_regression_tells_the_prs_story_at_every_point() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) = run(&[
        "check",
        "specs/pr59325-regression.toml",
        "--trace-dir",
        dir.path().to_str().unwrap(),
        "--all-traces",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let mut points = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(&format!("{CLAUSE}.txt")) {
            continue;
        }
        points += 1;
        let txt = read(&path);
        let steps: Vec<&str> = txt
            .lines()
            .filter(|l| {
                l.split_once(". ")
                    .is_some_and(|(n, _)| n.parse::<u32>().is_ok())
            })
            .collect();
        assert!(!steps.iter().any(|l| l.contains("FAULT")), "{txt}");
        assert!(!steps.iter().any(|l| l.contains("expires")), "{txt}");
        assert!(txt.contains("cost:     0 faults, 0 expiries"), "{txt}");
        // The step that drops them says so: the replicas' reports, cleared.
        assert!(
            steps.iter().any(|l| l.contains("P engine step")
                && l.contains("synthetic \"done\" report")
                && l.contains("for req0")
                && l.contains("DROPS")),
            "{txt}"
        );
        // The diagnosis names the countdown, who reported, whose report the connector
        // cleared, and why nothing else can come.
        let diagnosis = &txt[txt.find("diagnosis:").expect("a diagnosis")..];
        assert!(
            diagnosis.contains("P countdown for req0 (finished_sending): "),
            "{diagnosis}"
        );
        assert!(
            diagnosis.contains(": reported req0 at step "),
            "{diagnosis}"
        );
        // The replicas are the P ranks past the first PCP group: rank 1 at pcp=2, tp=1.
        let value = |key: &str| -> u16 {
            let rest = name.split(&format!("{key}=")).nth(1).expect("in the name");
            rest.split([',', '_']).next().unwrap().parse().unwrap()
        };
        let (pcp, tp) = (value("prefill.pcp"), value("prefill.tp"));
        let replicas: Vec<String> = (tp..tp * pcp).map(|r| r.to_string()).collect();
        let noun = if replicas.len() == 1 { "rank" } else { "ranks" };
        let cleared = format!(
            "    P {noun} {}: synthetic \"done\" report of req0 (a PCP replica: it sends nothing) DROPPED at step ",
            replicas.join(", ")
        );
        assert!(diagnosis.contains(&cleared), "{cleared}\n{diagnosis}");
        assert!(
            diagnosis.contains("no P rank can still make the missing one"),
            "{diagnosis}"
        );
        let md = read(&path.with_extension("md"));
        assert!(
            md.contains("-xPagg: "),
            "the dropped report is a lost message: {md}"
        );
        if name.contains("producer.lease=false") {
            let step_lines = txt[..txt.find("VIOLATED").unwrap()].to_lowercase();
            let step_lines = &step_lines[step_lines.find("0. initial state").unwrap()..];
            assert!(!step_lines.contains("lease"), "{txt}");
        }
    }
    assert_eq!(points, 16);
}

#[test]
fn issue11_the_gallery_in_docs_traces_has_not_drifted() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("traces");
    let (code, stdout, stderr) = output(
        std::process::Command::new("bash")
            .arg(root().join("scripts/gallery.sh"))
            .env("KVCC", crate::common::KVCC)
            .env("OUT", &out),
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let committed = root().join("docs/traces");
    let names = |d: &Path| {
        let mut n: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    };
    assert_eq!(
        names(&out),
        names(&committed),
        "regenerate: bash scripts/gallery.sh"
    );
    for name in names(&out) {
        let fresh = read(&out.join(&name)).replace(out.to_str().unwrap(), "docs/traces");
        assert_eq!(
            fresh,
            read(&committed.join(&name)),
            "docs/traces/{name} drifted: regenerate with bash scripts/gallery.sh"
        );
    }
}

/// Issue 11: a liveness trace marks its point of no return — the first step after which
/// no continuation keeps the clause — in the diagnosis and on the diagram.
#[test]
fn issue11_the_point_of_no_return_is_the_step_that_dooms_the_run() {
    let dir = tempfile::tempdir().unwrap();
    for spec in ["specs/pr59325-regression.toml", "specs/decoder-crash.toml"] {
        let (code, _, stderr) = run(&[
            "check",
            spec,
            "--trace-dir",
            dir.path().to_str().unwrap(),
            "--all-traces",
        ]);
        assert_eq!(code, 0, "{stderr}");
    }
    let trace = |stem: &str| read(&dir.path().join(format!("{stem}__{CLAUSE}.txt")));
    // The seed bug is structural: once P delays the free, the clear dooms it.
    let seed =
        trace("pr59325-regression__prefill.pcp=2,prefill.tp=1,decode.tp=1,producer.lease=false");
    assert!(
        seed.contains("  point of no return: step 1 (P scheduler: req0 finishes prefill"),
        "{seed}"
    );
    // A fault-driven leak is doomed by its fault.
    let crash = trace("decoder-crash__producer.lease=false");
    assert!(
        crash.contains("  point of no return: step 4 ([FAULT] D crashes before reading req0)"),
        "{crash}"
    );
    let md = read(
        &dir.path()
            .join(format!("decoder-crash__producer.lease=false__{CLAUSE}.md")),
    );
    assert!(
        md.contains("    Note over Psched,Dsched: point of no return after step 4\n"),
        "{md}"
    );
}

/// Issue 16: limits bite after the search too. The point of no return walks the graph
/// again; after a cut search that graph is larger than the limits the user set, so the
/// trace names none rather than walking past them (a 400-state check of a random spec
/// used to walk up to 300,000 states for each violated liveness clause). The same spec
/// unlimited names it: the line is there to be missed.
#[test]
fn issue16_a_cut_search_walks_no_further_for_a_point_of_no_return() {
    let trace_of = |limit: &[&str]| {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec![
            "check",
            "specs/decoder-crash.toml",
            "--trace-dir",
            dir.path().to_str().unwrap(),
            "--all-traces",
        ];
        args.extend_from_slice(limit);
        let (code, stdout, stderr) = run(&args);
        assert!(code == 0 || !limit.is_empty(), "{stdout}{stderr}");
        read(
            &dir.path()
                .join(format!("decoder-crash__producer.lease=false__{CLAUSE}.txt")),
        )
    };
    let whole = trace_of(&[]);
    assert!(whole.contains("  point of no return: step "), "{whole}");
    let cut = trace_of(&["--max-depth", "5"]);
    assert!(cut.contains("the search was cut"), "{cut}");
    assert!(!cut.contains("point of no return"), "{cut}");
}

/// Issue 11: step text is derived from the state and the spec — on every shipped spec
/// point without leases, no step line of any trace mentions a lease; with leases, the
/// armed lease is named (the twin that shows the words exist to be missed).
#[test]
fn issue11_no_step_mentions_a_lease_where_the_spec_has_none() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) = run(&[
        "check",
        "--trace-dir",
        dir.path().to_str().unwrap(),
        "--all-traces",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let (mut without, mut with) = (0, 0);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let meta = itf(&path)["#meta"].clone();
        let spec = kvcc::spec::Spec::load(
            root()
                .join(meta["source"].as_str().unwrap())
                .to_str()
                .unwrap(),
        )
        .unwrap();
        // ITF's #meta holds strings: the point is JSON text.
        let point: serde_json::Value =
            serde_json::from_str(meta["point"].as_str().unwrap()).unwrap();
        let point = kvcc::spec::point::Point::from_json(&point).unwrap();
        let lease = spec.config(&point).unwrap().producer.lease;
        let txt = read(&path.with_extension("").with_extension("txt"));
        let steps = &txt[txt.find("\n0. initial state").unwrap()..txt.find("\nVIOLATED").unwrap()];
        if lease {
            with += usize::from(steps.contains("lease armed"));
        } else {
            without += 1;
            assert!(
                !steps.to_lowercase().contains("lease"),
                "{}",
                path.display()
            );
        }
    }
    assert!(
        without >= 20 && with >= 5,
        "{without} traces without leases, {with} naming one"
    );
}

/// Issue 11: a safety diagnosis names both sides of the conflict with their steps — a
/// free on P against the D read it met (a fact of the other engine) — and a liveness
/// diagnosis of a dropped step names the reports it lost, which its diagram draws as
/// lost messages from the ranks that made them.
#[test]
fn issue11_diagnoses_name_both_sides_and_lost_reports() {
    let dir = tempfile::tempdir().unwrap();
    for spec in [
        "specs/lease-late-read.toml",
        "specs/missing-output-rank.toml",
    ] {
        let (code, _, stderr) = run(&[
            "check",
            spec,
            "--trace-dir",
            dir.path().to_str().unwrap(),
            "--all-traces",
        ]);
        assert_eq!(code, 0, "{stderr}");
    }
    let late = read(
        &dir.path()
            .join("lease-late-read__no-free-under-rdma__p-blocks-freed-under-read.txt"),
    );
    let diagnosis = &late[late.find("diagnosis:").unwrap()..];
    assert!(
        diagnosis.contains("  step 8 breaks it: P engine step"),
        "{diagnosis}"
    );
    assert!(
        diagnosis.contains("    P req0: blocks freed (since step 8)"),
        "{diagnosis}"
    );
    assert!(
        diagnosis.contains(
            "    meets: D rank 0's read of req0 from P rank 0: reading (RDMA in flight) (since step 6)"
        ),
        "{diagnosis}"
    );
    let stem = dir.path().join(format!("missing-output-rank__{CLAUSE}"));
    let lost = read(&stem.with_extension("txt"));
    assert!(
        lost.contains(
            "    P ranks 0, 1: report of req0 LOST at step 8: the output rank's output was missing"
        ),
        "{lost}"
    );
    let md = read(&stem.with_extension("md"));
    // Rank 1 is a PCP replica: its lost report is the synthetic one it makes.
    for (rank, report) in [
        (0, "req0 sent"),
        (1, "synthetic done req0 (replica, sent nothing)"),
    ] {
        assert!(
            md.contains(&format!(
                "    Prank{rank}-xPagg: 8. {report}, LOST with the dropped step"
            )),
            "{md}"
        );
        assert!(!md.contains(&format!("Prank{rank}->>Pagg: 8.")), "{md}");
    }
}
