//! The `kvcc` binary: parse the command line, run the subcommand, exit with its code.

use clap::Parser;
use kvcc::cmd::Cli;
use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: kvcc::allocator::Allocator = kvcc::allocator::Allocator;

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli.color.apply();
    ExitCode::from(cli.command.exec().code())
}
