//! P-side leases (`kv_lease_duration`, docs/contracts.md §6).
//!
//! A lease is armed when the send metadata reaches a transfer rank and is extended by D's
//! heartbeats while D still holds the request waiting. The model has no clock: a lease
//! may expire at any moment once nothing keeps it alive, which covers every timing of the
//! real timer. With the `late-read-after-lease` fault it may also expire while D is merely
//! slow, which is the race the real timer leaves open.

use crate::config::{Config, NotifyId, Stepping};
use crate::state::RequestId;
use crate::state::{DecodeCell, DecodePhase, HandlePhase, SendPhase, State};
use kvcc_aggregator::Rank;

/// May `rank`'s lease on `r` expire now?
pub fn may_expire(config: &Config, state: &State, rank: Rank, r: RequestId) -> bool {
    config.producer.lease
        && state.prefill_cell(rank, r).send == SendPhase::ToSend
        && (config.faults.late_read_after_lease
            || !d_steps(config, state, r)
            || !heartbeats_renew(config)
            || !d_keeps_alive(state, rank, r))
}

/// Do D's heartbeats renew P's lease at all? Only when they name P's id
/// (`consumer.heartbeat-id`): P ignores an id it does not know.
fn heartbeats_renew(config: &Config) -> bool {
    config.consumer.heartbeat_id == NotifyId::RemoteRequestId
}

/// Would `rank`'s lease on `r` expiring now be the `late-read-after-lease` fault (D is
/// still reading, or will, and keeps it alive)? Then the expiry is the fault, not the
/// rescue from one. So is an expiry that overtakes a notification on its way (a late
/// delivery, `delivery.notification`): D read in time, and the lease frees what the
/// notification would have.
pub fn expiry_is_a_fault(config: &Config, state: &State, rank: Rank, r: RequestId) -> bool {
    (config.faults.late_read_after_lease
        && d_steps(config, state, r)
        && d_keeps_alive(state, rank, r))
        || state.prefill_cell(rank, r).in_flight > 0
}

/// Does D's engine step for its waiting requests at all? D's worker-side connector runs
/// inside engine steps (reads are posted and completions polled there), so an idle D
/// sends P nothing — no read, no notification, no heartbeat — and P's lease runs out.
/// (A modelling choice: the heartbeat's sender is not pinned down in vLLM's code here.)
/// A synchronous load is a running request's: D steps for it whatever its stepping.
fn d_steps(config: &Config, state: &State, r: RequestId) -> bool {
    config.scheduler.stepping_of(false) == Stepping::KeepStepping
        || state.requests[usize::from(r)].decode == DecodePhase::SyncLoading
}

/// Does D still have reads or notifications for `rank` coming? Then its heartbeats keep
/// the lease alive.
fn d_keeps_alive(state: &State, rank: Rank, r: RequestId) -> bool {
    let topology = state.topology();
    let in_flight = topology.handles_reading(rank).any(|h| {
        matches!(
            state.handle(h, r),
            HandlePhase::NotPosted | HandlePhase::Handshaking | HandlePhase::Reading
        ) && matches!(
            state.decode_cell(topology.handles[h].decoder, r),
            DecodeCell::Idle | DecodeCell::Loading
        ) || state.handle(h, r) == HandlePhase::Reading
    });
    let notify_pending = topology.notify_only.iter().any(|n| {
        n.source == rank
            && matches!(
                state.decode_cell(n.decoder, r),
                DecodeCell::Idle | DecodeCell::Loading
            )
    });
    match state.requests[usize::from(r)].decode {
        // Not yet admitted (on its way, or queued for D's blocks): its reads are still to
        // come, and a lease that runs out first is a late read (`late-read-after-lease`).
        DecodePhase::Pending
        | DecodePhase::Queued
        | DecodePhase::Deferred
        | DecodePhase::LookedUp => true,
        DecodePhase::Loading | DecodePhase::AbortedLoading | DecodePhase::SyncLoading => {
            in_flight || notify_pending
        }
        _ => topology
            .handles_reading(rank)
            .any(|h| state.handle(h, r) == HandlePhase::Reading),
    }
}
