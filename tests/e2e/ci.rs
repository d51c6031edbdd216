//! The GitHub Actions integration: `.github/workflows/kvcc.yml` and the composite action
//! `action.yml` parse, have the shape GitHub runs, and the action's shell steps, run here
//! as the runner would run them (their `env:` set, GitHub's files in a temporary
//! directory), check the shipped specs, record kvcc's exit code and fail the job exactly
//! when kvcc found something.

use crate::common::{fixture, root, KVCC};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use yaml_rust2::{Yaml, YamlLoader};

fn load(file: &str) -> Yaml {
    let text = std::fs::read_to_string(root().join(file)).expect("readable");
    let mut docs = YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    assert_eq!(docs.len(), 1, "{file} is one YAML document");
    docs.remove(0)
}

fn steps(action: &Yaml) -> &Vec<Yaml> {
    action["runs"]["steps"].as_vec().expect("runs.steps")
}

fn step<'a>(action: &'a Yaml, name: &str) -> &'a Yaml {
    steps(action)
        .iter()
        .find(|s| s["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no step named {name}"))
}

#[test]
fn the_workflow_builds_tests_checks_in_shards_and_merges() {
    let workflow = load(".github/workflows/kvcc.yml");
    let jobs = workflow["jobs"].as_hash().expect("jobs");
    let names: Vec<&str> = jobs.keys().filter_map(Yaml::as_str).collect();
    assert_eq!(names, ["test", "check", "merge"]);
    let test = &workflow["jobs"]["test"];
    let runs: Vec<&str> = test["steps"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(|s| s["run"].as_str())
        .collect();
    assert!(runs.contains(&"bash scripts/test-all.sh"), "{runs:?}");
    let check = &workflow["jobs"]["check"];
    let shards: Vec<i64> = check["strategy"]["matrix"]["shard"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(Yaml::as_i64)
        .collect();
    assert_eq!(shards, [1, 2, 3]);
    let uses_action = check["steps"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|s| s["uses"].as_str() == Some("./"))
        .expect("the check job uses this repository's action");
    assert_eq!(
        uses_action["with"]["shard"].as_str(),
        Some("${{ matrix.shard }}/3")
    );
    let merge = &workflow["jobs"]["merge"];
    assert_eq!(merge["needs"].as_str(), Some("check"));
    let merges = merge["steps"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(|s| s["run"].as_str())
        .any(|r| r.starts_with("kvcc merge shards/kvcc-shard-*/kvcc-results.jsonl"));
    assert!(
        merges,
        "the merge job runs kvcc merge over the shards' results"
    );
}

#[test]
fn the_action_is_a_composite_with_documented_inputs() {
    let action = load("action.yml");
    assert_eq!(action["runs"]["using"].as_str(), Some("composite"));
    for input in [
        "path",
        "args",
        "shard",
        "trace-dir",
        "junit",
        "results",
        "artifact",
    ] {
        assert!(
            action["inputs"][input]["description"].as_str().is_some(),
            "input {input} is documented"
        );
    }
    assert_eq!(action["inputs"]["path"]["default"].as_str(), Some("specs"));
    let uses: Vec<&str> = steps(&action)
        .iter()
        .filter_map(|s| s["uses"].as_str())
        .collect();
    for wanted in [
        "actions/cache@",
        "actions/upload-artifact@",
        "mikepenz/action-junit-report@",
    ] {
        assert!(uses.iter().any(|u| u.starts_with(wanted)), "{uses:?}");
    }
    // Shell steps read inputs through `env:`, never `${{ }}` inside the script (which
    // would let a spec path inject shell code, and could not run outside GitHub).
    for s in steps(&action) {
        if let Some(run) = s["run"].as_str() {
            assert!(!run.contains("${{"), "{run}");
            assert_eq!(s["shell"].as_str(), Some("bash"));
        }
    }
}

/// What the runner hands one shell step: its script, with its `env:` and GitHub's own
/// variables set.
fn run_step(action: &Yaml, name: &str, env: &BTreeMap<&str, String>, dir: &Path) -> i32 {
    let s = step(action, name);
    let script = s["run"].as_str().expect("a shell step");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let kvcc = bin.join("kvcc");
    if !kvcc.exists() {
        std::os::unix::fs::symlink(KVCC, &kvcc).unwrap();
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("bash");
    command
        .args(["-e", "-c", script])
        .current_dir(root())
        .env("PATH", path)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_OUTPUT", dir.join("output"))
        .env("GITHUB_STEP_SUMMARY", dir.join("summary.md"))
        .env_remove("COLUMNS");
    // The step's `env:` with the action's defaults for its inputs.
    for (key, value) in s["env"].as_hash().into_iter().flatten() {
        let key = key.as_str().unwrap();
        let value = value.as_str().unwrap();
        let input = value
            .strip_prefix("${{ inputs.")
            .and_then(|v| v.strip_suffix(" }}"));
        let default = input.and_then(|i| action["inputs"][i]["default"].as_str());
        if let Some(default) = default {
            command.env(key, default);
        }
    }
    for (key, value) in env {
        command.env(key, value);
    }
    let (code, stdout, stderr) = crate::common::output(&mut command);
    println!("{name}: exit {code}\n{stdout}\n{stderr}");
    code
}

fn recorded_exit_code(dir: &Path) -> String {
    let output = std::fs::read_to_string(dir.join("output")).unwrap_or_default();
    output
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("exit-code="))
        .expect("the check step records kvcc's exit code")
        .to_string()
}

#[test]
fn the_action_steps_check_the_shipped_specs_and_pass() {
    let action = load("action.yml");
    let dir = tempfile::tempdir().unwrap();
    let out = |name: &str| dir.path().join(name).display().to_string();
    let env = BTreeMap::from([
        ("KVCC_SOURCE", root().display().to_string()),
        ("KVCC_TRACE_DIR", out("traces")),
        ("KVCC_JUNIT", out("kvcc.xml")),
    ]);
    assert_eq!(run_step(&action, "Install kvcc", &env, dir.path()), 0);
    assert_eq!(run_step(&action, "Check", &env, dir.path()), 0);
    assert_eq!(recorded_exit_code(dir.path()), "0");
    let junit = std::fs::read_to_string(out("kvcc.xml")).expect("JUnit written");
    assert!(junit.contains("failures=\"0\""), "{junit}");
    let summary = std::fs::read_to_string(out("summary.md")).expect("job summary written");
    assert!(summary.contains("as expected, 0 mismatched"), "{summary}");
    let verdict = BTreeMap::from([("KVCC_EXIT", "0".to_string())]);
    assert_eq!(run_step(&action, "Verdict", &verdict, dir.path()), 0);
}

/// The twin: a spec whose expectation is wrong must fail the job, with the mismatch's
/// Mermaid trace in the job summary; a sharded run writes JSON lines instead.
#[test]
fn the_action_fails_a_mismatch_and_embeds_its_trace_in_the_summary() {
    let action = load("action.yml");
    let dir = tempfile::tempdir().unwrap();
    let out = |name: &str| dir.path().join(name).display().to_string();
    let env = BTreeMap::from([
        ("KVCC_PATHS", fixture("mismatch.toml")),
        ("KVCC_TRACE_DIR", out("traces")),
        ("KVCC_JUNIT", out("kvcc.xml")),
    ]);
    assert_eq!(
        run_step(&action, "Check", &env, dir.path()),
        0,
        "the step records, the verdict fails"
    );
    assert_eq!(recorded_exit_code(dir.path()), "1");
    let summary = std::fs::read_to_string(out("summary.md")).unwrap();
    assert!(summary.contains("❌ mismatch"), "{summary}");
    assert!(summary.contains("```mermaid\nsequenceDiagram"), "{summary}");
    let verdict = BTreeMap::from([("KVCC_EXIT", "1".to_string())]);
    assert_eq!(run_step(&action, "Verdict", &verdict, dir.path()), 1);

    let sharded = BTreeMap::from([
        ("KVCC_PATHS", fixture("seed-59325-matrix.toml")),
        ("KVCC_SHARD", "2/2".to_string()),
        ("KVCC_TRACE_DIR", out("traces")),
        ("KVCC_JUNIT", out("shard.xml")),
        ("KVCC_RESULTS", out("results.jsonl")),
    ]);
    assert_eq!(run_step(&action, "Check", &sharded, dir.path()), 0);
    let results = std::fs::read_to_string(out("results.jsonl")).unwrap();
    assert!(!results.is_empty());
    for line in results.lines() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(value["shard"], "2/2");
    }
}
