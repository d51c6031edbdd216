//! Exactly-once emission under every interleaving of the rank threads, up to a
//! preemption bound; and the racy twin, whose check-then-act critical section the same
//! model must catch emitting a step twice.

mod support;

use kvcc_aggregator::sync::Arc;
use kvcc_aggregator::{Aggregator, ConcurrentAggregator, Policy, Rank};
use support::{
    assert_matches_sequential, join_all, loom_check, sends, sequential, spawn_ranks, Script,
};

type Front = ConcurrentAggregator<u32>;

/// Every rank reports id `step` at each step, so each step completes one id (E = ranks).
fn script(ranks: Rank, steps: u32) -> Script {
    (0..steps)
        .map(|step| (0..ranks).map(|rank| Some(sends(rank, &[step]))).collect())
        .collect()
}

fn explore(ranks: Rank, steps: u32, preemption_bound: usize, front: fn(Aggregator<u32>) -> Front) {
    loom_check(preemption_bound, move || {
        let script = Arc::new(script(ranks, steps));
        let core = Aggregator::new(Policy::Countdown, u32::from(ranks));
        let (expected, _) = sequential(core.clone(), &script, 0);
        let front = Arc::new(front(core));
        join_all(spawn_ranks(&front, &script));
        let emitted = front.drain().expect("drain");
        assert_matches_sequential(&emitted, &expected);
    });
}

fn correct<const RANKS: u32>(core: Aggregator<u32>) -> Front {
    ConcurrentAggregator::new(core, RANKS, 0).expect("valid front")
}

fn racy<const RANKS: u32>(core: Aggregator<u32>) -> Front {
    ConcurrentAggregator::with_racy_critical_section(core, RANKS, 0).expect("valid front")
}

#[test]
fn two_ranks_emit_every_step_exactly_once() {
    explore(2, 2, 3, correct::<2>);
}

/// Three ranks at preemption bound 2: at bound 3 the same model took minutes, and the
/// racy twin is caught within bound 2 (below), so the bound still reaches the race.
#[test]
fn three_ranks_emit_every_step_exactly_once() {
    explore(3, 3, 2, correct::<3>);
}

/// The acceptance test of the loom suite: a checker that passes the twin proves nothing.
#[test]
#[should_panic(expected = "must be emitted exactly once")]
fn racy_twin_emits_a_step_twice() {
    explore(2, 2, 3, racy::<2>);
}

/// The twin in the three-rank model, at its bound.
#[test]
#[should_panic(expected = "must be emitted exactly once")]
fn racy_twin_with_three_ranks_is_caught_within_bound_2() {
    explore(3, 3, 2, racy::<3>);
}
