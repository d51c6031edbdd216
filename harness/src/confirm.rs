//! `kvcc confirm`: a model run played into vLLM's own scheduler and aggregator.
//!
//! A run of the model (a counterexample's path, or a `kvcc simulate` run) is written as
//! recorded runs ([`crate::simulate::Recorder`]); the Python package `confirm/kvcc_confirm`
//! (embedded in this binary, written to a temporary directory) plays each engine's
//! directory into vLLM's real `Scheduler`, NixlConnector scheduler side and
//! `KVOutputAggregator`, with the Python of a virtual environment that has vLLM, and
//! prints what vLLM's scheduler did. This module compares it with the model's scheduler
//! log, step by step: the first step where the two sides' events differ is where they
//! *part*.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The package's files, embedded so an installed `kvcc` needs no checkout.
const PACKAGE: [(&str, &str); 5] = [
    (
        "kvcc_confirm/__init__.py",
        include_str!("../../confirm/kvcc_confirm/__init__.py"),
    ),
    (
        "kvcc_confirm/__main__.py",
        include_str!("../../confirm/kvcc_confirm/__main__.py"),
    ),
    (
        "kvcc_confirm/connector.py",
        include_str!("../../confirm/kvcc_confirm/connector.py"),
    ),
    (
        "kvcc_confirm/play.py",
        include_str!("../../confirm/kvcc_confirm/play.py"),
    ),
    (
        "kvcc_confirm/model/config.json",
        include_str!("../../confirm/kvcc_confirm/model/config.json"),
    ),
];

/// The environment variable naming the Python that has vLLM.
pub const PYTHON_ENV: &str = "KVCC_VLLM_PYTHON";

/// Where `scripts/install-vllm.sh` puts vLLM's virtual environment's Python.
pub fn default_python() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    Some(PathBuf::from(home).join(".cache/kvcc/vllm-venv/bin/python"))
}

/// The Python to run: `--python`, else `$KVCC_VLLM_PYTHON`, else the cached venv's.
pub fn python(flag: Option<&str>) -> Result<PathBuf, String> {
    let chosen = flag
        .map(PathBuf::from)
        .or_else(|| std::env::var_os(PYTHON_ENV).map(PathBuf::from))
        .or_else(default_python)
        .ok_or("no Python named: pass --python or set KVCC_VLLM_PYTHON")?;
    if chosen.is_file() {
        Ok(chosen)
    } else {
        Err(format!(
            "vLLM is not available: no Python at {} (install it with `bash scripts/install-vllm.sh`, or name one with --python or {PYTHON_ENV})",
            chosen.display()
        ))
    }
}

/// What vLLM did with one engine directory (`kvcc_confirm`'s JSON line).
#[derive(Clone, Debug, Deserialize)]
pub struct Played {
    pub run: String,
    pub engine: String,
    pub world_size: u32,
    pub expected: u32,
    pub steps: u64,
    pub quiet_steps: u64,
    /// (step, event, request), stamped as the recorded-run format stamps events.
    pub events: Vec<(u64, String, String)>,
    pub error: Option<PlayedError>,
    /// Each request's last fact in vLLM's scheduler, after the quiet steps.
    pub facts: BTreeMap<String, String>,
    /// Requests vLLM's aggregator still counts down: direction → request → reports to go.
    #[serde(default)]
    pub aggregator_pending: BTreeMap<String, BTreeMap<String, i64>>,
}

/// An exception vLLM raised: the engine would have died there.
#[derive(Clone, Debug, Deserialize)]
pub struct PlayedError {
    pub at: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    #[serde(rename = "where")]
    pub location: String,
}

/// One engine directory to play, and how many quiet steps follow its recorded ones.
pub struct Job {
    pub dir: PathBuf,
    pub quiet_steps: u64,
    /// vLLM's `kv_load_failure_policy` for the engine: the model's knob.
    pub failure_policy: &'static str,
}

/// vLLM's name for the model's `kv_load_failure_policy`.
pub fn failure_policy(config: &kvcc_model::Config) -> &'static str {
    match config.scheduler.kv_load_failure_policy {
        kvcc_model::config::KvLoadFailurePolicy::Fail => "fail",
        kvcc_model::config::KvLoadFailurePolicy::Recompute => "recompute",
    }
}

/// Plays `jobs` in one Python process (vLLM is imported once). Returns vLLM's version
/// and one [`Played`] per job, in order.
pub fn play(python: &Path, jobs: &[&Job]) -> Result<(String, Vec<Played>), String> {
    let package = tempfile::Builder::new()
        .prefix("kvcc-confirm-")
        .tempdir()
        .map_err(|e| format!("cannot make a temporary directory: {e}"))?;
    for (name, text) in PACKAGE {
        let path = package.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    // One process for every job, each line carrying its own settings: vLLM's import is
    // most of a small confirm's time.
    let mut command = Command::new(python);
    command
        .arg("-m")
        .arg("kvcc_confirm")
        .arg("--jobs-from-stdin")
        .env("PYTHONPATH", package.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let mut list = String::new();
    for job in jobs {
        let line = serde_json::json!({
            "dir": job.dir.display().to_string(),
            "quiet_steps": job.quiet_steps,
            "failure_policy": job.failure_policy,
        });
        list.push_str(&line.to_string());
        list.push('\n');
    }
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(list.as_bytes())
            .map_err(|e| format!("cannot write to {}: {e}", python.display()))?;
    }
    let output = child
        .wait_with_output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("kvcc_confirm") || l.contains("Error"))
            .collect();
        return Err(format!(
            "vLLM is not available: {} -m kvcc_confirm exited with {}: {}",
            python.display(),
            output.status,
            if last.is_empty() {
                stderr.lines().last().unwrap_or("").to_string()
            } else {
                last.join("; ")
            }
        ));
    }
    let mut lines = stdout.lines();
    let head: serde_json::Value = lines
        .next()
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or("kvcc_confirm printed no version line")?;
    let version = head["vllm_version"]
        .as_str()
        .unwrap_or("unknown")
        .to_string();
    let mut played: Vec<Option<Played>> = vec![None; jobs.len()];
    for (slot, line) in played.iter_mut().zip(&mut lines) {
        let one: Played = serde_json::from_str(line)
            .map_err(|e| format!("kvcc_confirm printed an unreadable line: {e}: {line}"))?;
        *slot = Some(one);
    }
    let played = played
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            p.ok_or_else(|| format!("kvcc_confirm did not play {}", jobs[i].dir.display()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((version, played))
}

/// One scheduler event: (step, event, request).
pub type Event = (u64, String, String);

/// The model's scheduler log of an engine directory (`scheduler.jsonl`).
pub fn model_events(dir: &Path) -> Result<Vec<Event>, String> {
    let file = dir.join("scheduler.jsonl");
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut events = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("{}:{}: {e}", file.display(), n + 1))?;
        let (Some(step), Some(event), Some(request)) = (
            v["step"].as_u64(),
            v["event"].as_str(),
            v["request_id"].as_str(),
        ) else {
            return Err(format!(
                "{}:{}: not a scheduler event",
                file.display(),
                n + 1
            ));
        };
        events.push((step, event.to_string(), request.to_string()));
    }
    Ok(events)
}

/// Where vLLM and the model part in one engine run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parting {
    pub engine: String,
    /// The step stamp (steps aggregated before) of the first difference.
    pub step: u64,
    /// The model's events at that step, and vLLM's.
    pub model: Vec<String>,
    pub vllm: Vec<String>,
    /// What else vLLM says there (an exception), if anything.
    pub note: Option<String>,
}

impl Parting {
    /// The model's events at the step that vLLM's lack.
    fn model_only(&self) -> Vec<&String> {
        self.model
            .iter()
            .filter(|e| !self.vllm.contains(e))
            .collect()
    }

    /// vLLM's events at the step that the model's lack.
    fn vllm_only(&self) -> Vec<&String> {
        self.vllm
            .iter()
            .filter(|e| !self.model.contains(e))
            .collect()
    }

    /// vLLM's scheduler raised an AssertionError there.
    fn asserted(&self) -> bool {
        self.note
            .as_deref()
            .is_some_and(|n| n.contains("AssertionError"))
    }
}

impl std::fmt::Display for Parting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[String]| {
            if v.is_empty() {
                "nothing".to_string()
            } else {
                v.join(", ")
            }
        };
        write!(
            f,
            "{} engine, before step {}: the model logs {}; vLLM {}",
            self.engine,
            self.step,
            list(&self.model),
            list(&self.vllm)
        )?;
        if let Some(note) = &self.note {
            write!(f, "; {note}")?;
        }
        Ok(())
    }
}

/// A scheduler behaviour a spec states that the played vLLM's scheduler does not have (an
/// older vLLM's, or a proposed fix's), or its played connector's scheduler side (NIXL's). vLLM's own scheduler code runs when a run is
/// played, not the knob, so a run that exercises the behaviour parts from the model
/// exactly where the behaviour acts: the parting is the spec's statement, not a
/// disagreement about vLLM. Anywhere else the run must still agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Departure {
    /// The knob and the spec's value, as a spec writes them.
    pub knob: &'static str,
    pub value: &'static str,
    /// What the played vLLM does instead.
    pub vllm: &'static str,
    /// The engine whose scheduler acts: "prefill" or "decode".
    engine: &'static str,
    /// How a run parts where the behaviour acts.
    shows: Shows,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shows {
    /// The model frees a request at the step the client aborts it; vLLM keeps it.
    FreedAtAbort,
    /// vLLM's scheduler raises an AssertionError where the model's scheduler skips a
    /// completion, having logged nothing the model does not.
    AssertionWhereSkipped,
    /// The model frees a request whose stale final output finished it with no blocks;
    /// vLLM drops that output and keeps the request: the model's extra events are frees
    /// only, and vLLM logs nothing the model does not.
    FreedWhereKept,
    /// The model frees a request aborted with a load and a save in flight once both have
    /// completed; vLLM frees it at the first (its event a free the model does not log
    /// yet), and when both come in one step its second completion asserts (the model
    /// logs a free, and whatever else that step does, which vLLM's dead step never logs).
    FreedAtFirstCompletion,
    /// The model's request waits for remote KV a second time (its connector asked for a
    /// second load after a preemption); vLLM's NIXL lookup offers nothing then, so vLLM
    /// logs nothing the model does not, and the model's extra events are such waits only.
    WaitsAgain,
}

impl std::fmt::Display for Departure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the spec states {} = \"{}\", which the played vLLM's scheduler does not have (it does: {})",
            self.knob, self.value, self.vllm
        )
    }
}

/// The spec's departures from vLLM 0.34's scheduler, among the behaviours a played run
/// reaches (aborts and completions; the pool's admission is not played).
pub fn departures(config: &kvcc_model::Config) -> Vec<Departure> {
    use kvcc_model::config::{
        AbortFinished, AbortLoading, AbortedTransfers, FinalStepPreemption, LookupAfterLoad,
        UnknownCompletion,
    };
    let s = &config.scheduler;
    let mut found = Vec::new();
    if s.abort_loading == AbortLoading::FreeAtOnce {
        found.push(Departure {
            knob: "scheduler.abort-loading",
            value: "free-at-once",
            vllm: "the free of a request aborted while loading waits for its finished_recving (finish_requests, _aborted_kv_loads)",
            engine: "decode",
            shows: Shows::FreedAtAbort,
        });
    }
    if s.abort_finished == AbortFinished::Free {
        found.push(Departure {
            knob: "scheduler.abort-finished",
            value: "free",
            vllm: "an abort skips a finished request whose free is delayed (finish_requests)",
            engine: "prefill",
            shows: Shows::FreedAtAbort,
        });
    }
    if s.final_step_preemption == FinalStepPreemption::FinishesEmpty {
        found.push(Departure {
            knob: "scheduler.final-step-preemption",
            value: "finishes-empty",
            vllm: "a preempted request's stale final output is dropped and the request waits to be prefilled again (#50297, update_from_output)",
            engine: "prefill",
            shows: Shows::FreedWhereKept,
        });
    }
    if s.aborted_transfers == AbortedTransfers::FreeAfterAll && config.prefill.saves_while_loading {
        found.push(Departure {
            knob: "scheduler.aborted-transfers",
            value: "free-after-all",
            vllm: "_update_from_kv_xfer_finished frees a finished request at the first completion naming it, receives before sends (PR #56089, freeing after both, is open)",
            engine: "prefill",
            shows: Shows::FreedAtFirstCompletion,
        });
    }
    if config.consumer.lookup_after_load == LookupAfterLoad::SecondLoad {
        found.push(Departure {
            knob: "consumer.lookup-after-load",
            value: "second-load",
            vllm: "a request rescheduled after a preemption is looked up again, and the played NIXL scheduler side offers nothing once update_state_after_alloc cleared do_remote_prefill (get_num_new_matched_tokens; MoRIIO's too since PRs #53250, #57705)",
            engine: "decode",
            shows: Shows::WaitsAgain,
        });
    }
    if s.unknown_completion == UnknownCompletion::Drop {
        for engine in ["prefill", "decode"] {
            found.push(Departure {
                knob: "scheduler.unknown-completion",
                value: "drop",
                vllm: "_update_from_kv_xfer_finished asserts a completed id is still known",
                engine,
                shows: Shows::AssertionWhereSkipped,
            });
        }
    }
    found
}

impl Departure {
    /// Whether `parting` is where this behaviour acts, and nothing else.
    pub fn explains(&self, parting: &Parting) -> bool {
        if parting.engine != self.engine {
            return false;
        }
        match self.shows {
            Shows::FreedAtAbort => {
                let freed: Vec<&str> = parting
                    .model
                    .iter()
                    .filter_map(|e| e.strip_prefix("freed "))
                    .collect();
                !freed.is_empty()
                    && parting.model_only().iter().all(|e| {
                        e.strip_prefix("freed ").is_some_and(|r| {
                            parting.model.contains(&format!("aborted {r}"))
                                && parting.vllm.contains(&format!("aborted {r}"))
                        })
                    })
                    && parting.vllm_only().is_empty()
            }
            Shows::FreedWhereKept => {
                parting.vllm_only().is_empty()
                    && parting.model_only().iter().all(|e| e.starts_with("freed "))
            }
            Shows::FreedAtFirstCompletion => {
                let frees = |e: &&String| e.starts_with("freed ");
                let (model_extra, vllm_extra) = (parting.model_only(), parting.vllm_only());
                // Freed at the first completion, in a step of its own; or both in one
                // step, where vLLM's engine dies at the second and nothing the model logs
                // after it in that step (other requests' events too) happens in vLLM.
                let first_freed = !vllm_extra.is_empty()
                    && vllm_extra.iter().all(frees)
                    && model_extra.iter().all(frees);
                let second_asserted =
                    parting.asserted() && vllm_extra.is_empty() && model_extra.iter().any(frees);
                first_freed || second_asserted
            }
            Shows::WaitsAgain => {
                let model_extra = parting.model_only();
                parting.vllm_only().is_empty()
                    && !model_extra.is_empty()
                    && model_extra
                        .iter()
                        .all(|e| e.starts_with("waiting-for-remote-kvs "))
            }
            // vLLM's step stops at the exception: what the model logs after it in that
            // step never happens there.
            Shows::AssertionWhereSkipped => parting.vllm_only().is_empty() && parting.asserted(),
        }
    }
}

/// Does breaking this clause (`property: clause`) kill vLLM's engine? Every
/// `engine-survives` clause, and a completion for a request the scheduler no longer
/// knows, on which `_update_from_kv_xfer_finished` asserts.
pub fn kills_the_engine(clause: &str) -> bool {
    clause.starts_with("engine-survives:") || clause == "exactly-once: emitted-for-unknown-request"
}

/// The steps an exception ended vLLM's engine at (its recorded step), if any.
fn error_step(played: &Played) -> Option<u64> {
    let error = played.error.as_ref()?;
    let at = error.at.as_str();
    if let Some(n) = at.strip_prefix("step ") {
        n.parse::<u64>().ok().map(|n| n + 1)
    } else if let Some(n) = at.strip_prefix("scheduler input before step ") {
        n.parse().ok()
    } else if let Some(n) = at.strip_prefix("quiet step ") {
        n.parse::<u64>().ok().map(|n| played.steps + 1 + n)
    } else {
        Some(0)
    }
}

/// The first step where vLLM's events differ from the model's, or where vLLM raised
/// (unless `death_expected`: the model's run ends in the engine's death there too).
pub fn compare(model: &[Event], played: &Played, death_expected: bool) -> Option<Parting> {
    let at = |events: &[Event], step: u64| -> Vec<String> {
        let mut v: Vec<String> = events
            .iter()
            .filter(|e| e.0 == step)
            .map(|e| format!("{} {}", e.1, e.2))
            .collect();
        v.sort();
        v
    };
    let raised = error_step(played);
    let last = model
        .iter()
        .chain(&played.events)
        .map(|e| e.0)
        .chain(raised)
        .max()
        .unwrap_or(0);
    for step in 0..=last {
        let (m, v) = (at(model, step), at(&played.events, step));
        let died = raised == Some(step);
        // An engine that dies mid-step logs only what came before its exception; the
        // model's events after it in that step never happen.
        if died && death_expected && v.iter().all(|e| m.contains(e)) {
            return None;
        }
        if m != v {
            return Some(Parting {
                engine: played.engine.clone(),
                step,
                model: m,
                vllm: v,
                note: played.error.as_ref().filter(|_| died).map(describe_error),
            });
        }
        if died {
            if death_expected {
                return None;
            }
            return Some(Parting {
                engine: played.engine.clone(),
                step,
                model: m,
                vllm: v,
                note: played.error.as_ref().map(describe_error),
            });
        }
    }
    None
}

pub fn describe_error(e: &PlayedError) -> String {
    // A bare `assert` raises with no message.
    let message = if e.message.is_empty() {
        String::new()
    } else {
        format!(": {}", e.message)
    };
    format!(
        "vLLM raised {}{message} at {} ({})",
        e.kind, e.location, e.at
    )
}

/// vLLM's facts of a run, for a reader: each request's last fact and what its
/// aggregator still counts.
pub fn facts_line(played: &Played) -> String {
    let mut parts: Vec<String> = played
        .facts
        .iter()
        .map(|(r, f)| format!("{r}: {f}"))
        .collect();
    for (direction, requests) in &played.aggregator_pending {
        for (r, n) in requests {
            parts.push(format!("aggregator {direction} {r}: {n} to go"));
        }
    }
    if parts.is_empty() {
        "no request".into()
    } else {
        parts.join("; ")
    }
}
