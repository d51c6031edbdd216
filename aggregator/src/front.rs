//! The concurrent front: vLLM's executor step barrier, restated for threads.
//!
//! vLLM's executor collects the outputs of **all** workers for an engine step and hands
//! them to `KVOutputAggregator` together, step after step (contracts.md §3–§4). Here each
//! rank has its own thread calling [`ConcurrentAggregator::report`] (or
//! [`ConcurrentAggregator::report_missing`] for a step in which it produced no output),
//! and the front plays the executor:
//!
//! - a step is aggregated once every rank `0..world_size` has submitted it, with the
//!   outputs passed to the core in rank order, so outcomes do not depend on interleaving;
//! - steps are aggregated in step order. Each rank must submit consecutive steps starting
//!   at the first step (0 unless [`ConcurrentAggregator::starting_at`] says otherwise): a
//!   rank that skipped a step would leave it incomplete forever and block every later
//!   step, so a gap is an error, and a caller with nothing to report for a step says so
//!   with an empty output or `report_missing`;
//! - a step whose output-rank output is missing reaches the core without it, and the core
//!   drops the whole step;
//! - every aggregated step is queued exactly once as `(step, StepOutcome)` for a consumer
//!   to [`drain`](ConcurrentAggregator::drain) or [`recv`](ConcurrentAggregator::recv).
//!
//! Two mutexes, so that ranks never wait for the core. The hub, held only briefly,
//! records each submission, buffers its output, decides which submission completes a
//! step (the last one, because ranks only move forward), and queues outcomes for the
//! consumer. The core has its own lock: the thread whose submission completes a step
//! takes the aggregating role, if no thread holds it, and aggregates complete steps in
//! step order outside the hub, while the other ranks keep submitting; a step completed
//! meanwhile is queued for the role holder. A consumer is signalled only when one is
//! waiting (`recv` first gives way to the ranks, so it rarely does), and outputs are
//! dropped outside both locks. Buffered outputs are removed
//! when their step completes, so memory follows in-flight steps. Bad input never panics:
//! every misuse is a [`FrontError`].

use std::collections::VecDeque;
use std::fmt;

use crate::core::{Aggregator, Direction, Rank, StepOutcome, WorkerOutput};
use crate::sync::{thread, Condvar, Mutex, MutexGuard};

/// An engine step number, as the executor counts them.
pub type Step = u64;

/// Why the front refused a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrontError {
    /// `world_size` must be in `1..=65536`: ranks are `u16`.
    WorldSizeOutOfRange {
        world_size: u32,
    },
    /// The output rank must be one of the ranks, or every step would be dropped.
    OutputRankOutsideWorld {
        output_rank: Rank,
        world_size: u32,
    },
    RankOutsideWorld {
        rank: Rank,
        world_size: u32,
    },
    /// The rank already submitted this step, its latest one.
    DuplicateStep {
        rank: Rank,
        step: Step,
    },
    /// The rank is already past this step.
    StepWentBack {
        rank: Rank,
        step: Step,
        last: Step,
    },
    /// The rank skipped `expected`, which could then never be aggregated.
    StepSkipped {
        rank: Rank,
        step: Step,
        expected: Step,
    },
    /// The step precedes the first step this front aggregates.
    StepBeforeFirst {
        rank: Rank,
        step: Step,
        first_step: Step,
    },
    /// The front was closed: no more submissions.
    Closed,
    /// A thread panicked while holding the front's lock; its state is not trusted.
    Poisoned,
}

impl fmt::Display for FrontError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrontError::WorldSizeOutOfRange { world_size } => {
                write!(f, "world size {world_size} is not in 1..=65536")
            }
            FrontError::OutputRankOutsideWorld {
                output_rank,
                world_size,
            } => {
                write!(
                    f,
                    "output rank {output_rank} is outside a world of {world_size} ranks"
                )
            }
            FrontError::RankOutsideWorld { rank, world_size } => {
                write!(f, "rank {rank} is outside a world of {world_size} ranks")
            }
            FrontError::DuplicateStep { rank, step } => {
                write!(f, "rank {rank} submitted step {step} twice")
            }
            FrontError::StepWentBack { rank, step, last } => {
                write!(f, "rank {rank} submitted step {step} after step {last}")
            }
            FrontError::StepSkipped {
                rank,
                step,
                expected,
            } => {
                write!(
                    f,
                    "rank {rank} submitted step {step} but skipped step {expected}"
                )
            }
            FrontError::StepBeforeFirst {
                rank,
                step,
                first_step,
            } => {
                write!(
                    f,
                    "rank {rank} submitted step {step} before the first step {first_step}"
                )
            }
            FrontError::Closed => f.write_str("the aggregator front is closed"),
            FrontError::Poisoned => {
                f.write_str("a thread panicked inside the aggregator front; its state is lost")
            }
        }
    }
}

impl std::error::Error for FrontError {}

/// How a submission's critical section is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CriticalSection {
    /// Record the submission and decide whether it completes its step under one hold of
    /// the hub.
    Atomic,
    /// A broken twin kept so the loom and shuttle suites prove they can catch this race:
    /// the hub is released between recording a submission and checking whether its step
    /// is complete, so two ranks can both find the step complete and both queue it (the
    /// second time without outputs, its buffer already taken).
    CheckThenAct,
    /// The other broken twin, of the aggregating role: its holder finds no step queued,
    /// releases the hub, and only then gives the role up, so a step queued in between
    /// finds the role held and is never aggregated.
    RoleReleasedLate,
}

/// vLLM's executor in front of the aggregator core: rank threads submit per-step
/// outputs concurrently, complete steps are aggregated in step order, and a consumer
/// takes the outcomes. See the module docs.
pub struct ConcurrentAggregator<Id: Ord> {
    world_size: u32,
    output_rank: Rank,
    first_step: Step,
    critical_section: CriticalSection,
    hub: Mutex<Hub<Id>>,
    /// Taken by the aggregating role for one step at a time, and by the passthroughs.
    core: Mutex<Aggregator<Id>>,
    /// Signalled when a waiting consumer has an outcome to take or the front is closed.
    emitted_or_closed: Condvar,
}

/// Outputs of one step, in arrival order (sorted by rank when the step completes).
type Outputs<Id> = Vec<WorkerOutput<Id>>;

/// Times `recv` gives way to other threads before it sleeps on an empty queue.
const YIELDS_BEFORE_WAITING: u32 = 2;

/// Output buffers kept for reuse, so a steady stream of steps allocates none.
const SPARE_BUFFERS_MAX: usize = 64;

/// Everything the hub lock guards.
struct Hub<Id: Ord> {
    /// The latest step each rank submitted; `None` before its first submission.
    last_step: Vec<Option<Step>>,
    /// Steps completed so far: step `first_step + completed` is the oldest incomplete.
    completed: u64,
    /// `pending[i]`: the outputs of step `first_step + completed + i`. A missing report
    /// leaves nothing here: the core never sees that rank.
    pending: VecDeque<Outputs<Id>>,
    /// Complete steps waiting for the core, in step order.
    ready: VecDeque<(Step, Outputs<Id>)>,
    /// A thread holds the aggregating role: it alone takes steps from `ready`, which is
    /// what keeps the core's steps in order.
    aggregating: bool,
    /// Aggregated steps not yet taken by a consumer, in step order.
    emitted: VecDeque<(Step, StepOutcome<Id>)>,
    /// Consumers blocked in `recv`: only they need a signal.
    waiting: usize,
    spare: Vec<Outputs<Id>>,
    closed: bool,
}

impl<Id: Ord + Clone + Send + 'static> ConcurrentAggregator<Id> {
    /// A front for ranks `0..world_size` whose steps are dropped when `output_rank`'s
    /// output is missing, as vLLM's executor does.
    pub fn new(
        core: Aggregator<Id>,
        world_size: u32,
        output_rank: Rank,
    ) -> Result<Self, FrontError> {
        Self::build(core, world_size, output_rank, CriticalSection::Atomic)
    }

    /// The broken twin: identical except that a submission releases the hub between
    /// recording its output and checking whether its step is complete, so a step can be
    /// emitted twice. It exists only so the loom and shuttle suites can prove they catch
    /// that race; never use it for anything else.
    #[doc(hidden)]
    pub fn with_racy_critical_section(
        core: Aggregator<Id>,
        world_size: u32,
        output_rank: Rank,
    ) -> Result<Self, FrontError> {
        Self::build(core, world_size, output_rank, CriticalSection::CheckThenAct)
    }

    /// The role's broken twin: identical except that the aggregating role is given up
    /// in a second hold of the hub after finding nothing queued, so a step completed in
    /// between is stranded. It exists only so the loom suite can prove it catches that
    /// race; never use it for anything else.
    #[doc(hidden)]
    pub fn with_racy_role_release(
        core: Aggregator<Id>,
        world_size: u32,
        output_rank: Rank,
    ) -> Result<Self, FrontError> {
        Self::build(
            core,
            world_size,
            output_rank,
            CriticalSection::RoleReleasedLate,
        )
    }

    fn build(
        core: Aggregator<Id>,
        world_size: u32,
        output_rank: Rank,
        critical_section: CriticalSection,
    ) -> Result<Self, FrontError> {
        if !(1..=u32::from(Rank::MAX) + 1).contains(&world_size) {
            return Err(FrontError::WorldSizeOutOfRange { world_size });
        }
        if u32::from(output_rank) >= world_size {
            return Err(FrontError::OutputRankOutsideWorld {
                output_rank,
                world_size,
            });
        }
        let ranks = usize::try_from(world_size)
            .map_err(|_| FrontError::WorldSizeOutOfRange { world_size })?;
        let hub = Hub {
            last_step: vec![None; ranks],
            completed: 0,
            pending: VecDeque::new(),
            ready: VecDeque::new(),
            aggregating: false,
            emitted: VecDeque::new(),
            waiting: 0,
            spare: Vec::new(),
            closed: false,
        };
        Ok(ConcurrentAggregator {
            world_size,
            output_rank,
            first_step: 0,
            critical_section,
            hub: Mutex::new(hub),
            core: Mutex::new(core),
            emitted_or_closed: Condvar::new(),
        })
    }

    /// The same front aggregating from `first_step` on, for recordings that do not start
    /// at step 0. Takes `self` so it can only be set before any rank submits.
    pub fn starting_at(mut self, first_step: Step) -> Self {
        self.first_step = first_step;
        self
    }

    pub fn world_size(&self) -> u32 {
        self.world_size
    }

    pub fn output_rank(&self) -> Rank {
        self.output_rank
    }

    /// `output.rank`'s output for `step`.
    pub fn report(&self, step: Step, output: WorkerOutput<Id>) -> Result<(), FrontError> {
        self.submit(step, output.rank, Some(output))
    }

    /// `rank` produced no output for `step`: the core never sees that rank for the step.
    pub fn report_missing(&self, step: Step, rank: Rank) -> Result<(), FrontError> {
        self.submit(step, rank, None)
    }

    /// Passed to [`Aggregator::announce`] at once, so it lands between whichever steps
    /// have been aggregated by then; announce before any rank submits the step whose
    /// reports it must precede.
    pub fn announce(&self, direction: Direction, id: Id) -> Result<(), FrontError> {
        self.lock_core()?.announce(direction, id);
        Ok(())
    }

    /// Passed to [`Aggregator::retire`] at once, like [`announce`](Self::announce).
    pub fn retire(&self, direction: Direction, id: &Id) -> Result<(), FrontError> {
        self.lock_core()?.retire(direction, id);
        Ok(())
    }

    /// Every outcome emitted since the last `drain` or `recv`, in step order, without
    /// waiting.
    pub fn drain(&self) -> Result<Vec<(Step, StepOutcome<Id>)>, FrontError> {
        Ok(self.lock_hub()?.emitted.drain(..).collect())
    }

    /// The next emitted outcome, waiting for one; `None` once the front is closed and
    /// every outcome has been taken.
    pub fn recv(&self) -> Result<Option<(Step, StepOutcome<Id>)>, FrontError> {
        let mut hub = self.lock_hub()?;
        let mut yields = 0;
        loop {
            if let Some(emitted) = hub.emitted.pop_front() {
                return Ok(Some(emitted));
            }
            // A step completed before `close` is still owed to the consumer.
            if hub.closed && hub.ready.is_empty() && !hub.aggregating {
                return Ok(None);
            }
            if yields < YIELDS_BEFORE_WAITING {
                // Lets the ranks run first: a consumer that sleeps whenever it has caught
                // up costs them a wake-up (a syscall and a context switch) per step.
                yields += 1;
                drop(hub);
                thread::yield_now();
                hub = self.lock_hub()?;
                continue;
            }
            hub.waiting += 1;
            hub = self
                .emitted_or_closed
                .wait(hub)
                .map_err(|_| FrontError::Poisoned)?;
            hub.waiting -= 1;
        }
    }

    /// No more submissions: later ones fail with [`FrontError::Closed`] and `recv`
    /// returns `None` once the queue is empty. Steps still incomplete stay buffered (see
    /// [`buffered_steps`](Self::buffered_steps)) and are never aggregated.
    pub fn close(&self) -> Result<(), FrontError> {
        self.lock_hub()?.closed = true;
        self.emitted_or_closed.notify_all();
        Ok(())
    }

    /// Steps holding at least one output and still waiting for some rank.
    pub fn buffered_steps(&self) -> Result<usize, FrontError> {
        let hub = self.lock_hub()?;
        Ok(hub.pending.iter().filter(|o| !o.is_empty()).count())
    }

    /// Reads the core under its lock, e.g. for end-of-run checks. `read` must not call
    /// back into this front: the lock is not reentrant.
    pub fn with_core<R>(&self, read: impl FnOnce(&Aggregator<Id>) -> R) -> Result<R, FrontError> {
        Ok(read(&*self.lock_core()?))
    }

    /// A copy of the core as it is now.
    pub fn core_snapshot(&self) -> Result<Aggregator<Id>, FrontError> {
        self.with_core(Aggregator::clone)
    }

    fn lock_hub(&self) -> Result<MutexGuard<'_, Hub<Id>>, FrontError> {
        self.hub.lock().map_err(|_| FrontError::Poisoned)
    }

    fn lock_core(&self) -> Result<MutexGuard<'_, Aggregator<Id>>, FrontError> {
        self.core.lock().map_err(|_| FrontError::Poisoned)
    }

    fn submit(
        &self,
        step: Step,
        rank: Rank,
        output: Option<WorkerOutput<Id>>,
    ) -> Result<(), FrontError> {
        let mut hub = self.lock_hub()?;
        hub.accept(rank, step, self.world_size, self.first_step)?;
        if let Some(output) = output {
            hub.buffer(step, self.first_step, self.world_size, output);
        }
        if self.critical_section == CriticalSection::CheckThenAct {
            drop(hub);
            hub = self.lock_hub()?;
        }
        if !hub.is_complete(step) {
            return Ok(());
        }
        let outputs = hub.take(step, self.first_step);
        hub.ready.push_back((step, outputs));
        if hub.aggregating {
            // The role holder takes this step after the ones before it.
            return Ok(());
        }
        hub.aggregating = true;
        self.aggregate_ready(hub)
    }

    /// The aggregating role: aggregates queued steps one at a time, holding the core but
    /// not the hub, until none is left. Steps queued meanwhile by other threads are
    /// taken too, so no step waits for a thread that has moved on.
    fn aggregate_ready<'a>(&'a self, mut hub: MutexGuard<'a, Hub<Id>>) -> Result<(), FrontError> {
        while let Some((step, mut outputs)) = hub.ready.pop_front() {
            drop(hub);
            // Ranks are unique within a step, so the order is total and deterministic.
            outputs.sort_unstable_by_key(|o| o.rank);
            let outcome = self.lock_core()?.aggregate(&outputs, self.output_rank);
            outputs.clear();
            hub = self.lock_hub()?;
            if hub.spare.len() < SPARE_BUFFERS_MAX {
                hub.spare.push(outputs);
            }
            hub.emitted.push_back((step, outcome));
            if hub.waiting > 0 {
                self.emitted_or_closed.notify_all();
            }
        }
        if self.critical_section == CriticalSection::RoleReleasedLate {
            drop(hub);
            hub = self.lock_hub()?;
        }
        hub.aggregating = false;
        // A consumer of a closed front waits for the role to end, not for an outcome.
        if hub.closed && hub.waiting > 0 {
            self.emitted_or_closed.notify_all();
        }
        Ok(())
    }
}

impl<Id: Ord + Clone> Hub<Id> {
    /// Records that `rank` submitted `step`, if that is the step it owes next.
    fn accept(
        &mut self,
        rank: Rank,
        step: Step,
        world_size: u32,
        first_step: Step,
    ) -> Result<(), FrontError> {
        if self.closed {
            return Err(FrontError::Closed);
        }
        let Some(last) = self.last_step.get_mut(usize::from(rank)) else {
            return Err(FrontError::RankOutsideWorld { rank, world_size });
        };
        match *last {
            None if step < first_step => Err(FrontError::StepBeforeFirst {
                rank,
                step,
                first_step,
            }),
            None if step > first_step => Err(FrontError::StepSkipped {
                rank,
                step,
                expected: first_step,
            }),
            Some(last) if step == last => Err(FrontError::DuplicateStep { rank, step }),
            Some(last) if step < last => Err(FrontError::StepWentBack { rank, step, last }),
            Some(last) if step - last > 1 => Err(FrontError::StepSkipped {
                rank,
                step,
                expected: last + 1,
            }),
            _ => {
                *last = Some(step);
                Ok(())
            }
        }
    }

    /// Buffers `output` for `step`, which this rank was just accepted for.
    fn buffer(&mut self, step: Step, first_step: Step, world_size: u32, output: WorkerOutput<Id>) {
        // Accepted steps are never complete yet, so never before the oldest incomplete.
        let index = usize::try_from(step - first_step - self.completed)
            .expect("a rank runs at most memory-many steps ahead");
        while self.pending.len() <= index {
            let buffer = self.spare.pop().unwrap_or_else(|| {
                Vec::with_capacity(usize::try_from(world_size).unwrap_or(0).min(64))
            });
            self.pending.push_back(buffer);
        }
        self.pending[index].push(output);
    }

    /// Whether every rank has now submitted `step`. Under one hold of the hub with the
    /// submission, exactly one submission finds that, the last one, because ranks only
    /// move forward; and steps complete in step order, because each rank submits
    /// consecutive steps, so a step's predecessors were completed by earlier submissions.
    fn is_complete(&self, step: Step) -> bool {
        self.last_step
            .iter()
            .all(|last| last.is_some_and(|last| last >= step))
    }

    /// The outputs of `step`, which just completed, removed from the buffer.
    fn take(&mut self, step: Step, first_step: Step) -> Outputs<Id> {
        if step != first_step + self.completed {
            // Only the racy twin completes a step twice: its buffer is already taken.
            return Vec::new();
        }
        self.completed += 1;
        // No buffer means every rank reported missing: the core gets nothing and drops it.
        self.pending.pop_front().unwrap_or_default()
    }
}
