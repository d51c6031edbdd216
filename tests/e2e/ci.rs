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
    // test-all.sh requires vLLM under CI: the job installs it before the suite.
    let install = runs
        .iter()
        .position(|r| *r == "bash scripts/install-vllm.sh");
    let suite = runs.iter().position(|r| *r == "bash scripts/test-all.sh");
    assert!(install.is_some() && install < suite, "{runs:?}");
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
    run_step_output(action, name, env, dir).0
}

/// The value a step recorded for `name` in `$GITHUB_OUTPUT` (the last one), if any.
fn step_output(dir: &Path, name: &str) -> Option<String> {
    let output = std::fs::read_to_string(dir.join("output")).unwrap_or_default();
    let prefix = format!("{name}=");
    output
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
}

/// [`run_step`], returning the exit code and standard output. `${{ steps.ID.outputs.NAME }}`
/// in the step's `env:` reads what an earlier step wrote to `$GITHUB_OUTPUT`.
fn run_step_output(
    action: &Yaml,
    name: &str,
    env: &BTreeMap<&str, String>,
    dir: &Path,
) -> (i32, String) {
    let s = step(action, name);
    let script = s["run"].as_str().expect("a shell step");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let kvcc = bin.join("kvcc");
    if !kvcc.exists() {
        std::os::unix::fs::symlink(KVCC, &kvcc).unwrap();
    }
    // A stand-in for `cargo install`: a step never builds kvcc here. It logs its
    // arguments and the commit it was handed, and "installs" FAKE_CARGO_INSTALLS if set.
    let cargo = bin.join("cargo");
    if !cargo.exists() {
        let script = "#!/bin/sh\n\
            echo \"KVCC_COMMIT=$KVCC_COMMIT $*\" >> \"$FAKE_CARGO_LOG\"\n\
            if [ -n \"$FAKE_CARGO_INSTALLS\" ]; then\n\
              mkdir -p \"$HOME/.kvcc/bin\" && ln -sf \"$FAKE_CARGO_INSTALLS\" \"$HOME/.kvcc/bin/kvcc\"\n\
            fi\n";
        write_executable(&cargo, script);
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("bash");
    command
        .env("FAKE_CARGO_LOG", dir.join("cargo.log"))
        .args(["-e", "-c", script])
        .current_dir(root())
        .env("PATH", path)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_OUTPUT", dir.join("output"))
        .env("GITHUB_PATH", dir.join("path"))
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
        let output = value
            .strip_prefix("${{ steps.")
            .and_then(|v| v.strip_suffix(" }}"))
            .and_then(|v| v.split_once(".outputs."));
        if let Some((_, name)) = output {
            command.env(key, step_output(dir, name).unwrap_or_default());
        }
    }
    for (key, value) in env {
        command.env(key, value);
    }
    let (code, stdout, stderr) = crate::common::output(&mut command);
    println!("{name}: exit {code}\n{stdout}\n{stderr}");
    (code, stdout)
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
        ("HOME", out("home")),
        ("KVCC_WANT_VERSION", kvcc::VERSION.to_string()),
        ("KVCC_WANT_COMMIT", kvcc::COMMIT.to_string()),
    ]);
    // The cache restored the kvcc under test.
    let cached = dir.path().join("home/.kvcc/bin");
    std::fs::create_dir_all(&cached).unwrap();
    std::os::unix::fs::symlink(KVCC, cached.join("kvcc")).unwrap();
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

fn write_executable(path: &Path, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, script).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Issue 27: the Action's cache key is built from what it can hash. A git checkout of
/// kvcc (`uses: ./`) is its HEAD, plus a hash of the source when the checkout has
/// changed; an action used at a commit SHA is that commit (handed to the build, which
/// cannot ask git); any other ref is unknown, and the key hashes the source.
#[test]
fn issue27_the_action_identifies_the_kvcc_it_builds() {
    let action = load("action.yml");
    let identify = |source: &Path, git_ref: &str| {
        let dir = tempfile::tempdir().unwrap();
        let env = BTreeMap::from([
            ("KVCC_SOURCE", source.display().to_string()),
            ("KVCC_ACTION_REF", git_ref.to_string()),
        ]);
        assert_eq!(run_step(&action, "Identify kvcc", &env, dir.path()), 0);
        let get = |name| step_output(dir.path(), name).unwrap_or_else(|| panic!("no {name}"));
        (get("version"), get("commit"), get("given"), get("key"))
    };
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(root())
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let (version, commit, given, key) = identify(&root(), "");
    assert_eq!(version, kvcc::VERSION);
    assert_eq!(commit, git(&["rev-parse", "HEAD"]));
    assert_eq!(given, "", "the build asks git itself");
    let changed = !git(&["status", "--porcelain"]).is_empty();
    assert!(key.starts_with(&format!("{version}-{commit}")), "{key}");
    assert_eq!(key.contains("-source-"), changed, "{key}");

    // The action's source as GitHub unpacks it: no git.
    let copy = tempfile::tempdir().unwrap();
    std::fs::copy(root().join("Cargo.toml"), copy.path().join("Cargo.toml")).unwrap();
    std::fs::write(copy.path().join("lib.rs"), "// one\n").unwrap();
    let (_, commit, given, key) = identify(copy.path(), "main");
    assert_eq!((commit.as_str(), given.as_str()), ("unknown", ""));
    assert!(
        key.starts_with(&format!("{version}-unknown-source-")),
        "{key}"
    );
    std::fs::write(copy.path().join("lib.rs"), "// two\n").unwrap();
    let (_, _, _, edited) = identify(copy.path(), "main");
    assert_ne!(key, edited, "another source, another key");

    let sha = "0123456789abcdef0123456789abcdef01234567";
    let (_, commit, given, key) = identify(copy.path(), sha);
    assert_eq!((commit.as_str(), given.as_str()), (sha, sha));
    assert_eq!(key, format!("{version}-{sha}"));
}

/// Issue 27: the install step uses the kvcc the cache restored only when it says it is
/// the version and commit asked for, whatever kvcc is on PATH; else it builds, hands the
/// build the commit it was asked for, and checks what it built.
#[test]
fn issue27_the_action_installs_only_the_kvcc_asked_for() {
    let action = load("action.yml");
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let cached = home.join(".kvcc/bin/kvcc");
    std::fs::create_dir_all(cached.parent().unwrap()).unwrap();
    let stale = dir.path().join("stale-kvcc");
    let zeros = "0000000000000000000000000000000000000000";
    write_executable(
        &stale,
        &format!(
            "#!/bin/sh\necho 'kvcc {} (commit {zeros}, clean)'\n",
            kvcc::VERSION
        ),
    );
    let install = |want_commit: &str, given: &str, installs: &str, hit: &str| {
        let _ = std::fs::remove_file(dir.path().join("cargo.log"));
        let env = BTreeMap::from([
            ("KVCC_SOURCE", root().display().to_string()),
            ("HOME", home.display().to_string()),
            ("KVCC_WANT_VERSION", kvcc::VERSION.to_string()),
            ("KVCC_WANT_COMMIT", want_commit.to_string()),
            ("KVCC_GIVEN_COMMIT", given.to_string()),
            ("KVCC_CACHE_HIT", hit.to_string()),
            ("FAKE_CARGO_INSTALLS", installs.to_string()),
        ]);
        let (code, stdout) = run_step_output(&action, "Install kvcc", &env, dir.path());
        let built = std::fs::read_to_string(dir.path().join("cargo.log")).unwrap_or_default();
        (code, stdout, built)
    };
    let place = |binary: &Path| {
        let _ = std::fs::remove_file(&cached);
        std::os::unix::fs::symlink(binary, &cached).unwrap();
    };

    // The cache holds the kvcc asked for: used as it is, and put first on PATH.
    place(Path::new(KVCC));
    let (code, stdout, built) = install(kvcc::COMMIT, "", "", "true");
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("(cached)"), "{stdout}");
    assert_eq!(built, "", "nothing built");
    let path = std::fs::read_to_string(dir.path().join("path")).unwrap();
    assert_eq!(path.trim(), home.join(".kvcc/bin").display().to_string());

    // Another commit in the cache (and the right kvcc on PATH, which is not looked at):
    // built, with the commit asked for handed to the build.
    place(&stale);
    let (code, stdout, built) = install(kvcc::COMMIT, kvcc::COMMIT, KVCC, "");
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("(built)"), "{stdout}");
    let expected = format!(
        "KVCC_COMMIT={} install --locked --force --root {} --path {}",
        kvcc::COMMIT,
        home.join(".kvcc").display(),
        root().join("harness").display()
    );
    assert_eq!(built.trim(), expected);

    // A build that does not say it is the commit asked for fails the step.
    place(&stale);
    let (code, stdout, built) = install(kvcc::COMMIT, "", "", "");
    assert_eq!(code, 1, "{stdout}");
    assert!(!built.is_empty());
    let error = format!(
        "::error title=kvcc::built kvcc {} (commit {zeros}, clean), not",
        kvcc::VERSION
    );
    assert!(stdout.contains(&error), "{stdout}");

    // An unknown commit cannot be checked: trusted only as the cache restored it.
    let unknown = dir.path().join("unknown-kvcc");
    let line = format!(
        "kvcc {} (commit unknown: not built from a git checkout)",
        kvcc::VERSION
    );
    write_executable(&unknown, &format!("#!/bin/sh\necho '{line}'\n"));
    place(&unknown);
    let (code, stdout, built) = install("unknown", "", "", "true");
    assert_eq!((code, built.as_str()), (0, ""), "{stdout}");
    let (code, _, built) = install("unknown", "", unknown.to_str().unwrap(), "");
    assert_eq!(code, 0);
    assert!(!built.is_empty(), "left over, not restored: rebuilt");
}
