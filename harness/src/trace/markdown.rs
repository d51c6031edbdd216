//! `NAME.md`: the counterexample for a PR comment: a Mermaid sequence diagram GitHub
//! renders (each step's messages and notes), then the steps with what they changed, and
//! the diagnosis.

use super::{Step, Trace};
use kvcc_model::narrate::{Event, Party};
use std::fmt::Write;

/// More ranks than this on one side collapse into one participant.
const RANKS_SHOWN_MAX: u16 = 4;

pub fn render(trace: &Trace, replay: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "### kvcc counterexample: `{}`\n", trace.clause_name());
    let _ = writeln!(out, "> {}\n", trace.meaning);
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(
        out,
        "| spec | `{}` ({}) |",
        trace.spec_file, trace.spec_name
    );
    if let Some(description) = &trace.description {
        let _ = writeln!(out, "| about | {} |", description.replace('|', "\\|"));
    }
    if !trace.point.is_empty() {
        let _ = writeln!(out, "| matrix point | `{}` |", trace.point);
    }
    let kind = format!("{:?}", trace.kind).to_lowercase();
    let _ = writeln!(out, "| clause | `{}` ({kind}) |", trace.clause_name());
    let _ = writeln!(out, "| cost | {} |", trace.cost_line());
    let _ = writeln!(out, "| E | {} |", trace.counts_line().replace('|', "\\|"));
    let _ = writeln!(out, "| kvcc | {} |\n", crate::VERSION);
    let _ = writeln!(out, "```mermaid\n{}```\n", diagram(trace));
    let _ = writeln!(out, "<details><summary>Initial state</summary>\n");
    for (name, value) in &trace.initial {
        let _ = writeln!(out, "- `{name}`: {value}");
    }
    let _ = writeln!(out, "\n</details>\n");
    let _ = writeln!(out, "Steps (only what changed):\n");
    for (i, step) in trace.steps.iter().enumerate() {
        let _ = writeln!(out, "{}. {}", i + 1, step.description);
        for (name, before, after) in &step.changes {
            let _ = writeln!(out, "   - `{name}`: {before} → {after}");
        }
    }
    let _ = writeln!(
        out,
        "\n**VIOLATED** `{}` — {} ({}).\n",
        trace.clause_name(),
        trace.meaning,
        trace.ending()
    );
    let _ = writeln!(out, "**Diagnosis**\n");
    for line in &trace.diagnosis {
        // Indented lines belong to the line above them.
        match line.strip_prefix("  ") {
            Some(detail) => {
                let _ = writeln!(out, "   - {}", detail.replace('|', "\\|"));
            }
            None => {
                let _ = writeln!(out, "- {}", line.replace('|', "\\|"));
            }
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Reproduce (check, replay this trace, browse the state space):\n\n```sh\n{}\n{replay}\n{}\n```",
        trace.command, trace.explore_command
    );
    out
}

/// The Mermaid `sequenceDiagram` of a trace: each step's messages and notes
/// ([`narrate::events`]), a lost one (cleared, dropped, ignored) as `-x` from the party
/// that sent it, and the point of no return as a note.
pub fn diagram(trace: &Trace) -> String {
    // The closing note names what is stuck (`P req0: blocks held, finished_sending 1 of 2
    // reports`), not only the clause.
    let mut violated = format!("VIOLATED {}", trace.clause_name());
    if !trace.stuck.is_empty() {
        violated += &format!(" — {}", trace.stuck.join(" and "));
    }
    sequence(
        (trace.prefill_ranks, trace.decode_ranks),
        &trace.steps,
        trace.point_of_no_return,
        Some(&violated),
    )
}

/// The `sequenceDiagram` of any path of `steps` on `ranks` (P ranks, D ranks), with the
/// point of no return when known and a closing note when given: a trace's
/// ([`diagram`]), or a path in the explorer.
pub fn sequence(
    ranks: (u16, u16),
    steps: &[Step],
    point_of_no_return: Option<usize>,
    closing: Option<&str>,
) -> String {
    let lanes = Lanes {
        prefill: ranks.0,
        decode: ranks.1,
    };
    let mut out = String::from("sequenceDiagram\n");
    out += "    participant Client\n";
    out += "    participant Psched as P scheduler\n";
    out += "    participant Pagg as P aggregator\n";
    out += &lanes.participants("P", ranks.0);
    out += &lanes.participants("D", ranks.1);
    out += "    participant Dagg as D aggregator\n";
    out += "    participant Dsched as D scheduler\n";
    if point_of_no_return == Some(0) {
        out += "    Note over Psched,Dsched: point of no return: the initial state\n";
    }
    for (i, step) in steps.iter().enumerate() {
        for event in &step.events {
            let _ = writeln!(out, "    {}", lanes.line(i + 1, event));
        }
        if point_of_no_return == Some(i + 1) {
            let _ = writeln!(
                out,
                "    Note over Psched,Dsched: point of no return after step {}",
                i + 1
            );
        }
    }
    if let Some(closing) = closing {
        let _ = writeln!(out, "    Note over Psched,Dsched: {}", clean(closing));
    }
    out
}

struct Lanes {
    prefill: u16,
    decode: u16,
}

impl Lanes {
    fn participants(&self, side: &str, ranks: u16) -> String {
        if ranks > RANKS_SHOWN_MAX {
            format!(
                "    participant {side}ranks as {side} ranks 0-{}\n",
                ranks - 1
            )
        } else {
            (0..ranks)
                .map(|r| format!("    participant {side}rank{r} as {side} rank {r}\n"))
                .collect()
        }
    }

    /// A party's participant id, and its name when its lane is shared (collapsed ranks).
    fn lane(&self, party: Party) -> (String, Option<String>) {
        let rank = |side: &str, rank: u16, ranks: u16| {
            if ranks > RANKS_SHOWN_MAX {
                (format!("{side}ranks"), Some(format!("{side} rank {rank}")))
            } else {
                (format!("{side}rank{rank}"), None)
            }
        };
        match party {
            Party::Client => ("Client".into(), None),
            Party::PrefillScheduler => ("Psched".into(), None),
            Party::PrefillAggregator => ("Pagg".into(), None),
            Party::PrefillRank(r) => rank("P", r, self.prefill),
            Party::DecodeRank(r) => rank("D", r, self.decode),
            Party::DecodeAggregator => ("Dagg".into(), None),
            Party::DecodeScheduler => ("Dsched".into(), None),
        }
    }

    /// `FROM->>TO: N. LABEL`, `FROM-xTO: ...` for a lost message, `Note over AT: ...`.
    fn line(&self, n: usize, event: &Event) -> String {
        let (from, from_name) = self.lane(event.from);
        let (head, to_name) = match event.to {
            Some(to) => {
                let (to, to_name) = self.lane(to);
                let arrow = if event.lost { "-x" } else { "->>" };
                (format!("{from}{arrow}{to}"), to_name)
            }
            None => (format!("Note over {from}"), None),
        };
        // A shared lane names the rank: `P rank 2: ...`, `to P rank 0: ...`.
        let who = match (from_name, to_name) {
            (None, None) => String::new(),
            (Some(from), None) => format!("{from}: "),
            (None, Some(to)) => format!("to {to}: "),
            (Some(from), Some(to)) => format!("{from} to {to}: "),
        };
        let label = format!("{who}{}", event.text);
        format!("{head}: {n}. {}", clean(&label))
    }
}

/// A label made safe for Mermaid, which reads `;` as a statement break and `#` as an
/// entity.
fn clean(text: &str) -> String {
    text.replace(';', ",").replace('#', "no.")
}
