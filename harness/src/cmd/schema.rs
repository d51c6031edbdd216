//! `kvcc schema`.

use crate::out::out;
use crate::Exit;

/// Print a JSON Schema (draft 2020-12): of the spec format, for editors, or of the JSON
/// lines `kvcc check --format json` writes, for the tools that read them.
///
/// Both are generated from the types kvcc reads and writes. Editors that read JSON Schema
/// for TOML (e.g. Even Better TOML / taplo) complete and check spec fields with the first;
/// `kvcc check` remains the authority.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  kvcc schema > kvcc-spec.schema.json\n  # then, first line of a spec: #:schema ./kvcc-spec.schema.json\n  kvcc schema json-lines > kvcc-lines.schema.json"
)]
pub struct Args {
    /// Which format's schema.
    #[arg(value_enum, default_value_t = Format::Spec)]
    format: Format,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Format {
    /// A spec file (TOML).
    Spec,
    /// One line of `kvcc check --format json` or `kvcc merge --format json`.
    JsonLines,
}

pub fn exec(args: Args) -> Exit {
    let schema = match args.format {
        Format::Spec => crate::spec::schema::schema(),
        Format::JsonLines => crate::report::json::schema(),
    };
    out!(
        "{}",
        serde_json::to_string_pretty(&schema).expect("a JSON value prints")
    );
    Exit::Ok
}
