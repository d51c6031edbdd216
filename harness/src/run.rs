//! Checking one case (a spec at a matrix point) and judging the verdict against the
//! spec's expectation. A run cut by a limit before any violation is inconclusive and never
//! matches; one cut after a violation is *violated*, incomplete ([`judge`] says what such
//! a run can and cannot settle).

use crate::spec::point::Point;
use crate::spec::{Case, Expectation, Spec};
use crate::trace::{self, shell_quote, Trace};
use kvcc_model::checker::{self, Cutoff, Limits, Options, Verdict};
use kvcc_model::properties::CLAUSES;
use kvcc_model::InputError;
use kvcc_model::{independence, ContractModel};
use std::path::PathBuf;

/// How every case of a run is checked.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// Live counters for the progress display, if one is shown.
    pub progress: Option<std::sync::Arc<kvcc_model::checker::Progress>>,
    pub threads: usize,
    /// Command-line limits; each one set overrides the spec's.
    pub limits: Limits,
    /// Where counterexamples go, if anywhere.
    pub trace_dir: Option<PathBuf>,
    /// The trace directory as given on the command line (for reproduce commands).
    pub trace_dir_arg: Option<String>,
    /// Command-line limit flags (and `--shortest`), repeated in reproduce commands.
    pub limit_args: Vec<String>,
    /// Report shortest counterexamples instead of the cheapest (fewest faults first).
    pub shortest: bool,
    /// Write traces for every violation, not only for checks whose verdict differs from
    /// the spec's expectation.
    pub all_traces: bool,
    /// Compare states in full, not by fingerprint alone (`--exact`).
    pub exact: bool,
    /// Explore without the symmetry of interchangeable ranks and requests
    /// (`--no-symmetry`, to compare).
    pub no_symmetry: bool,
    /// Check every request, even where one stands for all (`--no-independence`, to
    /// compare; `kvcc_model::independence`).
    pub no_independence: bool,
    /// Explore past safety violations in every check (`--past-violations`), not only in
    /// specs that ask for it.
    pub past_violations: bool,
    /// End each check after the first BFS level that breaks a clause
    /// (`--first-violation`).
    pub first_violation: bool,
    /// Raised on SIGINT or SIGTERM: the check in progress ends inconclusive.
    pub interrupt: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// What the checker concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    Holds,
    /// At least one clause broke, each with a counterexample the checker replayed from
    /// the initial state (certain, whatever else the run did or did not see).
    Violated {
        /// Why the run stopped short, when a limit cut it after its violations were
        /// found: `violations` are those found before the cut, and others may lie past
        /// it. None when every reachable state was explored.
        incomplete: Option<String>,
    },
    /// Cut short (the reason) before any violation was found.
    Inconclusive(String),
}

impl Observed {
    /// `holds`, `violated` or `inconclusive`.
    pub fn word(&self) -> &'static str {
        match self {
            Observed::Holds => "holds",
            Observed::Violated { .. } => "violated",
            Observed::Inconclusive(_) => "inconclusive",
        }
    }

    /// Why a violated run is incomplete, if it is.
    pub fn incomplete(&self) -> Option<&str> {
        match self {
            Observed::Violated { incomplete } => incomplete.as_deref(),
            _ => None,
        }
    }
}

/// How a verdict meets an expectation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgement {
    Matches,
    /// Certainly not as expected, or (for an inconclusive run) not shown to be.
    Mismatch,
    /// An incomplete violated run that neither meets nor refutes the expectation: these
    /// expected properties were not reached before the cut.
    Unreached(Vec<String>),
}

/// A violated clause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub property: String,
    pub clause: String,
    pub clause_index: usize,
    /// Steps of the shortest counterexample.
    pub depth: usize,
}

/// One check's result.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub spec: String,
    pub file: String,
    pub point: Point,
    pub expectation: Expectation,
    pub expect_line: usize,
    pub observed: Observed,
    pub violations: Vec<Violation>,
    pub matches: bool,
    /// Expected properties an incomplete run did not reach, which leave it undecided
    /// ([`Judgement::Unreached`]); empty otherwise.
    pub unreached: Vec<String>,
    pub unique_states: u64,
    pub transitions: u64,
    pub max_depth: u32,
    pub seconds: f64,
    pub states_per_second: f64,
    /// The chance a fingerprint collision hid a state; None when states were compared
    /// in full (`--exact`).
    pub collision_probability: Option<f64>,
    /// Trace files written, `.txt` first for each violation.
    pub traces: Vec<PathBuf>,
    /// The requests one request stood for: the check held for one request among others
    /// that may keep the engines stepping, and no behaviour couples requests
    /// (`kvcc_model::independence`); the counts are that search's. None when every
    /// request was explored.
    pub one_request_for: Option<u8>,
    /// Why one request could not stand for this check's requests, where it has several
    /// and the reduction was not turned off; None otherwise.
    pub every_request: Option<EveryRequest>,
}

/// Why a check of several requests explored every request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EveryRequest {
    /// A behaviour couples the requests (`kvcc_model::independence::coupling` says which).
    Coupled(String),
    /// One request, among others free to keep the engines stepping, broke a clause (or
    /// its search was cut): only the search of every request could say whether they do.
    OneDidNotHold,
}

impl EveryRequest {
    const ONE_DID_NOT_HOLD: &'static str =
        "one request, among others free to keep the engines stepping, did not hold";

    /// As JSON lines and the table's note say it.
    pub fn text(&self) -> &str {
        match self {
            EveryRequest::Coupled(coupling) => coupling,
            EveryRequest::OneDidNotHold => Self::ONE_DID_NOT_HOLD,
        }
    }

    /// Read back from [`EveryRequest::text`].
    pub fn from_text(text: String) -> EveryRequest {
        if text == Self::ONE_DID_NOT_HOLD {
            EveryRequest::OneDidNotHold
        } else {
            EveryRequest::Coupled(text)
        }
    }
}

impl Outcome {
    /// `name` or `name [prefill.pcp=2]`.
    pub fn title(&self) -> String {
        if self.point.is_empty() {
            self.spec.clone()
        } else {
            format!("{} [{}]", self.spec, self.point)
        }
    }

    /// `holds` (`holds (one request stands for N)` when one did), `violated (property:
    /// clause, ...)` or `inconclusive (reason)`.
    pub fn verdict_text(&self) -> String {
        let clauses = || {
            self.violations
                .iter()
                .map(|v| format!("{}: {}", v.property, v.clause))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match &self.observed {
            Observed::Holds => match self.one_request_for {
                Some(n) => format!("holds (one request stands for {n})"),
                None => "holds".into(),
            },
            Observed::Violated { incomplete: None } => format!("violated ({})", clauses()),
            Observed::Violated {
                incomplete: Some(reason),
            } => format!("violated ({}; incomplete: {reason})", clauses()),
            Observed::Inconclusive(reason) => format!("inconclusive ({reason})"),
        }
    }

    /// Sets `matches` and `unreached` from the verdict and the expectation.
    pub fn judge(&mut self) {
        let judgement = judge(
            &self.expectation,
            &self.observed,
            &self.violated_properties(),
        );
        self.matches = judgement == Judgement::Matches;
        self.unreached = match judgement {
            Judgement::Unreached(properties) => properties,
            _ => Vec::new(),
        };
    }

    /// The violated properties, each once, in clause order.
    pub fn violated_properties(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for v in &self.violations {
            if !names.contains(&v.property) {
                names.push(v.property.clone());
            }
        }
        names
    }
}

/// How an observation meets an expectation; `violated` are the violated properties.
///
/// An inconclusive run never matches. A violated run's violations are certain (each
/// replayed), so an incomplete one (cut by a limit after them) settles what they settle:
/// `holds` mismatches; an exact list mismatches when a property outside it broke; a list
/// whose every property broke (exact or at least), or any-of with one that broke, matches.
/// What it cannot settle is a property it did not reach: one expected and not found may
/// lie past the cut, so the check is [`Judgement::Unreached`] for it, never a mismatch.
/// An exact list that was found whole matches although others might break past the cut;
/// the incomplete mark on the verdict says so.
pub fn judge(expectation: &Expectation, observed: &Observed, violated: &[String]) -> Judgement {
    let incomplete = match observed {
        Observed::Holds => {
            return if *expectation == Expectation::Holds {
                Judgement::Matches
            } else {
                Judgement::Mismatch
            }
        }
        Observed::Inconclusive(_) => return Judgement::Mismatch,
        Observed::Violated { incomplete } => incomplete.is_some(),
    };
    let missing = |want: &[String]| -> Vec<String> {
        want.iter()
            .filter(|p| !violated.contains(p))
            .cloned()
            .collect()
    };
    let unmet = match expectation {
        Expectation::Holds => return Judgement::Mismatch,
        Expectation::Violated(want) if violated.iter().any(|p| !want.contains(p)) => {
            return Judgement::Mismatch
        }
        Expectation::Violated(want) | Expectation::ViolatedAll(want) => missing(want),
        Expectation::ViolatedAny(want) if want.iter().any(|p| violated.contains(p)) => Vec::new(),
        Expectation::ViolatedAny(want) => want.clone(),
    };
    match (unmet.is_empty(), incomplete) {
        (true, _) => Judgement::Matches,
        (false, true) => Judgement::Unreached(unmet),
        (false, false) => Judgement::Mismatch,
    }
}

/// The limits of a case: the spec's, each overridden by the command line's.
pub fn limits(spec: &Spec, settings: &Settings) -> Limits {
    Limits {
        max_states: settings.limits.max_states.or(spec.limits.max_states),
        max_depth: settings.limits.max_depth.or(spec.limits.max_depth),
        timeout: settings.limits.timeout.or(spec.limits.timeout),
        max_memory: settings.limits.max_memory,
    }
}

/// Whether a case's search explores past safety violations: the spec asks for it
/// (`[expect] past-violations`), or the command line does for every spec.
pub fn past_violations(spec: &Spec, settings: &Settings) -> bool {
    spec.expect.past_violations || settings.past_violations
}

/// How a case of `spec` is searched under `settings`: what `check` runs, and the explorer
/// too, so that both find the same counterexamples.
pub fn options(spec: &Spec, settings: &Settings) -> Options {
    Options {
        threads: settings.threads.max(1),
        symmetry: !settings.no_symmetry,
        limits: limits(spec, settings),
        progress: settings.progress.clone(),
        shortest: settings.shortest,
        exact: settings.exact,
        past_violations: past_violations(spec, settings),
        first_violation: settings.first_violation,
        interrupt: settings.interrupt.clone(),
        ..Options::default()
    }
}

/// Checks one case, writing its counterexamples when asked to. Where one request stands
/// for all (`kvcc_model::independence`), that model is checked first: when it holds, so
/// does the case; otherwise every request is explored, and the verdict, counts and
/// counterexamples are that search's (its time includes the first).
pub fn check(spec: &Spec, case: &Case, settings: &Settings) -> Result<Outcome, InputError> {
    let options = options(spec, settings);
    let model = ContractModel::new(case.config.clone()).past_violations(options.past_violations);
    let one = independence::one_of_many(&case.config).filter(|_| !settings.no_independence);
    let every_request = (case.config.requests > 1 && !settings.no_independence).then(|| {
        independence::coupling(&case.config).map_or(EveryRequest::OneDidNotHold, |c| {
            EveryRequest::Coupled(c.to_string())
        })
    });
    let mut spent = std::time::Duration::ZERO;
    if let Some(one) = &one {
        // Only a holds is taken from it, so it stops at the first depth that breaks a
        // clause (a holds is still a whole search), never past one.
        let first = Options {
            first_violation: true,
            past_violations: false,
            ..options.clone()
        };
        let report = search(spec, case, one, &first)?;
        spent = report.elapsed;
        if matches!(report.verdict, Verdict::Holds) && report.cut().is_none() {
            let mut outcome = outcome(spec, case, &report, Observed::Holds, Vec::new());
            outcome.one_request_for = Some(case.config.requests);
            return Ok(outcome);
        }
    }
    // The time limit is the check's: the full search has what the first one left.
    let mut options = options;
    if let Some(timeout) = &mut options.limits.timeout {
        *timeout = timeout.saturating_sub(spent);
    }
    let mut report = search(spec, case, &model, &options)?;
    report.elapsed += spent;
    let cut = match &mut report.verdict {
        Verdict::Inconclusive(cut) => Some(cut),
        _ => report.cutoff.as_mut(),
    };
    if let Some(Cutoff::Time(after)) = cut {
        *after += spent;
    }
    let violations: Vec<Violation> = report
        .counterexamples
        .iter()
        .map(|c| Violation {
            property: CLAUSES[c.clause].property.to_string(),
            clause: CLAUSES[c.clause].clause.to_string(),
            clause_index: c.clause,
            depth: c.steps.len(),
        })
        .collect();
    // A cut run with violations is violated: the checker replayed each counterexample
    // from the initial state and re-checked its clause, so the cut leaves only the list
    // incomplete.
    let observed = match (&report.verdict, report.cut()) {
        (Verdict::Violated, cut) => Observed::Violated {
            incomplete: cut.map(ToString::to_string),
        },
        (_, Some(cut)) => Observed::Inconclusive(cut.to_string()),
        (_, None) => Observed::Holds,
    };
    let mut outcome = outcome(spec, case, &report, observed, violations);
    outcome.every_request = every_request;
    // A reviewer needs the traces of what differs from the spec; expected violations
    // are written only when asked for (`--all-traces`).
    if let (Some(dir), true) = (&settings.trace_dir, !outcome.matches || settings.all_traces) {
        for counterexample in &report.counterexamples {
            let command = reproduce_command(spec, &case.point, settings);
            let trace = Trace::new(&model, spec, &case.point, counterexample, command);
            let written = trace::write_all(&trace, dir).map_err(|e| {
                InputError::file(
                    &dir.display().to_string(),
                    format!("cannot write trace: {e}"),
                )
            })?;
            outcome.traces.extend(written);
        }
    }
    Ok(outcome)
}

/// One search of `model`, the case's or the one request standing for its requests.
fn search(
    spec: &Spec,
    case: &Case,
    model: &ContractModel,
    options: &Options,
) -> Result<checker::Report<ContractModel>, InputError> {
    // A panic inside the checker is kvcc's bug, not a verdict: it ends the command with
    // exit 2 naming the check, after every worker has stopped.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        checker::check(model, options)
    }))
    .map_err(|payload| {
        let why = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        InputError::file(
            &spec.file,
            format!(
                "internal error while checking {}: {why} (a kvcc bug: please report it with this spec)",
                if case.point.is_empty() { "the spec".to_string() } else { case.point.to_string() }
            ),
        )
    })
}

/// The outcome of `report`, judged against the case's expectation.
fn outcome(
    spec: &Spec,
    case: &Case,
    report: &checker::Report<ContractModel>,
    observed: Observed,
    violations: Vec<Violation>,
) -> Outcome {
    let mut outcome = Outcome {
        spec: spec.name.clone(),
        file: spec.file.clone(),
        point: case.point.clone(),
        expectation: case.expectation.clone(),
        expect_line: case.expect_line,
        observed,
        violations,
        matches: false,
        unreached: Vec::new(),
        unique_states: report.unique_states,
        transitions: report.transitions,
        max_depth: report.max_depth,
        seconds: report.elapsed.as_secs_f64(),
        states_per_second: report.states_per_second(),
        collision_probability: report.collision_probability(),
        traces: Vec::new(),
        one_request_for: None,
        every_request: None,
    };
    outcome.judge();
    outcome
}

/// The exact command that re-runs this case and rewrites its traces.
pub fn reproduce_command(spec: &Spec, point: &Point, settings: &Settings) -> String {
    let mut args = vec!["kvcc".to_string(), "check".to_string(), spec.file.clone()];
    args.extend(point.args());
    args.extend(settings.limit_args.iter().cloned());
    if let Some(dir) = &settings.trace_dir_arg {
        args.push("--trace-dir".into());
        args.push(dir.clone());
    }
    args.iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}
