//! The issue's scenarios through the library, with pinned unique-state counts and a
//! named witness path. (`specs/` holds the same scenarios for the CLI; its end-to-end
//! tests check the verdicts there.) A changed count is a reviewed decision, never a
//! blind update.

mod common;

use common::{fix, regression};
use kvcc_model::checker::{check, Options, Verdict};
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
    let witness: Vec<&str> = leak.steps.iter().map(|(a, _)| action_name(a)).collect();
    // The PR's own story, with no fault and no lease expiry (the cheapest counterexample;
    // the shortest one is the fault story below).
    assert_eq!(
        witness,
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
    let witness: Vec<&str> = shortest.counterexamples[0]
        .steps
        .iter()
        .map(|(a, _)| action_name(a))
        .collect();
    assert_eq!(
        witness,
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
    let witness: Vec<&str> = stuck.steps.iter().map(|(a, _)| action_name(a)).collect();
    assert_eq!(
        witness,
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
    let model = ContractModel::new(config);
    let mut frontier = vec![model.initial_state()];
    let mut ran_again = false;
    while let Some(state) = frontier.pop() {
        ran_again |= state
            .requests
            .iter()
            .any(|q| q.decode_preempted && q.decode == kvcc_model::state::DecodePhase::Done);
        let mut actions = Vec::new();
        model
            .enabled_actions(&state, &mut actions, u64::MAX)
            .unwrap();
        frontier.extend(actions.into_iter().filter_map(|a| model.apply(&state, a)));
    }
    assert!(
        ran_again,
        "the preempted request is prefilled locally and finishes"
    );
}
