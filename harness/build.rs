//! Build metadata: the commit kvcc is built from, `KVCC_COMMIT`, which every JSON line of
//! a run carries so that `kvcc merge` can refuse shards checked by different code. It is
//! `KVCC_COMMIT` from the build's environment when set (a build from a source archive can
//! say what it is), else what `git rev-parse HEAD` says, else `unknown` (no git, or not a
//! checkout): a clean clone and CI build alike.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=KVCC_COMMIT");
    let commit = std::env::var("KVCC_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_head)
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=KVCC_COMMIT={}", commit.trim());
}

/// The manifest's directory: git is asked from there, whatever cargo's working directory.
fn manifest_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default())
}

/// A git command's trimmed output, or None if git is missing or fails.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(manifest_dir())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

/// HEAD's commit, watching the files that move with it: without them, cargo would keep
/// the commit of the first build through every later commit.
fn git_head() -> Option<String> {
    let head = git(&["rev-parse", "HEAD"])?;
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    // The branch HEAD names; its directory too, since a commit may create its file.
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some((dir, _)) = branch.rsplit_once('/') {
            watched.push(dir.to_string());
        }
        watched.push(branch);
    }
    for name in watched {
        let Some(path) = git(&["rev-parse", "--git-path", &name]) else {
            continue;
        };
        let path = manifest_dir().join(Path::new(&path));
        // A path that does not exist would make cargo run this script on every build.
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    Some(head)
}
