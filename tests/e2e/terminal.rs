//! Terminal output (issue 13): a table no wider than the terminal, `--quiet`, colour that
//! follows `--color`, NO_COLOR and CLICOLOR_FORCE, and progress on stderr when it is not
//! a terminal (a plain line every few seconds; here every 50 ms).

use crate::common::{fixture, kvcc, output};

fn check(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut command = kvcc();
    command.arg("check").args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    output(&mut command)
}

#[test]
fn issue_13_columns_100_prints_no_line_wider_than_100() {
    for columns in ["100", "72"] {
        let (code, stdout, _) = check(&[], &[("COLUMNS", columns)]);
        assert_eq!(code, 0);
        let widest = stdout.lines().map(|l| l.chars().count()).max().unwrap();
        let limit: usize = columns.parse().unwrap();
        assert!(
            widest <= limit,
            "a line of {widest} columns at COLUMNS={columns}:\n{stdout}"
        );
        assert!(stdout.lines().count() > 100, "every check is in the table");
    }
}

#[test]
fn issue_13_quiet_prints_only_the_summary_on_an_all_expected_run() {
    let traces = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = check(
        &[
            "--quiet",
            &fixture("seed-59325.toml"),
            &fixture("seed-59325-fixed.toml"),
            &fixture("seed-59325-matrix.toml"),
            "--trace-dir",
            traces.path().to_str().unwrap(),
        ],
        &[("KVCC_PROGRESS_INTERVAL", "0.001")],
    );
    assert_eq!(code, 0);
    assert_eq!(stdout.lines().collect::<Vec<_>>().len(), 1, "{stdout}");
    assert_eq!(stdout, "5 checks: 5 as expected, 0 mismatched\n");
    assert!(stderr.is_empty(), "no progress when quiet: {stderr}");
}

#[test]
fn quiet_still_shows_the_mismatches() {
    let (code, stdout, _) = check(
        &[
            "--quiet",
            &fixture("seed-59325-matrix.toml"),
            &fixture("mismatch.toml"),
        ],
        &[],
    );
    assert_eq!(code, 1);
    assert!(stdout.contains("MISMATCH"), "{stdout}");
    assert!(
        !stdout.contains("seed-59325-pcp"),
        "matching rows are left out: {stdout}"
    );
    assert!(
        stdout.ends_with("4 checks: 3 as expected, 1 mismatched\n"),
        "{stdout}"
    );
}

#[test]
fn colour_follows_the_flag_and_the_environment() {
    let spec = fixture("mismatch.toml");
    let styled = |out: &str| out.contains("\u{1b}[");
    let (_, plain, _) = check(&[&spec], &[]);
    assert!(!styled(&plain), "piped output is plain: {plain:?}");
    let (_, always, _) = check(&["--color", "always", &spec], &[]);
    assert!(styled(&always), "{always:?}");
    let (_, never, _) = check(&["--color", "never", &spec], &[("CLICOLOR_FORCE", "1")]);
    assert!(!styled(&never), "{never:?}");
    let (_, forced, _) = check(&[&spec], &[("CLICOLOR_FORCE", "1")]);
    assert!(styled(&forced), "{forced:?}");
    let (_, no_color, _) = check(&[&spec], &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]);
    assert!(!styled(&no_color), "NO_COLOR wins over auto: {no_color:?}");
    // The same table under the styles: the header line, stripped, is the plain one.
    let header = |s: &str| s.lines().next().unwrap_or("").to_string();
    assert_eq!(strip_styles(&header(&always)), header(&plain));
}

/// A long check's progress line when stderr is not a terminal, with `extra` arguments.
fn progress_line(extra: &[&str]) -> String {
    let mut args = vec![
        "specs/pr59325-fix.toml",
        "--point",
        "requests=2",
        "--point",
        "prefill.tp=2",
        "--point",
        "decode.tp=2",
        "--point",
        "max-concurrent-batches=2",
        "--point",
        "prefill.pcp=1",
        "--threads",
        "1",
        // Every request explored: one standing for both would be done at once.
        "--no-independence",
    ];
    args.extend(extra);
    let (code, _, stderr) = check(&args, &[("KVCC_PROGRESS_INTERVAL", "0.05")]);
    assert_eq!(code, 0);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("kvcc: check 1/1 pr59325-fix"))
        .unwrap_or_else(|| panic!("a progress line: {stderr}"));
    assert!(line.contains(" states ("), "{line}");
    assert!(line.contains("/s), depth "), "{line}");
    assert!(line.contains(" MiB"), "{line}");
    line.to_string()
}

#[test]
fn a_long_check_is_not_silent_when_stderr_is_not_a_terminal() {
    // Without estimates (no terminal, no shards) a line cannot say how much is done: the
    // run's one check would sit at 0% however far it got.
    let line = progress_line(&[]);
    assert!(!line.contains("% done"), "{line}");
    // A shard estimates its checks, and says how far through them it is.
    let line = progress_line(&["--shard", "1/1"]);
    assert!(
        line.contains("; run ~") && line.ends_with("% done"),
        "{line}"
    );
}

/// Text without its ANSI style sequences (`ESC [ ... m`).
fn strip_styles(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}
