//! What `kvcc check` concludes about the explored case, found by the same search with the
//! same options ([`crate::run::options`]) on a thread of its own while the page is
//! already served: each violated clause with its counterexample as a [`Trace`] (the very
//! one `check --trace-dir` writes) and the path that leads the page to it.

use super::path;
use crate::run::{self, Settings};
use crate::spec::point::Point;
use crate::spec::Spec;
use crate::trace::Trace;
use kvcc_model::checker;
use kvcc_model::ContractModel;
use std::sync::{Arc, Mutex};

/// A violated clause: its counterexample and where the page shows it.
pub struct Found {
    pub clause: usize,
    pub trace: Trace,
    /// The counterexample's path, as the page's indices.
    pub indices: Vec<usize>,
}

/// The search's conclusion.
pub struct Verdict {
    /// Violated clauses, in clause order.
    pub found: Vec<Found>,
    /// What cut the search short, if anything: clauses not found violated are then
    /// undecided.
    pub cut: Option<String>,
    pub unique_states: u64,
}

/// The verdict as the page sees it: not there yet, there, or failed (a kvcc bug).
pub type Cell = Arc<Mutex<Option<Result<Verdict, String>>>>;

/// Starts the search; the cell is filled when it ends.
pub fn spawn(spec: Spec, point: Point, model: ContractModel) -> Cell {
    let cell: Cell = Arc::default();
    let filled = Arc::clone(&cell);
    std::thread::spawn(move || {
        let verdict = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            search(&spec, &point, &model)
        }))
        .map_err(|_| {
            "the search panicked (a kvcc bug: `kvcc check` on this spec says more)".to_string()
        })
        .and_then(|found| found);
        *filled.lock().unwrap_or_else(|e| e.into_inner()) = Some(verdict);
    });
    cell
}

/// `kvcc check`'s search of the case, as `check` runs it without options on its command
/// line; each counterexample as the trace `check` writes.
fn search(spec: &Spec, point: &Point, model: &ContractModel) -> Result<Verdict, String> {
    let settings = Settings {
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        ..Settings::default()
    };
    let options = run::options(spec, &settings);
    let report = checker::check(model, &options);
    let command = run::reproduce_command(spec, point, &settings);
    let mut found = Vec::new();
    for counterexample in &report.counterexamples {
        let trace = Trace::new(model, spec, point, counterexample, command.clone());
        let actions: Vec<_> = counterexample.steps.iter().map(|(a, _)| *a).collect();
        let indices = path::indices_of(model, &actions).map_err(|why| {
            format!(
                "the counterexample to {} does not walk in the explorer: {why} (a kvcc bug)",
                trace.clause_name()
            )
        })?;
        found.push(Found {
            clause: counterexample.clause,
            trace,
            indices,
        });
    }
    Ok(Verdict {
        found,
        cut: report.cut().map(ToString::to_string),
        unique_states: report.unique_states,
    })
}
