//! The level-synchronous, sharded, deterministic BFS.

use super::fingerprint::FingerprintMap;
use super::{replay, Checkable, Counterexample, Cutoff, Kind, Options, Report, Verdict};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Fixed, so that frontier order (and so every counterexample) does not depend on the
/// number of threads.
const SHARDS: usize = 16;
/// Frontier states per work item.
const CHUNK: usize = 512;

fn shard_of(fp: u64) -> usize {
    (fp >> 60) as usize % SHARDS
}

/// Packed states stored back to back: one growing allocation per batch, not one per
/// state (per-state boxes cost both allocator time and ~30 bytes of overhead each).
#[derive(Default)]
struct Packs {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Packs {
    fn push(&mut self, packed: &[u8]) {
        self.bytes.extend_from_slice(packed);
        self.ends.push(self.bytes.len());
    }

    fn get(&self, index: usize) -> &[u8] {
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        &self.bytes[start..self.ends[index]]
    }

    fn len(&self) -> usize {
        self.ends.len()
    }
}

/// One BFS level: fingerprints and packed states, in discovery order.
#[derive(Default)]
struct Level {
    fps: Vec<u64>,
    states: Packs,
}

/// States one chunk generated for one shard, on their way to its visited set.
#[derive(Default)]
struct Batch {
    /// (discovery order, fingerprint, parent fingerprint). Discovery order is (chunk,
    /// position in chunk): chunks follow the frontier and successors are generated in
    /// action order, so it is plain BFS order.
    meta: Vec<(u64, u64, u64)>,
    states: Packs,
}

/// What one chunk of a level produced.
struct ChunkOut {
    per_shard: Vec<Batch>,
    /// (clause, frontier index) of the first violation of each clause in this chunk.
    violations: Vec<(usize, usize)>,
    /// (frontier index, action) of the first transition without progress.
    no_progress: Option<(usize, String)>,
    transitions: u64,
}

/// A shard's new states after merging, in discovery order.
#[derive(Default)]
struct Fresh {
    meta: Vec<(u64, u64)>,
    states: Packs,
}

/// Explores `model` exhaustively within `options.limits` and returns a verdict with a
/// replayed, shortest counterexample for every violated clause.
pub fn check<M>(model: &M, options: &Options) -> Report<M>
where
    M: Checkable,
    M::State: Clone + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    let start = Instant::now();
    let threads = options.threads.max(1);
    let mut visited: Vec<FingerprintMap> = (0..SHARDS).map(|_| FingerprintMap::default()).collect();
    let mut frontier = Level::default();
    let mut buffer = Vec::new();
    for init in model.init_states() {
        let fp = super::state_fingerprint(model, init, options.symmetry, &mut buffer);
        if visited[shard_of(fp)].insert(fp, 0).is_none() {
            frontier.fps.push(fp);
            frontier.states.push(&buffer);
        }
    }
    let clause_count = model.clause_count();
    // Fingerprint of the first state (in BFS order) that breaks each clause.
    let mut first: Vec<Option<u64>> = vec![None; clause_count];
    let mut unique_states = frontier.fps.len() as u64;
    let mut transitions = 0u64;
    let mut depth = 0u32;
    let mut cutoff: Option<Cutoff> = None;
    let timed_out = AtomicBool::new(false);

    while !frontier.fps.is_empty() {
        if options.limits.max_depth.is_some_and(|max| depth > max) {
            cutoff = Some(Cutoff::Depth(depth - 1));
            break;
        }
        let chunks = frontier.fps.len().div_ceil(CHUNK);
        let outputs: Vec<Mutex<Option<ChunkOut>>> = (0..chunks).map(|_| Mutex::new(None)).collect();
        let next_chunk = AtomicUsize::new(0);
        let expand = || loop {
            let c = next_chunk.fetch_add(1, Ordering::Relaxed);
            if c >= chunks {
                break;
            }
            if options.limits.timeout.is_some_and(|t| start.elapsed() >= t) {
                timed_out.store(true, Ordering::Relaxed);
                break;
            }
            let range = c * CHUNK..((c + 1) * CHUNK).min(frontier.fps.len());
            let out = expand_chunk(model, options.symmetry, &visited, &frontier, c, range);
            *outputs[c].lock().unwrap_or_else(|e| e.into_inner()) = Some(out);
        };
        run_parallel(threads, &expand);
        if timed_out.load(Ordering::Relaxed) {
            cutoff = Some(Cutoff::Time(start.elapsed()));
            break;
        }
        let outputs: Vec<ChunkOut> = outputs
            .into_iter()
            .map(|m| {
                m.into_inner()
                    .unwrap_or_else(|e| e.into_inner())
                    .expect("every chunk was expanded")
            })
            .collect();

        for out in &outputs {
            transitions += out.transitions;
            for &(clause, index) in &out.violations {
                if first[clause].is_none() {
                    first[clause] = Some(frontier.fps[index]);
                }
            }
            if cutoff.is_none() {
                if let Some((_, action)) = &out.no_progress {
                    cutoff = Some(Cutoff::PossibleCycle {
                        action: action.clone(),
                        depth,
                    });
                }
            }
        }

        // Merge: each shard takes its candidates from every chunk, in frontier order.
        let mut per_shard: Vec<Vec<Batch>> = (0..SHARDS)
            .map(|_| Vec::with_capacity(outputs.len()))
            .collect();
        for out in outputs {
            for (shard, batch) in out.per_shard.into_iter().enumerate() {
                per_shard[shard].push(batch);
            }
        }
        let fresh = merge_shards(threads, &mut visited, per_shard);
        // The next frontier in discovery order, whatever the shards and the fingerprint
        // function: the first violating state is then the one reached by the earliest
        // actions, and counterexamples do not change when hashing does.
        frontier = interleave(fresh);
        unique_states += frontier.fps.len() as u64;
        if !frontier.fps.is_empty() {
            depth += 1;
        }
        if let Some(max) = options.limits.max_states {
            if unique_states > max && !frontier.fps.is_empty() {
                cutoff = Some(Cutoff::States(max));
                break;
            }
        }
    }
    drop(frontier);

    let mut counterexamples = Vec::new();
    for (clause, fp) in first.iter().enumerate() {
        if let Some(fp) = fp {
            let path = replay::path_to(&visited, *fp);
            let replayed = replay::replay_fingerprints(model, &path, options.symmetry, clause)
                .unwrap_or_else(|e| {
                    panic!(
                        "checker bug: counterexample for {} did not replay: {e}",
                        model.clause_name(clause)
                    )
                });
            counterexamples.push(Counterexample {
                clause,
                name: model.clause_name(clause),
                kind: model.clause_kind(clause),
                initial: replayed.0,
                steps: replayed.1,
            });
        }
    }
    let verdict = match (&counterexamples.is_empty(), &cutoff) {
        (false, _) => Verdict::Violated,
        (true, Some(c)) => Verdict::Inconclusive(c.clone()),
        (true, None) => Verdict::Holds,
    };
    Report {
        verdict,
        counterexamples,
        cutoff,
        unique_states,
        transitions,
        max_depth: depth,
        elapsed: start.elapsed(),
    }
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

fn expand_chunk<M>(
    model: &M,
    symmetry: bool,
    visited: &[FingerprintMap],
    frontier: &Level,
    chunk: usize,
    range: std::ops::Range<usize>,
) -> ChunkOut
where
    M: Checkable,
    M::State: Clone + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    let clause_count = model.clause_count();
    let mut out = ChunkOut {
        per_shard: (0..SHARDS).map(|_| Batch::default()).collect(),
        violations: Vec::new(),
        no_progress: None,
        transitions: 0,
    };
    let mut seen_clause = vec![false; clause_count];
    let mut actions = Vec::new();
    let mut buffer = Vec::new();
    let mut order = (chunk as u64) << 32;
    for index in range {
        let fp = frontier.fps[index];
        let state = model.unpack(frontier.states.get(index));
        // A state that breaks safety is where its run stops: not expanded, and liveness
        // is not judged there.
        if !record_broken(
            model,
            &state,
            Kind::Safety,
            index,
            &mut seen_clause,
            &mut out.violations,
        ) {
            continue;
        }
        actions.clear();
        model.actions(&state, &mut actions);
        let progress = model.progress(&state);
        let mut successors = 0;
        // Does fairness force a step from here? If not, a run may end here.
        let mut forced = false;
        for action in actions.drain(..) {
            let Some(next) = model.next_state(&state, action.clone()) else {
                continue;
            };
            successors += 1;
            forced |= !model.is_optional(&action);
            if model.progress(&next) <= progress && out.no_progress.is_none() {
                out.no_progress = Some((index, model.format_action(&action)));
            }
            let next_fp = super::state_fingerprint(model, next, symmetry, &mut buffer);
            let shard = shard_of(next_fp);
            if !visited[shard].contains_key(&next_fp) {
                let batch = &mut out.per_shard[shard];
                batch.meta.push((order, next_fp, fp));
                batch.states.push(&buffer);
                order += 1;
            }
        }
        out.transitions += successors;
        if !forced {
            record_broken(
                model,
                &state,
                Kind::Liveness,
                index,
                &mut seen_clause,
                &mut out.violations,
            );
        }
    }
    out
}

/// Records the clauses of `kind` that `state` breaks (the first time each is seen in this
/// chunk); returns whether it keeps them all.
fn record_broken<M>(
    model: &M,
    state: &M::State,
    kind: Kind,
    index: usize,
    seen_clause: &mut [bool],
    violations: &mut Vec<(usize, usize)>,
) -> bool
where
    M: Checkable,
    M::State: Clone + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    let mut kept = true;
    for (clause, seen) in seen_clause.iter_mut().enumerate() {
        if model.clause_kind(clause) == kind && !model.clause_holds(clause, state) {
            kept = false;
            if !*seen {
                *seen = true;
                violations.push((clause, index));
            }
        }
    }
    kept
}

/// One shard's visited set and the batches each chunk produced for it.
type ShardWork<'a> = (&'a mut FingerprintMap, Vec<Batch>);

/// Inserts each shard's candidates into the visited set, first come first served in
/// frontier order; returns each shard's new states in that order.
fn merge_shards(
    threads: usize,
    visited: &mut [FingerprintMap],
    per_shard: Vec<Vec<Batch>>,
) -> Vec<Fresh> {
    let work: Vec<Mutex<Option<ShardWork<'_>>>> = visited
        .iter_mut()
        .zip(per_shard)
        .map(|pair| Mutex::new(Some(pair)))
        .collect();
    let results: Vec<Mutex<Fresh>> = (0..SHARDS).map(|_| Mutex::new(Fresh::default())).collect();
    let next = AtomicUsize::new(0);
    let merge = || loop {
        let shard = next.fetch_add(1, Ordering::Relaxed);
        if shard >= SHARDS {
            break;
        }
        let Some((map, batches)) = work[shard].lock().unwrap_or_else(|e| e.into_inner()).take()
        else {
            continue;
        };
        let mut fresh = Fresh::default();
        for batch in &batches {
            for (i, &(order, fp, parent)) in batch.meta.iter().enumerate() {
                if let std::collections::hash_map::Entry::Vacant(slot) = map.entry(fp) {
                    slot.insert(parent);
                    fresh.meta.push((order, fp));
                    fresh.states.push(batch.states.get(i));
                }
            }
        }
        *results[shard].lock().unwrap_or_else(|e| e.into_inner()) = fresh;
    };
    run_parallel(threads, &merge);
    results
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect()
}

/// Merges the shards' new states (each in discovery order) into one level in discovery
/// order.
fn interleave(fresh: Vec<Fresh>) -> Level {
    let total: usize = fresh.iter().map(|f| f.meta.len()).sum();
    let mut level = Level {
        fps: Vec::with_capacity(total),
        states: Packs::default(),
    };
    let mut heads = vec![0usize; fresh.len()];
    loop {
        let next = (0..fresh.len())
            .filter(|&s| heads[s] < fresh[s].meta.len())
            .min_by_key(|&s| fresh[s].meta[heads[s]].0);
        let Some(shard) = next else { break };
        let i = heads[shard];
        level.fps.push(fresh[shard].meta[i].1);
        level.states.push(fresh[shard].states.get(i));
        heads[shard] += 1;
    }
    debug_assert_eq!(level.states.len(), total);
    level
}
