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
    for wanted in ["actions/cache@", "actions/upload-artifact@"] {
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

    // A release tag is handed to the install step, which downloads its binary; the source
    // at the tag must declare the tag's version. Other refs are no release.
    let release = |git_ref: &str| {
        let dir = tempfile::tempdir().unwrap();
        let env = BTreeMap::from([
            ("KVCC_SOURCE", copy.path().display().to_string()),
            ("KVCC_ACTION_REF", git_ref.to_string()),
        ]);
        let (code, stdout) = run_step_output(&action, "Identify kvcc", &env, dir.path());
        (code, stdout, step_output(dir.path(), "release"))
    };
    let tag = format!("v{version}");
    let (code, _, released) = release(&tag);
    assert_eq!((code, released), (0, Some(tag.clone())));
    let (_, _, _, tagged_key) = identify(copy.path(), &tag);
    assert_eq!(
        tagged_key, edited,
        "the key still hashes the source at the tag"
    );
    for other in ["main", "v1", &format!("{tag}-rc1"), sha] {
        assert_eq!(release(other).2.as_deref(), Some(""), "{other}");
    }
    let (code, stdout, _) = release("v9.9.9");
    assert_eq!(code, 1, "{stdout}");
    let error = format!(
        "::error title=kvcc::the action at tag v9.9.9 declares kvcc {version} (Cargo.toml)"
    );
    assert!(stdout.contains(&error), "{stdout}");
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

/// The actions a step may use: GitHub's own (checkout, cache, artifacts) and this
/// repository's. A JUnit publisher (mikepenz/action-junit-report, dorny/test-reporter,
/// EnricoMi/publish-unit-test-result-action) would annotate each mismatch a second time,
/// add a second summary and need `checks: write`, which pull requests from forks do not
/// get: kvcc writes its own annotations and summary. Another action joins this list only
/// once reviewed for that.
const ALLOWED_ACTIONS: [&str; 5] = [
    "actions/checkout@",
    "actions/cache@",
    "actions/upload-artifact@",
    "actions/download-artifact@",
    "./",
];

/// The permissions `permissions` (of `at`) grants beyond `contents`.
fn grants(at: &str, permissions: &Yaml) -> Vec<String> {
    match permissions {
        Yaml::BadValue => Vec::new(),
        Yaml::Hash(scopes) => scopes
            .iter()
            .filter(|(scope, _)| scope.as_str() != Some("contents"))
            .map(|(scope, level)| {
                let (scope, level) = (scope.as_str(), level.as_str());
                format!(
                    "{at} grants {}: {}",
                    scope.unwrap_or("?"),
                    level.unwrap_or("?")
                )
            })
            .collect(),
        other => vec![format!("{at} grants {other:?}")],
    }
}

/// What breaks "annotations once, least privilege" in a workflow or an action: a step
/// using an action outside [`ALLOWED_ACTIONS`], a workflow without `permissions:
/// { contents: read }` at its top, and any permission granted other than `contents`.
fn privilege_findings(doc: &Yaml) -> Vec<String> {
    let mut findings = Vec::new();
    let mut used: Vec<(String, &Yaml)> = Vec::new();
    if let Some(jobs) = doc["jobs"].as_hash() {
        let top = &doc["permissions"];
        if top["contents"].as_str() != Some("read") || top.as_hash().map(|h| h.len()) != Some(1) {
            findings.push(format!(
                "top-level permissions are {top:?}, not contents: read"
            ));
        }
        findings.extend(grants("the workflow", top));
        for (name, job) in jobs {
            let name = name.as_str().unwrap_or_default();
            findings.extend(grants(&format!("job {name}"), &job["permissions"]));
            for step in job["steps"].as_vec().into_iter().flatten() {
                used.push((format!("job {name}"), step));
            }
        }
    }
    for step in doc["runs"]["steps"].as_vec().into_iter().flatten() {
        used.push(("the action".to_string(), step));
    }
    for (at, step) in used {
        if let Some(uses) = step["uses"].as_str() {
            if !ALLOWED_ACTIONS.iter().any(|a| uses.starts_with(a)) {
                findings.push(format!("{at} uses {uses}"));
            }
        }
    }
    findings
}

#[test]
fn issue27_no_step_publishes_junit_or_needs_checks_write() {
    let mut files = vec!["action.yml".to_string()];
    for entry in std::fs::read_dir(root().join(".github/workflows")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        files.push(format!(".github/workflows/{name}"));
    }
    for file in &files {
        assert_eq!(
            privilege_findings(&load(file)),
            Vec::<String>::new(),
            "{file}"
        );
    }
    // Only the release job writes (contents): it attaches the binaries to the release.
    let release = load(".github/workflows/release.yml");
    assert_eq!(
        release["jobs"]["release"]["permissions"]["contents"].as_str(),
        Some("write")
    );
    // The JUnit report stays an artifact: the action uploads it, and so does the merge job.
    let action = load("action.yml");
    let upload = steps(&action)
        .iter()
        .find(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/upload-artifact@"))
        })
        .expect("the action uploads an artifact");
    let paths = upload["with"]["path"].as_str().unwrap();
    assert!(paths.contains("${{ inputs.junit }}"), "{paths}");
    let workflow = load(".github/workflows/kvcc.yml");
    let merged = workflow["jobs"]["merge"]["steps"]
        .as_vec()
        .unwrap()
        .iter()
        .any(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/upload-artifact@"))
                && s["with"]["path"].as_str() == Some("kvcc-junit.xml")
        });
    assert!(merged, "the merge job uploads the merged JUnit report");
}

/// The twin: the workflow and the action as they were before issue 27, with a JUnit
/// publisher and `checks: write`, and a workflow that states no permissions.
#[test]
fn issue27_a_junit_publisher_or_checks_write_is_found() {
    let parse = |text: &str| YamlLoader::load_from_str(text).unwrap().remove(0);
    let workflow = parse(
        "on: pull_request\npermissions:\n  contents: read\n  checks: write\njobs:\n  merge:\n    \
         runs-on: ubuntu-latest\n    steps:\n      - uses: actions/checkout@0\n      \
         - uses: mikepenz/action-junit-report@d9f48fc87bc235f7e214acf696ca5abc0a986f16\n",
    );
    let findings = privilege_findings(&workflow);
    assert!(
        findings.contains(&"the workflow grants checks: write".to_string()),
        "{findings:?}"
    );
    assert!(
        findings
            .iter()
            .any(|f| f.starts_with("top-level permissions are")),
        "{findings:?}"
    );
    assert!(
        findings.contains(
            &"job merge uses mikepenz/action-junit-report@d9f48fc87bc235f7e214acf696ca5abc0a986f16"
                .to_string()
        ),
        "{findings:?}"
    );
    let unstated =
        parse("on: push\njobs:\n  a:\n    runs-on: x\n    permissions: write-all\n    steps: []\n");
    let findings = privilege_findings(&unstated);
    assert_eq!(findings.len(), 2, "{findings:?}");
    let action = parse(
        "runs:\n  using: composite\n  steps:\n    - uses: dorny/test-reporter@v2\n      with: { reporter: java-junit }\n",
    );
    assert_eq!(
        privilege_findings(&action),
        ["the action uses dorny/test-reporter@v2"]
    );
}

/// The runners whose release archive scripts/action-install.sh downloads, as its
/// `runner_target` table names them: (RUNNER_OS, RUNNER_ARCH, Rust target).
fn release_runners() -> Vec<(String, String, String)> {
    let script = std::fs::read_to_string(root().join("scripts/action-install.sh")).unwrap();
    script
        .lines()
        .filter_map(|l| {
            let (runner, target) = l.trim().strip_suffix(" ;;")?.split_once(") echo ")?;
            let (os, arch) = runner.split_once('/')?;
            Some((os.to_string(), arch.to_string(), target.to_string()))
        })
        .collect()
}

/// Issue 27: the action looks for a release archive for every target the release
/// workflow builds, and for no other.
#[test]
fn issue27_the_action_downloads_every_target_the_release_builds() {
    let release = load(".github/workflows/release.yml");
    let mut built: Vec<String> = release["jobs"]["build"]["strategy"]["matrix"]["include"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|t| t["target"].as_str().unwrap().to_string())
        .collect();
    let mut downloaded: Vec<String> = release_runners().into_iter().map(|r| r.2).collect();
    built.sort();
    downloaded.sort();
    assert_eq!(built.len(), 4, "{built:?}");
    assert_eq!(downloaded, built);
}

/// Copies the two assets of a release (`kvcc-TARGET.tar.gz` and its `.sha256`).
fn copy_release(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Issue 27: at a release tag the action installs the release's prebuilt kvcc for its
/// runner. The release is laid out here by `scripts/release-package.sh` (the packaging of
/// the release workflow) around the kvcc under test and served as a file:// URL. The
/// download is checked against its `.sha256` and its `--version` against the tag; the
/// twins: a tampered checksum or archive, and a release whose binary is another version,
/// are refused and install nothing; a release with no archive for the runner is built.
#[test]
fn issue27_the_action_installs_a_release_binary_checked() {
    let action = load("action.yml");
    let work = tempfile::tempdir().unwrap();
    let host = crate::common::host();
    let runners = release_runners();
    let (os, arch, _) = runners
        .iter()
        .find(|r| r.2 == host)
        .unwrap_or_else(|| panic!("the release builds no archive for this machine, {host}"));
    let tag = format!("v{}", kvcc::VERSION);
    let releases = work.path().join("releases");
    let packaged = std::process::Command::new("bash")
        .arg(root().join("scripts/release-package.sh"))
        .arg(KVCC)
        .arg(&host)
        .arg(releases.join(&tag))
        .output()
        .unwrap();
    assert!(packaged.status.success(), "{packaged:?}");
    let archive = format!("kvcc-{host}.tar.gz");
    let checksum =
        std::fs::read_to_string(releases.join(&tag).join(format!("{archive}.sha256"))).unwrap();
    let sha = checksum.split_whitespace().next().unwrap().to_string();
    // What the fallback build installs: a kvcc of the action's source, whose commit is
    // unknown (no git at a tag).
    let built = work.path().join("built-kvcc");
    write_executable(
        &built,
        &format!(
            "#!/bin/sh\necho 'kvcc {} (commit unknown: not built from a git checkout)'\n",
            kvcc::VERSION
        ),
    );

    // Runs the install step in `dir` (its home in it) with the action's release inputs for
    // this runner, then `extra`; returns the exit code, stdout and what cargo was asked.
    let install = |dir: &Path, extra: &[(&'static str, String)]| {
        let _ = std::fs::remove_file(dir.join("cargo.log"));
        let mut env = BTreeMap::from([
            ("HOME", dir.join("home").display().to_string()),
            ("KVCC_SOURCE", root().display().to_string()),
            ("KVCC_WANT_VERSION", kvcc::VERSION.to_string()),
            ("KVCC_WANT_COMMIT", "unknown".to_string()),
            ("KVCC_GIVEN_COMMIT", String::new()),
            ("KVCC_CACHE_HIT", String::new()),
            ("KVCC_RELEASE", tag.clone()),
            (
                "KVCC_RELEASE_BASE_URL",
                format!("file://{}", releases.display()),
            ),
            ("RUNNER_OS", os.clone()),
            ("RUNNER_ARCH", arch.clone()),
            ("FAKE_CARGO_INSTALLS", built.display().to_string()),
        ]);
        env.extend(extra.iter().cloned());
        let (code, stdout) = run_step_output(&action, "Install kvcc", &env, dir);
        let cargo = std::fs::read_to_string(dir.join("cargo.log")).unwrap_or_default();
        (code, stdout, cargo)
    };
    let installed = |dir: &Path| dir.join("home/.kvcc/bin/kvcc");
    let version_of = |binary: &Path| {
        let out = std::process::Command::new(binary)
            .arg("--version")
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };

    // The release's binary for this runner: downloaded, checked, installed, on PATH.
    let dir = tempfile::tempdir().unwrap();
    let (code, stdout, cargo) = install(dir.path(), &[]);
    assert_eq!(code, 0, "{stdout}");
    let said = format!("(downloaded {archive} of release {tag}, SHA-256 {sha})");
    assert!(stdout.contains(&said), "{stdout}");
    assert_eq!(cargo, "", "nothing built");
    assert!(!installed(dir.path()).is_symlink());
    assert_eq!(
        version_of(&installed(dir.path())),
        version_of(Path::new(KVCC))
    );
    let path = std::fs::read_to_string(dir.path().join("path")).unwrap();
    assert_eq!(
        path.trim(),
        dir.path().join("home/.kvcc/bin").display().to_string()
    );
    // Restored by the cache: used as it is, nothing fetched.
    let gone = [
        ("KVCC_CACHE_HIT", "true".to_string()),
        ("KVCC_RELEASE_BASE_URL", "file:///nonexistent".to_string()),
    ];
    let (code, stdout, cargo) = install(dir.path(), &gone);
    assert_eq!((code, cargo.as_str()), (0, ""), "{stdout}");
    assert!(
        stdout.contains(&format!("{} (cached)", version_of(Path::new(KVCC)).trim())),
        "{stdout}"
    );

    // Refused: nothing installed, nothing built, nothing put on PATH.
    let refused = |releases: &Path, extra: &[(&'static str, String)], error: &str| {
        let dir = tempfile::tempdir().unwrap();
        let mut env = vec![(
            "KVCC_RELEASE_BASE_URL",
            format!("file://{}", releases.display()),
        )];
        env.extend(extra.iter().cloned());
        let (code, stdout, cargo) = install(dir.path(), &env);
        assert_eq!(code, 1, "{stdout}");
        assert!(stdout.contains(error), "no {error:?} in:\n{stdout}");
        assert_eq!(cargo, "", "nothing built");
        assert!(!installed(dir.path()).exists(), "nothing installed");
        assert!(!dir.path().join("path").exists(), "nothing on PATH");
    };
    // A checksum that is not the archive's.
    let tampered = work.path().join("tampered-checksum");
    copy_release(&releases.join(&tag), &tampered.join(&tag));
    let other = format!(
        "{}{}",
        if sha.starts_with('0') { '1' } else { '0' },
        &sha[1..]
    );
    std::fs::write(
        tampered.join(&tag).join(format!("{archive}.sha256")),
        checksum.replacen(&sha, &other, 1),
    )
    .unwrap();
    let mismatch = format!(
        "::error title=kvcc::checksum mismatch: {archive} of release {tag} has SHA-256 {sha}, but {archive}.sha256 says {other}; not installed"
    );
    refused(&tampered, &[], &mismatch);
    // An archive that is not the one checksummed.
    let swapped = work.path().join("tampered-archive");
    copy_release(&releases.join(&tag), &swapped.join(&tag));
    let mut bytes = std::fs::read(swapped.join(&tag).join(&archive)).unwrap();
    bytes.extend_from_slice(b"tampered");
    std::fs::write(swapped.join(&tag).join(&archive), bytes).unwrap();
    refused(
        &swapped,
        &[],
        &format!("::error title=kvcc::checksum mismatch: {archive} of release {tag} has SHA-256 "),
    );
    // A release whose binary is not the tag's version.
    let later = work.path().join("later");
    copy_release(&releases.join(&tag), &later.join("v9.9.9"));
    let later_tag = [
        ("KVCC_RELEASE", "v9.9.9".to_string()),
        ("KVCC_WANT_VERSION", "9.9.9".to_string()),
    ];
    let error = format!(
        "::error title=kvcc::{archive} of release v9.9.9 holds kvcc {} (commit ",
        kvcc::VERSION
    );
    refused(&later, &later_tag, &error);

    // No archive for this runner: built from source, and the log says why.
    let (other_os, other_arch, other_target) = runners.iter().find(|r| r.2 != host).unwrap();
    let elsewhere = [
        ("RUNNER_OS", other_os.clone()),
        ("RUNNER_ARCH", other_arch.clone()),
    ];
    let dir = tempfile::tempdir().unwrap();
    let (code, stdout, cargo) = install(dir.path(), &elsewhere);
    assert_eq!(code, 0, "{stdout}");
    let why = format!("release {tag} has no kvcc-{other_target}.tar.gz (");
    assert!(
        stdout.contains(&why) && stdout.contains("): building from source"),
        "{stdout}"
    );
    assert!(cargo.contains("install --locked --force"), "{cargo}");
    assert!(stdout.contains("(built)"), "{stdout}");
    let windows = [
        ("RUNNER_OS", "Windows".to_string()),
        ("RUNNER_ARCH", "X64".to_string()),
    ];
    let dir = tempfile::tempdir().unwrap();
    let (code, stdout, cargo) = install(dir.path(), &windows);
    assert_eq!(code, 0, "{stdout}");
    let why = format!("release {tag} has no kvcc for a Windows X64 runner: building from source");
    assert!(stdout.contains(&why), "{stdout}");
    assert!(!cargo.is_empty());
}
