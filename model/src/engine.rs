//! One engine step (docs/contracts.md §3): the scheduler's metadata reaches every worker, each
//! worker returns its completion sets, the executor hands all of them to the aggregator
//! in rank order, and the scheduler acts on what the aggregator emits.

use crate::config::{AggregatorPolicy, Config, LoadMode, StageOutput, MAX_REQUESTS};
use crate::offload::{self, StoresDone};
use crate::state::{
    Engine, Incidents, LoadPhase, Metadata, PrefillPhase, Request, RequestId, SendPhase, State,
};
use crate::{decoder, rank, scheduler};
use kvcc_aggregator::{Direction, StepOutcome, ViolationKind, WorkerOutput};

/// D's output rank: its output carries the aggregated result back to the scheduler. (P's
/// is [`crate::topology::Topology::prefill_output_rank`], in its last pipeline stage.)
pub const DECODE_OUTPUT_RANK: u16 = 0;

/// Advances metadata by one step; returns the requests whose metadata arrives now.
fn advance(meta: &mut Metadata) -> bool {
    match *meta {
        Metadata::Due(1) => {
            *meta = Metadata::Delivered;
            true
        }
        Metadata::Due(n) => {
            *meta = Metadata::Due(n - 1);
            false
        }
        _ => false,
    }
}

/// A P engine step. `output_lost`: the output rank's output is missing, so the whole
/// step's reports are dropped. `announce`: the output rank announces a new count.
/// `stores_done`: the offloading stores that have completed by the workers' poll.
/// Returns the worker outputs handed to the aggregator (what a recorder would log).
pub fn prefill_step(
    config: &Config,
    state: &mut State,
    output_lost: bool,
    announce: bool,
    stores_done: StoresDone,
) -> Vec<WorkerOutput<RequestId>> {
    for worker in 0..state.topology().prefill_world {
        for r in 0..state.request_count() as RequestId {
            let send = rank::send_at_poll(config, state, worker, r);
            state.prefill_cell_mut(worker, r).send = send;
        }
    }
    // Requests whose send metadata arrives now go behind every entry of
    // `_reqs_to_send`, in id order: places past any dense one, which
    // `rank::renumber_queue` makes dense again once the action is done.
    let ordered = state.topology().ordered_leases;
    for (r, q) in state.requests.iter_mut().enumerate() {
        if advance(&mut q.send_meta) && ordered {
            q.queued_after = (MAX_REQUESTS + r) as u8;
        }
    }
    // The reaper's scan left an expired lease behind a live one (only a head-only
    // reaper over ordered leases holds one).
    let skipped = ordered
        && (0..state.topology().prefill_world).any(|k| {
            (0..state.request_count() as RequestId)
                .any(|r| state.prefill_cell(k, r).send == SendPhase::Expired)
        });
    if skipped {
        state.incidents.set(Incidents::LEASE_SKIPPED);
    }
    offload::complete(state, stores_done);

    let output_rank = state.topology().prefill_output_rank;
    let mut outputs = Vec::with_capacity(usize::from(state.topology().prefill_world));
    for worker in 0..state.topology().prefill_world {
        let mut output = WorkerOutput::empty(worker);
        for r in 0..state.request_count() as RequestId {
            if rank::ready_to_report(state, worker, r) {
                let cleared = rank::cleared(config, state, worker);
                let again = state.prefill_cell(worker, r).send == SendPhase::ReportsAgain;
                state.prefill_cell_mut(worker, r).send = if cleared {
                    SendPhase::Cleared
                } else if again {
                    SendPhase::ReportedAgain
                } else {
                    SendPhase::Reported
                };
                if !cleared {
                    output.finished_sending.insert(r);
                }
            }
            let cell = state.prefill_cell_mut(worker, r);
            if cell.load == LoadPhase::Done {
                cell.load = LoadPhase::Reported;
                output.finished_recving.insert(r);
            }
        }
        for &r in &output.finished_sending {
            let request = &state.requests[usize::from(r)];
            // A save during a load delays the free of a request aborted while loading
            // (`prefill.saves-while-loading`), whether or not its scheduler still holds it.
            let saving = config.prefill.saves_while_loading
                && request.aborted
                && matches!(
                    request.prefill,
                    PrefillPhase::AbortedLoadingKv | PrefillPhase::Dropped
                );
            let delayed = saving
                || matches!(
                    request.prefill,
                    PrefillPhase::DelayFreed | PrefillPhase::Released | PrefillPhase::AbortFreed
                );
            if !delayed {
                state.incidents.set(Incidents::SEND_WITHOUT_DELAY);
            }
        }
        if worker == output_rank && announce {
            output.expected_finished_count = state.topology().prefill_announced.unwrap_or(0);
        }
        // A stage before the last that returns nothing hands the aggregator a None, on
        // which vLLM's aggregator asserts: the engine dies (and its reports are gone).
        let none = config.prefill.pp_stage_output == StageOutput::None
            && state.topology().before_last_stage(worker);
        if none {
            state.incidents.set(Incidents::NONE_OUTPUT);
        }
        let dropped = none || (worker == output_rank && output_lost);
        if !dropped {
            outputs.push(output);
        }
    }
    if announce {
        state.once |= State::ONCE_COUNT_ANNOUNCED;
    }
    let outcome = aggregate(config, state, &outputs, Engine::Prefill, output_rank);
    scheduler::on_prefill_outcome(config, state, &outcome);
    outputs
}

/// A D engine step. Returns the worker outputs handed to the aggregator.
pub fn decode_step(
    config: &Config,
    state: &mut State,
    output_lost: bool,
) -> Vec<WorkerOutput<RequestId>> {
    scheduler::schedule_decode(config, state);
    scheduler::on_sync_load_outputs(config, state);
    for r in 0..state.request_count() as RequestId {
        if advance(&mut state.requests[usize::from(r)].recv_meta) {
            for d in 0..state.topology().decode_world {
                decoder::receive_load_metadata(config, state, d, r);
            }
        }
    }
    let mut outputs = Vec::with_capacity(usize::from(state.topology().decode_world));
    for worker in 0..state.topology().decode_world {
        let mut output = WorkerOutput::empty(worker);
        // A synchronous load reports no completion: its outcome is its step's.
        if config.consumer.load == LoadMode::Asynchronous {
            for r in 0..state.request_count() as RequestId {
                if let Some(failed) = decoder::forward_reports(config, state, worker, r) {
                    output.finished_recving.insert(r);
                    if failed {
                        output.failed_recving.insert(r);
                    }
                }
            }
        }
        if !(worker == DECODE_OUTPUT_RANK && output_lost) {
            outputs.push(output);
        }
    }
    let outcome = aggregate(config, state, &outputs, Engine::Decode, DECODE_OUTPUT_RANK);
    scheduler::on_decode_outcome(config, state, &outcome);
    outputs
}

/// Runs the real aggregator and records what the contract monitors need: reports counted
/// for ids already emitted, and Strict's refusals.
fn aggregate(
    config: &Config,
    state: &mut State,
    outputs: &[WorkerOutput<RequestId>],
    engine: Engine,
    output_rank: u16,
) -> StepOutcome<RequestId> {
    let output_present = outputs.iter().any(|o| o.rank == output_rank);
    if config.policy == AggregatorPolicy::Countdown
        && output_present
        && overflows(state, outputs, engine)
    {
        state.incidents.set(Incidents::REOPENED);
    }
    let outcome = state.aggregator_mut(engine).aggregate(outputs, output_rank);
    for violation in &outcome.violations {
        state.incidents.set(match violation.kind {
            ViolationKind::DuplicateReport => Incidents::STRICT_DUPLICATE,
            ViolationKind::ReportAfterEmission => Incidents::STRICT_AFTER_EMISSION,
            ViolationKind::ReportBeyondExpected => Incidents::STRICT_BEYOND_EXPECTED,
            ViolationKind::Unannounced => Incidents::STRICT_UNANNOUNCED,
        });
    }
    outcome
}

/// Would `outputs` give some countdown more reports than it has room for? Countdown
/// cannot tell by itself: a report past zero silently opens a fresh entry.
fn overflows(state: &State, outputs: &[WorkerOutput<RequestId>], engine: Engine) -> bool {
    let aggregator = state.aggregator(engine);
    let expected = kvcc_aggregator::step_expected(
        outputs.iter().map(|o| o.expected_finished_count),
        aggregator.expected(),
    );
    emitted_bits(engine).into_iter().any(|(direction, bit)| {
        (0..state.request_count() as RequestId).any(|r| {
            let reports = outputs
                .iter()
                .filter(|o| o.finished(direction).contains(&r))
                .count() as u32;
            let emitted = bit != 0 && state.requests[usize::from(r)].emitted & bit != 0;
            reports
                > kvcc_aggregator::countdown_room(
                    aggregator.remaining(direction, &r),
                    emitted,
                    expected,
                )
        })
    })
}

fn emitted_bits(engine: Engine) -> [(Direction, u8); 2] {
    match engine {
        Engine::Prefill => [
            (Direction::Sending, Request::EMITTED_SEND),
            (Direction::Recving, Request::EMITTED_LOAD),
        ],
        Engine::Decode => [
            (Direction::Sending, 0),
            (Direction::Recving, Request::EMITTED_RECV),
        ],
    }
}
