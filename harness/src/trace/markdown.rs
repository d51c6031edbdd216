//! `NAME.md`: the counterexample for a PR comment: a Mermaid sequence diagram GitHub
//! renders (one arrow or note per step), then the steps with what they changed.

use super::{Step, Trace};
use kvcc_model::{describe, Action};
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

/// The Mermaid `sequenceDiagram` of a trace.
pub fn diagram(trace: &Trace) -> String {
    let lanes = Lanes {
        prefill: trace.prefill_ranks,
        decode: trace.decode_ranks,
    };
    let mut out = String::from("sequenceDiagram\n");
    out += "    participant Client\n";
    out += "    participant Psched as P scheduler\n";
    out += "    participant Pagg as P aggregator\n";
    out += &lanes.participants("P", trace.prefill_ranks);
    out += &lanes.participants("D", trace.decode_ranks);
    out += "    participant Dagg as D aggregator\n";
    out += "    participant Dsched as D scheduler\n";
    if trace.point_of_no_return == Some(0) {
        out += "    Note over Psched,Dsched: point of no return: the initial state\n";
    }
    for (i, step) in trace.steps.iter().enumerate() {
        let line = lanes.line(trace, i + 1, step);
        let _ = writeln!(out, "    {line}");
        if trace.point_of_no_return == Some(i + 1) {
            let _ = writeln!(
                out,
                "    Note over Psched,Dsched: point of no return after step {}",
                i + 1
            );
        }
    }
    let _ = writeln!(
        out,
        "    Note over Psched,Dsched: VIOLATED {}",
        clean(&trace.clause_name())
    );
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

    /// The participant id of a rank, and a label prefix naming the rank when collapsed.
    fn rank(&self, side: &str, rank: u16) -> (String, String) {
        let ranks = if side == "P" {
            self.prefill
        } else {
            self.decode
        };
        if ranks > RANKS_SHOWN_MAX {
            (format!("{side}ranks"), format!("{side} rank {rank}: "))
        } else {
            (format!("{side}rank{rank}"), String::new())
        }
    }

    fn line(&self, trace: &Trace, n: usize, step: &Step) -> String {
        let text = match step.action {
            Action::PrefillFinishes { request } => {
                format!("Note over Psched: req{request} finishes prefill, free delayed")
            }
            Action::PrefillWorkerLoads { rank, request } => {
                let (p, who) = self.rank("P", rank);
                format!("Note over {p}: {who}req{request} KV load done")
            }
            Action::PrefillEngineSteps {
                output_lost,
                announces_count,
                stores_done,
            } => {
                let mut label = engine_summary("P", step);
                if !stores_done.is_empty() {
                    label += &format!(" [stores done: {}]", describe::stores(&stores_done));
                }
                if announces_count {
                    label += " [count announced]";
                }
                if output_lost {
                    label += " [FAULT output lost]";
                }
                return self.with_reports("P", n, step, format!("Pagg->>Psched: step: {label}"));
            }
            Action::LeaseExpires { rank, request } => {
                let (p, who) = self.rank("P", rank);
                format!("Note over {p}: {who}lease on req{request} expires, reported as sent")
            }
            Action::DecodeAdmits {
                request,
                prefix_hit,
            } => {
                let how = if prefix_hit {
                    "full prefix hit, notify-only"
                } else {
                    "waits for remote KV"
                };
                format!("Client->>Dsched: req{request} admitted, {how}")
            }
            Action::DecoderCrashes { request } => {
                format!("Note over Dsched: [FAULT] D crashes before reading req{request}")
            }
            Action::HandshakeCompletes {
                decoder,
                request,
                ok,
            } => {
                let source = trace
                    .handles
                    .iter()
                    .find(|(d, _)| *d == decoder)
                    .map_or(0, |(_, s)| *s);
                let (d, _) = self.rank("D", decoder);
                let (p, who) = self.rank("P", source);
                let (arrow, how) = if ok {
                    ("->>", "ok")
                } else {
                    ("-x", "FAILS [FAULT]")
                };
                format!("{d}{arrow}{p}: {who}handshake for req{request} {how}")
            }
            Action::ReadCompletes {
                handle,
                request,
                notification_lost,
            } => {
                let (decoder, source) = trace.handles[usize::from(handle)];
                let (d, _) = self.rank("D", decoder);
                let (p, who) = self.rank("P", source);
                if notification_lost {
                    format!("{d}-x{p}: {who}read req{request} done, notification LOST [FAULT]")
                } else {
                    format!("{d}->>{p}: {who}read req{request} done + notify")
                }
            }
            Action::ReadFails { handle, request } => {
                let (decoder, source) = trace.handles[usize::from(handle)];
                let (d, _) = self.rank("D", decoder);
                let (p, who) = self.rank("P", source);
                format!("{d}-x{p}: {who}read req{request} FAILS [FAULT]")
            }
            Action::DecodeEngineSteps { output_lost } => {
                let mut label = engine_summary("D", step);
                if output_lost {
                    label += " [FAULT output lost]";
                }
                return self.with_reports("D", n, step, format!("Dagg->>Dsched: step: {label}"));
            }
            Action::ClientAborts { request } => {
                format!("Client->>Psched: [FAULT] abort req{request} (D hears too)")
            }
        };
        numbered(n, &text)
    }

    /// An engine step's line after one arrow per rank whose report the step handled: a
    /// report that reaches the aggregator, or one the connector cleared, drawn as a lost
    /// message (`-x`) from the rank that made it — the cause a reviewer looks for.
    fn with_reports(&self, side: &str, n: usize, step: &Step, aggregated: String) -> String {
        let rank_prefix = format!("{side} rank");
        let mut lines = Vec::new();
        for (name, before, after) in &step.changes {
            let Some(rest) = name.strip_prefix(&rank_prefix) else {
                continue;
            };
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let (Ok(rank), Some(request)) = (digits.parse::<u16>(), name.split(' ').next_back())
            else {
                continue;
            };
            let was_reported = before.starts_with("reported");
            if was_reported || !after.starts_with("reported") {
                continue;
            }
            let (lane, who) = self.rank(side, rank);
            let text = if after.contains("CLEARED") {
                format!("{lane}-x{side}agg: {who}{request} report CLEARED by the connector, never aggregated")
            } else {
                format!("{lane}->>{side}agg: {who}{request} reported")
            };
            lines.push(numbered(n, &text));
        }
        lines.push(numbered(n, &aggregated));
        lines.join("\n    ")
    }
}

/// `HEAD: N. LABEL`, the label made safe for Mermaid (which reads `;` as a statement
/// break and `#` as an entity).
fn numbered(n: usize, text: &str) -> String {
    let (head, label) = text.split_once(": ").unwrap_or((text, ""));
    format!("{head}: {n}. {}", clean(label))
}

/// What an engine step did on one side: request phases and aggregator countdowns
/// (`req0 blocks freed, finished_sending req0: 1 to go`).
fn engine_summary(side: &str, step: &Step) -> String {
    let request = format!("{side} req");
    let aggregator = format!("{side} aggregator ");
    let changed: Vec<String> = step
        .changes
        .iter()
        .filter_map(|(name, _, after)| {
            if let Some(rest) = name.strip_prefix(&request) {
                rest.chars()
                    .all(|c| c.is_ascii_digit())
                    .then(|| format!("req{rest} {after}"))
            } else {
                name.strip_prefix(&aggregator)
                    .filter(|what| *what != "E")
                    .map(|what| format!("{what} {after}"))
            }
        })
        .collect();
    if changed.is_empty() {
        "outputs aggregated".into()
    } else {
        changed.join(", ")
    }
}

fn clean(text: &str) -> String {
    text.replace(';', ",").replace('#', "no.")
}
