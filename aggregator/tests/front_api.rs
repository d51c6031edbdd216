//! The front's public API on one thread: construction limits, every refused submission
//! (a typed error, never a panic, and no effect on what follows), buffering that follows
//! in-flight steps, `recv` after `close`, and the passthroughs to the core.
#![cfg(not(any(feature = "loom", feature = "shuttle")))]

mod support;

use kvcc_aggregator::{
    Aggregator, ConcurrentAggregator, Direction, FrontError, Policy, ViolationKind, WorkerOutput,
};
use support::{ids, sends};

fn front(world_size: u32) -> ConcurrentAggregator<u32> {
    let core = Aggregator::new(Policy::Countdown, world_size);
    ConcurrentAggregator::new(core, world_size, 0).expect("valid front")
}

#[test]
fn construction_rejects_worlds_ranks_cannot_fill() {
    let core = || Aggregator::<u32>::new(Policy::Countdown, 1);
    let empty = ConcurrentAggregator::new(core(), 0, 0).err();
    assert_eq!(
        empty,
        Some(FrontError::WorldSizeOutOfRange { world_size: 0 })
    );
    let too_large = ConcurrentAggregator::new(core(), 65_537, 0).err();
    assert_eq!(
        too_large,
        Some(FrontError::WorldSizeOutOfRange { world_size: 65_537 })
    );
    let largest = ConcurrentAggregator::new(core(), 65_536, 65_535);
    assert!(largest.is_ok(), "ranks 0..=65535 are all u16");
    let outside = ConcurrentAggregator::new(core(), 2, 2).err();
    assert_eq!(
        outside,
        Some(FrontError::OutputRankOutsideWorld {
            output_rank: 2,
            world_size: 2
        })
    );
}

#[test]
fn every_misordered_submission_is_a_typed_error() {
    let front = front(2);
    assert_eq!(
        front.report(0, sends(2, &[1])),
        Err(FrontError::RankOutsideWorld {
            rank: 2,
            world_size: 2
        })
    );
    assert_eq!(
        front.report_missing(1, 0),
        Err(FrontError::StepSkipped {
            rank: 0,
            step: 1,
            expected: 0
        })
    );
    assert_eq!(front.report(0, sends(0, &[1])), Ok(()));
    assert_eq!(
        front.report(0, sends(0, &[1])),
        Err(FrontError::DuplicateStep { rank: 0, step: 0 })
    );
    assert_eq!(front.report(1, sends(0, &[1])), Ok(()));
    assert_eq!(
        front.report(3, sends(0, &[1])),
        Err(FrontError::StepSkipped {
            rank: 0,
            step: 3,
            expected: 2
        })
    );
    assert_eq!(front.report(2, sends(0, &[1])), Ok(()));
    assert_eq!(
        front.report_missing(1, 0),
        Err(FrontError::StepWentBack {
            rank: 0,
            step: 1,
            last: 2
        })
    );
    assert_eq!(
        front.report(u64::MAX, sends(0, &[1])),
        Err(FrontError::StepSkipped {
            rank: 0,
            step: u64::MAX,
            expected: 3
        })
    );
}

/// Refused submissions must not count: the same stream with and without them emits the
/// same outcomes.
#[test]
fn refused_submissions_change_nothing() {
    let clean = front(2);
    let noisy = front(2);
    for step in 0..2 {
        for rank in 0..2 {
            clean.report(step, sends(rank, &[7])).expect("in order");
            noisy.report(step, sends(rank, &[7])).expect("in order");
            assert!(
                noisy.report(step, sends(rank, &[7])).is_err(),
                "a resend is refused"
            );
            assert!(
                noisy.report(step + 2, sends(rank, &[7])).is_err(),
                "a gap is refused"
            );
        }
    }
    assert_eq!(noisy.drain(), clean.drain());
    assert_eq!(noisy.core_snapshot(), clean.core_snapshot());
}

#[test]
fn a_front_starting_later_refuses_earlier_steps() {
    let front = front(1).starting_at(10);
    assert_eq!(
        front.report(9, sends(0, &[1])),
        Err(FrontError::StepBeforeFirst {
            rank: 0,
            step: 9,
            first_step: 10
        })
    );
    assert_eq!(
        front.report(11, sends(0, &[1])),
        Err(FrontError::StepSkipped {
            rank: 0,
            step: 11,
            expected: 10
        })
    );
    assert_eq!(front.report(10, sends(0, &[1])), Ok(()));
    let emitted = front.drain().expect("drain");
    let steps: Vec<u64> = emitted.iter().map(|(step, _)| *step).collect();
    assert_eq!(steps, vec![10]);
    assert_eq!(emitted[0].1.finished_sending, ids(&[1]));
}

/// Memory follows in-flight steps: a rank running ahead buffers its outputs until the
/// others catch up, and each aggregated step is removed.
#[test]
fn buffered_steps_are_released_once_aggregated() {
    let front = front(2);
    for step in 0..4 {
        front
            .report(step, sends(0, &[]))
            .expect("rank 0 runs ahead");
    }
    assert_eq!(front.buffered_steps(), Ok(4));
    front.report(0, sends(1, &[])).expect("rank 1 step 0");
    front.report(1, sends(1, &[])).expect("rank 1 step 1");
    assert_eq!(front.buffered_steps(), Ok(2));
    let steps: Vec<u64> = front
        .drain()
        .expect("drain")
        .iter()
        .map(|(step, _)| *step)
        .collect();
    assert_eq!(steps, vec![0, 1], "only the steps every rank submitted");
}

#[test]
fn a_step_every_rank_reports_missing_is_emitted_dropped() {
    let front = front(2);
    front.report_missing(0, 0).expect("rank 0");
    front.report_missing(0, 1).expect("rank 1");
    let emitted = front.drain().expect("drain");
    assert_eq!(emitted.len(), 1);
    assert!(emitted[0].1.dropped, "no output rank output");
    assert_eq!(front.buffered_steps(), Ok(0));
}

#[test]
fn a_step_missing_the_output_rank_counts_nothing() {
    let front = front(2);
    front.report_missing(0, 0).expect("output rank missing");
    front.report(0, sends(1, &[5])).expect("rank 1");
    let emitted = front.drain().expect("drain");
    assert!(emitted[0].1.dropped);
    assert_eq!(
        front.with_core(Aggregator::open_entries),
        Ok(0),
        "rank 1's report was dropped with the step"
    );
}

#[test]
fn recv_returns_what_is_queued_then_none_after_close() {
    let front = front(1);
    front.report(0, sends(0, &[3])).expect("step 0");
    front.close().expect("close");
    assert_eq!(front.report(1, sends(0, &[3])), Err(FrontError::Closed));
    let first = front
        .recv()
        .expect("recv")
        .map(|(step, outcome)| (step, outcome.finished_sending));
    assert_eq!(first, Some((0, ids(&[3]))));
    assert_eq!(front.recv(), Ok(None));
}

#[test]
fn announcements_and_retirements_reach_a_strict_core() {
    let core = Aggregator::new(Policy::Strict, 1);
    let front = ConcurrentAggregator::new(core, 1, 0).expect("valid front");
    front.announce(Direction::Sending, 4).expect("announce");
    front.report(0, sends(0, &[4])).expect("step 0");
    front.retire(Direction::Sending, &4).expect("retire");
    front.report(1, sends(0, &[4])).expect("step 1");
    let emitted = front.drain().expect("drain");
    assert_eq!(
        emitted[0].1.finished_sending,
        ids(&[4]),
        "announced: counted"
    );
    let kinds: Vec<ViolationKind> = emitted[1].1.violations.iter().map(|v| v.kind).collect();
    assert_eq!(kinds, vec![ViolationKind::Unannounced], "retired: refused");
}

#[test]
fn outputs_reach_the_core_in_rank_order_whatever_the_arrival_order() {
    // Rank 1 lowers E to 1 before rank 2's report of 9 is counted only in rank order;
    // in arrival order (2 then 1), 9 would open at E = 3 and stay open.
    let front = front(3);
    let mut lowers_e = WorkerOutput::empty(1);
    lowers_e.expected_finished_count = 1;
    front.report(0, sends(2, &[9])).expect("rank 2 first");
    front.report(0, lowers_e).expect("rank 1");
    front
        .report(0, sends(0, &[]))
        .expect("rank 0 completes the step");
    let emitted = front.drain().expect("drain");
    assert_eq!(emitted[0].1.finished_sending, ids(&[9]));
}
