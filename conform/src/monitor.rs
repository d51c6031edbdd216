//! Contract monitors over one engine's recorded run (docs/contracts.md §10), the observable
//! counterparts of the model's clauses (`kvcc_model::properties`):
//!
//! - `exactly-once`: an id emitted twice in one direction, or emitted to a scheduler that
//!   no longer holds it; a rank reporting an id a second time (under `strict` the
//!   aggregator refuses it, under `countdown` it counts it); a request the scheduler log
//!   frees twice ([`FREED_TWICE`], which only a recording can break);
//! - `quorum-sound`: an id emitted before every rank owning part of its transfer reported
//!   it (the header's `transfer_ranks` for sends, every rank for loads);
//! - `count-conserved`: a countdown given more reports than it has room for (a stray
//!   report reopening an emitted id), or refused by `strict` as one reporter beyond E;
//! - `report-provenance`: a send reported for a request whose free was never delayed, or
//!   refused by `strict` as unannounced;
//! - at the end, `eventually-freed`, `eventually-woken` and `aggregator-drains`: what is
//!   still pending, and which ranks never reported it.
//!
//! The counting itself is the real aggregator's: the monitors read its outcomes and, for
//! the room a countdown has left, its state between steps. They track who reported what
//! and where, which the aggregator (having no identity under `countdown`) cannot say.
//!
//! Memory follows the requests in flight: a request's record is dropped `grace` steps
//! after its lifetime ends (freed, woken, failed) once the aggregator holds nothing for
//! it, and only then is it retired from a `strict` aggregator, so a late report within
//! the grace is still classified as the model classifies it (a resend, or one beyond E).

use super::format::{Engine, EventKind};
use super::intern::{IdNum, Interner, WordHashBuild};
use crate::Front;
use kvcc_aggregator::{
    Direction, FrontError, HashedAggregator, Policy, Rank, Step, StepOutcome, ViolationKind,
    WorkerOutput,
};
use kvcc_model::properties::{
    ABORTED_LOADER_NEVER_FREED, COUNTDOWN_LEFT_OPEN, COUNTDOWN_REOPENED,
    DELAY_FREED_REQUEST_NEVER_FREED, DUPLICATE_REPORT, EMITTED_FOR_UNKNOWN_REQUEST, EMITTED_TWICE,
    FAILURE_LEFT_PENDING, LOADER_NEVER_WOKEN, LOAD_EMITTED_BEFORE_WORKERS_DONE,
    NONE_OUTPUT_AT_NON_OUTPUT_RANK, PREFILL_LOAD_NEVER_COMPLETES,
    RECV_EMITTED_BEFORE_DECODERS_DONE, REPORT_AFTER_EMISSION, REPORT_BEYOND_EXPECTED,
    SEND_EMITTED_BEFORE_TRANSFER_RANKS_DONE, SEND_WITHOUT_DELAYED_FREE, UNANNOUNCED_REPORT,
};
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// One contract breach, with its evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// As the model and specs name it (`eventually-freed`).
    pub property: &'static str,
    /// Which part of it (`delay-freed-request-never-freed`).
    pub clause: &'static str,
    /// The request id, as vLLM wrote it.
    pub request: String,
    pub direction: Option<Direction>,
    /// The engine step of the evidence; None for what is pending at the end.
    pub step: Option<Step>,
    /// The ranks at fault: the one that reported, or those that never did.
    pub ranks: Vec<Rank>,
    /// `FILE:LINE` of the evidence, the decisive line first.
    pub at: Vec<String>,
    pub message: String,
}

/// The properties conform monitors, in the model's order.
pub const PROPERTIES: [&str; 8] = [
    "quorum-sound",
    "exactly-once",
    "report-provenance",
    "count-conserved",
    "engine-survives",
    "eventually-freed",
    "eventually-woken",
    "aggregator-drains",
];

/// A clause only a recording can break, declared once as the model's clauses are
/// (`kvcc_model::properties`): the model's schedulers free a request once by
/// construction, so the model has no rule for it.
#[derive(Clone, Copy, Debug)]
pub struct RecordedClause {
    pub property: &'static str,
    pub clause: &'static str,
    /// What it means, for reviewers.
    pub meaning: &'static str,
}

/// A `freed` event for a request already freed, with no new lifetime between the two.
pub const FREED_TWICE: RecordedClause = RecordedClause {
    property: "exactly-once",
    clause: "freed-twice",
    meaning: "the scheduler freed a request's blocks a second time; vLLM's `_free_blocks` deletes the request from the scheduler's table, so the second free raises (engine crash)",
};

/// Where the scheduler has a request, from its events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No event yet: known only from reports.
    Unknown,
    /// `WAITING_FOR_REMOTE_KVS`.
    Waiting,
    /// Woken (or running without a load).
    Running,
    /// Its free delayed until `finished_sending`.
    DelayFreed,
    /// Woken with a failed load.
    Failed,
    Freed,
}

impl Phase {
    fn text(self) -> &'static str {
        match self {
            Phase::Unknown => "unknown to the scheduler",
            Phase::Waiting => "waiting for remote KV",
            Phase::Running => "running",
            Phase::DelayFreed => "delay-freed",
            Phase::Failed => "failed its load",
            Phase::Freed => "freed",
        }
    }
}

/// A line of a file of the run: a rank file, or the scheduler log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loc {
    /// A rank, or [`SCHEDULER`].
    file: u32,
    line: u64,
}

const SCHEDULER: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Report {
    rank: Rank,
    step: Step,
    line: u64,
}

/// One direction of one request.
#[derive(Clone, Debug, Default)]
struct Flow {
    /// Announced to a `strict` aggregator and not yet retired.
    announced: bool,
    /// Reports of steps that were aggregated, in order.
    reports: Vec<Report>,
    /// Reports of steps dropped because the output rank's output was missing.
    dropped: Vec<Report>,
    emitted: Option<Step>,
}

impl Flow {
    fn reporters(&self) -> BTreeSet<Rank> {
        self.reports.iter().map(|r| r.rank).collect()
    }
}

struct Tracked {
    name: Arc<str>,
    /// The step it was first mentioned at: end-of-run findings come out by it, then by
    /// name (ids are numbered in whatever order the reader threads met them).
    first_step: Step,
    phase: Phase,
    aborted: bool,
    /// A `delay-freed` event was seen: sends may be reported.
    delayed: bool,
    /// Its load is in flight (`waiting-for-remote-kvs`, and no wake-up, failure or free
    /// since): a receive may be reported. Apart from [`Phase::Waiting`], because a
    /// connector that saves while it loads delays an aborted loader's free for its save
    /// (`delay-freed` after `aborted`), and both completions are then due.
    loading: bool,
    /// The step whose completion freed it: vLLM's scheduler forgets it there, though the
    /// log's `freed` comes after the step, so a later completion in the same step finds
    /// it gone (as `_update_from_kv_xfer_finished` does, receives first).
    freed_at: Option<Step>,
    /// The event that put it in its phase.
    since: Option<(Step, Loc)>,
    flows: [Flow; 2],
}

fn index(direction: Direction) -> usize {
    match direction {
        Direction::Sending => 0,
        Direction::Recving => 1,
    }
}

const DIRECTIONS: [Direction; 2] = [Direction::Sending, Direction::Recving];

/// One report of the step being handled.
#[derive(Clone, Copy, Debug)]
struct StepReport {
    direction: Direction,
    id: IdNum,
    rank: Rank,
    line: u64,
    /// Already flagged `send-without-delayed-free` (so `unannounced-report` is not
    /// repeated for it).
    unprovenanced: bool,
}

/// The reports of one aggregated step, and the same looked up by request: a finding
/// about one request needs that request's reports, and a scan of the whole step for each
/// finding made a step of many reports (one long line) quadratic.
struct StepReports {
    /// As the ranks reported them: by rank, then direction, then id.
    in_order: Vec<StepReport>,
    /// By (direction, id, rank), sorted on first use; most steps never need it.
    by_request: std::cell::OnceCell<Vec<StepReport>>,
}

impl StepReports {
    fn new(in_order: Vec<StepReport>) -> StepReports {
        StepReports {
            in_order,
            by_request: std::cell::OnceCell::new(),
        }
    }

    /// The step's reports of `id` in `direction`, by rank (as reported: each rank's output
    /// comes after the lower ranks').
    fn of(&self, direction: Direction, id: IdNum) -> &[StepReport] {
        let key = |r: &StepReport| (index(r.direction), r.id);
        let sorted = self.by_request.get_or_init(|| {
            let mut sorted = self.in_order.clone();
            sorted.sort_unstable_by_key(|r| (key(r), r.rank));
            sorted
        });
        let wanted = (index(direction), id);
        let from = sorted.partition_point(|r| key(r) < wanted);
        let to = sorted.partition_point(|r| key(r) <= wanted);
        &sorted[from..to]
    }
}

/// What the monitors are told about the run.
#[derive(Clone, Debug)]
pub struct Setup {
    pub engine: Engine,
    pub policy: Policy,
    pub world_size: u32,
    pub transfer_ranks: Vec<Rank>,
    /// Display paths: one per rank, then the scheduler log.
    pub rank_files: Vec<String>,
    pub scheduler_file: String,
    pub grace_steps: Step,
    /// The scheduler frees a request with a load and a save in flight only once both
    /// have completed (header `aborted_transfers = "free-after-all"`).
    pub free_after_all: bool,
    /// Findings kept per (property, clause); the rest are counted.
    pub findings_per_clause_max: usize,
}

/// The monitors of one engine's run.
pub struct Monitor {
    setup: Setup,
    tracked: HashMap<IdNum, Tracked, WordHashBuild>,
    /// Steps at which to try forgetting these ids.
    due: BTreeMap<Step, Vec<IdNum>>,
    current: Vec<StepReport>,
    current_dropped: bool,
    /// Findings of the step being handled, not yet in their fixed order.
    unsorted: Vec<Finding>,
    pub findings: Vec<Finding>,
    /// Findings beyond the cap, per (property, clause).
    pub omitted: BTreeMap<(&'static str, &'static str), u64>,
    kept: HashMap<(&'static str, &'static str), usize>,
    /// The most requests tracked at once.
    pub tracked_max: usize,
    /// Every distinct request record created.
    pub requests_seen: u64,
}

impl Monitor {
    pub fn new(setup: Setup) -> Monitor {
        Monitor {
            setup,
            tracked: HashMap::default(),
            due: BTreeMap::new(),
            current: Vec::new(),
            current_dropped: false,
            unsorted: Vec::new(),
            findings: Vec::new(),
            omitted: BTreeMap::new(),
            kept: HashMap::new(),
            tracked_max: 0,
            requests_seen: 0,
        }
    }

    fn at(&self, loc: Loc) -> String {
        let file = if loc.file == SCHEDULER {
            &self.setup.scheduler_file
        } else {
            &self.setup.rank_files[loc.file as usize]
        };
        format!("{file}:{}", loc.line)
    }

    fn report_at(&self, report: &Report) -> String {
        self.at(Loc {
            file: u32::from(report.rank),
            line: report.line,
        })
    }

    /// Findings wait for the end of their step: ids are numbered in whatever order the
    /// reader threads met them, so a step's findings are put in a fixed order first.
    fn record(&mut self, finding: Finding) {
        self.unsorted.push(finding);
    }

    /// Keeps the waiting findings, within the cap, in order of request and property
    /// (`sort`) or as recorded.
    fn flush(&mut self, sort: bool) {
        let mut findings = std::mem::take(&mut self.unsorted);
        if sort {
            let rank = |p: &str| PROPERTIES.iter().position(|q| *q == p);
            findings.sort_by(|a, b| {
                (&a.request, rank(a.property), a.clause, &a.ranks, &a.at).cmp(&(
                    &b.request,
                    rank(b.property),
                    b.clause,
                    &b.ranks,
                    &b.at,
                ))
            });
        }
        for finding in findings {
            let key = (finding.property, finding.clause);
            let kept = self.kept.entry(key).or_insert(0);
            if *kept < self.setup.findings_per_clause_max {
                *kept += 1;
                self.findings.push(finding);
            } else {
                *self.omitted.entry(key).or_insert(0) += 1;
            }
        }
    }

    /// The record of `id`, created on first mention at `step`.
    fn track(&mut self, id: IdNum, step: Step, interner: &Interner) -> &mut Tracked {
        let tracked_before = self.tracked.len();
        let tracked = match self.tracked.entry(id) {
            Entry::Occupied(entry) => return entry.into_mut(),
            Entry::Vacant(entry) => entry.insert(Tracked {
                name: interner.name(id).unwrap_or_else(|| Arc::from("?")),
                first_step: step,
                phase: Phase::Unknown,
                aborted: false,
                delayed: false,
                loading: false,
                freed_at: None,
                since: None,
                flows: Default::default(),
            }),
        };
        self.requests_seen += 1;
        self.tracked_max = self.tracked_max.max(tracked_before + 1);
        // Known only from reports, it is forgotten after the grace unless the scheduler
        // takes it up meanwhile.
        self.due
            .entry(step + self.setup.grace_steps)
            .or_default()
            .push(id);
        tracked
    }

    /// A scheduler event, before step `step` is aggregated.
    pub fn on_event(
        &mut self,
        front: &Front,
        interner: &Interner,
        step: Step,
        event: EventKind,
        id: IdNum,
        line: u64,
    ) -> Result<(), FrontError> {
        let engine = self.setup.engine;
        let grace = self.setup.grace_steps;
        let strict = self.setup.policy == Policy::Strict;
        let t = self.track(id, step, interner);
        let loc = Loc {
            file: SCHEDULER,
            line,
        };
        let mut announce = None;
        let mut retire = Vec::new();
        let mut terminal = false;
        if event == EventKind::Freed && t.phase == Phase::Freed {
            let first = t.since;
            let name = t.name.to_string();
            self.freed_twice(step, line, name, first);
            return Ok(());
        }
        match event {
            EventKind::DelayFreed => {
                t.phase = Phase::DelayFreed;
                t.delayed = true;
                t.since = Some((step, loc));
                announce = Some(Direction::Sending);
            }
            EventKind::WaitingForRemoteKvs => {
                t.phase = Phase::Waiting;
                t.loading = true;
                t.since = Some((step, loc));
                announce = Some(Direction::Recving);
            }
            EventKind::Woken => {
                t.phase = Phase::Running;
                t.loading = false;
                t.since = Some((step, loc));
                terminal = engine == Engine::Decode;
            }
            EventKind::LoadFailed => {
                t.phase = Phase::Failed;
                t.loading = false;
                t.since = Some((step, loc));
                terminal = engine == Engine::Decode;
            }
            EventKind::Aborted => t.aborted = true,
            EventKind::Freed => {
                // Freed without its completion: the scheduler overrode the connector (an
                // abort), and the id is retired at once, as the model's scheduler does.
                if t.phase == Phase::DelayFreed && t.flows[0].emitted.is_none() {
                    retire.push(Direction::Sending);
                }
                if t.loading && t.flows[1].emitted.is_none() {
                    retire.push(Direction::Recving);
                }
                t.phase = Phase::Freed;
                t.loading = false;
                t.since = Some((step, loc));
                terminal = true;
            }
        }
        if let Some(direction) = announce {
            let flow = &mut t.flows[index(direction)];
            if strict && !flow.announced {
                flow.announced = true;
                front.announce(direction, id)?;
            }
        }
        for direction in retire {
            let flow = &mut t.flows[index(direction)];
            if flow.announced {
                flow.announced = false;
                front.retire(direction, &id)?;
            }
        }
        if terminal {
            self.due.entry(step + grace).or_default().push(id);
        }
        Ok(())
    }

    /// A `freed` event at `line`, before step `step`, for `name`, which the event
    /// `first` had already freed. The request stays as the first free left it.
    fn freed_twice(&mut self, step: Step, line: u64, name: String, first: Option<(Step, Loc)>) {
        let mut at = vec![self.at(Loc {
            file: SCHEDULER,
            line,
        })];
        let mut when = String::new();
        if let Some((first_step, loc)) = first {
            at.push(self.at(loc));
            when = format!(" (first before step {first_step})");
        }
        self.record(Finding {
            property: FREED_TWICE.property,
            clause: FREED_TWICE.clause,
            request: name.clone(),
            direction: None,
            step: Some(step),
            ranks: Vec::new(),
            at,
            message: format!(
                "the scheduler freed {name} again before step {step}{when}; vLLM's scheduler no longer holds it after the first free, so the second raises (engine crash)"
            ),
        });
    }

    /// Before step `step` is aggregated, with the aggregator as it is after the previous
    /// step. `outputs[rank]` is (line, output or None when missing).
    pub fn before_step(
        &mut self,
        front: &Front,
        interner: &Interner,
        step: Step,
        output_rank: Rank,
        outputs: &[(u64, Option<&WorkerOutput<IdNum>>)],
    ) -> Result<(), FrontError> {
        self.current.clear();
        self.current_dropped = outputs
            .get(usize::from(output_rank))
            .is_none_or(|(_, o)| o.is_none());
        // Only the output rank's output may be missing (the step is then dropped); vLLM's
        // aggregator reads every other worker's connector output and raises on a None,
        // which ends the engine (vllm/distributed/kv_transfer/kv_connector/utils.py).
        for (rank, (line, output)) in outputs.iter().enumerate() {
            if output.is_none() && rank != usize::from(output_rank) {
                let at = self.at(Loc {
                    file: rank as u32,
                    line: *line,
                });
                self.record(Finding {
                    property: NONE_OUTPUT_AT_NON_OUTPUT_RANK.property,
                    clause: NONE_OUTPUT_AT_NON_OUTPUT_RANK.clause,
                    request: String::new(),
                    direction: None,
                    step: Some(step),
                    ranks: vec![rank as Rank],
                    at: vec![at],
                    message: format!(
                        "rank {rank} handed the aggregator no output at step {step}; only the output rank ({output_rank}) may miss one, and vLLM's aggregator raises on it, ending the engine"
                    ),
                });
            }
        }
        for (rank, (line, output)) in outputs.iter().enumerate() {
            let Some(output) = output else { continue };
            for direction in DIRECTIONS {
                for &id in output.finished(direction) {
                    self.current.push(StepReport {
                        direction,
                        id,
                        rank: rank as Rank,
                        line: *line,
                        unprovenanced: false,
                    });
                }
            }
        }
        for i in 0..self.current.len() {
            let report = self.current[i];
            let t = self.track(report.id, step, interner);
            // The model flags this for every worker's output, dropped or not: the worker
            // broke the contract whether or not its report was counted.
            if report.direction == Direction::Sending && !t.delayed {
                let name = t.name.to_string();
                let phase = t.phase;
                self.current[i].unprovenanced = true;
                let at = self.at(Loc {
                    file: u32::from(report.rank),
                    line: report.line,
                });
                self.record(Finding {
                    property: "report-provenance",
                    clause: SEND_WITHOUT_DELAYED_FREE.clause,
                    request: name.clone(),
                    direction: Some(Direction::Sending),
                    step: Some(step),
                    ranks: vec![report.rank],
                    at: vec![at],
                    message: format!(
                        "rank {} reported finished_sending for {name} at step {step}, but the scheduler never delayed its free (it is {})",
                        report.rank,
                        phase.text()
                    ),
                });
            }
        }
        if self.current_dropped || self.setup.policy != Policy::Countdown {
            return Ok(());
        }
        self.countdown_duplicates(step);
        self.countdown_overflows(front, step, outputs)
    }

    /// `countdown` counts a rank's second report like any other; say so, in `strict`'s
    /// words for the same report.
    fn countdown_duplicates(&mut self, step: Step) {
        for i in 0..self.current.len() {
            let report = self.current[i];
            let t = &self.tracked[&report.id];
            let flow = &t.flows[index(report.direction)];
            let Some(first) = flow.reports.iter().find(|r| r.rank == report.rank).copied() else {
                continue;
            };
            let name = t.name.to_string();
            // Named as `strict` names its refusal of the same report.
            let (clause, when) = match flow.emitted {
                Some(emitted) => (
                    REPORT_AFTER_EMISSION.clause,
                    format!(", after it was emitted at step {emitted}"),
                ),
                None => (DUPLICATE_REPORT.clause, String::new()),
            };
            let at = vec![
                self.at(Loc {
                    file: u32::from(report.rank),
                    line: report.line,
                }),
                self.report_at(&first),
            ];
            self.record(Finding {
                property: "exactly-once",
                clause,
                request: name.clone(),
                direction: Some(report.direction),
                step: Some(step),
                ranks: vec![report.rank],
                at,
                message: format!(
                    "rank {} reported {name} in {} a second time at step {step} (first at step {}){when}; the countdown counted it again",
                    report.rank, report.direction, first.step
                ),
            });
        }
    }

    /// More reports this step than a countdown has room for: one of them opens a fresh
    /// countdown for an id already emitted (the model's `countdown-reopened`).
    fn countdown_overflows(
        &mut self,
        front: &Front,
        step: Step,
        outputs: &[(u64, Option<&WorkerOutput<IdNum>>)],
    ) -> Result<(), FrontError> {
        let announced = outputs
            .iter()
            .filter_map(|(_, o)| o.map(|o| o.expected_finished_count));
        // The step's reports grouped by (direction, id), in report order within a group:
        // sorted rather than gathered in a map of lists, one allocation instead of one
        // per id.
        let mut grouped: Vec<(usize, IdNum, usize)> = self
            .current
            .iter()
            .enumerate()
            .map(|(i, r)| (index(r.direction), r.id, i))
            .collect();
        grouped.sort_unstable();
        let mut keys: Vec<(usize, IdNum)> = grouped.iter().map(|&(d, id, _)| (d, id)).collect();
        keys.dedup();
        let (expected, remaining) = front.with_core(|core: &HashedAggregator<IdNum>| {
            let remaining: Vec<Option<u32>> = keys
                .iter()
                .map(|&(d, id)| core.remaining(DIRECTIONS[d], &id))
                .collect();
            (
                kvcc_aggregator::step_expected(announced, core.expected()),
                remaining,
            )
        })?;
        let mut groups = grouped.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1));
        for ((d, id), remaining) in keys.into_iter().zip(remaining) {
            let reports = groups.next().expect("one group per key");
            let t = &self.tracked[&id];
            let room =
                kvcc_aggregator::countdown_room(remaining, t.flows[d].emitted.is_some(), expected);
            if reports.len() as u32 <= room {
                continue;
            }
            let beyond: Vec<StepReport> = reports[room as usize..]
                .iter()
                .map(|&(_, _, i)| self.current[i])
                .collect();
            let name = t.name.to_string();
            let emitted = t.flows[d].emitted;
            let at = beyond
                .iter()
                .map(|r| {
                    self.at(Loc {
                        file: u32::from(r.rank),
                        line: r.line,
                    })
                })
                .collect();
            let why = match emitted {
                Some(at) if remaining.is_none() => {
                    format!("it was already emitted, first at step {at}, so")
                }
                _ => format!("its countdown had room for {room}, so"),
            };
            self.record(Finding {
                property: "count-conserved",
                clause: COUNTDOWN_REOPENED.clause,
                request: name.clone(),
                direction: Some(DIRECTIONS[d]),
                step: Some(step),
                ranks: beyond.iter().map(|r| r.rank).collect(),
                at,
                message: format!(
                    "{} of {name} in {} at step {step}: {why} rank {} opened a fresh countdown",
                    plural(reports.len(), "report"),
                    DIRECTIONS[d],
                    beyond[0].rank
                ),
            });
        }
        Ok(())
    }

    /// After step `step` was aggregated into `outcome`.
    pub fn after_step(&mut self, step: Step, outcome: &StepOutcome<IdNum>) {
        let reports = std::mem::take(&mut self.current);
        if outcome.dropped {
            for r in &reports {
                let t = self
                    .tracked
                    .get_mut(&r.id)
                    .expect("tracked before the step");
                t.flows[index(r.direction)].dropped.push(Report {
                    rank: r.rank,
                    step,
                    line: r.line,
                });
            }
            self.flush(true);
            return;
        }
        let reports = StepReports::new(reports);
        for violation in &outcome.violations {
            self.strict_violation(
                step,
                &reports,
                violation.kind,
                violation.direction,
                violation.id,
                violation.rank,
            );
        }
        for r in &reports.in_order {
            let t = self
                .tracked
                .get_mut(&r.id)
                .expect("tracked before the step");
            t.flows[index(r.direction)].reports.push(Report {
                rank: r.rank,
                step,
                line: r.line,
            });
        }
        // Receives first, as vLLM's scheduler handles them.
        for direction in [Direction::Recving, Direction::Sending] {
            for &id in outcome.finished(direction) {
                self.emission(step, &reports, direction, id);
            }
        }
        self.flush(true);
    }

    fn strict_violation(
        &mut self,
        step: Step,
        reports: &StepReports,
        kind: ViolationKind,
        direction: Direction,
        id: IdNum,
        rank: Rank,
    ) {
        let Some(report) = reports
            .of(direction, id)
            .iter()
            .find(|r| r.rank == rank)
            .copied()
        else {
            return;
        };
        let t = &self.tracked[&id];
        let flow = &t.flows[index(direction)];
        let name = t.name.to_string();
        let earlier = flow.reports.iter().find(|r| r.rank == rank).copied();
        let mut at = vec![self.at(Loc {
            file: u32::from(rank),
            line: report.line,
        })];
        if let Some(first) = &earlier {
            at.push(self.report_at(first));
        }
        let first = earlier.map_or(String::new(), |r| format!(" (first at step {})", r.step));
        let (property, clause, message) = match kind {
            // A rank reporting one id twice breaks "exactly once" for that worker; the
            // model files the refusal under count-conserved, where it cannot happen.
            ViolationKind::DuplicateReport => (
                "exactly-once",
                DUPLICATE_REPORT.clause,
                format!("rank {rank} reported {name} in {direction} a second time at step {step}{first}; the strict aggregator refused it"),
            ),
            ViolationKind::ReportAfterEmission => (
                "exactly-once",
                REPORT_AFTER_EMISSION.clause,
                format!(
                    "rank {rank} reported {name} in {direction} again at step {step}{first}, after it was emitted at step {}; the strict aggregator refused it",
                    flow.emitted.map_or("?".into(), |s| s.to_string())
                ),
            ),
            ViolationKind::ReportBeyondExpected => (
                "count-conserved",
                REPORT_BEYOND_EXPECTED.clause,
                format!(
                    "rank {rank} reported {name} in {direction} at step {step}, after its quorum of E was complete (emitted at step {}): one reporter more than E",
                    flow.emitted.map_or("?".into(), |s| s.to_string())
                ),
            ),
            ViolationKind::Unannounced => {
                if report.unprovenanced {
                    return;
                }
                (
                    "report-provenance",
                    UNANNOUNCED_REPORT.clause,
                    format!(
                        "rank {rank} reported {name} in {direction} at step {step}, which the scheduler never announced or has forgotten (it is {})",
                        t.phase.text()
                    ),
                )
            }
        };
        self.record(Finding {
            property,
            clause,
            request: name,
            direction: Some(direction),
            step: Some(step),
            ranks: vec![rank],
            at,
            message,
        });
    }

    fn emission(&mut self, step: Step, reports: &StepReports, direction: Direction, id: IdNum) {
        let engine = self.setup.engine;
        let world = self.setup.world_size;
        let grace = self.setup.grace_steps;
        let Some(t) = self.tracked.get_mut(&id) else {
            return;
        };
        let name = Arc::clone(&t.name);
        let phase = t.phase;
        let since = t.since;
        // What `_update_from_kv_xfer_finished` does with the completion: a send frees a
        // delay-freed request; a receive wakes a request waiting for its load, and frees
        // a finished one (aborted while loading, or delay-freed) instead. Anything else,
        // or a request a completion already freed, fails its assertion.
        let freed_by = t.freed_at;
        let known = freed_by.is_none()
            && match direction {
                Direction::Sending => phase == Phase::DelayFreed,
                Direction::Recving => t.loading || phase == Phase::DelayFreed,
            };
        let finished = phase == Phase::DelayFreed || t.aborted;
        // A load and a save in flight (aborted while loading, its connector saving): a
        // scheduler that frees after all waits for the other completion.
        let other = match direction {
            Direction::Sending => Direction::Recving,
            Direction::Recving => Direction::Sending,
        };
        let waits = self.setup.free_after_all
            && t.aborted
            && t.loading
            && t.delayed
            && t.flows[index(other)].emitted.is_none();
        if known && finished && !waits {
            t.freed_at = Some(step);
        }
        let flow = &mut t.flows[index(direction)];
        // The first emission is the one later reports and emissions are measured against.
        let previous = flow.emitted;
        flow.emitted.get_or_insert(step);
        let reported = |rank: &Rank| flow.reports.iter().any(|r| r.rank == *rank);
        let missing: Vec<Rank> = match direction {
            Direction::Sending => self
                .setup
                .transfer_ranks
                .iter()
                .copied()
                .filter(|r| !reported(r))
                .collect(),
            Direction::Recving => (0..world)
                .map(|r| r as Rank)
                .filter(|r| !reported(r))
                .collect(),
        };
        // Only a finding names the reporters, so they are gathered only for one.
        let reporters = if missing.is_empty() {
            BTreeSet::new()
        } else {
            flow.reporters()
        };
        let unknown = !known;
        if phase == Phase::Unknown {
            self.due.entry(step + grace).or_default().push(id);
        }
        if previous.is_none() && !unknown && missing.is_empty() {
            // The common case, a sound emission: nothing to say, so nothing to format.
            return;
        }
        let this_step: Vec<&StepReport> = reports.of(direction, id).iter().collect();
        let at: Vec<String> = this_step
            .iter()
            .rev()
            .map(|r| {
                self.at(Loc {
                    file: u32::from(r.rank),
                    line: r.line,
                })
            })
            .collect();
        let completing: Vec<Rank> = this_step.iter().map(|r| r.rank).collect();
        let name = name.to_string();
        let scheduler = match engine {
            Engine::Prefill => "P's scheduler",
            Engine::Decode => "D's scheduler",
        };
        if let Some(first) = previous {
            self.record(Finding {
                property: "exactly-once",
                clause: EMITTED_TWICE.clause,
                request: name.clone(),
                direction: Some(direction),
                step: Some(step),
                ranks: completing.clone(),
                at: at.clone(),
                message: format!(
                    "the aggregator emitted {name} in {direction} again at step {step} (first at step {first})"
                ),
            });
        } else if unknown {
            let mut at = at.clone();
            let held = match (freed_by, since) {
                (Some(s), _) => format!("freed by its other completion at step {s}"),
                (None, Some((s, loc))) => {
                    at.push(self.at(loc));
                    format!("{} since before step {s}", phase.text())
                }
                (None, None) => phase.text().to_string(),
            };
            self.record(Finding {
                property: "exactly-once",
                clause: EMITTED_FOR_UNKNOWN_REQUEST.clause,
                request: name.clone(),
                direction: Some(direction),
                step: Some(step),
                ranks: completing.clone(),
                at,
                message: format!(
                    "the aggregator emitted {name} in {direction} at step {step}, but {scheduler} does not hold it for that: it is {held} (vLLM asserts: engine crash)"
                ),
            });
        }
        if !missing.is_empty() {
            let clause = match (engine, direction) {
                (_, Direction::Sending) => SEND_EMITTED_BEFORE_TRANSFER_RANKS_DONE.clause,
                (Engine::Prefill, Direction::Recving) => LOAD_EMITTED_BEFORE_WORKERS_DONE.clause,
                (Engine::Decode, Direction::Recving) => RECV_EMITTED_BEFORE_DECODERS_DONE.clause,
            };
            let owners = match direction {
                Direction::Sending => "transfer ",
                Direction::Recving => "",
            };
            self.record(Finding {
                property: "quorum-sound",
                clause,
                request: name.clone(),
                direction: Some(direction),
                step: Some(step),
                ranks: missing.clone(),
                at,
                message: format!(
                    "the aggregator emitted {name} in {direction} at step {step} before {owners}{} reported it (reported by {})",
                    ranks_phrase(&missing),
                    ranks_phrase(&reporters.into_iter().collect::<Vec<_>>())
                ),
            });
        }
    }

    /// Forgets requests whose lifetime ended `grace` steps ago and that the aggregator
    /// holds nothing for. Called after step `handled` was handled.
    pub fn collect(
        &mut self,
        front: &Front,
        interner: &Interner,
        handled: Step,
    ) -> Result<(), FrontError> {
        // Popped from the front: splitting the map would walk the ~grace steps after it.
        let mut due = Vec::new();
        while let Some(entry) = self.due.first_entry() {
            if *entry.key() > handled {
                break;
            }
            due.extend(entry.remove());
        }
        let grace = self.setup.grace_steps.max(1);
        let mut over = Vec::with_capacity(due.len());
        for id in due {
            let Some(t) = self.tracked.get_mut(&id) else {
                continue;
            };
            if !lifetime_over(self.setup.engine, t.phase) {
                // Alive again (or still): rescheduled when its lifetime ends.
                continue;
            }
            for direction in DIRECTIONS {
                let flow = &mut t.flows[index(direction)];
                if flow.announced {
                    flow.announced = false;
                    front.retire(direction, &id)?;
                }
            }
            over.push(id);
        }
        if over.is_empty() {
            return Ok(());
        }
        // One hold of the core for the step's ids (retiring does not change what it holds).
        let holds: Vec<bool> = front.with_core(|core| {
            over.iter()
                .map(|id| {
                    DIRECTIONS.iter().any(|&d| core.remaining(d, id).is_some())
                        || core.pending_failed().contains(id)
                })
                .collect()
        })?;
        for (id, holds) in over.into_iter().zip(holds) {
            if holds || !interner.forget(id, handled) {
                self.due.entry(handled + grace).or_default().push(id);
                continue;
            }
            self.tracked.remove(&id);
        }
        Ok(())
    }

    /// What is still pending once the run is over.
    pub fn finish(&mut self, front: &Front, steps: Step) -> Result<(), FrontError> {
        let world = self.setup.world_size;
        let all: Vec<Rank> = (0..world).map(|r| r as Rank).collect();
        let mut order: Vec<(Step, &str, IdNum)> = self
            .tracked
            .iter()
            .map(|(&id, t)| (t.first_step, &*t.name, id))
            .collect();
        order.sort_unstable();
        let order: Vec<IdNum> = order.into_iter().map(|(_, _, id)| id).collect();
        let (open, failed): (Vec<HashSet<(usize, IdNum)>>, BTreeSet<IdNum>) =
            front.with_core(|core| {
                let open = DIRECTIONS
                    .iter()
                    .map(|&d| core.open_ids(d).map(|&id| (index(d), id)).collect())
                    .collect();
                (open, core.pending_failed().clone())
            })?;
        let end = if steps == 0 {
            "still pending in a run without engine steps".to_string()
        } else {
            format!("still pending at end (after step {})", steps - 1)
        };
        let mut findings = Vec::new();
        for &id in &order {
            let t = &self.tracked[&id];
            let name = &t.name;
            let since = t
                .since
                .map_or(String::new(), |(s, _)| format!(" since before step {s}"));
            let liveness = match (t.phase, self.setup.engine, t.aborted) {
                (Phase::DelayFreed, _, _) => Some((
                    "eventually-freed",
                    DELAY_FREED_REQUEST_NEVER_FREED.clause,
                    Direction::Sending,
                    format!("{name} has been delay-freed{since} and was never freed"),
                )),
                (Phase::Waiting, Engine::Prefill, _) => Some((
                    "eventually-woken",
                    PREFILL_LOAD_NEVER_COMPLETES.clause,
                    Direction::Recving,
                    format!("{name} has waited for its own KV load{since}"),
                )),
                (Phase::Waiting, Engine::Decode, false) => Some((
                    "eventually-woken",
                    LOADER_NEVER_WOKEN.clause,
                    Direction::Recving,
                    format!("{name} has waited for remote KV{since} and was never woken"),
                )),
                (Phase::Waiting, Engine::Decode, true) => Some((
                    "eventually-woken",
                    ABORTED_LOADER_NEVER_FREED.clause,
                    Direction::Recving,
                    format!(
                        "{name} was aborted while waiting for remote KV{since} and was never freed"
                    ),
                )),
                _ => None,
            };
            if let Some((property, clause, direction, what)) = liveness {
                findings.push(self.pending(t, &all, property, clause, direction, &end, &what));
            }
            for direction in DIRECTIONS {
                if open[index(direction)].contains(&(index(direction), id)) {
                    let what =
                        format!("the aggregator's {direction} countdown for {name} never closed");
                    findings.push(self.pending(
                        t,
                        &all,
                        "aggregator-drains",
                        COUNTDOWN_LEFT_OPEN.clause,
                        direction,
                        &end,
                        &what,
                    ));
                }
            }
            if failed.contains(&id) {
                let what = format!(
                    "the aggregator still holds {name}'s failed load: its receive quorum never completed"
                );
                findings.push(self.pending(
                    t,
                    &all,
                    "aggregator-drains",
                    FAILURE_LEFT_PENDING.clause,
                    Direction::Recving,
                    &end,
                    &what,
                ));
            }
        }
        // Already in a fixed order: by when each request was first seen, then by name.
        self.unsorted.extend(findings);
        self.flush(false);
        Ok(())
    }

    /// A "still pending at end" finding: the request, and the ranks that never reported.
    #[allow(clippy::too_many_arguments)]
    fn pending(
        &self,
        t: &Tracked,
        all: &[Rank],
        property: &'static str,
        clause: &'static str,
        direction: Direction,
        end: &str,
        what: &str,
    ) -> Finding {
        let flow = &t.flows[index(direction)];
        let reporters = flow.reporters();
        let never: Vec<Rank> = all
            .iter()
            .copied()
            .filter(|r| !reporters.contains(r))
            .collect();
        let mut at = Vec::new();
        if let Some((_, loc)) = t.since {
            at.push(self.at(loc));
        }
        at.extend(flow.reports.iter().map(|r| self.report_at(r)));
        let mut message = format!(
            "{end}: {what}; ranks that never reported it in {direction}: {}",
            ranks_text(&never)
        );
        if !reporters.is_empty() {
            message += &format!(
                "; reported by {}",
                ranks_phrase(&reporters.iter().copied().collect::<Vec<_>>())
            );
        }
        if !flow.dropped.is_empty() {
            at.extend(flow.dropped.iter().map(|r| self.report_at(r)));
            let dropped: Vec<String> = flow
                .dropped
                .iter()
                .map(|r| format!("rank {} at step {}", r.rank, r.step))
                .collect();
            message += &format!(
                "; dropped with their step (output rank's output missing): {}",
                dropped.join(", ")
            );
        }
        Finding {
            property,
            clause,
            request: t.name.to_string(),
            direction: Some(direction),
            step: None,
            ranks: never,
            at,
            message,
        }
    }

    /// Requests tracked now.
    pub fn tracked(&self) -> usize {
        self.tracked.len()
    }
}

/// Has the scheduler let go of a request in `phase` (or never held it)? D lets go of a
/// request once it is woken; P holds a request it woke (its own load) until it frees it.
fn lifetime_over(engine: Engine, phase: Phase) -> bool {
    match phase {
        Phase::Unknown | Phase::Freed => true,
        Phase::Running | Phase::Failed => engine == Engine::Decode,
        Phase::Waiting | Phase::DelayFreed => false,
    }
}

/// `1, 2 and 3`, or `none`.
pub fn ranks_text(ranks: &[Rank]) -> String {
    match ranks {
        [] => "none".into(),
        [one] => one.to_string(),
        [init @ .., last] => format!(
            "{} and {last}",
            init.iter()
                .map(Rank::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `1 report`, `2 reports`.
fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `rank 3`, `ranks 1, 2 and 3`, or `no rank`.
pub fn ranks_phrase(ranks: &[Rank]) -> String {
    match ranks {
        [] => "no rank".into(),
        [one] => format!("rank {one}"),
        _ => format!("ranks {}", ranks_text(ranks)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steps_reports_of_one_request_come_by_rank() {
        let report = |rank: Rank, direction, id| StepReport {
            direction,
            id,
            rank,
            line: u64::from(rank) + 1,
            unprovenanced: false,
        };
        let reports = StepReports::new(vec![
            report(0, Direction::Sending, 7),
            report(0, Direction::Recving, 7),
            report(1, Direction::Sending, 3),
            report(1, Direction::Sending, 7),
            report(2, Direction::Sending, 7),
        ]);
        let ranks = |d, id| -> Vec<Rank> { reports.of(d, id).iter().map(|r| r.rank).collect() };
        assert_eq!(ranks(Direction::Sending, 7), vec![0, 1, 2]);
        assert_eq!(ranks(Direction::Recving, 7), vec![0]);
        assert_eq!(ranks(Direction::Sending, 3), vec![1]);
        assert!(ranks(Direction::Recving, 3).is_empty());
    }

    #[test]
    fn rank_lists_read_as_prose() {
        assert_eq!(ranks_text(&[]), "none");
        assert_eq!(ranks_text(&[3]), "3");
        assert_eq!(ranks_text(&[1, 2, 3]), "1, 2 and 3");
        assert_eq!(ranks_phrase(&[1, 2]), "ranks 1 and 2");
        assert_eq!(ranks_phrase(&[0]), "rank 0");
    }
}
