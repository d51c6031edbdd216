//! D workers (NIXL's consumer side; docs/contracts.md §7).
//!
//! Per request, a D rank holds one read handle per P rank in its read plan. Each handle
//! carries its notification to P when it completes. The D rank reports `finished_recving`
//! once all its handles are done; a failed handle must make it report failed *and*
//! finished, but only after every handle has stopped, because posted RDMA cannot be
//! cancelled (#56104). A full local prefix hit reads nothing, notifies P, and must still be
//! reported as received (#56640).

use crate::config::{Config, FailedHandle, FailedLoad, PrefixHit, RejectionNotice};
use crate::rank;
use crate::state::{DecodeCell, DecodePhase, HandlePhase, RequestId, State};
use kvcc_aggregator::Rank;

/// `start_load_kv` on D rank `decoder`: post its handles, or notify P on a prefix hit.
pub fn receive_load_metadata(config: &Config, state: &mut State, decoder: Rank, r: RequestId) {
    if state.requests[usize::from(r)].prefix_hit {
        notify_covered_ranks(state, decoder, r);
        *state.decode_cell_mut(decoder, r) = match config.consumer.prefix_hit {
            PrefixHit::Reported => DecodeCell::Done { failed: false },
            PrefixHit::Unreported | PrefixHit::Off => DecodeCell::Silent,
        };
        return;
    }
    let first = if config.faults.handshake_failure {
        HandlePhase::Handshaking
    } else {
        HandlePhase::Reading
    };
    let handles: Vec<usize> = state.topology().handles_of(decoder).collect();
    for h in handles {
        *state.handle_mut(h, r) = first;
    }
    *state.decode_cell_mut(decoder, r) = DecodeCell::Loading;
}

/// Every P rank this D rank read or covers gets its notification.
fn notify_covered_ranks(state: &mut State, decoder: Rank, r: RequestId) {
    let topology = state.topology();
    let read = topology.handles.iter().filter(|h| h.decoder == decoder);
    let notify_only = topology.notify_only.iter().filter(|h| h.decoder == decoder);
    for plan in read.chain(notify_only) {
        rank::receive_notification(state, plan.source, r);
    }
}

/// The background handshake of `decoder` with P finishes, for all its handles of `r`.
pub fn complete_handshake(
    config: &Config,
    state: &mut State,
    decoder: Rank,
    r: RequestId,
    ok: bool,
) {
    let handles: Vec<usize> = state.topology().handles_of(decoder).collect();
    for h in handles {
        *state.handle_mut(h, r) = if ok {
            HandlePhase::Reading
        } else {
            HandlePhase::Failed
        };
    }
    settle(config, state, decoder, r);
}

/// A read finishes; its notification reaches P unless lost.
pub fn complete_read(
    config: &Config,
    state: &mut State,
    handle: usize,
    r: RequestId,
    notification_lost: bool,
) {
    *state.handle_mut(handle, r) = HandlePhase::Done;
    let plan = state.topology().handles[handle];
    if !notification_lost {
        rank::receive_notification(state, plan.source, r);
    }
    settle(config, state, plan.decoder, r);
}

/// A read fails mid-transfer (its own RDMA has stopped; the others may not have).
pub fn fail_read(config: &Config, state: &mut State, handle: usize, r: RequestId) {
    *state.handle_mut(handle, r) = HandlePhase::Failed;
    let decoder = state.topology().handles[handle].decoder;
    settle(config, state, decoder, r);
}

/// Decides whether D rank `decoder` has something to report for `r`.
fn settle(config: &Config, state: &mut State, decoder: Rank, r: RequestId) {
    if state.decode_cell(decoder, r) != DecodeCell::Loading {
        return;
    }
    let phases: Vec<HandlePhase> = state
        .topology()
        .handles_of(decoder)
        .map(|h| state.handle(h, r))
        .collect();
    let any_failed = phases.contains(&HandlePhase::Failed);
    let all_stopped = phases
        .iter()
        .all(|p| matches!(p, HandlePhase::Done | HandlePhase::Failed));
    let report_now =
        all_stopped || (any_failed && config.consumer.failed_handle == FailedHandle::FirstError);
    if !report_now {
        return;
    }
    if !any_failed {
        // Notify-only messages go out once the read they stand in for is done; a P rank
        // counts one only if it recognises the request id it carries.
        let topology = state.topology();
        if !topology.notify_only_unrecognised {
            for plan in topology.notify_only.iter().filter(|h| h.decoder == decoder) {
                rank::receive_notification(state, plan.source, r);
            }
        }
    }
    *state.decode_cell_mut(decoder, r) = match (any_failed, config.consumer.failed_load) {
        (true, FailedLoad::Unreported) => DecodeCell::Silent,
        (true, FailedLoad::Reported) => DecodeCell::Done { failed: true },
        // Logged only: the failure goes out as a plain success.
        (true, FailedLoad::LoggedOnly) | (false, _) => DecodeCell::Done { failed: false },
    };
}

/// D rejects `r` before admitting it: its scheduler never sees the request, and with
/// #41269's notice every P rank a D rank would have read or notified counts it as done.
pub fn reject(config: &Config, state: &mut State, r: RequestId) {
    state.requests[usize::from(r)].decode = DecodePhase::Gone;
    if config.consumer.rejection_notice == RejectionNotice::NotifiesPrefill {
        for decoder in 0..state.topology().decode_world {
            notify_covered_ranks(state, decoder, r);
        }
    }
}
