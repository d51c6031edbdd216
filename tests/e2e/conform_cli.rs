//! `kvcc conform` end to end: the acceptance fixture (a rank reporting an id twice under
//! Strict), every output format and exit code, and every kind of bad input — each must
//! be `error: FILE:LINE...`, exit 2, never a panic and never a silent skip.

use crate::common::{fixture, kvcc, output, run};
use std::path::{Path, PathBuf};

/// A P run of `world` ranks in a temp dir, with rank lines and scheduler lines as given.
struct RunDir {
    _tmp: tempfile::TempDir,
    path: PathBuf,
}

impl RunDir {
    fn new(header: &str, ranks: &[&[&str]], scheduler: &[&str]) -> RunDir {
        let tmp = tempfile::tempdir().expect("temp dir");
        let path = tmp.path().join("prefill");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("header.json"), header).unwrap();
        for (rank, lines) in ranks.iter().enumerate() {
            write_lines(&path.join(format!("rank-{rank}.jsonl")), lines);
        }
        write_lines(&path.join("scheduler.jsonl"), scheduler);
        RunDir { _tmp: tmp, path }
    }

    fn file(&self, name: &str) -> String {
        self.path.join(name).display().to_string()
    }

    fn arg(&self) -> String {
        self.path.display().to_string()
    }
}

fn write_lines(path: &Path, lines: &[&str]) {
    let mut text = lines.join("\n");
    if !lines.is_empty() {
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

fn header(world: u32, policy: &str) -> String {
    format!(
        r#"{{"format_version": 1, "engine": "prefill", "kv_connector": "NixlConnector", "world_size": {world}, "finished_count": null, "aggregator_policy": "{policy}"}}"#
    )
}

fn step(k: u64, sent: &[&str]) -> String {
    let ids: Vec<String> = sent.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        r#"{{"step": {k}, "finished_sending": [{}], "finished_recving": [], "failed_recving": [], "invalid_block_ids": [], "expected_finished_count": 0}}"#,
        ids.join(", ")
    )
}

fn event(k: u64, event: &str, id: &str) -> String {
    format!(r#"{{"step": {k}, "event": "{event}", "request_id": "{id}"}}"#)
}

/// A conforming 2-rank run: req-a delay-freed, reported by both ranks, freed.
fn good_run() -> (String, Vec<Vec<String>>, Vec<String>) {
    (
        header(2, "countdown"),
        vec![
            vec![step(0, &[]), step(1, &["req-a"]), step(2, &[])],
            vec![step(0, &["req-a"]), step(1, &[]), step(2, &[])],
        ],
        vec![event(0, "delay-freed", "req-a"), event(2, "freed", "req-a")],
    )
}

fn build(header: &str, ranks: &[Vec<String>], scheduler: &[String]) -> RunDir {
    let ranks: Vec<Vec<&str>> = ranks
        .iter()
        .map(|r| r.iter().map(String::as_str).collect())
        .collect();
    let ranks: Vec<&[&str]> = ranks.iter().map(Vec::as_slice).collect();
    let scheduler: Vec<&str> = scheduler.iter().map(String::as_str).collect();
    RunDir::new(header, &ranks, &scheduler)
}

/// Runs conform on `dir`; asserts exit 2, no panic, and returns stderr.
fn bad_input(dir: &RunDir) -> String {
    let (code, stdout, stderr) = run(&["conform", &dir.arg()]);
    assert_eq!(code, 2, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one error: {stderr}");
    stderr
}

/// Acceptance: one rank reports an id twice under Strict: `exactly-once`, with the file
/// and line of the second report.
#[test]
fn strict_duplicate_report_is_exactly_once_at_the_second_report() {
    let dir = fixture("runs/strict-duplicate");
    let (code, stdout, stderr) = run(&["conform", &dir]);
    assert_eq!(code, 1, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let second = format!("{dir}/rank-1.jsonl:3");
    assert!(
        stdout.contains("exactly-once: duplicate-report — request cmpl-7f3a-0"),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("    at {second}\n")), "{stdout}");
    assert!(stdout.contains("rank 1 reported cmpl-7f3a-0"), "{stdout}");
    assert!(stdout.contains("1 finding (exactly-once)"), "{stdout}");

    let (code, json, _) = run(&["conform", &dir, "--format", "json"]);
    assert_eq!(code, 1);
    let line: serde_json::Value = serde_json::from_str(json.trim()).expect("one JSON line");
    assert_eq!(line["verdict"], "violated");
    assert_eq!(line["policy"], "strict");
    let finding = &line["findings"][0];
    assert_eq!(finding["property"], "exactly-once");
    assert_eq!(finding["request"], "cmpl-7f3a-0");
    assert_eq!(finding["ranks"], serde_json::json!([1]));
    assert_eq!(finding["at"][0], second);
    assert_eq!(line["findings"].as_array().unwrap().len(), 1);
}

/// The same recording under vLLM's countdown: the duplicate is counted, and the extra
/// report reopens the countdown, which never drains.
#[test]
fn countdown_counts_the_duplicate_and_reopens_the_countdown() {
    let dir = fixture("runs/strict-duplicate");
    let (code, stdout, _) = run(&["conform", &dir, "--policy", "countdown"]);
    assert_eq!(code, 1, "{stdout}");
    for expected in [
        "exactly-once: duplicate-report",
        "count-conserved: countdown-reopened",
        &format!("at {dir}/rank-2.jsonl:3"),
        "aggregator-drains: countdown-left-open",
        "countdown policy",
    ] {
        assert!(stdout.contains(expected), "{expected}:\n{stdout}");
    }
}

#[test]
fn a_conforming_run_exits_0_in_every_format() {
    let (h, ranks, sched) = good_run();
    let dir = build(&h, &ranks, &sched);
    let (code, stdout, stderr) = run(&["conform", &dir.arg()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("  conforms\n"), "{stdout}");
    let (code, md, _) = run(&["conform", &dir.arg(), "--format", "md"]);
    assert_eq!(code, 0);
    assert!(md.starts_with("### kvcc conform: `"), "{md}");
    assert!(md.contains("— conforms"), "{md}");
    let (code, json, _) = run(&["conform", &dir.arg(), "--format", "json"]);
    assert_eq!(code, 0);
    let line: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(line["verdict"], "conforms");
    assert_eq!(line["steps"], 3);
    assert_eq!(line["events"], 2);
    assert_eq!(line["findings"], serde_json::json!([]));
}

#[test]
fn a_leak_names_the_request_and_the_ranks_that_never_reported() {
    let dir = build(
        &header(4, "countdown"),
        &[
            vec![step(0, &["req-a"]), step(1, &[])],
            vec![step(0, &[]), step(1, &[])],
            vec![step(0, &[]), step(1, &["req-a"])],
            vec![step(0, &[]), step(1, &[])],
        ],
        &[event(0, "delay-freed", "req-a")],
    );
    let (code, json, _) = run(&["conform", &dir.arg(), "--format", "json"]);
    assert_eq!(code, 1, "{json}");
    let line: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(
        line["properties"],
        serde_json::json!(["eventually-freed", "aggregator-drains"])
    );
    let leak = &line["findings"][0];
    assert_eq!(leak["clause"], "delay-freed-request-never-freed");
    assert_eq!(leak["request"], "req-a");
    assert_eq!(leak["ranks"], serde_json::json!([1, 3]));
    assert_eq!(leak["step"], serde_json::Value::Null);
    assert_eq!(leak["at"][0], format!("{}:1", dir.file("scheduler.jsonl")));
    let message = leak["message"].as_str().unwrap();
    assert!(
        message.contains("ranks that never reported it in finished_sending: 1 and 3"),
        "{message}"
    );
}

/// A resend after emission, a send nobody delayed, and an emission before the transfer
/// rank reported, under vLLM's counting with E = 1 (#59325's alternative fix on a
/// replicated layout, where replica rank 1 reports first).
#[test]
fn countdown_resend_unprovenanced_send_and_early_emission() {
    let header = r#"{"format_version": 1, "engine": "prefill", "kv_connector": "NixlConnector", "world_size": 2, "finished_count": 1, "transfer_ranks": [0]}"#;
    let dir = build(
        header,
        &[
            vec![step(0, &[]), step(1, &["req-a"]), step(2, &[])],
            vec![step(0, &["req-a"]), step(1, &[]), step(2, &["req-b"])],
        ],
        &[event(0, "delay-freed", "req-a")],
    );
    let (code, json, _) = run(&["conform", &dir.arg(), "--format", "json"]);
    assert_eq!(code, 1, "{json}");
    let line: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    let clauses: Vec<(String, String, serde_json::Value)> = line["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["property"].as_str().unwrap().to_string(),
                f["clause"].as_str().unwrap().to_string(),
                f["at"][0].clone(),
            )
        })
        .collect();
    let rank0 = |l: usize| serde_json::json!(format!("{}:{l}", dir.file("rank-0.jsonl")));
    let rank1 = |l: usize| serde_json::json!(format!("{}:{l}", dir.file("rank-1.jsonl")));
    let want = [
        (
            "quorum-sound",
            "send-emitted-before-transfer-ranks-done",
            rank1(1),
        ),
        ("count-conserved", "countdown-reopened", rank0(2)),
        ("exactly-once", "emitted-twice", rank0(2)),
        ("report-provenance", "send-without-delayed-free", rank1(3)),
        ("exactly-once", "emitted-for-unknown-request", rank1(3)),
    ];
    for (property, clause, at) in want {
        assert!(
            clauses
                .iter()
                .any(|(p, c, a)| p == property && c == clause && *a == at),
            "{property}: {clause} at {at}: {clauses:#?}"
        );
    }
}

#[test]
fn a_decode_loader_never_woken_names_the_silent_rank() {
    let header = r#"{"format_version": 1, "engine": "decode", "kv_connector": "NixlConnector", "world_size": 2}"#;
    let recv = |k: u64, ids: &[&str]| {
        let ids: Vec<String> = ids.iter().map(|s| format!("\"{s}\"")).collect();
        format!(
            r#"{{"step": {k}, "finished_recving": [{}]}}"#,
            ids.join(", ")
        )
    };
    let dir = build(
        header,
        &[
            vec![recv(0, &["req-a"]), recv(1, &[])],
            vec![recv(0, &[]), recv(1, &[])],
        ],
        &[
            event(0, "waiting-for-remote-kvs", "req-a"),
            event(0, "waiting-for-remote-kvs", "req-b"),
            event(1, "aborted", "req-b"),
        ],
    );
    let (code, stdout, _) = run(&["conform", &dir.arg()]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("eventually-woken: loader-never-woken — request req-a"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ranks that never reported it in finished_recving: 1; reported by rank 0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("eventually-woken: aborted-loader-never-freed — request req-b"),
        "{stdout}"
    );
}

#[test]
fn a_missing_output_rank_drops_the_step_and_says_so_at_the_end() {
    let dir = build(
        &header(2, "countdown"),
        &[
            vec![
                step(0, &[]),
                r#"{"step": 1, "missing": true}"#.into(),
                step(2, &[]),
            ],
            vec![step(0, &["req-a"]), step(1, &["req-b"]), step(2, &[])],
        ],
        &[
            event(0, "delay-freed", "req-a"),
            event(0, "delay-freed", "req-b"),
        ],
    );
    let (code, stdout, _) = run(&["conform", &dir.arg()]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("dropped with their step (output rank's output missing): rank 1 at step 1"),
        "{stdout}"
    );
}

/// Ids are numbered in whatever order the reader threads meet them; the findings must not
/// depend on it.
#[test]
fn findings_come_out_in_the_same_order_every_time() {
    let ids: Vec<String> = (0..40).map(|i| format!("cmpl-{:x}", i * 7919)).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let (a, b) = ids.split_at(20);
    let ranks: Vec<Vec<String>> = (0..4)
        .map(|r| vec![step(0, if r % 2 == 0 { a } else { b }), step(1, &ids)])
        .collect();
    let dir = build(&header(4, "countdown"), &ranks, &[]);
    let (code, first, _) = run(&["conform", &dir.arg()]);
    assert_eq!(code, 1);
    assert!(
        first.contains("report-provenance: send-without-delayed-free"),
        "{first}"
    );
    for _ in 0..4 {
        assert_eq!(run(&["conform", &dir.arg()]).1, first);
    }
}

#[test]
fn a_directory_of_engine_runs_stands_for_them() {
    let (code, stdout, _) = run(&["conform", "tests/fixtures/runs"]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("run tests/fixtures/runs/strict-duplicate:"),
        "{stdout}"
    );
}

#[test]
fn several_runs_end_with_a_summary() {
    let (h, ranks, sched) = good_run();
    let good = build(&h, &ranks, &sched);
    let (code, stdout, _) = run(&["conform", &good.arg(), &fixture("runs/strict-duplicate")]);
    assert_eq!(code, 1);
    assert!(
        stdout.ends_with("2 runs: 1 conform, 1 with findings\n"),
        "{stdout}"
    );
}

#[test]
fn bad_input_truncated_line() {
    let (h, mut ranks, sched) = good_run();
    ranks[1][1] = r#"{"step": 1, "finished_sending": ["req"#.into();
    let dir = build(&h, &ranks, &sched);
    let stderr = bad_input(&dir);
    let file = dir.file("rank-1.jsonl");
    assert!(stderr.starts_with(&format!("error: {file}:2:")), "{stderr}");
    assert!(stderr.contains("truncated JSON"), "{stderr}");
}

#[test]
fn bad_input_invalid_json_and_unknown_fields() {
    let (h, mut ranks, sched) = good_run();
    ranks[0][2] = "{step: 2}".into();
    let dir = build(&h, &ranks, &sched);
    let stderr = bad_input(&dir);
    assert!(
        stderr.starts_with(&format!("error: {}:3:", dir.file("rank-0.jsonl"))),
        "{stderr}"
    );
    assert!(stderr.contains("invalid JSON"), "{stderr}");

    let (h, mut ranks, sched) = good_run();
    ranks[0][0] = r#"{"step": 0, "finished_sendng": ["req-a"]}"#.into();
    let dir = build(&h, &ranks, &sched);
    let stderr = bad_input(&dir);
    assert!(
        stderr.contains("unknown field `finished_sendng`"),
        "{stderr}"
    );
}

#[test]
fn bad_input_unknown_rank_file() {
    let (h, mut ranks, sched) = good_run();
    ranks.push(vec![step(0, &[]), step(1, &[]), step(2, &[])]);
    let dir = build(&h, &ranks, &sched);
    let stderr = bad_input(&dir);
    assert_eq!(
        stderr.trim_end(),
        format!(
            "error: {}: unknown rank file: rank 2 is outside world_size 2 ({})",
            dir.file("rank-2.jsonl"),
            dir.file("header.json")
        )
    );
}

#[test]
fn bad_input_missing_rank_file() {
    let (h, ranks, sched) = good_run();
    let dir = build(&h, &ranks[..1], &sched);
    let stderr = bad_input(&dir);
    assert!(
        stderr.starts_with(&format!("error: {}: missing", dir.file("rank-1.jsonl"))),
        "{stderr}"
    );
}

#[test]
fn bad_input_steps_out_of_order_skipped_or_repeated() {
    for (bad, says) in [
        (step(3, &[]), "step 3 skips step 2"),
        (step(0, &[]), "step 0 out of order"),
        (step(1, &[]), "step 1 out of order"),
    ] {
        let (h, mut ranks, sched) = good_run();
        ranks[1][2] = bad;
        let dir = build(&h, &ranks, &sched);
        let stderr = bad_input(&dir);
        assert!(
            stderr.starts_with(&format!("error: {}:3:", dir.file("rank-1.jsonl"))),
            "{stderr}"
        );
        assert!(stderr.contains(says), "{says}: {stderr}");
    }
    let (h, mut ranks, sched) = good_run();
    ranks[0][0] = step(1, &[]);
    let stderr = bad_input(&build(&h, &ranks, &sched));
    assert!(stderr.contains("step 1 skips step 0"), "{stderr}");
}

#[test]
fn bad_input_rank_files_of_different_lengths() {
    let (h, mut ranks, sched) = good_run();
    ranks[1].pop();
    let dir = build(&h, &ranks, &sched);
    let stderr = bad_input(&dir);
    assert_eq!(
        stderr.trim_end(),
        format!(
            "error: {}: ends after 2 lines, but {}:3 has step 2: every rank file records every engine step",
            dir.file("rank-1.jsonl"),
            dir.file("rank-0.jsonl")
        )
    );
}

#[test]
fn bad_input_missing_or_unsupported_header() {
    let (h, ranks, sched) = good_run();
    let dir = build(&h, &ranks, &sched);
    std::fs::remove_file(dir.path.join("header.json")).unwrap();
    let stderr = bad_input(&dir);
    assert!(
        stderr.starts_with(&format!("error: {}: missing", dir.file("header.json"))),
        "{stderr}"
    );

    let dir = build(
        &h.replace("\"format_version\": 1", "\"format_version\": 2"),
        &ranks,
        &sched,
    );
    let stderr = bad_input(&dir);
    assert!(
        stderr.contains("format_version 2 is not supported"),
        "{stderr}"
    );

    let dir = build(
        &h.replace("\"world_size\": 2", "\"world_size\": \"2\""),
        &ranks,
        &sched,
    );
    let stderr = bad_input(&dir);
    assert!(
        stderr.starts_with(&format!("error: {}:1:", dir.file("header.json"))),
        "{stderr}"
    );
}

#[test]
fn bad_input_scheduler_log() {
    let (h, ranks, mut sched) = good_run();
    sched.swap(0, 1);
    let dir = build(&h, &ranks, &sched);
    let stderr = bad_input(&dir);
    assert!(
        stderr.starts_with(&format!("error: {}:2:", dir.file("scheduler.jsonl"))),
        "{stderr}"
    );
    assert!(stderr.contains("events are in step order"), "{stderr}");

    let (h, ranks, mut sched) = good_run();
    sched.push(event(4, "freed", "req-a"));
    let stderr = bad_input(&build(&h, &ranks, &sched));
    assert!(
        stderr.contains(":3:1: event at step 4, but the run ends after step 2"),
        "{stderr}"
    );

    let (h, ranks, mut sched) = good_run();
    sched[0] = event(0, "finished", "req-a");
    let stderr = bad_input(&build(&h, &ranks, &sched));
    assert!(stderr.contains("unknown variant `finished`"), "{stderr}");

    let (h, ranks, sched) = good_run();
    let dir = build(&h, &ranks, &sched);
    std::fs::remove_file(dir.path.join("scheduler.jsonl")).unwrap();
    let stderr = bad_input(&dir);
    assert!(
        stderr.starts_with(&format!("error: {}: missing", dir.file("scheduler.jsonl"))),
        "{stderr}"
    );
}

#[test]
fn bad_input_unreadable_file_and_blank_line() {
    let (h, ranks, sched) = good_run();
    let dir = build(&h, &ranks, &sched);
    // A directory where a rank file should be: unreadable whoever runs the test.
    std::fs::remove_file(dir.path.join("rank-1.jsonl")).unwrap();
    std::fs::create_dir(dir.path.join("rank-1.jsonl")).unwrap();
    let stderr = bad_input(&dir);
    assert!(
        stderr.starts_with(&format!("error: {}: cannot read", dir.file("rank-1.jsonl"))),
        "{stderr}"
    );

    let (h, mut ranks, sched) = good_run();
    ranks[0].insert(1, String::new());
    let stderr = bad_input(&build(&h, &ranks, &sched));
    assert!(stderr.contains(":2:1: blank line"), "{stderr}");
}

#[test]
fn bad_input_not_a_run() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().display().to_string();
    let (code, _, stderr) = output(kvcc().args(["conform", &path]));
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with(&format!("error: {path}/header.json: missing")),
        "{stderr}"
    );
    let (code, _, stderr) = run(&["conform", "tests/fixtures/no-such-run"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no such directory"), "{stderr}");
}

#[test]
fn stats_report_throughput_and_peak_memory() {
    let (h, ranks, sched) = good_run();
    let dir = build(&h, &ranks, &sched);
    let (code, _, stderr) = run(&["conform", &dir.arg(), "--stats"]);
    assert_eq!(code, 0);
    assert!(stderr.starts_with("stats: "), "{stderr}");
    assert!(stderr.contains("MiB/s"), "{stderr}");
    assert!(stderr.contains("peak RSS"), "{stderr}");
}

/// Issue 12: only the output rank's output may be missing from a step; vLLM's aggregator
/// raises on a None from any other worker, so conform flags it at its line.
#[test]
fn issue12_a_none_output_at_a_non_output_rank_is_flagged() {
    let dir = fixture("runs/none-at-non-output-rank");
    let (code, stdout, stderr) = run(&["conform", &dir]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains("engine-survives: none-output-at-non-output-rank — step 1"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("at {dir}/rank-2.jsonl:2\n")),
        "{stdout}"
    );
    assert!(stdout.contains("1 finding (engine-survives)"), "{stdout}");
    // The twin: the same line missing at the output rank drops the step, as vLLM does.
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(crate::common::root().join(&dir)).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, copy.path().join(path.file_name().unwrap())).unwrap();
    }
    let good = std::fs::read_to_string(copy.path().join("rank-1.jsonl")).unwrap();
    std::fs::write(copy.path().join("rank-2.jsonl"), &good).unwrap();
    let missing_at_output = good.replacen(
        &good.lines().nth(1).unwrap().to_string(),
        "{\"step\": 1, \"missing\": true}",
        1,
    );
    std::fs::write(copy.path().join("rank-0.jsonl"), missing_at_output).unwrap();
    let (code, stdout, stderr) = run(&["conform", copy.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
}

/// Issue 23: a record line is capped at 4 MiB. A 31 MB line of request ids used to be
/// read whole and took 3.5 GB; now reading stops at the cap, and the error names the file,
/// the line and the field it was in, with exit 2.
#[test]
fn issue23_a_line_past_the_cap_is_refused_with_its_file_line_and_field() {
    let ids: Vec<String> = (0..2_600_000).map(|i| format!("\"r{i:08}\"")).collect();
    let long = format!(r#"{{"step": 1, "finished_sending": [{}]}}"#, ids.join(", "));
    assert!(long.len() > 30_000_000);
    let (h, mut ranks, sched) = good_run();
    ranks[1][1] = long;
    let dir = build(&h, &ranks, &sched);
    let started = std::time::Instant::now();
    let stderr = bad_input(&dir);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        stderr.trim_end(),
        format!(
            "error: {}:2:13: finished_sending: line longer than 4 MiB, the most one line may hold (a rank's output for one step, or one scheduler event); reading stopped there",
            dir.file("rank-1.jsonl")
        )
    );

    // The twin: a line just under the cap is read as any other.
    let (h, mut ranks, sched) = good_run();
    let mut blocks = String::new();
    let mut block = 0u64;
    while blocks.len() < (4 << 20) - 100 {
        blocks += &format!("{block}, ");
        block += 1;
    }
    ranks[1][2] = format!(r#"{{"step": 2, "invalid_block_ids": [{blocks}{block}]}}"#);
    assert!(ranks[1][2].len() < 4 << 20);
    let dir = build(&h, &ranks, &sched);
    let (code, stdout, stderr) = run(&["conform", &dir.arg()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
}

/// Issue 23: a request the scheduler log frees twice is a finding, `exactly-once:
/// freed-twice` at the second free, then the first; it used to conform.
#[test]
fn issue23_a_request_freed_twice_is_a_finding() {
    let (h, ranks, mut sched) = good_run();
    sched.push(event(3, "freed", "req-a"));
    let dir = build(&h, &ranks, &sched);
    let (code, stdout, stderr) = run(&["conform", &dir.arg()]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let log = dir.file("scheduler.jsonl");
    assert!(
        stdout.contains("exactly-once: freed-twice — request req-a, step 3"),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("    at {log}:3\n")), "{stdout}");
    assert!(stdout.contains("1 finding (exactly-once)"), "{stdout}");

    let (code, json, _) = run(&["conform", &dir.arg(), "--format", "json"]);
    assert_eq!(code, 1);
    let line: serde_json::Value = serde_json::from_str(json.trim()).expect("one JSON line");
    let findings = line["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{json}");
    assert_eq!(findings[0]["clause"], "freed-twice");
    assert_eq!(
        findings[0]["at"],
        serde_json::json!([format!("{log}:3"), format!("{log}:2")])
    );
    assert_eq!(findings[0]["step"], 3);
}
