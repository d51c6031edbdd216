//! The issue's scenarios through the library, with pinned unique-state counts and a
//! named witness path. (`specs/` holds the same scenarios for the CLI; its end-to-end
//! tests check the verdicts there.) A changed count is a reviewed decision, never a
//! blind update.

mod common;

use common::{fix, regression};
use kvcc_model::checker::{check, Counterexample, Options, Verdict};
use kvcc_model::describe::action_name;
use kvcc_model::{Config, ContractModel};

fn run(config: Config) -> kvcc_model::checker::Report<ContractModel> {
    config.validate().expect("valid scenario");
    check(
        &ContractModel::new(config),
        &Options {
            threads: 2,
            ..Options::default()
        },
    )
}

/// The names of a counterexample's actions, in order.
fn witness(counterexample: &Counterexample<ContractModel>) -> Vec<&'static str> {
    counterexample
        .steps
        .iter()
        .map(|(action, _)| action_name(action))
        .collect()
}

#[test]
fn pr59325_regression_leaks_with_a_named_witness() {
    let report = run(regression(2, 1));
    assert!(matches!(report.verdict, Verdict::Violated));
    assert_eq!(report.unique_states, 51);
    assert_eq!(
        report.violated_properties(),
        vec![
            "eventually-freed".to_string(),
            "aggregator-drains".to_string()
        ]
    );
    let leak = &report.counterexamples[0];
    assert_eq!(
        leak.name,
        "eventually-freed: delay-freed-request-never-freed"
    );
    // The PR's own story, with no fault and no lease expiry (the cheapest counterexample;
    // the shortest one is the fault story below).
    assert_eq!(
        witness(leak),
        [
            "PrefillFinishes",
            "DecodeAdmits",
            "DecodeEngineSteps",
            "ReadCompletes",
            "PrefillEngineSteps",
            "DecodeEngineSteps"
        ],
        "finish, D admits and reads, rank 0 is notified and reports while the replica's \
         synthetic report is cleared: one report of the two E needs, forever"
    );
    assert_eq!((leak.cost.faults, leak.cost.expiries), (0, 0));
    let shortest = check(
        &ContractModel::new(regression(2, 1)),
        &Options {
            shortest: true,
            ..Options::default()
        },
    );
    assert_eq!(
        witness(&shortest.counterexamples[0]),
        [
            "PrefillFinishes",
            "ClientAborts",
            "PrefillEngineSteps",
            "LeaseExpires",
            "PrefillEngineSteps"
        ],
        "--shortest: finish, the client aborts so D never reads, the replica's synthetic \
         report is cleared, rank 0's lease expires and reports"
    );
}

#[test]
fn pr59325_fix_holds_across_pcp_and_tp() {
    // (pcp, tp, requests) -> unique states. Replicated ranks > 0 move in lockstep (one
    // engine step delivers metadata to all of them), so pcp does not grow the space. Two
    // requests are interchangeable (2,481 and 49,037 while only ranks were), and the two
    // transfer groups of tp 2 per request column (24,684 while only as whole rows).
    let pinned = [
        ((1, 1, 1), 51),
        ((2, 1, 1), 51),
        ((4, 1, 1), 51),
        ((2, 2, 1), 191),
        ((4, 2, 1), 191),
        ((2, 1, 2), 1_266),
        ((4, 2, 2), 16_208),
    ];
    for ((pcp, tp, requests), states) in pinned {
        let mut config = fix(pcp, tp);
        config.requests = requests;
        let report = run(config);
        assert!(
            matches!(report.verdict, Verdict::Holds),
            "pcp {pcp} tp {tp} requests {requests}"
        );
        assert_eq!(
            report.unique_states, states,
            "pcp {pcp} tp {tp} requests {requests}"
        );
    }
}

#[test]
fn pr59325_regression_also_leaks_without_leases() {
    let mut config = regression(2, 1);
    config.producer.lease = false;
    let report = run(config);
    assert_eq!(
        report.violated_properties(),
        vec![
            "eventually-freed".to_string(),
            "aggregator-drains".to_string()
        ]
    );
    assert_eq!(report.unique_states, 39);
}

#[test]
fn two_runs_give_identical_counts_and_traces() {
    let a = run(regression(4, 2));
    let b = run(regression(4, 2));
    assert_eq!(a.unique_states, b.unique_states);
    assert_eq!(a.transitions, b.transitions);
    let trace = |r: &kvcc_model::checker::Report<ContractModel>| {
        r.counterexamples
            .iter()
            .map(|c| format!("{:?}", c.steps))
            .collect::<Vec<_>>()
    };
    assert_eq!(trace(&a), trace(&b));
}

/// One request on D's pool of two blocks, preempted once its load landed
/// (`faults.decode-preempted`), with `lookup` deciding what its connector offers when the
/// scan takes it again.
fn preempted_on_decode(lookup: kvcc_model::config::LookupAfterLoad) -> Config {
    let mut config = fix(1, 1);
    config.faults = Default::default();
    config.decode.kv_blocks = Some(2);
    config.faults.decode_preempted = true;
    config.consumer.lookup_after_load = lookup;
    config
}

/// Issue 24 (vLLM PRs #53250, #57705): a request D preempts after its load is asked about
/// again; a connector that asks for a second load (MoRIIO before the PRs) leaves it
/// waiting for a transfer nobody set up, and the witness is the preemption's own story.
/// Current vLLM's answer, nothing to load, prefills it locally: the check holds, and it
/// is no vacuous pass, since the preempted request runs to its end there.
#[test]
fn issue24_a_second_load_after_a_preemption_on_d_never_wakes_and_a_local_prefill_runs() {
    use kvcc_model::config::LookupAfterLoad;
    let report = run(preempted_on_decode(LookupAfterLoad::SecondLoad));
    assert_eq!(
        report.violated_properties(),
        vec!["eventually-woken".to_string()]
    );
    let stuck = &report.counterexamples[0];
    assert_eq!(stuck.name, "eventually-woken: loader-never-woken");
    assert_eq!(
        witness(stuck),
        [
            "PrefillFinishes",
            "DecodeAdmits",
            "DecodeEngineSteps",
            "ReadCompletes",
            "PrefillEngineSteps",
            "DecodeEngineSteps",
            "DecodeEngineSteps",
            "DecodePreempted",
            "DecodeEngineSteps"
        ],
        "admitted, read, woken and running, preempted, then admitted again for a load \
         nobody set up"
    );
    assert_eq!(report.unique_states, 25);

    let config = preempted_on_decode(LookupAfterLoad::LocalPrefill);
    let report = run(config.clone());
    assert!(matches!(report.verdict, Verdict::Holds));
    assert_eq!(report.unique_states, 28);
    assert!(
        some_request_reaches(config, |q| q.decode_preempted
            && q.decode == kvcc_model::state::DecodePhase::Done),
        "the preempted request is prefilled locally and finishes"
    );
}

/// Does some reachable state of `config` hold a request for which `reached` holds? (A
/// pass is not vacuous when the path it is about is reached.)
fn some_request_reaches(
    config: Config,
    reached: impl Fn(&kvcc_model::state::Request) -> bool,
) -> bool {
    let model = ContractModel::new(config);
    let mut frontier = vec![model.initial_state()];
    while let Some(state) = frontier.pop() {
        if state.requests.iter().any(&reached) {
            return true;
        }
        let mut actions = Vec::new();
        model
            .enabled_actions(&state, &mut actions, u64::MAX)
            .unwrap();
        frontier.extend(actions.into_iter().filter_map(|a| model.apply(&state, a)));
    }
    false
}

/// A synchronous load on D that fails under `kv_load_failure_policy = "recompute"`.
fn sync_load_rewound(batches: u8, output: kvcc_model::config::RewoundInFlightOutput) -> Config {
    use kvcc_model::config::{KvLoadFailurePolicy, LoadMode};
    let mut config = fix(1, 1);
    config.faults = Default::default();
    config.faults.transfer_error = true;
    config.max_concurrent_batches = batches;
    config.consumer.load = LoadMode::Synchronous;
    config.scheduler.kv_load_failure_policy = KvLoadFailurePolicy::Recompute;
    config.scheduler.rewound_in_flight_output = output;
    config
}

/// Issue 24, real bug #14 (vLLM PR #56733): a failed synchronous load rewinds the running
/// request, but with two batches in flight the step scheduled before the rewind ran on the
/// blocks the load never filled, and vLLM 0.34 delivers its token. Dropping that output as
/// stale holds with the same failure, and is no vacuous pass: the rewind is reached. With
/// one batch nothing is in flight at the rewind, so even the delivering scheduler holds.
#[test]
fn issue24_a_failed_synchronous_load_delivers_the_token_in_flight_unless_discarded() {
    use kvcc_model::config::RewoundInFlightOutput::{Delivered, Discarded};
    let report = run(sync_load_rewound(2, Delivered));
    assert_eq!(
        report.violated_properties(),
        vec!["recv-after-stable".to_string()]
    );
    let stale = &report.counterexamples[0];
    assert_eq!(stale.name, "recv-after-stable: token-from-failed-load");
    assert_eq!(
        witness(stale),
        [
            "PrefillFinishes",
            "DecodeAdmits",
            "DecodeEngineSteps",
            "DecodeEngineSteps",
            "ReadFails",
            "DecodeEngineSteps",
            "DecodeEngineSteps"
        ],
        "admitted and running, its load posted with the next batch, the read fails, the \
         step ends with invalid blocks and the request is rewound, then the step in flight \
         delivers its token"
    );
    assert_eq!(stale.cost.faults, 1);
    assert_eq!(report.unique_states, 38);

    let config = sync_load_rewound(2, Discarded);
    let report = run(config.clone());
    assert!(matches!(report.verdict, Verdict::Holds));
    assert_eq!(report.unique_states, 38);
    assert!(
        some_request_reaches(config, |q| q.decode
            == kvcc_model::state::DecodePhase::Rewound),
        "the failed load is rewound with a step in flight"
    );

    let mut one_batch = sync_load_rewound(1, Delivered);
    let report = run(one_batch.clone());
    assert!(matches!(report.verdict, Verdict::Holds));
    assert_eq!(report.unique_states, 21);
    // The same with D's pool: the synchronous load is admitted with its whole sequence.
    one_batch.requests = 2;
    one_batch.decode.kv_blocks = Some(2);
    let report = run(one_batch);
    assert!(matches!(report.verdict, Verdict::Holds));
    assert_eq!(report.unique_states, 259);
}
