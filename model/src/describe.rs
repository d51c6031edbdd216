//! States and actions in vLLM's vocabulary, for traces, the explorer and reviewers.
//!
//! A state is described once, as typed facts grouped by request, rank, read handle and
//! aggregator ([`describe`]). Traces print them as a flat, ordered map of named facts
//! (`P req0`, `P rank1 (replica) req0`, `P aggregator finished_sending`, ...; only those a
//! step changed), and the ITF trace format stores the groups as maps of records.

use crate::action::Action;
use crate::config::{Config, Connector, ExpectedCount, FailedStep};
use crate::offload::StoresDone;
use crate::state::{
    DecodeCell, HandlePhase, LoadPhase, Metadata, PrefillPhase, SendPhase, StaleStore, State,
    StorePhase,
};
use crate::state::{DecodePhase, Incidents};
use crate::topology::Topology;
use kvcc_aggregator::{Direction, SortedAggregator};
use std::collections::BTreeMap;

/// Where an aggregator's expected finished count comes from, in vLLM's words (kvcc's
/// facts call it `E`): `world_size = tp 1 × pp 1 × pcp 2, because the connector's
/// get_finished_count() returns None`. `value` is the count a countdown was opened with;
/// None when it is neither the engine's count nor one a worker announced.
pub fn expected_count_source(config: &Config, prefill: bool, value: u32) -> Option<String> {
    let t = Topology::new(config);
    let (base, world) = if prefill {
        let p = &config.prefill;
        (
            t.prefill_expected,
            format!("tp {} × pp {} × pcp {}", p.tp, p.pp, p.pcp),
        )
    } else {
        (t.decode_expected, format!("D's tp {}", config.decode.tp))
    };
    let announced = if prefill { t.prefill_announced } else { None };
    if value != base {
        return (announced == Some(value)).then(|| {
            "announced by a worker output's expected_finished_count, which replaces the count for countdowns opened after it".to_string()
        });
    }
    let pcp = if prefill { config.prefill.pcp } else { 1 };
    Some(match (config.connector, config.expected_count) {
        (Connector::MultiOffload, _) => format!(
            "world_size = {world}, because the MultiConnector's get_finished_count() returns None: its offloading child's does"
        ),
        (_, ExpectedCount::WorldSize) => format!(
            "world_size = {world}, because the connector's get_finished_count() returns None"
        ),
        (_, ExpectedCount::WorldSizeOverPcp) => format!(
            "world_size // pcp_size = ({world}) // {pcp}, what the connector's get_finished_count() returns"
        ),
        (_, ExpectedCount::Fixed(_)) => {
            "what the connector's get_finished_count() returns".to_string()
        }
    })
}

/// One line for an action, as a reviewer would say it.
pub fn action(t: &Topology, action: &Action) -> String {
    match *action {
        Action::PrefillFinishes { request: r } => format!(
            "P scheduler: req{r} finishes prefill; request_finished() returns True (free delayed)"
        ),
        Action::PrefillWorkerLoads { rank, request } => {
            format!("P rank {rank}: its KV load of req{request} completes")
        }
        Action::PrefillEngineSteps {
            announces_count,
            stores_done,
            ..
        } => {
            let mut line = "P engine step".to_string();
            if !stores_done.is_empty() {
                line += &format!(
                    " [offloading stores done by the poll: {}]",
                    stores(&stores_done)
                );
            }
            if announces_count {
                line += &format!(
                    " [rank {} announces expected_finished_count={}]",
                    t.prefill_output_rank,
                    t.prefill_announced.unwrap_or(0)
                );
            }
            line + &step_fault_words(t, action)
        }
        Action::LeaseExpires { rank, request } => {
            format!("P rank {rank}: lease on req{request} expires")
        }
        Action::NotificationArrives { rank, request } => {
            format!("P rank {rank}: a D notification for req{request} arrives")
        }
        Action::PrefillPreemptedInFinalStep { request } => format!(
            "[FAULT] P scheduler: preempts req{request} (blocks freed) while its final step's output is in flight"
        ),
        Action::PrefillPreempted { request } => format!(
            "[FAULT] P scheduler: preempts req{request} mid-prefill (blocks freed, prefilled again); the offloading child's store jobs of what was computed keep running"
        ),
        Action::StaleStoreCompletes { rank, request } => format!(
            "P rank {rank}: the store job of req{request} from before its preemption completes"
        ),
        Action::OffloadStoreRaises { rank, request } => {
            format!("[FAULT] P rank {rank}: the offloading child's store of req{request} raises")
        }
        Action::DecodeAdmits {
            request,
            prefix_hit,
        } => {
            let hit = if prefix_hit {
                " with a full local prefix hit (notify-only)"
            } else {
                ""
            };
            if t.decode_blocks.is_some() {
                format!("D scheduler: req{request} joins the waiting queue{hit}")
            } else if prefix_hit {
                format!("D scheduler: admits req{request}{hit}")
            } else if t.sync_loads {
                format!(
                    "D scheduler: admits req{request} and runs it at once: its load goes with the step (synchronous)"
                )
            } else {
                format!("D scheduler: admits req{request}, WAITING_FOR_REMOTE_KVS")
            }
        }
        Action::DecodeFinishes { request } => {
            format!("D: req{request} finishes decoding, its blocks return to the pool")
        }
        Action::DecodePreempted { request } => format!(
            "[FAULT] D scheduler: preempts req{request}, running after its load (blocks back to the pool, head of WAITING, nothing computed)"
        ),
        Action::LookupAnswers { request } => format!(
            "D connector: the lookup for req{request} answers (the next scan gets its count)"
        ),
        Action::DecoderCrashes { request: r } => format!("[FAULT] D crashes before reading req{r}"),
        Action::DecodeRejects { request: r } => {
            format!("[FAULT] D's serving layer rejects req{r} before admitting it")
        }
        Action::HandshakeCompletes {
            decoder,
            request,
            ok,
        } => {
            let outcome = if ok { "succeeds" } else { "FAILS [FAULT]" };
            format!("D rank {decoder}: handshake with P for req{request} {outcome}")
        }
        Action::ReadCompletes {
            handle,
            request,
            notification_lost,
            notification_duplicated,
        } => {
            let note = if notification_lost {
                ", notification LOST [FAULT]"
            } else if notification_duplicated {
                ", notification DUPLICATED [FAULT]"
            } else {
                ""
            };
            format!("{}: {} of req{request} completes{note}", read(t, handle), transfer_noun(t))
        }
        Action::ReadFails { handle, request } => {
            format!("{}: {} of req{request} FAILS [FAULT]", read(t, handle), transfer_noun(t))
        }
        Action::DecodeChildLoads { decoder, request } => {
            format!("D rank {decoder}: its offloading child finishes loading its part of req{request}")
        }
        Action::ChildReportsAgain { decoder, request } => format!(
            "[FAULT] D rank {decoder}: NIXL hands over req{request}'s finished load once more, at the next step"
        ),
        Action::DecodeEngineSteps { .. } => {
            "D engine step".to_string() + &step_fault_words(t, action)
        }
        Action::ClientAborts { request: r } => format!("[FAULT] client aborts req{r}"),
    }
}

/// An engine step's faults, as the end of its line; what a raising step did follows
/// `scheduler.failed-step`.
fn step_fault_words(t: &Topology, action: &Action) -> String {
    let (lost, raised) = action.step_faults().unwrap_or_default();
    let mut words = String::new();
    if lost {
        words += " [FAULT: output rank's output missing, step dropped]";
    }
    if raised {
        words += match t.failed_step {
            FailedStep::RetryDropsReports => {
                " [FAULT: a worker raises; the step is retried, the finished ids the workers handed over are dropped]"
            }
            FailedStep::RetryKeepsReports | FailedStep::FailStop => {
                " [FAULT: a worker raises; the step is retried, its finished ids kept for the retry]"
            }
        };
    }
    words
}

/// The stores of a step, by request: `req0 on ranks 1, 2; req1 on rank 0`.
pub fn stores(stores: &StoresDone) -> String {
    let mut by_request: BTreeMap<u8, Vec<String>> = BTreeMap::new();
    for (rank, r) in stores.iter() {
        by_request.entry(r).or_default().push(rank.to_string());
    }
    by_request
        .iter()
        .map(|(r, ranks)| {
            let noun = if ranks.len() == 1 { "rank" } else { "ranks" };
            format!("req{r} on {noun} {}", ranks.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Of `handles`, how many are done for `r`, and how many there are.
pub fn handles_done(state: &State, handles: impl Iterator<Item = usize>, r: u8) -> (usize, usize) {
    handles.fold((0, 0), |(done, all), h| {
        (
            done + usize::from(state.handle(h, r) == HandlePhase::Done),
            all + 1,
        )
    })
}

fn done_value((done, all): (usize, usize)) -> Value {
    Value::Tup(vec![Value::Int(done as i64), Value::Int(all as i64)])
}

/// Who reads from whom through `handle`; an action from a trace may name a handle this
/// topology does not have, and is then described, not trusted.
fn read(topology: &crate::topology::Topology, handle: u16) -> String {
    match topology.handles.get(usize::from(handle)) {
        Some(plan) if topology.push => {
            format!("P rank {} (into D rank {})", plan.source, plan.decoder)
        }
        Some(plan) => format!("D rank {} (from P rank {})", plan.decoder, plan.source),
        None => format!("handle {handle} (not in this topology)"),
    }
}

/// What a handle moves data by: D's read, or P's WRITE in push mode.
pub fn transfer_noun(topology: &Topology) -> &'static str {
    transfer_noun_of(topology.push)
}

/// [`transfer_noun`], in push mode or not.
pub fn transfer_noun_of(push: bool) -> &'static str {
    if push {
        "WRITE"
    } else {
        "read"
    }
}

/// Every action's short, stable name, written once: [`action_name`] reads it, and so do
/// the tests that check a name the registries cite (`crate::message::MESSAGES`) is an
/// action's.
pub const ACTION_NAMES: [&str; 22] = [
    "PrefillFinishes",
    "PrefillWorkerLoads",
    "PrefillEngineSteps",
    "LeaseExpires",
    "NotificationArrives",
    "OffloadStoreRaises",
    "PrefillPreempted",
    "PrefillPreemptedInFinalStep",
    "StaleStoreCompletes",
    "DecodeAdmits",
    "DecoderCrashes",
    "DecodeRejects",
    "HandshakeCompletes",
    "ReadCompletes",
    "ReadFails",
    "DecodeChildLoads",
    "ChildReportsAgain",
    "DecodeEngineSteps",
    "ClientAborts",
    "DecodeFinishes",
    "LookupAnswers",
    "DecodePreempted",
];

/// A short, stable name for an action (for ITF `#meta.action` and the Mermaid diagram).
pub fn action_name(action: &Action) -> &'static str {
    let index = match action {
        Action::PrefillFinishes { .. } => 0,
        Action::PrefillWorkerLoads { .. } => 1,
        Action::PrefillEngineSteps { .. } => 2,
        Action::LeaseExpires { .. } => 3,
        Action::NotificationArrives { .. } => 4,
        Action::OffloadStoreRaises { .. } => 5,
        Action::PrefillPreempted { .. } => 6,
        Action::PrefillPreemptedInFinalStep { .. } => 7,
        Action::StaleStoreCompletes { .. } => 8,
        Action::DecodeAdmits { .. } => 9,
        Action::DecoderCrashes { .. } => 10,
        Action::DecodeRejects { .. } => 11,
        Action::HandshakeCompletes { .. } => 12,
        Action::ReadCompletes { .. } => 13,
        Action::ReadFails { .. } => 14,
        Action::DecodeChildLoads { .. } => 15,
        Action::ChildReportsAgain { .. } => 16,
        Action::DecodeEngineSteps { .. } => 17,
        Action::ClientAborts { .. } => 18,
        Action::DecodeFinishes { .. } => 19,
        Action::LookupAnswers { .. } => 20,
        Action::DecodePreempted { .. } => 21,
    };
    ACTION_NAMES[index]
}

/// A fact's value, typed as the Informal Trace Format types values (strings, integers,
/// sets, maps, tuples), so that tools reading a trace can compute on it; `Display` is how
/// traces print it for people.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Value {
    /// A phase or a name, in vLLM's words.
    Text(String),
    /// A request, printed `req0`.
    Request(u8),
    Int(i64),
    /// Reports an aggregator still waits for: an integer, printed `N to go`.
    Remaining(i64),
    /// Printed as its elements joined by `, `, or `-` when empty.
    Set(Vec<Value>),
    /// Printed as `key: value` pairs joined by `, `, or `-` when empty.
    Map(Vec<(Value, Value)>),
    /// Printed as its elements joined by `/` (`1/2`: one of two).
    Tup(Vec<Value>),
}

impl Value {
    fn text(text: impl Into<String>) -> Value {
        Value::Text(text.into())
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn joined(
            f: &mut std::fmt::Formatter<'_>,
            items: impl ExactSizeIterator<Item = String>,
            separator: &str,
        ) -> std::fmt::Result {
            if items.len() == 0 {
                return f.write_str("-");
            }
            f.write_str(&items.collect::<Vec<_>>().join(separator))
        }
        match self {
            Value::Text(s) => f.write_str(s),
            Value::Request(r) => write!(f, "req{r}"),
            Value::Int(n) => write!(f, "{n}"),
            Value::Remaining(n) => write!(f, "{n} to go"),
            Value::Set(items) => joined(f, items.iter().map(|v| v.to_string()), ", "),
            Value::Map(pairs) => joined(f, pairs.iter().map(|(k, v)| format!("{k}: {v}")), ", "),
            Value::Tup(items) => joined(f, items.iter().map(|v| v.to_string()), "/"),
        }
    }
}

/// Every fact of a state, by name, as text (see [`values`]).
pub fn facts(state: &State) -> BTreeMap<String, String> {
    values(state)
        .into_iter()
        .map(|(name, value)| (name, value.to_string()))
        .collect()
}

/// Every fact of a state, by name, typed (the flat view of [`describe`]). Facts at their
/// initial "nothing happened" value are still listed, so a diff shows every change.
pub fn values(state: &State) -> BTreeMap<String, Value> {
    describe(state).values()
}

/// One fact of a record: `name` is its field in a typed reader's record (ITF), `label`
/// what follows the record's own name in the flat view (`send metadata` in
/// `P req0 send metadata`; empty for the record's main fact, `P req0`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub label: &'static str,
    pub value: Slot,
}

/// A fact every state of every topology has, or one a state or its topology may lack
/// (ITF writes the latter as Quint's `Option`, whichever it is, so its type never changes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Slot {
    Always(Value),
    Maybe(Option<Value>),
}

impl Slot {
    pub fn value(&self) -> Option<&Value> {
        match self {
            Slot::Always(v) => Some(v),
            Slot::Maybe(v) => v.as_ref(),
        }
    }
}

fn field(name: &'static str, label: &'static str, value: Value) -> Field {
    Field {
        name,
        label,
        value: Slot::Always(value),
    }
}

fn maybe(name: &'static str, label: &'static str, value: Option<Value>) -> Field {
    Field {
        name,
        label,
        value: Slot::Maybe(value),
    }
}

/// A record of facts, in a fixed order of fields.
pub type Record = Vec<Field>;

/// Every fact of a state, grouped by what it belongs to: the one source of the flat,
/// named facts traces print ([`Described::values`]) and of ITF's typed records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    /// P's scheduler, per request.
    pub p_requests: Vec<Record>,
    /// D's scheduler, per request.
    pub d_requests: Vec<Record>,
    /// Per P rank: whether it is a replica (under pcp; it sends nothing), and its facts
    /// per request.
    pub p_ranks: Vec<(bool, Vec<Record>)>,
    /// Per D rank, its facts per request.
    pub d_ranks: Vec<Vec<Record>>,
    /// Per read handle (a WRITE in push mode): its P and D rank, and its phase per request.
    pub transfers: Vec<Transfer>,
    /// Whether handles are P's WRITEs (push mode) rather than D's reads.
    pub push: bool,
    /// P's aggregator, then D's.
    pub aggregators: [Record; 2],
    /// D's free blocks of its pool, when the pool is bounded.
    pub d_free_blocks: Option<Value>,
    pub incidents: Value,
}

/// One read handle (or WRITE): who moves KV from whom, and its phase per request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub p_rank: u16,
    pub d_rank: u16,
    pub phases: Vec<Value>,
}

impl Described {
    /// The facts by name, as traces print them: `P req0`, `P rank1 (replica) req0`, ...;
    /// a fact a state lacks is not listed.
    pub fn values(&self) -> BTreeMap<String, Value> {
        let mut facts = BTreeMap::new();
        for (i, record) in self.p_requests.iter().enumerate() {
            let name = format!("P req{i}");
            add(&mut facts, name.clone(), &name, record);
        }
        for (i, record) in self.d_requests.iter().enumerate() {
            let name = format!("D req{i}");
            add(&mut facts, name.clone(), &name, record);
        }
        for (rank, (replica, requests)) in self.p_ranks.iter().enumerate() {
            // The role is named on the rank's main fact only.
            let role = if *replica { " (replica)" } else { "" };
            for (i, record) in requests.iter().enumerate() {
                add(
                    &mut facts,
                    format!("P rank{rank}{role} req{i}"),
                    &format!("P rank{rank} req{i}"),
                    record,
                );
            }
        }
        for (d, requests) in self.d_ranks.iter().enumerate() {
            for (i, record) in requests.iter().enumerate() {
                let name = format!("D rank{d} req{i}");
                add(&mut facts, name.clone(), &name, record);
            }
        }
        for t in &self.transfers {
            for (i, phase) in t.phases.iter().enumerate() {
                let name = if self.push {
                    format!("P rank{} WRITE into D rank{} req{i}", t.p_rank, t.d_rank)
                } else {
                    format!("D rank{} read of P rank{} req{i}", t.d_rank, t.p_rank)
                };
                facts.insert(name, phase.clone());
            }
        }
        for (engine, record) in ["P", "D"].iter().zip(&self.aggregators) {
            add(
                &mut facts,
                String::new(),
                &format!("{engine} aggregator"),
                record,
            );
        }
        if let Some(blocks) = &self.d_free_blocks {
            facts.insert("D free blocks".into(), blocks.clone());
        }
        facts.insert("incidents".into(), self.incidents.clone());
        facts
    }
}

/// Adds `record`'s facts to `facts`: `main` names its main fact, `prefix` starts the
/// others' names; a fact the state lacks is not added.
fn add(facts: &mut BTreeMap<String, Value>, main: String, prefix: &str, record: &Record) {
    for f in record {
        let Some(value) = f.value.value() else {
            continue;
        };
        let name = if f.label.is_empty() {
            main.clone()
        } else {
            format!("{prefix} {}", f.label)
        };
        facts.insert(name, value.clone());
    }
}

/// Every fact of a state, grouped by request, rank, handle and aggregator.
pub fn describe(state: &State) -> Described {
    let t = state.topology();
    let requests = state.requests.len();
    let text = |s: &str| Value::text(s);
    let p_requests = state
        .requests
        .iter()
        .map(|q| {
            vec![
                field("phase", "", text(prefill_phase(q.prefill))),
                field(
                    "send_metadata",
                    "send metadata",
                    text(&metadata(q.send_meta)),
                ),
                // The entries ahead of it in P's `_reqs_to_send`, which a head-only
                // reaper walks in order.
                maybe(
                    "queued_after",
                    "queued after",
                    t.ordered_leases
                        .then(|| Value::Int(i64::from(q.queued_after))),
                ),
            ]
        })
        .collect();
    let d_requests = state
        .requests
        .iter()
        .map(|q| {
            vec![
                field("phase", "", Value::Text(decode_phase(q))),
                field(
                    "load_metadata",
                    "load metadata",
                    text(&metadata(q.recv_meta)),
                ),
                // Its place in D's queues, which the scheduler's scan walks in order.
                maybe(
                    "queue_place",
                    "queue place",
                    (t.decode_blocks.is_some() && q.decode.queued())
                        .then(|| Value::Int(i64::from(q.arrival))),
                ),
            ]
        })
        .collect();
    let p_ranks = (0..t.prefill_world)
        .map(|rank| {
            let cells = (0..requests as u8)
                .map(|i| prefill_cell_facts(state, rank, i))
                .collect();
            (!t.is_transfer(rank), cells)
        })
        .collect();
    let d_ranks = (0..t.decode_world)
        .map(|d| {
            (0..requests as u8)
                .map(|i| decode_cell_facts(state, d, i))
                .collect()
        })
        .collect();
    let transfers = t
        .handles
        .iter()
        .enumerate()
        .map(|(h, plan)| Transfer {
            p_rank: plan.source,
            d_rank: plan.decoder,
            phases: (0..requests as u8)
                .map(|i| {
                    text(match state.handle(h, i) {
                        HandlePhase::Reading if t.push => "writing (RDMA in flight)",
                        other => handle_phase(other),
                    })
                })
                .collect(),
        })
        .collect();
    let d_free_blocks = match (state.decode_blocks_free(), t.decode_blocks) {
        (Some(free), Some(pool)) => Some(Value::Tup(vec![
            Value::Int(i64::from(free)),
            Value::Int(i64::from(pool)),
        ])),
        _ => None,
    };
    Described {
        p_requests,
        d_requests,
        p_ranks,
        d_ranks,
        transfers,
        push: t.push,
        aggregators: [
            aggregator_facts(&state.prefill_aggregator),
            aggregator_facts(&state.decode_aggregator),
        ],
        d_free_blocks,
        incidents: incidents(state.incidents),
    }
}

/// What P rank `rank` holds of request `i`: its send (in vLLM's words), what it counts
/// of the transfer, and its offloading and own-load jobs.
fn prefill_cell_facts(state: &State, rank: u16, i: u8) -> Record {
    let t = state.topology();
    let cell = state.prefill_cell(rank, i);
    let send = match cell.send {
        SendPhase::InBatch => "in batch",
        SendPhase::ToSend if t.leases => "to send (lease armed)",
        SendPhase::ToSend => "to send (waiting for D's reads)",
        SendPhase::Expired => "lease expired, HELD: the reaper stops at an earlier live lease",
        SendPhase::Done => "done, report pending",
        SendPhase::Reported => "reported",
        SendPhase::Cleared => "reported, CLEARED by the connector (never reaches the aggregator)",
        SendPhase::Silent => "silent",
        SendPhase::ReportsAgain => {
            "reported, and a late notification makes it report again at its next step"
        }
        SendPhase::ReportedAgain => "reported twice",
    };
    let pull = t.is_transfer(rank) && !t.push;
    let travel = pull && t.notifications_travel;
    let lower = |phase: String| Value::Text(phase.to_lowercase());
    vec![
        field("send", "", Value::text(send)),
        // Its own WRITEs done, of those it posts.
        maybe(
            "writes_done",
            "writes done",
            (t.is_transfer(rank) && t.push)
                .then(|| done_value(handles_done(state, t.handles_reading(rank), i))),
        ),
        // Notifications received of those expected.
        maybe(
            "notifications",
            "notifications",
            pull.then(|| {
                Value::Tup(vec![
                    Value::Int(i64::from(cell.notifications)),
                    Value::Int(i64::from(t.expected_consumers[usize::from(rank)])),
                ])
            }),
        ),
        maybe(
            "notifications_on_their_way",
            "notifications on their way",
            travel.then(|| Value::Int(i64::from(cell.in_flight))),
        ),
        maybe(
            "notifications_dropped_unrecognized",
            "notifications dropped (unrecognized)",
            travel.then(|| Value::Int(i64::from(cell.dropped))),
        ),
        maybe(
            "offload_store",
            "offload store",
            (cell.store != StorePhase::NotUsed).then(|| lower(format!("{:?}", cell.store))),
        ),
        maybe(
            "store_from_before_preemption",
            "store from before preemption",
            (cell.stale_store != StaleStore::None)
                .then(|| lower(format!("{:?}", cell.stale_store))),
        ),
        maybe(
            "load",
            "load",
            (cell.load != LoadPhase::NotUsed).then(|| lower(format!("{:?}", cell.load))),
        ),
    ]
}

/// What D rank `d` holds of request `i`: its load's report, the pushes counted, and its
/// offloading child's load.
fn decode_cell_facts(state: &State, d: u16, i: u8) -> Record {
    let t = state.topology();
    let recv = match state.decode_cell(d, i) {
        DecodeCell::Idle => "idle",
        DecodeCell::Loading => "loading",
        DecodeCell::Done { failed: false } => "done, report pending",
        DecodeCell::Done { failed: true } => "failed+done, report pending",
        DecodeCell::Reported => "reported",
        DecodeCell::Silent => "silent",
        DecodeCell::ReportsAgain => "reported, repeats it at the next step",
        DecodeCell::ReportedTwice => "reported twice",
    };
    let child = state.child_load(d, i);
    vec![
        field("recv", "", Value::text(recv)),
        // P's notifications counted, of one per P rank writing into the D rank.
        maybe(
            "push_notifications",
            "push notifications",
            t.push
                .then(|| done_value(handles_done(state, t.handles_of(d), i))),
        ),
        maybe(
            "offloading_child_load",
            "offloading child load",
            (child != LoadPhase::NotUsed).then(|| Value::Text(format!("{child:?}").to_lowercase())),
        ),
    ]
}

/// E, each direction's open countdowns (request: reports to go) and the failed loads
/// held back until their request completes.
fn aggregator_facts(aggregator: &SortedAggregator<u8>) -> Record {
    let open = |direction| {
        Value::Map(
            aggregator
                .open_ids(direction)
                .map(|id| {
                    let to_go = aggregator.remaining(direction, id).unwrap_or(0);
                    (Value::Request(*id), Value::Remaining(i64::from(to_go)))
                })
                .collect(),
        )
    };
    let pending = aggregator
        .pending_failed()
        .iter()
        .map(|&id| Value::Request(id))
        .collect();
    vec![
        field("E", "E", Value::Int(i64::from(aggregator.expected()))),
        field(
            "finished_sending",
            "finished_sending",
            open(Direction::Sending),
        ),
        field(
            "finished_recving",
            "finished_recving",
            open(Direction::Recving),
        ),
        field(
            "failed_recving_pending",
            "failed_recving pending",
            Value::Set(pending),
        ),
    ]
}

/// A D read handle's phase.
pub fn handle_phase(phase: HandlePhase) -> &'static str {
    match phase {
        HandlePhase::NotPosted => "not posted",
        HandlePhase::Handshaking => "handshaking",
        HandlePhase::Reading => "reading (RDMA in flight)",
        HandlePhase::Done => "done",
        HandlePhase::Failed => "failed",
    }
}

/// P's scheduler phase of a request, in vLLM's words.
pub fn prefill_phase(phase: PrefillPhase) -> &'static str {
    match phase {
        PrefillPhase::LoadingKv => "WAITING_FOR_REMOTE_KVS (own load)",
        PrefillPhase::AbortedLoadingKv => {
            "aborted while loading its own KV, blocks held until the load finishes"
        }
        PrefillPhase::Prefilling => "prefilling",
        PrefillPhase::DelayFreed => "finished, free delayed (blocks held)",
        PrefillPhase::Released => "blocks freed",
        PrefillPhase::Dropped => "aborted before finishing, freed",
        PrefillPhase::AbortFreed => "aborted after finishing, blocks freed at once",
        PrefillPhase::FinishedEmpty => {
            "finished by a stale output with no blocks: nothing delay-freed, D handed no remote blocks"
        }
    }
}

/// D's scheduler phase of a request, in vLLM's words.
pub fn decode_phase(q: &crate::state::Request) -> String {
    let text = match q.decode {
        DecodePhase::Pending => "not admitted yet",
        DecodePhase::Loading if q.decode_preempted => {
            "WAITING_FOR_REMOTE_KVS again after its preemption: a second load no transfer was set up for (blocks held)"
        }
        DecodePhase::Loading => "WAITING_FOR_REMOTE_KVS (blocks held)",
        DecodePhase::AbortedLoading => "aborted while loading, free delayed",
        DecodePhase::Running if q.decode_preempted => {
            "prefilled locally after its preemption, running"
        }
        DecodePhase::Running if q.stale_token => {
            "running, after delivering a token computed over the blocks its failed load never filled"
        }
        DecodePhase::Running => "woken, running",
        DecodePhase::SyncLoading => {
            "RUNNING in the step that loads its KV synchronously (whole sequence's blocks held)"
        }
        DecodePhase::Rewound => {
            "load failed, rewound to recompute while RUNNING: the step scheduled before the rewind is still in flight on the unfilled blocks"
        }
        DecodePhase::Failed => "woken with failed load, blocks released",
        DecodePhase::Freed => "freed",
        DecodePhase::Gone => "never admitted",
        DecodePhase::Crashed => "D crashed before reading",
        DecodePhase::Queued if q.decode_preempted => {
            "preempted after its load, WAITING with nothing computed, no blocks"
        }
        DecodePhase::Queued => "WAITING, no blocks yet",
        DecodePhase::Loaded => "KV loaded, WAITING for the block to run (prefix block held)",
        DecodePhase::Done => "finished, blocks returned",
        DecodePhase::Deferred => "skipped, no blocks: its lookup has not answered",
        DecodePhase::Recomputing if q.decode_preempted => {
            "preempted after its load, WAITING to be prefilled locally (its connector offers nothing again), no blocks"
        }
        DecodePhase::Recomputing => {
            "load failed, WAITING to be prefilled locally (kv_load_failure_policy=recompute), no blocks yet"
        }
        DecodePhase::LookedUp => {
            "skipped, no blocks: lookup answered, to be admitted where it stands"
        }
    };
    if q.prefix_hit {
        format!("{text} (full prefix hit)")
    } else {
        text.to_string()
    }
}

fn metadata(meta: Metadata) -> String {
    match meta {
        Metadata::NotQueued => "-".into(),
        Metadata::Due(n) => format!("due in {n} step(s)"),
        Metadata::Delivered => "delivered".into(),
    }
}

/// The contract breaches in `incidents`, named (a set: `-` when empty).
pub fn incidents(incidents: Incidents) -> Value {
    const NAMES: [(u16, &str); 16] = [
        (
            Incidents::SEND_FOR_UNKNOWN,
            "finished_sending for unknown request",
        ),
        (
            Incidents::RECV_FOR_UNKNOWN,
            "finished_recving for unknown request",
        ),
        (Incidents::EMITTED_TWICE, "emitted twice"),
        (Incidents::REOPENED, "countdown reopened"),
        (
            Incidents::SEND_WITHOUT_DELAY,
            "send reported without delayed free",
        ),
        (Incidents::STRICT_DUPLICATE, "strict: duplicate report"),
        (
            Incidents::STRICT_AFTER_EMISSION,
            "strict: report after emission",
        ),
        (Incidents::STRICT_BEYOND_EXPECTED, "strict: report beyond E"),
        (Incidents::STRICT_UNANNOUNCED, "strict: unannounced report"),
        (
            Incidents::FREED_BY_LEASE_ALONE,
            "P blocks freed by a lease alone, no fault",
        ),
        (
            Incidents::LOAD_FOR_UNKNOWN,
            "P load emitted for unknown request",
        ),
        (
            Incidents::NONE_OUTPUT,
            "a rank before the last pipeline stage returned no output (None): the aggregator asserts, the engine dies",
        ),
        (Incidents::REPORTED_TWICE, "a rank reported a request twice"),
        (
            Incidents::REPORTED_AFTER_EMISSION,
            "a rank reported a request again after its emission",
        ),
        (
            Incidents::LEASE_SKIPPED,
            "an expired lease held: the reaper stopped at a live one",
        ),
        (
            Incidents::EMPTY_TRANSFER_PARAMS,
            "D admitted a load naming no remote blocks: NIXL asserts, D's engine dies",
        ),
    ];
    Value::Set(
        NAMES
            .iter()
            .filter(|(bit, _)| incidents.has(*bit))
            .map(|(_, n)| Value::text(*n))
            .collect(),
    )
}

/// The facts that differ between two states: (name, before, after).
pub fn diff(before: &State, after: &State) -> Vec<(String, String, String)> {
    let (a, b) = (facts(before), facts(after));
    b.iter()
        .filter_map(|(k, v)| {
            let old = a.get(k).cloned().unwrap_or_default();
            (old != *v).then(|| (k.clone(), old, v.clone()))
        })
        .collect()
}

/// States print as their facts: the explorer and debug output speak the trace vocabulary.
impl std::fmt::Debug for State {
    /// `{:#?}` (the explorer's "complete state") prints one `name: value` line per fact,
    /// as traces do; `{:?}` a map.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if f.alternate() {
            for (name, value) in facts(self) {
                writeln!(f, "{name}: {value}")?;
            }
            Ok(())
        } else {
            f.debug_map().entries(facts(self)).finish()
        }
    }
}
