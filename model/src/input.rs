//! Input errors: what `kvcc` prints, with exit code 2, when a spec, a trace, a recorded
//! run or an argument cannot be used. Each names where (`FILE:LINE:COLUMN`) and what (the
//! field path) as precisely as the input allows. One type for every crate that reads
//! input (the harness's spec loader, conform's recorded-run reader), so every command
//! reports them alike.

use std::fmt;

/// One input error: `FILE:LINE:COLUMN: FIELD.PATH: message`, and what a compiler-style
/// report adds to it (how much of the line to underline, a help line).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InputError {
    /// The file, as given on the command line; None for a command-line argument.
    pub file: Option<String>,
    /// 1-based line and column, when known.
    pub at: Option<(usize, usize)>,
    /// The field path (`prefill.pcp`), when the error is about one field.
    pub field: Option<String>,
    pub message: String,
    /// Characters from `at` that the error is about (the key or value); 0 when only the
    /// position is known.
    pub len: usize,
    /// What to do about it, e.g. the closest valid key (`did you mean ...`). Boxed, so
    /// that a `Result<_, InputError>` stays small.
    pub help: Option<Box<str>>,
}

impl InputError {
    /// An error about a whole file (unreadable, empty, ...).
    pub fn file(file: &str, message: impl Into<String>) -> InputError {
        InputError {
            file: Some(file.to_string()),
            message: message.into(),
            ..InputError::default()
        }
    }

    /// An error about a command-line argument.
    pub fn usage(message: impl Into<String>) -> InputError {
        InputError {
            message: message.into(),
            ..InputError::default()
        }
    }
}

impl InputError {
    /// The same error with a help line.
    pub fn with_help(self, help: impl Into<String>) -> InputError {
        InputError {
            help: Some(help.into().into_boxed_str()),
            ..self
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
