//! The time and memory limits, and an interrupt, read where the work is: by the search's
//! workers between chunks and every few thousand successors, and by the walks that follow a
//! search (the cheapest counterexample, the point of no return), which repeat its work on
//! a graph no larger than its own and must stop where the search would have.

use super::Limits;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the process's resident memory is read: a read costs a few microseconds, and
/// a worker reads its limits every few thousand successors (milliseconds apart).
const MEMORY_EVERY: Duration = Duration::from_millis(20);

/// Which limit ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Spent {
    Time,
    Memory,
    /// Whoever runs the search asked it to stop (a signal, for the CLI).
    Interrupt,
}

/// What bounds a search besides its own count of states: its limits, the clock started
/// with it, and the flag that interrupts it.
#[derive(Clone, Copy)]
pub(super) struct Bounds<'a> {
    pub(super) limits: &'a Limits,
    pub(super) start: Instant,
    pub(super) interrupt: Option<&'a AtomicBool>,
}

/// One reader's view of the bounds, and when this reader last read the process's memory.
pub(super) struct Allowance<'a> {
    bounds: Bounds<'a>,
    memory_read: Option<Instant>,
}

impl<'a> Allowance<'a> {
    pub(super) fn new(bounds: Bounds<'a>) -> Self {
        Allowance {
            bounds,
            memory_read: None,
        }
    }

    /// Whether the search was interrupted, or its time or the process's memory is past
    /// its limit.
    pub(super) fn spent(&mut self) -> Option<Spent> {
        spent(&self.bounds, &mut self.memory_read)
    }
}

/// Whether `bounds` are spent: the interrupt raised, the time since the start or the
/// process's memory past its limit; memory is read at most every [`MEMORY_EVERY`],
/// `memory_read` being when this reader last read it.
pub(super) fn spent(bounds: &Bounds, memory_read: &mut Option<Instant>) -> Option<Spent> {
    if bounds
        .interrupt
        .is_some_and(|flag| flag.load(Ordering::Relaxed))
    {
        return Some(Spent::Interrupt);
    }
    let (limits, start) = (bounds.limits, bounds.start);
    if limits.timeout.is_some_and(|t| start.elapsed() >= t) {
        return Some(Spent::Time);
    }
    let max = limits.max_memory?;
    if memory_read.is_none_or(|at| at.elapsed() >= MEMORY_EVERY) {
        *memory_read = Some(Instant::now());
        if resident_bytes().is_some_and(|b| b >= max) {
            return Some(Spent::Memory);
        }
    }
    None
}

/// The process's resident memory in bytes, where the kernel tells it.
fn resident_bytes() -> Option<u64> {
    let statm = procfs::process::Process::myself().ok()?.statm().ok()?;
    Some(statm.resident * procfs::page_size())
}
