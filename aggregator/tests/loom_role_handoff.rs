//! The aggregating role hand-off: a step completed while another thread aggregates is
//! queued for that thread, never stranded. One thread per rank cannot reach this (the
//! role holder's own next submission is what the next step waits for), so here one rank
//! is fed by two threads taking turns: the second submits step 1 as soon as the first
//! has submitted step 0, possibly while the first still aggregates it. The role's racy
//! twin, which gives the role up in a second hold of the hub, must be caught stranding
//! step 1.

mod support;

use kvcc_aggregator::sync::{thread, Arc};
use kvcc_aggregator::{Aggregator, ConcurrentAggregator, FrontError, Policy, Step};
use support::{assert_matches_sequential, loom_check, sends, sequential, Script};

type Front = ConcurrentAggregator<u32>;

fn script() -> Script {
    vec![vec![Some(sends(0, &[1]))], vec![Some(sends(0, &[2]))]]
}

/// Submits rank 0's `step`, retrying while the previous step is not yet submitted.
fn submit_in_turn(front: &Front, script: &Script, step: Step) {
    let output = script[step as usize][0]
        .clone()
        .expect("no missing outputs here");
    loop {
        match front.report(step, output.clone()) {
            Ok(()) => return,
            Err(FrontError::StepSkipped { .. }) => thread::yield_now(),
            Err(error) => panic!("step {step} refused: {error}"),
        }
    }
}

fn explore(front: fn(Aggregator<u32>) -> Front) {
    loom_check(3, move || {
        let script = Arc::new(script());
        let core = Aggregator::new(Policy::Countdown, 1);
        let (expected, _) = sequential(core.clone(), &script, 0);
        let front = Arc::new(front(core));
        let second = {
            let (front, script) = (Arc::clone(&front), Arc::clone(&script));
            thread::spawn(move || submit_in_turn(&front, &script, 1))
        };
        submit_in_turn(&front, &script, 0);
        second.join().expect("second thread");
        assert_matches_sequential(&front.drain().expect("drain"), &expected);
    });
}

#[test]
fn a_step_completed_during_aggregation_is_aggregated_once() {
    explore(|core| ConcurrentAggregator::new(core, 1, 0).expect("valid front"));
}

/// A checker that passes this twin proves nothing about the hand-off.
#[test]
#[should_panic(expected = "must be emitted exactly once")]
fn racy_role_release_strands_a_step() {
    explore(|core| ConcurrentAggregator::with_racy_role_release(core, 1, 0).expect("valid front"));
}
