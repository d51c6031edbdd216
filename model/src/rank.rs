//! P workers (NIXL's producer side, nixl `*_worker.py`; contracts.md §6).
//!
//! A transfer rank counts D notifications for a request and reports it as sent once it
//! has as many as D promised (`request_id:expected_consumers`), or when its lease expires.
//! It may complete before its send metadata arrives: D can finish reading before P's next
//! step, and vLLM then skips arming a lease for it. Replicated PCP ranks > 0 are never read;
//! what they report is the subject of #52779, #53903, #53781 and #59325.

use crate::config::{Config, ReplicatedReports};
use crate::state::RequestId;
use crate::state::{PrefillPhase, SendPhase, State, StorePhase};
use kvcc_aggregator::Rank;

/// `start_load_kv` on every P rank: the request's send metadata arrives.
pub fn receive_send_metadata(config: &Config, state: &mut State, r: RequestId) {
    for rank in 0..state.topology().prefill_world {
        let transfer = state.topology().is_transfer(rank);
        let cell = state.prefill_cell_mut(rank, r);
        cell.send = match (transfer, cell.send) {
            // Already read in full before the metadata came: not armed again.
            (_, SendPhase::Done | SendPhase::Reported | SendPhase::Cleared | SendPhase::Silent) => {
                cell.send
            }
            (true, _) => SendPhase::ToSend,
            (false, _) => match config.producer.replicated_reports {
                ReplicatedReports::Nothing => SendPhase::Silent,
                ReplicatedReports::Synthetic | ReplicatedReports::SyntheticOnBatch => {
                    SendPhase::Done
                }
            },
        };
    }
}

/// The broken twin `synthetic-on-batch`: replicas mark every request of their batch done,
/// whether or not it will ever be sent.
pub fn mark_batch_synthetic(config: &Config, state: &mut State) {
    if config.producer.replicated_reports != ReplicatedReports::SyntheticOnBatch {
        return;
    }
    for r in 0..state.request_count() as RequestId {
        let in_batch = matches!(
            state.requests[usize::from(r)].prefill,
            PrefillPhase::Prefilling | PrefillPhase::DelayFreed
        );
        if !in_batch {
            continue;
        }
        for i in 0..state.topology().replicas.len() {
            let rank = state.topology().replicas[i];
            let cell = state.prefill_cell_mut(rank, r);
            if cell.send == SendPhase::InBatch {
                cell.send = SendPhase::Done;
            }
        }
    }
}

/// A D notification (read done, or notify-only) reaches P rank `rank`.
pub fn receive_notification(state: &mut State, rank: Rank, r: RequestId) {
    let expected = state.topology().expected_consumers[usize::from(rank)];
    let cell = state.prefill_cell_mut(rank, r);
    // After completion (lease expiry, say) vLLM only logs a notification.
    if matches!(cell.send, SendPhase::InBatch | SendPhase::ToSend) {
        cell.notifications += 1;
        if cell.notifications >= expected {
            cell.send = SendPhase::Done;
        }
    }
}

/// Would this rank put `r` in `finished_sending` this step? Under a MultiConnector the
/// worker forwards a send only once the offloading child's store is done too.
pub fn ready_to_report(state: &State, rank: Rank, r: RequestId) -> bool {
    let cell = state.prefill_cell(rank, r);
    cell.send == SendPhase::Done && cell.store != StorePhase::Storing
}

/// Is this rank's report dropped by the connector's clear of replicated ranks?
pub fn cleared(config: &Config, state: &State, rank: Rank) -> bool {
    config.producer.clear_replicated && !state.topology().is_transfer(rank)
}
