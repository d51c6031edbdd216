//! Input errors: what `kvcc` prints, with exit code 2, when a spec, a trace, a recorded
//! run or an argument cannot be used. Each names where (`FILE:LINE:COLUMN`) and what (the
//! field path) as precisely as the input allows. One type for every crate that reads
//! input (the harness's spec loader, conform's recorded-run reader), so every command
//! reports them alike.
//!
//! Input arrives from strangers (specs and traces in pull requests, recorded runs), so
//! every file is opened here: it must be a regular file (not `/dev/zero`, a FIFO or a
//! directory), and a whole-file read stops at a cap instead of growing without bound.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// The most a spec, a trace or a run header may hold. The largest shipped spec is a few
/// KiB and a trace of a thousand steps well under a MiB; past this a file is not one.
pub const TEXT_BYTES_MAX: u64 = 16 << 20;

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

/// Opens `path` for reading if it is a regular file; `what` names it in errors ("spec").
/// The check is made on the opened file, so a path swapped after the check cannot slip
/// a device in. The open itself does not wait: opening a FIFO for reading blocks until
/// a writer comes, before any check could run, so it is opened non-blocking (which
/// changes nothing for a regular file's reads).
pub fn open_regular(path: &Path, what: &str) -> Result<File, InputError> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = path.display().to_string();
    let fail = |message: String| InputError::file(&name, message);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| fail(format!("cannot read {what}: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| fail(format!("cannot read {what}: {e}")))?;
    if !meta.is_file() {
        let kind = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file (a device, FIFO or socket)"
        };
        return Err(fail(format!("cannot read {what}: {kind}")));
    }
    Ok(file)
}

/// Reads a whole regular file of at most [`TEXT_BYTES_MAX`] bytes as UTF-8 text. Invalid
/// UTF-8 is reported at its line and column.
pub fn read_text(path: &Path, what: &str) -> Result<String, InputError> {
    let name = path.display().to_string();
    let file = open_regular(path, what)?;
    let mut bytes = Vec::new();
    file.take(TEXT_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| InputError::file(&name, format!("cannot read {what}: {e}")))?;
    if bytes.len() as u64 > TEXT_BYTES_MAX {
        return Err(InputError::file(
            &name,
            format!(
                "cannot read {what}: larger than {} MiB",
                TEXT_BYTES_MAX >> 20
            ),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = valid.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        // Columns count characters, as editors do; the prefix is valid UTF-8.
        let column = String::from_utf8_lossy(&valid[line_start..])
            .chars()
            .count()
            + 1;
        InputError {
            at: Some((line, column)),
            ..InputError::file(&name, format!("{what} is not UTF-8 text"))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_directories_are_refused_before_any_read() {
        for path in ["/dev/zero", "/dev/null", "/"] {
            let error = read_text(Path::new(path), "spec").unwrap_err();
            assert!(error.message.starts_with("cannot read spec: "), "{error}");
        }
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("spec.toml");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let error = read_text(&fifo, "spec").unwrap_err();
        assert!(error.message.contains("not a regular file"), "{error}");
    }

    #[test]
    fn a_file_past_the_cap_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.toml");
        std::fs::write(&path, vec![b'#'; TEXT_BYTES_MAX as usize + 1]).unwrap();
        let error = read_text(&path, "spec").unwrap_err();
        assert!(error.message.contains("larger than 16 MiB"), "{error}");
        std::fs::write(&path, vec![b'#'; TEXT_BYTES_MAX as usize]).unwrap();
        assert!(
            read_text(&path, "spec").is_ok(),
            "a file at the cap is read"
        );
    }

    #[test]
    fn invalid_utf8_names_its_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.toml");
        std::fs::write(&path, b"a = 1\nb\xc3\xa9 = \xff\n").unwrap();
        let error = read_text(&path, "spec").unwrap_err();
        assert_eq!(error.at, Some((2, 6)), "{error}");
    }
}
