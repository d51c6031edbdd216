//! The recorder as a vLLM plugin (issue 25, item 3): `recorder/` installed as a user
//! installs it, loaded by vLLM's own plugin loader, recording vLLM's real Scheduler and
//! KVOutputAggregator, and each recorded run read by this build's `kvcc conform`
//! (recorder/test_vllm_plugin.py). Needs vLLM's virtual environment and uv, like the
//! other vLLM tests: skipped loudly without them, failed when KVCC_REQUIRE_VLLM is set.

use crate::common::{root, KVCC};
use crate::confirm_vllm::vllm_python;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// The plugin's tests, which the run must report passed one by one.
const PYTHON_TESTS: usize = 10;

/// uv, which installs into a --target directory with the venv's own setuptools and
/// without the network (pip needs `wheel` besides; scripts/install-vllm.sh installs uv).
fn uv() -> Option<Command> {
    let works = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if works("uv", &[]) {
        return Some(Command::new("uv"));
    }
    if works("python3", &["-m", "uv"]) {
        let mut command = Command::new("python3");
        command.args(["-m", "uv"]);
        return Some(command);
    }
    assert!(
        std::env::var_os("KVCC_REQUIRE_VLLM").is_none(),
        "KVCC_REQUIRE_VLLM is set but uv is missing: run bash scripts/install-vllm.sh"
    );
    eprintln!(
        "\n*** SKIPPED: uv is not installed; `bash scripts/install-vllm.sh` installs it ***\n"
    );
    None
}

/// `recorder/` copied file by file: a build writes `build/` and `*.egg-info/` into the
/// tree it builds, which must not be the work tree.
fn copy_sources(into: &Path) {
    std::fs::create_dir_all(into).unwrap();
    for entry in std::fs::read_dir(root().join("recorder")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, into.join(path.file_name().unwrap())).unwrap();
        }
    }
}

#[test]
fn issue25_recorder_plugin_records_vllm_and_conform_finds_the_broken_connectors() {
    let Some(python) = vllm_python() else {
        return;
    };
    let Some(mut uv) = uv() else {
        return;
    };
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let sources = dir.path().join("recorder");
    let site = dir.path().join("site");
    copy_sources(&sources);
    // `pip install ./recorder`, into a throwaway directory: the cached venv stays as
    // install-vllm.sh left it.
    let install = uv
        .args([
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
        ])
        .arg("--python")
        .arg(&python)
        .arg("--target")
        .arg(&site)
        .arg(&sources)
        .output()
        .expect("uv runs");
    assert!(
        install.status.success(),
        "installing ./recorder failed: {}",
        String::from_utf8_lossy(&install.stderr)
    );
    let installed = started.elapsed();
    let python_path = std::env::join_paths([site.clone(), root().join("confirm")]).unwrap();
    let output = Command::new(&python)
        // -P: the recorder/ sources beside the test file must not shadow the install.
        .arg("-P")
        .arg(root().join("recorder/test_vllm_plugin.py"))
        .arg("-v")
        .current_dir(dir.path())
        .env("PYTHONPATH", python_path)
        .env("KVCC_PLUGIN_SITE", &site)
        .env("KVCC_BIN", KVCC)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("VLLM_PLUGINS")
        .env_remove("KVCC_RECORD_DIR")
        .env_remove("KVCC_RECORD_ENGINE")
        .output()
        .expect("vLLM's python runs");
    let report = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{report}");
    assert!(report.contains("\nOK"), "{report}");
    assert!(!report.contains("skipped"), "{report}");
    assert!(
        report.contains(&format!("Ran {PYTHON_TESTS} tests")),
        "{report}"
    );
    for test in [
        "test_vllm_loads_the_plugin_from_its_entry_point",
        "test_dropped_replica_reports_59325_leave_a_request_vllm_never_frees",
        "test_a_request_reported_twice_is_freed_before_every_rank_reported",
        "test_a_correct_connector_conforms",
    ] {
        assert!(
            report.contains(&format!("{test} (")),
            "{test} did not run: {report}"
        );
    }
    eprintln!(
        "recorder plugin: installed in {:.1} s, vLLM tests done in {:.1} s",
        installed.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
