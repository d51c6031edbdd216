//! `kvcc explore` end to end: the explorer serves on loopback, its page and its states
//! answer over plain HTTP, and states read in trace vocabulary. Bounded: every wait has
//! a deadline and the child is killed on every path.

use crate::common::{fixture, kvcc, run};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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
    raw(
        addr,
        &format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
}

/// Sends `request` as it is; returns (status line, body).
fn raw(addr: &str, request: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).expect("explorer accepts connections");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    // The gate may answer before reading all of an oversized request.
    let _ = stream.write_all(request.as_bytes());
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

/// Starts `kvcc explore SPEC` on a free loopback port; returns the explorer, its address
/// once it answers, and the line it printed.
fn start(spec: &str) -> (Explorer, String, String) {
    start_with(spec, &[])
}

/// [`start`] with more arguments.
fn start_with(spec: &str, args: &[&str]) -> (Explorer, String, String) {
    let child = kvcc()
        .args(["explore", spec, "--addr", "127.0.0.1:0"])
        .args(args)
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
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    (explorer, addr, line)
}

#[test]
fn explorer_serves_the_page_and_states_over_loopback_http() {
    // A matrix spec without --point: the first point is explored, and named.
    let (mut explorer, addr, line) = start(&fixture("seed-59325-matrix.toml"));
    assert!(line.contains("seed-59325-pcp [prefill.pcp=1]"), "{line}");
    // The address answers as soon as it is printed: kvcc listens before printing it.
    let (status, body) = get(&addr, "/");
    assert!(status.contains("200"), "{status}");
    assert!(
        body.contains("<html") || body.contains("<!DOCTYPE"),
        "{body}"
    );

    let (status, body) = get(&addr, "/.states");
    assert!(status.contains("200"), "{status}");
    let states: serde_json::Value = serde_json::from_str(&body).expect("states are JSON");
    let initial = states[0]["state"].as_str().expect("a state");
    // Issue 11: states read as the text trace's lines, not a debug dump.
    assert!(initial.contains("\nP req0: prefilling\n"), "{initial}");

    // One step further: actions read in vLLM's vocabulary, and each step shows what it
    // did with the facts it changed marked.
    let (status, body) = get(&addr, "/.states/0");
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

/// Issue 16: clients that connect and never send, or never read, cannot hold the explorer;
/// one client's connections are bounded and the excess is turned away at once.
#[test]
fn explorer_outlasts_silent_and_greedy_clients() {
    let (_explorer, addr, _) = start(&fixture("seed-59325.toml"));
    // Sixteen connections that never send, and one that asks and never reads.
    let silent: Vec<TcpStream> = (0..16)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    let mut greedy = TcpStream::connect(&addr).unwrap();
    write!(greedy, "GET /.states/0 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let started = Instant::now();
    let (status, _) = get(&addr, "/.states");
    assert!(status.contains("200"), "{status}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // A silent connection is answered 408 and closed once its deadline passes.
    let mut first = silent.into_iter().next().unwrap();
    first
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut answer = String::new();
    first.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    drop(greedy);

    // Over the per-client bound (32), the next connection is refused without waiting.
    let held: Vec<TcpStream> = (0..32)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let (status, _) = get(&addr, "/.states");
    assert!(status.contains("503"), "{status}");
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(held);
    // Closed connections free their places.
    let mut answered = false;
    for _ in 0..50 {
        if get(&addr, "/.states").0.contains("200") {
            answered = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        answered,
        "the explorer answers again once the clients leave"
    );
}

/// What the gate refuses never reaches stateright: a bad method, an oversized head.
#[test]
fn explorer_refuses_requests_it_does_not_serve() {
    let (_explorer, addr, _) = start(&fixture("seed-59325.toml"));
    let (status, _) = raw(&addr, "DELETE / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(status.contains("400"), "{status}");
    let long = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(20_000));
    let (status, _) = raw(&addr, &long);
    assert!(status.contains("431"), "{status}");
    let (status, _) = get(&addr, "/");
    assert!(status.contains("200"), "{status}");
}

/// The click on `explore-wide.toml` whose state has 843 successors.
const WIDE_STATE: &str = "/.states/0/0/1/0/0";

/// Issue 23: one click lists at most `--successors-max` successors (200 by default) and
/// says how many it left out; it used to list all 843 of this state's, with a 17 MB
/// answer after 10 s (3,724 successors took 75 s and 130 MB).
#[test]
fn issue23_a_click_lists_a_bounded_number_of_successors() {
    let (_explorer, addr, _) = start(&fixture("explore-wide.toml"));
    let started = Instant::now();
    let (status, body) = get(&addr, WIDE_STATE);
    let elapsed = started.elapsed();
    assert!(status.contains("200"), "{status}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert!(body.len() < 8 << 20, "{} bytes", body.len());
    let steps: serde_json::Value = serde_json::from_str(&body).expect("steps are JSON");
    let steps = steps.as_array().unwrap();
    assert_eq!(steps.len(), 201);
    assert_eq!(steps[199]["actionIndex"], 199);
    let last = &steps[200];
    assert!(last.get("state").is_none(), "{last}");
    assert!(last.get("actionIndex").is_none(), "{last}");
    let text = last["action"].as_str().unwrap();
    assert!(
        text.starts_with("… 643 more of 843 successors not listed"),
        "{text}"
    );
    // Every entry carries stateright's properties, as its own answer did.
    assert!(last["properties"].as_array().unwrap().len() > 20, "{last}");
    // A successor past the listed ones is still a state one can click on.
    let (status, _) = get(&addr, &format!("{WIDE_STATE}/842"));
    assert!(status.contains("200"), "{status}");
    let (status, _) = get(&addr, &format!("{WIDE_STATE}/843"));
    assert!(status.contains("404"), "{status}");
}

#[test]
fn issue23_successors_max_sets_how_many_a_click_lists() {
    let (_explorer, addr, _) = start_with(&fixture("seed-59325.toml"), &["--successors-max", "1"]);
    let (status, body) = get(&addr, "/.states/0/0");
    assert!(status.contains("200"), "{status}");
    let steps: serde_json::Value = serde_json::from_str(&body).expect("steps are JSON");
    let steps = steps.as_array().unwrap();
    assert_eq!(steps.len(), 2, "{body}");
    assert!(
        steps[1]["action"].as_str().unwrap().contains(
            "the explorer lists a state's first 1 (kvcc explore --successors-max N lists more)"
        ),
        "{body}"
    );
    let (code, _, stderr) = run(&[
        "explore",
        &fixture("seed-59325.toml"),
        "--successors-max",
        "0",
    ]);
    assert_eq!(code, 2, "{stderr}");
}

/// The CPU time `pid` has used so far, from /proc/PID/stat (utime + stime).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("a running process");
    // Fields after the command's closing parenthesis: state is the 3rd field, utime the
    // 14th and stime the 15th.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// Issue 23: a click's work stops when its client leaves, and a click never holds up the
/// next one. stateright used to go on expanding the state after the client gave up, on
/// its one server thread, so the next click waited for it.
#[test]
fn issue23_a_click_whose_client_left_stops_and_holds_nothing_up() {
    let (explorer, addr, _) = start(&fixture("explore-wide.toml"));
    let pid = explorer.0.id();
    for _ in 0..3 {
        let mut stream = TcpStream::connect(&addr).unwrap();
        write!(stream, "GET {WIDE_STATE} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        drop(stream);
    }
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_seconds(pid);
    let started = Instant::now();
    let (status, _) = get(&addr, "/.states/0");
    assert!(status.contains("200"), "{status}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the next click waited {:?}",
        started.elapsed()
    );
    std::thread::sleep(Duration::from_secs(2));
    let spent = cpu_seconds(pid) - before;
    assert!(spent < 0.5, "{spent} s of CPU after the clients left");
}

/// Chromium for the browser tests: `/usr/bin/chromium` (Debian's package, which `.ci/run`
/// installs) or `chromium` on PATH. Without it the tests skip, saying so, unless
/// `KVCC_REQUIRE_CHROMIUM=1` (CI), where they fail.
fn chromium() -> Option<String> {
    let found = ["/usr/bin/chromium", "chromium", "chromium-browser"]
        .into_iter()
        .find(|c| {
            std::process::Command::new(c)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(str::to_string);
    if found.is_none() {
        assert!(
            std::env::var("KVCC_REQUIRE_CHROMIUM").as_deref() != Ok("1"),
            "KVCC_REQUIRE_CHROMIUM=1 but no chromium: run scripts/install-chromium.sh"
        );
        eprintln!("SKIPPED: no chromium on this machine (scripts/install-chromium.sh installs it)");
    }
    found
}

/// The DOM of `url` after its scripts ran, as headless Chromium renders it.
fn dom(chromium: &str, url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let child = std::process::Command::new(chromium)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--virtual-time-budget=3000", "--dump-dom", url])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut browser = Explorer(child);
    let mut stdout = browser.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        let _ = tx.send(text);
    });
    let text = rx
        .recv_timeout(Duration::from_secs(90))
        .expect("chromium dumps the DOM within 90 s");
    assert!(text.contains("</html>"), "not a page: {text}");
    text
}

/// Waits until the explorer's search (kvcc check's) has concluded.
fn concluded(addr: &str) {
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        let (_, body) = get(addr, "/.kvcc/verdict");
        if !body.contains("\"checking\"") {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the explorer's search did not conclude within 60 s");
}

/// The text between `start` and the next `end` after it, from `at`.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let len = text[from..].find(end)?;
    Some(&text[from..from + len])
}

/// A page's path: each step's action name and description, as its list shows them.
fn page_steps(dom: &str) -> Vec<(String, String)> {
    let list = between(dom, "<ol id=\"steps\">", "</ol>").expect("a path on the page");
    list.split("<li ")
        .skip(1)
        .filter_map(|li| {
            let name = between(li, "data-action=\"", "\"")?;
            let description = between(li, "<span class=\"description\">", "</span>")?;
            Some((name.to_string(), unescape(description)))
        })
        .collect()
}

fn unescape(html: &str) -> String {
    html.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// A trace file's steps: each state's action name and description.
fn trace_steps(itf: &std::path::Path) -> Vec<(String, String)> {
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(itf).unwrap()).unwrap();
    trace["states"].as_array().unwrap()[1..]
        .iter()
        .map(|s| {
            (
                s["mbt::actionTaken"].as_str().unwrap().to_string(),
                s["#meta"]["description"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

const SEED_CLAUSE: &str = "eventually-freed: delay-freed-request-never-freed";

/// `kvcc check --trace-dir` on the seed: the directory and the eventually-freed trace.
fn seed_trace() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().display().to_string();
    let (code, stdout, stderr) = run(&[
        "check",
        &fixture("seed-59325.toml"),
        "--trace-dir",
        &traces,
        "--all-traces",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let itf = dir
        .path()
        .join("seed-59325__eventually-freed__delay-freed-request-never-freed.itf.json");
    assert!(itf.exists(), "{stdout}");
    (dir, itf)
}

/// Issue 26: kvcc's own page, as a browser renders it: the spec and point named, the
/// clauses by kind with liveness as liveness, and the violated clause's link leading to
/// exactly the steps `kvcc check --trace-dir` writes for it.
#[test]
fn issue26_the_page_links_a_violated_clause_to_checks_counterexample() {
    let Some(chromium) = chromium() else { return };
    let (_explorer, addr, _) = start(&fixture("seed-59325.toml"));
    concluded(&addr);
    let home = dom(&chromium, &format!("http://{addr}/"));
    assert!(
        home.contains("<span id=\"spec\">seed-59325</span>"),
        "{home}"
    );
    assert!(
        home.contains("<span id=\"point\">none (the spec has no matrix)</span>"),
        "{home}"
    );
    // Liveness clauses sit under a liveness heading, not stateright's "Safety holds".
    let liveness = between(&home, "<section id=\"liveness\">", "</section>").expect("liveness");
    let safety = between(&home, "<section id=\"safety\">", "</section>").expect("safety");
    assert!(liveness.starts_with("<h3>Liveness"), "{liveness}");
    assert!(liveness.contains(&format!("data-clause=\"{SEED_CLAUSE}\"")));
    assert!(!safety.contains(&format!("data-clause=\"{SEED_CLAUSE}\"")));
    assert!(
        !home.contains("Init 0") && !home.contains("Safety holds"),
        "{home}"
    );
    // The page opens at the initial state, named as a trace names it.
    assert!(
        home.contains(
            "<span class=\"n\">0.</span> <span class=\"description\">initial state</span>"
        ),
        "{home}"
    );
    assert!(page_steps(&home).is_empty());

    let clause = between(&home, &format!("data-clause=\"{SEED_CLAUSE}\""), "</li>").unwrap();
    assert!(clause.contains("data-status=\"violated\""), "{clause}");
    let link = between(clause, "<a class=\"counterexample\" href=\"", "\"").expect("a link");
    let counterexample = dom(&chromium, &format!("http://{addr}{link}"));
    let (_dir, itf) = seed_trace();
    let written = trace_steps(&itf);
    assert_eq!(written.len(), 8);
    assert_eq!(page_steps(&counterexample), written);
    assert!(
        counterexample.contains(&format!("kvcc's counterexample to <b>{SEED_CLAUSE}</b>")),
        "{counterexample}"
    );
    // The diagram is drawn, the last step's rows marked, and the changed facts marked.
    assert!(
        counterexample.contains("<svg class=\"sequence\""),
        "{counterexample}"
    );
    assert!(counterexample.contains("<g class=\"row current\" data-step=\"8\">"));
    assert!(counterexample.contains("<tr class=\"changed\" data-fact=\"D req0\">"));

    // The twin: one step short of it is another path, and the comparison says so.
    let shorter = &link[..link.rfind('/').unwrap()];
    let prefix = dom(&chromium, &format!("http://{addr}{shorter}"));
    assert_ne!(page_steps(&prefix), written);
    assert_eq!(page_steps(&prefix)[..], written[..7]);
    assert!(!prefix.contains("kvcc's counterexample to"), "{prefix}");
}

/// Issue 26: `kvcc explore --trace FILE` opens the page at the trace's path, at the spec
/// and point it records; a trace whose path the model cannot take is refused.
#[test]
fn issue26_explore_trace_opens_at_the_traces_path() {
    let Some(chromium) = chromium() else { return };
    let (dir, itf) = seed_trace();
    let itf_arg = itf.display().to_string();
    let child = kvcc()
        .args(["explore", "--trace", &itf_arg, "--addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kvcc explore starts");
    let mut explorer = Explorer(child);
    let stdout = explorer.0.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let addr = between(&line, "http://", "/").expect("a URL").to_string();
    concluded(&addr);
    let page = dom(&chromium, &format!("http://{addr}/"));
    assert!(page.contains("<p id=\"opened-from\">"), "{page}");
    assert_eq!(page_steps(&page), trace_steps(&itf));
    drop(explorer);

    // The twin: the same trace with its first step cut out cannot be walked.
    let mut trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&itf).unwrap()).unwrap();
    let states = trace["states"].as_array_mut().unwrap();
    states.remove(1);
    let broken = dir.path().join("broken.itf.json");
    std::fs::write(&broken, serde_json::to_string(&trace).unwrap()).unwrap();
    let (code, _, stderr) = run(&[
        "explore",
        "--trace",
        &broken.display().to_string(),
        "--addr",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("the trace's path cannot be opened: step 1"),
        "{stderr}"
    );
}
