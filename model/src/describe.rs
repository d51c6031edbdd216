//! States and actions in vLLM's vocabulary, for traces, the explorer and reviewers.
//!
//! A state is described as a flat, ordered map of named facts (`P req0`, `P rank1 req0`,
//! `D agg finished_recving req0`, ...). Traces print only the facts a step changed, and
//! the ITF trace format stores these maps as its states.

use crate::action::Action;
use crate::config::FailedStep;
use crate::offload::StoresDone;
use crate::state::{
    DecodeCell, HandlePhase, LoadPhase, Metadata, PrefillPhase, SendPhase, State, StorePhase,
};
use crate::state::{DecodePhase, Incidents};
use crate::topology::Topology;
use kvcc_aggregator::{Aggregator, Direction};
use std::collections::BTreeMap;

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
            output_lost,
            announces_count,
            stores_done,
            raised,
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
            if output_lost {
                line += " [FAULT: output rank's output missing, step dropped]";
            }
            if raised {
                line += raised_words(t);
            }
            line
        }
        Action::LeaseExpires { rank, request } => {
            format!("P rank {rank}: lease on req{request} expires")
        }
        Action::DecodeAdmits {
            request,
            prefix_hit: false,
        } => format!("D scheduler: admits req{request}, WAITING_FOR_REMOTE_KVS"),
        Action::DecodeAdmits {
            request,
            prefix_hit: true,
        } => {
            format!("D scheduler: admits req{request} with a full local prefix hit (notify-only)")
        }
        Action::DecoderCrashes { request: r } => format!("[FAULT] D crashes before reading req{r}"),
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
        } => {
            let note = if notification_lost {
                ", notification LOST [FAULT]"
            } else {
                ""
            };
            format!("{}: read of req{request} completes{note}", read(t, handle))
        }
        Action::ReadFails { handle, request } => {
            format!("{}: read of req{request} FAILS [FAULT]", read(t, handle))
        }
        Action::DecodeEngineSteps {
            output_lost,
            raised,
        } => {
            let mut line = "D engine step".to_string();
            if output_lost {
                line += " [FAULT: output rank's output missing, step dropped]";
            }
            if raised {
                line += raised_words(t);
            }
            line
        }
        Action::ClientAborts { request: r } => format!("[FAULT] client aborts req{r}"),
    }
}

/// What a step in which a worker raised did, by `scheduler.failed-step`.
fn raised_words(t: &Topology) -> &'static str {
    match t.failed_step {
        FailedStep::RetryDropsReports => {
            " [FAULT: a worker raises; the step is retried, the finished ids the workers handed over are dropped]"
        }
        FailedStep::RetryKeepsReports | FailedStep::FailStop => {
            " [FAULT: a worker raises; the step is retried, its finished ids kept for the retry]"
        }
    }
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

/// Who reads from whom through `handle`; an action from a trace may name a handle this
/// topology does not have, and is then described, not trusted.
fn read(topology: &crate::topology::Topology, handle: u16) -> String {
    match topology.handles.get(usize::from(handle)) {
        Some(plan) => format!("D rank {} (from P rank {})", plan.decoder, plan.source),
        None => format!("handle {handle} (not in this topology)"),
    }
}

/// A short, stable name for an action (for ITF `#meta.action` and the Mermaid diagram).
pub fn action_name(action: &Action) -> &'static str {
    match action {
        Action::PrefillFinishes { .. } => "PrefillFinishes",
        Action::PrefillWorkerLoads { .. } => "PrefillWorkerLoads",
        Action::PrefillEngineSteps { .. } => "PrefillEngineSteps",
        Action::LeaseExpires { .. } => "LeaseExpires",
        Action::DecodeAdmits { .. } => "DecodeAdmits",
        Action::DecoderCrashes { .. } => "DecoderCrashes",
        Action::HandshakeCompletes { .. } => "HandshakeCompletes",
        Action::ReadCompletes { .. } => "ReadCompletes",
        Action::ReadFails { .. } => "ReadFails",
        Action::DecodeEngineSteps { .. } => "DecodeEngineSteps",
        Action::ClientAborts { .. } => "ClientAborts",
    }
}

/// Every fact of a state, by name. Facts at their initial "nothing happened" value are
/// still listed, so a diff shows every change.
pub fn facts(state: &State) -> BTreeMap<String, String> {
    let t = state.topology();
    let mut facts = BTreeMap::new();
    for (i, q) in state.requests.iter().enumerate() {
        facts.insert(format!("P req{i}"), prefill_phase(q.prefill).into());
        facts.insert(format!("P req{i} send metadata"), metadata(q.send_meta));
        facts.insert(format!("D req{i}"), decode_phase(q.decode, q.prefix_hit));
        facts.insert(format!("D req{i} load metadata"), metadata(q.recv_meta));
        for rank in 0..t.prefill_world {
            let cell = state.prefill_cell(rank, i as u8);
            let role = if t.is_transfer(rank) {
                ""
            } else {
                " (replica)"
            };
            let send = match cell.send {
                SendPhase::InBatch => "in batch".to_string(),
                SendPhase::ToSend if t.leases => "to send (lease armed)".to_string(),
                SendPhase::ToSend => "to send (waiting for D's reads)".to_string(),
                SendPhase::Done => "done, report pending".to_string(),
                SendPhase::Reported => "reported".to_string(),
                SendPhase::Cleared => {
                    "reported, CLEARED by the connector (never reaches the aggregator)".to_string()
                }
                SendPhase::Silent => "silent".to_string(),
            };
            let notes = if t.is_transfer(rank) {
                format!(
                    ", notifications {}/{}",
                    cell.notifications,
                    t.expected_consumers[usize::from(rank)]
                )
            } else {
                String::new()
            };
            facts.insert(
                format!("P rank{rank}{role} req{i}"),
                format!("{send}{notes}"),
            );
            if cell.store != StorePhase::NotUsed {
                facts.insert(
                    format!("P rank{rank} req{i} offload store"),
                    format!("{:?}", cell.store).to_lowercase(),
                );
            }
            if cell.load != LoadPhase::NotUsed {
                facts.insert(
                    format!("P rank{rank} req{i} load"),
                    format!("{:?}", cell.load).to_lowercase(),
                );
            }
        }
        for (h, plan) in t.handles.iter().enumerate() {
            let phase = handle_phase(state.handle(h, i as u8));
            facts.insert(
                format!(
                    "D rank{} read of P rank{} req{i}",
                    plan.decoder, plan.source
                ),
                phase.into(),
            );
        }
        for d in 0..t.decode_world {
            let cell = match state.decode_cell(d, i as u8) {
                DecodeCell::Idle => "idle",
                DecodeCell::Loading => "loading",
                DecodeCell::Done { failed: false } => "done, report pending",
                DecodeCell::Done { failed: true } => "failed+done, report pending",
                DecodeCell::Reported => "reported",
                DecodeCell::Silent => "silent",
            };
            facts.insert(format!("D rank{d} req{i}"), cell.into());
        }
    }
    aggregator_facts(&mut facts, "P", &state.prefill_aggregator);
    aggregator_facts(&mut facts, "D", &state.decode_aggregator);
    facts.insert("incidents".into(), incidents(state.incidents));
    facts
}

fn aggregator_facts(
    facts: &mut BTreeMap<String, String>,
    engine: &str,
    aggregator: &Aggregator<u8>,
) {
    facts.insert(
        format!("{engine} aggregator E"),
        aggregator.expected().to_string(),
    );
    for direction in [Direction::Sending, Direction::Recving] {
        let open: Vec<String> = aggregator
            .open_ids(direction)
            .map(|id| {
                format!(
                    "req{id}: {} to go",
                    aggregator.remaining(direction, id).unwrap_or(0)
                )
            })
            .collect();
        facts.insert(
            format!("{engine} aggregator {direction}"),
            if open.is_empty() {
                "-".into()
            } else {
                open.join(", ")
            },
        );
    }
    let pending: Vec<String> = aggregator
        .pending_failed()
        .iter()
        .map(|id| format!("req{id}"))
        .collect();
    facts.insert(
        format!("{engine} aggregator failed_recving pending"),
        if pending.is_empty() {
            "-".into()
        } else {
            pending.join(", ")
        },
    );
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
        PrefillPhase::Prefilling => "prefilling",
        PrefillPhase::DelayFreed => "finished, free delayed (blocks held)",
        PrefillPhase::Released => "blocks freed",
        PrefillPhase::Dropped => "aborted before finishing, freed",
        PrefillPhase::AbortFreed => "aborted after finishing, blocks freed at once",
    }
}

/// D's scheduler phase of a request, in vLLM's words.
pub fn decode_phase(phase: DecodePhase, prefix_hit: bool) -> String {
    let text = match phase {
        DecodePhase::Pending => "not admitted yet",
        DecodePhase::Loading => "WAITING_FOR_REMOTE_KVS (blocks held)",
        DecodePhase::AbortedLoading => "aborted while loading, free delayed",
        DecodePhase::Running => "woken, running",
        DecodePhase::Failed => "woken with failed load, blocks released",
        DecodePhase::Freed => "freed",
        DecodePhase::Gone => "never admitted",
        DecodePhase::Crashed => "D crashed before reading",
    };
    if prefix_hit {
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

/// The contract breaches in `incidents`, named, or `-`.
pub fn incidents(incidents: Incidents) -> String {
    const NAMES: [(u16, &str); 12] = [
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
    ];
    let names: Vec<&str> = NAMES
        .iter()
        .filter(|(bit, _)| incidents.has(*bit))
        .map(|(_, n)| *n)
        .collect();
    if names.is_empty() {
        "-".into()
    } else {
        names.join(", ")
    }
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
