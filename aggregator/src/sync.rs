//! The one place the aggregator's concurrent front gets its sync primitives from, so a
//! `--cfg loom` build swaps every lock and thread for loom's model-checked versions, and
//! the `shuttle` feature swaps them for shuttle's randomly scheduled ones.
//!
//! Tests that drive the front from several threads import `Arc` and `thread` from here
//! too: a loom or shuttle scheduler only controls threads it spawned itself. If both are
//! requested, loom wins, because `--cfg loom` is meant to build nothing but the loom suite.

#[cfg(loom)]
pub use loom::{
    sync::{atomic, Arc, Condvar, Mutex, MutexGuard},
    thread,
};

#[cfg(all(feature = "shuttle", not(loom)))]
pub use shuttle::{
    sync::{atomic, Arc, Condvar, Mutex, MutexGuard},
    thread,
};

#[cfg(not(any(loom, feature = "shuttle")))]
pub use std::{
    sync::{atomic, Arc, Condvar, Mutex, MutexGuard},
    thread,
};
