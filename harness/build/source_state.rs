//! Which code a kvcc build is: its commit and whether the files it is built from are as
//! at that commit. Read by `build.rs`, and by the end-to-end tests on scratch
//! repositories (`tests/e2e/version.rs`), so the rule that names a build is tested
//! without building kvcc again.

use std::path::Path;
use std::process::Command;

/// The workspace paths the `kvcc` binary is built from: the manifests and toolchain pin,
/// the crates it links, and `confirm/`, which it embeds. A change elsewhere (tests, specs,
/// docs) does not change the binary, so it does not make the build dirty;
/// `tests/e2e/version.rs` fails when kvcc links a workspace crate not listed here.
pub const BUILT_FROM: &[&str] = &[
    "Cargo.toml",
    "Cargo.lock",
    "rust-toolchain.toml",
    "aggregator",
    "model",
    "conform",
    "harness",
    "confirm",
];

/// A build's commit (40 hex digits, or `unknown`) and tree state (`clean`, `dirty` or
/// `unknown`), for the crate whose manifest is in `manifest` (`harness/`). `given` is the
/// builder's `KVCC_COMMIT`: a build from a source archive, or the Action building the
/// commit it was asked for, can say what it is, and then nothing is known of the tree.
/// Else git's answer, when the repository around `manifest` tracks `build.rs`; else
/// `unknown` (no git, a crates tarball, or a copy unpacked inside another repository,
/// whose commit would be a lie).
pub fn state(manifest: &Path, given: Option<&str>) -> (String, &'static str) {
    if let Some(commit) = given.map(str::trim).filter(|c| !c.is_empty()) {
        return (commit.to_string(), "unknown");
    }
    match git_state(manifest) {
        Some((commit, true)) => (commit, "dirty"),
        Some((commit, false)) => (commit, "clean"),
        None => ("unknown".to_string(), "unknown"),
    }
}

/// What `kvcc --version` prints after `kvcc `.
pub fn version_line(version: &str, commit: &str, tree: &str) -> String {
    match (commit, tree) {
        ("unknown", _) => format!("{version} (commit unknown: not built from a git checkout)"),
        (commit, "unknown") => format!("{version} (commit {commit}, tree state unknown)"),
        (commit, tree) => format!("{version} (commit {commit}, {tree})"),
    }
}

/// HEAD's commit and whether a [`BUILT_FROM`] path differs from it (edited, deleted, or
/// new and not ignored), or None when `manifest` is not in a git checkout of kvcc.
pub fn git_state(manifest: &Path) -> Option<(String, bool)> {
    // A repository that does not track this crate's build script is not kvcc's.
    git(manifest, &["ls-files", "--error-unmatch", "build.rs"])?;
    let head = git(manifest, &["rev-parse", "HEAD"])?;
    let mut status = vec!["status", "--porcelain", "--"];
    status.extend(BUILT_FROM);
    let dirty = !git(manifest.parent()?, &status)?.is_empty();
    Some((head, dirty))
}

/// A git command's trimmed output, or None if git is missing or fails.
/// `--no-optional-locks`: a build must never take the index lock from a `git add` running
/// beside it.
pub fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("--no-optional-locks")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    Some(text.trim().to_string())
}
