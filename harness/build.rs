//! Build metadata: which code this kvcc is. `kvcc --version`, every JSON line and every
//! JUnit report carry it, and `kvcc merge` refuses shards checked by different code. The
//! rule is `build/source_state.rs`; this sets, for the crate:
//!
//! - `KVCC_COMMIT`: the commit, 40 hex digits, or `unknown`;
//! - `KVCC_TREE`: `clean`, `dirty` or `unknown`;
//! - `KVCC_VERSION_LINE`: what `kvcc --version` prints after `kvcc `;
//! - `KVCC_BUILT_FROM`: the workspace paths the tree state is judged on, comma-separated.

#[path = "build/source_state.rs"]
mod source_state;

use source_state::{git, BUILT_FROM};
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/source_state.rs");
    println!("cargo:rerun-if-env-changed=KVCC_COMMIT");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let given = std::env::var("KVCC_COMMIT").ok();
    let (commit, tree) = source_state::state(&manifest, given.as_deref());
    if tree != "unknown" {
        watch(&manifest);
    }
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let line = source_state::version_line(&version, &commit, tree);
    println!("cargo:rustc-env=KVCC_COMMIT={commit}");
    println!("cargo:rustc-env=KVCC_TREE={tree}");
    println!("cargo:rustc-env=KVCC_VERSION_LINE={line}");
    println!("cargo:rustc-env=KVCC_BUILT_FROM={}", BUILT_FROM.join(","));
}

/// Tells cargo to run this script again when the commit or the tree state may have moved:
/// without it cargo would keep the first build's answer through every later commit and
/// edit. The files HEAD names move with a commit; the built-from paths with an edit
/// (cargo scans a directory for the newest file in it).
fn watch(manifest: &Path) {
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    // The branch HEAD names; its directory too, since a commit may create its file.
    if let Some(branch) = git(manifest, &["symbolic-ref", "-q", "HEAD"]) {
        if let Some((dir, _)) = branch.rsplit_once('/') {
            watched.push(dir.to_string());
        }
        watched.push(branch);
    }
    let mut paths: Vec<PathBuf> = watched
        .iter()
        .filter_map(|name| git(manifest, &["rev-parse", "--git-path", name]))
        .map(|path| manifest.join(path))
        .collect();
    if let Some(root) = manifest.parent() {
        paths.extend(BUILT_FROM.iter().map(|p| root.join(p)));
    }
    for path in paths {
        // A path that does not exist would make cargo run this script on every build.
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
