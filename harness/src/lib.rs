//! kvcc's command-line harness: spec files in, verdicts, reports and counterexample traces
//! out. The binary (`main.rs`) only parses arguments and dispatches to [`cmd`]; everything
//! a test or another tool may want to call lives in the modules below.
//!
//! - [`spec`] reads a TOML spec (with [`source`] spans for errors), expands its matrix into
//!   [`point::Point`]s and builds a `kvcc_model::Config` for each;
//! - [`run`] checks every point and compares the verdict with the spec's expectation;
//! - [`report`] renders results as a table, JSON lines, JUnit XML and GitHub annotations;
//! - [`trace`] writes counterexamples as text, Markdown (with Mermaid) and ITF JSON;
//! - [`replay`] re-executes an ITF trace against the model;
//! - [`explore`] serves stateright's web explorer on loopback;
//! - [`schema`] is the JSON Schema of the spec format;
//! - [`conform`] checks recorded runs (vLLM's or [`simulate`]'s) against the contract.

pub mod bench;
pub mod cmd;
pub mod conform;
pub mod error;
pub mod explore;
pub mod point;
pub mod replay;
pub mod report;
pub mod run;
pub mod schema;
pub mod simulate;
pub mod source;
pub mod spec;
pub mod trace;

/// kvcc's version, stamped into every report and trace.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// How a command ends, as its exit code says it (ripgrep and cargo use the same three).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Everything as expected.
    Ok,
    /// A finding: a verdict differs from its expectation, a trace does not reproduce.
    Finding,
    /// A usage or input error: nothing was concluded.
    Input,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Finding => 1,
            Exit::Input => 2,
        }
    }
}
