//! `kvcc check`.

use crate::atomic;
use crate::interrupt::{self, Interrupt};
use crate::out::outln;
use crate::progress::Progress;
use crate::report::json::{self, Position, RunIdentity, RunSettings};
use crate::report::{self, github, Output};
use crate::run::{self, Observed, Outcome, Settings};
use crate::shard::{self, Shard};
use crate::spec::point::{value_text, Selector};
use crate::spec::{self, Case, Spec};
use crate::{Build, Exit};
use kvcc_model::checker::{Cutoff, Limits};
use kvcc_model::InputError;
use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

/// More workers than this only cost memory and start-up (each has its own arena and
/// fingerprint cache) on any machine kvcc runs on.
pub const THREADS_MAX: i64 = 256;

/// Check specs: every matrix point of every spec, against its expected verdict.
///
/// Prints a table, as wide as the terminal (COLUMNS), of verdict (`holds`, `violated
/// (property: clause, ...)` or `inconclusive (which limit)`), expectation, unique states,
/// depth and time. Exit 0 when every verdict matches its expectation, 1 when any differs
/// (a run cut by a limit never matches), 2 on a usage or input error (JSON and JUnit
/// still say which), 130 or 143 when SIGINT or SIGTERM stopped it (one line says what was
/// cut; the table, JSON and JUnit report the checks that ran, the cut one inconclusive). Under GitHub Actions (GITHUB_ACTIONS=true) each mismatch is also an
/// `::error` annotation at the spec line stating the expectation, and a table with the
/// Markdown trace of every mismatch is appended to $GITHUB_STEP_SUMMARY. Progress goes to
/// stderr: a bar on a terminal, a line every few seconds elsewhere.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  kvcc check                                   every spec under specs/
  kvcc check specs/pr59325-regression.toml --all-traces --trace-dir traces
  kvcc check specs/ --format json --junit kvcc.xml
  kvcc check --shard 2/3 --format json > shard-2.jsonl   then: kvcc merge shard-*.jsonl
  kvcc check specs/pr59325-regression.toml --point prefill.pcp=2 --max-states 100000")]
pub struct Args {
    /// Spec files, or directories searched recursively for `*.toml`. A directory named
    /// `specs` (the default) is searched without its `bench/` subdirectory, the benchmark
    /// set: `kvcc-bench` runs it, `kvcc check specs/bench` checks it.
    #[arg(value_name = "PATH", default_value = "specs")]
    pub paths: Vec<String>,
    /// Check only matrix points where KEY has VALUE (repeatable; e.g. `prefill.pcp=2`).
    #[arg(long = "point", value_name = "KEY=VALUE")]
    pub points: Vec<Selector>,
    /// Worker threads per check, at most 256 [default: the available parallelism].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=THREADS_MAX))]
    pub threads: Option<u32>,
    /// Stop a check after this many unique states (overrides the spec's `[limits]`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_states: Option<u64>,
    /// Stop a check beyond this depth (overrides the spec's `[limits]`).
    #[arg(long, value_name = "N")]
    pub max_depth: Option<u32>,
    /// Stop a check after this many seconds (overrides the spec's `[limits]`).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: Option<u64>,
    /// Stop a check when kvcc's resident memory reaches SIZE (bytes, or with a K, M, G
    /// or T suffix: `2G`) [default: 80% of the machine's memory]. Reaching it makes the
    /// check inconclusive instead of ending the process.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_memory: Option<u64>,
    /// Report each violated clause's shortest counterexample instead of its cheapest
    /// (the default: fewest injected faults, then fewest lease expiries, then fewest steps).
    #[arg(long)]
    pub shortest: bool,
    /// With --trace-dir: write the traces of every violation, also those the spec expects
    /// (by default only checks whose verdict differs from the expectation get traces).
    #[arg(long, requires = "trace_dir")]
    pub all_traces: bool,
    /// Keep every state in full and compare states on every fingerprint match, so that no
    /// collision of the 64-bit fingerprints can hide a state (more memory; a collision
    /// found makes the check inconclusive).
    #[arg(long)]
    pub exact: bool,
    /// Explore without the symmetry reduction (interchangeable ranks and requests), to
    /// compare its counts and verdicts with the reduced run's: more states, same verdicts.
    #[arg(long)]
    pub no_symmetry: bool,
    /// Explore every request even where one stands for all: with no behaviour coupling
    /// requests (no finite D block pool, no head-only lease reaper), a check first
    /// explores one request among others that may keep the engines stepping, and when
    /// that holds, so do all (every clause is about one request); this flag skips it, to
    /// compare. A check that does not hold for the one request explores all anyway.
    #[arg(long)]
    pub no_independence: bool,
    /// Keep exploring past a state that breaks a safety clause, so that each check reports
    /// every clause its bug breaks, also those reachable only after another one broke (as
    /// every spec's `[expect] past-violations = true` does for itself). Costs states:
    /// everything reachable past a violation is explored too; a spec's expectation is
    /// judged against what this finds, so one written without it may see more clauses.
    #[arg(long, conflicts_with = "first_violation")]
    pub past_violations: bool,
    /// End each check at the first BFS depth where a clause breaks, as TLC does: an answer
    /// in the time to the shallowest violation, not to the whole state graph. Each clause
    /// broken at that depth is reported with a shortest counterexample; clauses the spec
    /// expects that were not broken by then are reported as not reached, and a check
    /// that breaks nothing runs whole, so a *holds* is still a full search.
    #[arg(long)]
    pub first_violation: bool,
    /// Output format: `human` (a table) or `json` (one object per check per line; see
    /// harness/FORMATS.md).
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// Also write JUnit XML (one testcase per check) to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<String>,
    /// Also write SARIF 2.1.0 to FILE: one result per mismatch at the spec line of its
    /// expectation, for GitHub code scanning (harness/FORMATS.md).
    #[arg(long, value_name = "FILE")]
    pub sarif: Option<String>,
    /// Write the counterexamples of every check whose verdict differs from its spec's
    /// expectation (add --all-traces for every violation, also expected ones) to DIR as
    /// NAME.txt, NAME.md (Mermaid), NAME.itf.json (ITF, for `kvcc replay`) and NAME.sh
    /// (the reproduce command). When nothing is written, a line on stderr says so.
    #[arg(long, value_name = "DIR")]
    pub trace_dir: Option<String>,
    /// Run only the I-th of N slices of the checks (1-based), balanced by estimated cost:
    /// N runners with `--shard 1/N` .. `N/N` run every check once; `kvcc merge` combines
    /// their `--format json` output into one report, JUnit and exit code. Under GitHub
    /// Actions a shard writes no annotations or job summary: `kvcc merge` writes them,
    /// once, for the whole run.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<Shard>,
    /// Print only the checks whose verdict differs from the expectation and the summary
    /// line, and no progress.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Human,
    Json,
}

pub fn exec(args: Args) -> Exit {
    let out = Output {
        json: args.format == Format::Json,
        junit: args.junit.clone(),
        sarif: args.sarif.clone(),
        quiet: args.quiet,
        trace_dir: args.trace_dir.clone(),
        github: github::active() && args.shard.is_none(),
    };
    let plan = match plan(&args.paths, &args.points) {
        Ok(plan) => plan,
        Err(errors) => return report::finish(&out, &Build::this(), &[], &errors),
    };
    let checks: Vec<(&Spec, &Case)> = plan
        .iter()
        .flat_map(|(spec, cases)| cases.iter().map(move |case| (spec, case)))
        .collect();
    // Traces are written after a check, which may take hours: a directory they cannot go
    // to is refused before the first one starts.
    if let Some(dir) = &args.trace_dir {
        if let Err(e) = atomic::usable_dir(Path::new(dir)) {
            let error = InputError {
                field: Some("--trace-dir".into()),
                ..InputError::file(dir, format!("cannot write traces there: {e}"))
            };
            return report::finish(&out, &Build::this(), &[], &[error]);
        }
    }
    let identity = identity(&args, &plan, checks.len());
    let interrupt = match Interrupt::install() {
        Ok(interrupt) => interrupt,
        Err(e) => {
            let error = InputError::usage(format!("cannot install the SIGINT handler: {e}"));
            return report::finish(&out, &Build::this(), &[], &[error]);
        }
    };
    // Estimates feed the shard assignment and the terminal's ETA; a plain run piped to a
    // log needs neither, and skips the probes.
    let bar = !args.quiet && std::io::stderr().is_terminal();
    let mut settings = settings(&args);
    settings.interrupt = Some(interrupt.flag());
    let estimates = (args.shard.is_some() || bar).then(|| shard::estimate(&checks, &settings));
    let selected: Vec<usize> = match (args.shard, &estimates) {
        (Some(s), costs) => {
            let costs = costs.as_ref().expect("a sharded run estimates its checks");
            let shard_of = shard::assign(costs, s.count);
            (0..checks.len())
                .filter(|&i| shard_of[i] == s.index - 1)
                .collect()
        }
        (None, _) => (0..checks.len()).collect(),
    };
    let mut progress = Progress::new(
        selected.len(),
        estimates.map(|costs| selected.iter().map(|&i| costs[i]).collect()),
        args.quiet,
    );
    settings.progress = Some(progress.counters());
    let mut outcomes: Vec<Outcome> = Vec::new();
    for (n, &i) in selected.iter().enumerate() {
        let (spec, case) = checks[i];
        if interrupt.signal().is_some() {
            break;
        }
        progress.start(n, &title(spec, case));
        let outcome = match run::check(spec, case, &settings) {
            Ok(o) => o,
            Err(e) => {
                drop(progress);
                return report::finish(&out, &Build::this(), &outcomes, &[e]);
            }
        };
        progress.finish();
        if out.json {
            let at = Position {
                check: i,
                checks: checks.len(),
                shard: args.shard,
            };
            progress.suspend(|| {
                outln!("{}", json::line(&outcome, at, &identity));
            });
        }
        outcomes.push(outcome);
    }
    drop(progress);
    let exit = report::finish(&out, &Build::this(), &outcomes, &[]);
    match interrupt.signal() {
        None => exit,
        Some(signal) => {
            eprintln!("{}", stopped(signal, &outcomes, selected.len()));
            Exit::Signal(signal)
        }
    }
}

/// The one line a signal's stop prints: which check it cut, if one, and how many never ran.
fn stopped(signal: i32, outcomes: &[Outcome], selected: usize) -> String {
    let name = interrupt::name(signal);
    let not_run = selected - outcomes.len();
    let interrupted = Cutoff::Interrupted.to_string();
    let cut = outcomes.last().and_then(|o| match &o.observed {
        Observed::Inconclusive(why) if *why == interrupted => Some((o, "inconclusive")),
        Observed::Violated {
            incomplete: Some(why),
        } if *why == interrupted => Some((o, "violated, incomplete")),
        _ => None,
    });
    let cut = match cut {
        Some((o, verdict)) => format!("cut {} ({verdict}), ", o.title()),
        None => String::new(),
    };
    format!(
        "kvcc: stopped by {name}: {cut}{not_run} of {selected} checks not run; reported above are the {} that ran",
        outcomes.len()
    )
}

/// Loads every spec and builds every case before anything runs: all input errors at once.
/// `kvcc-bench` plans its runs with it too.
pub fn plan(
    paths: &[String],
    points: &[Selector],
) -> Result<Vec<(Spec, Vec<Case>)>, Vec<InputError>> {
    let files = spec::discover(paths).map_err(|e| vec![e])?;
    let mut errors = Vec::new();
    let mut plan: Vec<(Spec, Vec<Case>)> = Vec::new();
    for file in files {
        let spec = match Spec::load_all(&file) {
            Ok(spec) => spec,
            Err(all) => {
                errors.extend(all);
                continue;
            }
        };
        let checked = match plan.iter().find(|(s, _)| s.name == spec.name) {
            Some((other, _)) => Err(InputError::file(
                &file,
                format!("spec name `{}` is also used by {}", spec.name, other.file),
            )),
            None => spec.cases(points),
        };
        match checked {
            Ok(cases) => plan.push((spec, cases)),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(plan)
    } else {
        Err(errors)
    }
}

/// What makes this run this run, for its JSON lines: `kvcc merge` puts together only
/// shards of one run.
fn identity(args: &Args, plan: &[(Spec, Vec<Case>)], checks: usize) -> RunIdentity {
    let settings = RunSettings {
        max_states: args.max_states,
        max_depth: args.max_depth,
        timeout_seconds: args.timeout,
        max_memory: args.max_memory,
        shortest: args.shortest,
        exact: args.exact,
        symmetry: !args.no_symmetry,
        independence: !args.no_independence,
        past_violations: args.past_violations,
        first_violation: args.first_violation,
        points: args.points.iter().map(selector_text).collect(),
    };
    let specs: Vec<(&str, &str)> = plan
        .iter()
        .map(|(spec, _)| (spec.file.as_str(), spec.source.text()))
        .collect();
    RunIdentity::new(settings, &specs, checks)
}

/// `path=value`, as `--point` takes it.
fn selector_text(s: &Selector) -> String {
    format!("{}={}", s.path, value_text(&s.value))
}

fn settings(args: &Args) -> Settings {
    let threads = args
        .threads
        .map(|t| t as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut limit_args = Vec::new();
    if let Some(n) = args.max_states {
        limit_args.extend(["--max-states".to_string(), n.to_string()]);
    }
    if let Some(n) = args.max_depth {
        limit_args.extend(["--max-depth".to_string(), n.to_string()]);
    }
    if let Some(n) = args.timeout {
        limit_args.extend(["--timeout".to_string(), n.to_string()]);
    }
    if let Some(n) = args.max_memory {
        limit_args.extend(["--max-memory".to_string(), n.to_string()]);
    }
    if args.shortest {
        limit_args.push("--shortest".to_string());
    }
    if args.all_traces {
        limit_args.push("--all-traces".to_string());
    }
    if args.exact {
        limit_args.push("--exact".to_string());
    }
    if args.no_symmetry {
        limit_args.push("--no-symmetry".to_string());
    }
    if args.no_independence {
        limit_args.push("--no-independence".to_string());
    }
    if args.past_violations {
        limit_args.push("--past-violations".to_string());
    }
    if args.first_violation {
        limit_args.push("--first-violation".to_string());
    }
    Settings {
        progress: None,
        threads,
        limits: Limits {
            max_states: args.max_states,
            max_depth: args.max_depth,
            timeout: args.timeout.map(Duration::from_secs),
            max_memory: args.max_memory.or_else(default_max_memory),
        },
        trace_dir: args.trace_dir.as_ref().map(Into::into),
        trace_dir_arg: args.trace_dir.clone(),
        limit_args,
        shortest: args.shortest,
        all_traces: args.all_traces,
        exact: args.exact,
        no_symmetry: args.no_symmetry,
        no_independence: args.no_independence,
        past_violations: args.past_violations,
        first_violation: args.first_violation,
        // Set once the handler is installed, in `exec`.
        interrupt: None,
    }
}

/// 80% of the machine's memory: a search that would take more ends inconclusive while
/// the machine (a CI runner) still has room to report it.
fn default_max_memory() -> Option<u64> {
    use procfs::Current;
    let total = procfs::Meminfo::current().ok()?.mem_total;
    Some(total / 5 * 4)
}

/// `2G`, `512M`, `64k` or plain bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, shift) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("`{text}`: the suffix must be K, M, G or T")),
            };
            (&text[..i], shift)
        }
        _ => (text, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}`: not a size (bytes, or a number with K, M, G or T)"))?;
    n.checked_mul(1 << shift)
        .filter(|&bytes| bytes > 0)
        .ok_or_else(|| format!("`{text}`: must be between 1 byte and 16 EiB"))
}

fn title(spec: &Spec, case: &Case) -> String {
    if case.point.is_empty() {
        spec.name.clone()
    } else {
        format!("{} [{}]", spec.name, case.point)
    }
}
