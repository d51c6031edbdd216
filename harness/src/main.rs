//! The `kvcc` binary: parse the command line, run the subcommand, exit with its code.

use clap::Parser;
use kvcc::cmd::Cli;
use std::process::ExitCode;

// The checker allocates and frees model states at millions per second; glibc's malloc
// spent a quarter of the time there (perf), mimalloc a fraction of it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli.color.apply();
    ExitCode::from(cli.command.exec().code())
}
