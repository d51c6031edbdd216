//! The level-synchronous, parallel, deterministic BFS.
//!
//! Each level, threads take chunks of the frontier, expand every state and insert each
//! successor into the shared [`Visited`] set at once; a successor that is new is packed
//! into the thread's arena and recorded. After the level, every new state's first
//! discovery (the smallest, see [`super::visited`]) is read back and the new states are
//! sorted by it: the next frontier is in sequential BFS order, whatever the number of
//! threads or the fingerprint function. Arenas are recycled level to level, so after the
//! widest level the search stops asking the kernel for fresh (zeroed) pages.

use super::allowance::{self, Allowance, Bounds, Spent};
use super::exact::Exact;
use super::visited::{self, Visited};
use super::{
    no_return, order, replay, Checkable, Choice, Cost, Counterexample, Cutoff, Kind, Naming,
    Options, Report, Verdict,
};
use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Frontier states per work item.
const CHUNK: usize = 512;

/// Why the workers were told to stop in the middle of a level; the first reason wins.
/// What a cut level partly found depends on timing, so it is dropped whole: the
/// verdict, counts and counterexamples stay those of the completed levels.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Stop {
    Running,
    Time,
    Memory,
    States,
    Successors,
    Collision,
    Interrupted,
    Panicked,
}

/// The stop flag every worker checks between chunks and every [`BUDGET_EVERY`]
/// successors (and the state count after every new state).
struct Stopper(AtomicU8);

impl Stopper {
    fn new() -> Stopper {
        Stopper(AtomicU8::new(Stop::Running as u8))
    }

    fn stop(&self, why: Stop) {
        let _ = self.0.compare_exchange(
            Stop::Running as u8,
            why as u8,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    fn reason(&self) -> Stop {
        match self.0.load(Ordering::Relaxed) {
            0 => Stop::Running,
            1 => Stop::Time,
            2 => Stop::Memory,
            3 => Stop::States,
            4 => Stop::Successors,
            5 => Stop::Collision,
            6 => Stop::Interrupted,
            _ => Stop::Panicked,
        }
    }
}

/// The time and memory a search may take, and its interrupt, checked by every worker
/// between chunks and before every [`BUDGET_EVERY`]th action it takes up within a level,
/// counted across states: a MultiConnector state can have tens of thousands, and a chunk
/// of states with a hundred each at 64 replicas took 0.75 s between two checks between
/// chunks (a 2 s limit answered after 3 s on a loaded machine).
struct Budget<'a> {
    bounds: Bounds<'a>,
    stopper: &'a Stopper,
    /// Full states by fingerprint, for `--exact`.
    exact: Option<&'a Exact>,
}

/// Actions a worker takes up (successors it tries) between two budget checks.
const BUDGET_EVERY: usize = 4096;

impl Budget<'_> {
    /// Whether the search must stop: told to already, or past its time or memory (then
    /// tells every worker). `memory_read` is when this worker last read its memory.
    fn exhausted(&self, memory_read: &mut Option<Instant>) -> bool {
        if self.stopper.reason() != Stop::Running {
            return true;
        }
        match allowance::spent(&self.bounds, memory_read) {
            None => false,
            Some(spent) => {
                self.stopper.stop(match spent {
                    Spent::Time => Stop::Time,
                    Spent::Memory => Stop::Memory,
                    Spent::Interrupt => Stop::Interrupted,
                });
                true
            }
        }
    }
}

/// Where a packed state lives: an arena of its level, and its bytes there.
#[derive(Clone, Copy)]
struct Loc {
    arena: u32,
    start: u32,
    len: u32,
}

/// One BFS level in BFS order: fingerprints, and where each state's packed bytes are.
#[derive(Default)]
struct Level {
    fps: Vec<u64>,
    locs: Vec<Loc>,
    arenas: Vec<Vec<u8>>,
}

impl Level {
    fn state(&self, index: usize) -> &[u8] {
        let loc = self.locs[index];
        let start = loc.start as usize;
        &self.arenas[loc.arena as usize][start..start + loc.len as usize]
    }
}

/// A state first inserted by this thread during the level.
struct Found {
    fp: u64,
    /// The discovery this thread saw; replaced by the smallest once the level is done.
    discovery: u64,
    loc: Loc,
}

/// Fingerprints a thread visited lately: a direct-mapped cache small enough for its L2.
/// Most duplicates are diamonds between nearby states (two orders of two independent
/// actions), which one thread meets close together; a hit skips the probe into the
/// shared set, which is a cache miss into hundreds of megabytes. Exact: a thread's
/// discoveries only grow (it takes chunks in frontier order, levels in BFS order), so a
/// state it already visited keeps a smaller discovery than the one it sees now.
struct Recent(Vec<u64>);

impl Recent {
    const BITS: u32 = 16;

    fn new() -> Recent {
        Recent(vec![0; 1 << Self::BITS])
    }

    /// Was `fp` the last fingerprint seen in its slot? Remembers it either way.
    fn seen(&mut self, fp: u64) -> bool {
        // Middle bits: the top ones pick the visited set's shard, the low ones its slot.
        let slot = (fp >> 24) as usize & ((1 << Self::BITS) - 1);
        std::mem::replace(&mut self.0[slot], fp) == fp
    }
}

/// What one thread produced during a level.
struct Worker {
    /// Arena ids are `id + k * threads`: distinct across threads without coordination.
    id: usize,
    threads: usize,
    arenas: Vec<Vec<u8>>,
    found: Vec<Found>,
    /// (clause, frontier index) of the first violation of each clause this thread saw.
    violations: Vec<(usize, usize)>,
    /// (frontier index, action) of the first transition without progress.
    no_progress: Option<(usize, String)>,
    /// (frontier index, successor count) of the first state with too many successors.
    overflow: Option<(usize, u64)>,
    transitions: u64,
    recent: Recent,
}

impl Worker {
    fn new(id: usize, threads: usize, recent: Recent) -> Worker {
        Worker {
            id,
            threads,
            arenas: Vec::new(),
            found: Vec::new(),
            violations: Vec::new(),
            no_progress: None,
            overflow: None,
            transitions: 0,
            recent,
        }
    }

    /// The id of the arena to pack the next state into (the last one), starting a new one
    /// where offsets would overflow 32 bits.
    fn arena(&mut self, spares: &Mutex<Vec<Vec<u8>>>) -> u32 {
        let full = self
            .arenas
            .last()
            .is_none_or(|a| a.len() > u32::MAX as usize / 2);
        if full {
            let mut arena = spares
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop()
                .unwrap_or_default();
            arena.clear();
            self.arenas.push(arena);
        }
        let k = self.arenas.len() - 1;
        u32::try_from(self.id + k * self.threads).expect("arena ids fit in 32 bits")
    }
}

/// Explores `model` exhaustively within `options.limits` and returns a verdict with a
/// replayed counterexample for every violated clause. The phases, each below: the
/// initial level; per level, expand (threads insert successors into the visited set as
/// they go), stop if a limit was hit, fold what the workers found, and order the next
/// frontier; then pick and replay the counterexamples.
pub fn check<M>(model: &M, options: &Options) -> Report<M>
where
    M: Checkable,
    M::State: Clone + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    let bounds = Bounds {
        limits: &options.limits,
        start: Instant::now(),
        interrupt: options.interrupt.as_deref(),
    };
    let threads = options.threads.max(1);
    let visited = Visited::new();
    let mut frontier = initial_level(model, options.naming(), &visited);
    let stopper = Stopper::new();
    let exact = options.exact.then(Exact::new);
    if let Some(exact) = &exact {
        for i in 0..frontier.fps.len() {
            exact.same_or_new(frontier.fps[i], frontier.state(i));
        }
    }
    let level = LevelWork {
        model,
        options,
        visited: &visited,
        spares: Mutex::new(Vec::new()),
        budget: Budget {
            bounds,
            stopper: &stopper,
            exact: exact.as_ref(),
        },
        // Unique states found so far, counted as they are found so that the state
        // limit stops the search at that many, not at the end of the level past it.
        found_total: AtomicU64::new(frontier.fps.len() as u64),
        panic: Mutex::new(None),
    };
    let mut folded = Folded::new(model.clause_count());
    let mut recents: Vec<Recent> = Vec::new();
    let mut depth = 0u32;
    while !frontier.fps.is_empty() {
        if options.limits.max_depth.is_some_and(|max| depth > max) {
            folded.cutoff = Some(Cutoff::Depth(depth - 1));
            break;
        }
        if let Some(progress) = &options.progress {
            progress.depth.store(depth, Ordering::Relaxed);
        }
        let base = folded.bfs_fps.len() as u64;
        folded.bfs_fps.extend_from_slice(&frontier.fps);
        let mut workers = level.expand(&frontier, base, threads, &mut recents);
        if let Some(stopped) = level.stopped(&workers, depth) {
            folded.cutoff = Some(stopped);
            // This level is already counted in `bfs_fps`; what it partly found is dropped.
            frontier.fps.clear();
            break;
        }
        folded.fold(&mut workers, base, depth, &mut recents);
        if options.first_violation && folded.first.iter().any(Option::is_some) {
            folded.cutoff = Some(Cutoff::FirstViolation { depth });
            // The next level is not explored: its states are not counted.
            frontier.fps.clear();
            break;
        }
        let next = next_level(threads, &visited, &mut workers);
        let old = std::mem::replace(&mut frontier, next);
        level
            .spares
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(old.arenas);
        if !frontier.fps.is_empty() {
            depth += 1;
        }
    }
    let unique_states = match folded.cutoff {
        // Exactly the limit: how many the cut level found past the completed ones
        // depends on timing.
        Some(Cutoff::States(max)) => max,
        _ => (folded.bfs_fps.len() + frontier.fps.len()) as u64,
    };
    drop(frontier);
    drop(level);
    let explored = Explored {
        visited: &visited,
        bfs_fps: &folded.bfs_fps,
        first: &folded.first,
        unique_states,
    };
    let mut allowance = Allowance::new(bounds);
    let counterexamples =
        pick_counterexamples(model, options, &explored, &folded.cutoff, &mut allowance);
    let verdict = match (&counterexamples.is_empty(), &folded.cutoff) {
        (false, _) => Verdict::Violated,
        (true, Some(c)) => Verdict::Inconclusive(c.clone()),
        (true, None) => Verdict::Holds,
    };
    Report {
        verdict,
        counterexamples,
        cutoff: folded.cutoff,
        unique_states,
        transitions: folded.transitions,
        max_depth: depth,
        elapsed: bounds.start.elapsed(),
        exact: options.exact,
    }
}

/// The initial states, packed and visited: level 0.
fn initial_level<M>(model: &M, naming: Naming, visited: &Visited) -> Level
where
    M: Checkable,
    M::State: Clone + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    let mut level = Level {
        arenas: vec![Vec::new()],
        ..Level::default()
    };
    for mut init in model.init_states() {
        let arena = &mut level.arenas[0];
        let begin = arena.len();
        let fp = naming.pack(model, &mut init, arena);
        if visited.visit(fp, visited::ROOT) {
            level.fps.push(fp);
            level.locs.push(Loc {
                arena: 0,
                start: begin as u32,
                len: (arena.len() - begin) as u32,
            });
        } else {
            arena.truncate(begin);
        }
    }
    level
}

/// What every worker of a level shares.
struct LevelWork<'a, M> {
    model: &'a M,
    options: &'a Options,
    visited: &'a Visited,
    /// Arenas of the level before last, for reuse.
    spares: Mutex<Vec<Vec<u8>>>,
    budget: Budget<'a>,
    found_total: AtomicU64,
    /// The first panic of a worker, raised again on the caller's thread.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl<M> LevelWork<'_, M>
where
    M: Checkable,
    M::State: Clone + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    /// Expands `frontier` (its first state has BFS index `base`) on up to `threads`
    /// threads, each owning its worker: chunks are taken from a shared counter, and
    /// successors go straight into the shared visited set.
    fn expand(
        &self,
        frontier: &Level,
        base: u64,
        threads: usize,
        recents: &mut Vec<Recent>,
    ) -> Vec<Worker> {
        let chunks = frontier.fps.len().div_ceil(CHUNK);
        let count = threads.min(chunks).max(1);
        let workers: Vec<Worker> = (0..count)
            .map(|id| Worker::new(id, count, recents.pop().unwrap_or_else(Recent::new)))
            .collect();
        let next_chunk = AtomicUsize::new(0);
        let run = |mut worker: Worker| {
            let mut scratch = Scratch::new(self.model.clause_count());
            let expanded = catch_unwind(AssertUnwindSafe(|| {
                self.expand_chunks(frontier, base, &next_chunk, &mut worker, &mut scratch)
            }));
            // A worker that panics stops the others at their next chunk; the panic is
            // raised again on the caller's thread once all have stopped, never a hang.
            if let Err(payload) = expanded {
                self.budget.stopper.stop(Stop::Panicked);
                self.panic
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(payload);
            }
            worker
        };
        let workers = if count == 1 {
            workers.into_iter().map(run).collect()
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = workers
                    .into_iter()
                    .map(|worker| scope.spawn(|| run(worker)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("a worker's panic is caught inside it"))
                    .collect()
            })
        };
        if let Some(payload) = self.panic.lock().unwrap_or_else(|e| e.into_inner()).take() {
            resume_unwind(payload);
        }
        workers
    }

    /// One worker's loop: chunk after chunk until none is left or the search must stop.
    fn expand_chunks(
        &self,
        frontier: &Level,
        base: u64,
        next_chunk: &AtomicUsize,
        worker: &mut Worker,
        scratch: &mut Scratch<M::Action>,
    ) {
        let chunks = frontier.fps.len().div_ceil(CHUNK);
        let stopper = self.budget.stopper;
        loop {
            let c = next_chunk.fetch_add(1, Ordering::Relaxed);
            if c >= chunks || self.budget.exhausted(&mut scratch.memory_read) {
                return;
            }
            let range = c * CHUNK..((c + 1) * CHUNK).min(frontier.fps.len());
            if let Some(progress) = &self.options.progress {
                progress
                    .explored
                    .fetch_add(range.len() as u64, Ordering::Relaxed);
            }
            for index in range {
                let before = worker.found.len();
                expand_state(
                    self.model,
                    self.options.naming(),
                    self.visited,
                    frontier,
                    base,
                    index,
                    &self.spares,
                    worker,
                    scratch,
                    &self.budget,
                    self.options.past_violations,
                );
                if stopper.reason() != Stop::Running {
                    return;
                }
                let new = (worker.found.len() - before) as u64;
                let total = self.found_total.fetch_add(new, Ordering::Relaxed) + new;
                if self
                    .options
                    .limits
                    .max_states
                    .is_some_and(|max| total > max)
                {
                    stopper.stop(Stop::States);
                    return;
                }
                if worker.overflow.is_some() {
                    stopper.stop(Stop::Successors);
                    return;
                }
            }
        }
    }

    /// Why the workers stopped in the middle of the level at `depth`, if they did.
    fn stopped(&self, workers: &[Worker], depth: u32) -> Option<Cutoff> {
        let limits = &self.options.limits;
        match self.budget.stopper.reason() {
            Stop::Running => None,
            Stop::Time => Some(Cutoff::Time(self.budget.bounds.start.elapsed())),
            Stop::Interrupted => Some(Cutoff::Interrupted),
            Stop::Memory => Some(Cutoff::Memory(limits.max_memory.unwrap_or_default())),
            Stop::States => Some(Cutoff::States(limits.max_states.unwrap_or_default())),
            Stop::Successors => {
                let (count, _) = workers
                    .iter()
                    .filter_map(|w| w.overflow.map(|(index, count)| (count, index)))
                    .min_by_key(|&(_, index)| index)
                    .expect("a worker saw the overflow");
                Some(Cutoff::Successors { count, depth })
            }
            Stop::Collision => Some(Cutoff::Collision { depth }),
            Stop::Panicked => unreachable!("a panic is raised again by expand"),
        }
    }
}

/// What the completed levels add up to.
struct Folded {
    /// Every state's fingerprint by BFS index: discoveries name parents by index.
    bfs_fps: Vec<u64>,
    /// BFS index of the first state that breaks each clause.
    first: Vec<Option<u64>>,
    transitions: u64,
    cutoff: Option<Cutoff>,
}

impl Folded {
    fn new(clause_count: usize) -> Folded {
        Folded {
            bfs_fps: Vec::new(),
            first: vec![None; clause_count],
            transitions: 0,
            cutoff: None,
        }
    }

    /// Takes in a completed level's workers (whose frontier began at BFS index `base`):
    /// each clause's first violation, the transitions, the first step without progress.
    fn fold(&mut self, workers: &mut [Worker], base: u64, depth: u32, recents: &mut Vec<Recent>) {
        let mut no_progress: Option<(usize, String)> = None;
        for worker in workers {
            recents.push(std::mem::replace(&mut worker.recent, Recent(Vec::new())));
            self.transitions += worker.transitions;
            for &(clause, index) in &worker.violations {
                let index = base + index as u64;
                if self.first[clause].is_none_or(|f| index < f) {
                    self.first[clause] = Some(index);
                }
            }
            if let Some((index, action)) = worker.no_progress.take() {
                if no_progress.as_ref().is_none_or(|(i, _)| index < *i) {
                    no_progress = Some((index, action));
                }
            }
        }
        if self.cutoff.is_none() {
            if let Some((_, action)) = no_progress {
                self.cutoff = Some(Cutoff::PossibleCycle { action, depth });
            }
        }
    }
}

/// Each violated clause's reported counterexample, replayed: its cheapest ([`super::order`])
/// when the graph was explored whole and the time and memory limits allow, else its
/// first in BFS order. A liveness clause's point of no return is computed only on a whole
/// graph, within the same limits.
fn pick_counterexamples<M>(
    model: &M,
    options: &Options,
    explored: &Explored<'_>,
    cutoff: &Option<Cutoff>,
    allowance: &mut Allowance,
) -> Vec<Counterexample<M>>
where
    M: Checkable,
    M::State: Clone + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    let first = explored.first;
    let violated: Vec<usize> = (0..first.len()).filter(|&c| first[c].is_some()).collect();
    // A possible cycle leaves the explored graph whole; any other cut does not.
    let whole = matches!(cutoff, None | Some(Cutoff::PossibleCycle { .. }));
    let (mut cheapest, spent) = if whole && !options.shortest && !violated.is_empty() {
        order::cheapest(
            model,
            options.naming(),
            options.past_violations,
            &violated,
            allowance,
        )
    } else {
        (Vec::new(), None)
    };
    let picked: Vec<(Vec<u64>, Choice)> = violated
        .iter()
        .enumerate()
        .map(|(i, &clause)| {
            if let Some(path) = cheapest.get_mut(i).and_then(Option::take) {
                return (path, Choice::Cheapest);
            }
            let choice = match (options.shortest, whole, spent) {
                (true, _, _) => Choice::Shortest,
                (false, false, _) => Choice::ShortestCut,
                (false, true, Some(_)) => Choice::ShortestLimited,
                (false, true, None) => panic!(
                    "checker bug: the cheapest walk missed {}, which the search found",
                    model.clause_name(clause)
                ),
            };
            let fp = first[clause].expect("violated");
            (
                replay::path_to(explored.visited, explored.bfs_fps, fp),
                choice,
            )
        })
        .collect();
    let liveness: Vec<(usize, &[u64])> = violated
        .iter()
        .zip(&picked)
        .filter(|(&clause, _)| model.clause_kind(clause) == Kind::Liveness)
        .map(|(&clause, (path, _))| (clause, path.as_slice()))
        .collect();
    let walk = !liveness.is_empty()
        && whole
        && spent.is_none()
        && explored.unique_states <= no_return::STATES_MAX as u64;
    let points = if walk {
        no_return::points_of_no_return(
            model,
            options.naming(),
            options.past_violations,
            &liveness,
            allowance,
        )
    } else {
        vec![None; liveness.len()]
    };
    violated
        .iter()
        .zip(&picked)
        .map(|(&clause, (path, choice))| {
            let point_of_no_return = liveness
                .iter()
                .position(|&(c, _)| c == clause)
                .and_then(|i| points[i]);
            let (initial, steps) =
                replay::replay_fingerprints(model, path, options.naming(), clause).unwrap_or_else(
                    |e| {
                        panic!(
                            "checker bug: counterexample for {} did not replay: {e}",
                            model.clause_name(clause)
                        )
                    },
                );
            Counterexample {
                clause,
                name: model.clause_name(clause),
                kind: model.clause_kind(clause),
                cost: Cost::of(model, steps.iter().map(|(action, _)| action)),
                choice: *choice,
                point_of_no_return,
                initial,
                steps,
            }
        })
        .collect()
}

/// What the search found, for picking counterexamples: where each state came from, the
/// BFS order, each clause's first violation, and how many unique states there were.
struct Explored<'a> {
    visited: &'a Visited,
    bfs_fps: &'a [u64],
    first: &'a [Option<u64>],
    unique_states: u64,
}

fn run_parallel(threads: usize, work: &(impl Fn() + Sync)) {
    if threads == 1 {
        work();
        return;
    }
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(work);
        }
    });
}

/// A thread's reusable buffers.
struct Scratch<A> {
    actions: Vec<A>,
    /// A state's successors not recently seen: fingerprint, action position, bytes.
    candidates: Vec<(u64, usize, std::ops::Range<usize>)>,
    seen_clause: Vec<bool>,
    /// When this thread last read the process's memory.
    memory_read: Option<Instant>,
    /// Successors generated since this thread last checked the budget.
    since_budget: usize,
}

impl<A> Scratch<A> {
    fn new(clause_count: usize) -> Scratch<A> {
        Scratch {
            actions: Vec::new(),
            candidates: Vec::new(),
            seen_clause: vec![false; clause_count],
            memory_read: None,
            since_budget: 0,
        }
    }
}

/// Judges frontier state `index` and inserts its successors.
#[allow(clippy::too_many_arguments)]
fn expand_state<M>(
    model: &M,
    naming: Naming,
    visited: &Visited,
    frontier: &Level,
    base: u64,
    index: usize,
    spares: &Mutex<Vec<Vec<u8>>>,
    worker: &mut Worker,
    scratch: &mut Scratch<M::Action>,
    budget: &Budget,
    past_violations: bool,
) where
    M: Checkable,
    M::State: Clone + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    let bytes = frontier.state(index);
    let state = model.unpack(bytes);
    // A state that breaks safety is where its run stops (not expanded), unless the
    // search explores past violations; liveness is not judged there either way.
    let safe = record_broken(model, &state, Kind::Safety, index, scratch, worker);
    if !super::expands(safe, past_violations) {
        return;
    }
    let mut actions = std::mem::take(&mut scratch.actions);
    actions.clear();
    let expanded = model.expand_actions(&state, &mut actions);
    if let Err(count) = expanded.and_then(|()| {
        let count = actions.len() as u64;
        (count <= super::SUCCESSORS_MAX).then_some(()).ok_or(count)
    }) {
        worker.overflow.get_or_insert((index, count));
        scratch.actions = actions;
        return;
    }
    let progress = model.progress(&state, bytes);
    // Does fairness force a step from here? If not, a run may end here.
    let mut forced = false;
    let arena_id = worker.arena(spares);
    let arena = worker.arenas.last_mut().expect("a current arena");
    let first = arena.len();
    // Pack every successor first, then visit them in one tight loop: the visits are
    // independent, and batching them overlaps their cache misses into the visited set
    // (measured ~10% faster than visiting each successor as it is generated; an explicit
    // prefetch on top of the batching gained nothing).
    let mut candidates = std::mem::take(&mut scratch.candidates);
    // Every successor is stepped into, and canonicalised in, this one state.
    let mut next = state.clone();
    for (position, action) in actions.drain(..).enumerate() {
        // The level is dropped when the budget runs out, so this state may stop halfway.
        scratch.since_budget += 1;
        if scratch.since_budget == BUDGET_EVERY {
            scratch.since_budget = 0;
            if budget.exhausted(&mut scratch.memory_read) {
                break;
            }
        }
        let forces = model.forces(&state, &action);
        if !model.step_into(&state, action.clone(), &mut next) {
            continue;
        }
        worker.transitions += 1;
        forced |= forces;
        let begin = arena.len();
        let fp = naming.pack_successor(model, (&state, bytes), &mut next, arena);
        if worker.no_progress.is_none() && model.progress(&next, &arena[begin..]) <= progress {
            worker.no_progress = Some((index, model.format_action(&action)));
        }
        // An exact search compares every match in full, so it skips the cache of
        // fingerprints alone.
        if budget.exact.is_none() && worker.recent.seen(fp) {
            arena.truncate(begin);
        } else {
            candidates.push((fp, position, begin..arena.len()));
        }
    }
    // Keep the new ones' bytes, packed down in place.
    let mut end = first;
    for (fp, position, bytes) in candidates.drain(..) {
        let discovery = visited::discovery(base + index as u64, position);
        if let Some(exact) = budget.exact {
            if !exact.same_or_new(fp, &arena[bytes.clone()]) {
                budget.stopper.stop(Stop::Collision);
            }
        }
        if visited.visit(fp, discovery) {
            let len = bytes.len();
            arena.copy_within(bytes, end);
            worker.found.push(Found {
                fp,
                discovery,
                loc: Loc {
                    arena: arena_id,
                    start: end as u32,
                    len: len as u32,
                },
            });
            end += len;
        }
    }
    arena.truncate(end);
    scratch.candidates = candidates;
    scratch.actions = actions;
    if super::judges_liveness(safe, forced) {
        record_broken(model, &state, Kind::Liveness, index, scratch, worker);
    }
}

/// Records the clauses of `kind` that `state` breaks (the first time this thread sees
/// each); returns whether it keeps them all.
fn record_broken<M>(
    model: &M,
    state: &M::State,
    kind: Kind,
    index: usize,
    scratch: &mut Scratch<M::Action>,
    worker: &mut Worker,
) -> bool
where
    M: Checkable,
    M::State: Clone + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    let mut kept = true;
    for clause in super::broken_clauses(model, state, kind) {
        kept = false;
        // Each thread takes chunks in frontier order, so its first sighting is its
        // smallest index; the smallest over threads is the level's first.
        let seen = &mut scratch.seen_clause[clause];
        if !*seen {
            *seen = true;
            worker.violations.push((clause, index));
        }
    }
    kept
}

/// The next frontier: the states first found during this level, in the order of their
/// smallest discoveries (sequential BFS order).
fn next_level(threads: usize, visited: &Visited, workers: &mut [Worker]) -> Level {
    // Each thread's finds, re-keyed by their first discovery and sorted: in parallel,
    // one list per thread.
    let lists: Vec<Mutex<Vec<Found>>> = workers
        .iter_mut()
        .map(|w| Mutex::new(std::mem::take(&mut w.found)))
        .collect();
    let next = AtomicUsize::new(0);
    let sort = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= lists.len() {
            break;
        }
        let mut list = lists[i].lock().unwrap_or_else(|e| e.into_inner());
        for found in list.iter_mut() {
            found.discovery = visited
                .discovery_of(found.fp)
                .expect("a found state is visited");
        }
        list.sort_unstable_by_key(|f| f.discovery);
    };
    run_parallel(threads.min(lists.len()), &sort);
    let lists: Vec<Vec<Found>> = lists
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect();

    let total: usize = lists.iter().map(Vec::len).sum();
    let mut level = Level {
        fps: Vec::with_capacity(total),
        locs: Vec::with_capacity(total),
        arenas: Vec::new(),
    };
    // Merge the sorted lists (discoveries are unique: one per parent and action).
    let mut heads = vec![0usize; lists.len()];
    loop {
        let next = (0..lists.len())
            .filter(|&l| heads[l] < lists[l].len())
            .min_by_key(|&l| lists[l][heads[l]].discovery);
        let Some(l) = next else { break };
        let found = &lists[l][heads[l]];
        level.fps.push(found.fp);
        level.locs.push(found.loc);
        heads[l] += 1;
    }
    // Arena ids are `worker + k * threads`; lay the arenas out by id.
    let arena_count = workers
        .iter()
        .map(|w| w.id + w.arenas.len().saturating_sub(1) * w.threads + 1)
        .max()
        .unwrap_or(0);
    level.arenas.resize_with(arena_count, Vec::new);
    for worker in workers.iter_mut() {
        for (k, arena) in worker.arenas.drain(..).enumerate() {
            level.arenas[worker.id + k * worker.threads] = arena;
        }
    }
    level
}
