//! The human table of `kvcc check`.

use crate::run::Outcome;

const HEADER: [&str; 7] = [
    "SPEC", "VERDICT", "EXPECTED", "MATCH", "STATES", "DEPTH", "TIME",
];

/// One row per check, columns aligned; numbers right-aligned.
pub fn render(outcomes: &[Outcome]) -> String {
    let rows: Vec<[String; 7]> = outcomes
        .iter()
        .map(|o| {
            [
                o.title(),
                o.verdict_text(),
                o.expectation.to_string(),
                if o.matches { "ok" } else { "MISMATCH" }.to_string(),
                o.unique_states.to_string(),
                o.max_depth.to_string(),
                format!("{:.2}s", o.seconds),
            ]
        })
        .collect();
    let mut widths = HEADER.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 7]| {
        let mut out = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            let numeric = i >= 4;
            let padded = if numeric {
                format!("{cell:>width$}")
            } else {
                format!("{cell:<width$}")
            };
            out += &padded;
            if i + 1 < cells.len() {
                out += "  ";
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(HEADER);
    for row in &rows {
        out += &line(row.each_ref().map(String::as_str));
    }
    out
}
