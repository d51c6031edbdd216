//! The concurrent front on real threads against the core run sequentially: random
//! per-rank report streams (missing outputs, dynamic `E`, failed loads, both policies),
//! one thread per rank and a consumer taking outcomes while they report. Whatever the
//! interleaving, the outcomes, their order and the final core must equal the
//! sequential run's. Ranks also resend each step they submitted, which the front must
//! refuse without disturbing anything.
//!
//! Seeded; failures are saved to `aggregator/proptest-regressions/proptest_front.txt`.
#![cfg(not(any(feature = "loom", feature = "shuttle")))]

mod support;

use std::collections::BTreeSet;

use kvcc_aggregator::sync::{thread, Arc};
use kvcc_aggregator::{
    Aggregator, ConcurrentAggregator, Direction, FrontError, Policy, Rank, WorkerOutput,
};
use proptest::collection::{btree_set, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed};
use support::{assert_matches_sequential, sequential, spawn_consumer, submit_column, Id, Script};

const IDS: u32 = 4;

#[derive(Clone, Debug)]
struct Case {
    world_size: u32,
    policy: Policy,
    expected: u32,
    output_rank: Rank,
    announced: BTreeSet<(Direction, Id)>,
    resend: bool,
    script: Script,
}

/// An output whose rank is filled in by its column.
fn body() -> impl Strategy<Value = WorkerOutput<Id>> {
    let ids = || btree_set(0..IDS, 0..3);
    let expected_finished_count = prop_oneof![5 => Just(0), 1 => 1..=4u32];
    (
        ids(),
        ids(),
        btree_set(0..IDS, 0..2),
        btree_set(0..4u64, 0..2),
        expected_finished_count,
    )
        .prop_map(
            |(
                finished_sending,
                finished_recving,
                failed_recving,
                invalid_block_ids,
                expected_finished_count,
            )| {
                WorkerOutput {
                    rank: 0,
                    finished_sending,
                    finished_recving,
                    failed_recving,
                    invalid_block_ids,
                    expected_finished_count,
                }
            },
        )
}

fn script(world_size: usize) -> impl Strategy<Value = Script> {
    let row = vec(option::weighted(0.85, body()), world_size);
    vec(row, 0..7).prop_map(|mut script| {
        for row in &mut script {
            for (rank, output) in (0..).zip(row.iter_mut()) {
                if let Some(output) = output {
                    output.rank = rank;
                }
            }
        }
        script
    })
}

fn case() -> impl Strategy<Value = Case> {
    (1..=6usize).prop_flat_map(|world_size| {
        let policy = prop_oneof![Just(Policy::Countdown), Just(Policy::Strict)];
        let world = Rank::try_from(world_size).expect("small world");
        let direction = prop_oneof![Just(Direction::Sending), Just(Direction::Recving)];
        (
            policy,
            1..=world_size as u32 + 1,
            0..world,
            btree_set((direction, 0..IDS), 0..=8),
            any::<bool>(),
            script(world_size),
        )
            .prop_map(
                move |(policy, expected, output_rank, announced, resend, script)| Case {
                    world_size: u32::from(world),
                    policy,
                    expected,
                    output_rank,
                    announced,
                    resend,
                    script,
                },
            )
    })
}

fn core(case: &Case) -> Aggregator<Id> {
    let mut core = Aggregator::new(case.policy, case.expected);
    for &(direction, id) in &case.announced {
        core.announce(direction, id);
    }
    core
}

/// Rank `rank`'s thread: its column in step order, each step resent once if asked.
fn rank_thread(
    front: Arc<ConcurrentAggregator<Id>>,
    script: Arc<Script>,
    rank: Rank,
    resend: bool,
) {
    if !resend {
        return submit_column(&front, &script, rank);
    }
    for (step, row) in (0..).zip(script.iter()) {
        let submit = || match &row[usize::from(rank)] {
            Some(output) => front.report(step, output.clone()),
            None => front.report_missing(step, rank),
        };
        assert_eq!(submit(), Ok(()), "rank {rank} step {step}");
        assert_eq!(
            submit(),
            Err(FrontError::DuplicateStep { rank, step }),
            "resend of rank {rank} step {step}"
        );
    }
}

fn run_concurrently(case: &Case) {
    let world_size = case.world_size;
    let (expected, expected_core) = sequential(core(case), &case.script, case.output_rank);
    let front =
        ConcurrentAggregator::new(core(case), world_size, case.output_rank).expect("valid front");
    let front = Arc::new(front);
    let script = Arc::new(case.script.clone());

    let consumer = spawn_consumer(&front);
    let ranks: Vec<_> = (0..world_size as Rank)
        .map(|rank| {
            let (front, script, resend) = (Arc::clone(&front), Arc::clone(&script), case.resend);
            thread::spawn(move || rank_thread(front, script, rank, resend))
        })
        .collect();
    for rank in ranks {
        rank.join().expect("rank thread");
    }
    front.close().expect("close");
    let taken = consumer.join().expect("consumer thread");

    assert_matches_sequential(&taken, &expected);
    assert_eq!(
        front.buffered_steps(),
        Ok(0),
        "aggregated steps must not stay buffered"
    );
    assert_eq!(
        front.core_snapshot(),
        Ok(expected_core),
        "the core must end as in a sequential run"
    );
}

fn config() -> Config {
    Config {
        cases: 1000,
        rng_seed: RngSeed::Fixed(0x6b76_6363_00f0),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/proptest_front.txt",
        ))),
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn threads_reproduce_the_sequential_run(case in case()) {
        run_concurrently(&case);
    }
}
