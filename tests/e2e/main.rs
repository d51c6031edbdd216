//! kvcc's end-to-end suite: the real binaries (`kvcc`, `kvcc-bench`) run over the fixtures
//! in `tests/fixtures/` and the shipped `specs/`, as a user runs them. One test binary
//! with a module per subject, so the suite links once.

mod common;

mod actionlint;
mod annotations;
mod atomic;
mod bench;
mod check;
mod ci;
mod completions;
mod confirm_vllm;
mod conform_cli;
mod conform_recorder;
mod conform_throughput;
mod errors;
mod explore;
mod fingerprints;
mod first_minutes;
mod fuzz;
mod golden;
mod hostile;
mod independence;
mod interrupt;
mod layout;
mod merge;
mod order;
mod recorder_plugin;
mod reduction;
mod release;
mod sarif;
mod schema;
mod shard;
mod simulate_cli;
mod simulate_closed_loop;
mod terminal;
mod traces;
mod typed_itf;
mod version;
mod violated_cut;
