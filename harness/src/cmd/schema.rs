//! `kvcc schema`.

use crate::out::out;
use crate::Exit;

/// Print the JSON Schema (draft 2020-12) of the spec format, for editors.
///
/// Editors that read JSON Schema for TOML (e.g. Even Better TOML / taplo) complete and
/// check spec fields with it; `kvcc check` remains the authority.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  kvcc schema > kvcc-spec.schema.json\n  # then, first line of a spec: #:schema ./kvcc-spec.schema.json"
)]
pub struct Args {}

pub fn exec(_: Args) -> Exit {
    out!("{}", crate::spec::schema::SCHEMA);
    Exit::Ok
}
