//! Issue 27: actionlint, with shellcheck on every `run:` script, finds nothing in the
//! workflows (`.github/workflows/*`) or in the Action's steps, and shellcheck nothing in
//! `scripts/*.sh` (which the steps call: the Action's install, the release build). actionlint reads an action's
//! metadata only where a workflow uses it (inputs, branding) and does not check a
//! composite action's steps, so the steps of `action.yml` are linted as the one job of a
//! workflow called with the action's inputs. Needs `bash scripts/install-actionlint.sh`:
//! without it the tests skip with a loud message, unless CI or KVCC_REQUIRE_ACTIONLINT is
//! set (`.ci/run` installs it and sets it), when they fail.

use crate::common::{output, root};
use std::path::{Path, PathBuf};
use std::process::Command;
use yaml_rust2::YamlLoader;

/// actionlint and shellcheck, as `scripts/install-actionlint.sh` installs them.
fn tools() -> Option<(PathBuf, PathBuf)> {
    let dir = std::env::var_os("KVCC_ACTIONLINT_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/kvcc/actionlint")))
        .unwrap_or_default()
        .join("bin");
    let (actionlint, shellcheck) = (dir.join("actionlint"), dir.join("shellcheck"));
    if actionlint.is_file() && shellcheck.is_file() {
        return Some((actionlint, shellcheck));
    }
    let required = ["CI", "KVCC_REQUIRE_ACTIONLINT"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()));
    assert!(
        !required,
        "actionlint is required (CI or KVCC_REQUIRE_ACTIONLINT) but not in {}: run bash scripts/install-actionlint.sh",
        dir.display()
    );
    eprintln!("\n*** SKIPPED: actionlint is not installed; `bash scripts/install-actionlint.sh` to lint the workflows ***\n");
    None
}

/// actionlint's exit code and findings for `files`, run from the repository root (where it
/// finds `.github/` and the action that `uses: ./` names).
fn lint(files: &[PathBuf]) -> Option<(i32, String)> {
    let (actionlint, shellcheck) = tools()?;
    let mut command = Command::new(actionlint);
    command
        .arg("-no-color")
        .arg("-shellcheck")
        .arg(shellcheck)
        .args(files)
        .current_dir(root());
    let (code, stdout, stderr) = output(&mut command);
    Some((code, format!("{stdout}{stderr}")))
}

fn workflows() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(".github/workflows"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
        .collect();
    files.sort();
    files
}

/// `action.yml`'s steps as the one job of a workflow that is called with the action's
/// inputs (as strings, with their defaults), so that actionlint checks their expressions,
/// the inputs of the actions they use, and their scripts with shellcheck.
fn action_as_workflow() -> String {
    let text = std::fs::read_to_string(root().join("action.yml")).unwrap();
    let action = &YamlLoader::load_from_str(&text).unwrap()[0];
    let mut workflow =
        String::from("name: action.yml as a workflow\non:\n  workflow_call:\n    inputs:\n");
    for (name, input) in action["inputs"].as_hash().expect("inputs") {
        let name = name.as_str().unwrap();
        let default = input["default"].as_str().unwrap_or_default();
        workflow += &format!("      {name}:\n        type: string\n        default: {default:?}\n");
    }
    workflow += "jobs:\n  action:\n    runs-on: ubuntu-latest\n    steps:\n";
    // The steps' own lines, indented from `runs.steps` (4) to `jobs.action.steps` (6).
    let steps: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "  steps:")
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .collect();
    assert!(steps.len() > 10, "runs.steps found in action.yml");
    for line in steps {
        workflow += &format!("  {line}\n");
    }
    workflow
}

#[test]
fn issue27_actionlint_finds_nothing_in_the_workflows() {
    let files = workflows();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(names.contains(&"kvcc.yml".to_string()), "{names:?}");
    let Some((code, findings)) = lint(&files) else {
        return;
    };
    assert_eq!(code, 0, "actionlint on {names:?}:\n{findings}");
    assert_eq!(findings, "");
}

#[test]
fn issue27_actionlint_finds_nothing_in_the_actions_steps() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("action-as-workflow.yml");
    let workflow = action_as_workflow();
    std::fs::write(&file, &workflow).unwrap();
    let Some((code, findings)) = lint(&[file]) else {
        return;
    };
    assert_eq!(
        code, 0,
        "actionlint on action.yml's steps:\n{findings}\n{workflow}"
    );
    assert_eq!(findings, "");
}

#[test]
fn issue27_shellcheck_finds_nothing_in_the_scripts() {
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(root().join("scripts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sh"))
        .collect();
    scripts.sort();
    assert!(
        scripts.iter().any(|s| s.ends_with("action-install.sh")),
        "{scripts:?}"
    );
    let Some((_, shellcheck)) = tools() else {
        return;
    };
    let (code, stdout, stderr) = output(Command::new(&shellcheck).args(&scripts));
    assert_eq!(code, 0, "shellcheck on {scripts:?}:\n{stdout}{stderr}");
    // The twin: the same run finds an unquoted variable.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.sh");
    std::fs::write(&broken, "#!/usr/bin/env bash\nrm -rf $1/cache\n").unwrap();
    let (code, stdout, _) = output(Command::new(&shellcheck).arg(&broken));
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("SC2086"), "{stdout}");
}

/// The twin: the same linter, run the same way, reports an unquoted variable (shellcheck),
/// an output of a step that does not exist and an untrusted value inside a script.
#[test]
fn issue27_actionlint_reports_a_broken_workflow() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broken.yml");
    std::fs::write(
        &file,
        "on: pull_request\njobs:\n  broken:\n    runs-on: ubuntu-latest\n    steps:\n      \
         - run: echo $HOME/a b\n      - run: echo \"${{ steps.nope.outputs.x }}\"\n      \
         - run: echo \"${{ github.event.pull_request.title }}\"\n",
    )
    .unwrap();
    let Some((code, findings)) = lint(&[file]) else {
        return;
    };
    assert_eq!(code, 1, "{findings}");
    for rule in [
        "SC2086",
        "property \"nope\" is not defined",
        "potentially untrusted",
    ] {
        assert!(findings.contains(rule), "no {rule} in:\n{findings}");
    }
}
