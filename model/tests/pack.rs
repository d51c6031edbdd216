//! The checker keeps frontier states packed: every reachable state must come back from
//! its bytes unchanged, or the search would explore states the model never reaches.

mod common;

use kvcc_model::checker::Checkable;
use kvcc_model::config::{AggregatorPolicy, Config, Connector};
use kvcc_model::model::ContractModel;

fn assert_round_trips(config: Config) {
    let model = ContractModel::new(config);
    let states = model.reachable_states(20_000);
    assert!(states.len() > 100, "too few states to say anything");
    let mut bytes = Vec::new();
    for state in states {
        bytes.clear();
        model.pack(&state, &mut bytes);
        assert_eq!(model.unpack(&bytes), state, "packed as {bytes:?}");
    }
}

#[test]
fn every_reachable_state_survives_packing() {
    assert_round_trips(common::fix(4, 2));
    let mut two_requests = common::regression(2, 1);
    two_requests.requests = 2;
    assert_round_trips(two_requests);
}

#[test]
fn offloading_loads_and_strict_counts_survive_packing() {
    let mut multi = common::fix(2, 1);
    multi.connector = Connector::MultiOffload;
    multi.requests = 2;
    assert_round_trips(multi.clone());
    multi.prefill.loads_kv = true;
    multi.policy = AggregatorPolicy::Strict;
    assert_round_trips(multi);
}
