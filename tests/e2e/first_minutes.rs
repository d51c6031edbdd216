//! Issue 26: a new user's first minutes. Help that describes every subcommand and whose
//! examples name real files, `--trace-dir` that says why it wrote nothing, a table that
//! says what `ok` means and never wraps in a log, a reproducer that runs in any clone,
//! and spec errors that are all reported, in the words of values.

use crate::common::{fixture, kvcc, output, root, run, KVCC};
use std::path::Path;

/// The `Commands:` section of `kvcc --help`: (name, description) per line.
fn commands(help: &str) -> Vec<(String, String)> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let l = l.trim_start();
            let (name, rest) = l.split_once(' ').unwrap_or((l, ""));
            (name.to_string(), rest.trim().to_string())
        })
        .collect()
}

#[test]
fn issue26_every_subcommand_in_help_has_a_description() {
    for flag in ["--help", "-h"] {
        let (code, help, _) = run(&[flag]);
        assert_eq!(code, 0);
        let commands = commands(&help);
        assert!(commands.len() >= 10, "{help}");
        for (name, description) in &commands {
            assert!(
                description.split_whitespace().count() >= 3,
                "`{name}` has no description in kvcc {flag}:\n{help}"
            );
        }
    }
    for (name, _) in commands(&run(&["--help"]).1) {
        if name == "help" {
            continue;
        }
        let (code, help, _) = run(&[&name, "--help"]);
        assert_eq!(code, 0, "{name}");
        let summary = help.lines().next().unwrap_or("");
        assert!(
            !summary.starts_with("Usage:") && summary.split_whitespace().count() >= 3,
            "kvcc {name} --help starts with no summary line:\n{help}"
        );
    }
}

/// The replay example of `kvcc --help` and `kvcc replay --help` names a file that the
/// check example beside it writes.
#[test]
fn issue26_help_examples_name_the_traces_check_writes() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    let (_, top, _) = run(&["--help"]);
    let (_, replay, _) = run(&["replay", "--help"]);
    let (_, confirm, _) = run(&["confirm", "--help"]);
    let example = |help: &str, command: &str| -> Vec<String> {
        help.lines()
            .map(str::trim)
            .filter_map(|l| l.strip_prefix(&format!("kvcc {command} ")))
            .map(|rest| rest.split_whitespace().map(str::to_string).collect())
            .next()
            .unwrap_or_else(|| panic!("a `kvcc {command}` example in:\n{help}"))
    };
    // The first check example with a spec is the one the replay example follows.
    let check_line = top
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("kvcc check specs/") && l.contains("--trace-dir traces"))
        .unwrap_or_else(|| panic!("a check example writing traces: {top}"));
    let mut args: Vec<String> = check_line
        .split_whitespace()
        .skip(1)
        .map(str::to_string)
        .collect();
    let at = args.iter().position(|a| a == "traces").unwrap();
    args[at] = traces.display().to_string();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = run(&args);
    assert_eq!(code, 0, "{stdout}{stderr}");
    for (help, command) in [(&top, "replay"), (&replay, "replay"), (&confirm, "confirm")] {
        let file = example(help, command)[0].clone();
        let name = file.strip_prefix("traces/").unwrap_or(&file);
        if name.starts_with("<name>") || name.starts_with("TRACE") {
            continue;
        }
        // `<point>` and `<clause>` stand for one field of a trace's name each (a full
        // name is too long for a man page's line); the rest must be a real name's.
        let fields: Vec<&str> = name.split("__").collect();
        let written = std::fs::read_dir(&traces)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|real| {
                let real: Vec<&str> = real.split("__").collect();
                real.len() == fields.len()
                    && real
                        .iter()
                        .zip(&fields)
                        .all(|(r, f)| match f.split_once('>') {
                            Some((_, rest)) if f.starts_with('<') => {
                                r.len() > rest.len() && r.ends_with(rest)
                            }
                            _ => r == f,
                        })
            })
            .count();
        assert!(
            written > 0,
            "kvcc {command} --help names {file}, which `{check_line}` does not write"
        );
    }
}

#[test]
fn issue26_trace_dir_with_nothing_to_write_says_so_and_how_to_get_traces() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    let traces_arg = traces.to_str().unwrap();
    let (code, _, stderr) = run(&[
        "check",
        "specs/pr59325-regression.toml",
        "--point",
        "prefill.pcp=2",
        "--trace-dir",
        traces_arg,
    ]);
    assert_eq!(code, 0);
    assert!(
        stderr.contains(&format!("no trace written to {traces_arg}")),
        "{stderr}"
    );
    assert!(
        stderr.contains("every verdict is as its spec expects"),
        "{stderr}"
    );
    assert!(stderr.contains("add --all-traces"), "{stderr}");
    let (_, _, stderr) = run(&[
        "check",
        "specs/pr59325-fix.toml",
        "--point",
        "prefill.pcp=1",
        "--trace-dir",
        traces_arg,
    ]);
    assert!(stderr.contains("no check found a violation"), "{stderr}");
    // With --all-traces it writes, and says nothing of the kind.
    let (code, stdout, stderr) = run(&[
        "check",
        "specs/pr59325-regression.toml",
        "--point",
        "prefill.pcp=2",
        "--all-traces",
        "--trace-dir",
        traces_arg,
    ]);
    assert_eq!(code, 0);
    assert!(!stderr.contains("no trace written"), "{stderr}");
    assert!(stdout.contains("trace files in"), "{stdout}");
    let (_, help, _) = run(&["check", "--help"]);
    let flag = help
        .split("--trace-dir <DIR>")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .unwrap();
    assert!(flag.contains("differs"), "{flag}");
    assert!(flag.contains("--all-traces"), "{flag}");
}

#[test]
fn issue26_table_says_what_ok_means_and_never_wraps_in_a_log() {
    // No COLUMNS and stdout a pipe: what a CI log sees.
    let (code, stdout, _) = run(&["check", "specs/pr59325-regression.toml"]);
    assert_eq!(code, 0);
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("pr59325-regression "))
        .collect();
    assert_eq!(rows.len(), 16, "one line per check:\n{stdout}");
    for row in &rows {
        assert!(
            row.contains("violated (eventually-freed, aggregator-drains)"),
            "{row}"
        );
        assert!(row.ends_with("ok"), "{row}");
    }
    assert!(
        stdout.contains("ok: the verdict is as the spec expects"),
        "{stdout}"
    );
    assert!(
        stdout.contains("kvcc check specs/pr59325-regression.toml --all-traces --trace-dir traces"),
        "{stdout}"
    );
    // A terminal's width still wraps, at spaces.
    let (_, narrow, _) = output(
        kvcc()
            .args(["check", "specs/pr59325-regression.toml"])
            .env("COLUMNS", "80"),
    );
    assert!(narrow.lines().all(|l| l.chars().count() <= 80), "{narrow}");
}

/// Copies what a trace's reproducer needs into `to`: a clone-like tree with the spec.
fn clone_like(to: &Path) {
    std::fs::create_dir_all(to.join(".git")).unwrap();
    std::fs::create_dir_all(to.join("specs")).unwrap();
    std::fs::copy(
        root().join("specs/pr59325-regression.toml"),
        to.join("specs/pr59325-regression.toml"),
    )
    .unwrap();
}

#[test]
fn issue26_sh_reproducer_runs_in_another_clone_from_any_directory() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    clone_like(&first);
    let (code, stdout, stderr) = output(
        std::process::Command::new(KVCC)
            .current_dir(&first)
            .env_remove("COLUMNS")
            .args([
                "check",
                "specs/pr59325-regression.toml",
                "--point",
                "prefill.pcp=2",
                "--point",
                "prefill.tp=1",
                "--point",
                "decode.tp=1",
                "--point",
                "producer.lease=false",
                "--all-traces",
                "--trace-dir",
                "traces",
            ]),
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    // The checkout moves (CI's runner is gone): no path of the first one may be needed.
    let moved = dir.path().join("moved");
    std::fs::rename(&first, &moved).unwrap();
    let script = std::fs::read_dir(moved.join("traces"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "sh"))
        .expect("a reproducer");
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(
        !text.contains("\ncd '/"),
        "no cd to an absolute path:\n{text}"
    );
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(KVCC, bin.join("kvcc")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let elsewhere = tempfile::tempdir().unwrap();
    // Kept in the clone, run from anywhere.
    let (code, stdout, stderr) = output(
        std::process::Command::new(&script)
            .current_dir(elsewhere.path())
            .env("PATH", &path),
    );
    assert_eq!(code, 0, "{text}\n{stdout}{stderr}");
    assert!(stdout.contains("1 check: 1 as expected"), "{stdout}");
    // Downloaded elsewhere, run from inside a clone (a subdirectory of it).
    let downloaded = elsewhere.path().join(script.file_name().unwrap());
    std::fs::copy(&script, &downloaded).unwrap();
    std::fs::remove_dir_all(moved.join("traces")).unwrap();
    std::fs::create_dir(moved.join("specs/sub")).unwrap();
    let (code, stdout, stderr) = output(
        std::process::Command::new(&downloaded)
            .current_dir(moved.join("specs/sub"))
            .env("PATH", &path),
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        moved.join("traces").is_dir(),
        "the traces are rewritten in the clone"
    );
    // No clone anywhere: exit 2 and a line that says what it looked for.
    std::fs::remove_dir_all(&moved).unwrap();
    let (code, _, stderr) = output(
        std::process::Command::new(&downloaded)
            .current_dir(elsewhere.path())
            .env("PATH", &path),
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("specs/pr59325-regression.toml"), "{stderr}");
}

fn check_text(name: &str, text: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, text).unwrap();
    let (code, _, stderr) = run(&["check", "--color", "never", file.to_str().unwrap()]);
    (code, stderr)
}

#[test]
fn issue26_a_spec_with_two_typos_reports_both_in_words_of_values() {
    let (code, stderr) = check_text(
        "typos.toml",
        "version = 1\nrequests = 1\nexpected-count = \"world-size\"\n\n[prefill]\ntp = 1\npcpp = 2\n\n[decode]\ntpp = 1\n\n[expect]\nverdict = \"holds\"\n",
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("error: prefill.pcpp: unknown field `pcpp`"),
        "{stderr}"
    );
    assert!(stderr.contains("typos.toml:7:1"), "{stderr}");
    assert!(
        stderr.contains("error: decode.tpp: unknown field `tpp`"),
        "{stderr}"
    );
    assert!(stderr.contains("typos.toml:10:1"), "{stderr}");
    assert!(
        !stderr.contains("missing field"),
        "the typo's field is not missing too: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    let (code, stderr) = check_text(
        "types.toml",
        "version = 1\nrequests = 1\nexpected-count = \"world-size\"\n\n[prefill]\ntp = -1\n\n[decode]\ntp = 1\n\n[producer]\nlease = 1\n\n[expect]\nverdict = \"holds\"\n\n[limits]\nmax-states = \"many\"\n",
    );
    assert_eq!(code, 2, "{stderr}");
    for (field, line) in [
        (
            "error: prefill.tp: got -1, expected a whole number from 1 to 16",
            6,
        ),
        ("error: producer.lease: got 1, expected true or false", 12),
        (
            "error: limits.max-states: got the text \"many\", expected a whole number, 1 or more",
            18,
        ),
    ] {
        assert!(stderr.contains(field), "{field}:\n{stderr}");
        assert!(
            stderr.contains(&format!("types.toml:{line}:")),
            "{line}:\n{stderr}"
        );
    }
    for rust in ["u16", "u64", "a boolean"] {
        assert!(!stderr.contains(rust), "a Rust type, `{rust}`: {stderr}");
    }

    // A limit of 0 would end every check before it began, inconclusive: refused as the
    // schema says (minimum 1), in the spec and on the command line.
    for limit in ["max-states", "timeout-seconds"] {
        let (code, stderr) = check_text(
            "zero.toml",
            &format!("version = 1\nrequests = 1\nexpected-count = \"world-size\"\n\n[prefill]\ntp = 1\n\n[decode]\ntp = 1\n\n[expect]\nverdict = \"holds\"\n\n[limits]\n{limit} = 0\n"),
        );
        assert_eq!(code, 2, "{stderr}");
        let message = format!("error: limits.{limit}: got 0, expected a whole number, 1 or more");
        assert!(stderr.contains(&message), "{stderr}");
        assert!(stderr.contains("zero.toml:15:"), "{stderr}");
    }
    for flag in ["--max-states", "--timeout"] {
        let (code, _, stderr) = run(&["check", &fixture("seed-59325.toml"), flag, "0"]);
        assert_eq!(code, 2, "{flag}: {stderr}");
    }
}

#[test]
fn issue26_a_store_knob_without_a_store_is_refused() {
    for knob in [
        "failed-store = \"leaked\"",
        "store-ledger = \"per-request\"",
    ] {
        let (code, stderr) = check_text(
            "store.toml",
            &format!("version = 1\nrequests = 1\nexpected-count = \"world-size\"\n[prefill]\ntp = 1\n[decode]\ntp = 1\n[producer]\n{knob}\n[expect]\nverdict = \"holds\"\n"),
        );
        assert_eq!(code, 2, "{knob}: {stderr}");
        assert!(
            stderr.contains("needs connector = \"multi-offload\""),
            "{stderr}"
        );
        assert!(stderr.contains("store.toml:9:"), "{stderr}");
    }
}

#[test]
fn issue26_check_outside_a_checkout_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) = output(kvcc().current_dir(dir.path()).args(["check"]));
    assert_eq!(code, 2, "{stderr}");
    let looked = dir.path().canonicalize().unwrap().join("specs");
    assert!(
        stderr.contains(&looked.display().to_string())
            || stderr.contains(&dir.path().join("specs").display().to_string()),
        "{stderr}"
    );
    assert!(stderr.contains("kvcc checkout"), "{stderr}");
    assert!(stderr.contains("kvcc check my-spec.toml"), "{stderr}");
}

/// `kvcc replay` prints a difference as the trace's text prints the fact (`req0: 1 to go`,
/// not `req0: 1`), and a change from a fact a state does not have reads `- → storing`.
#[test]
fn issue26_replay_and_traces_print_facts_as_the_trace_does() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    let (code, _, stderr) = run(&[
        "check",
        "specs/pr59325-regression.toml",
        "--point",
        "prefill.pcp=2",
        "--point",
        "prefill.tp=1",
        "--point",
        "decode.tp=1",
        "--point",
        "producer.lease=false",
        "--all-traces",
        "--trace-dir",
        traces.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let itf = traces.join("pr59325-regression__prefill.pcp=2,prefill.tp=1,decode.tp=1,producer.lease=false__eventually-freed__delay-freed-request-never-freed.itf.json");
    let mut trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&itf).unwrap()).unwrap();
    let states = trace["states"].as_array_mut().unwrap();
    let last = states.last_mut().unwrap();
    let sending = &mut last["P_aggregator"]["finished_sending"];
    assert_eq!(
        *sending,
        serde_json::json!({ "#map": [[{ "#bigint": "0" }, { "#bigint": "1" }]] }),
        "{sending}"
    );
    *sending = serde_json::json!({ "#map": [[{ "#bigint": "0" }, { "#bigint": "2" }]] });
    std::fs::write(&itf, trace.to_string()).unwrap();
    let (code, stdout, stderr) = run(&["replay", itf.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains("is `req0: 2 to go` in the trace but `req0: 1 to go` in the model"),
        "{stdout}"
    );

    let (code, _, stderr) = run(&[
        "check",
        "specs/pr53903-multiconnector-hang.toml",
        "--point",
        "prefill.pcp=2",
        "--all-traces",
        "--trace-dir",
        traces.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    for entry in std::fs::read_dir(&traces).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "txt" || e == "md") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(!text.contains(":  → "), "{}:\n{text}", path.display());
            assert!(!text.contains(":  -> "), "{}:\n{text}", path.display());
        }
    }
}
