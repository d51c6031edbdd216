//! Shared helpers for kvcc's end-to-end tests: run the real binary from the workspace
//! root, so paths in messages read as a user would type them.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest any one kvcc run may take in these tests.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The longest a `kvcc confirm` may take: it starts Python and imports vLLM's scheduler,
/// about 15 s on an idle 2-core machine, and well over 60 s when the suite's other tests
/// (or other builds) hold both cores; nine confirm tests timed out at `DEADLINE` so.
const CONFIRM_DEADLINE: Duration = Duration::from_secs(300);

/// The `kvcc` binary under test: harness/src/main.rs, built again as this package's
/// `kvcc-dup` so that cargo hands its path to the tests (cargo-nextest's own end-to-end
/// tests build `cargo-nextest-dup` the same way).
pub const KVCC: &str = env!("CARGO_BIN_EXE_kvcc-dup");

/// The `kvcc-bench` binary under test (bench/src/main.rs, built again as `kvcc-bench-dup`).
pub const KVCC_BENCH: &str = env!("CARGO_BIN_EXE_kvcc-bench-dup");

/// The workspace root (the parent of `tests/`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// `kvcc` with the workspace root as working directory and no GitHub Actions variables,
/// terminal width or colour settings, whatever the environment the tests run in.
pub fn kvcc() -> Command {
    let mut command = Command::new(KVCC);
    command
        .current_dir(root())
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("COLUMNS")
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE");
    command
}

/// Whether `stderr` reports an input error at FILE:LINE:COLUMN, compiler-style: the
/// title line `error: FIELD: message...` and ` --> FILE:LINE:COLUMN` under it.
pub fn error_at(stderr: &str, title: &str, file: &str, line: usize, column: usize) -> bool {
    let mut lines = stderr.lines();
    while let Some(l) = lines.next() {
        if l.starts_with(&format!("error: {title}")) {
            let at = lines.next().map(str::trim_start);
            return at == Some(&format!("--> {file}:{line}:{column}"));
        }
    }
    false
}

/// Runs kvcc with `args`; returns (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    output(kvcc().args(args))
}

/// Runs kvcc-bench with `args` from the workspace root; returns (exit code, stdout, stderr).
pub fn run_bench(args: &[&str]) -> (i32, String, String) {
    output(Command::new(KVCC_BENCH).current_dir(root()).args(args))
}

/// Runs a command to completion, within `DEADLINE` (`CONFIRM_DEADLINE` for confirm): a kvcc that blocks fails the test
/// instead of hanging the suite. Every JSON line a `kvcc check` or `kvcc merge` writes
/// must validate against the published schema.
pub fn output(command: &mut Command) -> (i32, String, String) {
    let result = run_to_end(command);
    if writes_json_lines(command) {
        crate::schema::assert_json_lines(&result.1);
    }
    result
}

/// Is this `kvcc check` or `kvcc merge` with `--format json`?
fn writes_json_lines(command: &Command) -> bool {
    let args: Vec<&std::ffi::OsStr> = command.get_args().collect();
    command.get_program() == KVCC
        && args
            .first()
            .is_some_and(|first| *first == "check" || *first == "merge")
        && args
            .windows(2)
            .any(|w| w[0] == "--format" && w[1] == "json")
}

fn run_to_end(command: &mut Command) -> (i32, String, String) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kvcc starts");
    // Drain both pipes on threads so a chatty child never blocks on a full pipe.
    let stdout = drain(child.stdout.take().expect("stdout piped"));
    let stderr = drain(child.stderr.take().expect("stderr piped"));
    let deadline = if command
        .get_args()
        .next()
        .is_some_and(|first| first == "confirm")
    {
        CONFIRM_DEADLINE
    } else {
        DEADLINE
    };
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("kvcc can be waited for") {
            break status;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("kvcc did not exit within {deadline:?}: {command:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (
        status.code().expect("kvcc exits with a code"),
        stdout.join().expect("stdout drained"),
        stderr.join().expect("stderr drained"),
    )
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        pipe.read_to_string(&mut text).expect("UTF-8 output");
        text
    })
}

/// A fixture path relative to the workspace root.
pub fn fixture(name: &str) -> String {
    format!("tests/fixtures/{name}")
}

/// The 1-based line of the first line of `file` (under the root) that starts with `text`.
pub fn line_of(file: &str, text: &str) -> usize {
    let contents = std::fs::read_to_string(root().join(file)).expect("fixture readable");
    contents
        .lines()
        .position(|l| l.starts_with(text))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("{file} has no line starting with {text:?}"))
}

/// The shipped spec files, `specs/*.toml` (not the benchmark set below it), sorted.
pub fn shipped_specs() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("specs"))
        .expect("specs/ readable")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

/// This machine's Rust target (`rustc -vV`'s host), which release archives are named by.
pub fn host() -> String {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("rustc runs");
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    text.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_string()
}
