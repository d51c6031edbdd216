//! No emission before E distinct reports: a consumer watching the front while the rank
//! threads report never sees the id emitted before E different ranks began reporting it.
//! A core that counts a duplicate towards the quorum emits early in some interleaving, and
//! loom explores that interleaving: the broken twin runs the duplicate scenario under
//! `Countdown`, which counts reports anonymously, and must be caught.
//!
//! Two ranks (E = 2) are the smallest world with a quorum to reach and a duplicate to
//! refuse; a third rank only multiplied the interleavings (minutes instead of seconds)
//! without a schedule the two-rank model lacks: every early emission needs one rank that
//! has not begun while the counted reports come from the others.

mod support;

use kvcc_aggregator::sync::atomic::{AtomicU32, Ordering};
use kvcc_aggregator::sync::{thread, Arc};
use kvcc_aggregator::{Aggregator, ConcurrentAggregator, Direction, Policy, Rank};
use support::{loom_check, sends, Script};

const WATCHED: u32 = 7;
const WORLD_SIZE: u32 = 2;

/// Runs `script` with one thread per rank and a consumer taking outcomes as they come;
/// asserts the watched id is emitted exactly once, and only after `WORLD_SIZE` distinct
/// ranks began reporting it.
fn watch_quorum(policy: Policy, script: fn() -> Script) {
    loom_check(2, move || {
        let mut core = Aggregator::new(policy, WORLD_SIZE);
        core.announce(Direction::Sending, WATCHED);
        let front = Arc::new(ConcurrentAggregator::new(core, WORLD_SIZE, 0).expect("valid front"));
        let script = Arc::new(script());
        // Bit r is set just before rank r's first report of the watched id is submitted.
        let begun = Arc::new(AtomicU32::new(0));

        let consumer = {
            let front = Arc::clone(&front);
            let begun = Arc::clone(&begun);
            thread::spawn(move || {
                let mut emissions = 0;
                while let Some((step, outcome)) = front.recv().expect("recv") {
                    if outcome.finished_sending.contains(&WATCHED) {
                        let reporters = begun.load(Ordering::SeqCst).count_ones();
                        assert!(
                            reporters >= WORLD_SIZE,
                            "emitted at step {step} after {reporters} reporters"
                        );
                        emissions += 1;
                    }
                }
                emissions
            })
        };
        let ranks: Vec<_> = (0..WORLD_SIZE as Rank)
            .map(|rank| {
                let (front, script, begun) =
                    (Arc::clone(&front), Arc::clone(&script), Arc::clone(&begun));
                thread::spawn(move || {
                    for (step, row) in (0..).zip(script.iter()) {
                        let output = row[usize::from(rank)]
                            .clone()
                            .expect("no missing outputs here");
                        if output.finished_sending.contains(&WATCHED) {
                            begun.fetch_or(1 << rank, Ordering::SeqCst);
                        }
                        front.report(step, output).expect("in-order report");
                    }
                })
            })
            .collect();
        for rank in ranks {
            rank.join().expect("rank thread");
        }
        front.close().expect("close");
        let emissions = consumer.join().expect("consumer thread");
        assert_eq!(emissions, 1, "the watched id must be emitted exactly once");
    });
}

/// Anonymous counting: one report from each rank, one rank per step, so rank 1 may not
/// have begun while step 0 is aggregated.
#[test]
fn countdown_emits_only_after_every_rank_reported() {
    watch_quorum(Policy::Countdown, || {
        vec![
            vec![Some(sends(0, &[WATCHED])), Some(sends(1, &[]))],
            vec![Some(sends(0, &[])), Some(sends(1, &[WATCHED]))],
        ]
    });
}

/// Rank 0 reports twice before rank 1 reports at all.
fn duplicate_before_the_last_rank() -> Script {
    vec![
        vec![Some(sends(0, &[WATCHED])), Some(sends(1, &[]))],
        vec![Some(sends(0, &[WATCHED])), Some(sends(1, &[]))],
        vec![Some(sends(0, &[])), Some(sends(1, &[WATCHED]))],
    ]
}

/// `Strict` must not count the duplicate, or it would emit at step 1 with one reporter.
#[test]
fn strict_does_not_count_a_duplicate_towards_the_quorum() {
    watch_quorum(Policy::Strict, duplicate_before_the_last_rank);
}

/// The broken twin: anonymous counting takes the duplicate for rank 1's report.
#[test]
#[should_panic(expected = "after 1 reporters")]
fn countdown_counts_the_duplicate_and_is_caught_emitting_early() {
    watch_quorum(Policy::Countdown, duplicate_before_the_last_rank);
}
