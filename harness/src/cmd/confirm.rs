//! `kvcc confirm`.

use crate::confirm::{self, compare, facts_line, model_events, Job, Played};
use crate::out::outln;
use crate::report::print_errors;
use crate::simulate::{record_path, End};
use crate::spec::point::Point;
use crate::spec::Spec;
use crate::trace::replay::{in_topology, load, model_of};
use crate::Exit;
use kvcc_conform::format::Engine;
use kvcc_model::properties::{Kind, CLAUSES};
use kvcc_model::InputError;
use std::path::{Path, PathBuf};

/// Play a counterexample (or simulated runs) into vLLM's own scheduler and aggregator,
/// and say whether vLLM shows what the model shows.
///
/// For an ITF trace (`kvcc check --trace-dir` writes them): the trace's steps are
/// replayed against its spec (or --spec) and written as recorded runs, P's and D's
/// (docs/recorded-run.md: each step's per-rank connector outputs, the scheduler's
/// events). A Python package embedded in kvcc (confirm/kvcc_confirm) then builds vLLM's
/// real `Scheduler` for each engine, with vLLM's NixlConnector scheduler side registered
/// through `KVConnectorFactory`, brings each request to where the trace has it through
/// vLLM's own paths (prefill finishing, admission waiting for remote KV, aborts), feeds
/// every step's rank outputs through vLLM's `KVOutputAggregator` into
/// `Scheduler.update_from_output`, and, for a liveness clause, runs --quiet-steps more
/// steps in which no rank reports anything. kvcc compares vLLM's scheduler events
/// (delay-freed, waiting, woken, load-failed, aborted, freed, an exception that would kill
/// the engine) with the model's, step by step. "confirmed on vLLM X.Y.Z" when they agree
/// and vLLM shows the violation itself (blocks still held, a request never woken, an
/// aggregator still counting, the exception); otherwise the first step where vLLM and
/// the model part, with both sides' events and vLLM's facts.
///
/// For directories written by `kvcc simulate` (DIR/run-NNNN/ with model.json): each run
/// is played the same way (quiet steps when the model's run ended where it judges
/// liveness) and every run's events must agree; this is the differential test of the
/// model against vLLM.
///
/// vLLM runs in a virtual environment's Python: --python, else $KVCC_VLLM_PYTHON, else
/// ~/.cache/kvcc/vllm-venv/bin/python (scripts/install-vllm.sh makes it). Traces and
/// run directories may be given together, any number of each: vLLM is imported once.
/// Exit 0 when every trace is confirmed and every run agrees (or departs as its spec
/// states), 1 when a trace is not confirmed or a run parts unexplained, 2 bad input or
/// no usable vLLM.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  kvcc check specs/pr59325-regression.toml --all-traces --trace-dir traces
  kvcc confirm traces/pr59325-regression__<point>__eventually-freed__<clause>.itf.json
  kvcc confirm TRACE.itf.json --spec specs/pr59325-fix.toml     # the same steps with the fix's reports
  kvcc confirm traces/*.itf.json                                 # every trace, one vLLM process
  kvcc simulate specs/pr59325-fix.toml --runs 100 --out sim && kvcc confirm sim/run-*")]
pub struct Args {
    /// ITF traces and `kvcc simulate` run directories (each with model.json), in any
    /// number: all are played in one vLLM process, which pays vLLM's import once.
    #[arg(value_name = "TRACE|RUN_DIR", required = true)]
    pub inputs: Vec<String>,
    /// Replay a trace against this spec instead of the one it names.
    #[arg(long, value_name = "PATH")]
    pub spec: Option<String>,
    /// The Python of a virtual environment with vLLM.
    #[arg(long, value_name = "PATH")]
    pub python: Option<String>,
    /// Steps with no reports played after a liveness run, in which vLLM must still hold
    /// the obligation.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub quiet_steps: u64,
    /// Keep the recorded runs a trace is written as in DIR (default: a temporary
    /// directory, removed); with several traces, each in DIR/NAME, NAME the trace file's
    /// name without `.itf.json`.
    #[arg(long, value_name = "DIR")]
    pub out: Option<String>,
}

pub fn exec(args: Args) -> Exit {
    match confirm_all(&args) {
        Ok(exit) => exit,
        Err(e) => {
            print_errors(&[e]);
            Exit::Input
        }
    }
}

/// Every trace and every run directory among the inputs, prepared first (a bad input
/// ends the command before vLLM starts), then played in one vLLM process, then each
/// trace reported and the runs compared.
fn confirm_all(args: &Args) -> Result<Exit, InputError> {
    let (trace_files, run_dirs): (Vec<&String>, Vec<&String>) =
        args.inputs.iter().partition(|i| i.ends_with(".json"));
    if args.spec.is_some() && trace_files.is_empty() {
        return Err(InputError::usage(
            "--spec applies to a trace, not to run directories",
        ));
    }
    let scratch = tempfile::Builder::new()
        .prefix("kvcc-confirm-run-")
        .tempdir()
        .map_err(|e| InputError::usage(format!("cannot make a temporary directory: {e}")))?;
    let mut traces = Vec::new();
    for file in &trace_files {
        // One trace's recorded runs go to --out itself, several traces' each to a
        // directory of --out named after the trace file.
        let stem = Path::new(file.as_str())
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("trace")
            .trim_end_matches(".json")
            .trim_end_matches(".itf");
        let dir = match &args.out {
            Some(out) if trace_files.len() == 1 => PathBuf::from(out),
            Some(out) => Path::new(out).join(stem),
            None => scratch.path().join(format!("trace-{}", traces.len())),
        };
        traces.push(prepare_trace(args, file, dir)?);
    }
    let runs = run_dirs
        .iter()
        .map(|dir| prepare_run(args, dir))
        .collect::<Result<Vec<_>, _>>()?;
    let jobs: Vec<&Job> = traces
        .iter()
        .flat_map(|t| &t.jobs)
        .chain(runs.iter().flat_map(|r| &r.jobs))
        .collect();
    let started = std::time::Instant::now();
    let (version, played) = confirm::play(&python(args)?, &jobs).map_err(InputError::usage)?;
    let mut played = played.into_iter();
    let mut found = false;
    for trace in &traces {
        let mine: Vec<Played> = played.by_ref().take(trace.jobs.len()).collect();
        found |= !report_trace(trace, &version, &mine)?;
    }
    if !runs.is_empty() {
        let mine: Vec<Played> = played.collect();
        found |= !compare_runs(&runs, &version, &mine, started.elapsed())?;
    }
    Ok(if found { Exit::Finding } else { Exit::Ok })
}

fn python(args: &Args) -> Result<PathBuf, InputError> {
    confirm::python(args.python.as_deref()).map_err(InputError::usage)
}

/// A trace replayed against its spec and written as recorded runs, ready to play.
struct Trace {
    file: String,
    name: String,
    clause_kind: Kind,
    property: &'static str,
    steps: usize,
    model_violates: bool,
    quiet_steps: u64,
    jobs: Vec<Job>,
}

fn prepare_trace(args: &Args, file: &str, dir: PathBuf) -> Result<Trace, InputError> {
    let loaded = load(file)?;
    let model = model_of(file, &loaded.trace, args.spec.as_deref())?;
    let meta = &loaded.trace.meta;
    let Some(index) = CLAUSES
        .iter()
        .position(|c| c.property == meta.property && c.clause == meta.clause)
    else {
        return Err(InputError {
            field: Some("#meta.clause".into()),
            ..InputError::file(
                file,
                format!("kvcc has no clause `{}: {}`", meta.property, meta.clause),
            )
        });
    };
    let clause = &CLAUSES[index];
    if let Some(step) = loaded.actions.iter().position(|a| !in_topology(&model, a)) {
        return Err(InputError {
            field: Some(format!("states[{}]", step + 1)),
            ..InputError::file(
                file,
                "names a request, rank or read handle this model does not have",
            )
        });
    }
    let (recorder, states) = record_path(&model, &loaded.actions).map_err(|step| InputError {
        field: Some(format!("states[{step}]")),
        ..InputError::file(
            file,
            format!(
                "step {step}'s action is not enabled in this spec's model where the trace has led"
            ),
        )
    })?;
    let last = states.last().expect("a path has its initial state");
    let write = |engine: Engine, log: &crate::simulate::EngineLog| {
        let path = dir.join(engine.name());
        log.write(&path).map_err(|e| {
            InputError::file(&path.display().to_string(), format!("cannot write: {e}"))
        })
    };
    write(Engine::Prefill, &recorder.prefill)?;
    write(Engine::Decode, &recorder.decode)?;
    let quiet_steps = if clause.kind == Kind::Liveness {
        args.quiet_steps
    } else {
        0
    };
    let jobs = [Engine::Prefill, Engine::Decode]
        .map(|e| Job {
            dir: dir.join(e.name()),
            quiet_steps,
            failure_policy: confirm::failure_policy(&model.config),
        })
        .into();
    Ok(Trace {
        file: file.to_string(),
        name: format!("{}: {}", clause.property, clause.clause),
        clause_kind: clause.kind,
        property: clause.property,
        steps: loaded.actions.len(),
        model_violates: !(clause.holds)(&model.config, last),
        quiet_steps,
        jobs,
    })
}

/// Prints what vLLM did with `trace`'s steps; true when it confirms the violation.
fn report_trace(trace: &Trace, version: &str, played: &[Played]) -> Result<bool, InputError> {
    let Trace { file, name, .. } = trace;
    let death = confirm::kills_the_engine(name) && trace.model_violates;
    outln!(
        "{file}: {name} ({} steps) played into vLLM {version}{}",
        trace.steps,
        if trace.quiet_steps > 0 {
            format!(", then {} quiet steps", trace.quiet_steps)
        } else {
            String::new()
        }
    );
    for (job, p) in trace.jobs.iter().zip(played) {
        let events = model_events(&job.dir).map_err(InputError::usage)?;
        outln!(
            "  {}: E = {} of {} ranks, {} steps; vLLM's facts at the end: {}",
            p.engine,
            p.expected,
            p.world_size,
            p.steps,
            facts_line(p)
        );
        outln!("    vLLM's events: {}", show(&p.events));
        if let Some(parting) = compare(&events, p, death) {
            outln!("not confirmed: vLLM and the model part at the {parting}");
            outln!("  the model's {} log: {}", p.engine, show(&events));
            outln!("  vLLM's {} events: {}", p.engine, show(&p.events));
            return Ok(false);
        }
    }
    if !trace.model_violates {
        outln!(
            "not confirmed: under this spec the model's run does not end in {name}, and vLLM agrees with it event for event"
        );
        return Ok(false);
    }
    match evidence(trace.property, trace.clause_kind, death, played) {
        Some(evidence) => {
            outln!("confirmed on vLLM {version}: {name}: {evidence}");
            Ok(true)
        }
        None => {
            outln!(
                "not confirmed: vLLM agrees with the model event for event, but does not show {name} itself"
            );
            Ok(false)
        }
    }
}

fn show(events: &[confirm::Event]) -> String {
    if events.is_empty() {
        return "nothing".into();
    }
    events
        .iter()
        .map(|(s, e, r)| format!("{e} {r} @{s}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What in vLLM's own state shows the violation, once its events agree with the model's.
/// `death`: breaking the clause kills vLLM's engine, so its exception is the evidence.
fn evidence(property: &str, kind: Kind, death: bool, played: &[Played]) -> Option<String> {
    let held: Vec<String> = played
        .iter()
        .flat_map(|p| {
            p.facts
                .iter()
                .filter(|(_, f)| f.as_str() == "finished-blocks-held")
                .map(move |(r, _)| format!("{} still holds {r}'s blocks", p.engine))
        })
        .collect();
    let waiting: Vec<String> = played
        .iter()
        .flat_map(|p| {
            p.facts
                .iter()
                .filter(|(_, f)| f.as_str() == "waiting-for-remote-kvs")
                .map(move |(r, _)| format!("{r} still waits for remote KV on {}", p.engine))
        })
        .collect();
    let counting: Vec<String> = played
        .iter()
        .flat_map(|p| {
            p.aggregator_pending.iter().flat_map(move |(d, rs)| {
                rs.iter().map(move |(r, n)| {
                    format!(
                        "{}'s KVOutputAggregator waits for {n} more {d} report(s) of {r}",
                        p.engine
                    )
                })
            })
        })
        .collect();
    let died: Vec<String> = played
        .iter()
        .filter_map(|p| {
            p.error
                .as_ref()
                .map(|e| format!("{}: {}", p.engine, confirm::describe_error(e)))
        })
        .collect();
    let quiet = played.first().map_or(0, |p| p.quiet_steps);
    let after = format!(" after {quiet} quiet steps");
    let join = |v: Vec<String>, tail: &str| (!v.is_empty()).then(|| v.join("; ") + tail);
    if death {
        return join(died, "");
    }
    match (property, kind) {
        ("eventually-freed", _) => join(held, &after),
        ("eventually-woken", _) => join(waiting, &after),
        ("aggregator-drains", _) => join(counting, &after),
        (_, Kind::Liveness) => join([held, waiting, counting].concat(), &after),
        (_, Kind::Safety) => Some(
            "vLLM's scheduler frees and wakes exactly when the model's does; what breaks the clause (a read still in flight, a report's provenance) is the model's knowledge of the workers".into(),
        ),
    }
}

/// A `kvcc simulate` run directory, ready to play.
struct Run {
    dir: PathBuf,
    /// The model's run broke a clause that kills vLLM's engine.
    death: bool,
    departures: Vec<confirm::Departure>,
    jobs: Vec<Job>,
}

fn prepare_run(args: &Args, input: &str) -> Result<Run, InputError> {
    let dir = Path::new(input);
    let meta_file = dir.join("model.json");
    let shown = meta_file.display().to_string();
    let text = std::fs::read_to_string(&meta_file)
        .map_err(|e| InputError::file(&shown, format!("not a `kvcc simulate` run: {e}")))?;
    let meta: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| InputError::file(&shown, format!("not JSON: {e}")))?;
    let quiet = meta["ends"].as_str() == Some(End::Quiescent.text());
    let death = meta["violated"].as_array().is_some_and(|v| {
        v.iter()
            .any(|c| c.as_str().is_some_and(confirm::kills_the_engine))
    });
    let config = config_of(&shown, &meta)?;
    let jobs = [Engine::Prefill, Engine::Decode]
        .map(|engine| Job {
            dir: dir.join(engine.name()),
            quiet_steps: if quiet { args.quiet_steps } else { 0 },
            failure_policy: confirm::failure_policy(&config),
        })
        .into();
    Ok(Run {
        dir: dir.to_path_buf(),
        death,
        departures: confirm::departures(&config),
        jobs,
    })
}

/// `kvcc confirm RUN_DIR...`: every simulated run's events compared with vLLM's; true
/// when none parts unexplained.
fn compare_runs(
    runs: &[Run],
    version: &str,
    played: &[Played],
    elapsed: std::time::Duration,
) -> Result<bool, InputError> {
    let (mut parted, mut departed) = (0, 0);
    for (i, run) in runs.iter().enumerate() {
        for p in &played[2 * i..2 * i + 2] {
            let events = model_events(Path::new(&p.run)).map_err(InputError::usage)?;
            if let Some(parting) = compare(&events, p, run.death) {
                let dir = run.dir.display();
                if let Some(departure) = run.departures.iter().find(|d| d.explains(&parting)) {
                    departed += 1;
                    outln!(
                        "{dir}: parts where the spec departs from vLLM, at the {parting}: {departure}"
                    );
                } else {
                    parted += 1;
                    outln!("{dir}: parts at the {parting}");
                    outln!("  the model's log: {}", show(&events));
                    outln!("  vLLM's events: {}", show(&p.events));
                }
                break;
            }
        }
    }
    let agree = runs.len() - parted - departed;
    outln!(
        "{} runs played into vLLM {version} in {:.1} s: {agree} agree, {departed} part where their spec departs from vLLM's scheduler, {parted} part unexplained",
        runs.len(),
        elapsed.as_secs_f64(),
    );
    Ok(parted == 0)
}

/// The model configuration a simulated run came from (`model.json`'s spec and point).
fn config_of(file: &str, meta: &serde_json::Value) -> Result<kvcc_model::Config, InputError> {
    let spec = meta["spec"]
        .as_str()
        .ok_or_else(|| InputError::file(file, "no `spec`"))?;
    let point = Point::from_json(&meta["point"]).map_err(|m| InputError {
        field: Some("point".into()),
        ..InputError::file(file, m)
    })?;
    let (config, _notes) = Spec::load(spec)?.config_for_recorded(&point, None)?;
    Ok(config)
}
