//! Output files written whole or not at all. Each is written under a temporary name in
//! its own directory and renamed over its path: two runs writing one path (two checks
//! into one `--trace-dir`) leave one run's file or the other's, never one's head and the
//! other's tail, and a reader never sees half a file. A path that is not a regular file
//! (`--junit /dev/stdout`, a FIFO) is written in place: it cannot be renamed over, and
//! must not be (`/dev/full` replaced by a file).

use std::fs::Permissions;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Writes `contents` to `path` as a new file with the usual permissions (0666 less the
/// umask, as `std::fs::write` creates files).
pub fn write(path: &Path, contents: &[u8]) -> io::Result<()> {
    write_with_mode(path, contents, None)
}

/// Like [`write`], with mode 0755: a script anyone may run, as traces' `.sh` always were.
pub fn write_executable(path: &Path, contents: &[u8]) -> io::Result<()> {
    write_with_mode(path, contents, Some(0o755))
}

fn write_with_mode(path: &Path, contents: &[u8], mode: Option<u32>) -> io::Result<()> {
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return std::fs::write(path, contents);
    }
    let mut file = tempfile::Builder::new()
        .prefix(".kvcc-")
        .suffix(".tmp")
        .permissions(Permissions::from_mode(0o666))
        .tempfile_in(directory_of(path))?;
    file.write_all(contents)?;
    if let Some(mode) = mode {
        file.as_file()
            .set_permissions(Permissions::from_mode(mode))?;
    }
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Where `path`'s temporary twin goes: beside it, so that the rename stays on one file
/// system.
fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Makes `dir` if it is missing and proves a file can be written in it, so that a run
/// refuses an unusable output directory before its first check instead of after it.
pub fn usable_dir(dir: &Path) -> io::Result<()> {
    if std::fs::metadata(dir).is_ok_and(|m| !m.is_dir()) {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "exists and is not a directory",
        ));
    }
    std::fs::create_dir_all(dir)?;
    // Dropped at once, which removes it.
    tempfile::Builder::new()
        .prefix(".kvcc-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    #[test]
    fn a_write_replaces_the_file_instead_of_writing_into_it() {
        let dir = tempfile::tempdir().unwrap();
        let witness = dir.path().join("witness");
        let path = dir.path().join("out.txt");
        std::fs::write(&witness, "before").unwrap();
        std::fs::hard_link(&witness, &path).unwrap();
        write(&path, b"after").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "after");
        assert_eq!(std::fs::read_to_string(&witness).unwrap(), "before");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "no temporary file left: {names:?}");
    }

    #[test]
    fn permissions_are_those_of_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let (plain, script) = (dir.path().join("a.txt"), dir.path().join("a.sh"));
        write(&plain, b"x").unwrap();
        write_executable(&script, b"x").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&plain) & 0o600, 0o600);
        assert_eq!(mode(&plain) & 0o111, 0);
        assert_eq!(mode(&script), 0o755);
    }

    #[test]
    fn a_device_is_written_in_place() {
        let error = write(Path::new("/dev/full"), b"x").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::StorageFull);
        assert!(std::fs::metadata("/dev/full")
            .unwrap()
            .file_type()
            .is_char_device());
    }

    #[test]
    fn a_file_is_not_a_usable_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "").unwrap();
        assert!(usable_dir(&file).is_err());
        assert!(usable_dir(&file.join("sub")).is_err());
        let fresh = dir.path().join("a/b");
        usable_dir(&fresh).unwrap();
        assert_eq!(std::fs::read_dir(&fresh).unwrap().count(), 0);
    }
}
