//! `kvcc-bench`: the benchmark runner, kept out of the user's `kvcc` binary. It plans
//! checks exactly as `kvcc check` does (the same spec loader and matrix) and measures them.

use clap::Parser;
use kvcc::cmd::check::{self, Format};
use kvcc::report::print_errors;
use kvcc::spec::point::Selector;
use kvcc::Exit;
use kvcc_bench::{self as bench, aggregator, Measured, RELEASE_BUILD};
use kvcc_model::InputError;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

// Measure with the allocator `kvcc` ships with.
#[global_allocator]
static ALLOCATOR: kvcc::allocator::Allocator = kvcc::allocator::Allocator;

fn main() -> ExitCode {
    ExitCode::from(exec(Args::parse()).code())
}

/// Measure the checker (time, states per second, memory) and the aggregator (reports per
/// second).
///
/// Runs every check (spec × matrix point) `--runs` times, each run in a child process of
/// this binary so that its peak resident memory is its own, and prints per check: unique
/// states, transitions, max depth, the search's wall seconds (median), unique states per
/// second (median), peak resident memory (VmHWM; the most any run used) and peak bytes per
/// unique state. Verdicts are still checked against each spec's expectation: a benchmark
/// of a wrong model is worthless. Exit 0 when every verdict matches, 1 when one differs,
/// the runs of a check explored different graphs or a run failed, 2 on a usage or input
/// error.
///
/// Measure a release build only: `cargo run --release -p kvcc-bench`. A build with
/// debug assertions warns, and its figures are not comparable. Other work on the machine
/// skews every figure: each records the load average it started under.
///
/// `--aggregator` measures rank-reports per second instead: through the aggregator core
/// on one core (policies countdown and strict), through the concurrent front with 8
/// reporter threads pinned to one core, then to two, and through `kvcc conform` on a
/// recorded run it writes to a temp dir (8 reader threads decoding into the front), on
/// one core, then two. Runs of the setups alternate.
#[derive(Debug, Parser)]
#[command(
    name = "kvcc-bench",
    version,
    after_help = "\
Examples:
  cargo run --release -p kvcc-bench                        the benchmark set in specs/bench/
  kvcc-bench specs/bench/pr56104-hetero-tp.toml --runs 5 --threads 2
  kvcc-bench specs/pr59325-fix.toml --point requests=2 --format json >> bench.jsonl
  kvcc-bench --aggregator
  python3 bench/aggregator_vs_vllm.py                    the string-id core against vLLM's"
)]
pub struct Args {
    /// Spec files, or directories searched recursively for `*.toml`.
    #[arg(value_name = "PATH", default_value = bench::DEFAULT_PATH)]
    pub paths: Vec<String>,
    /// Measure only matrix points where KEY has VALUE (repeatable; e.g. `prefill.pcp=2`).
    #[arg(long = "point", value_name = "KEY=VALUE")]
    pub points: Vec<Selector>,
    /// Runs per check (or per aggregator measurement); figures are their medians.
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// Worker threads per check.
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u32).range(1..=check::THREADS_MAX))]
    pub threads: u32,
    /// Explore every request even where one stands for all (as `kvcc check
    /// --no-independence`): how the search's raw speed is measured.
    #[arg(long)]
    pub no_independence: bool,
    /// Output format: `human` (a table) or `json` (one object per check per line; see
    /// harness/FORMATS.md).
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// Measure the aggregator core and its concurrent front instead of specs.
    #[arg(long, conflicts_with_all = ["paths", "points"])]
    pub aggregator: bool,
    /// Write the aggregator's string-id schedule to FILE as JSON (one ring: each step's
    /// `finished_sending` per rank) and exit: the workload `bench/aggregator_vs_vllm.py`
    /// times vLLM's aggregator on.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["paths", "points", "aggregator"])]
    pub aggregator_workload: Option<String>,
    /// Run the one check SPEC (with `--point`s selecting one matrix point) in this process
    /// and print its record: the child side of every run.
    #[arg(long, value_name = "SPEC", hide = true, conflicts_with = "aggregator")]
    pub one: Option<String>,
}

fn exec(args: Args) -> Exit {
    if let Some(file) = &args.one {
        return one(file, &args);
    }
    if !RELEASE_BUILD {
        eprintln!(
            "warning: this kvcc was built with debug assertions: its figures are not \
             comparable; measure with `cargo run --release -p kvcc-bench`"
        );
    }
    if let Some(file) = &args.aggregator_workload {
        let json = aggregator::workload_json(&aggregator::Workloads::new().names);
        return match std::fs::write(file, json) {
            Ok(()) => Exit::Ok,
            Err(e) => {
                print_errors(&[InputError::usage(format!("cannot write {file}: {e}"))]);
                Exit::Input
            }
        };
    }
    if args.aggregator {
        return aggregator_bench(&args);
    }
    let plan = match check::plan(&args.paths, &args.points) {
        Ok(plan) => plan,
        Err(errors) => {
            print_errors(&errors);
            return Exit::Input;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            print_errors(&[InputError::usage(format!(
                "cannot find this kvcc-bench binary to run checks in: {e}"
            ))]);
            return Exit::Input;
        }
    };
    let threads = args.threads as usize;
    let each = bench::Run {
        threads,
        no_independence: args.no_independence,
    };
    let runs = args.runs as usize;
    if args.format == Format::Human {
        let what = match args.no_independence {
            false => format!("{threads} threads per check"),
            true => format!("{threads} threads per check, every request explored"),
        };
        println!("{}\n", bench::banner(&what, runs, bench::load_average()));
        let _ = std::io::stdout().flush();
    }
    let total: usize = plan.iter().map(|(_, cases)| cases.len()).sum();
    let progress = std::io::stderr().is_terminal();
    let mut measured: Vec<Measured> = Vec::new();
    let mut failed = false;
    for (spec, cases) in &plan {
        for case in cases {
            let mut m = Measured {
                spec: spec.name.clone(),
                file: spec.file.clone(),
                point: case.point.clone(),
                expectation: case.expectation.clone(),
                threads,
                runs: Vec::new(),
                load_average: bench::load_average(),
            };
            for run in 1..=runs {
                if progress {
                    eprint!(
                        "\rbench {}/{total}, run {run}/{runs}: {}...\x1b[K",
                        measured.len() + 1,
                        m.title()
                    );
                }
                match bench::run_child(&exe, &spec.file, &case.point, each) {
                    Ok(record) => m.runs.push(record),
                    Err(e) => {
                        eprintln!("\rerror: {}: run {run}: {e}\x1b[K", m.title());
                        failed = true;
                        break;
                    }
                }
            }
            if m.runs.is_empty() {
                continue;
            }
            if !m.runs_agree() {
                eprintln!(
                    "\rerror: {}: the runs explored different graphs (the checker must be \
                     deterministic): {:?}\x1b[K",
                    m.title(),
                    m.runs
                        .iter()
                        .map(|r| (r.unique_states, r.transitions, r.max_depth))
                        .collect::<Vec<_>>()
                );
            }
            if args.format == Format::Json {
                println!("{}", bench::json_line(&m));
                let _ = std::io::stdout().flush();
            }
            measured.push(m);
        }
    }
    if progress {
        eprint!("\r\x1b[K");
    }
    let mismatched = measured.iter().filter(|m| !m.matches()).count();
    if args.format == Format::Human {
        print!("{}", bench::table(&measured));
        let checks = if measured.len() == 1 {
            "check"
        } else {
            "checks"
        };
        println!(
            "\n{} {checks}: {} as expected, {mismatched} mismatched",
            measured.len(),
            measured.len() - mismatched
        );
    }
    if failed || mismatched > 0 {
        Exit::Finding
    } else {
        Exit::Ok
    }
}

/// The child side: one check, in this process, its record on stdout.
fn one(file: &str, args: &Args) -> Exit {
    let plan = match check::plan(&[file.to_string()], &args.points) {
        Ok(plan) => plan,
        Err(errors) => {
            print_errors(&errors);
            return Exit::Input;
        }
    };
    let cases: Vec<_> = plan
        .iter()
        .flat_map(|(spec, cases)| cases.iter().map(move |case| (spec, case)))
        .collect();
    let [(spec, case)] = cases[..] else {
        print_errors(&[InputError::usage(format!(
            "--one needs --point selectors that pick exactly one matrix point of {file}, \
             they pick {}",
            cases.len()
        ))]);
        return Exit::Input;
    };
    match bench::run_here(
        spec,
        case,
        bench::Run {
            threads: args.threads as usize,
            no_independence: args.no_independence,
        },
    ) {
        Ok(record) => {
            println!("{}", serde_json::to_string(&record).unwrap_or_default());
            Exit::Ok
        }
        Err(e) => {
            print_errors(&[e]);
            Exit::Input
        }
    }
}

fn aggregator_bench(args: &Args) -> Exit {
    let runs = args.runs as usize;
    if args.format == Format::Human {
        let what = format!(
            "aggregator, {} ranks, countdown E = {}",
            aggregator::WORLD_SIZE,
            aggregator::WORLD_SIZE
        );
        println!("{}\n", bench::banner(&what, runs, bench::load_average()));
        let _ = std::io::stdout().flush();
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workloads = aggregator::Workloads::new();
    let mut measured: Vec<aggregator::Measured> = Vec::new();
    for setup in aggregator::SETUPS {
        if setup.cores > cores {
            eprintln!(
                "note: {} on {} cores skipped: this machine has {cores}",
                setup.bench, setup.cores
            );
            continue;
        }
        measured.push(aggregator::Measured {
            setup,
            timings: Vec::new(),
            load_average: bench::load_average(),
        });
    }
    // Run by run, every setup in turn: a slow spell of the machine then falls on every
    // setup alike, and the ratios (one core against two) compare runs taken together.
    for _ in 0..runs {
        for m in &mut measured {
            match aggregator::measure(&workloads, m.setup, 1) {
                Ok(timing) => m.timings.push(timing),
                Err(e) => {
                    eprintln!("error: aggregator {}: {e}", m.setup.bench);
                    return Exit::Finding;
                }
            }
        }
    }
    if args.format == Format::Json {
        for m in &measured {
            println!("{}", aggregator::json_line(m));
        }
    }
    if args.format == Format::Human {
        print!("{}", aggregator::table(&measured));
    }
    Exit::Ok
}
