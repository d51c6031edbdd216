//! Input errors as a compiler shows them: the message, `--> FILE:LINE:COLUMN`, the source
//! line with the key or value underlined, and a help line (the closest valid key or
//! value), rendered by annotate-snippets, the renderer of rustc and cargo. An error
//! without a known span (an unreadable file, a command-line argument, a recorded run's
//! line) stays the one line `error: FILE:LINE:COLUMN: FIELD: message`.

use annotate_snippets::{AnnotationKind, Group, Level, Renderer, Snippet};
use kvcc_model::InputError;

/// The error as printed on stderr; styled when `styled` (anstream strips the styles
/// again where colour is off).
pub fn render(error: &InputError, styled: bool) -> String {
    let renderer = if styled {
        Renderer::styled()
    } else {
        Renderer::plain()
    };
    let title = match &error.field {
        Some(field) => format!("{field}: {}", error.message),
        None => error.message.clone(),
    };
    let line_text = source_line(error);
    let (Some(file), Some((line, column)), Some(text)) = (&error.file, error.at, &line_text) else {
        let mut group = Group::with_title(Level::ERROR.primary_title(error.to_string()));
        if let Some(help) = &error.help {
            group = group.element(Level::HELP.message(&**help));
        }
        return renderer.render(&[group]).to_string();
    };
    let start = text
        .char_indices()
        .nth(column.saturating_sub(1))
        .map_or(text.len(), |(i, _)| i);
    let end = text[start..]
        .char_indices()
        .nth(error.len.max(1))
        .map_or(text.len(), |(i, _)| start + i);
    let snippet = Snippet::source(text.as_str())
        .line_start(line)
        .path(file.as_str())
        .annotation(AnnotationKind::Primary.span(start..end.max(start)));
    let mut group = Level::ERROR.primary_title(title).element(snippet);
    if let Some(help) = &error.help {
        group = group.element(Level::HELP.message(&**help));
    }
    renderer.render(&[group]).to_string()
}

/// The line an error points at, when it has a span and the file can still be read.
fn source_line(error: &InputError) -> Option<String> {
    if error.len == 0 {
        return None;
    }
    let (line, _) = error.at?;
    // Through the one bounded reader: the file may be the FIFO or device the error is about.
    let text = kvcc_model::input::read_text(std::path::Path::new(error.file.as_ref()?), "").ok()?;
    text.lines().nth(line.checked_sub(1)?).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spanned_error_shows_the_line_underlined_and_its_help() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("typo.toml");
        std::fs::write(&file, "version = 1\nrequets = 1\n").unwrap();
        let file = file.display().to_string();
        let error = InputError {
            file: Some(file.clone()),
            at: Some((2, 1)),
            field: Some("requets".into()),
            message: "unknown field `requets`".into(),
            len: 7,
            help: Some("did you mean `requests`?".into()),
        };
        let text = render(&error, false);
        assert!(
            text.starts_with("error: requets: unknown field `requets`\n"),
            "{text}"
        );
        assert!(text.contains(&format!("--> {file}:2:1\n")), "{text}");
        assert!(text.contains("2 | requets = 1\n"), "{text}");
        assert!(text.contains("  | ^^^^^^^"), "{text}");
        assert!(!text.contains("^^^^^^^^"), "only the key: {text}");
        assert!(text.contains("= help: did you mean `requests`?"), "{text}");
    }

    #[test]
    fn an_error_without_a_span_stays_one_line() {
        let error = InputError::file("runs/x/rank0.jsonl", "blank line");
        assert_eq!(
            render(&error, false),
            "error: runs/x/rank0.jsonl: blank line"
        );
    }
}
