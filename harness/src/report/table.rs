//! The human table of `kvcc check`: as wide as the terminal, no wider. comfy-table wraps
//! long cells (a matrix point) inside their column; a verdict names the violated
//! properties, and the full text of every field (the violated clauses) is in `--format
//! json`, JUnit and the traces. Where stdout is no terminal and `COLUMNS` is unset (a CI
//! log, a pipe) there is no width to fit: a row is one line, never wrapped, so that a log
//! viewer (which wraps at its own width) and `grep` see each check whole.

use crate::run::{Observed, Outcome};
use comfy_table::{
    presets, Attribute, Cell, CellAlignment, Color, ColumnConstraint, ContentArrangement, Table,
    Width,
};

/// The width to fit: `COLUMNS` (as shells export it and as tests set it), else the
/// terminal's when stdout is one, else None: no width, nothing wrapped.
pub fn width() -> Option<u16> {
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<u16>().ok())
        .filter(|&c| c > 0);
    columns.or_else(|| Table::new().width())
}

/// One row per check, numbers right-aligned, no line wider than `width` (with no width,
/// each row on one line). Styled (bold header, a red MISMATCH); the caller prints through
/// anstream, which drops the styles where colour is off.
pub fn render(outcomes: &[&Outcome], width: Option<u16>) -> String {
    let mut table = Table::new();
    table.load_preset(presets::NOTHING).enforce_styling();
    match width {
        Some(width) => table
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_width(width),
        None => table.set_content_arrangement(ContentArrangement::Disabled),
    };
    // No EXPECTED column: where the verdict matches, it says the same; a mismatch says
    // what was expected in its MATCH cell.
    let header = ["SPEC", "VERDICT", "STATES", "DEPTH", "TIME", "MATCH"];
    table.set_header(header.map(|h| Cell::new(h).add_attribute(Attribute::Bold)));
    for o in outcomes {
        let matched = if o.matches {
            Cell::new("ok").fg(Color::Green)
        } else if o.unreached.is_empty() {
            Cell::new(format!("MISMATCH: expected {}", o.expectation))
                .fg(Color::Red)
                .add_attribute(Attribute::Bold)
        } else {
            // An incomplete run that did not reach an expected property: a mismatch it
            // cannot prove (`run::judge`).
            Cell::new(format!(
                "INCONCLUSIVE: expected {}; {} not reached",
                o.expectation,
                o.unreached.join(", ")
            ))
            .fg(Color::Yellow)
            .add_attribute(Attribute::Bold)
        };
        table.add_row(vec![
            Cell::new(title(o)),
            Cell::new(verdict(o)),
            Cell::new(o.unique_states),
            Cell::new(o.max_depth),
            Cell::new(format!("{:.2}s", o.seconds)),
            matched,
        ]);
    }
    let widths = match width {
        Some(width) => widths(&table, outcomes, width),
        None => table.column_max_content_widths(),
    };
    let last = header.len() - 1;
    for (i, column) in table.column_iter_mut().enumerate() {
        // Two spaces between columns, none before the first or after the last.
        let padding = if i == last { 0 } else { 2 };
        column.set_padding((0, padding));
        column.set_constraint(ColumnConstraint::Absolute(Width::Fixed(
            widths[i] + padding,
        )));
        if (2..=4).contains(&i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    let text = table.to_string();
    text.lines().map(trim_styled).collect::<Vec<_>>().join("\n")
}

/// Content widths of the columns within `width`: the numbers as wide as they are, MATCH
/// up to a short mismatch note, and what is left to SPEC and VERDICT: first each its
/// longest word (a spec name, a `path=value` pair, a clause), so nothing is split in the
/// middle while there is room, then the rest in proportion to what each still lacks.
fn widths(table: &Table, outcomes: &[&Outcome], width: u16) -> Vec<u16> {
    const MATCH_MAX: u16 = 14;
    let longest = table.column_max_content_widths();
    let numbers: u16 = longest[2..5].iter().sum();
    let matched = longest[5].min(MATCH_MAX);
    let padding = 2 * 5;
    let text = width.saturating_sub(numbers + matched + padding).max(2);
    let word = |texts: &mut dyn Iterator<Item = String>| {
        let longest = texts
            .flat_map(|t| t.split(' ').map(|w| w.chars().count()).collect::<Vec<_>>())
            .max()
            .unwrap_or(1);
        u16::try_from(longest).unwrap_or(u16::MAX).max(1)
    };
    let words = [
        word(&mut outcomes.iter().map(|o| title(o))),
        word(&mut outcomes.iter().map(|o| verdict(o))),
    ];
    let cells = [longest[0].max(words[0]), longest[1].max(words[1])];
    let [spec, verdict] = share(text, words, cells);
    vec![spec, verdict, longest[2], longest[3], longest[4], matched]
}

/// Splits `total` between two columns: each its `floor` if both fit (else in proportion
/// to the floors), then what is left in proportion to how far each is from its `want`.
fn share(total: u16, floor: [u16; 2], want: [u16; 2]) -> [u16; 2] {
    let part = |amount: u16, weights: [u16; 2]| -> [u16; 2] {
        let sum = u32::from(weights[0]) + u32::from(weights[1]);
        if sum == 0 {
            return [amount / 2, amount - amount / 2];
        }
        let first = (u32::from(amount) * u32::from(weights[0]) / sum) as u16;
        [first, amount - first]
    };
    if floor[0] + floor[1] >= total {
        let [a, b] = part(total, floor);
        return [a.max(1), b.max(1)];
    }
    let rest = total - floor[0] - floor[1];
    let lack = [want[0] - floor[0], want[1] - floor[1]];
    let [a, b] = if lack[0] + lack[1] <= rest {
        lack
    } else {
        part(rest, lack)
    };
    [floor[0] + a, floor[1] + b]
}

/// The verdict with the violated properties only, in the vocabulary of the expectation
/// beside it (`violated (eventually-freed, aggregator-drains)`, and `; incomplete: REASON`
/// when a limit cut the run after them); the violated clauses are in JSON, JUnit and the
/// traces.
fn verdict(o: &Outcome) -> String {
    let properties = o.violated_properties().join(", ");
    match &o.observed {
        Observed::Holds => o.verdict_text(),
        Observed::Violated { incomplete: None } => format!("violated ({properties})"),
        Observed::Violated {
            incomplete: Some(reason),
        } => format!("violated ({properties}; incomplete: {reason})"),
        Observed::Inconclusive(reason) => format!("inconclusive ({reason})"),
    }
}

/// `text` broken at spaces into lines of at most `width` columns (a word longer than a
/// line stays whole on its own); with no width, one line.
pub fn wrap(text: &str, width: Option<u16>) -> String {
    let Some(width) = width else {
        return text.to_string();
    };
    let width = usize::from(width.max(1));
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let fits = line.chars().count() + 1 + word.chars().count() <= width;
        if !line.is_empty() && !fits {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines.join("\n")
}

/// A line without its trailing padding, which comfy-table puts before the line's closing
/// style codes: the codes are kept, the spaces before them go.
fn trim_styled(line: &str) -> String {
    let mut rest = line.trim_end();
    let mut codes = Vec::new();
    while let Some(start) = rest.rfind('\x1b').filter(|_| rest.ends_with('m')) {
        codes.push(&rest[start..]);
        rest = rest[..start].trim_end();
    }
    codes.reverse();
    format!("{rest}{}", codes.concat())
}

/// `name path=value, path=value`: the point's pairs with room to wrap between them (no
/// brackets, so that a pair alone fits a narrow column).
fn title(o: &Outcome) -> String {
    if o.point.is_empty() {
        return o.spec.clone();
    }
    let pairs: Vec<String> = o
        .point
        .0
        .iter()
        .map(|(p, v)| format!("{p}={}", crate::spec::point::value_text(v)))
        .collect();
    format!("{} {}", o.spec, pairs.join(", "))
}

#[cfg(test)]
mod tests {
    #[test]
    fn wrap_breaks_at_spaces_within_the_width() {
        assert_eq!(super::wrap("aa bb cc", Some(5)), "aa bb\ncc");
        assert_eq!(super::wrap("aaaaaaa b", Some(5)), "aaaaaaa\nb");
        assert_eq!(super::wrap("", Some(5)), "");
        assert_eq!(super::wrap("aa bb cc", None), "aa bb cc");
    }

    #[test]
    fn words_first_then_the_rest_by_what_each_lacks() {
        assert_eq!(super::share(60, [20, 30], [50, 40]), [27, 33]);
        assert_eq!(super::share(100, [20, 30], [50, 40]), [50, 40]);
        assert_eq!(super::share(40, [20, 30], [50, 40]), [16, 24]);
    }

    #[test]
    fn trailing_padding_goes_and_style_codes_stay() {
        assert_eq!(super::trim_styled("ok   "), "ok");
        assert_eq!(
            super::trim_styled("\x1b[1mMATCH   \x1b[0m"),
            "\x1b[1mMATCH\x1b[0m"
        );
    }
}
