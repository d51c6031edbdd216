//! The `kvcc` binary: parse the command line, run the subcommand, exit with its code.

use clap::Parser;
use kvcc::cmd::Cli;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    ExitCode::from(cli.command.exec().code())
}
