//! `kvcc conform`.

use crate::out::{out, outln};
use crate::report::print_errors;
use crate::Exit;
use kvcc_conform::format::PolicyName;
use kvcc_conform::{render, Options, RunReport};

/// Check recorded runs against the completion contract.
///
/// Each RUN_DIR is one engine's recording (docs/recorded-run.md): `header.json`, one
/// `rank-<N>.jsonl` per worker rank, `scheduler.jsonl`. A directory without a header
/// whose subdirectories have one (`kvcc simulate`'s `run-0000/`) stands for those. The
/// rank files are read in parallel, one thread each, into the same concurrent aggregator
/// the model and the loom suite use; monitors check exactly-once, quorum-sound,
/// count-conserved and report-provenance as steps are aggregated, and at the end report
/// what is still pending (eventually-freed, eventually-woken, aggregator-drains) with the
/// ranks that never reported it. Every finding names its property, request, ranks and
/// the FILE:LINE of its evidence. Files are streamed: memory follows the requests in
/// flight, not the size of the run.
///
/// Exit 0 when every run conforms, 1 on a finding, 2 on bad input (a missing header or
/// rank file, an unknown rank file, a truncated or invalid line, a line over 4 MiB, a
/// step out of order).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  kvcc conform recorded/prefill recorded/decode
  kvcc simulate specs/pr59325-regression.toml --seed 1 --runs 4 --out sim && kvcc conform sim/run-*
  kvcc conform recorded/prefill --policy strict --format md >> \"$GITHUB_STEP_SUMMARY\"")]
pub struct Args {
    /// Recorded run directories (one engine each, or a directory of them).
    #[arg(value_name = "RUN_DIR", required = true)]
    pub runs: Vec<String>,
    /// Output format: `human`, `md` (Markdown) or `json` (one object per run per line).
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// Count reports under this aggregator policy instead of the header's.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub policy: Option<PolicyArg>,
    /// Steps a request is remembered after its lifetime ends: a late report within them
    /// is a resend or one beyond E, after them an unannounced report.
    #[arg(long, value_name = "STEPS", default_value_t = Options::default().grace_steps)]
    pub grace_steps: u64,
    /// Findings kept per property clause; the rest are counted.
    #[arg(long, value_name = "N", default_value_t = Options::default().findings_per_clause_max as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_findings: u64,
    /// Print bytes read, throughput and peak memory (VmHWM) to stderr.
    #[arg(long)]
    pub stats: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Human,
    Md,
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyArg {
    Countdown,
    Strict,
}

pub fn exec(args: Args) -> Exit {
    let runs = match kvcc_conform::discover(&args.runs) {
        Ok(runs) => runs,
        Err(e) => {
            print_errors(&[e]);
            return Exit::Input;
        }
    };
    let options = Options {
        policy: args.policy.map(|p| match p {
            PolicyArg::Countdown => PolicyName::Countdown,
            PolicyArg::Strict => PolicyName::Strict,
        }),
        grace_steps: args.grace_steps,
        findings_per_clause_max: usize::try_from(args.max_findings).unwrap_or(usize::MAX),
    };
    let mut reports: Vec<RunReport> = Vec::new();
    for run in &runs {
        let report = match kvcc_conform::check_run(run, &options) {
            Ok(report) => report,
            Err(e) => {
                print_errors(&[e]);
                return Exit::Input;
            }
        };
        let rendered = match args.format {
            Format::Human => render::text(&report),
            Format::Md => render::markdown(&report),
            Format::Json => render::json_line(&report) + "\n",
        };
        out!("{rendered}");
        if args.stats {
            eprintln!("{}", stats(&report));
        }
        reports.push(report);
    }
    if args.format == Format::Human && reports.len() > 1 {
        outln!("{}", render::summary(&reports));
    }
    if reports.iter().all(RunReport::conforms) {
        Exit::Ok
    } else {
        Exit::Finding
    }
}

/// `stats: RUN: N bytes in S s (X MiB/s), peak RSS Y MiB, ...`.
fn stats(report: &RunReport) -> String {
    let mib = |bytes: f64| bytes / f64::from(1u32 << 20);
    let rate = if report.seconds > 0.0 {
        mib(report.bytes as f64) / report.seconds
    } else {
        0.0
    };
    let peak = peak_rss_bytes().map_or("unknown".into(), |bytes| {
        format!("{:.1} MiB", mib(bytes as f64))
    });
    format!(
        "stats: {}: {} bytes in {:.3} s ({rate:.1} MiB/s), {} steps, {} requests (at most {} tracked at once), peak RSS {peak}",
        report.run, report.bytes, report.seconds, report.steps, report.requests_seen, report.tracked_max
    )
}

/// The process's peak resident set (`VmHWM`) in bytes, where the kernel tells it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = procfs::process::Process::myself().ok()?.status().ok()?;
    status.vmhwm.map(|kib| kib * 1024)
}
