//! The schedulers of P and D (v1/core/sched/scheduler.py; docs/contracts.md §5).
//!
//! P: a finished request's free is delayed (`request_finished` returned True) until the id
//! comes back in aggregated `finished_sending`; a second or unknown id would crash the
//! engine (a double free). D: a remote load holds the request in `WAITING_FOR_REMOTE_KVS`
//! until aggregated `finished_recving` wakes it, as a success or a failure. Aborts follow
//! the configured policies.

use crate::config::{AbortFinished, AbortLoading, Config, Connector, Stepping};
use crate::state::{
    DecodePhase, Incidents, Metadata, PrefillPhase, Request, RequestId, State, StorePhase,
};
use kvcc_aggregator::{Direction, StepOutcome};

/// P finishes prefilling `r`: the free is delayed and send metadata is queued.
pub fn finish_prefill(config: &Config, state: &mut State, r: RequestId) {
    let request = &mut state.requests[usize::from(r)];
    request.prefill = PrefillPhase::DelayFreed;
    request.send_meta = Metadata::Due(config.max_concurrent_batches);
    state
        .prefill_aggregator_mut()
        .announce(Direction::Sending, r);
    if config.connector == Connector::MultiOffload {
        for rank in 0..state.topology().prefill_world {
            state.prefill_cell_mut(rank, r).store = StorePhase::Storing;
        }
    }
}

/// D admits `r` (its kv_transfer_params came back from P) and waits for remote KV.
pub fn admit_decode(config: &Config, state: &mut State, r: RequestId, prefix_hit: bool) {
    let request = &mut state.requests[usize::from(r)];
    request.decode = DecodePhase::Loading;
    request.recv_meta = Metadata::Due(config.max_concurrent_batches);
    request.prefix_hit = prefix_hit;
    state
        .decode_aggregator_mut()
        .announce(Direction::Recving, r);
}

/// A client abort reaches both schedulers.
pub fn abort(config: &Config, state: &mut State, r: RequestId) {
    let request = &mut state.requests[usize::from(r)];
    request.aborted = true;
    match request.prefill {
        PrefillPhase::Prefilling => {
            // Not finished: `request_finished` does not delay, nothing will be sent.
            request.prefill = PrefillPhase::Dropped;
            request.decode = DecodePhase::Gone;
        }
        PrefillPhase::DelayFreed if config.scheduler.abort_finished == AbortFinished::Free => {
            request.prefill = PrefillPhase::AbortFreed;
            state
                .prefill_aggregator_mut()
                .retire(Direction::Sending, &r);
        }
        _ => {}
    }
    let request = &mut state.requests[usize::from(r)];
    match request.decode {
        DecodePhase::Pending => request.decode = DecodePhase::Gone,
        DecodePhase::Loading => match config.scheduler.abort_loading {
            AbortLoading::DelayFree => request.decode = DecodePhase::AbortedLoading,
            AbortLoading::FreeAtOnce => {
                request.decode = DecodePhase::Freed;
                state.decode_aggregator_mut().retire(Direction::Recving, &r);
            }
        },
        _ => {}
    }
}

/// Can a client abort still change anything for `r`?
pub fn abortable(state: &State, r: RequestId) -> bool {
    let request = &state.requests[usize::from(r)];
    !request.aborted
        && (matches!(
            request.prefill,
            PrefillPhase::Prefilling | PrefillPhase::DelayFreed
        ) || matches!(request.decode, DecodePhase::Pending | DecodePhase::Loading))
}

/// Does P's engine step at all? An engine with no requests does not step; with `idle`
/// stepping it also stops once nothing is left to run.
pub fn prefill_steps(config: &Config, state: &State) -> bool {
    state.requests.iter().any(|q| match q.prefill {
        PrefillPhase::Prefilling => true,
        PrefillPhase::LoadingKv | PrefillPhase::DelayFreed => {
            config.scheduler.stepping_of(true) == Stepping::KeepStepping
        }
        _ => false,
    })
}

/// Does D's engine step at all? Decoding requests are not modelled past their wake-up, so
/// under `idle` stepping D never steps for its waiting requests.
pub fn decode_steps(config: &Config, state: &State) -> bool {
    config.scheduler.stepping_of(false) == Stepping::KeepStepping
        && state
            .requests
            .iter()
            .any(|q| matches!(q.decode, DecodePhase::Loading | DecodePhase::AbortedLoading))
}

// Emitted ids stay known to a Strict aggregator for the request's whole (modelled)
// lifetime, so a late report is classified as beyond-E or a resend rather than as
// unannounced. Only a free the connector did not agree to retires an id early.

/// P's scheduler acts on an aggregated step.
pub fn on_prefill_outcome(state: &mut State, outcome: &StepOutcome<RequestId>) {
    for &r in &outcome.finished_sending {
        note_emission(state, r, Request::EMITTED_SEND);
        let request = &mut state.requests[usize::from(r)];
        if request.prefill == PrefillPhase::DelayFreed {
            request.prefill = PrefillPhase::Released;
            if request.rescue == Request::LEASE_EXPIRED {
                state.incidents.set(Incidents::FREED_BY_LEASE_ALONE);
            }
            // Judged: forget it, so that states differing only there merge again.
            state.requests[usize::from(r)].rescue = 0;
        } else {
            state.incidents.set(Incidents::SEND_FOR_UNKNOWN);
        }
    }
    for &r in &outcome.finished_recving {
        note_emission(state, r, Request::EMITTED_LOAD);
        let request = &mut state.requests[usize::from(r)];
        if request.prefill == PrefillPhase::LoadingKv {
            request.prefill = PrefillPhase::Prefilling;
        } else {
            state.incidents.set(Incidents::LOAD_FOR_UNKNOWN);
        }
    }
}

/// D's scheduler acts on an aggregated step.
pub fn on_decode_outcome(state: &mut State, outcome: &StepOutcome<RequestId>) {
    for &r in &outcome.finished_recving {
        note_emission(state, r, Request::EMITTED_RECV);
        let failed = outcome.failed_recving.contains(&r);
        let request = &mut state.requests[usize::from(r)];
        request.decode = match request.decode {
            DecodePhase::Loading if failed => DecodePhase::Failed,
            DecodePhase::Loading => DecodePhase::Running,
            DecodePhase::AbortedLoading => DecodePhase::Freed,
            other => {
                state.incidents.set(Incidents::RECV_FOR_UNKNOWN);
                other
            }
        };
    }
}

fn note_emission(state: &mut State, r: RequestId, bit: u8) {
    let request = &mut state.requests[usize::from(r)];
    if request.emitted & bit != 0 {
        state.incidents.set(Incidents::EMITTED_TWICE);
    }
    request.emitted |= bit;
}
