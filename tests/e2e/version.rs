//! Issue 27 (Version): `kvcc --version`, every JSON line and every JUnit report name the
//! commit kvcc was built from and whether the files it is built from were as at that
//! commit. The rule (`harness/build/source_state.rs`) is run here on scratch repositories
//! for each case, a clean clone, an edit, an edit that does not touch the binary, a new
//! file, a source outside git, a copy inside another repository, a commit given by the
//! builder, and the built binary is compared with what git says of this checkout.

#[path = "../../harness/build/source_state.rs"]
#[allow(dead_code)]
mod source_state;

use crate::common::{fixture, root, run};
use source_state::{state, version_line, BUILT_FROM};
use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args([
            "-c",
            "user.name=kvcc",
            "-c",
            "user.email=kvcc@example.invalid",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(status.status.success(), "git {args:?}: {status:?}");
}

/// A scratch repository laid out like kvcc's: `harness/build.rs`, a linked crate, and a
/// test file, committed. Returns its `harness/` (the manifest directory).
fn scratch_repository(dir: &Path) -> std::path::PathBuf {
    for (file, text) in [
        ("harness/build.rs", "fn main() {}\n"),
        ("model/src/lib.rs", "pub fn f() {}\n"),
        ("tests/e2e/t.rs", "// a test\n"),
        ("Cargo.lock", "# lock\n"),
    ] {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    git(dir, &["init", "-q"]);
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "scratch"]);
    dir.join("harness")
}

fn head(dir: &Path) -> String {
    let out = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(dir)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn issue27_a_build_is_named_by_its_commit_and_tree_state() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = scratch_repository(dir.path());
    let commit = head(dir.path());
    assert_eq!(commit.len(), 40, "{commit}");
    assert_eq!(state(&manifest, None), (commit.clone(), "clean"));

    // Tests, specs and docs do not change the binary: still clean.
    std::fs::write(dir.path().join("tests/e2e/t.rs"), "// edited\n").unwrap();
    assert_eq!(state(&manifest, None), (commit.clone(), "clean"));

    // A linked crate edited, then restored.
    let lib = dir.path().join("model/src/lib.rs");
    std::fs::write(&lib, "pub fn f() { /* edited */ }\n").unwrap();
    assert_eq!(state(&manifest, None), (commit.clone(), "dirty"));
    std::fs::write(&lib, "pub fn f() {}\n").unwrap();
    assert_eq!(state(&manifest, None), (commit.clone(), "clean"));

    // A new file in a linked crate (a module not yet added) is part of the build too.
    std::fs::write(dir.path().join("model/src/new.rs"), "// new\n").unwrap();
    assert_eq!(state(&manifest, None), (commit.clone(), "dirty"));

    // The builder names the commit (a source archive, the Action): the tree is unknown.
    let given = "0123456789abcdef0123456789abcdef01234567";
    assert_eq!(
        state(&manifest, Some(given)),
        (given.to_string(), "unknown")
    );
    assert_eq!(
        state(&manifest, Some("  ")).1,
        "dirty",
        "blank is not given"
    );
}

#[test]
fn issue27_a_build_outside_a_checkout_of_kvcc_says_commit_unknown() {
    // No git at all around the source (a crates tarball, a source archive).
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("harness");
    std::fs::create_dir_all(&manifest).unwrap();
    std::fs::write(manifest.join("build.rs"), "fn main() {}\n").unwrap();
    let unknown = ("unknown".to_string(), "unknown");
    assert_eq!(state(&manifest, None), unknown);

    // Unpacked inside another repository, which does not track kvcc's build script: its
    // commit is not kvcc's.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("README"), "another project\n").unwrap();
    git(other.path(), &["init", "-q"]);
    git(other.path(), &["add", "."]);
    git(other.path(), &["commit", "-q", "-m", "other"]);
    let manifest = other.path().join("vendor/kvcc/harness");
    std::fs::create_dir_all(&manifest).unwrap();
    std::fs::write(manifest.join("build.rs"), "fn main() {}\n").unwrap();
    assert_eq!(state(&manifest, None), unknown);

    assert_eq!(
        version_line("0.1.0", "unknown", "unknown"),
        "0.1.0 (commit unknown: not built from a git checkout)"
    );
    assert_eq!(
        version_line("0.1.0", "abc", "unknown"),
        "0.1.0 (commit abc, tree state unknown)"
    );
    assert_eq!(
        version_line("0.1.0", "abc", "dirty"),
        "0.1.0 (commit abc, dirty)"
    );
}

/// The binary under test against git's answer for this checkout. In CI (a fresh clone)
/// that is exact: HEAD and clean. Elsewhere other work moves the tree under a running
/// suite (commits, edits after the build), so the binary's commit must only be one of
/// this repository's, with a tree state of clean or dirty.
#[test]
fn issue27_kvcc_version_names_this_checkouts_commit() {
    let (code, stdout, stderr) = run(&["--version"]);
    assert_eq!(code, 0, "{stderr}");
    let line = stdout.trim_end();
    let harness = root().join("harness");
    let (commit, tree) = state(&harness, None);
    assert_ne!(
        commit, "unknown",
        "the suite runs in a git checkout of kvcc"
    );
    let expected = format!("kvcc {}", version_line(kvcc::VERSION, &commit, tree));
    if std::env::var_os("CI").is_some() {
        assert_eq!(line, expected);
        assert_eq!(tree, "clean", "CI builds a fresh clone");
        return;
    }
    let shown = line
        .strip_prefix(&format!("kvcc {} (commit ", kvcc::VERSION))
        .and_then(|rest| rest.split_once(", "))
        .unwrap_or_else(|| panic!("not `kvcc VERSION (commit C, STATE)`: {line}"));
    let (shown_commit, shown_tree) = shown;
    assert!(shown_tree == "clean)" || shown_tree == "dirty)", "{line}");
    let known = Command::new("git")
        .args(["cat-file", "-e", &format!("{shown_commit}^{{commit}}")])
        .current_dir(root())
        .status()
        .unwrap();
    assert!(
        known.success(),
        "{shown_commit} is not a commit of this repository"
    );
    if line != expected {
        eprintln!("note: built as `{line}`, the checkout is now `{expected}`");
    }
}

/// Every JSON line (a check's and an input error's) and every JUnit testsuite carry the
/// same commit and tree state as `kvcc --version`.
#[test]
fn issue27_json_lines_and_junit_name_the_build() {
    let (_, version, _) = run(&["--version"]);
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("kvcc.xml").display().to_string();
    let (code, stdout, stderr) = run(&[
        "check",
        &fixture("seed-59325.toml"),
        "--format",
        "json",
        "--junit",
        &junit,
    ]);
    assert_eq!(code, 0, "{stderr}");
    let (_, errors, _) = run(&["check", &fixture("typo.toml"), "--format", "json"]);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .chain(errors.lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= 2, "{stdout}{errors}");
    assert!(lines.iter().any(|l| l.get("error").is_some()), "{errors}");
    for line in &lines {
        let commit = line["kvcc_commit"].as_str().expect("kvcc_commit");
        let dirty = match line["kvcc_dirty"].as_bool() {
            Some(true) => "dirty",
            Some(false) => "clean",
            None => "tree state unknown",
        };
        let named = format!("(commit {commit}, {dirty})");
        assert!(version.contains(&named), "{version} vs {line}");
    }
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let suites: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("testsuite"))
        .collect();
    assert!(!suites.is_empty(), "{xml}");
    for suite in suites {
        let property = |name: &str| {
            suite
                .descendants()
                .find(|p| p.has_tag_name("property") && p.attribute("name") == Some(name))
                .and_then(|p| p.attribute("value"))
                .unwrap_or_else(|| panic!("no property {name} in {xml}"))
                .to_string()
        };
        assert_eq!(property("kvcc_version"), kvcc::VERSION);
        assert_eq!(property("kvcc_commit"), lines[0]["kvcc_commit"]);
        let dirty = lines[0]["kvcc_dirty"]
            .as_bool()
            .map_or("unknown".to_string(), |d| d.to_string());
        assert_eq!(property("kvcc_dirty"), dirty);
    }
}

/// `build.rs` judges the tree on [`BUILT_FROM`]: every workspace crate kvcc links must be
/// there, or an edit to it would leave a dirty build calling itself clean.
#[test]
fn issue27_the_tree_state_covers_every_crate_kvcc_links() {
    let lock: toml::Value =
        toml::from_str(&std::fs::read_to_string(root().join("Cargo.lock")).unwrap()).unwrap();
    let packages = lock["package"].as_array().unwrap();
    // Workspace crates have no `source` in Cargo.lock.
    let local = |name: &str| {
        packages
            .iter()
            .find(|p| p["name"].as_str() == Some(name) && p.get("source").is_none())
    };
    let mut linked = vec!["kvcc".to_string()];
    let mut i = 0;
    while i < linked.len() {
        let package = local(&linked[i]).expect("a workspace crate");
        for dep in package
            .get("dependencies")
            .and_then(|d| d.as_array())
            .into_iter()
            .flatten()
        {
            let name = dep.as_str().unwrap().split(' ').next().unwrap();
            if local(name).is_some() && !linked.iter().any(|l| l == name) {
                linked.push(name.to_string());
            }
        }
        i += 1;
    }
    let manifest: toml::Value =
        toml::from_str(&std::fs::read_to_string(root().join("Cargo.toml")).unwrap()).unwrap();
    let paths = &manifest["workspace"]["dependencies"];
    for name in &linked {
        let dir = paths[name.as_str()]["path"].as_str().unwrap();
        assert!(
            BUILT_FROM.contains(&dir),
            "kvcc links {name} ({dir}/), which build.rs does not watch"
        );
    }
    assert!(linked.len() >= 4, "{linked:?}");
    assert_eq!(kvcc::BUILT_FROM, BUILT_FROM.join(","));
    // What the harness embeds from outside its crate (the Python package of `confirm`).
    for file in rust_files(&root().join("harness/src")) {
        let text = std::fs::read_to_string(&file).unwrap();
        for embedded in text.split("include_str!(\"../../").skip(1) {
            let top = embedded.split('/').next().unwrap();
            assert!(
                BUILT_FROM.contains(&top),
                "{} embeds {top}/, which build.rs does not watch",
                file.display()
            );
        }
    }
}

fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}
