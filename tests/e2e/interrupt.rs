//! Issue 23: SIGINT or SIGTERM ends a run with one line saying what was cut, and the JSON
//! lines and JUnit still report every check that finished, the cut one inconclusive;
//! exit 130 or 143. Without the handler the process died by the signal and wrote no JUnit.

use crate::common::{fixture, kvcc, root};
use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A spec whose single check runs for minutes: four replicated P groups of 16 ranks and
/// two requests with client aborts.
const SLOW: &str = r#"version = 1
requests = 2
expected-count = "world-size"
[prefill]
tp = 8
pp = 2
pcp = 4
[decode]
tp = 8
[faults]
client-abort = true
[expect]
verdict = "holds"
"#;

/// Runs `kvcc check` over a directory whose first spec finishes at once and whose second
/// runs for minutes, sends `signal` once the first check's JSON line is out, and returns
/// (exit code, stdout, stderr, JUnit XML, how long the run took after the signal).
fn interrupted(signal: &str) -> (Option<i32>, String, String, String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let specs = dir.path().join("specs");
    std::fs::create_dir(&specs).unwrap();
    std::fs::copy(
        root().join(fixture("seed-59325.toml")),
        specs.join("a-seed.toml"),
    )
    .unwrap();
    std::fs::write(specs.join("b-slow.toml"), SLOW).unwrap();
    let junit = dir.path().join("kvcc.xml");
    let mut child = kvcc()
        .args(["check", specs.to_str().unwrap(), "--format", "json"])
        .args(["--threads", "1", "--max-memory", "2G", "--junit"])
        .arg(&junit)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, received) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let _ = lines.send(());
            all += &line;
            all.push('\n');
        }
        all
    });
    let mut stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).unwrap();
        text
    });
    received
        .recv_timeout(Duration::from_secs(30))
        .expect("the first check's line");
    // Into the slow check's search.
    std::thread::sleep(Duration::from_millis(500));
    let signalled = Instant::now();
    let status = std::process::Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if signalled.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("kvcc ran on for 30 s after {signal}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let after = signalled.elapsed();
    let junit = std::fs::read_to_string(&junit).unwrap_or_default();
    (
        code,
        reader.join().unwrap(),
        errors.join().unwrap(),
        junit,
        after,
    )
}

#[test]
fn issue23_a_signal_ends_the_run_with_what_finished_reported() {
    for (signal, exit, name) in [("-INT", 130, "SIGINT"), ("-TERM", 143, "SIGTERM")] {
        let (code, stdout, stderr, junit, after) = interrupted(signal);
        assert_eq!(code, Some(exit), "{name}: {stderr}");
        assert!(after < Duration::from_secs(5), "{name}: {after:?}");
        let said: Vec<&str> = stderr.lines().filter(|l| l.contains(name)).collect();
        assert_eq!(said.len(), 1, "one line names the signal: {stderr}");
        assert!(
            said[0].contains("b-slow"),
            "it names the cut check: {}",
            said[0]
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        // Both checks in the JSON lines: the finished one as it finished, the cut one
        // inconclusive.
        let lines: Vec<serde_json::Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{stdout}");
        assert_eq!(lines[0]["verdict"], "violated", "{stdout}");
        assert_eq!(lines[1]["verdict"], "inconclusive", "{stdout}");
        assert!(
            lines[1]["inconclusive_reason"]
                .as_str()
                .unwrap_or("")
                .contains("interrupted"),
            "{stdout}"
        );
        // And in JUnit.
        let doc = roxmltree::Document::parse(&junit).expect("JUnit written");
        let cases = doc
            .descendants()
            .filter(|n| n.has_tag_name("testcase"))
            .count();
        assert_eq!(cases, 2, "{junit}");
    }
}
