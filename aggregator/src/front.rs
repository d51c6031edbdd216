//! The concurrent front: vLLM's executor step barrier, restated for threads.
//!
//! vLLM's executor collects the outputs of **all** workers for an engine step and hands
//! them to `KVOutputAggregator` together, step after step (docs/contracts.md §3–§4). Here each
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
//! A submission touches shared state about once per step, so that ranks on different
//! cores do not convoy on one lock. Each rank has its own lock, guarding its latest step
//! and its buffered outputs, taken by that rank and otherwise only by whoever collects a
//! complete step. After buffering, a rank publishes how many steps it has submitted in
//! its own atomic counter and reads everyone's (a `SeqCst` fence between the two, so that
//! of the ranks submitting a step's last outputs, the last to fence sees them all): only a
//! submission that finds a step complete and not yet queued takes the hub. The hub queues
//! complete steps in order, exactly once, under one hold (its `completed` is read and
//! advanced together), and queues outcomes for the consumer. The core has its own lock:
//! the thread whose submission queues a step takes the aggregating role, if no thread
//! holds it, and aggregates queued steps in step order, collecting each step's outputs
//! from the rank buffers in rank order, while the other ranks keep submitting; a step
//! queued meanwhile is left to the role holder. A consumer is signalled only when one is
//! waiting (`recv` first gives way to the ranks, so it rarely does), and outputs are
//! dropped outside every lock. Buffered outputs are removed when their step is
//! aggregated, so memory follows in-flight steps. Bad input never panics: every misuse is
//! a [`FrontError`].
//!
//! Lock order: a rank's lock, then the hub (a submission queueing steps); the core, then
//! one rank's lock at a time (the role collecting). No thread holding the hub takes any
//! other lock.

use std::collections::VecDeque;
use std::fmt;
use std::mem;

use crate::core::{Aggregator, Direction, Entry, Rank, StepOutcome, WorkerOutput};
use crate::entries::EntryMap;
use crate::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use crate::sync::{thread, Condvar, Mutex, MutexGuard};
use std::collections::BTreeMap;

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
    /// Read which steps are already queued and queue the newly complete ones under one
    /// hold of the hub.
    Atomic,
    /// A broken twin kept so the loom and shuttle suites prove they can catch this race:
    /// the hub is released between reading which steps are already queued and queueing
    /// the newly complete ones, so two ranks that both found a step complete can both
    /// queue it (the second time without outputs, the buffers already collected).
    CheckThenAct,
    /// The other broken twin, of the aggregating role: its holder finds no step queued,
    /// releases the hub, and only then gives the role up, so a step queued in between
    /// finds the role held and is never aggregated.
    RoleReleasedLate,
}

/// vLLM's executor in front of the aggregator core: rank threads submit per-step
/// outputs concurrently, complete steps are aggregated in step order, and a consumer
/// takes the outcomes. See the module docs.
pub struct ConcurrentAggregator<Id: Ord, Map = BTreeMap<Id, Entry>> {
    world_size: u32,
    output_rank: Rank,
    first_step: Step,
    critical_section: CriticalSection,
    /// One per rank, indexed by rank.
    ranks: Vec<RankSlot<Id>>,
    /// Set by `close` before it waits out the submissions under way; read under a rank's
    /// lock, so a submission either fails or finishes queueing before `close` returns.
    closed: AtomicBool,
    /// `Hub::completed`, stored with it: lets a submission skip the hub when the steps it
    /// finds complete are already queued. Never ahead of `Hub::completed`.
    queued: AtomicU64,
    hub: Mutex<Hub<Id>>,
    /// Taken by the aggregating role for one step at a time, and by the passthroughs.
    core: Mutex<Aggregator<Id, Map>>,
    /// Signalled when a waiting consumer has an outcome to take or the front is closed.
    emitted_or_closed: Condvar,
}

/// Outputs of one step, in rank order.
type Outputs<Id> = Vec<WorkerOutput<Id>>;

/// Times `recv` gives way to other threads before it sleeps on an empty queue.
const YIELDS_BEFORE_WAITING: u32 = 2;

/// One rank's share of the front. Aligned to its own cache lines (two, for the adjacent
/// line prefetcher), so that a rank publishing its progress does not invalidate another
/// rank's.
#[repr(align(128))]
struct RankSlot<Id: Ord> {
    /// Steps this rank has submitted, counted from the first step; stored after the
    /// output is buffered, read by every rank looking for complete steps.
    submitted: AtomicU64,
    queue: Mutex<RankQueue<Id>>,
}

/// Everything a rank's lock guards.
struct RankQueue<Id: Ord> {
    /// The latest step this rank submitted; `None` before its first submission.
    last_step: Option<Step>,
    /// Outputs not yet aggregated, in step order. A missing report leaves nothing here:
    /// the core never sees that rank.
    outputs: VecDeque<(Step, WorkerOutput<Id>)>,
}

/// Everything the hub lock guards.
struct Hub<Id: Ord> {
    /// Steps queued so far: step `first_step + completed` is the oldest incomplete.
    completed: u64,
    /// Complete steps waiting for the core, in step order; their outputs are still in the
    /// rank buffers.
    ready: VecDeque<Step>,
    /// A thread holds the aggregating role: it alone takes steps from `ready`, which is
    /// what keeps the core's steps in order.
    aggregating: bool,
    /// Aggregated steps not yet taken by a consumer, in step order.
    emitted: VecDeque<(Step, StepOutcome<Id>)>,
    /// Consumers blocked in `recv`: only they need a signal.
    waiting: usize,
    /// The role's outputs buffer, kept between steps so a steady stream allocates none.
    spare: Outputs<Id>,
    closed: bool,
}

impl<Id: Ord + Clone + Send + 'static, Map: EntryMap<Id> + Send + 'static>
    ConcurrentAggregator<Id, Map>
{
    /// A front for ranks `0..world_size` whose steps are dropped when `output_rank`'s
    /// output is missing, as vLLM's executor does.
    pub fn new(
        core: Aggregator<Id, Map>,
        world_size: u32,
        output_rank: Rank,
    ) -> Result<Self, FrontError> {
        Self::build(core, world_size, output_rank, CriticalSection::Atomic)
    }

    /// The broken twin: identical except that a submission releases the hub between
    /// reading which steps are queued and queueing the ones it found complete, so a step
    /// can be emitted twice. It exists only so the loom and shuttle suites can prove they
    /// catch that race; never use it for anything else.
    #[doc(hidden)]
    pub fn with_racy_critical_section(
        core: Aggregator<Id, Map>,
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
        core: Aggregator<Id, Map>,
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
        core: Aggregator<Id, Map>,
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
            completed: 0,
            ready: VecDeque::new(),
            aggregating: false,
            emitted: VecDeque::new(),
            waiting: 0,
            spare: Vec::with_capacity(ranks.min(64)),
            closed: false,
        };
        Ok(ConcurrentAggregator {
            world_size,
            output_rank,
            first_step: 0,
            critical_section,
            ranks: (0..ranks)
                .map(|_| RankSlot {
                    submitted: AtomicU64::new(0),
                    queue: Mutex::new(RankQueue {
                        last_step: None,
                        outputs: VecDeque::new(),
                    }),
                })
                .collect(),
            closed: AtomicBool::new(false),
            queued: AtomicU64::new(0),
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
        self.closed.store(true, Ordering::Release);
        // A submission that read `closed` unset holds its rank's lock until it has queued
        // the steps it completed: waiting for every rank's lock means the hub is marked
        // closed only once those steps are queued, so `recv` still owes them.
        for slot in &self.ranks {
            drop(Self::lock_queue(slot)?);
        }
        self.lock_hub()?.closed = true;
        self.emitted_or_closed.notify_all();
        Ok(())
    }

    /// Steps holding at least one output and still waiting for some rank.
    pub fn buffered_steps(&self) -> Result<usize, FrontError> {
        let queues = self
            .ranks
            .iter()
            .map(Self::lock_queue)
            .collect::<Result<Vec<_>, _>>()?;
        // Steps are queued only by a submission holding its rank's lock, so with every
        // rank's lock held the oldest incomplete step cannot move.
        let oldest_incomplete = self.first_step + self.queued.load(Ordering::Acquire);
        let mut steps: Vec<Step> = queues
            .iter()
            .flat_map(|queue| queue.outputs.iter().map(|&(step, _)| step))
            .filter(|&step| step >= oldest_incomplete)
            .collect();
        steps.sort_unstable();
        steps.dedup();
        Ok(steps.len())
    }

    /// Reads the core under its lock, e.g. for end-of-run checks. `read` must not call
    /// back into this front: the lock is not reentrant.
    pub fn with_core<R>(
        &self,
        read: impl FnOnce(&Aggregator<Id, Map>) -> R,
    ) -> Result<R, FrontError> {
        Ok(read(&*self.lock_core()?))
    }

    /// A copy of the core as it is now.
    pub fn core_snapshot(&self) -> Result<Aggregator<Id, Map>, FrontError>
    where
        Map: Clone,
    {
        self.with_core(Aggregator::clone)
    }

    fn lock_hub(&self) -> Result<MutexGuard<'_, Hub<Id>>, FrontError> {
        self.hub.lock().map_err(|_| FrontError::Poisoned)
    }

    fn lock_core(&self) -> Result<MutexGuard<'_, Aggregator<Id, Map>>, FrontError> {
        self.core.lock().map_err(|_| FrontError::Poisoned)
    }

    fn lock_queue(slot: &RankSlot<Id>) -> Result<MutexGuard<'_, RankQueue<Id>>, FrontError> {
        slot.queue.lock().map_err(|_| FrontError::Poisoned)
    }

    /// Steps, counted from the first, that every rank has submitted.
    fn submitted_by_all(&self) -> u64 {
        self.ranks
            .iter()
            .map(|slot| slot.submitted.load(Ordering::Acquire))
            .min()
            .unwrap_or(0)
    }

    fn submit(
        &self,
        step: Step,
        rank: Rank,
        output: Option<WorkerOutput<Id>>,
    ) -> Result<(), FrontError> {
        let Some(slot) = self.ranks.get(usize::from(rank)) else {
            if self.closed.load(Ordering::Acquire) {
                return Err(FrontError::Closed);
            }
            return Err(FrontError::RankOutsideWorld {
                rank,
                world_size: self.world_size,
            });
        };
        let mut queue = Self::lock_queue(slot)?;
        if self.closed.load(Ordering::Acquire) {
            return Err(FrontError::Closed);
        }
        queue.accept(rank, step, self.first_step)?;
        if let Some(output) = output {
            queue.outputs.push_back((step, output));
        }
        // Release: whoever reads this count and queues the step finds the output buffered
        // (and waits for this rank's lock to collect it).
        slot.submitted
            .store(step - self.first_step + 1, Ordering::Release);
        // Store, fence, read everyone's count: of the ranks submitting a step's last
        // outputs, the one whose fence comes last sees every count, so some submission
        // always finds the step complete (without the fence each could miss the others'
        // stores, and the step would never be queued).
        fence(Ordering::SeqCst);
        if self.submitted_by_all() <= self.queued.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut hub = self.lock_hub()?;
        let already = hub.completed;
        if self.critical_section == CriticalSection::CheckThenAct {
            drop(hub);
            hub = self.lock_hub()?;
        }
        // Read under the hub, after `already`: every step before this count is complete,
        // and steps complete in step order because each rank submits consecutive steps.
        let complete = self.submitted_by_all();
        if complete <= already {
            // Another submission found the same steps complete and queued them first.
            return Ok(());
        }
        for completed in already..complete {
            hub.ready.push_back(self.first_step + completed);
        }
        hub.completed = complete;
        self.queued.store(complete, Ordering::Release);
        if hub.aggregating {
            // The role holder takes these steps after the ones before them.
            return Ok(());
        }
        hub.aggregating = true;
        drop(hub);
        // The role collects from every rank's buffer, this one's included.
        drop(queue);
        self.aggregate_ready()
    }

    /// The aggregating role: aggregates queued steps one at a time, holding the core but
    /// not the hub, until none is left. Steps queued meanwhile by other threads are
    /// taken too, so no step waits for a thread that has moved on.
    fn aggregate_ready(&self) -> Result<(), FrontError> {
        let mut hub = self.lock_hub()?;
        while let Some(step) = hub.ready.pop_front() {
            let mut outputs = mem::take(&mut hub.spare);
            drop(hub);
            let outcome = {
                let mut core = self.lock_core()?;
                // In rank order, so outcomes do not depend on the interleaving. A rank's
                // oldest buffered output is this step's, if it reported one: every step
                // before it was aggregated already.
                for slot in &self.ranks {
                    let mut queue = Self::lock_queue(slot)?;
                    if queue.outputs.front().is_some_and(|&(s, _)| s == step) {
                        outputs.extend(queue.outputs.pop_front().map(|(_, output)| output));
                    }
                }
                core.aggregate(&outputs, self.output_rank)
            };
            outputs.clear();
            hub = self.lock_hub()?;
            hub.spare = outputs;
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

impl<Id: Ord> RankQueue<Id> {
    /// Records that `rank` submitted `step`, if that is the step it owes next.
    fn accept(&mut self, rank: Rank, step: Step, first_step: Step) -> Result<(), FrontError> {
        match self.last_step {
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
                self.last_step = Some(step);
                Ok(())
            }
        }
    }
}
