//! The completion-report aggregator of vLLM's KV-transfer path, restated once.
//!
//! vLLM's `KVOutputAggregator` (`vllm/distributed/kv_transfer/kv_connector/utils.py`)
//! counts per-worker "done sending" / "done receiving" reports and tells the scheduler
//! when a request has been reported by `E` workers. kvcc has exactly one implementation
//! of that logic, used three ways:
//!
//! - [`core::Aggregator`] — deterministic, sans-IO, `Clone + Hash + Eq`: the stateright
//!   model calls it from `next_state` and packs it into its states ([`core::Aggregator::pack`];
//!   its entries in a short sorted vector, [`SortedAggregator`]), proptest compares it
//!   with a set-based reference;
//! - [`front::ConcurrentAggregator`] — the same core behind its own lock, with rank threads
//!   reporting concurrently and a consumer draining emitted ids; loom and shuttle check
//!   it, and `kvcc conform` runs recorded deployments through it.

mod codec;
pub mod core;
mod entries;
pub mod front;
mod name;
pub mod sync;

pub use crate::core::{
    connector_expected, countdown_room, step_expected, Aggregator, Direction, HashedAggregator,
    HashedEntries, Policy, Rank, SortedAggregator, StepOutcome, Violation, ViolationKind,
    WorkerOutput,
};
pub use crate::entries::{EntryMap, Fate, OrderedEntryMap, SortedEntries};
pub use crate::front::{ConcurrentAggregator, FrontError, Step};
pub use crate::name::RequestName;
