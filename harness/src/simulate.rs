//! `kvcc simulate`: random executions of the model, written as recorded runs.
//!
//! This closes the loop between the model and `kvcc conform`: a run simulated from a spec
//! that violates a property must be flagged by conform, one from a spec that holds must
//! pass. Each run walks the model from its initial state, picking uniformly among the
//! enabled actions that change the state (faults included), and ends where the model's
//! own liveness verdict is judged — no action that fairness forces is enabled — or at the
//! first state that breaks a safety clause (where the model's story ends too), or at a
//! cap on actions. Randomness is a SplitMix64 stream seeded per run, so a seed and a run
//! index reproduce a run exactly.
//!
//! What a recorder in vLLM would have written comes from the model itself: the worker
//! outputs an engine step handed the aggregator (`apply_observed`), and scheduler events
//! from how each request's P and D phases change between consecutive states.

use kvcc_aggregator::{Step, WorkerOutput};
use kvcc_conform::format::{
    AbortedTransfers, Engine, EventKind, Header, PolicyName, RunWriter, FORMAT_VERSION,
};
use kvcc_model::checker::Checkable;
use kvcc_model::config::{AggregatorPolicy, Connector};
use kvcc_model::properties::{Kind, CLAUSES};
use kvcc_model::state::{DecodePhase, PrefillPhase, Request, RequestId};
use kvcc_model::{Action, ContractModel, Observation, State};
use std::io;
use std::path::Path;

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough to pick actions.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), by Lemire's multiply-shift.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

/// The seed of run `index` of a simulation seeded with `seed`.
pub fn run_seed(seed: u64, index: u64) -> u64 {
    SplitMix64::new(seed ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03)).next_u64()
}

/// Why a run stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// No forced action is enabled: where the model judges liveness.
    Quiescent,
    /// The last state breaks a safety clause: the model explores no further.
    Unsafe,
    /// The action cap was reached: liveness is not judged.
    Capped,
    /// A state had more successors than the checker can number
    /// (`kvcc_model::checker::SUCCESSORS_MAX`): liveness is not judged.
    TooManySuccessors,
}

impl End {
    pub fn text(self) -> &'static str {
        match self {
            End::Quiescent => "no forced action is enabled",
            End::Unsafe => "a safety clause is broken",
            End::Capped => "the action cap was reached (liveness not judged)",
            End::TooManySuccessors => {
                "a state had too many successors to enumerate (liveness not judged)"
            }
        }
    }
}

/// One engine's recording.
#[derive(Clone, Debug)]
pub struct EngineLog {
    pub header: Header,
    /// Per step, per rank: its output, or None when it produced none.
    pub steps: Vec<Vec<Option<WorkerOutput<RequestId>>>>,
    /// (steps aggregated before it, event, request).
    pub events: Vec<(Step, EventKind, RequestId)>,
}

impl EngineLog {
    fn record_step(&mut self, outputs: Vec<WorkerOutput<RequestId>>) {
        let mut ranks: Vec<Option<WorkerOutput<RequestId>>> =
            vec![None; self.header.world_size as usize];
        for output in outputs {
            let rank = usize::from(output.rank);
            ranks[rank] = Some(output);
        }
        self.steps.push(ranks);
    }

    fn event(&mut self, event: EventKind, request: RequestId) {
        self.events.push((self.steps.len() as Step, event, request));
    }

    /// Writes this recording as a run directory.
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        let mut writer = RunWriter::create(dir, &self.header)?;
        for (step, ranks) in self.steps.iter().enumerate() {
            for (rank, output) in ranks.iter().enumerate() {
                writer.rank_step(rank as u16, step as Step, output.as_ref(), |&r| {
                    request_name(r)
                })?;
            }
        }
        for &(step, event, request) in &self.events {
            writer.event(step, event, &request_name(request))?;
        }
        writer.finish()
    }
}

/// The request id a simulated run records for model request `r` (as traces name it).
pub fn request_name(r: RequestId) -> String {
    format!("req{r}")
}

/// One random execution of the model.
#[derive(Clone, Debug)]
pub struct Simulation {
    pub seed: u64,
    pub actions: Vec<Action>,
    pub end: End,
    pub last: State,
    /// Indices into `CLAUSES` the model finds violated where the run ended: the safety
    /// clauses of an unsafe last state, the liveness clauses of a quiescent one.
    pub violated: Vec<usize>,
    pub prefill: EngineLog,
    pub decode: EngineLog,
}

impl Simulation {
    /// `property: clause` of every violated clause.
    pub fn violated_names(&self) -> Vec<String> {
        self.violated
            .iter()
            .map(|&c| format!("{}: {}", CLAUSES[c].property, CLAUSES[c].clause))
            .collect()
    }

    /// The violated properties, each once, in clause order.
    pub fn violated_properties(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = Vec::new();
        for &c in &self.violated {
            if !names.contains(&CLAUSES[c].property) {
                names.push(CLAUSES[c].property);
            }
        }
        names
    }

    /// Writes `dir/prefill/` and `dir/decode/`.
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        self.prefill.write(&dir.join(Engine::Prefill.name()))?;
        self.decode.write(&dir.join(Engine::Decode.name()))
    }
}

fn headers(model: &ContractModel) -> (Header, Header) {
    let c = &model.config;
    let t = &model.topology;
    let policy = match c.policy {
        AggregatorPolicy::Countdown => PolicyName::Countdown,
        AggregatorPolicy::Strict => PolicyName::Strict,
    };
    // A MultiConnector's count is None when a child's is (docs/contracts.md §8).
    let (connector, multi) = match c.connector {
        Connector::Nixl => ("NixlConnector", false),
        Connector::MultiOffload => ("MultiConnector", true),
    };
    let count = |expected: u32| (!multi).then_some(expected);
    let prefill = Header {
        format_version: FORMAT_VERSION,
        engine: Engine::Prefill,
        kv_role: Some(
            if c.prefill.loads_kv {
                "kv_both"
            } else {
                "kv_producer"
            }
            .into(),
        ),
        kv_connector: connector.into(),
        world_size: u32::from(t.prefill_world),
        output_rank: t.prefill_output_rank,
        finished_count: count(t.prefill_expected),
        aggregator_policy: policy,
        transfer_ranks: Some((0..t.prefill_world).filter(|&r| t.is_transfer(r)).collect()),
        tp_size: Some(u32::from(c.prefill.tp)),
        pp_size: Some(u32::from(c.prefill.pp)),
        pcp_size: Some(u32::from(c.prefill.pcp)),
        aborted_transfers: match c.scheduler.aborted_transfers {
            kvcc_model::config::AbortedTransfers::FreeAtFirst => AbortedTransfers::FreeAtFirst,
            kvcc_model::config::AbortedTransfers::FreeAfterAll => AbortedTransfers::FreeAfterAll,
        },
    };
    let decode = Header {
        format_version: FORMAT_VERSION,
        engine: Engine::Decode,
        kv_role: Some("kv_consumer".into()),
        kv_connector: connector.into(),
        world_size: u32::from(t.decode_world),
        output_rank: kvcc_model::engine::DECODE_OUTPUT_RANK,
        finished_count: count(t.decode_expected),
        aggregator_policy: policy,
        transfer_ranks: None,
        tp_size: Some(u32::from(c.decode.tp)),
        pp_size: None,
        pcp_size: None,
        aborted_transfers: AbortedTransfers::FreeAtFirst,
    };
    (prefill, decode)
}

/// The scheduler events of one transition, per engine, from the request phases.
/// `saves_while_loading`: P's connector saves while it loads
/// (`prefill.saves-while-loading`), so an abort during P's own load hands the free to
/// the connector, which vLLM's recorder logs as `delay-freed` (`_connector_finished`).
fn events(
    before: &State,
    after: &State,
    saves_while_loading: bool,
    prefill: &mut EngineLog,
    decode: &mut EngineLog,
) {
    for r in 0..after.request_count() {
        let (a, b) = (&before.requests[r], &after.requests[r]);
        let request = r as RequestId;
        if !a.aborted && b.aborted {
            // Each scheduler hears of an abort only if it still holds the request.
            if matches!(
                a.prefill,
                PrefillPhase::LoadingKv | PrefillPhase::Prefilling | PrefillPhase::DelayFreed
            ) {
                prefill.event(EventKind::Aborted, request);
                if saves_while_loading && a.prefill == PrefillPhase::LoadingKv {
                    prefill.event(EventKind::DelayFreed, request);
                }
            }
            if a.decode == DecodePhase::Loading {
                decode.event(EventKind::Aborted, request);
            }
        }
        if a.prefill != b.prefill {
            let event = match b.prefill {
                PrefillPhase::Prefilling => Some(EventKind::Woken),
                PrefillPhase::DelayFreed => Some(EventKind::DelayFreed),
                PrefillPhase::Released
                | PrefillPhase::Dropped
                | PrefillPhase::AbortFreed
                | PrefillPhase::FinishedEmpty => Some(EventKind::Freed),
                PrefillPhase::LoadingKv | PrefillPhase::AbortedLoadingKv => None,
            };
            if let Some(event) = event {
                prefill.event(event, request);
            }
        }
        // A preemption on D comes after the wake-up, past which D's log follows nothing
        // (docs/vllm.md); only a second wait for remote KV (`consumer.lookup-after-load =
        // "second-load"`) brings the request back into it, as its status would in vLLM.
        let second_wait =
            |q: &Request| matches!(q.decode, DecodePhase::Loading | DecodePhase::AbortedLoading);
        // A synchronous load waits in no queue and reports no completion: the recorder
        // logs nothing for it, its failure included (the step's invalid blocks).
        if a.decode != b.decode
            && !a.decode.sync_load()
            && (!b.decode_preempted || second_wait(a) || second_wait(b))
        {
            let event = match b.decode {
                DecodePhase::Loading => Some(EventKind::WaitingForRemoteKvs),
                // Woken once its load is in; with a finite pool running comes later, and
                // past the wake-up D's log has nothing more for the connector.
                DecodePhase::Loaded => Some(EventKind::Woken),
                DecodePhase::Running if a.decode == DecodePhase::Loading => Some(EventKind::Woken),
                // Under `recompute` (with a pool) the failed load sends it back to
                // WAITING; without a pool it runs at once, and is logged as woken.
                DecodePhase::Failed | DecodePhase::Recomputing => Some(EventKind::LoadFailed),
                DecodePhase::Freed if a.decode != DecodePhase::Loaded => Some(EventKind::Freed),
                // An abort (already logged), a request D never admitted, or one past its
                // wake-up.
                DecodePhase::Running
                | DecodePhase::Freed
                | DecodePhase::Done
                | DecodePhase::AbortedLoading
                | DecodePhase::Pending
                | DecodePhase::Queued
                | DecodePhase::Deferred
                | DecodePhase::LookedUp
                | DecodePhase::Gone
                | DecodePhase::Crashed
                | DecodePhase::SyncLoading
                | DecodePhase::Rewound => None,
            };
            if let Some(event) = event {
                decode.event(event, request);
            }
        }
    }
}

/// What a recorder in vLLM would write while the model walks a path: both engines' logs,
/// fed one transition at a time. `kvcc simulate` feeds it random steps, `kvcc confirm` a
/// trace's steps; the recorded runs are written the same way for both.
#[derive(Clone, Debug)]
pub struct Recorder {
    pub prefill: EngineLog,
    pub decode: EngineLog,
    saves_while_loading: bool,
}

impl Recorder {
    /// Starts the logs of a run from `initial`, the model's initial state.
    pub fn new(model: &ContractModel, initial: &State) -> Recorder {
        let (prefill_header, decode_header) = headers(model);
        let mut prefill = EngineLog {
            header: prefill_header,
            steps: Vec::new(),
            events: Vec::new(),
        };
        let decode = EngineLog {
            header: decode_header,
            steps: Vec::new(),
            events: Vec::new(),
        };
        for (r, q) in initial.requests.iter().enumerate() {
            if q.prefill == PrefillPhase::LoadingKv {
                prefill.event(EventKind::WaitingForRemoteKvs, r as RequestId);
            }
        }
        Recorder {
            prefill,
            decode,
            saves_while_loading: model.config.prefill.saves_while_loading,
        }
    }

    /// Records the transition `before` → `after` and what its action handed the
    /// aggregators (`ContractModel::apply_observed`).
    pub fn record(&mut self, before: &State, after: &State, observation: Observation) {
        if let Some(outputs) = observation.prefill_outputs {
            self.prefill.record_step(outputs);
        }
        if let Some(outputs) = observation.decode_outputs {
            self.decode.record_step(outputs);
        }
        events(
            before,
            after,
            self.saves_while_loading,
            &mut self.prefill,
            &mut self.decode,
        );
    }
}

/// A path of the model (a trace's actions from the initial state) as recorded runs: the
/// logs, and every state of the path. Err names the first step (from 1) whose action is
/// not enabled where the path has led.
pub fn record_path(
    model: &ContractModel,
    actions: &[Action],
) -> Result<(Recorder, Vec<State>), usize> {
    let mut state = model.initial_state();
    let mut recorder = Recorder::new(model, &state);
    let mut states = vec![state.clone()];
    let mut enabled = Vec::new();
    for (i, &action) in actions.iter().enumerate() {
        enabled.clear();
        let listed = model
            .enabled_actions(&state, &mut enabled, kvcc_model::checker::SUCCESSORS_MAX)
            .is_ok();
        if !listed || !enabled.contains(&action) {
            return Err(i + 1);
        }
        let (next, observation) = model.apply_observed(&state, action).ok_or(i + 1)?;
        recorder.record(&state, &next, observation);
        states.push(next.clone());
        state = next;
    }
    Ok((recorder, states))
}

/// One random run of `model`, at most `actions_max` actions long.
pub fn simulate(model: &ContractModel, seed: u64, actions_max: usize) -> Simulation {
    let config = &model.config;
    let mut state = model.initial_state();
    let mut recorder = Recorder::new(model, &state);
    let mut rng = SplitMix64::new(seed);
    let mut taken = Vec::new();
    let mut enabled = Vec::new();
    let end = loop {
        if !kvcc_model::properties::safe(config, &state) {
            break End::Unsafe;
        }
        enabled.clear();
        if model
            .enabled_actions(&state, &mut enabled, kvcc_model::checker::SUCCESSORS_MAX)
            .is_err()
        {
            break End::TooManySuccessors;
        }
        let mut candidates: Vec<_> = enabled
            .iter()
            .filter_map(|&a| model.apply_observed(&state, a).map(|(s, o)| (a, s, o)))
            .collect();
        if candidates.iter().all(|(a, _, _)| model.is_optional(a)) {
            break End::Quiescent;
        }
        if taken.len() >= actions_max {
            break End::Capped;
        }
        let (action, next, observation) = candidates.swap_remove(rng.below(candidates.len()));
        recorder.record(&state, &next, observation);
        taken.push(action);
        state = next;
    };
    let judged = match end {
        End::Unsafe => Some(Kind::Safety),
        End::Quiescent => Some(Kind::Liveness),
        End::Capped | End::TooManySuccessors => None,
    };
    let violated = CLAUSES
        .iter()
        .enumerate()
        .filter(|(_, c)| Some(c.kind) == judged && !(c.holds)(config, &state))
        .map(|(i, _)| i)
        .collect();
    Simulation {
        seed,
        actions: taken,
        end,
        last: state,
        violated,
        prefill: recorder.prefill,
        decode: recorder.decode,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_deterministic_and_below_stays_in_range() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut counts = [0u32; 3];
        for _ in 0..3000 {
            counts[a.below(3)] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "{counts:?}");
        }
        assert_ne!(run_seed(1, 0), run_seed(1, 1));
        assert_ne!(run_seed(1, 0), run_seed(2, 0));
    }
}
