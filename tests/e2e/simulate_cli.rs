//! `kvcc simulate` end to end: what it writes, that a seed reproduces it byte for byte,
//! that `kvcc conform` reads it, and its input errors.

use crate::common::run;
use std::path::Path;

const REGRESSION: &str = "specs/pr59325-regression.toml";
const POINT: [&str; 8] = [
    "--point",
    "prefill.pcp=2",
    "--point",
    "prefill.tp=1",
    "--point",
    "decode.tp=1",
    "--point",
    "producer.lease=true",
];

fn simulate(out: &Path, seed: &str, runs: &str) -> (i32, String, String) {
    let out = out.display().to_string();
    let mut args = vec!["simulate", REGRESSION];
    args.extend(POINT);
    args.extend(["--seed", seed, "--runs", runs, "--out", &out]);
    run(&args)
}

/// Every file under `dir`, relative path and contents, in name order.
fn snapshot(dir: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().display().to_string();
                files.push((rel, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}

#[test]
fn writes_recorded_runs_that_conform_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("sim");
    let (code, stdout, stderr) = simulate(&out, "3", "4");
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(stdout.lines().count(), 5, "{stdout}");
    assert!(stdout.contains("run-0003: "), "{stdout}");
    assert!(stdout.contains("check them with: kvcc conform"), "{stdout}");
    for engine in ["prefill", "decode"] {
        let dir = out.join("run-0000").join(engine);
        for file in ["header.json", "rank-0.jsonl", "scheduler.jsonl"] {
            assert!(dir.join(file).is_file(), "{}", dir.join(file).display());
        }
    }
    assert!(
        out.join("run-0000/prefill/rank-1.jsonl").is_file(),
        "pcp = 2"
    );
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run-0000/model.json")).unwrap())
            .unwrap();
    assert_eq!(meta["seed"], 3);
    assert_eq!(meta["point"]["prefill.pcp"], 2);
    assert!(meta["actions"].is_array());

    let runs: Vec<String> = (0..4)
        .map(|i| out.join(format!("run-{i:04}")).display().to_string())
        .collect();
    let mut args = vec!["conform"];
    args.extend(runs.iter().map(String::as_str));
    args.extend(["--format", "json"]);
    let (code, json, stderr) = run(&args);
    assert!(code == 0 || code == 1, "{stderr}");
    assert_eq!(json.lines().count(), 8, "two engines per run: {json}");
    // Each run's verdict is the model's, as model.json records it.
    for (i, run_dir) in runs.iter().enumerate() {
        let meta: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(Path::new(run_dir).join("model.json")).unwrap(),
        )
        .unwrap();
        let leaks = meta["violated"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "eventually-freed: delay-freed-request-never-freed");
        let prefill: serde_json::Value = json
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|l| l["run"] == format!("{run_dir}/prefill"))
            .unwrap();
        let flagged = prefill["properties"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "eventually-freed");
        assert_eq!(flagged, leaks, "run {i}: {prefill}");
    }
}

#[test]
fn the_same_seed_writes_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    assert_eq!(simulate(&a, "42", "6").0, 0);
    assert_eq!(simulate(&b, "42", "6").0, 0);
    assert_eq!(simulate(&c, "43", "6").0, 0);
    let (sa, sb, sc) = (snapshot(&a), snapshot(&b), snapshot(&c));
    // model.json names its --out; everything else must match byte for byte.
    let strip = |s: Vec<(String, String)>| -> Vec<(String, String)> {
        s.into_iter()
            .filter(|(f, _)| !f.ends_with("model.json"))
            .collect()
    };
    assert_eq!(strip(sa.clone()), strip(sb));
    assert_ne!(strip(sa), strip(sc), "another seed, other runs");
}

#[test]
fn refuses_to_overwrite_and_reports_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("sim");
    assert_eq!(simulate(&out, "1", "1").0, 0);
    let (code, _, stderr) = simulate(&out, "1", "1");
    assert_eq!(code, 2);
    assert!(stderr.contains("run-0000: already exists"), "{stderr}");

    let (code, _, stderr) = run(&[
        "simulate",
        REGRESSION,
        "--point",
        "prefill.pcp=3",
        "--out",
        &out.display().to_string(),
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains("not a value of the matrix"), "{stderr}");
    let (code, _, stderr) = run(&["simulate", "tests/fixtures/malformed.toml", "--out", "x"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.starts_with("error: tests/fixtures/malformed.toml:"),
        "{stderr}"
    );
}
