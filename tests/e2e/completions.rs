//! Issue 27 (Completions and a man page): `kvcc completions SHELL` and `kvcc man` come from
//! the same clap definitions as `--help`. The bash script is sourced into a real bash and
//! asked to complete; the man page is rendered by groff (as `man` does) with warnings on,
//! and names every subcommand.

use crate::common::run;
use clap::CommandFactory;
use std::path::Path;
use std::process::Command;

/// Every subcommand of this kvcc's command line, as `--help` lists them.
fn subcommands() -> Vec<String> {
    kvcc::cmd::Cli::command()
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect()
}

/// What bash's completion offers for the words of `line` (the last one being completed),
/// with kvcc's script sourced, as bash-completion calls it.
fn bash_completes(script: &Path, line: &[&str]) -> Vec<String> {
    let words = line
        .iter()
        .map(|w| format!("'{w}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let program = format!(
        // No `set -e` past the source: compgen fails when nothing matches, which bash's
        // completion treats as no candidates.
        "source '{}' || exit 1; COMP_WORDS=({words}); COMP_CWORD={}; \
         COMP_LINE='{}'; COMP_POINT=${{#COMP_LINE}}; \
         _kvcc kvcc '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        line.len() - 1,
        line.join(" "),
        line[line.len() - 1],
        line[line.len().saturating_sub(2)],
    );
    let output = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .expect("bash runs");
    assert!(
        output.status.success(),
        "bash: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn issue27_bash_completion_completes_subcommands_and_their_flags() {
    let (code, script, stderr) = run(&["completions", "bash"]);
    assert_eq!(code, 0, "{stderr}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kvcc.bash");
    std::fs::write(&file, script).unwrap();

    let offered = bash_completes(&file, &["kvcc", ""]);
    for sub in subcommands() {
        assert!(offered.contains(&sub), "{sub} not offered: {offered:?}");
    }
    assert_eq!(bash_completes(&file, &["kvcc", "mer"]), ["merge"]);
    assert_eq!(
        bash_completes(&file, &["kvcc", "check", "--sha"]),
        ["--shard"]
    );
    // The twin: a word no subcommand starts with is offered nothing.
    assert!(bash_completes(&file, &["kvcc", "zzz"]).is_empty());
}

#[test]
fn issue27_every_shells_script_names_every_subcommand() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (code, script, stderr) = run(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {stderr}");
        for sub in subcommands() {
            assert!(script.contains(&sub), "{shell} script lacks {sub}");
        }
    }
    let (code, _, stderr) = run(&["completions", "tcsh"]);
    assert_eq!(code, 2, "an unknown shell is a usage error");
    assert!(stderr.contains("possible values"), "{stderr}");
}

/// groff renders `page` as `man` would, with every warning on; returns the text.
fn groff(page: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("page.1");
    std::fs::write(&file, page).unwrap();
    let output = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww"])
        .arg(&file)
        .env("GROFF_NO_SGR", "1")
        .output()
        .expect("groff is installed (the machine image and CI have groff-base)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "groff: {stderr}");
    assert!(stderr.is_empty(), "groff warns: {stderr}");
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn issue27_man_page_renders_and_names_every_subcommand() {
    let (code, page, stderr) = run(&["man"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        page.starts_with(".ie"),
        "roff: {}",
        &page[..80.min(page.len())]
    );
    let text = groff(&page);
    // groff hyphenates and overstrikes; compare words without them.
    let plain: String = text.replace("\u{2010}", "-").replace('\u{8}', "");
    for sub in subcommands() {
        assert!(
            plain.contains(&format!("kvcc-{sub}(1)")),
            "no {sub}: {plain}"
        );
    }
    assert!(
        plain.contains(&kvcc::COMMIT.to_string()),
        "the version section names the commit"
    );

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().display().to_string();
    let (code, _, stderr) = run(&["man", "--dir", &out]);
    assert_eq!(code, 0, "{stderr}");
    for sub in subcommands() {
        let page = std::fs::read_to_string(dir.path().join(format!("kvcc-{sub}.1")))
            .unwrap_or_else(|e| panic!("kvcc-{sub}.1: {e}"));
        groff(&page);
    }
    let missing = dir.path().join("missing").display().to_string();
    let (code, _, stderr) = run(&["man", "--dir", &missing]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not a directory"), "{stderr}");
}
