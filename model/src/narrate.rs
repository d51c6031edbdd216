//! A step told as what it did: the line a trace prints for it and the messages its
//! sequence diagram draws both come from here, derived from the action, the states before
//! and after it, and the topology (which knows the spec's leases). Nothing is said that
//! the step did not make true: no lease words without a lease, no "notifies P" for a
//! notification P only logs, no report drawn as arriving when the connector cleared it
//! or the executor dropped its step.

use crate::action::Action;
use crate::decoder::ChildPoll;
use crate::describe;
use crate::state::{
    DecodeCell, DecodePhase, HandlePhase, Incidents, LoadPhase, Metadata, PrefillPhase, Request,
    RequestId, SendPhase, State, StorePhase,
};
use crate::topology::{HandlePlan, Topology};
use kvcc_aggregator::{Direction, Rank, SortedAggregator};

/// The parties of a step: the lanes of a trace's sequence diagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Party {
    Client,
    PrefillScheduler,
    PrefillAggregator,
    PrefillRank(Rank),
    DecodeRank(Rank),
    DecodeAggregator,
    DecodeScheduler,
}

/// One thing a step did: a message from one party to another, or a note at one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub from: Party,
    /// Where the message goes; `None` for a note at `from`.
    pub to: Option<Party>,
    pub text: String,
    /// A message that never takes effect: cleared, lost, dropped with its step, ignored.
    pub lost: bool,
}

/// What a worker reported at an engine step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// A P rank: `finished_sending`.
    Sent,
    /// A P rank: `finished_recving` for its own KV load.
    Loaded,
    /// A D rank: `finished_recving`, with `failed_recving` too when `failed`.
    Received { failed: bool },
}

/// What became of a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// It reached the aggregator.
    Reached,
    /// The connector cleared it before it left the worker (#52779, #53781, #59325).
    Cleared,
    /// The output rank's output was missing and the executor dropped the whole step.
    Dropped,
    /// A worker raised in the step, and the retry dropped the finished ids the workers
    /// had handed over (`scheduler.failed-step = "retry-drops-reports"`).
    Raised,
}

/// One report made at an engine step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Made {
    pub rank: Rank,
    pub request: RequestId,
    pub report: Report,
    pub fate: Fate,
}

/// The reports an engine step made, by request, then rank; none for other actions.
pub fn reports(action: &Action, before: &State, after: &State) -> Vec<Made> {
    let t = after.topology();
    let mut made = Vec::new();
    let (lost, raised) = action.step_faults().unwrap_or_default();
    let fate = if raised {
        Fate::Raised
    } else if lost {
        Fate::Dropped
    } else {
        Fate::Reached
    };
    for r in 0..after.request_count() as RequestId {
        match *action {
            Action::PrefillEngineSteps { .. } => {
                for rank in 0..t.prefill_world {
                    let (b, a) = (before.prefill_cell(rank, r), after.prefill_cell(rank, r));
                    let sent = match (b.send, a.send) {
                        (SendPhase::Reported, _) | (SendPhase::Cleared, _) => None,
                        (_, SendPhase::Reported | SendPhase::ReportedAgain) => Some(fate),
                        (_, SendPhase::Cleared) => Some(Fate::Cleared),
                        _ => None,
                    };
                    if let Some(fate) = sent {
                        made.push(Made {
                            rank,
                            request: r,
                            report: Report::Sent,
                            fate,
                        });
                    }
                    if b.load != LoadPhase::Reported && a.load == LoadPhase::Reported {
                        made.push(Made {
                            rank,
                            request: r,
                            report: Report::Loaded,
                            fate,
                        });
                    }
                }
            }
            // A synchronous load's end is its step's, not a report.
            Action::DecodeEngineSteps { .. }
                if before.requests[usize::from(r)].decode == DecodePhase::SyncLoading => {}
            Action::DecodeEngineSteps { .. } => {
                for rank in 0..t.decode_world {
                    let poll = ChildPoll::between(
                        (before.decode_cell(rank, r), before.child_load(rank, r)),
                        (after.decode_cell(rank, r), after.child_load(rank, r)),
                    );
                    if let Some(failed) = poll.forwarded(t.recving_combine) {
                        made.push(Made {
                            rank,
                            request: r,
                            report: Report::Received { failed },
                            fate,
                        });
                    }
                }
            }
            _ => {}
        }
    }
    made
}

/// A D notification (a read's, a notify-only message, a prefix hit's) and whether the P
/// rank counted it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Notification {
    plan: HandlePlan,
    request: RequestId,
    /// What carries it: `notification` (a read's), `notify-only message`, `prefix-hit
    /// notification`.
    via: &'static str,
    /// Lost on the way (the `lost-notification` fault).
    lost: bool,
    /// Counted towards the P rank's completion; otherwise only logged (the rank was done,
    /// or did not recognise the id).
    counted: bool,
    /// Carried an id P does not recognise (`consumer.mla-notify-id`).
    unrecognised: bool,
    /// Sent, and on its way: it arrives as an event of its own (`delivery.notification`);
    /// `copies` of it (two when duplicated).
    on_its_way: u8,
}

/// What carries a notify-only message, in [`Notification::via`].
const NOTIFY_ONLY: &str = "notify-only message";

/// The notifications `action` sent. A P rank counts as many as its count grew by; the
/// rest reached it after it was done with the request, when vLLM only logs them.
fn notifications(
    t: &Topology,
    action: &Action,
    before: &State,
    after: &State,
) -> Vec<Notification> {
    let mut sent: Vec<(HandlePlan, RequestId, bool, &'static str)> = Vec::new();
    let notify_only_of = |decoder: Rank, r: RequestId| {
        // Notify-only messages go out when the D rank settles a load none of whose reads
        // failed (a failure logged only also settles as a plain success, and sends none).
        let settled = before.decode_cell(decoder, r) == DecodeCell::Loading
            && after.decode_cell(decoder, r) == (DecodeCell::Done { failed: false })
            && t.handles_of(decoder)
                .all(|h| after.handle(h, r) != HandlePhase::Failed);
        t.notify_only
            .iter()
            .filter(move |p| settled && p.decoder == decoder)
            .map(move |p| (*p, r, false, NOTIFY_ONLY))
    };
    match *action {
        Action::ReadCompletes {
            handle,
            request,
            notification_lost,
            ..
        } => {
            let plan = t.handles[usize::from(handle)];
            sent.push((plan, request, notification_lost, "notification"));
            sent.extend(notify_only_of(plan.decoder, request));
        }
        Action::DecodeRejects { request } => {
            // #41269's notice stands in for every read and notify-only message.
            let any = (0..t.prefill_world).any(|k| {
                after.prefill_cell(k, request).notifications
                    > before.prefill_cell(k, request).notifications
            });
            if any {
                sent.extend(
                    t.handles
                        .iter()
                        .chain(&t.notify_only)
                        .map(|p| (*p, request, false, "rejection notice")),
                );
            }
        }
        Action::DecodeEngineSteps { .. } => {
            for r in 0..after.request_count() as RequestId {
                let q = &before.requests[usize::from(r)];
                if !(q.prefix_hit && q.recv_meta == Metadata::Due(1)) {
                    continue;
                }
                // A full prefix hit reads nothing and notifies every rank it covers.
                for d in 0..t.decode_world {
                    let read = t.handles.iter().filter(|p| p.decoder == d);
                    let covered = t.notify_only.iter().filter(|p| p.decoder == d);
                    sent.extend(
                        read.chain(covered)
                            .map(|p| (*p, r, false, "prefix-hit notification")),
                    );
                }
            }
        }
        _ => {}
    }
    let mut room: Vec<(Rank, RequestId, u8)> = Vec::new();
    sent.into_iter()
        .map(|(plan, request, lost, via)| {
            let grew = |rank, r| {
                let b = before.prefill_cell(rank, r).notifications;
                after.prefill_cell(rank, r).notifications.saturating_sub(b)
            };
            let counted = !lost && {
                let entry = match room
                    .iter_mut()
                    .position(|(k, r, _)| *k == plan.source && *r == request)
                {
                    Some(i) => &mut room[i],
                    None => {
                        room.push((plan.source, request, grew(plan.source, request)));
                        room.last_mut().expect("just pushed")
                    }
                };
                let counted = entry.2 > 0;
                entry.2 = entry.2.saturating_sub(1);
                counted
            };
            let unrecognised = via == NOTIFY_ONLY && t.notify_only_unrecognised;
            let on_its_way = if lost || unrecognised || !t.notifications_travel {
                0
            } else {
                duplicated(action) + 1
            };
            Notification {
                plan,
                request,
                via,
                lost,
                counted,
                unrecognised,
                on_its_way,
            }
        })
        .collect()
}

/// 1 when `action` is a read whose notification is duplicated, else 0.
fn duplicated(action: &Action) -> u8 {
    u8::from(matches!(
        action,
        Action::ReadCompletes {
            notification_duplicated: true,
            ..
        }
    ))
}

/// What a notification on its way does when it arrives at P rank `rank`.
fn arrival_words(t: &Topology, rank: Rank, r: RequestId, before: &State, after: &State) -> String {
    let cell = after.prefill_cell(rank, r);
    if cell.dropped > before.prefill_cell(rank, r).dropped {
        return format!(
            "P rank {rank} no longer tracks req{r}: it logs the notification as for an unrecognized request and drops it"
        );
    }
    if cell.send == SendPhase::ReportsAgain
        && before.prefill_cell(rank, r).send != cell.send
        && !t.reports_each_notification
    {
        return format!(
            "P rank {rank} already reported req{r}, and reports it finished AGAIN at its next step (producer.notification-after-report = reported-again)"
        );
    }
    let expected = t.expected_consumers[usize::from(rank)];
    format!(
        "P rank {rank} counts a D notification for req{r} ({}/{expected}){}",
        cell.notifications,
        count_outcome(t, cell.send, r)
    )
}

/// What a P rank's count of D notifications leads to, after the count.
fn count_outcome(t: &Topology, send: SendPhase, r: RequestId) -> String {
    let each = if t.reports_each_notification {
        " (producer.notification-count = each: it does not wait for its other readers)"
    } else {
        ""
    };
    match send {
        SendPhase::Done => format!(", done: it reports req{r} sent at its next step{each}"),
        SendPhase::ReportsAgain => {
            format!(", and it reports req{r} finished AGAIN at its next step{each}")
        }
        _ => String::new(),
    }
}

/// `rank 0` or `ranks 0, 2`, after `side` (`P`, `D`).
fn ranks(side: &str, ranks: &[Rank]) -> String {
    let list: Vec<String> = ranks.iter().map(Rank::to_string).collect();
    let noun = if ranks.len() == 1 { "rank" } else { "ranks" };
    format!("{side} {noun} {}", list.join(", "))
}

/// `req0 sent`, `req0 received, failed`: what a report says.
pub fn report_words(report: Report, r: RequestId) -> String {
    match report {
        Report::Sent => format!("req{r} sent"),
        Report::Loaded => format!("its own KV load of req{r} done"),
        Report::Received { failed: false } => format!("req{r} received"),
        Report::Received { failed: true } => format!("req{r} received, failed"),
    }
}

/// Where vLLM drops a replicated PCP rank's report when `producer.clear-replicated` is on
/// (vLLM 0.34.0, `kv_role = "kv_producer"`; docs/contracts.md §12): the worker has added
/// its synthetic reports, and the connector empties the rank's `finished_sending`.
pub const REPLICA_CLEAR_SITE: &str =
    "NixlBaseConnector.get_transfer_results in vllm/distributed/kv_transfer/kv_connector/v1/nixl/connector.py";

/// The same, short, for a diagram's arrow.
pub const REPLICA_CLEAR_FUNCTION: &str = "NixlBaseConnector.get_transfer_results";

/// Why the connector's clear drops a replica's report, after the site.
pub const REPLICA_CLEAR_WHY: &str =
    "#52779's clear, carried over by #53781: producer.clear-replicated = true";

impl Made {
    /// A replicated PCP rank's "done sending": synthetic, since it holds a copy of the KV
    /// that nobody reads (#53903), not a completed transfer.
    pub fn synthetic(&self, t: &Topology) -> bool {
        self.report == Report::Sent && t.replica_of[usize::from(self.rank)].is_some()
    }
}

/// `P rank 1 (a PCP replica: it holds a copy of P rank 0's KV and sends nothing) makes its
/// synthetic "done" report`: who makes a synthetic report, and why a rank that sent
/// nothing reports at all.
fn replicas_words(t: &Topology, who: &[Rank]) -> String {
    let mut of: Vec<Rank> = Vec::new();
    for &k in who {
        if let Some((_, source)) = t.replica_of[usize::from(k)] {
            if !of.contains(&source) {
                of.push(source);
            }
        }
    }
    if who.len() == 1 {
        format!(
            "{} (a PCP replica: it holds a copy of {}'s KV and sends nothing) makes its synthetic \"done\" report",
            ranks("P", who),
            ranks("P", &of)
        )
    } else {
        format!(
            "{} (PCP replicas: they hold copies of the KV of {} and send nothing) make their synthetic \"done\" reports",
            ranks("P", who),
            ranks("P", &of)
        )
    }
}

/// What became of `n` reports, after the words that name them.
fn fate_words(fate: Fate, n: usize) -> String {
    let them = if n == 1 { "it" } else { "them" };
    match fate {
        Fate::Reached => String::new(),
        Fate::Cleared => format!(
            ", and the connector DROPS {them} before the aggregator: {REPLICA_CLEAR_SITE} clears a replicated PCP rank's finished_sending ({REPLICA_CLEAR_WHY})"
        ),
        Fate::Dropped => ", LOST with the dropped step".into(),
        Fate::Raised => ", LOST with the failed step".into(),
    }
}

/// `P ranks 0, 1 report req0 sent, ...`: the reports of a step, the ranks of one report
/// and fate grouped; replicas' synthetic reports said as such.
fn report_lines(t: &Topology, side: &str, made: &[Made]) -> Vec<String> {
    let mut groups: Vec<(RequestId, Report, Fate, bool, Vec<Rank>)> = Vec::new();
    for m in made {
        let key = (m.request, m.report, m.fate, m.synthetic(t));
        match groups
            .iter_mut()
            .find(|(r, report, fate, synthetic, _)| (*r, *report, *fate, *synthetic) == key)
        {
            Some(group) => group.4.push(m.rank),
            None => groups.push((key.0, key.1, key.2, key.3, vec![m.rank])),
        }
    }
    groups
        .into_iter()
        .map(|(r, report, fate, synthetic, who)| {
            if synthetic {
                return format!(
                    "{} for req{r}, as vLLM's NIXL worker has every replicated PCP rank > 0 do (#53903){}",
                    replicas_words(t, &who),
                    fate_words(fate, who.len())
                );
            }
            let verb = if who.len() == 1 { "reports" } else { "report" };
            format!(
                "{} {verb} {}{}",
                ranks(side, &who),
                report_words(report, r),
                fate_words(fate, who.len())
            )
        })
        .collect()
}

fn notification_line(n: &Notification, t: &Topology, after: &State) -> String {
    let (d, p, r) = (n.plan.decoder, n.plan.source, n.request);
    if n.lost {
        return format!("the notification to P rank {p} is LOST");
    }
    let via = n.via;
    if n.on_its_way > 0 {
        let copies = if n.on_its_way > 1 {
            " TWICE [FAULT duplicated]"
        } else {
            ""
        };
        return format!("D rank {d}'s {via} for req{r} is on its way to P rank {p}{copies}");
    }
    if n.unrecognised {
        return format!(
            "P rank {p} does not recognise the request id in D rank {d}'s {via} (D's own id for req{r}, not P's), logs it and drops it"
        );
    }
    if !n.counted {
        return format!("P rank {p} was already done with req{r} and only logs D rank {d}'s {via}");
    }
    let cell = after.prefill_cell(p, r);
    let expected = t.expected_consumers[usize::from(p)];
    format!(
        "P rank {p} counts D rank {d}'s {via} for req{r} ({}/{expected}){}",
        cell.notifications,
        count_outcome(t, cell.send, r)
    )
}

/// An aggregator's changes at a step: countdowns opened or moved, ids emitted.
fn aggregator_lines(
    before: &SortedAggregator<RequestId>,
    after: &SortedAggregator<RequestId>,
    emitted: &[(Direction, RequestId)],
) -> Vec<String> {
    let mut lines = Vec::new();
    for direction in [Direction::Sending, Direction::Recving] {
        let ids: std::collections::BTreeSet<&RequestId> = before
            .open_ids(direction)
            .chain(after.open_ids(direction))
            .collect();
        for id in ids {
            let (b, a) = (
                before.remaining(direction, id),
                after.remaining(direction, id),
            );
            if let (Some(to_go), true) = (a, a != b) {
                lines.push(format!("{direction} req{id} {to_go} to go"));
            }
        }
    }
    for (direction, id) in emitted {
        lines.push(format!("emits {direction} req{id}"));
    }
    lines
}

/// The ids a step emitted, by the requests' emission marks.
fn emitted(engine_prefill: bool, before: &State, after: &State) -> Vec<(Direction, RequestId)> {
    let bits: &[(Direction, u8)] = if engine_prefill {
        &[
            (Direction::Sending, Request::EMITTED_SEND),
            (Direction::Recving, Request::EMITTED_LOAD),
        ]
    } else {
        &[(Direction::Recving, Request::EMITTED_RECV)]
    };
    let mut ids = Vec::new();
    for &(direction, bit) in bits {
        for (r, (b, a)) in before.requests.iter().zip(&after.requests).enumerate() {
            if a.emitted & bit != 0 && b.emitted & bit == 0 {
                ids.push((direction, r as RequestId));
            }
        }
    }
    ids
}

/// The schedulers' request phases a step changed, as (engine, `req0 → blocks freed`).
fn scheduler_lines(before: &State, after: &State) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    for (r, (b, a)) in before.requests.iter().zip(&after.requests).enumerate() {
        if a.prefill != b.prefill {
            lines.push((
                "P",
                format!("req{r} → {}", describe::prefill_phase(a.prefill)),
            ));
        }
        if a.decode != b.decode {
            let phase = describe::decode_phase(a);
            lines.push(("D", format!("req{r} → {phase}")));
        }
    }
    lines
}

/// What an engine step's aggregator did: countdowns moved, ids emitted.
fn counted_lines(prefill: bool, before: &State, after: &State) -> Vec<String> {
    let (b, a) = if prefill {
        (&before.prefill_aggregator, &after.prefill_aggregator)
    } else {
        (&before.decode_aggregator, &after.decode_aggregator)
    };
    aggregator_lines(b, a, &emitted(prefill, before, after))
}

/// What an engine step's aggregator and scheduler did, in the step's line.
fn outcome_lines(t: &Topology, engine: &str, before: &State, after: &State) -> Vec<String> {
    let mut lines: Vec<String> = counted_lines(engine == "P", before, after)
        .into_iter()
        .map(|l| format!("{engine} aggregator: {l}"))
        .collect();
    lines.extend(
        scheduler_lines(before, after)
            .into_iter()
            .map(|(side, l)| format!("{side} scheduler: {l}")),
    );
    lines.extend(
        emitted(engine == "P", before, after)
            .into_iter()
            .filter(|_| t.drops_stale_completions)
            .filter(|&(_, r)| dropped_as_stale(engine == "P", r, before, after))
            .map(|(_, r)| {
                format!(
                    "{engine} scheduler: req{r} is no longer known, the completion is dropped \
                     (scheduler.unknown-completion = drop)"
                )
            }),
    );
    lines
}

/// An emitted id the scheduler skipped (under `scheduler.unknown-completion = "drop"`):
/// its request was already forgotten.
fn dropped_as_stale(prefill: bool, r: RequestId, before: &State, after: &State) -> bool {
    let (b, a) = (
        &before.requests[usize::from(r)],
        &after.requests[usize::from(r)],
    );
    if prefill {
        a.prefill == b.prefill && a.prefill.forgotten()
    } else {
        a.decode == b.decode && a.decode.forgotten()
    }
}

/// D's pool after a step that can change it (`decode.kv-blocks`).
fn pool_line(t: &Topology, after: &State) -> Option<String> {
    let (free, pool) = (after.decode_blocks_free()?, t.decode_blocks?);
    Some(format!("D pool: {free} of {pool} blocks free"))
}

fn incident_line(before: &State, after: &State) -> Option<String> {
    let new = Incidents(after.incidents.0 & !before.incidents.0);
    (new.0 != 0).then(|| format!("INCIDENT: {}", describe::incidents(new)))
}

/// Reads a step posted: (D rank, request, the P ranks it reads, whether a handshake
/// comes first).
fn posted(t: &Topology, before: &State, after: &State) -> Vec<(Rank, RequestId, Vec<Rank>, bool)> {
    let mut posted = Vec::new();
    for r in 0..after.request_count() as RequestId {
        for d in 0..t.decode_world {
            let new: Vec<usize> = t
                .handles_of(d)
                .filter(|&h| before.handle(h, r) == HandlePhase::NotPosted)
                .filter(|&h| after.handle(h, r) != HandlePhase::NotPosted)
                .collect();
            if let Some(&first) = new.first() {
                let sources = new.iter().map(|&h| t.handles[h].source).collect();
                let handshake = after.handle(first, r) == HandlePhase::Handshaking;
                posted.push((d, r, sources, handshake));
            }
        }
    }
    posted
}

fn posted_words(r: RequestId, sources: &[Rank], handshake: bool) -> String {
    let how = if handshake {
        "starts its handshake to read"
    } else {
        "starts reading"
    };
    format!("{how} req{r} from {}", ranks("P", sources))
}

/// What D's workers started or settled at a step: reads posted, handshakes begun, D
/// ranks done with their reads or silent for good.
fn worker_lines(t: &Topology, before: &State, after: &State) -> Vec<String> {
    let mut lines: Vec<String> = posted(t, before, after)
        .into_iter()
        .map(|(d, r, sources, handshake)| {
            if t.push {
                let verb = if sources.len() == 1 {
                    "starts"
                } else {
                    "start"
                };
                format!(
                    "{} {verb} writing req{r} into D rank {d}",
                    ranks("P", &sources)
                )
            } else {
                format!("D rank {d} {}", posted_words(r, &sources, handshake))
            }
        })
        .collect();
    for r in 0..after.request_count() as RequestId {
        for d in 0..t.decode_world {
            let (b, a) = (before.decode_cell(d, r), after.decode_cell(d, r));
            if a == b {
                continue;
            }
            let sync = after.requests[usize::from(r)].decode == DecodePhase::SyncLoading;
            match a {
                DecodeCell::Done { failed: false } if sync => lines.push(format!(
                    "D rank {d} is done loading req{r}: the step waiting for it can end"
                )),
                DecodeCell::Done { failed: true } if sync => lines.push(format!(
                    "D rank {d} gives up on req{r}: the step waiting for it ends with its blocks invalid"
                )),
                DecodeCell::Done { failed: false } if b != DecodeCell::Idle => lines.push(format!(
                    "D rank {d} is done with req{r}: it reports it received at its next step"
                )),
                DecodeCell::Done { failed: true } => lines.push(format!(
                    "D rank {d} gives up on req{r}: it reports it failed at its next step"
                )),
                DecodeCell::Done { failed: false } => lines.push(format!(
                    "D rank {d} has req{r} from its prefix cache: it reports it received at its next step"
                )),
                DecodeCell::Silent => lines.push(format!(
                    "D rank {d} will never report req{r}"
                )),
                _ => {}
            }
        }
    }
    lines
}

/// A push WRITE done: D counts its notification, and P's rank learns of its own WRITE.
fn push_lines(
    t: &Topology,
    handle: usize,
    r: RequestId,
    before: &State,
    after: &State,
) -> Vec<String> {
    let Some(plan) = t.handles.get(handle) else {
        return Vec::new();
    };
    let (p, d) = (plan.source, plan.decoder);
    let (counted, expected) = describe::handles_done(after, t.handles_of(d), r);
    let mut lines = vec![format!(
        "D rank {d} counts P rank {p}'s notification for req{r} ({counted}/{expected})"
    )];
    let (written, writes) = describe::handles_done(after, t.handles_reading(p), r);
    let (was, is) = (
        before.prefill_cell(p, r).send,
        after.prefill_cell(p, r).send,
    );
    if written == writes && was != is {
        lines.push(format!(
            "P rank {p}'s WRITEs of req{r} are all done: it reports req{r} sent at its next step"
        ));
    } else if written == writes && matches!(is, SendPhase::InBatch | SendPhase::ToSend) {
        let rescue = if t.leases {
            "only its lease can free it"
        } else {
            "nothing else reports it"
        };
        lines.push(format!(
            "P rank {p}'s WRITEs of req{r} are all done, but their completions are FILTERED out: P never reports req{r}, {rescue}"
        ));
    }
    lines
}

/// Expired leases a P step's reaper left behind a live one.
fn skipped_lines(t: &Topology, after: &State) -> Vec<String> {
    let mut lines = Vec::new();
    for k in 0..t.prefill_world {
        for r in 0..after.request_count() as RequestId {
            if after.prefill_cell(k, r).send != SendPhase::Expired {
                continue;
            }
            if let Some(q) = crate::rank::reaper_stop(after, k, r) {
                lines.push(format!(
                    "P rank {k}'s reaper stops at req{q}, whose lease is live, and skips req{r}, whose lease expired"
                ));
            }
        }
    }
    lines
}

/// P workers' own changes outside reports: leases armed, stores started.
fn prefill_worker_lines(t: &Topology, before: &State, after: &State) -> Vec<String> {
    let mut lines = Vec::new();
    for r in 0..after.request_count() as RequestId {
        let armed: Vec<Rank> = (0..t.prefill_world)
            .filter(|&k| {
                before.prefill_cell(k, r).send != SendPhase::ToSend
                    && after.prefill_cell(k, r).send == SendPhase::ToSend
            })
            .collect();
        if !armed.is_empty() && t.leases {
            lines.push(format!(
                "{} arm{} a lease on req{r}",
                ranks("P", &armed),
                if armed.len() == 1 { "s" } else { "" }
            ));
        }
        let silent: Vec<Rank> = (0..t.prefill_world)
            .filter(|&k| {
                before.prefill_cell(k, r).send != SendPhase::Silent
                    && after.prefill_cell(k, r).send == SendPhase::Silent
            })
            .collect();
        if !silent.is_empty() {
            lines.push(format!("{} will never report req{r}", ranks("P", &silent)));
        }
        let storing = (0..t.prefill_world).any(|k| {
            before.prefill_cell(k, r).store != StorePhase::Storing
                && after.prefill_cell(k, r).store == StorePhase::Storing
        });
        if storing {
            lines.push(format!(
                "the offloading child starts storing req{r} on every P worker"
            ));
        }
    }
    lines
}

/// Synchronous loads whose step ended at this step, and outputs of steps in flight at a
/// rewind (`consumer.load = "synchronous"`).
fn sync_load_lines(before: &State, after: &State) -> Vec<String> {
    let mut lines = Vec::new();
    for (r, (b, a)) in before.requests.iter().zip(&after.requests).enumerate() {
        match b.decode {
            DecodePhase::SyncLoading if a.decode != b.decode => {
                lines.push(if a.emitted & Request::EMITTED_FAILURE != 0 {
                    format!("the step that loaded req{r} ends, its workers naming the blocks its load failed to fill (invalid blocks)")
                } else {
                    format!("the step that loaded req{r} ends, its workers naming no invalid blocks")
                })
            }
            DecodePhase::Rewound if a.stale_token => lines.push(format!(
                "the step scheduled before req{r}'s rewind returns a token computed over the unfilled blocks, and it is delivered (scheduler.rewound-in-flight-output = delivered)"
            )),
            DecodePhase::Rewound => lines.push(format!(
                "the step scheduled before req{r}'s rewind returns its output, dropped as stale (scheduler.rewound-in-flight-output = discarded)"
            )),
            _ => {}
        }
    }
    lines
}

/// Requests whose connector metadata reached the workers at this step.
fn metadata_lines(prefill: bool, before: &State, after: &State) -> Vec<String> {
    before
        .requests
        .iter()
        .zip(&after.requests)
        .enumerate()
        .filter_map(|(r, (b, a))| {
            let (was, is, what) = if prefill {
                (b.send_meta, a.send_meta, "send")
            } else {
                (b.recv_meta, a.recv_meta, "load")
            };
            match (was, is) {
                (Metadata::Due(_), Metadata::Delivered) => {
                    Some(format!("{what} metadata of req{r} reaches the workers"))
                }
                // With async scheduling the batch now running was scheduled before the
                // request's metadata existed; it rides in the next one.
                (Metadata::Due(_), Metadata::Due(_)) if was != is => Some(format!(
                    "{what} metadata of req{r} waits for the next batch \
                     (async scheduling: this one was scheduled before it)"
                )),
                _ => None,
            }
        })
        .collect()
}

/// The line a trace prints for a step: the action as a reviewer would say it
/// ([`describe::action`]), then what it did.
pub fn step(t: &Topology, action: &Action, before: &State, after: &State) -> String {
    let head = describe::action(t, action);
    let mut what = Vec::new();
    match *action {
        Action::PrefillEngineSteps { .. } => {
            what.extend(metadata_lines(true, before, after));
            what.extend(prefill_worker_lines(t, before, after));
            what.extend(skipped_lines(t, after));
            what.extend(report_lines(t, "P", &reports(action, before, after)));
            what.extend(outcome_lines(t, "P", before, after));
            if what.is_empty() {
                what.push("nothing reported".into());
            }
        }
        Action::DecodeEngineSteps { .. } => {
            what.extend(metadata_lines(false, before, after));
            what.extend(worker_lines(t, before, after));
            what.extend(
                notifications(t, action, before, after)
                    .iter()
                    .map(|n| notification_line(n, t, after)),
            );
            what.extend(report_lines(t, "D", &reports(action, before, after)));
            what.extend(sync_load_lines(before, after));
            what.extend(outcome_lines(t, "D", before, after));
            if what.is_empty() {
                what.push("nothing reported".into());
            }
            what.extend(pool_line(t, after));
        }
        Action::ReadCompletes {
            handle, request, ..
        } if t.push => {
            what.extend(push_lines(t, usize::from(handle), request, before, after));
            what.extend(worker_lines(t, before, after));
        }
        Action::ReadCompletes { .. } => {
            what.extend(
                notifications(t, action, before, after)
                    .iter()
                    .filter(|n| !n.lost)
                    .map(|n| notification_line(n, t, after)),
            );
            what.extend(worker_lines(t, before, after));
        }
        Action::ReadFails { .. } | Action::HandshakeCompletes { .. } => {
            what.extend(worker_lines(t, before, after));
        }
        Action::NotificationArrives { rank, request } => {
            what.push(arrival_words(t, rank, request, before, after))
        }
        Action::LeaseExpires { rank, request } => {
            let reading: Vec<Rank> = t
                .handles_reading(rank)
                .filter(|&h| after.handle(h, request) == HandlePhase::Reading)
                .map(|h| t.handles[h].decoder)
                .collect();
            let still = match (reading.len(), t.push) {
                (0, _) => String::new(),
                (_, true) => format!(", while it still writes it into {},", ranks("D", &reading)),
                (1, false) => format!(", while {} still reads it,", ranks("D", &reading)),
                (_, false) => format!(", while {} still read it,", ranks("D", &reading)),
            };
            if t.heartbeats_unrecognised {
                what.push(format!(
                    "D's heartbeats name D's own id for req{request}, which P ignores: nothing renewed the lease"
                ));
            }
            match crate::rank::reaper_stop(after, rank, request) {
                Some(q) => what.push(format!(
                    "its reaper stops at req{q}, an earlier entry whose lease D keeps renewing, so req{request} stays HELD past its deadline{still}"
                )),
                None => what.push(format!(
                    "P rank {rank} counts req{request} as sent{still} and reports it at its next step"
                )),
            }
        }
        Action::PrefillFinishes { .. } => what.extend(prefill_worker_lines(t, before, after)),
        Action::StaleStoreCompletes { rank, request } => {
            if t.store_ledger == crate::config::StoreLedger::PerRequest {
                what.push(format!(
                    "one count per request id: it counts down req{request}'s current store count on P rank {rank}, now {}",
                    crate::rank::store_count(after, rank, request)
                ));
            }
        }
        Action::OffloadStoreRaises { rank, request } => {
            what.push(match after.prefill_cell(rank, request).store {
                StorePhase::Leaked => format!(
                    "its store count is never brought down: P rank {rank} will never forward req{request}'s send"
                ),
                _ => format!("counted down all the same: it no longer holds req{request}'s send back"),
            })
        }
        Action::PrefillPreemptedInFinalStep { request } => {
            what.push(match after.requests[usize::from(request)].prefill {
                PrefillPhase::FinishedEmpty => format!(
                    "the stale output still finishes req{request}: request_finished() gets no blocks, delays no free, and D's transfer parameters name no remote blocks"
                ),
                _ => format!(
                    "the stale output is dropped: req{request} waits and is prefilled again"
                ),
            })
        }
        Action::ClientAborts { .. } => what.extend(
            scheduler_lines(before, after)
                .into_iter()
                .map(|(side, l)| format!("{side} scheduler: {l}")),
        ),
        Action::DecodeRejects { .. } => what.extend(
            notifications(t, action, before, after)
                .iter()
                .map(|n| notification_line(n, t, after)),
        ),
        Action::DecodeFinishes { .. } => what.extend(pool_line(t, after)),
        Action::DecodePreempted { request } => {
            what.push(
                match after.requests[usize::from(request)].decode {
                    DecodePhase::Queued => format!(
                        "its connector will ask for a SECOND load of req{request} when the scan takes it (consumer.lookup-after-load = second-load), and P sends its KV once"
                    ),
                    _ => format!(
                        "its transfer parameters are spent (do_remote_prefill cleared at its first allocation): the scan will prefill req{request} locally"
                    ),
                },
            );
            what.extend(pool_line(t, after));
        }
        Action::PrefillWorkerLoads { .. }
        | Action::LookupAnswers { .. }
        | Action::DecodeAdmits { .. }
        | Action::DecoderCrashes { .. }
        | Action::DecodeChildLoads { .. }
        | Action::ChildReportsAgain { .. }
        | Action::PrefillPreempted { .. } => {}
    }
    what.extend(incident_line(before, after));
    if what.is_empty() {
        head
    } else {
        format!("{head} — {}", what.join("; "))
    }
}

/// A step as the explorer shows it: its line, then every fact after it, the ones it
/// changed marked `*` with their value before — the text trace's words, whole.
pub fn explained(t: &Topology, action: &Action, before: &State, after: &State) -> String {
    let mut out = step(t, action, before, after);
    out += "\n\n";
    let was = describe::facts(before);
    for (name, value) in describe::facts(after) {
        match was.get(&name) {
            Some(old) if *old == value => out += &format!("  {name}: {value}\n"),
            Some(old) => out += &format!("* {name}: {value}   (was: {old})\n"),
            None => out += &format!("* {name}: {value}   (new)\n"),
        }
    }
    out
}

/// The messages and notes a sequence diagram draws for a step: every report (one the
/// connector cleared or the executor dropped is lost, from the rank that made it), every
/// read and notification (a lost or ignored one is lost), every emission and free.
pub fn events(t: &Topology, action: &Action, before: &State, after: &State) -> Vec<Event> {
    use Party::*;
    let message = |from, to, text: String, lost| Event {
        from,
        to: Some(to),
        text,
        lost,
    };
    let note = |at, text: String| Event {
        from: at,
        to: None,
        text,
        lost: false,
    };
    let mut events = Vec::new();
    for n in notifications(t, action, before, after) {
        let (d, p, r) = (n.plan.decoder, n.plan.source, n.request);
        let how = match n.via {
            "notification" => format!("read req{r} done + notify"),
            via => format!("req{r} {via}"),
        };
        let (text, lost) = if n.lost {
            (format!("{how}: notification LOST [FAULT]"), true)
        } else if n.on_its_way > 1 {
            (format!("{how}: sent TWICE [FAULT], on its way"), false)
        } else if n.on_its_way > 0 {
            (format!("{how}: on its way"), false)
        } else if n.unrecognised {
            (format!("{how} with D's id: unrecognised, dropped"), true)
        } else if !n.counted {
            (format!("{how}: ignored, P rank {p} was already done"), true)
        } else {
            let cell = after.prefill_cell(p, r);
            let expected = t.expected_consumers[usize::from(p)];
            (format!("{how} ({}/{expected})", cell.notifications), false)
        };
        events.push(message(DecodeRank(d), PrefillRank(p), text, lost));
    }
    match *action {
        Action::PrefillFinishes { request } => events.push(note(
            PrefillScheduler,
            format!("req{request} finishes prefill, free delayed"),
        )),
        Action::PrefillWorkerLoads { rank, request } => events.push(note(
            PrefillRank(rank),
            format!("req{request} own KV load done"),
        )),
        Action::DecodeChildLoads { decoder, request } => events.push(note(
            DecodeRank(decoder),
            format!("offloading child: req{request} loaded"),
        )),
        Action::ChildReportsAgain { decoder, request } => events.push(note(
            DecodeRank(decoder),
            format!("[FAULT] NIXL repeats req{request}'s finished load"),
        )),
        Action::PrefillPreempted { request } => events.push(note(
            PrefillScheduler,
            format!("[FAULT] req{request} preempted mid-prefill, prefilled again"),
        )),
        Action::StaleStoreCompletes { rank, request } => events.push(note(
            PrefillRank(rank),
            format!("pre-preemption store of req{request} done"),
        )),
        Action::OffloadStoreRaises { rank, request } => events.push(note(
            PrefillRank(rank),
            format!("[FAULT] offloading store of req{request} raises"),
        )),
        Action::LeaseExpires { rank, request } => events.push(note(
            PrefillRank(rank),
            format!("lease on req{request} expires, counts it as sent"),
        )),
        Action::NotificationArrives { rank, request } => events.push(note(
            PrefillRank(rank),
            arrival_words(t, rank, request, before, after),
        )),
        Action::DecodeFinishes { request } => events.push(note(
            DecodeScheduler,
            format!("req{request} finishes, blocks returned"),
        )),
        Action::PrefillPreemptedInFinalStep { request } => events.push(note(
            PrefillScheduler,
            format!("[FAULT] req{request} preempted in its final step"),
        )),
        Action::DecodePreempted { request } => events.push(note(
            DecodeScheduler,
            format!("[FAULT] req{request} preempted after its load"),
        )),
        Action::LookupAnswers { request } => events.push(note(
            DecodeScheduler,
            format!("lookup for req{request} answers"),
        )),
        Action::DecodeAdmits {
            request,
            prefix_hit,
        } => {
            let how = match (prefix_hit, t.decode_blocks.is_some()) {
                (true, false) => "full prefix hit, notify-only",
                (true, true) => "queued for blocks, full prefix hit (notify-only)",
                (false, true) => "queued for blocks",
                (false, false) => "waits for remote KV",
            };
            events.push(message(
                Client,
                DecodeScheduler,
                format!("req{request} admitted, {how}"),
                false,
            ));
        }
        Action::DecoderCrashes { request } => events.push(note(
            DecodeScheduler,
            format!("[FAULT] D crashes before reading req{request}"),
        )),
        Action::DecodeRejects { request } => events.push(note(
            DecodeScheduler,
            format!("[FAULT] req{request} rejected before admission"),
        )),
        Action::HandshakeCompletes {
            decoder,
            request,
            ok,
        } => {
            let source = t
                .handles_of(decoder)
                .next()
                .map_or(0, |h| t.handles[h].source);
            let text = if ok {
                format!("handshake for req{request} ok")
            } else {
                format!("handshake for req{request} FAILS [FAULT]")
            };
            events.push(message(DecodeRank(decoder), PrefillRank(source), text, !ok));
        }
        Action::ReadFails { handle, request } => {
            let plan = t.handles[usize::from(handle)];
            events.push(message(
                DecodeRank(plan.decoder),
                PrefillRank(plan.source),
                format!("read req{request} FAILS [FAULT]"),
                true,
            ));
        }
        Action::ClientAborts { request } => events.push(message(
            Client,
            PrefillScheduler,
            format!("[FAULT] abort req{request} (D hears too)"),
            false,
        )),
        Action::PrefillEngineSteps {
            announces_count,
            stores_done,
            ..
        } => {
            for m in reports(action, before, after) {
                events.push(report_event(t, PrefillRank(m.rank), PrefillAggregator, m));
            }
            let mut marks = String::new();
            if !stores_done.is_empty() {
                marks += &format!(" [stores done: {}]", describe::stores(&stores_done));
            }
            if announces_count {
                marks += " [count announced]";
            }
            marks += &step_fault_label(action);
            if let Some(label) = step_label(true, before, after, &marks) {
                events.push(message(PrefillAggregator, PrefillScheduler, label, false));
            }
        }
        Action::DecodeEngineSteps { .. } => {
            for (d, r, sources, handshake) in posted(t, before, after) {
                let words = if t.push {
                    let verb = if sources.len() == 1 {
                        "starts"
                    } else {
                        "start"
                    };
                    format!("{} {verb} writing req{r} here", ranks("P", &sources))
                } else {
                    posted_words(r, &sources, handshake)
                };
                events.push(note(DecodeRank(d), words));
            }
            for m in reports(action, before, after) {
                events.push(report_event(t, DecodeRank(m.rank), DecodeAggregator, m));
            }
            if let Some(label) = step_label(false, before, after, &step_fault_label(action)) {
                events.push(message(DecodeAggregator, DecodeScheduler, label, false));
            }
        }
        Action::ReadCompletes {
            handle, request, ..
        } if t.push => {
            if let Some(plan) = t.handles.get(usize::from(handle)) {
                let (counted, expected) =
                    describe::handles_done(after, t.handles_of(plan.decoder), request);
                events.push(message(
                    PrefillRank(plan.source),
                    DecodeRank(plan.decoder),
                    format!("WRITE req{request} done + notify ({counted}/{expected})"),
                    false,
                ));
            }
        }
        Action::ReadCompletes { .. } => {}
    }
    events
}

/// An engine step's faults, as the end of its diagram label.
fn step_fault_label(action: &Action) -> String {
    let (lost, raised) = action.step_faults().unwrap_or_default();
    let mut label = String::new();
    if lost {
        label += " [FAULT output lost, step dropped]";
    }
    if raised {
        label += " [FAULT a worker raised, step retried]";
    }
    label
}

fn report_event(t: &Topology, from: Party, to: Party, m: Made) -> Event {
    let what = if m.synthetic(t) {
        format!("synthetic done req{} (replica, sent nothing)", m.request)
    } else {
        report_words(m.report, m.request)
    };
    let text = match m.fate {
        Fate::Reached => what,
        Fate::Cleared => format!("{what}, DROPPED by {REPLICA_CLEAR_FUNCTION}"),
        Fate::Dropped => format!("{what}, LOST with the dropped step"),
        Fate::Raised => format!("{what}, LOST with the failed step"),
    };
    Event {
        from,
        to: Some(to),
        text,
        lost: m.fate != Fate::Reached,
    }
}

/// An engine step's arrow from its aggregator to its scheduler: what was counted,
/// emitted, freed or woken, then `marks` (faults, stores done, a count announced). None
/// for a step that did none of it: an arrow saying "nothing" is noise on the diagram,
/// and the steps under it still list the step.
fn step_label(prefill: bool, before: &State, after: &State, marks: &str) -> Option<String> {
    let mut parts = counted_lines(prefill, before, after);
    parts.extend(scheduler_lines(before, after).into_iter().map(|(_, l)| l));
    parts.extend(incident_line(before, after));
    match (parts.is_empty(), marks.is_empty()) {
        (true, true) => None,
        (true, false) => Some(format!("step:{marks}")),
        (false, _) => Some(format!("step: {}{marks}", parts.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::base;
    use crate::model::ContractModel;

    /// Walks `actions` from the initial state; returns each step's line.
    fn lines(model: &ContractModel, actions: &[Action]) -> Vec<String> {
        let mut state = model.initial_state();
        let mut out = Vec::new();
        for action in actions {
            let next = model
                .apply(&state, *action)
                .expect("the action is a transition");
            out.push(step(model.topology, action, &state, &next));
            state = next;
        }
        out
    }

    fn seed_actions() -> Vec<Action> {
        vec![
            Action::PrefillFinishes { request: 0 },
            Action::DecodeAdmits {
                request: 0,
                prefix_hit: false,
            },
            Action::DecodeEngineSteps {
                output_lost: false,
                raised: false,
            },
            Action::ReadCompletes {
                handle: 0,
                request: 0,
                notification_lost: false,
                notification_duplicated: false,
            },
            Action::PrefillEngineSteps {
                output_lost: false,
                announces_count: false,
                stores_done: Default::default(),
                raised: false,
            },
        ]
    }

    #[test]
    fn a_rejection_says_whether_p_heard_of_it() {
        let reject = [
            Action::PrefillFinishes { request: 0 },
            Action::DecodeRejects { request: 0 },
        ];
        let mut c = base();
        c.faults.rejected_before_admission = true;
        let told = lines(&ContractModel::new(c.clone()), &reject);
        assert!(
            told[1].contains("P rank 0 counts D rank 0's rejection notice for req0 (1/1)"),
            "{}",
            told[1]
        );
        // Twin: without #41269's notice the step says nothing reached P.
        c.consumer.rejection_notice = crate::config::RejectionNotice::None;
        let silent = lines(&ContractModel::new(c), &reject);
        assert!(!silent[1].contains("P rank"), "{}", silent[1]);
    }

    #[test]
    fn the_seed_bug_step_says_which_report_the_connector_cleared() {
        let mut c = base();
        c.producer.clear_replicated = true;
        let model = ContractModel::new(c);
        let lines = lines(&model, &seed_actions());
        assert!(
            lines[3].contains("P rank 0 counts D rank 0's notification for req0 (1/1)"),
            "{}",
            lines[3]
        );
        assert!(
            lines[4].contains("P rank 0 reports req0 sent;"),
            "{}",
            lines[4]
        );
        assert!(
            lines[4].contains("P rank 1 (a PCP replica: it holds a copy of P rank 0's KV and sends nothing) makes its synthetic \"done\" report for req0")
                && lines[4].contains("DROPS it before the aggregator: NixlBaseConnector.get_transfer_results"),
            "{}",
            lines[4]
        );
        assert!(
            lines[4].contains("P aggregator: finished_sending req0 1 to go"),
            "{}",
            lines[4]
        );
    }

    /// Walks `actions`; returns the last step's line and events.
    fn last_step(model: &ContractModel, actions: &[Action]) -> (String, Vec<Event>) {
        let mut state = model.initial_state();
        for action in &actions[..actions.len() - 1] {
            state = model.apply(&state, *action).expect("a transition");
        }
        let action = actions[actions.len() - 1];
        let next = model.apply(&state, action).expect("a transition");
        (
            step(model.topology, &action, &state, &next),
            events(model.topology, &action, &state, &next),
        )
    }

    fn p_step(output_lost: bool) -> Action {
        Action::PrefillEngineSteps {
            output_lost,
            announces_count: false,
            stores_done: Default::default(),
            raised: false,
        }
    }

    #[test]
    fn a_notification_after_the_lease_expired_is_only_logged_and_drawn_lost() {
        let model = ContractModel::new(base());
        let read = Action::ReadCompletes {
            handle: 0,
            request: 0,
            notification_lost: false,
            notification_duplicated: false,
        };
        let actions = [
            Action::PrefillFinishes { request: 0 },
            p_step(false),
            Action::LeaseExpires {
                rank: 0,
                request: 0,
            },
            Action::DecodeAdmits {
                request: 0,
                prefix_hit: false,
            },
            Action::DecodeEngineSteps {
                output_lost: false,
                raised: false,
            },
            read,
        ];
        let (line, events) = last_step(&model, &actions);
        assert!(
            line.contains(
                "P rank 0 was already done with req0 and only logs D rank 0's notification"
            ),
            "{line}"
        );
        let notification = &events[0];
        assert_eq!(notification.from, Party::DecodeRank(0));
        assert_eq!(notification.to, Some(Party::PrefillRank(0)));
        assert!(notification.lost, "{notification:?}");
        // The twin: the same read before the lease expired is counted.
        let mut counted = actions.to_vec();
        counted.remove(2);
        let (line, events) = last_step(&model, &counted);
        assert!(
            line.contains("P rank 0 counts D rank 0's notification"),
            "{line}"
        );
        assert!(!events[0].lost, "{:?}", events[0]);
    }

    #[test]
    fn a_dropped_step_draws_every_report_it_carried_as_lost() {
        let model = ContractModel::new(base());
        let mut actions = seed_actions();
        actions[4] = p_step(true);
        let (line, events) = last_step(&model, &actions);
        assert!(
            // Rank 1 is a PCP replica: what the dropped step carried from it is its
            // synthetic report, lost with the step as rank 0's real one is.
            line.contains("P rank 0 reports req0 sent, LOST with the dropped step")
                && line.contains("makes its synthetic \"done\" report for req0")
                && line.ends_with("LOST with the dropped step"),
            "{line}"
        );
        let reports: Vec<&Event> = events
            .iter()
            .filter(|e| e.to == Some(Party::PrefillAggregator))
            .collect();
        assert_eq!(reports.len(), 2, "{events:?}");
        assert!(reports.iter().all(|e| e.lost), "{reports:?}");
        // The twin: the same step with its output is drawn arriving.
        let (_, events) = last_step(&model, &seed_actions());
        assert!(events
            .iter()
            .filter(|e| e.to == Some(Party::PrefillAggregator))
            .all(|e| !e.lost));
    }

    /// Every action the model counts as a fault is marked `[FAULT` and no other is; a
    /// lease expiry, and only that, says `expires`: a reader and a script can count them.
    #[test]
    fn faults_are_marked_and_expiries_say_so() {
        let model = ContractModel::new(base());
        let mut actions = vec![
            Action::PrefillFinishes { request: 0 },
            Action::PrefillWorkerLoads {
                rank: 0,
                request: 0,
            },
            Action::LeaseExpires {
                rank: 0,
                request: 0,
            },
            Action::DecoderCrashes { request: 0 },
            Action::ReadFails {
                handle: 0,
                request: 0,
            },
            Action::ClientAborts { request: 0 },
        ];
        for on in [false, true] {
            actions.push(Action::DecodeAdmits {
                request: 0,
                prefix_hit: on,
            });
            actions.push(Action::HandshakeCompletes {
                decoder: 0,
                request: 0,
                ok: on,
            });
            actions.push(Action::ReadCompletes {
                handle: 0,
                request: 0,
                notification_lost: on,
                notification_duplicated: false,
            });
            actions.push(Action::DecodeEngineSteps {
                output_lost: on,
                raised: false,
            });
            for announces_count in [false, true] {
                actions.push(Action::PrefillEngineSteps {
                    output_lost: on,
                    announces_count,
                    stores_done: Default::default(),
                    raised: false,
                });
            }
        }
        for action in &actions {
            let line = describe::action(model.topology, action);
            assert_eq!(
                line.contains("[FAULT"),
                model.is_fault_action(action),
                "{line}"
            );
            assert_eq!(
                line.contains("expires"),
                matches!(action, Action::LeaseExpires { .. }),
                "{line}"
            );
        }
    }

    #[test]
    fn lease_words_only_where_the_spec_arms_leases() {
        // P steps before D reads, so the metadata arms the transfer rank's lease (when
        // the spec has leases) and the read's notification is counted after it.
        let actions = [
            Action::PrefillFinishes { request: 0 },
            Action::PrefillEngineSteps {
                output_lost: false,
                announces_count: false,
                stores_done: Default::default(),
                raised: false,
            },
            Action::DecodeAdmits {
                request: 0,
                prefix_hit: false,
            },
            Action::DecodeEngineSteps {
                output_lost: false,
                raised: false,
            },
            Action::ReadCompletes {
                handle: 0,
                request: 0,
                notification_lost: false,
                notification_duplicated: false,
            },
        ];
        for lease in [false, true] {
            let mut c = base();
            c.producer.lease = lease;
            let model = ContractModel::new(c);
            let text = lines(&model, &actions).join("\n");
            assert_eq!(text.contains("lease"), lease, "lease = {lease}:\n{text}");
        }
    }
}
