//! `NAME.txt`: the counterexample as numbered steps, each followed by only the facts it
//! changed (TLC's `-difftrace`), ending with the violated clause and the commands.

use super::Trace;
use std::fmt::Write;

pub fn render(trace: &Trace, replay: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "kvcc {} counterexample: {}",
        crate::VERSION,
        trace.clause_name()
    );
    let _ = writeln!(out, "spec:     {} ({})", trace.spec_file, trace.spec_name);
    if let Some(description) = &trace.description {
        let _ = writeln!(out, "about:    {description}");
    }
    if !trace.point.is_empty() {
        let _ = writeln!(out, "point:    {}", trace.point);
    }
    let kind = format!("{:?}", trace.kind).to_lowercase();
    let _ = writeln!(out, "clause:   {} ({kind})", trace.clause_name());
    let _ = writeln!(out, "meaning:  {}", trace.meaning);
    let _ = writeln!(out, "cost:     {}", trace.cost_line());
    let _ = writeln!(out, "E:        {}", trace.counts_line());
    let _ = writeln!(out);
    let _ = writeln!(out, "0. initial state");
    for (name, value) in &trace.initial {
        let _ = writeln!(out, "   {name}: {value}");
    }
    for (i, step) in trace.steps.iter().enumerate() {
        let _ = writeln!(out, "{}. {}", i + 1, step.description);
        for (name, before, after) in &step.changes {
            let _ = writeln!(out, "   {name}: {before} -> {after}");
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "VIOLATED {} — {}", trace.clause_name(), trace.meaning);
    let _ = writeln!(out, "({})", trace.ending());
    let _ = writeln!(out);
    let _ = writeln!(out, "diagnosis:");
    for line in &trace.diagnosis {
        let _ = writeln!(out, "  {line}");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "reproduce: {}", trace.command);
    let _ = writeln!(out, "replay:    {replay}");
    let _ = writeln!(out, "explore:   {}", trace.explore_command);
    out
}
