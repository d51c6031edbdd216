//! A consumer taking outcomes while the ranks report: whether it drains without waiting
//! or blocks in `recv` until `close`, it gets every step once and in step order, and a
//! blocked consumer is always woken (loom reports a deadlock otherwise).

mod support;

use kvcc_aggregator::sync::{thread, Arc};
use kvcc_aggregator::{Aggregator, ConcurrentAggregator, Policy};
use support::{
    assert_matches_sequential, join_all, loom_check, sends, sequential, spawn_consumer,
    spawn_ranks, Emitted, Script,
};

fn script() -> Script {
    vec![
        vec![Some(sends(0, &[1])), Some(sends(1, &[1, 2]))],
        vec![Some(sends(0, &[2])), None],
    ]
}

fn start() -> (Arc<ConcurrentAggregator<u32>>, Arc<Script>, Emitted) {
    let script = Arc::new(script());
    let core = Aggregator::new(Policy::Countdown, 2);
    let (expected, _) = sequential(core.clone(), &script, 0);
    let front = Arc::new(ConcurrentAggregator::new(core, 2, 0).expect("valid front"));
    (front, script, expected)
}

#[test]
fn draining_while_ranks_report_loses_and_repeats_nothing() {
    loom_check(3, || {
        let (front, script, expected) = start();
        let consumer = {
            let front = Arc::clone(&front);
            thread::spawn(move || {
                let mut taken = front.drain().expect("first drain");
                taken.extend(front.drain().expect("second drain"));
                taken
            })
        };
        join_all(spawn_ranks(&front, &script));
        let mut taken = consumer.join().expect("consumer thread");
        taken.extend(front.drain().expect("final drain"));
        assert_matches_sequential(&taken, &expected);
    });
}

#[test]
fn a_blocked_consumer_gets_everything_then_none_after_close() {
    loom_check(3, || {
        let (front, script, expected) = start();
        let consumer = spawn_consumer(&front);
        join_all(spawn_ranks(&front, &script));
        front.close().expect("close");
        let taken = consumer.join().expect("consumer thread");
        assert_matches_sequential(&taken, &expected);
    });
}
