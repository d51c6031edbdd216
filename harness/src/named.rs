//! Paths that an input file names, rather than the user: a trace's spec (`#meta.source`),
//! a shard line's spec and traces (`kvcc merge`). A trace or a shard may come from a
//! stranger, and what it names must not make kvcc read any file: such a path is followed
//! only to a file of the kind expected, without `..`, and only where it stays, links
//! followed, inside the working directory or the naming file's own directory.

use kvcc_model::InputError;
use std::path::{Component, Path, PathBuf};

/// A path `field` of `file` names, and what to tell the user when it is refused.
pub struct Named<'a> {
    pub file: &'a str,
    pub field: &'a str,
    pub path: &'a str,
    /// The file kinds the path may name (`toml`, `md`, `json`…): its last extension.
    pub extensions: &'a [&'a str],
    /// What the user can do instead, appended to a refusal.
    pub advice: &'a str,
}

impl Named<'_> {
    /// The error refusing the path: `message`, then the advice, at the naming field.
    pub fn refuse(&self, message: String) -> InputError {
        InputError {
            field: Some(self.field.to_string()),
            ..InputError::file(self.file, format!("{message}; {}", self.advice))
        }
    }

    /// Where the path leads, as the user would write it (relative to the working
    /// directory where it is inside it), or None when it names no file in either tree.
    /// A relative path is looked up in the working directory, then in the naming file's
    /// directory and the directories above it that are still inside the working directory
    /// (a trace in `traces/` names `specs/x.toml` from the repository root).
    pub fn resolve(&self) -> Result<Option<String>, InputError> {
        let path = Path::new(self.path);
        let kind_ok = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| self.extensions.contains(&e));
        if path.components().any(|c| c == Component::ParentDir) || !kind_ok {
            return Err(self.refuse(format!(
                "names `{}`: kvcc follows only a path to a `.{}` file without `..`",
                self.path,
                self.extensions.join("` or `.")
            )));
        }
        let cwd = std::env::current_dir()
            .and_then(std::fs::canonicalize)
            .map_err(|e| InputError::usage(format!("cannot find the working directory: {e}")))?;
        let own_dir = std::fs::canonicalize(self.file)
            .ok()
            .and_then(|t| t.parent().map(Path::to_path_buf));
        let trusted = |real: &Path| {
            real.starts_with(&cwd) || own_dir.as_deref().is_some_and(|d| real.starts_with(d))
        };
        let candidates: Vec<PathBuf> = if path.is_absolute() {
            vec![path.to_path_buf()]
        } else {
            let above = own_dir
                .iter()
                .flat_map(|dir| dir.ancestors())
                .enumerate()
                .filter(|(i, dir)| *i == 0 || dir.starts_with(&cwd))
                .map(|(_, dir)| dir.join(path));
            std::iter::once(cwd.join(path)).chain(above).collect()
        };
        for candidate in candidates {
            let Ok(real) = std::fs::canonicalize(&candidate) else {
                continue;
            };
            if !trusted(&real) {
                return Err(self.refuse(format!(
                    "names `{}`, which leads outside the working directory and the directory of {}",
                    self.path, self.file
                )));
            }
            let shown = candidate.strip_prefix(&cwd).unwrap_or(&candidate);
            return Ok(Some(shown.display().to_string()));
        }
        Ok(None)
    }
}
