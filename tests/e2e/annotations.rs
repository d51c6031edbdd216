//! Issue 27, "annotations once": under GitHub Actions a workflow run annotates each
//! mismatch exactly once, at the spec line of its expectation, and has one kvcc job
//! summary. `kvcc check` does both for an unsharded run; for a sharded one the shards
//! write neither and `kvcc merge` writes both for the whole run. Annotations are
//! collected across every job of the run, as GitHub shows them on a pull request: the
//! twin of this test is the run before issue 27, where each shard annotated its
//! mismatches and the merge annotated them again.

use crate::common::{fixture, kvcc, output, root};
use std::collections::BTreeSet;
use std::path::Path;

/// The specs: one mismatch in `mismatch.toml`, two in a copy of the matrix fixture whose
/// `[[expect.when]]` now matches the other point (each point expects the other verdict).
fn specs(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(fixture("seed-59325-matrix.toml")))
        .unwrap()
        .replace(
            "match = { \"prefill.pcp\" = 1 }",
            "match = { \"prefill.pcp\" = 2 }",
        );
    let when = dir.join("when.toml");
    std::fs::write(&when, text).unwrap();
    vec![fixture("mismatch.toml"), when.display().to_string()]
}

/// `(file, line)` of each mismatch, from a plain `--format json` run (no GitHub).
fn mismatches(specs: &[String]) -> Vec<(String, u64)> {
    let (code, stdout, stderr) = output(kvcc().arg("check").args(specs).args(["--format", "json"]));
    assert_eq!(code, 1, "{stderr}");
    stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["matches"] == false)
        .map(|v| {
            let file = v["file"].as_str().unwrap().to_string();
            (file, v["line"].as_u64().unwrap())
        })
        .collect()
}

/// The `::error` workflow commands of a job's output (both streams: the runner reads both).
fn errors(stdout: &str, stderr: &str) -> Vec<String> {
    stdout
        .lines()
        .chain(stderr.lines())
        .filter(|l| l.starts_with("::error"))
        .map(str::to_string)
        .collect()
}

/// One job: kvcc with `args`, under GitHub Actions with the job's own summary file.
/// Returns its exit code, its annotations and its summary (empty when none was written).
fn job(dir: &Path, name: &str, args: &[&str]) -> (i32, Vec<String>, String) {
    let summary = dir.join(format!("{name}-summary.md"));
    let (code, stdout, stderr) = output(
        kvcc()
            .args(args)
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_STEP_SUMMARY", &summary),
    );
    if name.starts_with("shard") {
        std::fs::write(dir.join(format!("{name}.jsonl")), &stdout).unwrap();
    }
    let text = std::fs::read_to_string(&summary).unwrap_or_default();
    (code, errors(&stdout, &stderr), text)
}

/// Each mismatch annotated once at its line, and nothing else annotated.
fn assert_once(annotations: &[String], mismatches: &[(String, u64)]) {
    assert_eq!(
        annotations.len(),
        mismatches.len(),
        "one annotation per mismatch: {annotations:#?}"
    );
    let at: BTreeSet<String> = mismatches
        .iter()
        .map(|(file, line)| format!("::error file={file},line={line},"))
        .collect();
    assert_eq!(at.len(), mismatches.len(), "mismatches at distinct lines");
    for place in &at {
        let found = annotations.iter().filter(|a| a.starts_with(place)).count();
        assert_eq!(
            found, 1,
            "{place} annotated {found} times: {annotations:#?}"
        );
    }
}

/// One kvcc summary, with one section per mismatch.
fn assert_one_summary(summary: &str, mismatches: usize) {
    assert_eq!(summary.matches("### kvcc check").count(), 1, "{summary}");
    assert_eq!(summary.matches("#### ❌ ").count(), mismatches, "{summary}");
    assert!(
        summary.contains("| spec | verdict | expected |"),
        "{summary}"
    );
}

#[test]
fn issue27_an_unsharded_run_annotates_each_mismatch_once_with_one_summary() {
    let dir = tempfile::tempdir().unwrap();
    let specs = specs(dir.path());
    let mismatches = mismatches(&specs);
    assert_eq!(mismatches.len(), 3, "{mismatches:?}");
    let mut args = vec!["check"];
    args.extend(specs.iter().map(String::as_str));
    let (code, annotations, summary) = job(dir.path(), "check", &args);
    assert_eq!(code, 1);
    assert_once(&annotations, &mismatches);
    assert_one_summary(&summary, mismatches.len());
}

#[test]
fn issue27_a_sharded_run_is_annotated_and_summarised_once_by_merge() {
    let dir = tempfile::tempdir().unwrap();
    let specs = specs(dir.path());
    let mismatches = mismatches(&specs);
    let traces = dir.path().join("traces").display().to_string();
    let mut run_annotations = Vec::new();
    let mut shards = Vec::new();
    for i in 1..=2 {
        let name = format!("shard-{i}");
        let shard = format!("{i}/2");
        let mut args = vec!["check"];
        args.extend(specs.iter().map(String::as_str));
        args.extend([
            "--shard",
            &shard,
            "--format",
            "json",
            "--trace-dir",
            &traces,
        ]);
        let (code, annotations, summary) = job(dir.path(), &name, &args);
        assert!(code == 0 || code == 1, "shard {shard}: exit {code}");
        assert_eq!(
            annotations,
            Vec::<String>::new(),
            "shard {shard} annotates nothing"
        );
        assert_eq!(summary, "", "shard {shard} writes no summary");
        run_annotations.extend(annotations);
        shards.push(
            dir.path()
                .join(format!("{name}.jsonl"))
                .display()
                .to_string(),
        );
    }
    let mut args = vec!["merge"];
    args.extend(shards.iter().map(String::as_str));
    let (code, annotations, summary) = job(dir.path(), "merge", &args);
    assert_eq!(code, 1);
    run_annotations.extend(annotations);
    assert_once(&run_annotations, &mismatches);
    assert_one_summary(&summary, mismatches.len());
    // The merged summary embeds, once each, the Markdown traces the shards wrote.
    let traces = summary.matches(".md</summary>").count();
    assert!(traces > 0, "{summary}");
    assert_eq!(
        summary.matches("```mermaid\nsequenceDiagram").count(),
        traces
    );
}
