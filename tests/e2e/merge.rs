//! Issue 23, item 6: `kvcc merge` verifies, never trusts. Lines carry their run's identity
//! (kvcc version and commit, each spec's content hash, the settings); merge refuses shards
//! of different runs, recomputes `matches`, refuses points the spec does not have, and
//! names the file, line and field of every defect with exit 2. Writing its output to a
//! reader that went away ends it quietly, to a full disk with exit 2, never a panic.

use crate::common::{fixture, kvcc, root, run, KVCC};
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Runs `kvcc check SPEC --shard I/N --format json EXTRA` for each I, writing `sI.jsonl`
/// into `dir`; returns their paths.
fn shards(dir: &Path, spec: &str, count: usize, extra: &[&[&str]]) -> Vec<String> {
    (1..=count)
        .map(|i| {
            let shard = format!("{i}/{count}");
            let mut args = vec!["check", spec, "--shard", &shard, "--format", "json"];
            args.extend(extra.get(i - 1).copied().unwrap_or_default());
            let (code, stdout, stderr) = run(&args);
            assert!(code == 0 || code == 1, "{args:?}: {stderr}");
            let path = dir.join(format!("s{i}.jsonl"));
            std::fs::write(&path, stdout).unwrap();
            path.display().to_string()
        })
        .collect()
}

/// Rewrites every line of `file` with `edit` (line index, line).
fn edit_lines(file: &str, edit: impl Fn(usize, &mut serde_json::Value)) {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        let mut value: serde_json::Value = serde_json::from_str(line).unwrap();
        edit(i, &mut value);
        out += &serde_json::to_string(&value).unwrap();
        out.push('\n');
    }
    std::fs::write(file, out).unwrap();
}

/// Merges `files`; asserts exit 2 with no panic and `FILE:LINE:1: FIELD:` in the error.
fn refused(files: &[String], file: &str, line: usize, field: &str) -> String {
    let mut args = vec!["merge"];
    args.extend(files.iter().map(String::as_str));
    let (code, stdout, stderr) = run(&args);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let at = format!("error: {file}:{line}:1: {field}: ");
    assert!(stderr.contains(&at), "no `{at}` in: {stderr}");
    stderr
}

/// A copy of a fixture spec in `dir`, to edit.
fn spec_copy(dir: &Path, name: &str) -> PathBuf {
    let copy = dir.join(name);
    std::fs::copy(root().join(fixture(name)), &copy).unwrap();
    copy
}

/// The broken twin: before issue 23, shards checked with other settings, by another
/// build, or of an edited spec merged green (exit 0).
#[test]
fn issue23_merge_refuses_shards_of_different_runs() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("seed-59325-matrix.toml");
    let same = shards(dir.path(), &spec, 2, &[]);
    let (code, stdout, stderr) = run(&["merge", &same[0], &same[1]]);
    assert_eq!(code, 0, "one run merges: {stdout}{stderr}");

    // Other settings: a depth limit on one runner.
    let other = tempfile::tempdir().unwrap();
    let limited = shards(other.path(), &spec, 2, &[&[], &["--max-depth", "40"]]);
    let stderr = refused(
        &[same[0].clone(), limited[1].clone()],
        &limited[1],
        1,
        "settings",
    );
    assert!(stderr.contains("shards of different runs"), "{stderr}");
    assert!(stderr.contains("\"max_depth\":40"), "{stderr}");

    // Another build of kvcc.
    let rebuilt = other.path().join("rebuilt.jsonl");
    std::fs::copy(&same[1], &rebuilt).unwrap();
    let rebuilt = rebuilt.display().to_string();
    edit_lines(&rebuilt, |_, v| v["kvcc_commit"] = "0123abc".into());
    refused(
        &[same[0].clone(), rebuilt.clone()],
        &rebuilt,
        1,
        "kvcc_commit",
    );
    // The same commit built from an edited tree (issue 27).
    let dirty = other.path().join("dirty.jsonl");
    std::fs::copy(&same[1], &dirty).unwrap();
    let dirty = dirty.display().to_string();
    edit_lines(&dirty, |_, v| {
        let flipped = !v["kvcc_dirty"].as_bool().unwrap_or(false);
        v["kvcc_dirty"] = flipped.into();
    });
    refused(&[same[0].clone(), dirty.clone()], &dirty, 1, "kvcc_dirty");

    // The spec edited between the two shards' runs: same points, another content.
    let edited = tempfile::tempdir().unwrap();
    let copy = spec_copy(edited.path(), "seed-59325-matrix.toml");
    let copy_arg = copy.display().to_string();
    // Every shard beside the spec: merge follows a shard's spec only inside the working
    // directory or the shard's own.
    let first: Vec<String> = shards(edited.path(), &copy_arg, 2, &[])
        .into_iter()
        .map(|shard| {
            let path = Path::new(&shard);
            let name = path.file_name().unwrap().to_string_lossy();
            let kept = edited
                .path()
                .join(format!("first-{name}"))
                .display()
                .to_string();
            std::fs::rename(&shard, &kept).unwrap();
            kept
        })
        .collect();
    let mut text = std::fs::read_to_string(&copy).unwrap();
    text += "# edited after shard 1 ran\n";
    std::fs::write(&copy, &text).unwrap();
    let second = shards(edited.path(), &copy_arg, 2, &[]);
    let stderr = refused(
        &[first[0].clone(), second[1].clone()],
        &second[1],
        1,
        "spec_hash",
    );
    assert!(stderr.contains("shards of different runs"), "{stderr}");

    // Both shards of the same spec, edited since: merge reads the spec again.
    std::fs::write(&copy, text + "# and again\n").unwrap();
    let stderr = refused(&second, &second[0], 1, "spec_hash");
    assert!(
        stderr.contains("has changed since the shard checked it"),
        "{stderr}"
    );
}

/// One edited shard among good ones is the one blamed. The broken twin: merge held
/// every line to the first file's, so an edited first shard made it report each good
/// shard as the odd one out (`checks`, `kvcc_version` and `spec_hash` at s2 and s3, none
/// at s1).
#[test]
fn merge_blames_the_shard_that_differs_from_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("seed-59325-matrix.toml");
    for (field, value) in [
        ("checks", serde_json::json!(4)),
        ("kvcc_version", "9.9.9".into()),
        ("spec_hash", "0123456789abcdef".into()),
    ] {
        let files = shards(dir.path(), &spec, 3, &[]);
        edit_lines(&files[0], |_, v| v[field] = value.clone());
        let stderr = refused(&files, &files[0], 1, field);
        for good in &files[1..] {
            assert!(!stderr.contains(&format!("error: {good}:")), "{stderr}");
        }
        // Reversed, the edited file last: still it alone.
        let reversed: Vec<String> = files.iter().rev().cloned().collect();
        refused(&reversed, &files[0], 1, field);
    }
}

/// The broken twin: before issue 23, merge read `matches` from the line, so an edited
/// line turned a mismatch green (exit 0); it also trusted the line's expectation.
#[test]
fn issue23_merge_recomputes_matches_instead_of_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let files = shards(dir.path(), &fixture("mismatch.toml"), 1, &[]);
    let (code, stdout, _) = run(&["merge", &files[0]]);
    assert_eq!(code, 1, "an honest mismatch: {stdout}");

    edit_lines(&files[0], |_, v| v["matches"] = true.into());
    let stderr = refused(&files, &files[0], 1, "matches");
    assert!(
        stderr.contains("does not meet the expectation `holds`"),
        "{stderr}"
    );

    // The expectation rewritten to fit the verdict: the spec says otherwise.
    edit_lines(&files[0], |_, v| {
        let violated: Vec<serde_json::Value> = v["violations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["property"].clone())
            .collect();
        v["expected"] = serde_json::json!({"verdict": "violated", "violates-all": violated});
    });
    let stderr = refused(&files, &files[0], 1, "expected");
    assert!(stderr.contains("expects `holds` at this point"), "{stderr}");
}

/// The broken twin: before issue 23, a line could claim any point (or one point twice)
/// and merge reported it.
#[test]
fn issue23_merge_refuses_points_the_spec_does_not_have() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fixture("seed-59325-matrix.toml");
    let files = shards(dir.path(), &spec, 1, &[]);
    let original = std::fs::read_to_string(&files[0]).unwrap();
    assert_eq!(original.lines().count(), 3, "pcp 1, 2 and 4");

    edit_lines(&files[0], |i, v| {
        if i == 2 {
            v["point"]["prefill.pcp"] = 3.into();
        }
    });
    let stderr = refused(&files, &files[0], 3, "point");
    assert!(
        stderr.contains(&format!("{spec} has no matrix point")),
        "{stderr}"
    );

    std::fs::write(&files[0], &original).unwrap();
    edit_lines(&files[0], |i, v| {
        if i == 2 {
            v["point"]["prefill.pcp"] = 2.into();
        }
    });
    let stderr = refused(&files, &files[0], 3, "point");
    assert!(
        stderr.contains(&format!("is also at {}:2", files[0])),
        "{stderr}"
    );
}

/// An edit of one line's JSON.
type Edit = fn(&mut serde_json::Value);

/// Defects inside a line name the file, the line and the field; none panics.
#[test]
fn issue23_merge_line_errors_name_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let files = shards(dir.path(), &fixture("seed-59325-matrix.toml"), 1, &[]);
    let original = std::fs::read_to_string(&files[0]).unwrap();
    let cases: [(&str, Edit); 6] = [
        ("verdict", |v| v["verdict"] = 7.into()),
        ("verdict", |v| v["verdict"] = "maybe".into()),
        ("violations[0]", |v| {
            v["verdict"] = "violated".into();
            v["violations"] = serde_json::json!([{"property": "p", "clause": "c", "depth": 1}]);
        }),
        ("violations", |v| {
            v["verdict"] = "holds".into();
            v["violations"] = serde_json::json!([{"property": "p", "clause": "c", "depth": 1}]);
        }),
        ("format_version", |v| v["format_version"] = 1.into()),
        ("run", |v| {
            v.as_object_mut().unwrap().remove("run");
        }),
    ];
    for (field, edit) in cases {
        std::fs::write(&files[0], &original).unwrap();
        edit_lines(&files[0], |i, v| {
            if i == 1 {
                edit(v)
            }
        });
        refused(&files, &files[0], 2, field);
    }
    // Trailing data after a line's JSON value, at its column.
    let mut lines: Vec<String> = original.lines().map(str::to_string).collect();
    lines[1] += " {}";
    let column = lines[1].len() - 1;
    std::fs::write(&files[0], lines.join("\n")).unwrap();
    let (code, _, stderr) = run(&["merge", &files[0]]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!("{}:2:{column}: ", files[0])),
        "{stderr}"
    );
}

/// `kvcc merge ... --format json | head -n1`: the reader goes after one line; merge must
/// end with exit 0, not the panic of `println!` (the broken twin: exit 101 before issue
/// 23). The whole shipped run's lines are far more than a pipe holds, so merge is still
/// writing when head exits.
#[test]
fn issue23_merge_into_a_closed_pipe_exits_0_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = run(&["check", "--format", "json"]);
    assert_eq!(code, 0, "{stderr}");
    // A pipe holds 64 KiB and head reads 8 KiB at most before it exits.
    assert!(stdout.len() > 96 << 10, "more than a pipe holds");
    let file = dir.path().join("all.jsonl");
    std::fs::write(&file, stdout).unwrap();
    let output = std::process::Command::new("bash")
        .current_dir(root())
        .args(["-c", "set -o pipefail; \"$@\" | head -n1", "sh"])
        .arg(KVCC)
        .args(["merge", file.to_str().unwrap(), "--format", "json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
}

/// A full disk behind stdout or the JUnit path is exit 2 with a message; the broken twin:
/// `--format json > /dev/full` panicked (exit 101) before issue 23. The JUnit path, a
/// device, is written in place: renaming a file over it would replace /dev/full.
#[test]
fn issue23_merge_onto_a_full_disk_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let files = shards(dir.path(), &fixture("seed-59325-matrix.toml"), 2, &[]);
    for format in ["json", "human"] {
        let output = kvcc()
            .args(["merge", &files[0], &files[1], "--format", format])
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{format}: {stderr}");
        assert!(
            stderr.contains("error: cannot write to standard output"),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let (code, _, stderr) = run(&["merge", &files[0], &files[1], "--junit", "/dev/full"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("/dev/full: cannot write JUnit XML"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    use std::os::unix::fs::FileTypeExt;
    let kind = std::fs::metadata("/dev/full").unwrap().file_type();
    assert!(kind.is_char_device(), "/dev/full is still the device");
}

/// Issue 16's rule for what a shard names: merge reads each line's spec again and copies
/// its Markdown traces into the job summary, but a shard may come from a stranger. A spec
/// or trace that leads outside the working directory and the shard's own is refused,
/// naming the shard's line and field, and nothing of the file it names is printed.
#[test]
fn a_shard_cannot_make_merge_read_files_outside_the_working_tree() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let secret = elsewhere.path().join("secret.md");
    std::fs::write(&secret, "TOP-SECRET\n").unwrap();
    let secret_toml = elsewhere.path().join("secret.toml");
    std::fs::write(&secret_toml, "TOP-SECRET\n").unwrap();
    let linked = dir.path().join("linked.toml");
    std::os::unix::fs::symlink(&secret_toml, &linked).unwrap();
    let spec = fixture("seed-59325.toml");
    let files = shards(dir.path(), &spec, 1, &[]);
    let original = std::fs::read_to_string(&files[0]).unwrap();
    let cases: [(&str, serde_json::Value, &str); 5] = [
        ("file", "/etc/passwd".into(), "a path to a `.toml` file"),
        ("file", "../../etc/x.toml".into(), "without `..`"),
        (
            "file",
            secret_toml.to_str().unwrap().into(),
            "leads outside",
        ),
        ("file", linked.to_str().unwrap().into(), "leads outside"),
        ("traces", serde_json::json!([secret]), "leads outside"),
    ];
    for (field, value, why) in cases {
        std::fs::write(&files[0], &original).unwrap();
        edit_lines(&files[0], |_, line| line[field] = value.clone());
        let stderr = refused(&files, &files[0], 1, field);
        assert!(stderr.contains(why), "{field} = {value}: {stderr}");
        assert!(!stderr.contains("TOP-SECRET"), "{stderr}");
    }
    // The twin: the same shard, untouched, merges.
    std::fs::write(&files[0], &original).unwrap();
    let (code, stdout, stderr) = run(&["merge", &files[0]]);
    assert!(code == 0 || code == 1, "{stdout}{stderr}");
}
