//! Issue 23, item 7: atomic outputs. Traces and JUnit are written under a temporary name
//! and renamed, so two runs into one `--trace-dir` never leave a file made of both;
//! `kvcc replay` refuses data after the trace's JSON value; an unusable `--trace-dir` is
//! refused before the first check runs.

use crate::common::{fixture, kvcc, run};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Stdio;

/// `kvcc check seed-59325.toml --trace-dir DIR --all-traces EXTRA`, which must match.
fn traced(dir: &Path, extra: &[&str]) {
    let mut args = vec![
        "check".to_string(),
        fixture("seed-59325.toml"),
        "--trace-dir".into(),
        dir.display().to_string(),
        "--all-traces".into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = run(&args);
    assert_eq!(code, 0, "{stdout}{stderr}");
}

/// Every file in `dir`, by name, with its content.
fn contents(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect()
}

/// The broken twin: before issue 23, a trace or JUnit file that already existed was
/// truncated and written in place, so the file a hard link (or a reader, or a second run)
/// shared was overwritten. Now each is a new file renamed over the name.
#[test]
fn issue23_trace_and_junit_files_are_replaced_never_written_into() {
    let first = tempfile::tempdir().unwrap();
    traced(first.path(), &[]);
    let names: Vec<String> = contents(first.path()).into_keys().collect();
    assert_eq!(names.len(), 4 * 2, "two violated clauses, four files each");

    let root = tempfile::tempdir().unwrap();
    let (traces, witnesses) = (root.path().join("traces"), root.path().join("witnesses"));
    std::fs::create_dir(&traces).unwrap();
    std::fs::create_dir(&witnesses).unwrap();
    let junit = traces.join("kvcc.xml");
    for name in names.iter().chain(["kvcc.xml".to_string()].iter()) {
        std::fs::write(witnesses.join(name), "witness").unwrap();
        std::fs::hard_link(witnesses.join(name), traces.join(name)).unwrap();
    }
    traced(&traces, &["--junit", junit.to_str().unwrap()]);

    for (name, text) in contents(&witnesses) {
        assert_eq!(text, "witness", "{name} was written through its old link");
    }
    let written = contents(&traces);
    let mut expected: BTreeSet<&String> = names.iter().collect();
    let junit_name = "kvcc.xml".to_string();
    expected.insert(&junit_name);
    assert_eq!(
        written.keys().collect::<BTreeSet<_>>(),
        expected,
        "no temporary file left behind"
    );
    for (name, text) in &written {
        assert_ne!(text, "witness", "{name}");
        if name.ends_with(".itf.json") {
            serde_json::from_str::<serde_json::Value>(text).expect("a whole ITF trace");
        }
    }
    use std::os::unix::fs::PermissionsExt;
    for name in names.iter().filter(|n| n.ends_with(".sh")) {
        let mode = std::fs::metadata(traces.join(name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755, "{name}");
    }
}

/// Two runs that write different traces (one `--shortest`, whose reproduce command and
/// cost line differ) into one directory at once: each file is one run's whole file.
#[test]
fn issue23_two_runs_into_one_trace_dir_leave_whole_files() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    traced(&traces, &[]);
    let cheapest = contents(&traces);
    std::fs::remove_dir_all(&traces).unwrap();
    traced(&traces, &["--shortest"]);
    let shortest = contents(&traces);
    for (name, text) in &cheapest {
        assert_ne!(
            Some(text),
            shortest.get(name),
            "{name} differs between the runs"
        );
    }
    let spec = fixture("seed-59325.toml");
    for _ in 0..5 {
        let start = |extra: &[&str]| {
            kvcc()
                .args(["check", &spec, "--all-traces", "--trace-dir"])
                .arg(&traces)
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        };
        let (mut a, mut b) = (start(&[]), start(&["--shortest"]));
        assert!(a.wait().unwrap().success());
        assert!(b.wait().unwrap().success());
        let now = contents(&traces);
        assert_eq!(now.len(), cheapest.len(), "no temporary file left behind");
        for (name, text) in now {
            assert!(
                Some(&text) == cheapest.get(&name) || Some(&text) == shortest.get(&name),
                "{name} is neither run's file:\n{text}"
            );
        }
    }
}

/// The broken twin: before issue 23, replay read the first JSON value and ignored the
/// rest, so a trace with anything appended (a second trace, a torn write) reproduced.
#[test]
fn issue23_replay_refuses_data_after_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    traced(dir.path(), &[]);
    let trace = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".itf.json"))
        .unwrap();
    let file = trace.display().to_string();
    let (code, stdout, stderr) = run(&["replay", &file]);
    assert_eq!(code, 0, "{stdout}{stderr}");

    let text = std::fs::read_to_string(&trace).unwrap();
    for appended in ["\n{}\n", "x", "\n\n  ]"] {
        let whole = format!("{text}{appended}");
        std::fs::write(&trace, &whole).unwrap();
        // Where the extra data starts, as an editor counts lines and columns.
        let start = text.len() + appended.len() - appended.trim_start().len();
        let line = whole[..start].matches('\n').count() + 1;
        let column = start - whole[..start].rfind('\n').map_or(0, |i| i + 1) + 1;
        let (code, stdout, stderr) = run(&["replay", &file]);
        assert_eq!(code, 2, "{appended:?}: {stdout}{stderr}");
        let at = format!(
            "error: {file}:{line}:{column}: not a kvcc ITF trace: data after the JSON value"
        );
        assert!(stderr.contains(&at), "{appended:?}: no `{at}` in {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// The broken twin: before issue 23, an unusable `--trace-dir` was found when the first
/// trace was written, after its check (hours, on a large spec), and a run whose verdicts
/// all matched never noticed it (exit 0).
#[test]
fn issue23_an_unusable_trace_dir_is_refused_before_any_check() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    for bad in [file.clone(), file.join("sub")] {
        let bad = bad.display().to_string();
        let (code, stdout, stderr) = run(&[
            "check",
            &fixture("seed-59325-matrix.toml"),
            &fixture("mismatch.toml"),
            "--trace-dir",
            &bad,
            "--format",
            "json",
        ]);
        assert_eq!(code, 2, "{bad}: {stdout}{stderr}");
        assert!(
            stderr.contains(&format!(
                "error: {bad}: --trace-dir: cannot write traces there"
            )),
            "{stderr}"
        );
        let lines: Vec<serde_json::Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 1, "no check ran: {stdout}");
        assert_eq!(lines[0]["error"]["field"], "--trace-dir");
        assert_eq!(lines[0]["error"]["file"], bad.as_str());
    }
    // A directory that does not exist yet is made, before any check.
    let fresh = dir.path().join("new/traces");
    let (code, _, stderr) = run(&[
        "check",
        &fixture("seed-59325.toml"),
        "--trace-dir",
        fresh.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(fresh.is_dir());
}
