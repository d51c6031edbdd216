//! Shared helpers for kvcc's end-to-end tests: run the real binary from the workspace
//! root, so paths in messages read as a user would type them.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root (the parent of `harness/`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("harness/ has a parent")
        .to_path_buf()
}

/// `kvcc` with the workspace root as working directory and no GitHub Actions variables,
/// whatever the environment the tests run in.
pub fn kvcc() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kvcc"));
    command
        .current_dir(root())
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY");
    command
}

/// Runs kvcc with `args`; returns (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    output(kvcc().args(args))
}

pub fn output(command: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().expect("kvcc runs");
    (
        status.code().expect("kvcc exits with a code"),
        String::from_utf8(stdout).expect("stdout is UTF-8"),
        String::from_utf8(stderr).expect("stderr is UTF-8"),
    )
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
