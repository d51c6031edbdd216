//! Issue 16: input from strangers (specs, traces and recorded runs in pull requests) gets a
//! clear error and exit 2 — never a read of a file the user did not name, a device read
//! forever, a panic on a closed pipe or a full disk.

use crate::common::{fixture, kvcc, root, run};
use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Runs kvcc and asserts it ends with exit 2 within a second, with `message` on stderr
/// and no panic.
fn refused_quickly(args: &[&str], message: &str) {
    let started = Instant::now();
    let (code, stdout, stderr) = run(args);
    let elapsed = started.elapsed();
    assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
    assert!(stderr.contains(message), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        elapsed < Duration::from_secs(1),
        "{args:?} took {elapsed:?}"
    );
}

#[test]
fn issue16_devices_are_refused_as_specs_and_traces() {
    for device in ["/dev/zero", "/dev/urandom"] {
        let not_regular = "not a regular file";
        refused_quickly(&["check", device], not_regular);
        refused_quickly(&["replay", device], not_regular);
        refused_quickly(&["explore", device], not_regular);
        refused_quickly(&["simulate", device, "--out", "/nonexistent"], not_regular);
    }
}

/// A real trace of the seed fixture, written into `dir`, with its `#meta.source` set.
fn trace_naming(dir: &Path, source: &str) -> String {
    let (code, _, stderr) = run(&[
        "check",
        &fixture("seed-59325.toml"),
        "--trace-dir",
        dir.to_str().unwrap(),
        "--all-traces",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let trace = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".itf.json"))
        .expect("a trace written");
    let trace = trace.display().to_string();
    edit_meta(&trace, "source", source);
    trace
}

/// Sets `#meta.KEY` of the trace at `trace` to `value`.
fn edit_meta(trace: &str, key: &str, value: &str) {
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(trace).unwrap()).unwrap();
    doc["#meta"][key] = value.into();
    std::fs::write(trace, serde_json::to_string(&doc).unwrap()).unwrap();
}

#[test]
fn issue16_a_trace_cannot_make_replay_read_files_outside_the_working_tree() {
    let dir = tempfile::tempdir().unwrap();
    for source in [
        "/dev/zero",
        "/etc/passwd",
        "/etc/hostname.toml",
        "../../etc/x.toml",
        "specs/../../x.toml",
    ] {
        let trace = trace_naming(dir.path(), source);
        refused_quickly(&["replay", &trace], "pass --spec PATH");
    }
    // A link beside the trace that leads out of both trees is refused too.
    let link = dir.path().join("linked.toml");
    std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
    let trace = trace_naming(dir.path(), "linked.toml");
    refused_quickly(&["replay", &trace], "leads outside");
}

#[test]
fn issue16_a_trace_naming_a_spec_in_the_working_tree_still_replays() {
    let dir = tempfile::tempdir().unwrap();
    let trace = trace_naming(dir.path(), &fixture("seed-59325.toml"));
    let (code, stdout, stderr) = run(&["replay", &trace]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    // And --spec is the user's explicit choice, followed wherever it is.
    let trace = trace_naming(dir.path(), "/etc/passwd");
    let spec = root().join(fixture("seed-59325.toml"));
    let (code, stdout, stderr) = run(&["replay", &trace, "--spec", spec.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
}

/// A value the trace's `#meta.point` writes is wrong: the error names the trace and its
/// field, not the spec line the value would have replaced.
#[test]
fn issue16_a_bad_value_in_a_traces_point_is_reported_at_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let trace = trace_naming(dir.path(), &fixture("seed-59325.toml"));
    edit_meta(&trace, "point", r#"{"prefill.pcp":-1}"#);
    let at = format!("error: {trace}: #meta.point: prefill.pcp: got -1");
    refused_quickly(&["replay", &trace], &at);
    let (_, _, stderr) = run(&["replay", &trace]);
    assert!(!stderr.contains("seed-59325.toml:"), "{stderr}");
}

#[test]
fn issue16_replay_of_an_unknown_clause_is_an_input_error() {
    let dir = tempfile::tempdir().unwrap();
    let trace = trace_naming(dir.path(), &fixture("seed-59325.toml"));
    edit_meta(&trace, "clause", "no-such-clause");
    refused_quickly(&["replay", &trace], "#meta.clause: kvcc");
}

#[test]
fn issue16_a_closed_reader_ends_kvcc_quietly() {
    let mut child = kvcc()
        .args(["check", "specs", "--format", "json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The pipe's read end is dropped here, as `| head -c 10` does.
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn issue16_a_full_disk_is_an_error_not_a_panic() {
    let full = std::fs::File::create("/dev/full").unwrap();
    let output = kvcc()
        .args(["check", &fixture("seed-59325.toml")])
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("error: cannot write to standard output"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn issue16_a_link_inside_a_walked_directory_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/etc", dir.path().join("loop")).unwrap();
    refused_quickly(&["check", dir.path().to_str().unwrap()], "symbolic link");
}

#[test]
fn issue16_smaller_defects_get_located_messages() {
    let dir = tempfile::tempdir().unwrap();
    // A control character in a comment: the parser's own message is empty.
    let control = dir.path().join("control.toml");
    std::fs::write(&control, "#a\u{2}\n").unwrap();
    // Shown as a compiler shows it (issue 13): the message, then FILE:LINE:COLUMN.
    refused_quickly(
        &["check", control.to_str().unwrap()],
        "error: invalid TOML: control character U+0002",
    );
    refused_quickly(&["check", control.to_str().unwrap()], "control.toml:1:3\n");
    // Non-UTF-8 text names its line.
    let latin1 = dir.path().join("latin1.toml");
    std::fs::write(&latin1, b"version = 1\n# caf\xe9\n").unwrap();
    refused_quickly(
        &["check", latin1.to_str().unwrap()],
        "latin1.toml:2:6: spec is not UTF-8 text",
    );
    // A value the matrix overrides is still checked.
    let text = std::fs::read_to_string(root().join(fixture("seed-59325-matrix.toml"))).unwrap();
    for bad in ["pcp = 0", "pcp = -1"] {
        let shadowed = dir.path().join("shadowed.toml");
        std::fs::write(
            &shadowed,
            text.replacen("[prefill]\ntp = 1", &format!("[prefill]\ntp = 1\n{bad}"), 1),
        )
        .unwrap();
        refused_quickly(
            &["check", shadowed.to_str().unwrap()],
            "error: prefill.pcp: ",
        );
        refused_quickly(
            &["check", shadowed.to_str().unwrap()],
            "shadowed.toml:10:7\n",
        );
    }
    // Threads are bounded.
    let (code, _, stderr) = run(&["check", "--threads", "100000"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not in 1..=256"), "{stderr}");
}

/// Each of a recorded run's files in turn replaced by `replace` (given the emptied path)
/// in a copy of a fixture run, and the copy conformed: refused with `message`.
fn each_run_file_refused_when(replace: impl Fn(&Path), message: &str) {
    let fixture_run = root().join("tests/fixtures/runs/strict-duplicate");
    for replaced in ["header.json", "rank-1.jsonl", "scheduler.jsonl"] {
        let dir = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(&fixture_run).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
        let target = dir.path().join(replaced);
        std::fs::remove_file(&target).unwrap();
        replace(&target);
        refused_quickly(&["conform", dir.path().to_str().unwrap()], message);
    }
}

/// A link inside a run may lead to a device, outside the directory the user named, or to
/// another rank's file (whose reports would count twice): each is refused as a link. The
/// twin: the same copy with the file itself conforms as the fixture does.
#[test]
fn issue16_a_recorded_run_whose_files_are_links_is_refused() {
    let link = "a symbolic link";
    each_run_file_refused_when(
        |target| std::os::unix::fs::symlink("/dev/zero", target).unwrap(),
        link,
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let outside = elsewhere.path().join("outside");
    std::fs::write(&outside, "{}\n").unwrap();
    each_run_file_refused_when(
        |target| std::os::unix::fs::symlink(&outside, target).unwrap(),
        link,
    );
    each_run_file_refused_when(
        |target| std::os::unix::fs::symlink("rank-0.jsonl", target).unwrap(),
        link,
    );
    let fixture_run = root().join("tests/fixtures/runs/strict-duplicate");
    let (code, stdout, stderr) = run(&["conform", fixture_run.to_str().unwrap()]);
    assert!(code == 0 || code == 1, "{stdout}{stderr}");
    // An engine directory that is a link is refused too.
    let runs = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&fixture_run, runs.path().join("prefill")).unwrap();
    refused_quickly(&["conform", runs.path().to_str().unwrap()], link);
}

/// Runs a check of a hostile fixture with `limits` on `threads` threads; returns its
/// table line and how long it took.
fn limited_check(fixture_name: &str, threads: &str, limits: &[&str]) -> (String, Duration) {
    let started = Instant::now();
    let spec = fixture(&format!("hostile/{fixture_name}.toml"));
    let mut args = vec!["check", &spec, "--threads", threads];
    args.extend(limits);
    let (code, stdout, stderr) = run(&args);
    let elapsed = started.elapsed();
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    (stdout, elapsed)
}

#[test]
fn issue16_limits_bite_inside_a_state_that_explodes() {
    for threads in ["1", "2"] {
        let (stdout, elapsed) =
            limited_check("offload-stores-explode", threads, &["--timeout", "2"]);
        assert!(
            stdout.contains("inconclusive (time limit reached"),
            "{stdout}"
        );
        assert!(elapsed < Duration::from_secs(6), "{elapsed:?}");
        let (stdout, _) =
            limited_check("offload-stores-explode", threads, &["--max-memory", "150M"]);
        assert!(
            stdout.contains("inconclusive (memory limit 150 MiB reached)"),
            "{stdout}"
        );
        // Its three requests explode together: one request standing for them would hold.
        let (stdout, elapsed) = limited_check(
            "too-many-successors",
            threads,
            &["--timeout", "5", "--no-independence"],
        );
        assert!(
            stdout.contains("inconclusive (a state at depth 4 has 907924 successors"),
            "{stdout}"
        );
        assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
        // One request standing for the three is cut by the time limit too, and the full
        // search gets only what it left: the check's limit, not twice it.
        // The limit is read every few thousand successors, not only between chunks of
        // states: a chunk here takes up to 0.75 s, and the cut came 0.2 s to 1 s late
        // (3.0 s on a loaded CI machine). The interval itself is pinned exactly by the
        // model's `the_limits_are_read_every_few_thousand_successors_across_states`; here,
        // on a shared machine, a cut printed at 2.0 to 2.4 s is on time.
        let (stdout, elapsed) = limited_check("too-many-successors", threads, &["--timeout", "2"]);
        let cut_after: f64 = stdout
            .split_once("inconclusive (time limit reached after ")
            .and_then(|(_, rest)| rest.split_once("s)"))
            .and_then(|(seconds, _)| seconds.parse().ok())
            .unwrap_or_else(|| panic!("no time limit cut: {stdout}"));
        assert!((2.0..2.45).contains(&cut_after), "{stdout}");
        assert!(elapsed < Duration::from_millis(3500), "{elapsed:?}");
    }
}

/// Makes a FIFO at `path`: opening it for reading blocks until a writer comes.
fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Issue 23: every reader of a file the user names refuses a FIFO at once. The open
/// itself used to block, before the regular-file check could run, so each of these hung.
#[test]
fn issue23_a_fifo_is_refused_at_once_by_every_reader() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("named.toml");
    mkfifo(&fifo);
    let fifo = fifo.to_str().unwrap();
    let not_regular = "not a regular file";
    refused_quickly(&["check", fifo], not_regular);
    refused_quickly(&["replay", fifo], not_regular);

    // An entry of a spec directory.
    let specs = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join(fixture("seed-59325.toml")),
        specs.path().join("a.toml"),
    )
    .unwrap();
    mkfifo(&specs.path().join("b.toml"));
    refused_quickly(&["check", specs.path().to_str().unwrap()], not_regular);

    // A trace's `#meta.source`, beside the trace.
    let traces = tempfile::tempdir().unwrap();
    mkfifo(&traces.path().join("source.toml"));
    let trace = trace_naming(traces.path(), "source.toml");
    refused_quickly(&["replay", &trace], not_regular);

    // A file of a recorded run.
    each_run_file_refused_when(mkfifo, "not a regular file");

    // A shard file.
    refused_quickly(&["merge", fifo], not_regular);
}

/// A spec whose matrix has `values` values on each of `entries` paths (valid or not:
/// the count is refused before any point is built).
fn matrix_spec(entries: &[(&str, usize)]) -> String {
    let mut text = String::from(
        "version = 1\nrequests = 1\nexpected-count = \"world-size\"\n\
         [prefill]\ntp = 1\n[decode]\ntp = 1\n[expect]\nverdict = \"holds\"\n[matrix]\n",
    );
    for (path, values) in entries {
        let list: Vec<String> = (1..=*values).map(|v| v.to_string()).collect();
        text += &format!("\"{path}\" = [{}]\n", list.join(", "));
    }
    text
}

/// Issue 23: a matrix past the cap is refused at once, saying how many points it would
/// have; one at the cap loads. (2.2 M points used to take 23 s and 5 GB before the first
/// invalid one was reported.)
#[test]
fn issue23_a_matrix_past_the_cap_is_refused_before_it_is_expanded() {
    use kvcc::spec::{Spec, POINTS_MAX};
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("huge.toml");
    let huge = matrix_spec(&[
        ("requests", 1_000),
        ("prefill.tp", 1_000),
        ("decode.tp", 2_200),
    ]);
    std::fs::write(&file, huge).unwrap();
    refused_quickly(
        &["check", file.to_str().unwrap()],
        "expands to 2200000000 points, more than the 10000",
    );
    let at_cap = matrix_spec(&[("requests", 100), ("prefill.tp", POINTS_MAX / 100)]);
    let spec = Spec::parse("at-cap.toml", at_cap).expect("a matrix at the cap loads");
    assert_eq!(spec.points().len(), POINTS_MAX);
    let past = matrix_spec(&[("requests", 101), ("prefill.tp", POINTS_MAX / 100)]);
    let Err(error) = Spec::parse("past.toml", past) else {
        panic!("a matrix past the cap loads");
    };
    assert_eq!(error.field.as_deref(), Some("matrix"), "{error}");
    // The spec format's reference states the same cap.
    let schema = kvcc::spec::schema::schema();
    let said = schema["$defs"]["matrix"]["description"].as_str().unwrap();
    assert!(
        said.contains(&format!("at most {POINTS_MAX} points")),
        "{said}"
    );
}

/// Issue 23: the shard cost probes (and the progress bar's estimate, made by the same
/// probes) obey the run's limits. Each of this matrix's four probes alone explores
/// 188,079 states in seconds; under `--max-states 100` a probe stops at 100, under
/// `--timeout 1` at a second.
#[test]
fn issue23_cost_probes_obey_the_state_and_time_limits() {
    let spec = fixture("hostile/slow-probes.toml");
    for (limits, seconds) in [(["--max-states", "100"], 3), (["--timeout", "1"], 9)] {
        for shard in ["1/2", "2/2"] {
            let started = Instant::now();
            let mut args = vec!["check", &spec, "--shard", shard, "--threads", "1"];
            args.extend(limits);
            let (code, stdout, stderr) = run(&args);
            let elapsed = started.elapsed();
            assert_eq!(code, 1, "{stdout}{stderr}");
            assert!(stdout.contains("2 checks: 0 as expected"), "{stdout}");
            assert!(
                elapsed < Duration::from_secs(seconds),
                "{limits:?} --shard {shard} took {elapsed:?}"
            );
        }
    }
}
