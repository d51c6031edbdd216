//! Shared by the loom, shuttle and proptest suites: scripted per-rank report streams, the
//! threads that feed them to the front, and the sequential run they must reproduce.
//!
//! Threads come from `kvcc_aggregator::sync`, so the same driver runs under loom, under
//! shuttle and on real threads.

// Each test crate uses a different subset of these helpers.
#![allow(dead_code)]

use std::collections::BTreeSet;

use kvcc_aggregator::sync::{thread, Arc};
use kvcc_aggregator::{Aggregator, ConcurrentAggregator, Rank, Step, StepOutcome, WorkerOutput};

pub type Id = u32;

/// What the ranks submit: `script[step][rank]`, `None` where the rank reports the step
/// missing. Steps are numbered from 0.
pub type Script = Vec<Vec<Option<WorkerOutput<Id>>>>;

pub type Emitted = Vec<(Step, StepOutcome<Id>)>;

pub fn sends(rank: Rank, ids: &[Id]) -> WorkerOutput<Id> {
    let mut output = WorkerOutput::empty(rank);
    output.finished_sending = ids.iter().copied().collect();
    output
}

pub fn recvs(rank: Rank, ids: &[Id], failed: &[Id]) -> WorkerOutput<Id> {
    let mut output = WorkerOutput::empty(rank);
    output.finished_recving = ids.iter().copied().collect();
    output.failed_recving = failed.iter().copied().collect();
    output
}

pub fn ids(ids: &[Id]) -> BTreeSet<Id> {
    ids.iter().copied().collect()
}

/// The core fed the script one step at a time, present outputs in rank order: what
/// vLLM's single-threaded executor does, and what the front must reproduce exactly.
pub fn sequential(
    mut core: Aggregator<Id>,
    script: &Script,
    output_rank: Rank,
) -> (Emitted, Aggregator<Id>) {
    let mut emitted = Vec::new();
    for (step, row) in (0..).zip(script) {
        let outputs: Vec<WorkerOutput<Id>> = row.iter().flatten().cloned().collect();
        emitted.push((step, core.aggregate(&outputs, output_rank)));
    }
    (emitted, core)
}

/// Submits `rank`'s column of the script in step order, as that rank's thread would.
pub fn submit_column(front: &ConcurrentAggregator<Id>, script: &Script, rank: Rank) {
    for (step, row) in (0..).zip(script) {
        let submitted = match &row[usize::from(rank)] {
            Some(output) => front.report(step, output.clone()),
            None => front.report_missing(step, rank),
        };
        if let Err(error) = submitted {
            panic!("rank {rank} step {step} refused: {error}");
        }
    }
}

/// One thread per rank submitting its column of the script.
pub fn spawn_ranks(
    front: &Arc<ConcurrentAggregator<Id>>,
    script: &Arc<Script>,
) -> Vec<thread::JoinHandle<()>> {
    let world_size = script.first().map_or(0, Vec::len);
    let ranks = Rank::try_from(world_size).expect("scripts have at most u16::MAX ranks");
    (0..ranks)
        .map(|rank| {
            let front = Arc::clone(front);
            let script = Arc::clone(script);
            thread::spawn(move || submit_column(&front, &script, rank))
        })
        .collect()
}

/// A consumer thread taking outcomes with the blocking `recv` until the front is closed
/// and drained.
pub fn spawn_consumer(front: &Arc<ConcurrentAggregator<Id>>) -> thread::JoinHandle<Emitted> {
    let front = Arc::clone(front);
    thread::spawn(move || {
        let mut taken = Vec::new();
        while let Some(emitted) = front.recv().expect("recv") {
            taken.push(emitted);
        }
        taken
    })
}

pub fn join_all(handles: Vec<thread::JoinHandle<()>>) {
    for handle in handles {
        handle.join().expect("a rank thread panicked");
    }
}

/// The front's emissions against the sequential run, one clause per assertion so a
/// failure names what broke: every step exactly once, nothing extra, step order, and
/// the same outcome as the sequential run.
pub fn assert_matches_sequential(
    emitted: &[(Step, StepOutcome<Id>)],
    sequential: &[(Step, StepOutcome<Id>)],
) {
    for (step, _) in sequential {
        let times = emitted.iter().filter(|(s, _)| s == step).count();
        assert_eq!(times, 1, "step {step} must be emitted exactly once");
    }
    for (step, _) in emitted {
        let known = sequential.iter().any(|(s, _)| s == step);
        assert!(known, "step {step} was emitted but never submitted");
    }
    let order: Vec<Step> = emitted.iter().map(|(step, _)| *step).collect();
    assert!(
        order.is_sorted(),
        "steps must be emitted in step order, got {order:?}"
    );
    for ((step, outcome), (_, expected)) in emitted.iter().zip(sequential) {
        assert_eq!(
            outcome, expected,
            "step {step} must have the sequential run's outcome"
        );
    }
}

/// Runs `model` under loom, exhaustively up to `preemption_bound` preemptions. Limits
/// that stop a run early are cleared even if set in the environment: a model that was
/// not fully explored must not pass.
#[cfg(feature = "loom")]
pub fn loom_check(preemption_bound: usize, model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(preemption_bound);
    builder.max_duration = None;
    builder.max_permutations = None;
    builder.check(model);
}
