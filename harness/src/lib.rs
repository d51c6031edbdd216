//! kvcc's command-line harness: spec files in, verdicts, reports and counterexample traces
//! out. The binary (`main.rs`) only parses arguments and dispatches to [`cmd`], one file
//! per subcommand; the rest is the walk of a spec to its verdict and trace:
//!
//! - [`spec`] reads a TOML spec (spans for errors, the matrix's [`spec::point::Point`]s,
//!   the JSON Schema) and builds a `kvcc_model::Config` for each point;
//! - [`run`] checks every point with `kvcc_model::checker` and compares the verdict with
//!   the spec's expectation;
//! - [`shard`] splits a run's checks over machines, balanced by estimated cost, and
//!   [`progress`] shows a run's progress on stderr;
//! - [`report`] renders results (table, JSON lines, JUnit XML, GitHub annotations) and
//!   input errors (compiler-style, with the source line);
//! - [`trace`] writes counterexamples as text, Markdown (with Mermaid) and ITF JSON, and
//!   replays an ITF trace against the model;
//! - [`named`] follows a path an input file names (a trace's spec, a shard's) only
//!   inside the working directory or that file's own;
//! - [`explore`] serves stateright's web explorer on loopback;
//! - [`simulate`] writes random executions of the model as recorded runs, which
//!   `kvcc_conform` checks like a vLLM deployment's, and [`confirm`] plays into vLLM's
//!   own scheduler and aggregator.
//!
//! Both binaries, `kvcc` and `kvcc-bench`, allocate through [`allocator`].

pub mod allocator;
pub mod atomic;
pub mod cmd;
pub mod confirm;
pub mod explore;
pub mod interrupt;
pub mod named;
pub mod out;
pub mod progress;
pub mod report;
pub mod run;
pub mod shard;
pub mod simulate;
pub mod spec;
pub mod trace;

pub use kvcc_model::VERSION;

/// The commit this kvcc was built from (`git rev-parse HEAD` at build time, `unknown`
/// outside a checkout; `build.rs`): with [`VERSION`] and [`dirty`], which code checked a
/// run.
pub const COMMIT: &str = env!("KVCC_COMMIT");

/// What `kvcc --version` prints after `kvcc `: the version, the commit and the tree state,
/// composed by `build.rs`.
pub const VERSION_LINE: &str = env!("KVCC_VERSION_LINE");

/// The workspace paths whose state at build time [`dirty`] reports (`build.rs`).
pub const BUILT_FROM: &str = env!("KVCC_BUILT_FROM");

/// Whether a file this kvcc was built from differed from [`COMMIT`] (edited, or new and
/// untracked) when it was built; None when that is not known (not built from a git
/// checkout, or the commit was given by the builder).
pub fn dirty() -> Option<bool> {
    match env!("KVCC_TREE") {
        "clean" => Some(false),
        "dirty" => Some(true),
        _ => None,
    }
}

/// The code that checked a run, as every report states it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Build {
    pub version: String,
    pub commit: String,
    pub dirty: Option<bool>,
}

impl Build {
    /// This kvcc.
    pub fn this() -> Build {
        Build {
            version: VERSION.to_string(),
            commit: COMMIT.to_string(),
            dirty: dirty(),
        }
    }
}

/// How a command ends, as its exit code says it (ripgrep and cargo use the same three).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Everything as expected.
    Ok,
    /// A finding: a verdict differs from its expectation, a trace does not reproduce.
    Finding,
    /// A usage or input error: nothing was concluded.
    Input,
    /// Stopped by this signal (SIGINT, SIGTERM): 128 + its number, as a shell reports a
    /// command the signal killed.
    Signal(i32),
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Finding => 1,
            Exit::Input => 2,
            Exit::Signal(number) => u8::try_from(128 + number).unwrap_or(u8::MAX),
        }
    }
}
