//! The `diagnosis` that ends every trace: what the violation is made of, read from the
//! counterexample's states (not from its printed facts), with the step at which each
//! part began.
//!
//! - A liveness violation: each obligation still open where the run ends — a request P
//!   holds or D keeps waiting, an aggregator entry never removed — and the countdown it
//!   waits for: how many of its E reports arrived, each rank's part (who reported and
//!   when, whose report the connector cleared or a dropped step lost, who never reports
//!   and why, who still waits and for what), and why no continuation delivers the rest.
//!   Then the point of no return, when the checker found it, and what may still happen.
//! - A safety violation: the two things that conflict — what the last step did, and the
//!   state it met (a read still in flight, a rank not done, an earlier report or
//!   emission) — with the step at which each began.

use super::Step;
use kvcc_aggregator::{Direction, Rank};
use kvcc_model::checker::{Counterexample, Kind};
use kvcc_model::narrate::{self, Fate, Made, Report};
use kvcc_model::properties as clauses;
use kvcc_model::state::{
    DecodeCell, DecodePhase, HandlePhase, LoadPhase, Metadata, PrefillPhase, Request, RequestId,
    SendPhase, State, StorePhase,
};
use kvcc_model::{describe, rank, scheduler, Action, ContractModel};
use stateright::Model;

/// The diagnosis lines of `counterexample`; a line indented by two spaces belongs to the
/// line above it.
pub fn diagnose(
    model: &ContractModel,
    counterexample: &Counterexample<ContractModel>,
    steps: &[Step],
) -> Vec<String> {
    let path = Path::new(model, counterexample, steps);
    let clause = &clauses::CLAUSES[counterexample.clause];
    match counterexample.kind {
        Kind::Liveness => liveness(&path, clause.clause),
        Kind::Safety => safety(&path, clause.clause),
    }
}

/// A counterexample's states, step by step, with what each step reported.
struct Path<'a> {
    model: &'a ContractModel,
    /// `states[0]` is the initial state, `states[i]` the state after step `i`.
    states: Vec<&'a State>,
    actions: Vec<Action>,
    /// Step lines, for naming a step.
    steps: &'a [Step],
    /// Every report made, with its step (1-based).
    reports: Vec<(usize, Made)>,
    point_of_no_return: Option<usize>,
}

impl<'a> Path<'a> {
    fn new(
        model: &'a ContractModel,
        counterexample: &'a Counterexample<ContractModel>,
        steps: &'a [Step],
    ) -> Path<'a> {
        let states: Vec<&State> = std::iter::once(&counterexample.initial)
            .chain(counterexample.steps.iter().map(|(_, s)| s))
            .collect();
        let actions: Vec<Action> = counterexample.steps.iter().map(|(a, _)| *a).collect();
        let reports = actions
            .iter()
            .enumerate()
            .flat_map(|(i, a)| {
                narrate::reports(a, states[i], states[i + 1])
                    .into_iter()
                    .map(move |m| (i + 1, m))
            })
            .collect();
        Path {
            model,
            states,
            actions,
            steps,
            reports,
            point_of_no_return: counterexample.point_of_no_return,
        }
    }

    fn last(&self) -> &State {
        self.states[self.states.len() - 1]
    }

    /// The step since which `view` of the state has its final value (0: from the start).
    fn since<T: PartialEq>(&self, view: impl Fn(&State) -> T) -> usize {
        let last = view(self.last());
        (1..self.states.len())
            .rev()
            .find(|&i| view(self.states[i - 1]) != last)
            .unwrap_or(0)
    }

    /// `at step N` or `from the start`.
    fn when<T: PartialEq>(&self, view: impl Fn(&State) -> T) -> String {
        match self.since(view) {
            0 => "from the start".into(),
            n => format!("since step {n}"),
        }
    }

    /// The report `rank` made of `request`, of this kind, if it made one.
    fn report_of(&self, rank: Rank, request: RequestId, kind: Countdown) -> Option<(usize, Made)> {
        self.counted(request, kind).find(|(_, m)| m.rank == rank)
    }

    fn reached(&self, request: RequestId, kind: Countdown) -> usize {
        self.counted(request, kind)
            .filter(|(_, m)| m.fate == Fate::Reached)
            .count()
    }

    /// The reports of `request` of this kind that its open countdown counts: on D, after a
    /// preemption, none of its first load's (they woke it once already).
    fn counted(
        &self,
        request: RequestId,
        kind: Countdown,
    ) -> impl Iterator<Item = (usize, Made)> + '_ {
        let preempted = |s: &State| s.requests[usize::from(request)].decode_preempted;
        let from = if kind == Countdown::Receives && preempted(self.last()) {
            self.since(preempted)
        } else {
            0
        };
        self.reports
            .iter()
            .copied()
            .filter(move |&(step, m)| step > from && m.request == request && kind.matches(m.report))
    }
}

/// Which countdown: an engine's aggregator and the kind of report it counts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Countdown {
    /// P's `finished_sending`.
    Sends,
    /// P's `finished_recving`: its own KV loads.
    Loads,
    /// D's `finished_recving`.
    Receives,
}

impl Countdown {
    fn matches(self, report: Report) -> bool {
        matches!(
            (self, report),
            (Countdown::Sends, Report::Sent)
                | (Countdown::Loads, Report::Loaded)
                | (Countdown::Receives, Report::Received { .. })
        )
    }

    fn engine(self) -> &'static str {
        match self {
            Countdown::Sends | Countdown::Loads => "P",
            Countdown::Receives => "D",
        }
    }

    fn direction(self) -> Direction {
        match self {
            Countdown::Sends => Direction::Sending,
            Countdown::Loads | Countdown::Receives => Direction::Recving,
        }
    }

    fn ranks(self, state: &State) -> Rank {
        match self {
            Countdown::Sends | Countdown::Loads => state.topology().prefill_world,
            Countdown::Receives => state.topology().decode_world,
        }
    }

    fn aggregator(self, state: &State) -> &kvcc_aggregator::SortedAggregator<RequestId> {
        match self {
            Countdown::Sends | Countdown::Loads => &state.prefill_aggregator,
            Countdown::Receives => &state.decode_aggregator,
        }
    }
}

/// An obligation open where the run ends: the countdown that would close it, and what
/// holds it open.
struct Open {
    kind: Countdown,
    request: RequestId,
    what: String,
    /// The obligation in a few words, for the diagram's closing note: `P req0: blocks held`.
    short: String,
    /// What never happens while it stays open: `P never frees req0's blocks`.
    consequence: String,
}

fn open_obligations(path: &Path, clause: &str) -> Vec<Open> {
    let end = path.last();
    let requests = 0..end.request_count() as RequestId;
    let phase_line = |r: RequestId, prefill: bool| {
        let i = usize::from(r);
        if prefill {
            let since = path.when(|s| s.requests[i].prefill);
            let phase = describe::prefill_phase(end.requests[i].prefill);
            format!("P req{r}: {phase} ({since})")
        } else {
            let since = path.when(|s| s.requests[i].decode);
            let q = &end.requests[i];
            let phase = describe::decode_phase(q);
            format!("D req{r}: {phase} ({since})")
        }
    };
    let mut open = Vec::new();
    let held = |phase: PrefillPhase| {
        requests
            .clone()
            .filter(move |&r| end.requests[usize::from(r)].prefill == phase)
    };
    let waiting = |phase: DecodePhase| {
        requests
            .clone()
            .filter(move |&r| end.requests[usize::from(r)].decode == phase)
    };
    if clause == clauses::DELAY_FREED_REQUEST_NEVER_FREED.clause {
        for r in held(PrefillPhase::DelayFreed) {
            open.push(Open {
                kind: Countdown::Sends,
                request: r,
                what: format!(
                    "{}, until finished_sending req{r} frees it",
                    phase_line(r, true)
                ),
                short: format!("P req{r}: blocks held"),
                consequence: format!(
                    "finished_sending req{r} is never emitted and P never frees req{r}'s blocks"
                ),
            });
        }
    } else if clause == clauses::PREFILL_LOAD_NEVER_COMPLETES.clause {
        let waiting = held(PrefillPhase::LoadingKv).map(|r| (r, "starts", "loading its KV"));
        let aborted =
            held(PrefillPhase::AbortedLoadingKv).map(|r| (r, "frees", "aborted, blocks held"));
        for (r, then, short) in waiting.chain(aborted) {
            open.push(Open {
                kind: Countdown::Loads,
                request: r,
                what: format!(
                    "{}, until P's finished_recving req{r} {then} it",
                    phase_line(r, true)
                ),
                short: format!("P req{r}: {short}"),
                consequence: format!(
                    "P's finished_recving req{r} is never emitted and P never {then} req{r}"
                ),
            });
        }
    } else if clause == clauses::LOADER_NEVER_WOKEN.clause
        || clause == clauses::ABORTED_LOADER_NEVER_FREED.clause
    {
        let (phase, short, never) = if clause == clauses::LOADER_NEVER_WOKEN.clause {
            (DecodePhase::Loading, "waits for remote KV", "wakes")
        } else {
            (DecodePhase::AbortedLoading, "aborted, blocks held", "frees")
        };
        for r in waiting(phase) {
            open.push(Open {
                kind: Countdown::Receives,
                request: r,
                what: format!("{}, until finished_recving req{r}", phase_line(r, false)),
                short: format!("D req{r}: {short}"),
                consequence: format!(
                    "finished_recving req{r} is never emitted and D never {never} req{r}"
                ),
            });
        }
    } else if clause == clauses::COUNTDOWN_LEFT_OPEN.clause {
        for kind in [Countdown::Sends, Countdown::Loads, Countdown::Receives] {
            let aggregator = kind.aggregator(end);
            for &r in aggregator.open_ids(kind.direction()) {
                let since = path.when(|s| kind.aggregator(s).remaining(kind.direction(), &r));
                let (engine, direction) = (kind.engine(), kind.direction());
                open.push(Open {
                    kind,
                    request: r,
                    what: format!(
                        "{engine} aggregator {direction} req{r}: open ({since}), never removed"
                    ),
                    short: format!("{engine} aggregator {direction} req{r}: open"),
                    consequence: format!("the entry stays in {engine}'s aggregator for good"),
                });
            }
        }
    } else if clause == clauses::FAILURE_LEFT_PENDING.clause {
        for kind in [Countdown::Loads, Countdown::Receives] {
            for &r in kind.aggregator(end).pending_failed() {
                let since = path.when(|s| kind.aggregator(s).pending_failed().contains(&r));
                let engine = kind.engine();
                open.push(Open {
                    kind,
                    request: r,
                    what: format!(
                        "{engine} aggregator failed_recving req{r}: held back ({since}) until its finished_recving completes"
                    ),
                    short: format!("{engine} aggregator failed_recving req{r}: held back"),
                    consequence: format!(
                        "the failure stays held back in {engine}'s aggregator for good"
                    ),
                });
            }
        }
    }
    open
}

fn liveness(path: &Path, clause: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let open = open_obligations(path, clause);
    if clause == clauses::REQUEST_NEVER_SCHEDULED.clause {
        lines.extend(unscheduled(path));
    } else if open.is_empty() {
        lines.push(format!("open: the `{clause}` obligation"));
    }
    for obligation in &open {
        lines.push(format!("open: {}", obligation.what));
        lines.extend(
            countdown(path, obligation)
                .into_iter()
                .map(|l| format!("  {l}")),
        );
    }
    if let Some(step) = path.point_of_no_return {
        lines.push(match step {
            0 => "point of no return: the initial state — no run from it keeps the clause".into(),
            n => format!(
                "point of no return: step {n} ({}) — before it some continuation could still keep the clause, after it none can",
                describe::action(path.model.topology, &path.actions[n - 1])
            ),
        });
    }
    lines.push(why_stuck(path));
    lines
}

/// How far an obligation's countdown got: (reports that reached the aggregator, reports
/// it needs).
fn tally(path: &Path, open: &Open) -> (usize, usize) {
    let end = path.last();
    let (kind, r) = (open.kind, open.request);
    let aggregator = kind.aggregator(end);
    let counted = path.reached(r, kind);
    let remaining = aggregator.remaining(kind.direction(), &r);
    let expected = remaining.map_or(aggregator.expected() as usize, |k| counted + k as usize);
    (counted, expected)
}

/// The open obligations where a liveness counterexample ends, each in a few words with
/// its countdown (`P req0: blocks held, finished_sending 1 of 2 reports`): the diagram's
/// closing note. Empty for a safety counterexample.
pub fn stuck(model: &ContractModel, counterexample: &Counterexample<ContractModel>) -> Vec<String> {
    if counterexample.kind != Kind::Liveness {
        return Vec::new();
    }
    let path = Path::new(model, counterexample, &[]);
    let clause = clauses::CLAUSES[counterexample.clause].clause;
    open_obligations(&path, clause)
        .iter()
        .map(|open| {
            let (counted, expected) = tally(&path, open);
            format!(
                "{}, {} {counted} of {expected} reports",
                open.short,
                open.kind.direction()
            )
        })
        .collect()
}

/// The countdown an obligation waits for: reports arrived of the expected finished count
/// (and where that count comes from), each rank's part, and why the rest never come.
fn countdown(path: &Path, open: &Open) -> Vec<String> {
    let end = path.last();
    let (kind, r) = (open.kind, open.request);
    let (counted, expected) = tally(path, open);
    let engine = kind.engine();
    let direction = kind.direction();
    let mut head =
        format!("{engine} countdown for req{r} ({direction}): {counted} of {expected} reports");
    let prefill = engine == "P";
    if let Some(source) =
        describe::expected_count_source(&path.model.config, prefill, expected as u32)
    {
        head += &format!("; {expected} is {engine}'s expected finished count: {source}");
    }
    let mut lines = vec![head];
    let mut may_still: Vec<Rank> = Vec::new();
    // Each rank's part; ranks whose part reads the same share a line. Those whose report
    // never reached the aggregator and never will, with why in a few words.
    let mut parts: Vec<(Vec<Rank>, String)> = Vec::new();
    let mut lacking: Vec<(Vec<Rank>, String)> = Vec::new();
    for rank in 0..kind.ranks(end) {
        let made = path.report_of(rank, r, kind);
        let (part, still) = match made {
            Some((step, made)) => (made_line(path, made, step), false),
            None => waiting_line(path, kind, rank, r),
        };
        let gone = match made {
            Some((_, m)) if m.fate == Fate::Reached => None,
            Some((step, m)) => Some(lost_reason(path, m, step)),
            None if still => None,
            None if kind == Countdown::Sends => {
                Some(send_blockers(path, rank, r).unwrap_or_else(|| gist(&part)))
            }
            None => Some(gist(&part)),
        };
        for (list, text) in [(&mut parts, Some(part)), (&mut lacking, gone)] {
            let Some(text) = text else { continue };
            match list.iter_mut().find(|(_, p)| *p == text) {
                Some((ranks, _)) => ranks.push(rank),
                None => list.push((vec![rank], text)),
            }
        }
        if still {
            may_still.push(rank);
        }
    }
    for (ranks, part) in parts {
        lines.push(format!("{}: {part}", ranks_words(engine, &ranks)));
    }
    let missing = expected.saturating_sub(counted);
    let needs = format!("{direction} req{r} needs {expected} reports and has {counted}");
    let why = if missing == 0 {
        format!("{needs}, all it needs, yet it has not completed")
    } else if may_still.len() < missing {
        let who = if may_still.is_empty() {
            format!(
                "no {engine} rank can still make the missing {}",
                plural(missing, "one", "ones")
            )
        } else {
            format!(
                "only {} can still report, {} short",
                ranks_words(engine, &may_still),
                missing - may_still.len()
            )
        };
        let reasons: Vec<String> = lacking
            .iter()
            .map(|(ranks, reason)| format!("{} {reason}", ranks_words(engine, ranks)))
            .collect();
        format!("{needs}; {who}: {}", reasons.join("; "))
    } else {
        format!(
            "{needs}; {} could still report, but only after a step no run has to take (see `stuck`)",
            ranks_words(engine, &may_still)
        )
    };
    lines.push(format!("why: {why} — so {}", open.consequence));
    lines
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// A rank's part for the `why` line: without the steps since which each thing holds,
/// which its own line gives.
fn gist(part: &str) -> String {
    let mut out = part.to_string();
    while let Some(at) = out
        .find(" (since step ")
        .or_else(|| out.find(" (from the start)"))
    {
        let end = out[at..].find(')').map_or(out.len(), |e| at + e + 1);
        out.replace_range(at..end, "");
    }
    out
}

/// What keeps a transfer rank from reporting `r`, in a few words: `waits for D's
/// notification of req0 (0 of 1), but D rank 0's was LOST at step 5 [FAULT], and no lease
/// reports it instead`. None for a rank not waiting for D.
fn send_blockers(path: &Path, rank: Rank, r: RequestId) -> Option<String> {
    let end = path.last();
    let t = end.topology();
    let cell = end.prefill_cell(rank, r);
    if !t.is_transfer(rank) || !matches!(cell.send, SendPhase::ToSend | SendPhase::InBatch) {
        return None;
    }
    let mut blockers = Vec::new();
    for h in t.handles_reading(rank) {
        let d = t.handles[h].decoder;
        match end.handle(h, r) {
            HandlePhase::Done => match lost_notification(path, h, r) {
                Some(step) => blockers.push(format!(
                    "D rank {d}'s notification was LOST at step {step} [FAULT]"
                )),
                None => blockers.push(format!("D rank {d} read it and notifies no more")),
            },
            HandlePhase::Failed => blockers.push(format!("D rank {d}'s read failed")),
            HandlePhase::NotPosted => {
                if let Some(why) = never_read(path, r) {
                    let why = why.trim_start_matches(", and never will");
                    blockers.push(format!("D rank {d} never reads it{why}"));
                }
            }
            HandlePhase::Handshaking | HandlePhase::Reading => {}
        }
    }
    for plan in t.notify_only.iter().filter(|p| p.source == rank) {
        let settled = !matches!(
            end.decode_cell(plan.decoder, r),
            DecodeCell::Idle | DecodeCell::Loading
        );
        if settled {
            blockers.push(format!(
                "D rank {} never sends the notify-only message it owes",
                plan.decoder
            ));
        }
    }
    let mut line = format!(
        "waits for D's notifications of req{r} ({} of {})",
        cell.notifications,
        t.expected_consumers[usize::from(rank)]
    );
    if !blockers.is_empty() {
        line += &format!(", but {}", blockers.join(", and "));
    }
    if !t.leases {
        line += ", and no lease reports it instead";
    }
    Some(line)
}

/// Why a report that was made never counted, in a few words.
fn lost_reason(path: &Path, made: Made, step: usize) -> String {
    let r = made.request;
    match made.fate {
        Fate::Reached => format!("reported req{r} at step {step}"),
        Fate::Cleared if made.synthetic(path.model.topology) => format!(
            "made a synthetic report of req{r} at step {step}, which the connector dropped, and a replica reports a request only once"
        ),
        Fate::Cleared => format!(
            "reported req{r} at step {step}, which the connector cleared, and a rank reports a request only once"
        ),
        Fate::Dropped => format!(
            "reported req{r} in step {step}, which the executor dropped, and workers do not resend"
        ),
        Fate::Raised => format!(
            "reported req{r} in step {step}, which a raising worker failed, and the retry did not resend it"
        ),
    }
}

fn ranks_words(engine: &str, ranks: &[Rank]) -> String {
    let list: Vec<String> = ranks.iter().map(Rank::to_string).collect();
    let noun = if ranks.len() == 1 { "rank" } else { "ranks" };
    format!("{engine} {noun} {}", list.join(", "))
}

fn made_line(path: &Path, made: Made, step: usize) -> String {
    let r = made.request;
    let synthetic = made.synthetic(path.model.topology);
    match made.fate {
        Fate::Reached if synthetic => format!(
            "synthetic \"done\" report of req{r} made at step {step} (a PCP replica: it sends nothing)"
        ),
        Fate::Reached => format!("reported req{r} at step {step}"),
        Fate::Cleared if synthetic => format!(
            "synthetic \"done\" report of req{r} (a PCP replica: it sends nothing) DROPPED at step {step} by {} ({}), never reached the aggregator",
            narrate::REPLICA_CLEAR_SITE,
            narrate::REPLICA_CLEAR_WHY
        ),
        Fate::Cleared => {
            format!("report of req{r} CLEARED by the connector at step {step}, never reached the aggregator")
        }
        Fate::Dropped => format!(
            "report of req{r} LOST at step {step}: the output rank's output was missing, so the executor dropped the whole step [FAULT]"
        ),
        Fate::Raised => format!(
            "report of req{r} LOST at step {step}: a worker raised in that step, and the retry dropped the finished ids the workers had handed over [FAULT]"
        ),
    }
}

/// A rank that has not reported: where it stands and why; and whether it may still.
fn waiting_line(path: &Path, kind: Countdown, rank: Rank, r: RequestId) -> (String, bool) {
    match kind {
        Countdown::Sends => send_waiting(path, rank, r),
        Countdown::Loads => load_waiting(path, rank, r),
        Countdown::Receives => receive_waiting(path, rank, r),
    }
}

fn send_waiting(path: &Path, rank: Rank, r: RequestId) -> (String, bool) {
    let end = path.last();
    let t = end.topology();
    let config = &path.model.config;
    let cell = end.prefill_cell(rank, r);
    let since = path.when(|s| s.prefill_cell(rank, r).send);
    let steps = scheduler::prefill_steps(config, end);
    let idle = if steps {
        ""
    } else {
        ", and P's engine no longer steps"
    };
    match cell.send {
        SendPhase::Silent => (
            format!("never reports req{r} ({since}): a replica, its connector reports nothing for it"),
            false,
        ),
        SendPhase::Done if rank::store_count(end, rank, r) < 0 => (
            format!("is done with req{r} ({since}), but a store job from before req{r}'s preemption counted down its new store count, which went below zero ({}): the MultiConnector never forwards the send (producer.store-ledger = per-request)", path.when(|s| s.prefill_cell(rank, r).stale_store)),
            false,
        ),
        SendPhase::Done if cell.store == StorePhase::Leaked => (
            format!("is done with req{r} ({since}), but its offloading store raised and was never counted down ({}): the MultiConnector never forwards the send (producer.failed-store = leaked)", path.when(|s| s.prefill_cell(rank, r).store)),
            false,
        ),
        SendPhase::Done if cell.store == StorePhase::Storing => (
            format!("is done with req{r} ({since}), but its report waits for its offloading store, still running{idle}"),
            steps,
        ),
        SendPhase::Done => (
            format!("is done with req{r} ({since}) and reports it at P's next step{idle}"),
            steps,
        ),
        SendPhase::Expired => {
            let stop = rank::reaper_stop(end, rank, r)
                .map(|q| format!("req{q}, whose lease is still live"))
                .unwrap_or_else(|| "nothing now: it is reaped at P's next step".into());
            (
                format!("holds req{r} although its lease expired ({since}): its reaper stops at {stop}{idle}"),
                steps,
            )
        }
        SendPhase::ToSend | SendPhase::InBatch => {
            let unarmed = end.requests[usize::from(r)].send_meta != Metadata::Delivered;
            let mut line = if unarmed && steps {
                format!("has not got req{r}'s send metadata yet")
            } else if unarmed {
                format!("never got req{r}'s send metadata{idle}")
            } else {
                format!("waits for D's notifications of req{r} ({since})")
            };
            if !t.is_transfer(rank) {
                return (line, steps);
            }
            line += &format!(
                ": {} of {}",
                cell.notifications,
                t.expected_consumers[usize::from(rank)]
            );
            let mut coming = false;
            for h in t.handles_reading(rank) {
                let d = t.handles[h].decoder;
                let phase = end.handle(h, r);
                line += &format!(
                    "; D rank {d}'s read of it: {} ({})",
                    describe::handle_phase(phase),
                    path.when(|s| s.handle(h, r))
                );
                match phase {
                    HandlePhase::Done => {
                        if let Some(step) = lost_notification(path, h, r) {
                            line += &format!(", its notification LOST at step {step} [FAULT]");
                        }
                    }
                    HandlePhase::NotPosted => match never_read(path, r) {
                        Some(why) => line += &why,
                        None => coming = true,
                    },
                    HandlePhase::Handshaking | HandlePhase::Reading => coming = true,
                    HandlePhase::Failed => {}
                }
            }
            for plan in t.notify_only.iter().filter(|p| p.source == rank) {
                let waiting = matches!(
                    end.decode_cell(plan.decoder, r),
                    DecodeCell::Idle | DecodeCell::Loading
                );
                line += &format!(
                    "; D rank {} owes it a notify-only message{}",
                    plan.decoder,
                    if waiting { "" } else { " it no longer sends" }
                );
                coming |= waiting && never_read(path, r).is_none();
            }
            if !t.leases {
                line += "; no lease would report it instead (producer.lease = false)";
            } else if cell.send == SendPhase::ToSend {
                line += "; its lease is armed and has not expired";
            }
            (line, (coming || t.leases) && (steps || !unarmed))
        }
        SendPhase::Reported | SendPhase::Cleared | SendPhase::ReportedAgain => (
            format!("reported req{r} before the run began"),
            false,
        ),
        SendPhase::ReportsAgain => (
            format!("reports req{r} again at P's next step ({since}): a notification came after its report{idle}"),
            steps,
        ),
    }
}

/// Why D will not post a read of `r` any more, when its scheduler says so.
fn never_read(path: &Path, r: RequestId) -> Option<String> {
    let i = usize::from(r);
    let since = path.since(|s| s.requests[i].decode);
    let q = &path.last().requests[i];
    match q.decode {
        DecodePhase::Crashed => Some(format!(
            ", and never will: D crashed at step {since} [FAULT]"
        )),
        DecodePhase::Gone => Some(format!(
            ", and never will: D dropped req{r} at step {since}"
        )),
        DecodePhase::Pending | DecodePhase::Loading | DecodePhase::AbortedLoading
            if !q.prefix_hit =>
        {
            None
        }
        _ => Some(", and never will".into()),
    }
}

/// The step whose read through handle `h` completed with its notification lost.
fn lost_notification(path: &Path, h: usize, r: RequestId) -> Option<usize> {
    path.actions
        .iter()
        .position(|a| {
            matches!(*a, Action::ReadCompletes { handle, request, notification_lost: true, .. }
            if usize::from(handle) == h && request == r)
        })
        .map(|i| i + 1)
}

fn load_waiting(path: &Path, rank: Rank, r: RequestId) -> (String, bool) {
    let end = path.last();
    let since = path.when(|s| s.prefill_cell(rank, r).load);
    let steps = scheduler::prefill_steps(&path.model.config, end);
    let idle = if steps {
        ""
    } else {
        ", and P's engine no longer steps"
    };
    match end.prefill_cell(rank, r).load {
        LoadPhase::Loading => (format!("is still loading req{r}'s KV ({since})"), true),
        LoadPhase::Done => (
            format!("has loaded req{r} ({since}) and reports it at P's next step{idle}"),
            steps,
        ),
        LoadPhase::NotUsed | LoadPhase::Reported => {
            (format!("has no load of req{r} to report"), false)
        }
    }
}

fn receive_waiting(path: &Path, d: Rank, r: RequestId) -> (String, bool) {
    let end = path.last();
    let t = end.topology();
    let config = &path.model.config;
    let q = &end.requests[usize::from(r)];
    let since = path.when(|s| s.decode_cell(d, r));
    let steps = scheduler::decode_steps(config, end);
    let idle = if steps {
        ""
    } else {
        ", and D's engine no longer steps"
    };
    if q.decode_preempted {
        let preempted = path.since(|s| s.requests[usize::from(r)].decode_preempted);
        return (
            format!(
                "has nothing to load for req{r}'s second load: its connector set up no transfer (do_remote_prefill was cleared at its first allocation), and P sends its KV once; its first load woke req{r} before the preemption at step {preempted}"
            ),
            false,
        );
    }
    match end.decode_cell(d, r) {
        DecodeCell::Silent if q.prefix_hit => (
            format!("never reports req{r} ({since}): a full prefix hit is not reported (consumer.prefix-hit = unreported)"),
            false,
        ),
        DecodeCell::Silent => (
            format!("never reports req{r} ({since}): its failed load is not reported (consumer.failed-load = unreported)"),
            false,
        ),
        DecodeCell::Done { failed } => {
            let how = if failed { "failed" } else { "received" };
            (
                format!("is done with req{r} ({since}) and reports it {how} at D's next step{idle}"),
                steps,
            )
        }
        DecodeCell::Loading => {
            let unannounced = t.push
                && config.consumer.push_failure == kvcc_model::config::PushFailure::Unannounced;
            let reads: Vec<String> = t
                .handles_of(d)
                .map(|h| {
                    let phase = end.handle(h, r);
                    let untold = if unannounced && phase == HandlePhase::Failed {
                        ", and D was never told (consumer.push-failure = unannounced)"
                    } else {
                        ""
                    };
                    format!(
                        "from P rank {}: {}{untold} ({})",
                        t.handles[h].source,
                        describe::handle_phase(phase),
                        path.when(|s| s.handle(h, r))
                    )
                })
                .collect();
            let moving = t.handles_of(d).any(|h| {
                matches!(
                    end.handle(h, r),
                    HandlePhase::Handshaking | HandlePhase::Reading
                )
            });
            (
                format!(
                    "waits for its {}s of req{r}: {}",
                    describe::transfer_noun(t),
                    reads.join("; ")
                ),
                moving,
            )
        }
        DecodeCell::Idle if q.decode == DecodePhase::Crashed => (
            format!(
                "D rank {d} never reads req{r}: D crashed ({}) [FAULT]",
                path.when(|s| s.requests[usize::from(r)].decode)
            ),
            false,
        ),
        DecodeCell::Idle if steps => (
            format!("has not got req{r}'s load metadata yet"),
            true,
        ),
        DecodeCell::Idle => (
            format!("never got req{r}'s load metadata{idle}"),
            false,
        ),
        DecodeCell::Reported | DecodeCell::ReportedTwice
            if matches!(end.child_load(d, r), LoadPhase::Loading | LoadPhase::Done) =>
        {
            let child = end.child_load(d, r);
            (
                format!(
                    "its NIXL child reported req{r}, and the MultiConnector holds it for the offloading child, whose load is {} ({})",
                    format!("{child:?}").to_lowercase(),
                    path.when(|s| s.child_load(d, r))
                ),
                child == LoadPhase::Loading || steps,
            )
        }
        DecodeCell::ReportsAgain => (
            format!("hands over req{r}'s finished load once more at D's next step{idle}"),
            steps,
        ),
        DecodeCell::Reported | DecodeCell::ReportedTwice => (
            format!("reported req{r} before the run began"),
            false,
        ),
    }
}

/// The requests D never runs, and where its waiting-queue scan stops (the scan the
/// engine runs, replayed on the last state).
fn unscheduled(path: &Path) -> Vec<String> {
    let end = path.last();
    let mut lines: Vec<String> = (0..end.request_count() as RequestId)
        .filter(|&r| end.requests[usize::from(r)].decode.unscheduled())
        .map(|r| {
            let q = &end.requests[usize::from(r)];
            let since = path.when(|s| s.requests[usize::from(r)].decode);
            let phase = describe::decode_phase(q);
            format!("open: D req{r}: {phase} ({since}), never scheduled")
        })
        .collect();
    let config = &path.model.config;
    if let Some(stop) = scheduler::schedule_decode(config, &mut end.clone()) {
        let r = stop.request;
        let wants = if end.requests[usize::from(r)].decode == DecodePhase::Loaded {
            "one more block to run".to_string()
        } else {
            match stop.need - 2 {
                0 => "its whole sequence, 2 blocks".to_string(),
                reserved => format!(
                    "its whole sequence, 2 blocks, beside {reserved} reserved for the loads admitted"
                ),
            }
        };
        let holders: Vec<String> = end
            .requests
            .iter()
            .enumerate()
            .filter(|(_, q)| q.decode.blocks() > 0)
            .map(|(r, q)| format!("req{r} {}", q.decode.blocks()))
            .collect();
        let running = end
            .requests
            .iter()
            .any(|q| q.decode == DecodePhase::Running);
        lines.push(format!(
            "scan: D's waiting-queue scan stops at req{r}, which needs {wants}: {} of {} blocks are free (held: {}){}; allocate_slots fails and the scan breaks, so nothing behind req{r} is looked at",
            stop.free,
            config.decode.kv_blocks.unwrap_or(0),
            if holders.is_empty() { "-".to_string() } else { holders.join(", ") },
            if running { "" } else { ", and nothing is running to return any" },
        ));
    }
    lines
}

/// Why no continuation delivers: the actions still possible at the end, none forced.
fn why_stuck(path: &Path) -> String {
    let state = path.last();
    let model = path.model;
    let mut actions = Vec::new();
    model.actions(state, &mut actions);
    let possible: Vec<String> = actions
        .iter()
        .filter(|a| model.next_state(state, **a).is_some())
        .map(|a| describe::action(model.topology, a))
        .collect();
    let after = match path.steps.len() {
        0 => "from the start".to_string(),
        n => format!("after step {n}"),
    };
    if possible.is_empty() {
        format!("stuck: {after} nothing can happen any more, so nothing can deliver it")
    } else {
        format!(
            "stuck: {after} nothing fairness forces is enabled, so a run may end here; \
             still possible, never forced: {}",
            possible.join("; ")
        )
    }
}

fn safety(path: &Path, clause: &str) -> Vec<String> {
    let n = path.steps.len();
    let Some(last) = path.steps.last() else {
        return vec!["broken in the initial state".to_string()];
    };
    let mut lines = vec![format!("step {n} breaks it: {}", last.description)];
    let conflicts = conflicts(path, clause);
    if conflicts.is_empty() {
        for (name, before, after) in &last.changes {
            lines.push(format!("  {name}: {before} -> {after}"));
        }
    }
    lines.extend(conflicts.into_iter().map(|c| format!("  {c}")));
    lines
}

/// The two sides of a safety violation: what the last step made true, and what it met,
/// for each request the clause's rule catches.
fn conflicts(path: &Path, clause: &str) -> Vec<String> {
    type Rule = fn(&Path, RequestId) -> Vec<String>;
    let rules: [(&str, Rule); 10] = [
        (clauses::P_BLOCKS_FREED_UNDER_READ.clause, freed_under_read),
        (
            clauses::D_BLOCKS_FREED_UNDER_WRITE.clause,
            released_under_write,
        ),
        (
            clauses::WOKEN_WHILE_HANDLE_IN_FLIGHT.clause,
            woken_under_write,
        ),
        (
            clauses::FAILURE_REPORTED_AS_SUCCESS.clause,
            failure_as_success,
        ),
        (
            clauses::SEND_EMITTED_BEFORE_TRANSFER_RANKS_DONE.clause,
            sent_before_transfer_ranks,
        ),
        (
            clauses::SEND_EMITTED_BEFORE_OFFLOAD_STORES_DONE.clause,
            sent_before_stores,
        ),
        (
            clauses::RECV_EMITTED_BEFORE_DECODERS_DONE.clause,
            received_before_reads,
        ),
        (
            clauses::LOAD_EMITTED_BEFORE_WORKERS_DONE.clause,
            before_loads,
        ),
        (clauses::PREFILL_BEFORE_LOAD_COMPLETE.clause, before_loads),
        (
            clauses::EXPIRED_LEASE_HELD_BEHIND_LIVE_ONE.clause,
            held_behind_live_lease,
        ),
    ];
    match rules.iter().find(|(name, _)| *name == clause) {
        Some((_, rule)) => (0..path.last().request_count() as RequestId)
            .flat_map(|r| rule(path, r))
            .collect(),
        // Every other safety clause is a breach an aggregator or a scheduler saw.
        None => path
            .touched_last()
            .into_iter()
            .flat_map(|r| breach_history(path, r))
            .collect(),
    }
}

impl Path<'_> {
    /// The requests the last step reported or changed.
    fn touched_last(&self) -> Vec<RequestId> {
        let n = self.steps.len();
        let end = self.last();
        let mut touched: Vec<RequestId> = self
            .reports
            .iter()
            .filter(|(step, _)| *step == n)
            .map(|(_, m)| m.request)
            .chain((0..end.request_count() as RequestId).filter(|&r| {
                let i = usize::from(r);
                self.states[n - 1].requests[i] != end.requests[i]
            }))
            .collect();
        touched.sort_unstable();
        touched.dedup();
        touched
    }

    fn prefill_line(&self, r: RequestId) -> String {
        let i = usize::from(r);
        format!(
            "P req{r}: {} ({})",
            describe::prefill_phase(self.last().requests[i].prefill),
            self.when(|s| s.requests[i].prefill)
        )
    }

    fn decode_line(&self, r: RequestId) -> String {
        let i = usize::from(r);
        let q = &self.last().requests[i];
        format!(
            "D req{r}: {} ({})",
            describe::decode_phase(q),
            self.when(|s| s.requests[i].decode)
        )
    }

    /// `meets: D rank d's read of rR from P rank p: PHASE (since step N)` for each handle
    /// of `r` in one of `phases`.
    fn reads_in(&self, r: RequestId, phases: &[HandlePhase]) -> Vec<String> {
        let end = self.last();
        let t = end.topology();
        (0..t.handles.len())
            .filter(|&h| phases.contains(&end.handle(h, r)))
            .map(|h| {
                let plan = t.handles[h];
                format!(
                    "meets: D rank {}'s read of req{r} from P rank {}: {} ({})",
                    plan.decoder,
                    plan.source,
                    describe::handle_phase(end.handle(h, r)),
                    self.when(|s| s.handle(h, r))
                )
            })
            .collect()
    }

    /// `meets: D rank d's offloading child still loading rR (since step N)`, for each D
    /// worker whose second loading child is still writing `r`'s blocks.
    fn children_loading(&self, r: RequestId) -> Vec<String> {
        let end = self.last();
        (0..end.topology().decode_world)
            .filter(|&d| end.child_load(d, r) == LoadPhase::Loading)
            .map(|d| {
                format!(
                    "meets: D rank {d}'s offloading child still loading req{r} ({})",
                    self.when(|s| s.child_load(d, r))
                )
            })
            .collect()
    }

    fn emitted(&self, r: RequestId, bit: u8) -> bool {
        self.last().requests[usize::from(r)].emitted & bit != 0
    }

    /// `finished_sending req0 emitted at step N, after reports from P ranks 0, 1`.
    fn emission_line(&self, r: RequestId, countdown: Countdown) -> String {
        let i = usize::from(r);
        let bit = match countdown {
            Countdown::Sends => Request::EMITTED_SEND,
            Countdown::Loads => Request::EMITTED_LOAD,
            Countdown::Receives => Request::EMITTED_RECV,
        };
        let step = self.since(|s| s.requests[i].emitted & bit != 0);
        let counted: Vec<Rank> = self
            .reports
            .iter()
            .filter(|(_, m)| m.request == r && m.fate == Fate::Reached)
            .filter(|(_, m)| countdown.matches(m.report))
            .map(|(_, m)| m.rank)
            .collect();
        let who = if counted.is_empty() {
            "no rank".to_string()
        } else {
            ranks_words(countdown.engine(), &counted)
        };
        format!(
            "{}'s {} req{r} emitted at step {step}, after reports from {who}",
            countdown.engine(),
            countdown.direction()
        )
    }
}

fn held_behind_live_lease(path: &Path, r: RequestId) -> Vec<String> {
    let end = path.last();
    let mut lines = Vec::new();
    for k in 0..end.topology().prefill_world {
        if end.prefill_cell(k, r).send != SendPhase::Expired {
            continue;
        }
        let Some(q) = rank::reaper_stop(end, k, r) else {
            continue;
        };
        lines.push(format!(
            "P rank {k} holds req{r}, whose lease expired ({})",
            path.when(|s| s.prefill_cell(k, r).send)
        ));
        lines.push(format!(
            "meets: req{q}, inserted ahead of it in P rank {k}'s _reqs_to_send, whose lease D's heartbeats keep renewing while D has it as: {} ({})",
            describe::decode_phase(&end.requests[usize::from(q)]),
            path.when(|s| s.requests[usize::from(q)].decode)
        ));
    }
    lines
}

fn freed_under_read(path: &Path, r: RequestId) -> Vec<String> {
    let freed = matches!(
        path.last().requests[usize::from(r)].prefill,
        PrefillPhase::Released | PrefillPhase::AbortFreed
    );
    if !(freed && path.last().reading(r)) {
        return Vec::new();
    }
    let mut lines = vec![path.prefill_line(r)];
    lines.extend(path.reads_in(r, &[HandlePhase::Reading]));
    lines
}

fn decode_under_write(path: &Path, r: RequestId, phases: &[DecodePhase]) -> Vec<String> {
    let end = path.last();
    let writing = end.reading(r) || end.child_loading(r);
    if !(phases.contains(&end.requests[usize::from(r)].decode) && writing) {
        return Vec::new();
    }
    let mut lines = vec![path.decode_line(r)];
    lines.extend(path.reads_in(r, &[HandlePhase::Reading]));
    lines.extend(path.children_loading(r));
    lines
}

fn released_under_write(path: &Path, r: RequestId) -> Vec<String> {
    decode_under_write(path, r, &[DecodePhase::Failed, DecodePhase::Freed])
}

fn woken_under_write(path: &Path, r: RequestId) -> Vec<String> {
    decode_under_write(path, r, &[DecodePhase::Running])
}

fn failure_as_success(path: &Path, r: RequestId) -> Vec<String> {
    let failed = path.reads_in(r, &[HandlePhase::Failed]);
    if path.last().requests[usize::from(r)].decode != DecodePhase::Running || failed.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![path.decode_line(r)];
    lines.extend(failed);
    lines
}

fn sent_before_transfer_ranks(path: &Path, r: RequestId) -> Vec<String> {
    let end = path.last();
    let t = end.topology();
    let behind: Vec<String> = (0..t.prefill_world)
        .filter(|&k| t.is_transfer(k))
        .filter(|&k| {
            matches!(
                end.prefill_cell(k, r).send,
                SendPhase::InBatch | SendPhase::ToSend
            )
        })
        .map(|k| {
            format!(
                "meets: P transfer rank {k} not done with req{r}: notifications {} of {} ({})",
                end.prefill_cell(k, r).notifications,
                t.expected_consumers[usize::from(k)],
                path.when(|s| s.prefill_cell(k, r).send)
            )
        })
        .collect();
    if !path.emitted(r, Request::EMITTED_SEND) || behind.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![
        path.emission_line(r, Countdown::Sends),
        path.prefill_line(r),
    ];
    lines.extend(behind);
    lines
}

fn sent_before_stores(path: &Path, r: RequestId) -> Vec<String> {
    let end = path.last();
    let storing: Vec<String> = (0..end.topology().prefill_world)
        .filter(|&k| end.prefill_cell(k, r).store == StorePhase::Storing)
        .map(|k| {
            format!(
                "meets: P rank {k}'s offloading store of req{r} still running ({})",
                path.when(|s| s.prefill_cell(k, r).store)
            )
        })
        .collect();
    if !path.emitted(r, Request::EMITTED_SEND) || storing.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![path.emission_line(r, Countdown::Sends)];
    lines.extend(storing);
    lines
}

fn received_before_reads(path: &Path, r: RequestId) -> Vec<String> {
    let mut busy = path.reads_in(
        r,
        &[
            HandlePhase::NotPosted,
            HandlePhase::Handshaking,
            HandlePhase::Reading,
        ],
    );
    busy.extend(path.children_loading(r));
    if !path.emitted(r, Request::EMITTED_RECV) || busy.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![path.emission_line(r, Countdown::Receives)];
    lines.extend(busy);
    lines
}

/// P emitted a request's load, or started prefilling it, while a worker still loads.
fn before_loads(path: &Path, r: RequestId) -> Vec<String> {
    let end = path.last();
    let loading: Vec<String> = (0..end.topology().prefill_world)
        .filter(|&k| end.prefill_cell(k, r).load == LoadPhase::Loading)
        .map(|k| {
            format!(
                "meets: P rank {k} still loading req{r}'s KV ({})",
                path.when(|s| s.prefill_cell(k, r).load)
            )
        })
        .collect();
    let emitted = path.emitted(r, Request::EMITTED_LOAD);
    let started = end.requests[usize::from(r)].prefill != PrefillPhase::LoadingKv;
    if loading.is_empty() || !(started || emitted) {
        return Vec::new();
    }
    let mut lines = Vec::new();
    if emitted {
        lines.push(path.emission_line(r, Countdown::Loads));
    }
    lines.push(path.prefill_line(r));
    lines.extend(loading);
    lines
}

/// A breach an aggregator or a scheduler saw at the last step (a second emission, a
/// report it refused or could not place, a free by a lease alone): what the step
/// reported, against the request's history on that engine — its phase, E, earlier
/// reports, lease expiries — each with its step.
fn breach_history(path: &Path, r: RequestId) -> Vec<String> {
    let n = path.steps.len();
    let end = path.last();
    let prefill = !matches!(path.actions[n - 1], Action::DecodeEngineSteps { .. });
    let (engine, expected): (&str, fn(&State) -> u32) = if prefill {
        ("P", |s| s.prefill_aggregator.expected())
    } else {
        ("D", |s| s.decode_aggregator.expected())
    };
    let mut lines = vec![
        if prefill {
            path.prefill_line(r)
        } else {
            path.decode_line(r)
        },
        {
            let count = expected(end);
            let source = describe::expected_count_source(&path.model.config, prefill, count)
                .map(|s| format!(": {s}"))
                .unwrap_or_default();
            format!(
                "{engine} aggregator's expected finished count = {count} ({}){source}",
                path.when(expected)
            )
        },
    ];
    let reports = path
        .reports
        .iter()
        .filter(|(_, m)| m.request == r && matches!(m.report, Report::Received { .. }) != prefill);
    for (step, m) in reports {
        let fate = match m.fate {
            Fate::Reached => "",
            Fate::Cleared => ", cleared by the connector",
            Fate::Dropped => ", lost with its step",
            Fate::Raised => ", lost with its failed step",
        };
        lines.push(format!(
            "{} {engine} rank {} reported {} at step {step}{fate}",
            if *step == n { "now:" } else { "earlier:" },
            m.rank,
            narrate::report_words(m.report, r)
        ));
    }
    for (i, a) in path.actions.iter().enumerate() {
        if let Action::LeaseExpires { rank, request } = *a {
            if request == r && prefill {
                lines.push(format!(
                    "earlier: P rank {rank}'s lease on req{r} expired at step {}",
                    i + 1
                ));
            }
        }
    }
    lines
}
