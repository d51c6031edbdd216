//! The `diagnosis` that ends every trace: what the violation is made of, in the trace's
//! own facts, with the step at which each took its value.
//!
//! - A liveness violation: each obligation still open at the end (an aggregator entry
//!   with reports to go, a request whose blocks are held or that waits to be woken), the
//!   ranks' part in it (who reported, whose report was cleared, who never reported, and
//!   since which step), and why no continuation delivers it: nothing fairness forces is
//!   enabled any more, and the actions still possible are named (faults only, or none).
//! - A safety violation: the facts the last step changed into the conflict, and the step
//!   at which each fact it conflicts with began.

use super::{Facts, Step};
use kvcc_model::checker::{Counterexample, Kind};
use kvcc_model::{describe, ContractModel};
use stateright::Model;

/// The diagnosis lines of `counterexample`, for the clause of `property`.
pub fn diagnose(
    model: &ContractModel,
    counterexample: &Counterexample<ContractModel>,
    property: &str,
    initial: &Facts,
    steps: &[Step],
) -> Vec<String> {
    let history = History { initial, steps };
    match counterexample.kind {
        Kind::Liveness => liveness(model, counterexample, property, &history),
        Kind::Safety => safety(&history),
    }
}

/// The facts of a trace, step by step.
struct History<'a> {
    initial: &'a Facts,
    steps: &'a [Step],
}

impl History<'_> {
    fn last(&self) -> &Facts {
        self.steps.last().map_or(self.initial, |s| &s.facts)
    }

    /// The step (1-based; 0 the initial state) since which `fact` has its final value.
    fn since(&self, fact: &str) -> usize {
        self.steps
            .iter()
            .rposition(|s| s.changes.iter().any(|(name, _, _)| name == fact))
            .map_or(0, |i| i + 1)
    }

    /// `value (since step N)`, or `(from the start)`.
    fn with_since(&self, fact: &str) -> String {
        let value = self.last().get(fact).map_or("-", String::as_str);
        match self.since(fact) {
            0 => format!("{fact}: {value} (from the start)"),
            step => format!("{fact}: {value} (since step {step})"),
        }
    }
}

fn liveness(
    model: &ContractModel,
    counterexample: &Counterexample<ContractModel>,
    property: &str,
    history: &History,
) -> Vec<String> {
    let engines: &[&str] = match property {
        "eventually-freed" => &["P"],
        "eventually-woken" => &["D"],
        _ => &["P", "D"],
    };
    let facts = history.last();
    let mut lines = Vec::new();
    for engine in engines {
        for direction in [
            "finished_sending",
            "finished_recving",
            "failed_recving pending",
        ] {
            let name = format!("{engine} aggregator {direction}");
            if facts.get(&name).is_some_and(|v| v != "-") {
                lines.push(format!(
                    "open: {} — {engine} aggregator E: {}",
                    history.with_since(&name),
                    facts
                        .get(&format!("{engine} aggregator E"))
                        .map_or("?", String::as_str)
                ));
            }
        }
        for request in 0..model.config.requests {
            let request_fact = format!("{engine} req{request}");
            let Some(phase) = facts.get(&request_fact) else {
                continue;
            };
            let waiting = phase.contains("blocks held") || phase.contains("WAITING");
            if !waiting {
                continue;
            }
            lines.push(format!("open: {}", history.with_since(&request_fact)));
            // Each rank's part in the request, as the trace left it.
            let prefix = format!("{engine} rank");
            let suffix = format!("req{request}");
            for name in facts.keys() {
                if name.starts_with(&prefix) && name.ends_with(&suffix) {
                    lines.push(format!("  {}", history.with_since(name)));
                }
            }
        }
    }
    if lines.is_empty() {
        lines.push(format!(
            "open: the `{property}` obligation (no aggregator entry or held request names it)"
        ));
    }
    if let Some(step) = counterexample.point_of_no_return {
        lines.push(match step {
            0 => "point of no return: the initial state — no run from it keeps the clause".to_string(),
            n => format!(
                "point of no return: step {n} ({}) — before it some continuation could still keep the clause, after it none can",
                history.steps[n - 1].description
            ),
        });
    }
    lines.push(why_stuck(model, counterexample, history.steps.len()));
    lines
}

/// Why no continuation delivers: the actions still enabled at the end, none forced.
fn why_stuck(
    model: &ContractModel,
    counterexample: &Counterexample<ContractModel>,
    last_step: usize,
) -> String {
    let state = counterexample
        .steps
        .last()
        .map_or(&counterexample.initial, |(_, s)| s);
    let mut actions = Vec::new();
    model.actions(state, &mut actions);
    let possible: Vec<String> = actions
        .iter()
        .filter(|a| model.next_state(state, **a).is_some())
        .map(|a| describe::action(model.topology, a))
        .collect();
    let after = if last_step == 0 {
        "from the start".to_string()
    } else {
        format!("after step {last_step}")
    };
    if possible.is_empty() {
        format!("stuck: {after} nothing can happen any more, so nothing can deliver it")
    } else {
        format!(
            "stuck: {after} nothing fairness forces is enabled, so a run may end here; \
             still possible, never forced: {}",
            possible.join("; ")
        )
    }
}

fn safety(history: &History) -> Vec<String> {
    let Some(last) = history.steps.last() else {
        return vec!["broken in the initial state".to_string()];
    };
    let n = history.steps.len();
    let mut lines = vec![format!("step {n} ({}) breaks it:", last.description)];
    for (name, before, after) in &last.changes {
        lines.push(format!("  {name}: {before} -> {after}"));
    }
    // What the change meets: the other facts of the same engine and request, each with
    // the step at which it began.
    let touched: Vec<(&str, &str)> = last
        .changes
        .iter()
        .filter_map(|(name, _, _)| {
            let side = name.split_whitespace().next()?;
            let request = name.split_whitespace().find(|w| w.starts_with("req"))?;
            Some((side, request))
        })
        .collect();
    for name in history.last().keys() {
        let mut words = name.split_whitespace();
        let side = words.next().unwrap_or_default();
        let meets = touched
            .iter()
            .any(|(s, r)| *s == side && name.split_whitespace().any(|w| w == *r));
        let changed_now = last.changes.iter().any(|(n, _, _)| n == name);
        if meets && !changed_now {
            lines.push(format!("  against {}", history.with_since(name)));
        }
    }
    lines
}
