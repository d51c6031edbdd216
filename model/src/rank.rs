//! P workers (NIXL's producer side, nixl `*_worker.py`; docs/contracts.md §6).
//!
//! A transfer rank counts D notifications for a request and reports it as sent once it
//! has as many as D promised (`request_id:expected_consumers`), or when its lease expires.
//! It may complete before its send metadata arrives: D can finish reading before P's next
//! step, and vLLM then skips arming a lease for it. Replicated PCP ranks > 0 are never read;
//! what they report is the subject of #52779, #53903, #53781 and #59325.

use crate::config::{Config, PushCompletion, ReplicatedReports, StoreLedger, MAX_REQUESTS};
use crate::state::RequestId;
use crate::state::{HandlePhase, Metadata, PrefillPhase, SendPhase, StaleStore, State, StorePhase};
use kvcc_aggregator::Rank;
use smallvec::SmallVec;

/// The send phase `rank` has for `r` when this step's poll runs: `start_load_kv` if the
/// request's send metadata arrives with this step, then the broken twin's batch marking.
/// The engine applies it before polling; the offloading stores' choice reads it (which
/// stores can matter to this poll).
pub fn send_at_poll(config: &Config, state: &State, rank: Rank, r: RequestId) -> SendPhase {
    let request = &state.requests[usize::from(r)];
    let transfer = state.topology().is_transfer(rank);
    let mut send = state.prefill_cell(rank, r).send;
    if send == SendPhase::Expired && reaper_stop(state, rank, r).is_none() {
        send = SendPhase::Done;
    }
    if request.send_meta == Metadata::Due(1) {
        send = armed(config, transfer, send);
    }
    // The broken twin `synthetic-on-batch`: replicas mark every request of their batch
    // done, whether or not it will ever be sent.
    let in_batch = matches!(
        request.prefill,
        PrefillPhase::Prefilling | PrefillPhase::DelayFreed
    );
    if config.producer.replicated_reports == ReplicatedReports::SyntheticOnBatch
        && !transfer
        && in_batch
        && send == SendPhase::InBatch
    {
        send = SendPhase::Done;
    }
    send
}

/// `start_load_kv` on one P rank: what its send phase becomes when the metadata arrives.
fn armed(config: &Config, transfer: bool, send: SendPhase) -> SendPhase {
    match (transfer, send) {
        // Already read in full before the metadata came: not armed again.
        (
            _,
            SendPhase::Done
            | SendPhase::Reported
            | SendPhase::ReportsAgain
            | SendPhase::ReportedAgain
            | SendPhase::Cleared
            | SendPhase::Silent,
        ) => send,
        (true, _) => SendPhase::ToSend,
        (false, _) => match config.producer.replicated_reports {
            ReplicatedReports::Nothing => SendPhase::Silent,
            ReplicatedReports::Synthetic | ReplicatedReports::SyntheticOnBatch => SendPhase::Done,
        },
    }
}

/// D sends P rank `rank` `copies` notifications for `r` (read done, or notify-only; two
/// when `delivery.notification` duplicates one). Where notifications travel as events of
/// their own they are on their way; otherwise they arrive at once.
pub fn send_notification(state: &mut State, rank: Rank, r: RequestId, copies: u8) {
    for _ in 0..copies {
        if state.topology().notifications_travel {
            state.prefill_cell_mut(rank, r).in_flight += 1;
        } else {
            receive_notification(state, rank, r);
        }
    }
}

/// One of the notifications on their way to `rank` for `r` arrives.
pub fn notification_arrives(state: &mut State, rank: Rank, r: RequestId) {
    state.prefill_cell_mut(rank, r).in_flight -= 1;
    if !receive_notification(state, rank, r) {
        state.prefill_cell_mut(rank, r).dropped += 1;
    }
}

/// A D notification reaches P rank `rank`, in whatever state the rank holds `r`
/// (vLLM 0.34 nixl/pull_worker.py, `_get_new_notifs`): while the request is tracked (in
/// its batch, or in `_reqs_to_send`, even past an expiry the reaper has not reached) it
/// is counted, and the count reaching D's promised number completes it and forgets it;
/// once forgotten (completed by notifications, a lease or a synthetic report) vLLM only
/// logs it ("unrecognized request") and drops it. It counts messages, not readers: a
/// duplicate stands in for a reader still reading. A rank that reports at each
/// notification (`producer.notification-count = "each"`) keeps the request after its
/// first report and reports it again at a later reader's (at most once more, which two
/// readers need). Returns whether it was counted.
pub fn receive_notification(state: &mut State, rank: Rank, r: RequestId) -> bool {
    let expected = state.topology().expected_consumers[usize::from(rank)];
    let reports_again = state.topology().reports_late_notifications;
    let each = state.topology().reports_each_notification;
    let cell = state.prefill_cell_mut(rank, r);
    let tracked = match cell.send {
        SendPhase::InBatch | SendPhase::ToSend | SendPhase::Expired => true,
        SendPhase::Done | SendPhase::Reported => each,
        _ => false,
    };
    if tracked {
        cell.notifications += 1;
        if cell.send == SendPhase::Reported {
            cell.send = SendPhase::ReportsAgain;
        } else if each || cell.notifications >= expected {
            cell.send = SendPhase::Done;
        }
    } else if reports_again && cell.send == SendPhase::Reported {
        cell.send = SendPhase::ReportsAgain;
        return true;
    }
    tracked
}

/// Push mode: one of `rank`'s WRITEs of `r` completed. Once all have, the rank's send is
/// done, unless its completions are filtered out (`producer.push-completion`), which
/// leaves only the lease.
pub fn own_write_done(config: &Config, state: &mut State, rank: Rank, r: RequestId) {
    let topology = state.topology();
    let all_done = topology
        .handles_reading(rank)
        .all(|h| state.handle(h, r) == HandlePhase::Done);
    let cell = state.prefill_cell_mut(rank, r);
    if all_done
        && config.producer.push_completion == PushCompletion::Reported
        && matches!(cell.send, SendPhase::InBatch | SendPhase::ToSend)
    {
        cell.send = SendPhase::Done;
    }
}

/// The request at which `rank`'s head-only reaper stops before reaching `r`: the
/// earliest entry of `_reqs_to_send` ahead of `r` whose lease is still live. None when
/// nothing stops it (or the reaper scans every entry).
pub fn reaper_stop(state: &State, rank: Rank, r: RequestId) -> Option<RequestId> {
    if !state.topology().ordered_leases {
        return None;
    }
    // Places are unique among the requests in the queue ([`renumber_queue`]), and only
    // those hold a live lease: the id never decides.
    let place = |q: RequestId| state.requests[usize::from(q)].queued_after;
    (0..state.request_count() as RequestId)
        .filter(|&q| place(q) < place(r))
        .filter(|&q| state.prefill_cell(rank, q).send == SendPhase::ToSend)
        .min_by_key(|&q| place(q))
}

/// Is `r` in some P rank's `_reqs_to_send`: a lease live, or expired and held? Only
/// these entries' order can still matter to a reaper (a request leaves for good: its send
/// metadata arrives once).
pub fn in_queue(state: &State, r: RequestId) -> bool {
    (0..state.topology().prefill_world).any(|k| {
        matches!(
            state.prefill_cell(k, r).send,
            SendPhase::ToSend | SendPhase::Expired
        )
    })
}

/// Keeps the places in P's `_reqs_to_send` dense and unique over the requests still in
/// it, in their order (0 for the rest), so states that differ only in departed entries'
/// places, or in how many steps separated two arrivals, are one state. A place then moves
/// with its request when requests are renamed (module docs of `crate::symmetry`).
pub fn renumber_queue(state: &mut State) {
    let mut queued: SmallVec<[(u8, RequestId); MAX_REQUESTS]> = (0..state.request_count()
        as RequestId)
        .filter(|&r| in_queue(state, r))
        .map(|r| (state.requests[usize::from(r)].queued_after, r))
        .collect();
    queued.sort_unstable();
    for q in state.requests.iter_mut() {
        q.queued_after = 0;
    }
    for (place, (_, r)) in queued.into_iter().enumerate() {
        state.requests[usize::from(r)].queued_after = place as u8;
    }
}

/// Would this rank put `r` in `finished_sending` this step? Under a MultiConnector the
/// worker forwards a send only once the offloading child's store count has drained.
pub fn ready_to_report(state: &State, rank: Rank, r: RequestId) -> bool {
    matches!(
        state.prefill_cell(rank, r).send,
        SendPhase::Done | SendPhase::ReportsAgain
    ) && stores_drained(state, rank, r)
}

/// The store connector's count of `r`'s outstanding store jobs on `rank`, as its ledger
/// keeps it: per job, the current store alone; per request id, also counted down by a
/// job from before a preemption, so it can drain early or go below zero.
pub fn store_count(state: &State, rank: Rank, r: RequestId) -> i8 {
    let cell = state.prefill_cell(rank, r);
    let running = i8::from(matches!(
        cell.store,
        StorePhase::Storing | StorePhase::Leaked
    ));
    match state.topology().store_ledger {
        StoreLedger::PerJob => running,
        StoreLedger::PerRequest => running - i8::from(cell.stale_store == StaleStore::Done),
    }
}

fn stores_drained(state: &State, rank: Rank, r: RequestId) -> bool {
    store_count(state, rank, r) == 0
}

/// Is this rank's report dropped by the connector's clear of replicated ranks?
pub fn cleared(config: &Config, state: &State, rank: Rank) -> bool {
    config.producer.clear_replicated && !state.topology().is_transfer(rank)
}
