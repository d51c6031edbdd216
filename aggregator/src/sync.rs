//! The one place the aggregator's concurrent front gets its sync primitives from, so the
//! `loom` feature swaps every lock and thread for loom's model-checked versions, and the
//! `shuttle` feature swaps them for shuttle's randomly scheduled ones. (Features rather
//! than loom's customary `--cfg loom`: a feature build shares every dependency with the
//! ordinary test build, where `--cfg loom` in RUSTFLAGS rebuilds them all.)
//!
//! Tests that drive the front from several threads import `Arc` and `thread` from here
//! too: a loom or shuttle scheduler only controls threads it spawned itself. If both are
//! requested, loom wins, because the `loom` feature is meant to build nothing but the
//! loom suite.

#[cfg(feature = "loom")]
pub use loom::{
    sync::{atomic, Arc, Condvar, Mutex, MutexGuard},
    thread,
};

#[cfg(all(feature = "shuttle", not(feature = "loom")))]
pub use shuttle::{
    sync::{atomic, Arc, Condvar, Mutex, MutexGuard},
    thread,
};

#[cfg(not(any(feature = "loom", feature = "shuttle")))]
pub use std::{
    sync::{atomic, Arc, Condvar, Mutex, MutexGuard},
    thread,
};
