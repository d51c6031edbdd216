//! The schedulers of P and D (v1/core/sched/scheduler.py; docs/contracts.md §5).
//!
//! P: a finished request's free is delayed (`request_finished` returned True) until the id
//! comes back in aggregated `finished_sending`; a second or unknown id would crash the
//! engine (a double free). D: a remote load holds the request in `WAITING_FOR_REMOTE_KVS`
//! until aggregated `finished_recving` wakes it, as a success or a failure. Aborts follow
//! the configured policies.

use crate::config::{
    AbortFinished, AbortLoading, AbortedTransfers, AdmissionBehindSkipped, Config, Connector,
    FinalStepPreemption, KvLoadFailurePolicy, LoadMode, LoadReservation, LookupAfterLoad,
    RewoundInFlightOutput, ScanOrder, Stepping, UnknownCompletion,
};
use crate::state::{
    DecodeCell, DecodePhase, Engine, Incidents, Metadata, PrefillPhase, Request, RequestId,
    SendPhase, State, StorePhase,
};
use kvcc_aggregator::{Direction, StepOutcome};
use smallvec::SmallVec;

/// P finishes prefilling `r`: the free is delayed and send metadata is queued.
pub fn finish_prefill(config: &Config, state: &mut State, r: RequestId) {
    let request = &mut state.requests[usize::from(r)];
    request.prefill = PrefillPhase::DelayFreed;
    request.send_meta = Metadata::Due(config.max_concurrent_batches);
    state.announce(Engine::Prefill, Direction::Sending, r);
    if config.connector == Connector::MultiOffload {
        for rank in 0..state.topology().prefill_world {
            state.prefill_cell_mut(rank, r).store = StorePhase::Storing;
        }
    }
}

/// `r` reaches D (its kv_transfer_params came back from P). Without a finite pool D
/// admits it at once and it waits for remote KV; with one it joins the waiting queue,
/// last, for the next scan ([`schedule_decode`]).
pub fn admit_decode(config: &Config, state: &mut State, r: RequestId, prefix_hit: bool) {
    state.requests[usize::from(r)].prefix_hit = prefix_hit;
    if config.decode.kv_blocks.is_some() {
        let behind = state.requests.iter().filter(|q| q.decode.queued()).count();
        let request = &mut state.requests[usize::from(r)];
        request.decode = DecodePhase::Queued;
        request.arrival = behind as u8;
    } else {
        start_load(config, state, r);
    }
}

/// D allocates `r`'s blocks and its workers are told to load: `WAITING_FOR_REMOTE_KVS`.
/// Transfer parameters that name no remote blocks (a request P finished empty) trip
/// NIXL's assertion in `update_state_after_alloc`, and D's engine dies. A second load
/// after a preemption (`consumer.lookup-after-load = "second-load"`) waits too, but the
/// connector's `update_state_after_alloc` finds `do_remote_prefill` cleared by the
/// first and sets up nothing: no metadata for the workers, nothing asked of P, no
/// completion ever.
fn start_load(config: &Config, state: &mut State, r: RequestId) {
    let request = &mut state.requests[usize::from(r)];
    if request.prefill == PrefillPhase::FinishedEmpty {
        request.decode = DecodePhase::Crashed;
        state.incidents.set(Incidents::EMPTY_TRANSFER_PARAMS);
        return;
    }
    if config.consumer.load == LoadMode::Synchronous {
        // Running at once: the load travels with the step, and nothing will report it.
        request.decode = DecodePhase::SyncLoading;
        request.recv_meta = Metadata::Due(config.max_concurrent_batches);
        return;
    }
    request.decode = DecodePhase::Loading;
    if request.decode_preempted {
        return;
    }
    request.recv_meta = Metadata::Due(config.max_concurrent_batches);
    state.announce(Engine::Decode, Direction::Recving, r);
}

/// Is `r`'s synchronous load still running in a step D's workers have started? Its
/// forward pass waits for the load, so D's engine completes no step meanwhile.
fn sync_load_running(state: &State, r: RequestId) -> bool {
    let q = &state.requests[usize::from(r)];
    q.decode == DecodePhase::SyncLoading
        && q.recv_meta == Metadata::Delivered
        && (0..state.topology().decode_world)
            .any(|d| state.decode_cell(d, r) == DecodeCell::Loading)
}

/// At the start of a D step, the output of the step before it comes back: for a request
/// whose synchronous load ran in that step, the load's outcome (its workers' invalid
/// blocks, `_handle_invalid_blocks`), and for a request rewound at the step before, the
/// output of the step that was already in flight then.
pub fn on_sync_load_outputs(config: &Config, state: &mut State) {
    if config.consumer.load != LoadMode::Synchronous {
        return;
    }
    for r in 0..state.request_count() as RequestId {
        let q = state.requests[usize::from(r)];
        if q.decode == DecodePhase::Rewound {
            let request = &mut state.requests[usize::from(r)];
            request.decode = DecodePhase::Running;
            if config.scheduler.rewound_in_flight_output == RewoundInFlightOutput::Delivered {
                request.stale_token = true;
            }
            continue;
        }
        if q.decode != DecodePhase::SyncLoading || q.recv_meta != Metadata::Delivered {
            continue;
        }
        let mut invalid_blocks = false;
        for d in 0..state.topology().decode_world {
            let cell = state.decode_cell_mut(d, r);
            if let DecodeCell::Done { failed } = *cell {
                invalid_blocks |= failed;
                *cell = DecodeCell::Reported;
            }
        }
        let request = &mut state.requests[usize::from(r)];
        if !invalid_blocks {
            request.decode = DecodePhase::Running;
            continue;
        }
        request.emitted |= Request::EMITTED_FAILURE;
        request.decode = match config.scheduler.kv_load_failure_policy {
            KvLoadFailurePolicy::Fail => DecodePhase::Failed,
            // Rewound and still running: the step scheduled before this output, if one
            // is in flight, ran on the blocks the load never filled.
            KvLoadFailurePolicy::Recompute if config.max_concurrent_batches == 2 => {
                DecodePhase::Rewound
            }
            KvLoadFailurePolicy::Recompute => DecodePhase::Running,
        };
    }
}

/// Where D's waiting-queue scan stopped: the request it could not allocate for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanStop {
    pub request: RequestId,
    /// Free blocks it needed: one more to run a loaded request, or what admission asks.
    pub need: u8,
    pub free: u8,
}

/// The waiting-queue scan at the start of a D step, with a finite pool. Requests come in
/// `scheduler.scan-order`: those holding blocks first (current vLLM), or those admitted
/// or skipped before (vLLM up to 0.30), each group in arrival order. A loading
/// request is passed over, as is one whose connector lookup has not answered (with
/// `consumer.async-lookup` the first scan to reach a request asks, and is told None); a
/// loaded one is promoted if one more block is free; one to admit is admitted if the
/// reservation allows. The first that cannot get its blocks ends the scan
/// (`allocate_slots` returns None and the loop breaks), so nothing behind it is looked
/// at this step. Returns where it stopped, if it did.
pub fn schedule_decode(config: &Config, state: &mut State) -> Option<ScanStop> {
    state.decode_blocks_free()?;
    let mut order: SmallVec<[RequestId; 3]> = (0..state.request_count() as RequestId)
        .filter(|&r| state.requests[usize::from(r)].decode.queued())
        .collect();
    order.sort_by_key(|&r| {
        let q = &state.requests[usize::from(r)];
        let behind = match config.scheduler.scan_order {
            ScanOrder::HoldersFirst => q.decode.blocks() == 0,
            ScanOrder::Arrival => q.decode == DecodePhase::Queued,
        };
        (behind, q.arrival)
    });
    // A request skipped with no blocks is ahead of the rest of the scan (under
    // holders-first, of the rest of the requests without blocks).
    let mut blockless_ahead = false;
    for r in order {
        let free = state.decode_blocks_free().expect("a finite pool");
        let phase = state.requests[usize::from(r)].decode;
        let need = match phase {
            DecodePhase::Loading => continue,
            DecodePhase::Queued if config.consumer.async_lookup => {
                state.requests[usize::from(r)].decode = DecodePhase::Deferred;
                blockless_ahead = true;
                continue;
            }
            DecodePhase::Deferred => {
                blockless_ahead = true;
                continue;
            }
            DecodePhase::Loaded => 1,
            // A local prefill: the whole sequence at once, nothing to load.
            DecodePhase::Recomputing => 2,
            _ if blockless_ahead
                && config.scheduler.admission_behind_skipped == AdmissionBehindSkipped::Refused =>
            {
                // #57841: a load admitted now would hold blocks behind a request that
                // holds none, which the scan may never get past; it waits its turn.
                continue;
            }
            _ => admission_need(config, state),
        };
        if free < need {
            return Some(ScanStop {
                request: r,
                need,
                free,
            });
        }
        if matches!(phase, DecodePhase::Loaded | DecodePhase::Recomputing) {
            state.requests[usize::from(r)].decode = DecodePhase::Running;
        } else {
            start_load(config, state, r);
        }
    }
    None
}

/// The connector's lookup for `r` answers: the next scan can admit it.
pub fn answer_lookup(state: &mut State, r: RequestId) {
    state.requests[usize::from(r)].decode = DecodePhase::LookedUp;
}

/// Free blocks a queued request needs to be admitted.
fn admission_need(config: &Config, state: &State) -> u8 {
    // A synchronous load runs at once: its whole sequence's blocks.
    let running = if config.consumer.load == LoadMode::Synchronous {
        2
    } else {
        1
    };
    let need = match config.scheduler.load_reservation {
        LoadReservation::PrefixOnly => 1,
        // The whole sequence, beside the block every admitted load still needs to run.
        LoadReservation::FullSequence => {
            2 + state
                .requests
                .iter()
                .filter(|q| matches!(q.decode, DecodePhase::Loading | DecodePhase::Loaded))
                .count() as u8
        }
    };
    need.max(running)
}

/// Keeps arrival numbers dense over the queued requests (0 for the rest), so states that
/// differ only in departed requests' numbers are one state.
pub fn renumber_arrivals(state: &mut State) {
    let mut queued: SmallVec<[(u8, RequestId); 3]> = (0..state.request_count() as RequestId)
        .filter(|&r| state.requests[usize::from(r)].decode.queued())
        .map(|r| (state.requests[usize::from(r)].arrival, r))
        .collect();
    queued.sort_unstable();
    for q in state.requests.iter_mut() {
        q.arrival = 0;
    }
    for (place, (_, r)) in queued.into_iter().enumerate() {
        state.requests[usize::from(r)].arrival = place as u8;
    }
}

/// P preempts `r` while its final step's output is in flight: the output is dropped and
/// the request prefilled again, or it finishes `r` with no blocks.
pub fn preempt_in_final_step(config: &Config, state: &mut State, r: RequestId) {
    state.once |= State::ONCE_FINAL_STEP_PREEMPTED;
    if config.scheduler.final_step_preemption == FinalStepPreemption::FinishesEmpty {
        state.requests[usize::from(r)].prefill = PrefillPhase::FinishedEmpty;
    }
}

/// D preempts `r`, running after its load landed (`faults.decode-preempted`): its blocks
/// go back to the pool and `_preempt_request` puts it at the head of `waiting` with
/// nothing computed. The scan that takes it again asks its connector what to load
/// (`consumer.lookup-after-load`): nothing, so it is prefilled locally like a recomputed
/// request (current vLLM), or a second load, admitted as a new one.
pub fn preempt_decode(config: &Config, state: &mut State, r: RequestId) {
    for q in state.requests.iter_mut().filter(|q| q.decode.queued()) {
        q.arrival += 1;
    }
    let request = &mut state.requests[usize::from(r)];
    request.decode_preempted = true;
    request.arrival = 0;
    request.decode = match config.consumer.lookup_after_load {
        LookupAfterLoad::LocalPrefill => DecodePhase::Recomputing,
        LookupAfterLoad::SecondLoad => DecodePhase::Queued,
    };
}

/// A running request reaches its end on D and releases its blocks (finite pool only).
pub fn finish_decode(state: &mut State, r: RequestId) {
    state.requests[usize::from(r)].decode = DecodePhase::Done;
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
        // P's own load in flight (kv_both): the same policy as an aborted load on D.
        PrefillPhase::LoadingKv => {
            match config.scheduler.abort_loading {
                AbortLoading::DelayFree => request.prefill = PrefillPhase::AbortedLoadingKv,
                AbortLoading::FreeAtOnce => {
                    request.prefill = PrefillPhase::Dropped;
                    state.retire(Engine::Prefill, Direction::Recving, r);
                }
            }
            // A connector saving while it loads delays the free for its save too, and
            // each worker reports the save done at its next step.
            if config.prefill.saves_while_loading {
                for k in 0..state.topology().prefill_world {
                    state.prefill_cell_mut(k, r).send = SendPhase::Done;
                }
            }
        }
        PrefillPhase::DelayFreed if config.scheduler.abort_finished == AbortFinished::Free => {
            request.prefill = PrefillPhase::AbortFreed;
            state.retire(Engine::Prefill, Direction::Sending, r);
        }
        _ => {}
    }
    let request = &mut state.requests[usize::from(r)];
    match request.decode {
        // Preempted after its load, it is D's own request: freed (its blocks went back
        // at the preemption).
        DecodePhase::Queued | DecodePhase::Deferred | DecodePhase::LookedUp
            if request.decode_preempted =>
        {
            request.decode = DecodePhase::Freed
        }
        DecodePhase::Pending
        | DecodePhase::Queued
        | DecodePhase::Deferred
        | DecodePhase::LookedUp => request.decode = DecodePhase::Gone,
        // Back in WAITING after its failed load: freed as any waiting request is.
        DecodePhase::Recomputing => request.decode = DecodePhase::Freed,
        // Loaded: the workers are done writing, its blocks go at once.
        DecodePhase::Loaded => request.decode = DecodePhase::Freed,
        DecodePhase::Loading => match config.scheduler.abort_loading {
            AbortLoading::DelayFree => request.decode = DecodePhase::AbortedLoading,
            AbortLoading::FreeAtOnce => {
                request.decode = DecodePhase::Freed;
                state.retire(Engine::Decode, Direction::Recving, r);
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
        ) || request.decode == DecodePhase::Pending
            || request.decode.queued())
}

/// Does P's engine step at all? An engine with no requests does not step; with `idle`
/// stepping it also stops once nothing is left to run. Nor does it step past a request
/// woken from NIXL's own remote-prefill load ([`woken_finishes_next`]).
pub fn prefill_steps(config: &Config, state: &State) -> bool {
    !prefill_blocked(config, state) && prefill_has_work(config, state)
}

/// Whether a request of `state` keeps P from stepping: one woken from NIXL's own load
/// and still prefilling ([`woken_finishes_next`]).
pub fn prefill_blocked(config: &Config, state: &State) -> bool {
    woken_finishes_next(config)
        && state
            .requests
            .iter()
            .any(|q| q.prefill == PrefillPhase::Prefilling)
}

/// Whether a request of `state` gives P a reason to step, were nothing blocking it.
fn prefill_has_work(config: &Config, state: &State) -> bool {
    state.requests.iter().any(|q| match q.prefill {
        PrefillPhase::Prefilling => true,
        PrefillPhase::LoadingKv | PrefillPhase::AbortedLoadingKv | PrefillPhase::DelayFreed => {
            config.scheduler.stepping_of(true) == Stepping::KeepStepping
        }
        _ => false,
    })
}

/// Whether a request P woke from its own load finishes its prefill in the step that
/// follows the wake, so that no P step passes with it still prefilling. NIXL loads every
/// prompt token but the connector's backoff (`_get_remote_prefill_token_count`,
/// nixl/base_scheduler.py), and vLLM's scheduler computes at least the last token
/// itself: what is left fits one step's token budget, and the next `schedule` takes it
/// (`_update_waiting_for_remote_kv`, v1/core/sched/scheduler.py), as vLLM's own
/// scheduler shows when kvcc confirm plays such a run (the campaign's one unexplained
/// parting before this rule: the model let a step pass, then freed the request at an
/// abort that vLLM's finished request ignored). An abort can still come first. This is
/// vLLM with one batch in flight, as kvcc confirm plays it. Under async scheduling
/// (`max-concurrent-batches = 2`, vLLM's default) the batch queue returns that batch a
/// step later, so one step can pass with the request still running: a load completion
/// arriving in that step makes vLLM assert, which the model, finishing the request
/// first, does not reach (docs/vllm.md; open in issue 25 until the player plays the
/// batch queue). An offloading child's load can leave a long prompt to prefill, over
/// many steps: there the rule is off.
fn woken_finishes_next(config: &Config) -> bool {
    config.prefill.loads_kv && config.connector == Connector::Nixl
}

/// Does D's engine step at all? Without a finite pool decoding requests are not modelled
/// past their wake-up, so under `idle` stepping D never steps for its waiting requests.
/// With one, a request waiting for blocks is one the scheduler must try to schedule, so
/// D steps for it whatever its stepping.
pub fn decode_steps(config: &Config, state: &State) -> bool {
    !decode_blocked(config, state) && decode_has_work(config, state)
}

/// Whether a request of `state` keeps D from completing a step: a synchronous load runs
/// in a step, and the engine cannot complete it while a worker still loads.
pub fn decode_blocked(config: &Config, state: &State) -> bool {
    config.consumer.load == LoadMode::Synchronous
        && (0..state.request_count() as RequestId).any(|r| sync_load_running(state, r))
}

/// Whether a request of `state` gives D a reason to step, were nothing blocking it.
fn decode_has_work(config: &Config, state: &State) -> bool {
    let waits = |d: DecodePhase| matches!(d, DecodePhase::Loading | DecodePhase::AbortedLoading);
    let schedules = |d: DecodePhase| d.unscheduled();
    state.requests.iter().any(|q| {
        (config.scheduler.stepping_of(false) == Stepping::KeepStepping && waits(q.decode))
            || schedules(q.decode)
            || q.decode.sync_load()
    })
}

// Emitted ids stay known to a Strict aggregator for the request's whole (modelled)
// lifetime, so a late report is classified as beyond-E or a resend rather than as
// unannounced. Only a free the connector did not agree to retires an id early.

/// Whether a completion the scheduler cannot act on kills the engine: every such
/// completion does under `assert` (current vLLM), only one for a request still live
/// under `drop` (the stale id of a forgotten request is skipped).
fn completion_kills(config: &Config, forgotten: bool) -> bool {
    config.scheduler.unknown_completion == UnknownCompletion::Assert || !forgotten
}

/// P's scheduler acts on an aggregated step.
pub fn on_prefill_outcome(config: &Config, state: &mut State, outcome: &StepOutcome<RequestId>) {
    // Receives before sends, as `_update_from_kv_xfer_finished` handles them.
    let after_all = config.scheduler.aborted_transfers == AbortedTransfers::FreeAfterAll;
    for &r in &outcome.finished_recving {
        note_emission(state, r, Request::EMITTED_LOAD);
        let request = &mut state.requests[usize::from(r)];
        let save_awaited = config.prefill.saves_while_loading
            && after_all
            && request.emitted & Request::EMITTED_SEND == 0;
        if request.prefill == PrefillPhase::LoadingKv {
            request.prefill = PrefillPhase::Prefilling;
        } else if request.prefill == PrefillPhase::AbortedLoadingKv {
            // Its load is over: the delayed free of the abort, unless its save is awaited.
            if !save_awaited {
                request.prefill = PrefillPhase::Dropped;
            }
        } else if request.prefill == PrefillPhase::DelayFreed {
            // A finished request's load completion reads, to vLLM's scheduler, as an
            // aborted load's: it frees the blocks and forgets the request
            // (`_update_from_kv_xfer_finished` asserts only that it is finished), though
            // they are held for D to read and P's workers will still report the send
            // (kvcc confirm showed it on vLLM 0.34; the model used to assert here).
            request.prefill = PrefillPhase::Released;
        } else if completion_kills(config, request.prefill.forgotten()) {
            state.incidents.set(Incidents::LOAD_FOR_UNKNOWN);
        }
    }
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
        } else if request.prefill == PrefillPhase::AbortedLoadingKv {
            // The save of a request aborted while loading: freed at once (current vLLM,
            // over a load that may still write), or only once the load is over too.
            if !after_all || request.emitted & Request::EMITTED_LOAD != 0 {
                request.prefill = PrefillPhase::Dropped;
            }
        } else if completion_kills(config, request.prefill.forgotten()) {
            state.incidents.set(Incidents::SEND_FOR_UNKNOWN);
        }
    }
}

/// D's scheduler acts on an aggregated step. With a finite pool a loaded request waits
/// for the next scan to be promoted; without one it runs at once.
pub fn on_decode_outcome(config: &Config, state: &mut State, outcome: &StepOutcome<RequestId>) {
    let pooled = config.decode.kv_blocks.is_some();
    for &r in &outcome.finished_recving {
        note_emission(state, r, Request::EMITTED_RECV);
        let failed = outcome.failed_recving.contains(&r);
        let request = &mut state.requests[usize::from(r)];
        if failed && request.decode == DecodePhase::Loading {
            request.emitted |= Request::EMITTED_FAILURE;
        }
        request.decode = match request.decode {
            DecodePhase::Loading if failed => match config.scheduler.kv_load_failure_policy {
                KvLoadFailurePolicy::Fail => DecodePhase::Failed,
                KvLoadFailurePolicy::Recompute if pooled => DecodePhase::Recomputing,
                KvLoadFailurePolicy::Recompute => DecodePhase::Running,
            },
            DecodePhase::Loading if pooled => DecodePhase::Loaded,
            DecodePhase::Loading => DecodePhase::Running,
            DecodePhase::AbortedLoading => DecodePhase::Freed,
            other => {
                if completion_kills(config, other.forgotten()) {
                    state.incidents.set(Incidents::RECV_FOR_UNKNOWN);
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::base;
    use crate::model::ContractModel;
    use crate::Action;

    /// Two requests reach D, then D's first step scans with a pool of `blocks`.
    fn first_scan(blocks: u8, reservation: LoadReservation) -> (State, Option<ScanStop>) {
        let mut config = base();
        config.requests = 2;
        config.decode.kv_blocks = Some(blocks);
        config.scheduler.load_reservation = reservation;
        let model = ContractModel::new(config);
        let mut state = model.initial_state();
        for request in 0..2 {
            for action in [
                Action::PrefillFinishes { request },
                Action::DecodeAdmits {
                    request,
                    prefix_hit: false,
                },
            ] {
                state = model.apply(&state, action).expect("a transition");
            }
        }
        let stop = schedule_decode(&model.config, &mut state);
        (state, stop)
    }

    fn phases(state: &State) -> Vec<DecodePhase> {
        state.requests.iter().map(|q| q.decode).collect()
    }

    #[test]
    fn the_scan_stops_at_the_first_request_it_cannot_allocate_for() {
        // Full sequence: req0 takes its prefix and reserves the rest, so req1 needs three
        // free blocks beside that reservation, and only two are free.
        let (state, stop) = first_scan(3, LoadReservation::FullSequence);
        assert_eq!(phases(&state), [DecodePhase::Loading, DecodePhase::Queued]);
        assert_eq!(
            stop,
            Some(ScanStop {
                request: 1,
                need: 3,
                free: 2
            })
        );
        // Prefix only: both prefixes fit, and the pool is full.
        let (state, stop) = first_scan(2, LoadReservation::PrefixOnly);
        assert_eq!(phases(&state), [DecodePhase::Loading, DecodePhase::Loading]);
        assert_eq!(stop, None);
        assert_eq!(state.decode_blocks_free(), Some(0));
    }

    #[test]
    fn a_loaded_request_that_cannot_run_blocks_those_behind_it() {
        let (mut state, _) = first_scan(2, LoadReservation::PrefixOnly);
        for q in state.requests.iter_mut() {
            q.decode = DecodePhase::Loaded;
        }
        let config = {
            let mut c = base();
            c.requests = 2;
            c.decode.kv_blocks = Some(2);
            c
        };
        let before = state.clone();
        let stop = schedule_decode(&config, &mut state);
        assert_eq!(state, before, "nothing is promoted");
        assert_eq!(
            stop,
            Some(ScanStop {
                request: 0,
                need: 1,
                free: 0
            })
        );
    }

    /// Two requests at D in `phases`, req0 arrived first, on a pool of three blocks with
    /// asynchronous lookups, under the scheduler `rule` sets.
    fn two_at_d(
        phases: [DecodePhase; 2],
        rule: impl FnOnce(&mut crate::config::Scheduler),
    ) -> (ContractModel, State) {
        let mut config = base();
        config.requests = 2;
        config.connector = Connector::MultiOffload;
        config.decode.kv_blocks = Some(3);
        config.consumer.async_lookup = true;
        rule(&mut config.scheduler);
        let model = ContractModel::new(config);
        let mut state = model.initial_state();
        for (request, (q, phase)) in state.requests.iter_mut().zip(phases).enumerate() {
            q.prefill = crate::state::PrefillPhase::DelayFreed;
            q.arrival = request as u8;
            q.decode = phase;
        }
        (model, state)
    }

    #[test]
    fn no_load_is_admitted_behind_a_request_skipped_without_blocks_once_refused() {
        for (rule, admitted) in [
            (AdmissionBehindSkipped::Allowed, DecodePhase::Loading),
            (AdmissionBehindSkipped::Refused, DecodePhase::LookedUp),
        ] {
            // req0's lookup has not answered; req1's, behind it, has.
            let (model, mut state) = two_at_d(
                [DecodePhase::Deferred, DecodePhase::LookedUp],
                |scheduler| scheduler.admission_behind_skipped = rule,
            );
            let stop = schedule_decode(&model.config, &mut state);
            assert_eq!(stop, None, "{rule:?}");
            assert_eq!(
                phases(&state),
                [DecodePhase::Deferred, admitted],
                "{rule:?}"
            );
        }
    }

    /// A loaded request behind one skipped without blocks: scanned in arrival order the
    /// blockless one's admission fails first and the holder is never promoted; holders
    /// first, it runs and the scan stops at the blockless one after it.
    #[test]
    fn holders_are_scanned_before_requests_without_blocks() {
        for (order, stop, promoted) in [
            (ScanOrder::Arrival, (3, 2), DecodePhase::Loaded),
            (ScanOrder::HoldersFirst, (2, 1), DecodePhase::Running),
        ] {
            let (model, mut state) =
                two_at_d([DecodePhase::LookedUp, DecodePhase::Loaded], |scheduler| {
                    scheduler.scan_order = order
                });
            let (need, free) = stop;
            assert_eq!(
                schedule_decode(&model.config, &mut state),
                Some(ScanStop {
                    request: 0,
                    need,
                    free
                }),
                "{order:?}"
            );
            assert_eq!(
                phases(&state),
                [DecodePhase::LookedUp, promoted],
                "{order:?}"
            );
        }
    }
}
