//! The closed loop: runs simulated from a spec, conformed through the real concurrent
//! aggregator, must be flagged exactly where the model itself finds the run violating a
//! property. The #59325 regression must be flagged with its leaked requests and the
//! silent replicated ranks; the fix must pass; and over every spec in specs/, conform's
//! properties must equal the model's on every simulated run.

use kvcc::simulate::{request_name, run_seed, simulate, End, Simulation};
use kvcc::spec::point::Selector;
use kvcc::spec::Spec;
use kvcc_conform::{check_run, Options, RunReport};
use kvcc_model::properties::CLAUSES;
use kvcc_model::state::PrefillPhase;
use kvcc_model::ContractModel;
use std::path::Path;

fn spec(name: &str) -> Spec {
    Spec::load(&crate::common::root().join(name).display().to_string()).expect("spec loads")
}

fn model_at(spec: &Spec, point: &[&str]) -> ContractModel {
    let selectors: Vec<Selector> = point.iter().map(|p| p.parse().expect("selector")).collect();
    let cases = spec.cases(&selectors).expect("point exists");
    assert_eq!(cases.len(), 1, "the point pins every matrix path");
    ContractModel::new(cases[0].config.clone())
}

/// Writes a simulation and conforms both engines.
fn conform(sim: &Simulation, dir: &Path) -> (RunReport, RunReport) {
    sim.write(dir).expect("run written");
    let check = |engine: &str| {
        check_run(&dir.join(engine).display().to_string(), &Options::default())
            .unwrap_or_else(|e| panic!("simulated runs are valid input: {e}"))
    };
    (check("prefill"), check("decode"))
}

/// Acceptance: a simulated run of the #59325 regression is flagged with the leaked
/// requests and the ranks that never reported (the replicated PCP ranks > 0, whose
/// synthetic reports the connector clears).
#[test]
fn pr59325_regression_runs_are_flagged_with_leaked_requests_and_silent_ranks() {
    let spec = spec("specs/pr59325-regression.toml");
    let tmp = tempfile::tempdir().unwrap();
    for (p, point) in [
        [
            "prefill.pcp=2",
            "prefill.tp=1",
            "decode.tp=1",
            "producer.lease=true",
        ],
        [
            "prefill.pcp=4",
            "prefill.tp=2",
            "decode.tp=2",
            "producer.lease=false",
        ],
    ]
    .into_iter()
    .enumerate()
    {
        let model = model_at(&spec, &point);
        let replicas = model.topology.replicas.clone();
        assert!(!replicas.is_empty());
        let mut leaked_runs = 0;
        for index in 0..48 {
            let sim = simulate(&model, run_seed(59325, index), 10_000);
            assert_eq!(sim.end, End::Quiescent, "runs end where liveness is judged");
            let (prefill, decode) = conform(&sim, &tmp.path().join(format!("{p}-{index}")));
            assert!(decode.conforms(), "{:#?}", decode.findings);
            let leaked: Vec<String> = (0..sim.last.request_count())
                .filter(|&r| sim.last.requests[r].prefill == PrefillPhase::DelayFreed)
                .map(|r| request_name(r as u8))
                .collect();
            let flagged: Vec<_> = prefill
                .findings
                .iter()
                .filter(|f| f.property == "eventually-freed")
                .collect();
            let names: Vec<String> = flagged.iter().map(|f| f.request.clone()).collect();
            assert_eq!(names, leaked, "{point:?} run {index}: {:?}", sim.actions);
            for finding in &flagged {
                assert_eq!(finding.clause, "delay-freed-request-never-freed");
                for rank in &replicas {
                    assert!(
                        finding.ranks.contains(rank),
                        "replicated rank {rank} never reports: {finding:?}"
                    );
                }
                assert!(
                    finding.message.contains("ranks that never reported it"),
                    "{}",
                    finding.message
                );
            }
            if !leaked.is_empty() {
                leaked_runs += 1;
                // aggregator-drains too when some rank reported it: the model's verdict.
                assert_eq!(prefill.properties(), sim.violated_properties());
            } else {
                assert!(prefill.conforms(), "{:#?}", prefill.findings);
            }
        }
        assert!(
            leaked_runs >= 12,
            "{point:?}: only {leaked_runs} of 48 runs leak"
        );
    }
}

/// Acceptance: runs simulated from the #59325 fix pass.
#[test]
fn pr59325_fix_runs_conform() {
    let spec = spec("specs/pr59325-fix.toml");
    let tmp = tempfile::tempdir().unwrap();
    let mut freed = 0;
    for (p, point) in [
        [
            "prefill.pcp=2",
            "prefill.tp=1",
            "decode.tp=1",
            "requests=1",
            "max-concurrent-batches=1",
        ],
        [
            "prefill.pcp=4",
            "prefill.tp=2",
            "decode.tp=2",
            "requests=2",
            "max-concurrent-batches=1",
        ],
        [
            "prefill.pcp=2",
            "prefill.tp=2",
            "decode.tp=1",
            "requests=2",
            "max-concurrent-batches=2",
        ],
    ]
    .into_iter()
    .enumerate()
    {
        let model = model_at(&spec, &point);
        for index in 0..40 {
            let sim = simulate(&model, run_seed(59325, index), 10_000);
            assert!(
                sim.violated.is_empty(),
                "the fix holds: {:?}",
                sim.violated_names()
            );
            let (prefill, decode) = conform(&sim, &tmp.path().join(format!("{p}-{index}")));
            assert!(
                prefill.conforms(),
                "{point:?} run {index}: {:#?}",
                prefill.findings
            );
            assert!(
                decode.conforms(),
                "{point:?} run {index}: {:#?}",
                decode.findings
            );
            freed += sim
                .last
                .requests
                .iter()
                .filter(|q| q.prefill == PrefillPhase::Released)
                .count();
        }
    }
    assert!(freed > 40, "the runs exercise delayed frees: {freed}");
}

/// Every spec, every matrix point, a few seeds: conform's violated properties equal the
/// model's where the run ended, for the properties a recording can show. The clauses
/// about what mostly only the model sees (a transfer still in flight, a store pending, a
/// handle still reading when its rank reported, a woken request the scheduler never runs
/// and D's assertion on transfer parameters naming no blocks: recordings log
/// completions, not scheduling or admission) may be flagged by conform when the
/// recording shows it too (a rank missing from an emitted quorum), never otherwise;
/// liveness past a safety violation is left out (the model's story ends there).
#[test]
fn every_spec_simulated_is_flagged_exactly_where_the_model_violates() {
    const UNOBSERVABLE: [&str; 4] = [
        "send-emitted-before-offload-stores-done",
        "recv-emitted-before-decoders-done",
        "request-never-scheduled",
        "empty-transfer-params",
    ];
    let specs = crate::common::shipped_specs();
    assert!(specs.len() >= 10);
    let tmp = tempfile::tempdir().unwrap();
    let mut runs = 0;
    let mut flagged = 0;
    for path in specs {
        let spec = Spec::load(&path.display().to_string()).unwrap();
        for case in spec.cases(&[]).unwrap() {
            let model = ContractModel::new(case.config.clone());
            for index in 0..6 {
                let sim = simulate(&model, run_seed(2026, index), 10_000);
                let (prefill, decode) = conform(&sim, &tmp.path().join(runs.to_string()));
                runs += 1;
                let mut got: Vec<&str> = prefill.properties();
                for p in decode.properties() {
                    if !got.contains(&p) {
                        got.push(p);
                    }
                }
                if sim.end == End::Unsafe {
                    got.retain(|p| {
                        !["eventually-freed", "eventually-woken", "aggregator-drains"].contains(p)
                    });
                }
                let mut want: Vec<&str> = Vec::new();
                // Properties violated only through a clause a recording may or may not
                // show: conform may flag them (a rank whose report is missing from an
                // emitted quorum), and must not flag anything else.
                let mut may: Vec<&str> = Vec::new();
                for &c in &sim.violated {
                    let clause = &CLAUSES[c];
                    let monitored = kvcc_conform::monitor::PROPERTIES.contains(&clause.property);
                    let list = if UNOBSERVABLE.contains(&clause.clause) {
                        &mut may
                    } else {
                        &mut want
                    };
                    if monitored && !list.contains(&clause.property) {
                        list.push(clause.property);
                    }
                }
                got.retain(|p| want.contains(p) || !may.contains(p));
                got.sort_unstable();
                want.sort_unstable();
                assert_eq!(
                    got,
                    want,
                    "{} [{}] run {index}: model {:?}, actions {:?}\nprefill: {:#?}\ndecode: {:#?}",
                    spec.name,
                    case.point,
                    sim.violated_names(),
                    sim.actions,
                    prefill.findings,
                    decode.findings
                );
                flagged += usize::from(!want.is_empty());
            }
        }
    }
    assert!(runs > 400, "{runs}");
    assert!(
        flagged > runs / 10,
        "only {flagged} of {runs} runs violate anything"
    );
}

#[test]
fn a_seed_reproduces_its_run() {
    let spec = spec("specs/pr59325-regression.toml");
    let model = model_at(
        &spec,
        &[
            "prefill.pcp=4",
            "prefill.tp=2",
            "decode.tp=2",
            "producer.lease=true",
        ],
    );
    let a = simulate(&model, 17, 10_000);
    let b = simulate(&model, 17, 10_000);
    assert_eq!(a.actions, b.actions);
    assert_eq!(a.prefill.steps, b.prefill.steps);
    assert_eq!(a.decode.events, b.decode.events);
    let differ = (0..20).any(|s| simulate(&model, s, 10_000).actions != a.actions);
    assert!(differ, "different seeds explore different runs");
}
