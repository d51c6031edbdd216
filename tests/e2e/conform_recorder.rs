//! The vLLM recorder (recorder/kvcc_recorder.py), tested by its own Python unittest file
//! against objects shaped like vLLM's `KVConnectorOutput`, with this build's `kvcc` so
//! that every run it writes is also conformed. Skipped only when python3 is absent.

use std::process::Command;

fn python3() -> Option<Command> {
    let found = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    found.then(|| Command::new("python3"))
}

#[test]
fn recorder_unittests_pass_and_conform_reads_what_it_writes() {
    let Some(mut python) = python3() else {
        eprintln!("skipped: python3 is not installed");
        return;
    };
    let output = python
        .args(["-m", "unittest", "-v", "test_kvcc_recorder"])
        .current_dir(crate::common::root().join("recorder"))
        .env("KVCC_BIN", crate::common::KVCC)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs");
    let report = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{report}");
    assert!(report.contains("\nOK"), "{report}");
    // With KVCC_BIN set, no conform check may be skipped.
    assert!(!report.contains("skipped"), "{report}");
    let leak = report
        .lines()
        .find(|l| l.starts_with("test_the_59325_leak_is_flagged_with_the_silent_rank "));
    assert!(leak.is_some_and(|l| l.ends_with("... ok")), "{report}");
}
