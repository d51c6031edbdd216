//! Issue 11, item 3: golden files of the step text — every step line and the diagnosis
//! of every counterexample — for each shipped spec family (each file in `specs/`, at its
//! first matrix point), once with leases off and once on (`producer.lease` overridden).
//! A step line is derived from what the step changed and from the spec, so a change to
//! the model or to the wording shows up here as a reviewable diff.
//!
//! The files live in `tests/golden/steps/`; after a deliberate change, rewrite them with
//! `KVCC_BLESS=1 cargo test -p kvcc-e2e -- golden` and review the diff.

use crate::common::{root, shipped_specs};
use kvcc::spec::Spec;
use kvcc::trace::Trace;
use kvcc_model::checker::{self, Options};
use kvcc_model::ContractModel;
use std::fmt::Write;
use std::path::Path;

/// The step text of one spec's counterexamples, leases off then on.
fn step_text(spec_file: &Path) -> String {
    let relative = spec_file.strip_prefix(root()).unwrap_or(spec_file);
    let spec = Spec::load(spec_file.to_str().unwrap()).expect("a shipped spec loads");
    let case = spec.cases(&[]).expect("a shipped spec has cases").remove(0);
    let mut out = format!("# {} at {}\n", relative.display(), point_name(&case.point));
    for lease in [false, true] {
        let mut config = case.config.clone();
        config.producer.lease = lease;
        let _ = writeln!(out, "\n## producer.lease = {lease}");
        if let Err(e) = config.validate() {
            let _ = writeln!(out, "not a valid config: {e:?}");
            continue;
        }
        // As `kvcc check` searches it: past safety violations where the spec asks.
        let past_violations = spec.expect.past_violations;
        let model = ContractModel::new(config).past_violations(past_violations);
        let options = Options {
            past_violations,
            ..Options::default()
        };
        let report = checker::check(&model, &options);
        if report.counterexamples.is_empty() {
            let _ = writeln!(out, "no counterexample ({:?})", report.verdict);
        }
        for counterexample in &report.counterexamples {
            let trace = Trace::new(&model, &spec, &case.point, counterexample, String::new());
            let _ = writeln!(out, "\n### {} — {}", trace.clause_name(), trace.cost);
            for (i, step) in trace.steps.iter().enumerate() {
                let _ = writeln!(out, "{}. {}", i + 1, step.description);
            }
            let _ = writeln!(out, "diagnosis:");
            for line in &trace.diagnosis {
                let _ = writeln!(out, "  {line}");
            }
        }
    }
    out
}

fn point_name(point: &kvcc::spec::point::Point) -> String {
    if point.is_empty() {
        "its only point".into()
    } else {
        point.to_string()
    }
}

#[test]
fn issue11_step_text_matches_the_golden_file_of_each_spec_family() {
    let dir = root().join("tests/golden/steps");
    let bless = std::env::var_os("KVCC_BLESS").is_some();
    let mut drifted = Vec::new();
    let specs = shipped_specs();
    assert!(specs.len() >= 20, "{} shipped specs", specs.len());
    for spec in specs {
        let name = spec.file_stem().unwrap().to_string_lossy().into_owned();
        let golden = dir.join(format!("{name}.txt"));
        let fresh = step_text(&spec);
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            bless_file(&golden, &fresh);
            continue;
        }
        let committed = std::fs::read_to_string(&golden).unwrap_or_default();
        if let Some((line, want, got)) = first_difference(&committed, &fresh) {
            drifted.push(format!(
                "{}: line {line}\n  golden: {want}\n  now:    {got}",
                golden.strip_prefix(root()).unwrap().display()
            ));
        }
    }
    assert!(
        drifted.is_empty(),
        "step text drifted from tests/golden/steps (after a deliberate change: \
         KVCC_BLESS=1 cargo test -p kvcc-e2e -- golden, and review the diff):\n{}",
        drifted.join("\n")
    );
}

/// Rewrites a golden file under KVCC_BLESS=1 when it changed, and says which, with its
/// first changed line (issue 26: blessing said nothing of what it rewrote). Written to the
/// process's stderr directly: libtest captures `eprintln!` of a passing test.
fn bless_file(golden: &Path, fresh: &str) {
    use std::io::Write as _;
    let committed = std::fs::read_to_string(golden).unwrap_or_default();
    let name = golden.strip_prefix(root()).unwrap_or(golden).display();
    let note = match first_difference(&committed, fresh) {
        None => return,
        Some((line, _, now)) => {
            std::fs::write(golden, fresh).unwrap();
            format!("KVCC_BLESS: rewrote {name} (from line {line}: {now})\n")
        }
    };
    let _ = std::io::stderr().write_all(note.as_bytes());
}

/// Whether `line` has the word `lease` (not `released`).
fn mentions_lease(line: &str) -> bool {
    line.to_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| w == "lease" || w == "leases")
}

fn first_difference(want: &str, got: &str) -> Option<(usize, String, String)> {
    let (mut a, mut b) = (want.lines(), got.lines());
    for n in 1.. {
        match (a.next(), b.next()) {
            (None, None) => return None,
            (x, y) if x == y => continue,
            (x, y) => {
                let show = |l: Option<&str>| l.unwrap_or("(end of file)").to_string();
                return Some((n, show(x), show(y)));
            }
        }
    }
    None
}

/// The golden files say what the issue asks of every step line: no lease words where
/// the spec has no lease, a lease expiry says that the lease expires, fault steps are
/// marked — checked over the files themselves, so they cannot be blessed into breaking it.
#[test]
fn issue11_golden_step_text_keeps_leases_faults_and_expiries_honest() {
    let dir = root().join("tests/golden/steps");
    let (mut without, mut expiries, mut faults) = (0, 0, 0);
    for spec in shipped_specs() {
        let name = spec.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(dir.join(format!("{name}.txt")))
            .unwrap_or_else(|e| panic!("tests/golden/steps/{name}.txt: {e}"));
        let off = &text[..text.find("## producer.lease = true").unwrap()];
        let step_lines = |part: &str| -> Vec<String> {
            part.lines()
                .filter(|l| {
                    l.split_once(". ")
                        .is_some_and(|(n, _)| n.parse::<u32>().is_ok())
                })
                .map(str::to_string)
                .collect()
        };
        for line in step_lines(off) {
            assert!(!mentions_lease(&line), "{name}: {line}");
            without += 1;
        }
        for line in step_lines(&text) {
            // A lease expiry step: `N. P rank K: lease on reqR expires ...`.
            if line
                .split_once(". P rank ")
                .is_some_and(|(_, rest)| rest.contains(": lease on req"))
            {
                assert!(line.contains(" expires"), "{name}: {line}");
                expiries += 1;
            }
            if line.contains("[FAULT") {
                faults += 1;
            }
        }
    }
    // The twins: the words the checks look for do occur.
    assert!(without > 100, "{without} step lines without leases");
    assert!(expiries >= 1, "{expiries} lease expiries");
    assert!(faults > 5, "{faults} fault steps");
}

/// Every shipped check's state count, transitions, depth and verdict, one line each, in
/// `tests/golden/state-counts.txt`: a change to the model or the checker that changes what
/// is explored shows up as a reviewable diff, never silently (bless as above).
#[test]
fn state_counts_of_every_shipped_check_are_pinned() {
    let golden = root().join("tests/golden/state-counts.txt");
    let mut fresh = String::new();
    for file in shipped_specs() {
        let relative = file.strip_prefix(root()).unwrap_or(&file).to_path_buf();
        let spec = Spec::load(file.to_str().unwrap()).expect("a shipped spec loads");
        for case in spec.cases(&[]).expect("a shipped spec has cases") {
            let outcome = kvcc::run::check(&spec, &case, &kvcc::run::Settings::default())
                .expect("a shipped spec checks");
            // Where one request stood for all, the search of every request stays pinned
            // beside it.
            let every = outcome.one_request_for.map(|n| {
                let settings = kvcc::run::Settings {
                    no_independence: true,
                    ..kvcc::run::Settings::default()
                };
                let all = kvcc::run::check(&spec, &case, &settings).expect("a shipped spec checks");
                format!(
                    " (one request stands for {n}; every request: {} states, {} transitions, depth {}, {})",
                    all.unique_states,
                    all.transitions,
                    all.max_depth,
                    verdict(&all.observed)
                )
            });
            let violated: Vec<String> = outcome
                .violations
                .iter()
                .map(|v| format!("{}: {}", v.property, v.clause))
                .collect();
            let _ = writeln!(
                fresh,
                "{} [{}]: {} states, {} transitions, depth {}, {} {:?}{}",
                relative.display(),
                point_name(&case.point),
                outcome.unique_states,
                outcome.transitions,
                outcome.max_depth,
                verdict(&outcome.observed),
                violated,
                every.unwrap_or_default()
            );
        }
    }
    if std::env::var_os("KVCC_BLESS").is_some() {
        bless_file(&golden, &fresh);
        return;
    }
    let committed = std::fs::read_to_string(&golden).unwrap_or_default();
    if let Some((line, want, got)) = first_difference(&committed, &fresh) {
        panic!(
            "state counts drifted from tests/golden/state-counts.txt at line {line}\n  \
             golden: {want}\n  now:    {got}\n(after a deliberate change: KVCC_BLESS=1 \
             cargo test -p kvcc-e2e -- golden, and review the diff)"
        );
    }
}

/// A verdict as the golden file has always written it (`Violated`, `Holds`, ...): a run
/// cut after its violations (issue 28) names its cut too.
fn verdict(observed: &kvcc::run::Observed) -> String {
    match observed {
        kvcc::run::Observed::Violated { incomplete: None } => "Violated".to_string(),
        other => format!("{other:?}"),
    }
}
