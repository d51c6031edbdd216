//! The scenarios, checked through the library (the CLI's end-to-end tests check
//! the same scenarios from `specs/`).

use kvcc_model::checker::{check, Options, Verdict};
use kvcc_model::config::*;
use kvcc_model::ContractModel;

fn seed(pcp: u16, tp: u16) -> Config {
    Config {
        prefill: Prefill {
            tp,
            pp: 1,
            pcp,
            dcp: 1,
            layout: PcpLayout::Replicated,
            attention: Attention::Dense,
            loads_kv: false,
        },
        decode: Decode { tp },
        requests: 1,
        max_concurrent_batches: 1,
        expected_count: ExpectedCount::WorldSize,
        announced_count: None,
        policy: AggregatorPolicy::Countdown,
        connector: Connector::Nixl,
        producer: Producer {
            replicated_reports: ReplicatedReports::Synthetic,
            clear_replicated: true,
            lease: true,
            mla_notify: MlaNotify::EveryCoveredRank,
        },
        consumer: Consumer::default(),
        scheduler: Scheduler::default(),
        faults: Faults::default(),
    }
}

fn run(config: Config) -> (String, u64, u32) {
    config.validate().unwrap();
    let model = ContractModel::new(config);
    let report = check(
        &model,
        &Options {
            threads: 2,
            ..Options::default()
        },
    );
    let verdict = match &report.verdict {
        Verdict::Holds => "holds".to_string(),
        Verdict::Violated => format!(
            "violates {:?}",
            report
                .counterexamples
                .iter()
                .map(|c| c.name.clone())
                .collect::<Vec<_>>()
        ),
        Verdict::Inconclusive(c) => format!("inconclusive: {c}"),
    };
    (verdict, report.unique_states, report.max_depth)
}

#[test]
fn explore() {
    let mut c = seed(2, 1);
    println!("regression {:?}", run(c.clone()));
    c.producer.clear_replicated = false;
    println!("fix {:?}", run(c.clone()));
    c.faults.client_abort = true;
    c.faults.lost_notification = true;
    println!("fix+faults {:?}", run(c.clone()));
    for (pcp, tp) in [(1, 1), (2, 2), (4, 1), (4, 2), (8, 1)] {
        let mut c = c.clone();
        c.prefill.pcp = pcp;
        c.prefill.tp = tp;
        c.decode.tp = tp;
        println!("fix pcp={pcp} tp={tp} {:?}", run(c.clone()));
        c.requests = 2;
        println!("fix pcp={pcp} tp={tp} req=2 {:?}", run(c));
    }
}
