//! `kvcc confirm` against vLLM's own scheduler and aggregator (issue 25). Needs vLLM's
//! virtual environment (`bash scripts/install-vllm.sh`): without it the tests skip with a
//! loud message, unless KVCC_REQUIRE_VLLM is set (`.ci/run` sets it), when they fail.

use crate::common::{root, run};

const SEED_TRACE: &str = "docs/traces/pr59325-regression__prefill.pcp=2,prefill.tp=1,decode.tp=1,producer.lease=true__eventually-freed__delay-freed-request-never-freed.itf.json";

/// The Python of vLLM's virtual environment: `$KVCC_VLLM_PYTHON`, else the cached venv's.
/// None (after a loud message) when it is missing; a panic instead when
/// KVCC_REQUIRE_VLLM is set, so that CI fails rather than skips.
pub fn vllm_python() -> Option<std::path::PathBuf> {
    let python = std::env::var_os("KVCC_VLLM_PYTHON")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| std::path::PathBuf::from(h).join(".cache/kvcc/vllm-venv/bin/python"))
        });
    if let Some(python) = python.filter(|p| p.is_file()) {
        return Some(python);
    }
    assert!(
        std::env::var_os("KVCC_REQUIRE_VLLM").is_none(),
        "KVCC_REQUIRE_VLLM is set but vLLM's venv is missing: run bash scripts/install-vllm.sh"
    );
    eprintln!("\n*** SKIPPED: vLLM is not installed; `bash scripts/install-vllm.sh` to run the vLLM tests ***\n");
    None
}

fn vllm_available() -> bool {
    vllm_python().is_some()
}

#[test]
fn issue25_seed_regression_is_confirmed_on_vllm_and_its_fix_is_not() {
    if !vllm_available() {
        return;
    }
    // The trace as `kvcc check` writes it with this build's model.
    let dir = tempfile::tempdir().unwrap();
    let regression = root()
        .join("specs/pr59325-regression.toml")
        .display()
        .to_string();
    let trace =
        write_traces(&regression, dir.path()).join(SEED_TRACE.trim_start_matches("docs/traces/"));
    // The broken twin: the fix's runs at the same point, where every rank's report
    // reaches the aggregator: vLLM frees the request, as the model does. Both are played
    // in one call.
    let fix = root().join("specs/pr59325-fix.toml").display().to_string();
    let sim = dir.path().join("fix").display().to_string();
    let (code, _, err) = run(&[
        "simulate",
        &fix,
        "--point",
        "prefill.pcp=2",
        "--point",
        "prefill.tp=1",
        "--point",
        "decode.tp=1",
        "--seed",
        "2",
        "--runs",
        "6",
        "--out",
        &sim,
    ]);
    assert_eq!(code, 0, "{err}");
    let mut inputs: Vec<String> = (0..6).map(|i| format!("{sim}/run-{i:04}")).collect();
    inputs.push(trace.display().to_string());
    // The cold path: kvcc finds vLLM's venv itself and a fresh Python imports it.
    let mut args = vec!["confirm", "--spec", &regression];
    args.extend(inputs.iter().map(String::as_str));
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("confirmed on vLLM 0.34.0: eventually-freed"),
        "{out}"
    );
    assert!(out.contains("prefill still holds req0's blocks"), "{out}");
    assert!(out.contains("6 runs played into vLLM 0.34.0"), "{out}");
    let freed = (0..6).any(|i| {
        let log = std::fs::read_to_string(format!("{sim}/run-{i:04}/prefill/scheduler.jsonl"));
        log.is_ok_and(|l| l.contains("\"freed\""))
    });
    assert!(freed, "no fix run freed the request");
}

#[test]
fn issue25_simulated_runs_agree_with_vllm_and_a_wrong_model_event_parts() {
    if !vllm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("sim").display().to_string();
    let spec = root()
        .join("specs/pr59325-regression.toml")
        .display()
        .to_string();
    let (code, _, err) = run(&[
        "simulate", &spec, "--seed", "4", "--runs", "20", "--out", &out_dir,
    ]);
    assert_eq!(code, 0, "{err}");
    let mut runs: Vec<String> = (0..20).map(|i| format!("{out_dir}/run-{i:04}")).collect();
    // The twin, played beside them: a model log claiming a free vLLM never does parts.
    let (out, twin) = confirm_with_twin(
        &mut runs,
        dir.path(),
        "{\"step\":0,\"event\":\"freed\",\"request_id\":\"req7\"}",
    );
    assert!(
        out.contains(&format!("{twin}: parts at the prefill engine")),
        "{out}"
    );
}

/// A spec that states a scheduler behaviour vLLM 0.34 does not have (vLLM #43226's
/// free-at-once abort) parts from vLLM's own scheduler where that behaviour acts, and is
/// counted apart from unexplained partings; anything else at that step still parts.
#[test]
fn issue25_a_spec_departing_from_vllms_scheduler_parts_only_where_it_departs() {
    if !vllm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = root().join("specs/vllm-43226-stale-recv-after-abort.toml");
    let runs = simulate(&spec, &[], &dir.path().join("sim"), 40);
    let (code, out, err) = confirm(&runs, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(", 0 part unexplained"), "{out}");
    let departed = out
        .lines()
        .filter(|l| l.contains("parts where the spec departs from vLLM"))
        .collect::<Vec<_>>();
    assert!(
        !departed.is_empty(),
        "no run aborted a loading request: {out}"
    );
    assert!(
        departed[0].contains("scheduler.abort-loading = \"free-at-once\""),
        "{out}"
    );
    // The twin: an event of another kind at the departing step is no departure.
    let first = departed[0].split(':').next().unwrap();
    let step: u64 = departed[0]
        .split("before step ")
        .nth(1)
        .and_then(|s| s.split(':').next())
        .and_then(|s| s.parse().ok())
        .expect("the parting names its step");
    let log = std::path::Path::new(first).join("decode/scheduler.jsonl");
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str(&format!(
        "{{\"step\":{step},\"event\":\"woken\",\"request_id\":\"req1\"}}\n"
    ));
    std::fs::write(&log, text).unwrap();
    let (code, out, _) = confirm(&runs, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(", 1 part unexplained"), "{out}");
}

/// Every violated clause's trace of `spec`, as `kvcc check --all-traces` writes them with
/// this build's model, into `dir/traces` (returned).
fn write_traces(spec: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let traces = dir.join("traces");
    let trace_dir = traces.display().to_string();
    let (code, _, err) = run(&["check", spec, "--trace-dir", &trace_dir, "--all-traces"]);
    assert_eq!(code, 0, "{spec}: {err}");
    traces
}

/// Simulates `runs` runs of `spec` (seed 25) into `dir`; returns the run directories.
fn simulate(
    spec: &std::path::Path,
    points: &[&str],
    dir: &std::path::Path,
    runs: usize,
) -> Vec<String> {
    let sim = dir.display().to_string();
    let spec = spec.display().to_string();
    let count = runs.to_string();
    let mut simulate = vec!["simulate", spec.as_str()];
    for point in points {
        simulate.extend(["--point", point]);
    }
    simulate.extend(["--seed", "25", "--runs", &count, "--out", &sim]);
    let (code, _, err) = run(&simulate);
    assert_eq!(code, 0, "{err}");
    (0..runs).map(|i| format!("{sim}/run-{i:04}")).collect()
}

/// `kvcc confirm` of every input in one call, so one vLLM process plays them all, in a
/// child of this test process's warm vLLM ([`warm_python`]): (exit code, stdout, stderr).
fn confirm<S: AsRef<str>>(inputs: &[S], flags: &[&str]) -> (i32, String, String) {
    let python = warm_python().display().to_string();
    let mut args = vec!["confirm"];
    args.extend(inputs.iter().map(AsRef::as_ref));
    args.extend(flags);
    args.extend(["--python", &python]);
    run(&args)
}

/// The Python for `kvcc confirm --python` that plays each call in a child forked from one
/// vLLM imported once for this whole test process (tests/e2e/warm_vllm.py says why and
/// what the child shares). vLLM's import is about 20 s of CPU, and these tests made a
/// dozen calls; the seed test still runs the cold Python kvcc finds by itself.
fn warm_python() -> &'static std::path::Path {
    static WARM: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    WARM.get_or_init(|| {
        use std::io::BufRead;
        let venv = vllm_python().expect("vLLM is installed (the test checked)");
        // The server removes it when this process ends: its socket, log and client.
        let dir = tempfile::Builder::new()
            .prefix("kvcc-warm-vllm-")
            .tempdir()
            .unwrap()
            .keep();
        let script = root().join("tests/e2e/warm_vllm.py");
        let log = std::fs::File::create(dir.join("server.log")).unwrap();
        let mut server = std::process::Command::new(&venv)
            .arg(&script)
            .arg("serve")
            .arg(&dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("vLLM's Python starts");
        let mut ready = String::new();
        std::io::BufReader::new(server.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(
            ready.trim(),
            "ready",
            "the warm vLLM did not start: {}",
            std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
        );
        // It ends by itself within a second of this process.
        std::mem::forget(server);
        let client = dir.join("python");
        std::fs::write(
            &client,
            format!(
                "#!/bin/sh\nexec '{}' '{}' client '{}' \"$@\"\n",
                venv.display(),
                script.display(),
                dir.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&client, std::fs::Permissions::from_mode(0o755)).unwrap();
        client
    })
}

/// A copy of simulated run `run` at `to`, whose `engine` log gets `line` appended: a
/// model event vLLM does not do, played beside the untouched runs as their broken twin.
fn with_event(run: &str, to: &std::path::Path, engine: &str, line: &str) -> String {
    for entry in walk(std::path::Path::new(run)) {
        let target = to.join(entry.strip_prefix(run).unwrap());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &target).unwrap();
    }
    let log = to.join(engine).join("scheduler.jsonl");
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str(line);
    text.push('\n');
    std::fs::write(&log, text).unwrap();
    to.display().to_string()
}

/// Confirms `runs` with the broken twin of the first (its prefill log gets `line`, a
/// model event vLLM does not do, at `dir/twin`) played beside them: every run agrees and
/// the twin alone parts. Returns the output and the twin's directory.
fn confirm_with_twin(
    runs: &mut Vec<String>,
    dir: &std::path::Path,
    line: &str,
) -> (String, String) {
    let agree = runs.len();
    let twin = with_event(&runs[0], &dir.join("twin"), "prefill", line);
    runs.push(twin.clone());
    let (code, out, err) = confirm(runs, &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(&format!("{} runs played into vLLM 0.34.0", agree + 1)),
        "{out}"
    );
    assert!(
        out.contains(&format!(": {agree} agree, 0 part where")),
        "{out}"
    );
    assert!(out.contains(", 1 part unexplained"), "{out}");
    (out, twin)
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// What `out` says of `trace`: from its header line to the next trace's.
fn trace_block<'a>(out: &'a str, trace: &str) -> &'a str {
    let from = out
        .find(&format!("{trace}: "))
        .unwrap_or_else(|| panic!("{trace} is not reported: {out}"));
    let rest = &out[from + trace.len()..];
    rest.find(".itf.json: ").map_or(rest, |to| &rest[..to])
}

/// The lines of `out` about runs under `dir` that part as their spec states.
fn departures<'a>(out: &'a str, dir: &std::path::Path) -> Vec<&'a str> {
    let dir = dir.display().to_string();
    out.lines()
        .filter(|l| l.starts_with(&dir) && l.contains("parts where the spec departs from vLLM"))
        .collect()
}

/// The events of one engine's model log, in order: (step, event, request).
fn model_log(run: &str, engine: &str) -> Vec<(u64, String, String)> {
    let text = std::fs::read_to_string(format!("{run}/{engine}/scheduler.jsonl")).unwrap();
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["step"].as_u64().unwrap(),
                v["event"].as_str().unwrap().to_string(),
                v["request_id"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// P loading KV itself (`prefill.loads-kv`, kv_role kv_both) through vLLM's own paths:
/// the request arrives with do_remote_prefill and do_remote_decode and waits for remote
/// KV, P's aggregated finished_recving wakes it, vLLM prefills it and delays its free,
/// finished_sending frees it; every event where the model logs it. Client aborts are
/// off here: an abort while P loads is where the model and vLLM 0.34 differ (the next
/// test). The twin: a wake-up the model claims before P's load is in must part.
#[test]
fn kv_both_prefill_load_agrees_with_vllm_and_a_wake_up_vllm_did_not_do_parts() {
    if !vllm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("specs/kv-both-one-count-fix.toml")).unwrap();
    assert!(
        text.contains("\nclient-abort = true\n"),
        "the spec's faults moved"
    );
    let spec = dir.path().join("kv-both-one-count-fix-no-abort.toml");
    std::fs::write(
        &spec,
        text.replace("\nclient-abort = true\n", "\nclient-abort = false\n"),
    )
    .unwrap();
    let mut runs = simulate(&spec, &[], &dir.path().join("sim"), 10);
    for run in &runs {
        let kinds: Vec<String> = model_log(run, "prefill").into_iter().map(|e| e.1).collect();
        assert_eq!(
            kinds,
            ["waiting-for-remote-kvs", "woken", "delay-freed", "freed"],
            "{run}: P's load not exercised"
        );
    }
    // The twin, played beside them: the model claims P's wake-up before any worker
    // reported the load.
    let (out, twin) = confirm_with_twin(
        &mut runs,
        dir.path(),
        "{\"step\":0,\"event\":\"woken\",\"request_id\":\"req0\"}",
    );
    assert!(
        out.contains(&format!("{twin}: parts at the prefill engine, before step 0: the model logs waiting-for-remote-kvs req0, woken req0; vLLM waiting-for-remote-kvs req0")),
        "{out}"
    );
}

/// A client abort while P loads KV itself: vLLM 0.34.0's `finish_requests` ends the
/// request with its free delayed for the load (`_aborted_kv_loads`), and P's
/// finished_recving frees it, with nothing to send; the model's P does the same
/// (`PrefillPhase::AbortedLoadingKv`; it used to keep loading the aborted request and
/// then wake, prefill and delay-free it, which parted here in 365 campaign runs). The
/// fix spec with its client aborts on agrees run for run, and some of its runs abort
/// P's load.
#[test]
fn kv_both_abort_while_prefill_loads_frees_it_after_the_load_as_vllm_does() {
    if !vllm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = root().join("specs/kv-both-one-count-fix.toml");
    let runs = simulate(&spec, &[], dir.path(), 10);
    let (code, out, err) = confirm(&runs, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(", 0 part unexplained"), "{out}");
    let aborted_loading = runs
        .iter()
        .filter(|run| {
            let kinds: Vec<String> = model_log(run, "prefill").into_iter().map(|e| e.1).collect();
            kinds == ["waiting-for-remote-kvs", "aborted", "freed"]
        })
        .count();
    assert!(aborted_loading > 0, "no run aborted P's load: {out}");
}

/// vllm-ascend #6570's re-report reaches a scheduler that no longer knows the id. Under
/// vLLM's own assertion the model's run ends in `emitted-for-unknown-request`, and vLLM
/// dies in that step: they agree (what the model logs after the assertion in that step
/// never happens in vLLM). Under the knob's `drop` the model lives on and vLLM still
/// asserts: a stated departure, never an unexplained parting.
#[test]
fn issue25_a_completion_for_a_forgotten_request_kills_vllm_as_the_model_says() {
    if !vllm_available() {
        return;
    }
    let spec = root()
        .join("specs/vllm-ascend-6570-report-after-timeout.toml")
        .display()
        .to_string();
    // Both points' runs in one call.
    let dir = tempfile::tempdir().unwrap();
    let mut all = Vec::new();
    let mut points = Vec::new();
    for (point, dies) in [("assert", true), ("drop", false)] {
        let sim = dir.path().join(point);
        let point = format!("scheduler.unknown-completion={point}");
        let runs = simulate(std::path::Path::new(&spec), &[&point], &sim, 60);
        let reported_again = runs
            .iter()
            .filter(|r| {
                std::fs::read_to_string(format!("{r}/model.json"))
                    .unwrap()
                    .contains("emitted-twice")
            })
            .count();
        assert!(reported_again > 0, "{point}: no run re-reported");
        all.extend(runs);
        points.push((point, sim, if dies { 0 } else { reported_again }));
    }
    let (code, out, err) = confirm(&all, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(", 0 part unexplained"), "{out}");
    for (point, sim, departed) in points {
        assert_eq!(departures(&out, &sim).len(), departed, "{point}: {out}");
    }
}

/// vLLM #50297: a request preempted in its final step. The spec's `finishes-empty` point
/// states the behaviour before the fix, whose stale output finishes the request with no
/// blocks, and the model frees it there; vLLM 0.34.0 has the fix and keeps the request,
/// so those runs part as a stated departure, never unexplained. The fixed point (current
/// vLLM's) departs nowhere.
#[test]
fn issue25_a_final_step_preemption_before_50297_departs_from_vllm_and_the_fix_agrees() {
    if !vllm_available() {
        return;
    }
    let spec = root().join("specs/prefill-final-step-preemption.toml");
    let dir = tempfile::tempdir().unwrap();
    let mut all = Vec::new();
    let mut points = Vec::new();
    for (point, departs) in [("finishes-empty", true), ("drops-stale-output", false)] {
        let sim = dir.path().join(point);
        let point = format!("scheduler.final-step-preemption={point}");
        all.extend(simulate(&spec, &[&point, "requests=2"], &sim, 10));
        points.push((point, sim, departs));
    }
    let (code, out, err) = confirm(&all, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(", 0 part unexplained"), "{out}");
    for (point, sim, departs) in points {
        let departed = departures(&out, &sim);
        assert_eq!(!departed.is_empty(), departs, "{point}: {out}");
        assert!(
            departed
                .iter()
                .all(|l| l.contains("scheduler.final-step-preemption = \"finishes-empty\"")),
            "{point}: {out}"
        );
    }
}

/// P's own load (kv_both) on vLLM 0.34: a woken request finishes its prefill before P's
/// next step, and a second load completion for a request whose free is delayed frees its
/// blocks (`_update_from_kv_xfer_finished` takes it for an aborted load's). With both
/// restated in the model, the traces of `kv-both-one-count` that the second completion
/// makes (`exactly-once`, unconfirmed before, and `no-free-under-rdma`) are confirmed on
/// vLLM. The broken twin is the run the model wrote before the first rule
/// (the campaign's one unexplained parting, kept as a fixture): a step passed with the
/// woken request still prefilling, and the model freed it at an abort that vLLM's
/// finished request ignored.
#[test]
fn issue25_p_own_load_every_kv_both_trace_is_confirmed_and_the_old_models_run_parts() {
    if !vllm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = root()
        .join("specs/kv-both-one-count.toml")
        .display()
        .to_string();
    let traces = write_traces(&spec, dir.path());
    let mut written: Vec<_> = std::fs::read_dir(&traces)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".itf.json"))
        .collect();
    written.sort();
    assert_eq!(written.len(), 6, "{written:?}");
    // The clauses the second load completion breaks (the others are confirmed already
    // before it, by the same play), played with the old model's run in one call.
    let mut inputs: Vec<String> = written
        .iter()
        .map(|p| p.display().to_string())
        .filter(|name| name.contains("__exactly-once__") || name.contains("__no-free-under-rdma__"))
        .collect();
    assert_eq!(inputs.len(), 3, "{written:?}");
    let old = root()
        .join("tests/fixtures/confirm/woken-prefill-past-a-step")
        .display()
        .to_string();
    inputs.push(old);
    let kept = dir.path().join("recorded");
    let kept_arg = kept.display().to_string();
    let (code, out, err) = confirm(&inputs, &["--spec", &spec, "--out", &kept_arg]);
    assert_eq!(code, 1, "{out}{err}");
    for trace in &inputs[..3] {
        assert!(
            trace_block(&out, trace)
                .lines()
                .any(|l| l.starts_with("confirmed on vLLM 0.34.0")),
            "{trace}: {out}"
        );
        // Several traces' recorded runs are kept apart, each named after its trace.
        let stem = std::path::Path::new(trace)
            .file_name()
            .unwrap()
            .to_string_lossy();
        let stem = stem.trim_end_matches(".itf.json");
        assert!(
            kept.join(stem).join("prefill/scheduler.jsonl").is_file(),
            "{stem}"
        );
    }
    assert!(out.contains("1 runs played into vLLM 0.34.0"), "{out}");
    assert!(out.contains("1 part unexplained"), "{out}");
    assert!(
        out.contains("vLLM aborted req1, delay-freed req1, freed req0"),
        "{out}"
    );
}

/// vLLM #46240: a request that loads and saves at once (a connector that saves while it
/// loads takes over an aborted loader's free for its save) is aborted with both in
/// flight. Both of the bug spec's traces are confirmed on vLLM 0.34, the one that
/// breaks `exactly-once` by the AssertionError in `_update_from_kv_xfer_finished` that
/// kills the engine. The spec's own simulated runs agree with vLLM event for event; its
/// fixed twin (PR #56089's free after both completions, not in any vLLM release) parts
/// from vLLM only where it frees later, as a stated departure.
#[test]
fn issue24_an_abort_with_a_load_and_a_save_in_flight_kills_vllm_as_the_model_says() {
    if !vllm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bug = root().join("specs/vllm-46240-abort-load-and-save.toml");
    let traces = write_traces(&bug.display().to_string(), dir.path());
    let clauses = [
        (
            "exactly-once__emitted-for-unknown-request",
            "vLLM raised AssertionError at vllm/v1/core/sched/scheduler.py",
        ),
        (
            "recv-after-stable__prefill-before-load-complete",
            "vLLM's scheduler frees",
        ),
    ];
    let mut inputs: Vec<String> = clauses
        .iter()
        .map(|(clause, _)| {
            let name = format!("vllm-46240-abort-load-and-save__{clause}.itf.json");
            traces.join(name).display().to_string()
        })
        .collect();
    // The spec's runs and its fixed twin's, in the same call.
    let mut specs = Vec::new();
    for (spec, departs) in [
        ("specs/vllm-46240-abort-load-and-save.toml", false),
        ("specs/vllm-46240-abort-load-and-save-fix.toml", true),
    ] {
        let sim = dir.path().join(spec.trim_start_matches("specs/"));
        inputs.extend(simulate(&root().join(spec), &[], &sim, 30));
        specs.push((spec, sim, departs));
    }
    let (code, out, err) = confirm(&inputs, &[]);
    assert_eq!(code, 0, "{out}{err}");
    for ((clause, evidence), trace) in clauses.iter().zip(&inputs) {
        let block = trace_block(&out, trace);
        assert!(
            block.contains("confirmed on vLLM 0.34.0"),
            "{clause}: {out}"
        );
        assert!(block.contains(evidence), "{clause}: {out}");
        assert!(
            block.contains("aborted req0 @0, delay-freed req0 @0"),
            "{clause}: {out}"
        );
    }
    assert!(out.contains("60 runs played into vLLM 0.34.0"), "{out}");
    assert!(out.contains(", 0 part unexplained"), "{out}");
    for (spec, sim, departs) in specs {
        let departed = departures(&out, &sim);
        assert_eq!(!departed.is_empty(), departs, "{spec}: {out}");
        assert!(
            departed
                .iter()
                .all(|l| l.contains("scheduler.aborted-transfers = \"free-after-all\"")),
            "{spec}: {out}"
        );
    }
}

/// vLLM PRs #53250, #57705 (issue 24, real bug #8): a request D preempts after its load,
/// whose connector asks for a second load. The player cannot play D's preemption
/// (docs/vllm.md: D's log stops following a request at its wake-up, and vLLM preempts
/// only under its own pool's pressure), but the bug spec's runs log the second wait, and
/// they part from vLLM only there, as the stated departure: vLLM's NIXL lookup offers
/// nothing for a request it already loaded. The fixed twin's runs, whose preempted
/// request is prefilled locally past its wake-up, agree.
#[test]
fn issue24_a_second_load_after_a_preemption_on_d_parts_from_vllm_only_where_it_waits_again() {
    if !vllm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut all = Vec::new();
    let mut specs = Vec::new();
    for (spec, departs) in [
        ("specs/vllm-57705-second-load-after-preemption.toml", true),
        (
            "specs/vllm-57705-second-load-after-preemption-fix.toml",
            false,
        ),
    ] {
        let sim = dir.path().join(spec.trim_start_matches("specs/"));
        all.extend(simulate(&root().join(spec), &[], &sim, 30));
        specs.push((spec, sim, departs));
    }
    let (code, out, err) = confirm(&all, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(", 0 part unexplained"), "{out}");
    for (spec, sim, departs) in specs {
        let departed = departures(&out, &sim);
        assert_eq!(!departed.is_empty(), departs, "{spec}: {out}");
        assert!(
            departed
                .iter()
                .all(|l| l.contains("consumer.lookup-after-load = \"second-load\"")),
            "{spec}: {out}"
        );
    }
}
