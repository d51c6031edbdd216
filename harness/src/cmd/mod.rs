//! The subcommands, one file each: its arguments (whose doc comments are the help text)
//! and an `exec` that runs it. To add one (`conform`, `simulate`, ...): a new
//! file here, one `Command` variant and one `exec` arm.

pub mod check;
pub mod completions;
pub mod confirm;
pub mod conform;
pub mod explore;
pub mod man;
pub mod merge;
pub mod replay;
pub mod schema;
pub mod simulate;

use crate::Exit;
use clap::{Parser, Subcommand};

const EXAMPLES: &str = "\
Examples:
  kvcc check                                   check every spec under specs/
  kvcc check specs/pr59325-regression.toml --all-traces --trace-dir traces
  kvcc replay traces/pr59325-regression__<point>__eventually-freed__<clause>.itf.json
  kvcc explore specs/pr59325-regression.toml --point prefill.pcp=4
  kvcc schema > kvcc-spec.schema.json
  kvcc simulate specs/pr59325-fix.toml --seed 1 --runs 20 --out runs
  kvcc conform runs/run-*/prefill              check recorded runs against the contract
  kvcc confirm traces/<name>.itf.json          play a counterexample into vLLM's own scheduler
  kvcc check --shard 1/3 --format json > s1.jsonl    one of three runners; then
  kvcc merge s1.jsonl s2.jsonl s3.jsonl --junit kvcc.xml
  kvcc completions bash > ~/.local/share/bash-completion/completions/kvcc
  kvcc man | man -l -

Exit codes: 0 as expected, 1 a finding (a verdict differs from its expectation, a trace
does not reproduce), 2 a usage or input error.";

/// kvcc: a model checker for vLLM KV-transfer completion contracts.
///
/// Spec files (TOML) describe a P/D topology, connector and scheduler behaviours, faults,
/// a matrix of variations and the verdict the checker must reach. kvcc explores every
/// reachable state, compares the verdict with the spec, and explains every violation as
/// a counterexample for reviewers.
#[derive(Debug, Parser)]
#[command(name = "kvcc", version = crate::VERSION_LINE, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// When to colour output: `auto` (a terminal, unless NO_COLOR is set), `always`,
    /// `never`.
    #[arg(long, value_enum, global = true, default_value_t = ColorWhen::Auto, value_name = "WHEN")]
    pub color: ColorWhen,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

impl ColorWhen {
    /// Makes the choice for every anstream stream of the process (anstream's `auto`
    /// reads NO_COLOR, CLICOLOR_FORCE and whether the stream is a terminal).
    pub fn apply(self) {
        let choice = match self {
            ColorWhen::Auto => anstream::ColorChoice::Auto,
            ColorWhen::Always => anstream::ColorChoice::Always,
            ColorWhen::Never => anstream::ColorChoice::Never,
        };
        choice.write_global();
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Check(check::Args),
    Replay(replay::Args),
    Explore(explore::Args),
    Schema(schema::Args),
    Conform(conform::Args),
    Confirm(confirm::Args),
    Simulate(simulate::Args),
    Merge(merge::Args),
    Completions(completions::Args),
    Man(man::Args),
}

impl Command {
    pub fn exec(self) -> Exit {
        match self {
            Command::Check(args) => check::exec(args),
            Command::Replay(args) => replay::exec(args),
            Command::Explore(args) => explore::exec(args),
            Command::Schema(args) => schema::exec(args),
            Command::Conform(args) => conform::exec(args),
            Command::Confirm(args) => confirm::exec(args),
            Command::Simulate(args) => simulate::exec(args),
            Command::Merge(args) => merge::exec(args),
            Command::Completions(args) => completions::exec(args),
            Command::Man(args) => man::exec(args),
        }
    }
}
