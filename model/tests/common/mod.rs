//! Scenario configs shared by the model's tests.
#![allow(dead_code)]

use kvcc_model::config::*;

/// The #59325 fix: replicated PCP, synthetic reports kept, E = world_size, leases, client
/// aborts and lost notifications.
pub fn fix(pcp: u16, tp: u16) -> Config {
    Config {
        prefill: Prefill {
            tp,
            pp: 1,
            pcp,
            dcp: 1,
            layout: PcpLayout::Replicated,
            attention: Attention::Dense,
            loads_kv: false,
            saves_while_loading: false,
            pp_stage_output: StageOutput::ConnectorOutput,
        },
        decode: Decode {
            tp,
            kv_blocks: None,
        },
        requests: 1,
        max_concurrent_batches: 1,
        expected_count: ExpectedCount::WorldSize,
        announced_count: None,
        policy: AggregatorPolicy::Countdown,
        connector: Connector::Nixl,
        transfer: Transfer::PullReads,
        producer: Producer {
            replicated_reports: ReplicatedReports::Synthetic,
            clear_replicated: false,
            lease: true,
            mla_notify: MlaNotify::EveryCoveredRank,
            // Current vLLM's (0.34.0); the head-only reaper's finding has its own spec
            // (specs/lease-reaper.toml).
            lease_reaper: LeaseReaper::FullScan,
            push_completion: PushCompletion::Reported,
            failed_store: FailedStore::Counted,
            store_ledger: StoreLedger::PerJob,
            notification_after_report: Default::default(),
            notification_count: Default::default(),
        },
        consumer: Consumer::default(),
        scheduler: Scheduler::default(),
        faults: Faults {
            client_abort: true,
            lost_notification: true,
            ..Faults::default()
        },
        delivery: Default::default(),
    }
}

/// The #59325 regression: the same with #53781's clear re-added.
pub fn regression(pcp: u16, tp: u16) -> Config {
    let mut config = fix(pcp, tp);
    config.producer.clear_replicated = true;
    config
}
