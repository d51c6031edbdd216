//! The time and memory limits, read where the work is: by the search's workers between
//! chunks and inside a state's expansion, and by the walks that follow a search (the
//! cheapest counterexample, the point of no return), which repeat its work on a graph
//! no larger than its own and must stop where the search would have.

use super::Limits;
use std::time::{Duration, Instant};

/// How often the process's resident memory is read: a read costs a few microseconds, a
/// chunk of the search about a millisecond.
const MEMORY_EVERY: Duration = Duration::from_millis(20);

/// Which limit ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Spent {
    Time,
    Memory,
}

/// One reader's view of the limits: the clock started with the search, and when this
/// reader last read the process's memory.
pub(super) struct Allowance<'a> {
    limits: &'a Limits,
    start: Instant,
    memory_read: Option<Instant>,
}

impl<'a> Allowance<'a> {
    pub(super) fn new(limits: &'a Limits, start: Instant) -> Self {
        Allowance {
            limits,
            start,
            memory_read: None,
        }
    }

    /// Whether the search's time or the process's memory is past its limit.
    pub(super) fn spent(&mut self) -> Option<Spent> {
        spent(self.limits, self.start, &mut self.memory_read)
    }
}

/// Whether the time since `start` or the process's memory is past its limit in
/// `limits`; memory is read at most every [`MEMORY_EVERY`], `memory_read` being when
/// this reader last read it.
pub(super) fn spent(
    limits: &Limits,
    start: Instant,
    memory_read: &mut Option<Instant>,
) -> Option<Spent> {
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
