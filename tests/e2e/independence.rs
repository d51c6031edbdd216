//! Issue 28: one request stands for many (`kvcc_model::independence`). The model of one
//! request, among others that may keep the engines stepping, must have every violation
//! the full model of two or three requests has, on every shipped spec point where no
//! behaviour couples requests and the full search fits a cap: then its *holds* is the
//! full model's. And the argument itself, step by step, on the first reachable states of
//! every such point at two requests (breadth first, so the small points whole): each transition
//! of two requests, seen by each request, is a transition of the one-request model or
//! leaves the request as it was; each incident it raises, a request's step raises; a
//! state breaking a clause breaks it for a request; a state where a run may end is one
//! for each request. Each twin leaves a part of the argument out and must be caught: the
//! others' engine steps, or a coupling.

use kvcc::spec::Spec;
use kvcc_model::checker::{check, forced_step, Limits, Options};
use kvcc_model::config::LeaseReaper;
use kvcc_model::properties::{safe, CLAUSES};
use kvcc_model::state::{Incidents, RequestId};
use kvcc_model::{independence, Config, ContractModel, State};
use std::collections::BTreeSet;

/// Full searches are capped here: larger points are skipped (counted, not compared).
const FULL_STATES: u64 = 60_000;

/// The violated clauses of `model`, or None when the cap cut its search.
fn violated(model: &ContractModel, past_violations: bool) -> Option<BTreeSet<String>> {
    let report = check(
        model,
        &Options {
            threads: 2,
            past_violations,
            limits: Limits {
                max_states: Some(FULL_STATES),
                ..Limits::default()
            },
            ..Options::default()
        },
    );
    report.cut().is_none().then(|| {
        report
            .counterexamples
            .iter()
            .map(|c| c.name.clone())
            .collect()
    })
}

/// Every shipped spec point, with its past-violations setting, at two and three
/// requests where the spec allows it, each once.
fn points() -> Vec<(String, Config, bool)> {
    let mut seen = BTreeSet::new();
    let mut points = Vec::new();
    for file in crate::common::shipped_specs() {
        let spec = Spec::load(file.to_str().expect("utf-8 path")).expect("shipped spec valid");
        for case in spec.cases(&[]).expect("cases") {
            for requests in [2, 3] {
                let mut config = case.config.clone();
                config.requests = requests;
                let past = spec.expect.past_violations;
                if config.validate().is_ok() && seen.insert(format!("{config:?}{past}")) {
                    let name = format!("{} {} at {requests} requests", spec.name, case.point);
                    points.push((name, config, past));
                }
            }
        }
    }
    points
}

/// What the comparison covered.
#[derive(Debug, Default)]
struct Covered {
    /// Points compared, and of those, where the full model broke a clause.
    compared: usize,
    violated: usize,
    /// Where the one request held (so `kvcc check` answers from it).
    held: usize,
    /// Left out: a coupling, or the full search past the cap.
    coupled: usize,
    large: usize,
}

/// Compares every point the reduction `stands_for` reduces; Err names the first whose
/// full model breaks a clause the reduced one does not.
fn compare(stands_for: impl Fn(&Config) -> Option<ContractModel>) -> Result<Covered, String> {
    let mut covered = Covered::default();
    for (name, config, past) in points() {
        let Some(one) = stands_for(&config) else {
            covered.coupled += 1;
            continue;
        };
        let full = ContractModel::new(config.clone());
        let Some(all) = violated(&full, past) else {
            covered.large += 1;
            continue;
        };
        let reduced = violated(&one, past).expect("one request is smaller than the cap");
        covered.compared += 1;
        covered.violated += usize::from(!all.is_empty());
        covered.held += usize::from(reduced.is_empty());
        let missed: Vec<_> = all.difference(&reduced).collect();
        if !missed.is_empty() {
            return Err(format!("{name}: one request misses {missed:?}"));
        }
    }
    Ok(covered)
}

#[test]
fn issue28_one_request_among_stepping_others_has_every_violation_of_two_and_three() {
    let covered = compare(independence::one_of_many).unwrap_or_else(|e| panic!("{e}"));
    // Not a comparison of runs that all hold, nor of a handful.
    assert!(covered.compared >= 150, "{covered:?}");
    assert!(covered.violated >= 50, "{covered:?}");
    assert!(covered.held >= 50, "{covered:?}");
    assert!(covered.coupled >= 4, "{covered:?}");
}

/// Without the others' steps, one request misses what another request's steps do to it
/// (an aborted request's late report counted in a step the other one keeps taking).
#[test]
fn issue28_a_twin_without_the_others_steps_is_caught() {
    let alone = |config: &Config| {
        independence::one_of_many(config).map(|mut one| {
            one.others_step = false;
            one
        })
    };
    let missed = compare(alone).expect_err("the twin must miss a violation");
    assert!(missed.contains("misses"), "{missed}");
}

/// A reduction that ignores a coupling misses its violations: the head-only reaper's
/// expired lease held behind a live one, D's pool scan that stops at a request.
#[test]
fn issue28_twins_ignoring_a_coupling_are_caught() {
    let ignoring_reaper = |config: &Config| {
        let mut full_scan = config.clone();
        full_scan.producer.lease_reaper = LeaseReaper::FullScan;
        independence::one_of_many(&full_scan).map(|_| {
            let mut one = config.clone();
            one.requests = 1;
            let mut model = ContractModel::new(one);
            model.others_step = true;
            model
        })
    };
    let missed = compare(ignoring_reaper).expect_err("the reaper twin must be caught");
    assert!(missed.contains("leases-reaped"), "{missed}");
    let ignoring_pool = |config: &Config| {
        let mut unbounded = config.clone();
        unbounded.decode.kv_blocks = None;
        independence::one_of_many(&unbounded).map(|_| {
            let mut one = config.clone();
            one.requests = 1;
            one.decode.kv_blocks = config.decode.kv_blocks.map(|_| 2);
            let mut model = ContractModel::new(one);
            model.others_step = true;
            model
        })
    };
    let missed = compare(ignoring_pool).expect_err("the pool twin must be caught");
    assert!(missed.contains("misses"), "{missed}");
}

/// The one-request model of `config`, coupled or not (the twins' way to ignore a
/// coupling), with or without the others' engine steps.
fn one_request(config: &Config, others_step: bool) -> ContractModel {
    let mut one = config.clone();
    one.requests = 1;
    if one.decode.kv_blocks.is_some() {
        one.decode.kv_blocks = Some(2);
    }
    let mut model = ContractModel::new(one);
    model.others_step = others_step;
    model
}

/// `state` without what every request shares (the one-shot faults used, the incidents):
/// what a request's own transition must match.
fn own(mut state: State) -> State {
    state.once = 0;
    state.incidents = Incidents::default();
    state
}

/// Reachable states per point whose clauses and ends are checked (breadth first, so the
/// shallow ones whole).
const STATES_PER_POINT: usize = 20_000;
/// Of those, the first whose every transition is checked against the one request's.
const STEPPED_PER_POINT: usize = 1500;

/// Checks the argument's steps on the reachable states of `full` (two or more requests)
/// against `one`: the transitions checked, or Err naming the first that fails.
fn simulates(name: &str, full: &ContractModel, one: &ContractModel) -> Result<usize, String> {
    let n = full.config.requests;
    let mut checked = 0;
    let mut actions = Vec::new();
    let mut one_actions = Vec::new();
    for (i, state) in full
        .reachable_states(STATES_PER_POINT)
        .into_iter()
        .enumerate()
    {
        let seen: Vec<State> = (0..n as RequestId)
            .map(|r| independence::seen_by(one, &state, r))
            .collect();
        for (c, clause) in CLAUSES.iter().enumerate() {
            if !(clause.holds)(&full.config, &state)
                && seen.iter().all(|p| (clause.holds)(&one.config, p))
            {
                return Err(format!(
                    "{name}: clause {c} breaks in {state:?}, for no request"
                ));
            }
        }
        if safe(&full.config, &state) && !forced_step(full, &state) {
            if let Some(r) = seen.iter().position(|p| forced_step(one, p)) {
                return Err(format!(
                    "{name}: a run may end in {state:?}, not request {r}'s"
                ));
            }
        }
        if i >= STEPPED_PER_POINT {
            continue;
        }
        actions.clear();
        full.enabled_actions(&state, &mut actions, u64::MAX)
            .expect("no cap on successors");
        for &action in &actions {
            let Some(next) = full.apply(&state, action) else {
                continue;
            };
            checked += 1;
            let raised = next.incidents.0 & !state.incidents.0;
            let mut explained = 0;
            for (r, before) in seen.iter().enumerate() {
                let after = own(independence::seen_by(one, &next, r as RequestId));
                let stays = own(before.clone()) == after;
                one_actions.clear();
                one.enabled_actions(before, &mut one_actions, u64::MAX)
                    .expect("no cap on successors");
                let mut moves = false;
                for &step in &one_actions {
                    let Some(stepped) = one.apply(before, step) else {
                        continue;
                    };
                    if stepped.once & !next.once == 0 && own(stepped.clone()) == after {
                        moves = true;
                        explained |= stepped.incidents.0;
                    }
                }
                if !stays && !moves {
                    return Err(format!(
                        "{name}: {action:?} from {state:?} moves request {r} as one request cannot"
                    ));
                }
            }
            if raised & !explained != 0 {
                return Err(format!(
                    "{name}: {action:?} from {state:?} raises incidents {:#x} no request's step raises",
                    raised & !explained
                ));
            }
        }
    }
    Ok(checked)
}

/// Every shipped point at two requests, checked step by step against `one`: the points
/// and the transitions checked.
fn simulate_all(one: impl Fn(&Config) -> Option<ContractModel>) -> Result<(usize, usize), String> {
    let (mut simulated, mut transitions) = (0, 0);
    for (name, config, _) in points().into_iter().filter(|(_, c, _)| c.requests == 2) {
        let Some(one) = one(&config) else { continue };
        transitions += simulates(&name, &ContractModel::new(config), &one)?;
        simulated += 1;
    }
    Ok((simulated, transitions))
}

#[test]
fn issue28_every_step_of_two_requests_is_a_step_of_one_for_each() {
    let (points, transitions) =
        simulate_all(independence::one_of_many).unwrap_or_else(|e| panic!("{e}"));
    // Not a handful: 144 points, about 800,000 transitions when this was written.
    assert!(points >= 90, "{points} points");
    assert!(transitions >= 500_000, "{transitions} transitions");
}

#[test]
fn issue28_step_by_step_twins_are_caught() {
    let alone = simulate_all(|c| independence::one_of_many(c).map(|_| one_request(c, false)));
    assert!(alone
        .expect_err("without the others' steps")
        .contains("moves request"));
    let coupled = |c: &Config| {
        let coupled = c.decode.kv_blocks.is_some() || c.reaps_in_queue_order();
        coupled.then(|| one_request(c, true))
    };
    simulate_all(coupled).expect_err("a coupled point is not one request's");
}

/// What `kvcc check` says where one request stood for all, and where it could not: the
/// table, the note below it, JSON's `one_request_for` and `settings.independence`; and
/// `--no-independence` explores every request to the same verdicts, with more states, and
/// is repeated in the reproduce command.
#[test]
fn issue28_check_says_where_one_request_stood_for_all() {
    let lines = |extra: &[&str]| -> Vec<serde_json::Value> {
        let runs: [&[&str]; 2] = [
            &["specs/pr59325-fix.toml", "--point", "requests=2"],
            &["specs/abort-after-delayed-free.toml"],
        ];
        let mut lines = Vec::new();
        for spec in runs {
            let mut args = vec!["check", "--format", "json"];
            args.extend(spec);
            args.extend(extra);
            let (_, stdout, stderr) = crate::common::run(&args);
            assert!(!stderr.contains("error"), "{stderr}");
            lines.extend(
                stdout
                    .lines()
                    .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON line")),
            );
        }
        lines
    };
    let reduced = lines(&[]);
    let full = lines(&["--no-independence"]);
    // Each check that explored every request says why; without the reduction none does.
    let did_not_hold = "one request, among others free to keep the engines stepping, did not hold";
    for (r, f) in reduced.iter().zip(&full) {
        assert_eq!(f["every_request"], serde_json::Value::Null);
        let why = &r["every_request"];
        match r["one_request_for"].as_u64() {
            Some(_) => assert_eq!(why, &serde_json::Value::Null),
            None => assert_eq!(why, did_not_hold, "{r}"),
        }
    }
    assert_eq!(reduced.len(), full.len());
    let (mut stood, mut explored) = (0, 0);
    for (r, f) in reduced.iter().zip(&full) {
        assert_eq!(r["settings"]["independence"], true);
        assert_eq!(f["settings"]["independence"], false);
        assert_eq!(f["one_request_for"], serde_json::Value::Null);
        assert_eq!(
            (&r["point"], &r["verdict"], &r["violations"]),
            (&f["point"], &f["verdict"], &f["violations"])
        );
        if r["one_request_for"] == 2 {
            assert_eq!(r["verdict"], "holds");
            assert!(r["unique_states"].as_u64() < f["unique_states"].as_u64());
            stood += 1;
        } else {
            // A violated check explored every request, as without the reduction.
            assert_eq!(r["unique_states"], f["unique_states"]);
            explored += 1;
        }
    }
    assert!(
        stood >= 8 && explored >= 1,
        "{stood} stood for two, {explored} explored"
    );
    let (_, table, _) = crate::common::run(&[
        "check",
        "specs/pr59325-fix.toml",
        "--point",
        "requests=2",
        "--point",
        "prefill.tp=1",
    ]);
    assert!(
        table.contains("holds (one request stands for 2)"),
        "{table}"
    );
    assert!(
        table.contains("--no-independence explores every request"),
        "{table}"
    );
    // A coupled check that held explored every request, and says which behaviour made it.
    let (_, coupled, _) = crate::common::run(&["check", "specs/decode-block-pool.toml"]);
    assert!(
        coupled.contains("holds verdicts of several requests that explored every request: 1 check: decode.kv-blocks: the requests share D's block pool"),
        "{coupled}"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let traces = dir.path().to_str().expect("utf-8");
    let (_, _, _) = crate::common::run(&[
        "check",
        "specs/abort-after-delayed-free.toml",
        "--no-independence",
        "--all-traces",
        "--trace-dir",
        traces,
    ]);
    let text = std::fs::read_dir(dir.path())
        .expect("traces written")
        .filter_map(Result::ok)
        .find(|e| e.path().extension().is_some_and(|x| x == "txt"))
        .expect("a text trace");
    let text = std::fs::read_to_string(text.path()).expect("readable");
    assert!(text.contains("--no-independence"), "{text}");
}

/// Random small specs (`KVCC_RANDOM_SPECS`, 150 by default), every knob drawn, at two
/// requests: where one request stands for both, the argument holds step by step on
/// their reachable states, and the full model breaks no clause the one request keeps.
#[test]
fn issue28_random_specs_at_two_requests_are_one_request_step_by_step() {
    use proptest::strategy::{Strategy, ValueTree};
    let cases: usize = std::env::var("KVCC_RANDOM_SPECS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(150);
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = crate::fuzz::small_random_spec();
    let (mut simulated, mut compared, mut drawn) = (0, 0, 0);
    while simulated < cases {
        drawn += 1;
        assert!(
            drawn < cases * 10,
            "too few random specs fit: {simulated} of {drawn}"
        );
        let text = strategy.new_tree(&mut runner).expect("a spec").current();
        let Ok(spec) = Spec::parse("random.toml", text.clone()) else {
            continue;
        };
        let Ok(cases) = spec.cases(&[]) else { continue };
        let mut config = cases[0].config.clone();
        config.requests = 2;
        if config.validate().is_err() {
            continue;
        }
        let Some(one) = independence::one_of_many(&config) else {
            continue;
        };
        let full = ContractModel::new(config);
        simulates(&text, &full, &one).unwrap_or_else(|e| panic!("{e}"));
        simulated += 1;
        // Where the full search stops early at its violations, the one request (whose
        // others may step at any time) can be the larger: such specs are not compared.
        if let (Some(all), Some(reduced)) = (violated(&full, false), violated(&one, false)) {
            assert!(
                all.is_subset(&reduced),
                "{text}: {all:?} but one request {reduced:?}"
            );
            compared += 1;
        }
    }
    assert!(
        compared >= cases / 2,
        "{compared} of {simulated} compared whole"
    );
}

/// A step the one request blocks (its own synchronous load still running) no other
/// request takes either: the others' steps wait for it, so these fixed specs at two
/// requests hold from one request; letting the others step past the load broke clauses
/// no run of two requests breaks, and every such check explored both requests.
#[test]
fn issue28_a_step_the_one_request_blocks_the_others_do_not_take() {
    for file in [
        "specs/sync-load-failed-handle-fix.toml",
        "specs/vllm-56733-sync-load-rewound-output-fix.toml",
    ] {
        let spec = Spec::load(&crate::common::root().join(file).to_string_lossy())
            .expect("shipped spec valid");
        let mut case = spec.cases(&[]).expect("cases").remove(0);
        case.config.requests = 2;
        let outcome =
            kvcc::run::check(&spec, &case, &kvcc::run::Settings::default()).expect("checks");
        assert_eq!(outcome.one_request_for, Some(2), "{file}");
        assert_eq!(outcome.observed, kvcc::run::Observed::Holds, "{file}");
    }
}
