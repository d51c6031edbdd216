//! `kvcc replay`.

use crate::out::outln;
use crate::report::print_errors;
use crate::trace::replay::{replay, Replayed};
use crate::Exit;

/// Re-execute a counterexample (ITF JSON written by `kvcc check --trace-dir`).
///
/// Rebuilds the model from the spec named in the trace (`#meta.source`) at the recorded
/// matrix point, replays every action, compares every state's facts with the trace and
/// confirms the recorded clause is violated at the end. Prints `reproduces: ...` (exit 0)
/// or `does not reproduce: ...` with the first step or fact that differs (exit 1); an
/// unreadable trace or spec is exit 2.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  kvcc replay traces/pr59325-regression__<point>__eventually-freed__<clause>.itf.json
  kvcc replay trace.itf.json --spec specs/pr59325-fix.toml     # does the fix remove it?")]
pub struct Args {
    /// The trace file (`*.itf.json`).
    #[arg(value_name = "TRACE")]
    pub trace: String,
    /// Use this spec instead of the one the trace names (`#meta.source`).
    #[arg(long, value_name = "PATH")]
    pub spec: Option<String>,
}

pub fn exec(args: Args) -> Exit {
    match replay(&args.trace, args.spec.as_deref()) {
        Ok(Replayed::Reproduces { clause, step }) => {
            outln!("reproduces: {clause} at step {step}");
            Exit::Ok
        }
        Ok(Replayed::DoesNotReproduce(why)) => {
            outln!("does not reproduce: {why}");
            Exit::Finding
        }
        Err(e) => {
            print_errors(&[e]);
            Exit::Input
        }
    }
}
