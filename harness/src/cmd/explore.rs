//! `kvcc explore`.

use crate::explore::{self, Site};
use crate::report::print_errors;
use crate::spec::point::Selector;
use crate::spec::Spec;
use crate::trace::replay;
use crate::Exit;
use kvcc_model::ContractModel;
use kvcc_model::InputError;
use std::io::Write;

/// Browse one spec's state space in kvcc's explorer page (loopback only).
///
/// The page names the spec and the matrix point and lists the clauses by kind (safety,
/// liveness); a violated clause links to the counterexample `kvcc check` prints for it,
/// found by the same search, which runs as the page is served. Any path shows as a trace
/// does: its steps, its sequence diagram, and the facts at its end with what the last
/// step changed marked; each next step is a link. `--trace FILE` opens the page at a
/// trace's path (an ITF file `kvcc check --trace-dir` wrote; its spec is found as
/// `kvcc replay` finds it, or given as SPEC). In a spec with a matrix, `--point` selects
/// the point; when several match, the first is explored (and named). A page lists at most
/// `--successors-max` next steps of a state. Prints the URL, then serves until stopped
/// (Ctrl-C).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  kvcc explore specs/pr59325-regression.toml
  kvcc explore specs/pr59325-regression.toml --point prefill.pcp=4 --addr 127.0.0.1:8080
  kvcc explore --trace traces/pr59325-regression__<point>__eventually-freed__<clause>.itf.json")]
pub struct Args {
    /// The spec file (with --trace: instead of the one the trace names).
    #[arg(value_name = "SPEC", required_unless_present = "trace")]
    pub spec: Option<String>,
    /// Select the matrix point where KEY has VALUE (repeatable; e.g. `prefill.pcp=2`).
    #[arg(long = "point", value_name = "KEY=VALUE", conflicts_with = "trace")]
    pub points: Vec<Selector>,
    /// Open the page at this trace's path (`*.itf.json`), at the point it records.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<String>,
    /// Address to serve on; must be loopback. Port 0 picks a free port.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:3000")]
    pub addr: String,
    /// Next steps of a state a page or click lists; a last entry counts the rest. Raise it
    /// to follow a path through a step past the default.
    #[arg(long, value_name = "N", default_value_t = explore::SUCCESSORS_LISTED as u64,
          value_parser = clap::value_parser!(u64).range(1..=kvcc_model::checker::SUCCESSORS_MAX))]
    pub successors_max: u64,
}

pub fn exec(args: Args) -> Exit {
    match prepare(&args) {
        Ok((site, listener)) => {
            if let Ok(addr) = listener.local_addr() {
                println!(
                    "kvcc explore: {} at http://{addr}/ (Ctrl-C to stop)",
                    site.title()
                );
            }
            let _ = std::io::stdout().flush();
            match explore::serve(site, listener) {
                Ok(()) => Exit::Ok,
                Err(e) => {
                    print_errors(&[e]);
                    Exit::Input
                }
            }
        }
        Err(e) => {
            print_errors(&[e]);
            Exit::Input
        }
    }
}

fn prepare(args: &Args) -> Result<(Site, std::net::TcpListener), InputError> {
    let listener = explore::loopback(&args.addr)?;
    let successors_max = usize::try_from(args.successors_max).unwrap_or(usize::MAX);
    if let Some(file) = &args.trace {
        // The trace's spec and point, as `kvcc replay` finds them.
        let loaded = replay::load(file)?;
        let (spec, point, model) = replay::case_of(file, &loaded.trace, args.spec.as_deref())?;
        let site = Site::new(spec, point, model, successors_max);
        return Ok((site.open_at(file, &loaded.actions)?, listener));
    }
    let spec_file = args.spec.as_deref().unwrap_or_default();
    let spec = Spec::load(spec_file)?;
    let mut cases = spec.cases(&args.points)?;
    if cases.len() > 1 {
        eprintln!(
            "note: {} matrix points match; exploring the first, {} (select another with --point KEY=VALUE)",
            cases.len(),
            cases[0].point
        );
    }
    let case = cases.remove(0);
    // The explorer lists a state's successors as the spec's search does: past a safety
    // violation only when the spec asks (`[expect] past-violations`).
    let model = ContractModel::new(case.config).past_violations(spec.expect.past_violations);
    Ok((Site::new(spec, case.point, model, successors_max), listener))
}
