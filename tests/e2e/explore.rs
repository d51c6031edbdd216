//! `kvcc explore` end to end: the explorer serves on loopback, its page and its states
//! answer over plain HTTP, and states read in trace vocabulary. Bounded: every wait has
//! a deadline and the child is killed on every path.

use crate::common::{fixture, kvcc, run};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Kills the explorer however the test ends.
struct Explorer(Child);

impl Drop for Explorer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET `path` from a loopback `addr`; returns (status line, body).
fn get(addr: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).expect("explorer accepts connections");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .expect("a response before the deadline");
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

#[test]
fn explorer_serves_the_page_and_states_over_loopback_http() {
    // A matrix spec without --point: the first point is explored, and named.
    let child = kvcc()
        .args([
            "explore",
            &fixture("seed-59325-matrix.toml"),
            "--addr",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kvcc explore starts");
    let mut explorer = Explorer(child);
    let stdout = explorer.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the explorer prints its URL");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("no loopback URL in {line:?}"));
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    assert!(line.contains("seed-59325-pcp [prefill.pcp=1]"), "{line}");

    // The server thread starts right after the URL is printed; retry connecting briefly.
    let mut page = None;
    for _ in 0..100 {
        if TcpStream::connect(addr).is_ok() {
            page = Some(get(addr, "/"));
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, body) = page.expect("the explorer listens within 5 s");
    assert!(status.contains("200"), "{status}");
    assert!(
        body.contains("<html") || body.contains("<!DOCTYPE"),
        "{body}"
    );

    let (status, body) = get(addr, "/.states");
    assert!(status.contains("200"), "{status}");
    let states: serde_json::Value = serde_json::from_str(&body).expect("states are JSON");
    let initial = states[0]["state"].as_str().expect("a state");
    // Issue 11: states read as the text trace's lines, not a debug dump.
    assert!(initial.contains("\nP req0: prefilling\n"), "{initial}");

    // One step further: actions read in vLLM's vocabulary, and each step shows what it
    // did with the facts it changed marked.
    let (status, body) = get(addr, "/.states/0");
    assert!(status.contains("200"), "{status}");
    let steps: serde_json::Value = serde_json::from_str(&body).expect("steps are JSON");
    let finish = steps
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            s["action"]
                .as_str()
                .unwrap()
                .starts_with("P scheduler: req0 finishes prefill")
        })
        .unwrap_or_else(|| panic!("{body}"));
    let outcome = finish["outcome"].as_str().expect("an outcome");
    assert!(
        outcome.contains("\n* P req0: finished, free delayed (blocks held)   (was: prefilling)\n"),
        "{outcome}"
    );
    assert!(
        outcome.contains("\n  D req0: not admitted yet\n"),
        "{outcome}"
    );

    explorer.0.kill().unwrap();
    let mut stderr = String::new();
    explorer
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        stderr.contains("note: 3 matrix points match; exploring the first, prefill.pcp=1"),
        "{stderr}"
    );
}

#[test]
fn explorer_refuses_a_non_loopback_address_exit_2() {
    let (code, _, stderr) = run(&[
        "explore",
        &fixture("seed-59325.toml"),
        "--addr",
        "0.0.0.0:0",
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains("not a loopback address"), "{stderr}");
}

#[test]
fn explorer_rejects_a_point_outside_the_matrix_exit_2() {
    let (code, _, stderr) = run(&[
        "explore",
        &fixture("seed-59325-matrix.toml"),
        "--point",
        "prefill.pcp=3",
        "--addr",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains("not a value of the matrix"), "{stderr}");
}
