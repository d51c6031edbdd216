//! Standard output, kept the way command-line tools keep it: a reader that goes away
//! (`kvcc check --format json | head -c 10`) ends kvcc quietly with exit 0, as ripgrep
//! does; any other failed write (a full disk behind `> file`) is an error, exit 2 — never
//! the panic of `println!`.

use std::fmt::Arguments;
use std::io::{ErrorKind, Write};

/// Writes and flushes `args` to standard output, ending the process as above on failure.
/// Styles (a coloured table) pass through anstream, which drops them where `--color`,
/// NO_COLOR or a non-terminal says so.
pub fn write(args: Arguments<'_>) {
    let mut stdout = anstream::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        if e.kind() == ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to standard output: {e}");
        std::process::exit(2);
    }
}

/// `print!` through [`write`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::write(format_args!($($arg)*)) };
}

/// `println!` through [`write`].
macro_rules! outln {
    () => { $crate::out::write(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::write(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use {out, outln};
