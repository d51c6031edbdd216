//! The explorer's sequence diagram: the Mermaid text a trace's `.md` carries
//! ([`crate::trace::markdown::sequence`]), drawn as SVG on the server, so the page shows
//! the very diagram a PR comment renders, with nothing fetched from the internet and no
//! script. Only what kvcc writes is read: `participant ID [as NAME]`, messages `A->>B:
//! TEXT` and lost ones `A-xB: TEXT`, and `Note over A[,B]: TEXT`.

use super::page::escape;
use std::fmt::Write;

/// Width of one participant's lane, in pixels.
const LANE: usize = 128;
/// Height of one message or note.
const ROW: usize = 24;
/// Height of the participants' boxes.
const HEAD: usize = 34;
/// Room on the right for a label that runs past the last lane.
const SPILL: usize = 420;

/// One line of the diagram, with its lanes resolved.
#[derive(Debug, PartialEq, Eq)]
enum Row {
    Message {
        from: usize,
        to: usize,
        text: String,
        lost: bool,
    },
    Note {
        first: usize,
        last: usize,
        text: String,
    },
}

/// The diagram's participants (id, name) and rows.
#[derive(Debug, PartialEq, Eq)]
struct Diagram {
    lanes: Vec<(String, String)>,
    rows: Vec<Row>,
}

/// Reads kvcc's Mermaid; a line it does not know, or a lane nobody declared, is an error
/// naming the line (kvcc wrote something this reader was not taught).
fn parse(mermaid: &str) -> Result<Diagram, String> {
    let mut lanes: Vec<(String, String)> = Vec::new();
    let mut rows = Vec::new();
    for line in mermaid.lines().map(str::trim) {
        if line.is_empty() || line == "sequenceDiagram" {
            continue;
        }
        if let Some(rest) = line.strip_prefix("participant ") {
            let (id, name) = rest.split_once(" as ").unwrap_or((rest, rest));
            lanes.push((id.trim().to_string(), name.trim().to_string()));
            continue;
        }
        let lane = |id: &str| {
            lanes
                .iter()
                .position(|(lane, _)| lane == id.trim())
                .ok_or_else(|| format!("`{line}`: no participant `{}`", id.trim()))
        };
        let (head, text) = line
            .split_once(": ")
            .ok_or_else(|| format!("`{line}`: not a line kvcc writes"))?;
        let text = text.to_string();
        if let Some(over) = head.strip_prefix("Note over ") {
            let (first, last) = over.split_once(',').unwrap_or((over, over));
            let (first, last) = (lane(first)?, lane(last)?);
            rows.push(Row::Note {
                first: first.min(last),
                last: first.max(last),
                text,
            });
        } else if let Some((from, to)) = head.split_once("->>") {
            rows.push(Row::Message {
                from: lane(from)?,
                to: lane(to)?,
                text,
                lost: false,
            });
        } else if let Some((from, to)) = head.split_once("-x") {
            rows.push(Row::Message {
                from: lane(from)?,
                to: lane(to)?,
                text,
                lost: true,
            });
        } else {
            return Err(format!("`{line}`: not a line kvcc writes"));
        }
    }
    Ok(Diagram { lanes, rows })
}

/// The step a row belongs to: its label's leading `N.`, if any.
fn step_of(text: &str) -> Option<usize> {
    text.split_once(". ")
        .and_then(|(n, _)| n.parse().ok())
        .or_else(|| {
            text.strip_prefix("point of no return after step ")
                .and_then(|n| n.parse().ok())
        })
}

/// The SVG of `mermaid`; `current`, the step whose rows are highlighted. What cannot be
/// read is shown as such, never drawn half.
pub fn svg(mermaid: &str, current: Option<usize>) -> String {
    let diagram = match parse(mermaid) {
        Ok(diagram) => diagram,
        Err(why) => {
            return format!(
                "<p class=\"error\">the diagram cannot be drawn: {}</p>",
                escape(&why)
            )
        }
    };
    let centre = |lane: usize| LANE / 2 + lane * LANE;
    let width = diagram.lanes.len() * LANE + SPILL;
    let height = HEAD + (diagram.rows.len() + 1) * ROW;
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg class=\"sequence\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"sequence diagram\">"
    );
    out += "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\"/></marker></defs>";
    for (i, (_, name)) in diagram.lanes.iter().enumerate() {
        let x = centre(i);
        let _ = write!(
            out,
            "<line class=\"lifeline\" x1=\"{x}\" y1=\"{HEAD}\" x2=\"{x}\" y2=\"{height}\"/><rect class=\"participant\" x=\"{}\" y=\"2\" width=\"{}\" height=\"{}\" rx=\"4\"/><text class=\"participant\" x=\"{x}\" y=\"{}\">{}</text>",
            x - LANE / 2 + 4,
            LANE - 8,
            HEAD - 8,
            HEAD / 2 + 3,
            escape(name)
        );
    }
    for (i, row) in diagram.rows.iter().enumerate() {
        let y = HEAD + (i + 1) * ROW;
        let text = match row {
            Row::Message { text, .. } | Row::Note { text, .. } => text,
        };
        let step = step_of(text);
        let class = if step.is_some() && step == current {
            " current"
        } else {
            ""
        };
        let step_attr = step.map_or(String::new(), |s| format!(" data-step=\"{s}\""));
        let _ = write!(out, "<g class=\"row{class}\"{step_attr}>");
        match row {
            Row::Message { from, to, lost, .. } => {
                let (x1, x2) = (centre(*from), centre(*to));
                let kind = if *lost { "message lost" } else { "message" };
                if from == to {
                    let _ = write!(
                        out,
                        "<path class=\"{kind}\" d=\"M{x1},{} h24 v8 h-22\" marker-end=\"url(#arrow)\"/>",
                        y - 6
                    );
                } else if *lost {
                    // Mermaid's `-x`: the line ends in a cross where the message died.
                    let _ = write!(
                        out,
                        "<line class=\"{kind}\" x1=\"{x1}\" y1=\"{y}\" x2=\"{x2}\" y2=\"{y}\"/><text class=\"cross\" x=\"{x2}\" y=\"{}\">×</text>",
                        y + 5
                    );
                } else {
                    let _ = write!(
                        out,
                        "<line class=\"{kind}\" x1=\"{x1}\" y1=\"{y}\" x2=\"{x2}\" y2=\"{y}\" marker-end=\"url(#arrow)\"/>"
                    );
                }
                let _ = write!(
                    out,
                    "<text class=\"label\" x=\"{}\" y=\"{}\">{}</text>",
                    x1.min(x2) + 6,
                    y - 4,
                    escape(text)
                );
            }
            Row::Note {
                first, last, text, ..
            } => {
                let left = centre(*first) - LANE / 2 + 6;
                // A note is as wide as its lanes, or as its text where that is wider.
                let text_width = text.chars().count() * 6 + 8;
                let right = (centre(*last) + LANE / 2 - 6).max(left + text_width);
                let _ = write!(
                    out,
                    "<rect class=\"note\" x=\"{left}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"2\"/><text class=\"label\" x=\"{}\" y=\"{}\">{}</text>",
                    y - ROW + 5,
                    right - left,
                    ROW - 4,
                    left + 4,
                    y - 5,
                    escape(text)
                );
            }
        }
        out += "</g>";
    }
    out += "</svg>";
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = "sequenceDiagram
    participant Client
    participant Psched as P scheduler
    participant Prank1 as P rank 1
    participant Pagg as P aggregator
    Note over Psched: 1. req0 finishes prefill, free delayed
    Client->>Psched: 2. req0 admitted
    Prank1-xPagg: 7. synthetic done req0, DROPPED
    Note over Psched,Pagg: VIOLATED eventually-freed: delay-freed-request-never-freed
";

    #[test]
    fn kvccs_mermaid_reads_as_lanes_and_rows() {
        let d = parse(SEED).unwrap();
        assert_eq!(d.lanes[0], ("Client".into(), "Client".into()));
        assert_eq!(d.lanes[1], ("Psched".into(), "P scheduler".into()));
        assert_eq!(d.rows.len(), 4);
        assert_eq!(
            d.rows[1],
            Row::Message {
                from: 0,
                to: 1,
                text: "2. req0 admitted".into(),
                lost: false
            }
        );
        assert!(matches!(
            d.rows[2],
            Row::Message {
                from: 2,
                to: 3,
                lost: true,
                ..
            }
        ));
        assert!(matches!(
            d.rows[3],
            Row::Note {
                first: 1,
                last: 3,
                ..
            }
        ));
    }

    #[test]
    fn each_row_is_drawn_with_its_step_and_the_current_one_marked() {
        let svg = svg(SEED, Some(7));
        assert_eq!(svg.matches("<g class=\"row").count(), 4);
        assert!(
            svg.contains("<g class=\"row current\" data-step=\"7\">"),
            "{svg}"
        );
        assert!(svg.contains("<g class=\"row\" data-step=\"1\">"), "{svg}");
        assert!(svg.contains(">P scheduler</text>"), "{svg}");
        assert!(svg.contains("class=\"message lost\""), "{svg}");
    }

    /// The twin: a line kvcc never writes, or a lane nobody declared, is refused whole.
    #[test]
    fn what_kvcc_does_not_write_is_refused_not_half_drawn() {
        assert!(parse("sequenceDiagram\n    A->>B: 1. x\n")
            .unwrap_err()
            .contains("no participant `A`"));
        assert!(parse("sequenceDiagram\n    participant A\n    loop x\n")
            .unwrap_err()
            .contains("not a line kvcc writes"));
        let drawn = svg("sequenceDiagram\n    A->>B: 1. <x>\n", None);
        assert!(drawn.starts_with("<p class=\"error\">"), "{drawn}");
        assert!(!drawn.contains("<svg"), "{drawn}");
    }
}
