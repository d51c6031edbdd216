//! Input errors: what `kvcc` prints, with exit code 2, when a spec, a trace or an
//! argument cannot be used. Each names where (`FILE:LINE:COLUMN`) and what (the field
//! path) as precisely as the input allows.

use std::fmt;

/// One input error: `FILE:LINE:COLUMN: FIELD.PATH: message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError {
    /// The file, as given on the command line; None for a command-line argument.
    pub file: Option<String>,
    /// 1-based line and column, when known.
    pub at: Option<(usize, usize)>,
    /// The field path (`prefill.pcp`), when the error is about one field.
    pub field: Option<String>,
    pub message: String,
}

impl InputError {
    /// An error about a whole file (unreadable, empty, ...).
    pub fn file(file: &str, message: impl Into<String>) -> InputError {
        InputError {
            file: Some(file.to_string()),
            at: None,
            field: None,
            message: message.into(),
        }
    }

    /// An error about a command-line argument.
    pub fn usage(message: impl Into<String>) -> InputError {
        InputError {
            file: None,
            at: None,
            field: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}:")?;
            if let Some((line, column)) = self.at {
                write!(f, "{line}:{column}:")?;
            }
            write!(f, " ")?;
        }
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for InputError {}

/// Prints errors the way every kvcc command does: `error: ...` on stderr, one a line;
/// under GitHub Actions also an `::error` annotation at the file and line.
pub fn print(errors: &[InputError]) {
    for error in errors {
        eprintln!("error: {error}");
        if let (true, Some(file)) = (crate::report::github::active(), &error.file) {
            let line = error.at.map_or(1, |(line, _)| line);
            let message = match &error.field {
                Some(field) => format!("{field}: {}", error.message),
                None => error.message.clone(),
            };
            println!(
                "{}",
                crate::report::github::annotation(file, line, "kvcc: invalid input", &message)
            );
        }
    }
}
