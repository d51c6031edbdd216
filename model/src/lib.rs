//! Stateright models of vLLM's KV-transfer completion contracts (`docs/contracts.md`)
//! and the checker that explores them.
//!
//! How a scenario flows: a [`config::Config`] (from a spec file) fixes topology and
//! behaviours; [`topology`] derives who reads whom; [`model::ContractModel`] is the
//! stateright model, whose `next_state` drives the domain modules — [`rank`] (P workers),
//! [`offload`] (MultiConnector's CPU stores), [`lease`], [`decoder`] (D workers), [`scheduler`] and [`engine`] (steps through the real
//! aggregator); [`properties`] names the contract clauses; [`checker`] explores the state
//! graph and returns a verdict with replayed, shortest counterexamples; [`describe`] puts
//! states and actions into vLLM's vocabulary for traces.

pub mod action;
pub mod checker;
pub mod config;
pub mod decoder;
pub mod describe;
pub mod engine;
pub mod independence;
pub mod input;
pub mod lease;
pub mod message;
pub mod model;
pub mod narrate;
pub mod offload;
pub mod pack;
pub mod progress;
pub mod properties;
pub mod rank;
pub mod scheduler;
pub mod state;
pub mod stateright_properties;
pub mod symmetry;
pub mod topology;

/// kvcc's version (the workspace's), stamped into every report, trace and recorded run.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub use config::Config;
pub use input::InputError;
pub use model::{Action, ContractModel, Observation};
pub use state::State;
