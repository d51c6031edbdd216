//! `kvcc explore`.

use crate::explore;
use crate::report::print_errors;
use crate::spec::point::Selector;
use crate::spec::Spec;
use crate::Exit;
use kvcc_model::ContractModel;
use kvcc_model::InputError;
use std::io::Write;

/// Browse one spec's state space in stateright's web explorer (loopback only).
///
/// States show as kvcc's named facts (`P req0: prefilling`) and actions in vLLM's
/// vocabulary, as in traces. In a spec with a matrix, `--point` selects the point; when
/// several match, the first is explored (and named). A click lists at most
/// `--successors-max` successors of a state (a last entry counts the rest) and stops
/// after 10 s or when the browser leaves. Prints the URL, then serves until stopped
/// (Ctrl-C).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  kvcc explore specs/pr59325-regression.toml
  kvcc explore specs/pr59325-regression.toml --point prefill.pcp=4 --addr 127.0.0.1:8080")]
pub struct Args {
    /// The spec file.
    #[arg(value_name = "SPEC")]
    pub spec: String,
    /// Select the matrix point where KEY has VALUE (repeatable; e.g. `prefill.pcp=2`).
    #[arg(long = "point", value_name = "KEY=VALUE")]
    pub points: Vec<Selector>,
    /// Address to serve on; must be loopback. Port 0 picks a free port.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:3000")]
    pub addr: String,
    /// Successors of a state one click lists; a last entry counts the rest. Raise it to
    /// follow a path through a successor past the default.
    #[arg(long, value_name = "N", default_value_t = explore::SUCCESSORS_LISTED as u64,
          value_parser = clap::value_parser!(u64).range(1..=kvcc_model::checker::SUCCESSORS_MAX))]
    pub successors_max: u64,
}

pub fn exec(args: Args) -> Exit {
    match prepare(&args) {
        Ok((model, title, listener)) => {
            if let Ok(addr) = listener.local_addr() {
                println!("kvcc explore: {title} at http://{addr}/ (Ctrl-C to stop)");
            }
            let _ = std::io::stdout().flush();
            let successors_max = usize::try_from(args.successors_max).unwrap_or(usize::MAX);
            match explore::serve(model, listener, successors_max) {
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

fn prepare(args: &Args) -> Result<(ContractModel, String, std::net::TcpListener), InputError> {
    let listener = explore::loopback(&args.addr)?;
    let spec = Spec::load(&args.spec)?;
    let mut cases = spec.cases(&args.points)?;
    if cases.len() > 1 {
        eprintln!(
            "note: {} matrix points match; exploring the first, {} (select another with --point KEY=VALUE)",
            cases.len(),
            cases[0].point
        );
    }
    let case = cases.remove(0);
    let title = if case.point.is_empty() {
        spec.name.clone()
    } else {
        format!("{} [{}]", spec.name, case.point)
    };
    // The explorer lists a state's successors as the spec's search does: past a safety
    // violation only when the spec asks (`[expect] past-violations`).
    let model = ContractModel::new(case.config).past_violations(spec.expect.past_violations);
    Ok((model, title, listener))
}
