//! The completion-contract model: P and D engines, their workers, one real aggregator
//! each, D's reads and notifications, leases, aborts and faults (docs/contracts.md; vLLM PRs
//! #52779, #53903, #53781, #59325, #56104, #56640).
//!
//! `actions` pushes every guarded action in a fixed order; `next_state` clones the state
//! (the checker's `step_into` copies it into one reused successor instead) and applies
//! one action through the domain modules ([`crate::rank`],
//! [`crate::decoder`], [`crate::lease`], [`crate::scheduler`], [`crate::engine`]). An
//! action that would change nothing is not a transition (stuttering is invisible to every
//! property), which keeps the state graph acyclic.

pub use crate::action::Action;
use crate::config::{Config, FailedStep, FailedStore, PrefixHit};
use crate::message::Delivery;
use crate::offload::{self, StoresDone};
use crate::properties::{Kind, CLAUSES};
use crate::state::{
    DecodeCell, DecodePhase, HandlePhase, Incidents, LoadPhase, Metadata, PrefillCell,
    PrefillPhase, Request, RequestId, SendPhase, Shape, StaleStore, State, StorePhase,
};
use crate::topology::Topology;
use crate::{decoder, engine, lease, scheduler};
use kvcc_aggregator::{Policy, SortedAggregator, WorkerOutput};
use std::sync::Arc;

/// What the workers of an engine step handed the aggregator, in rank order. A step that
/// lost the output rank's output lacks rank 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    pub prefill_outputs: Option<Vec<WorkerOutput<RequestId>>>,
    pub decode_outputs: Option<Vec<WorkerOutput<RequestId>>>,
}

/// One contract scenario, ready to explore.
#[derive(Clone, Debug)]
pub struct ContractModel {
    pub config: Config,
    /// Leaked once per model (a few hundred bytes) so that every state can point at it
    /// without a reference count; see [`crate::state::Shape`].
    pub topology: &'static Topology,
    /// Whether stateright's interface (its checkers, its explorer) lists the successors
    /// of a state that breaks a safety clause: off, a run stops there. kvcc's own
    /// checker reads [`crate::checker::Options::past_violations`] instead; whoever builds
    /// both sets them alike ([`ContractModel::past_violations`]).
    pub past_violations: bool,
    /// Requests the state leaves out may keep either engine stepping whenever it could
    /// step at all: a step only they need is one fairness never forces. Set for the model
    /// that stands for many independent requests ([`crate::independence`]).
    pub others_step: bool,
    /// [`State::progress`] read off packed bytes, for the checker.
    progress: crate::pack::ProgressTable,
}

impl ContractModel {
    /// A model of a validated config.
    pub fn new(config: Config) -> ContractModel {
        let topology: &'static Topology = Box::leak(Box::new(Topology::new(&config)));
        ContractModel {
            progress: crate::pack::ProgressTable::new(topology, usize::from(config.requests)),
            config,
            topology,
            past_violations: false,
            others_step: false,
        }
    }

    /// The same model, whose stateright interface explores past safety violations
    /// (`on`) or stops at them.
    pub fn past_violations(mut self, on: bool) -> ContractModel {
        self.past_violations = on;
        self
    }

    pub fn initial_state(&self) -> State {
        let c = &self.config;
        let t = &self.topology;
        let n = usize::from(c.requests);
        let policy = match c.policy {
            crate::config::AggregatorPolicy::Countdown => Policy::Countdown,
            crate::config::AggregatorPolicy::Strict => Policy::Strict,
        };
        let mut prefill_aggregator = SortedAggregator::sorted(policy, t.prefill_expected);
        let cell = PrefillCell {
            notifications: 0,
            in_flight: 0,
            dropped: 0,
            send: SendPhase::InBatch,
            store: StorePhase::NotUsed,
            stale_store: StaleStore::None,
            load: if c.prefill.loads_kv {
                LoadPhase::Loading
            } else {
                LoadPhase::NotUsed
            },
        };
        let phase = if c.prefill.loads_kv {
            PrefillPhase::LoadingKv
        } else {
            PrefillPhase::Prefilling
        };
        if c.prefill.loads_kv {
            for r in 0..n as RequestId {
                prefill_aggregator.announce(kvcc_aggregator::Direction::Recving, r);
            }
        }
        State {
            requests: smallvec::smallvec![
                Request {
                    prefill: phase,
                    decode: DecodePhase::Pending,
                    send_meta: Metadata::NotQueued,
                    recv_meta: Metadata::NotQueued,
                    prefix_hit: false,
                    aborted: false,
                    emitted: 0,
                    rescue: 0,
                    queued_after: 0,
                    arrival: 0,
                    decode_preempted: false,
                    stale_token: false,
                };
                n
            ],
            prefill: smallvec::smallvec![cell; usize::from(t.prefill_world) * n],
            handles: smallvec::smallvec![HandlePhase::NotPosted; t.handles.len() * n],
            decode: smallvec::smallvec![DecodeCell::Idle; usize::from(t.decode_world) * n],
            child_loads: smallvec::smallvec![LoadPhase::NotUsed; usize::from(t.decode_world) * n],
            prefill_aggregator: Arc::new(prefill_aggregator),
            decode_aggregator: Arc::new(SortedAggregator::sorted(policy, t.decode_expected)),
            incidents: Incidents::default(),
            once: 0,
            shape: Shape(self.topology),
        }
    }

    /// Every action enabled in `state`, in a fixed order. `Err(count)` when the state has
    /// more successors than `successors_max` (only a MultiConnector P step's choices of
    /// finished offload stores can grow so): then no P-step action is generated, and
    /// `count` is how many there would be, saturated.
    pub fn enabled_actions(
        &self,
        state: &State,
        actions: &mut Vec<Action>,
        successors_max: u64,
    ) -> Result<(), u64> {
        let c = &self.config;
        let t = &self.topology;
        let faults = &c.faults;
        let requests = 0..state.request_count() as RequestId;
        for r in requests.clone() {
            let q = &state.requests[usize::from(r)];
            if q.prefill == PrefillPhase::Prefilling {
                actions.push(Action::PrefillFinishes { request: r });
                if faults.prefill_preempted && state.once & State::ONCE_PREFILL_PREEMPTED == 0 {
                    actions.push(Action::PrefillPreempted { request: r });
                }
                if faults.final_step_preempted && state.once & State::ONCE_FINAL_STEP_PREEMPTED == 0
                {
                    actions.push(Action::PrefillPreemptedInFinalStep { request: r });
                }
            }
            for rank in 0..t.prefill_world {
                let cell = state.prefill_cell(rank, r);
                if cell.load == LoadPhase::Loading {
                    actions.push(Action::PrefillWorkerLoads { rank, request: r });
                }
                if cell.stale_store == StaleStore::Running {
                    actions.push(Action::StaleStoreCompletes { rank, request: r });
                }
                if faults.offload_store_raises && cell.store == StorePhase::Storing {
                    actions.push(Action::OffloadStoreRaises { rank, request: r });
                }
                if lease::may_expire(c, state, rank, r) {
                    actions.push(Action::LeaseExpires { rank, request: r });
                }
                if cell.in_flight > 0 {
                    actions.push(Action::NotificationArrives { rank, request: r });
                }
            }
            let p_finished = matches!(
                q.prefill,
                PrefillPhase::DelayFreed
                    | PrefillPhase::Released
                    | PrefillPhase::AbortFreed
                    | PrefillPhase::FinishedEmpty
            );
            if q.decode == DecodePhase::Pending && p_finished {
                actions.push(Action::DecodeAdmits {
                    request: r,
                    prefix_hit: false,
                });
                if c.consumer.prefix_hit != PrefixHit::Off {
                    actions.push(Action::DecodeAdmits {
                        request: r,
                        prefix_hit: true,
                    });
                }
                if faults.decoder_never_reads {
                    actions.push(Action::DecoderCrashes { request: r });
                }
                if faults.rejected_before_admission {
                    actions.push(Action::DecodeRejects { request: r });
                }
            }
            if q.decode == DecodePhase::Running && c.decode.kv_blocks.is_some() {
                actions.push(Action::DecodeFinishes { request: r });
                if faults.decode_preempted && !q.decode_preempted {
                    actions.push(Action::DecodePreempted { request: r });
                }
            }
            if q.decode == DecodePhase::Deferred {
                actions.push(Action::LookupAnswers { request: r });
            }
            for decoder in 0..t.decode_world {
                let mut handles = t.handles_of(decoder);
                if handles.all(|h| state.handle(h, r) == HandlePhase::Handshaking)
                    && t.handles_of(decoder).next().is_some()
                {
                    actions.push(Action::HandshakeCompletes {
                        decoder,
                        request: r,
                        ok: true,
                    });
                    actions.push(Action::HandshakeCompletes {
                        decoder,
                        request: r,
                        ok: false,
                    });
                }
            }
            for decoder in 0..t.decode_world {
                if state.child_load(decoder, r) == LoadPhase::Loading {
                    actions.push(Action::DecodeChildLoads {
                        decoder,
                        request: r,
                    });
                }
                if faults.child_reports_twice
                    && state.once & State::ONCE_CHILD_REPORTED_TWICE == 0
                    && state.decode_cell(decoder, r) == DecodeCell::Reported
                {
                    actions.push(Action::ChildReportsAgain {
                        decoder,
                        request: r,
                    });
                }
            }
            for h in 0..t.handles.len() {
                if state.handle(h, r) == HandlePhase::Reading {
                    let handle = h as u16;
                    for (notification_lost, notification_duplicated) in
                        [(false, false), (true, false), (false, true)]
                    {
                        let injected = (notification_lost
                            && !c.notification_delivery(Delivery::Lost))
                            || (notification_duplicated
                                && (t.push || !c.notification_delivery(Delivery::Duplicated)));
                        if !injected {
                            actions.push(Action::ReadCompletes {
                                handle,
                                request: r,
                                notification_lost,
                                notification_duplicated,
                            });
                        }
                    }
                    if faults.transfer_error || faults.push_write_fails {
                        actions.push(Action::ReadFails { handle, request: r });
                    }
                }
            }
            if faults.client_abort && scheduler::abortable(state, r) {
                actions.push(Action::ClientAborts { request: r });
            }
        }
        if self.prefill_steps(state) {
            // A P step comes in at most 4 variants (output lost or not, count announced
            // or not) for each choice of stores.
            let stores = offload::choices(c, state, successors_max / 4)
                .map_err(|count| count.saturating_mul(4))?;
            let lost = [
                false,
                faults.missing_output_rank.hits(true)
                    && state.once & State::ONCE_PREFILL_OUTPUT_LOST == 0,
            ];
            let announce = [
                false,
                t.prefill_announced.is_some() && state.once & State::ONCE_COUNT_ANNOUNCED == 0,
            ];
            for output_lost in lost
                .into_iter()
                .enumerate()
                .filter(|&(i, on)| i == 0 || on)
                .map(|(_, on)| on)
            {
                for announces_count in announce
                    .into_iter()
                    .enumerate()
                    .filter(|&(i, on)| i == 0 || on)
                    .map(|(_, on)| on)
                {
                    for &stores_done in &stores {
                        actions.push(Action::PrefillEngineSteps {
                            output_lost,
                            announces_count,
                            stores_done,
                            raised: false,
                        });
                    }
                }
            }
        }
        // A step in which a worker raises: one variant, whatever else the step would
        // have done (no stores, no announcement), since its outputs never reach the
        // aggregator.
        let raises = |prefill: bool, bit: u8| {
            faults.worker_step_raises.hits(prefill)
                && c.scheduler.failed_step != FailedStep::FailStop
                && state.once & bit == 0
        };
        if self.prefill_steps(state) && raises(true, State::ONCE_PREFILL_STEP_RAISED) {
            actions.push(Action::PrefillEngineSteps {
                output_lost: false,
                announces_count: false,
                stores_done: StoresDone::default(),
                raised: true,
            });
        }
        if self.decode_steps(state) {
            actions.push(Action::DecodeEngineSteps {
                output_lost: false,
                raised: false,
            });
            if faults.missing_output_rank.hits(false)
                && state.once & State::ONCE_DECODE_OUTPUT_LOST == 0
            {
                actions.push(Action::DecodeEngineSteps {
                    output_lost: true,
                    raised: false,
                });
            }
            if raises(false, State::ONCE_DECODE_STEP_RAISED) {
                actions.push(Action::DecodeEngineSteps {
                    output_lost: false,
                    raised: true,
                });
            }
        }
        Ok(())
    }

    /// Does P's engine step: for a request in the state, or for others left out of it,
    /// unless a request in the state blocks it (no other request unblocks it).
    fn prefill_steps(&self, state: &State) -> bool {
        scheduler::prefill_steps(&self.config, state)
            || (self.others_step && !scheduler::prefill_blocked(&self.config, state))
    }

    /// Does D's engine step: for a request in the state, or for others left out of it,
    /// unless a request in the state blocks it.
    fn decode_steps(&self, state: &State) -> bool {
        scheduler::decode_steps(&self.config, state)
            || (self.others_step && !scheduler::decode_blocked(&self.config, state))
    }

    /// Whether fairness forces `action` in `state`: every action but an injected fault
    /// or a client's choice, and but an engine step that only requests left out of the
    /// state would take ([`ContractModel::others_step`]).
    pub fn forces(&self, state: &State, action: &Action) -> bool {
        !action.is_injected_only()
            && match action {
                Action::PrefillEngineSteps { .. } => scheduler::prefill_steps(&self.config, state),
                Action::DecodeEngineSteps { .. } => scheduler::decode_steps(&self.config, state),
                _ => true,
            }
    }

    /// The state after `action`, or None when it would change nothing.
    pub fn apply(&self, state: &State, action: Action) -> Option<State> {
        self.apply_observed(state, action).map(|(next, _)| next)
    }

    /// Up to `limit` reachable states, unreduced, breadth first from the initial state:
    /// for tests that check a claim on every state of a small point (a packing, a
    /// reduction, a canonical form). A search is [`crate::checker::check`].
    pub fn reachable_states(&self, limit: usize) -> Vec<State> {
        let mut seen = std::collections::HashSet::new();
        let mut queue = std::collections::VecDeque::from([self.initial_state()]);
        let mut states = Vec::new();
        let mut actions = Vec::new();
        while let Some(state) = queue.pop_front() {
            if states.len() >= limit || !seen.insert(state.clone()) {
                continue;
            }
            actions.clear();
            self.enabled_actions(&state, &mut actions, u64::MAX)
                .expect("no cap on successors");
            queue.extend(actions.iter().filter_map(|&a| self.apply(&state, a)));
            states.push(state);
        }
        states
    }

    /// [`ContractModel::apply`], plus what a recorder in vLLM would have seen: the worker
    /// outputs of an engine step (`kvcc simulate` writes them as recorded runs).
    pub fn apply_observed(&self, state: &State, action: Action) -> Option<(State, Observation)> {
        let mut next = state.clone();
        let mut observation = Observation::default();
        self.step_in_place(state, action, &mut next, &mut observation)
            .then_some((next, observation))
    }

    /// Steps `next`, a copy of `state`, by `action`, noting the engine step's worker
    /// outputs in `observation`; false when the action changes nothing (no transition).
    fn step_in_place(
        &self,
        state: &State,
        action: Action,
        next: &mut State,
        observation: &mut Observation,
    ) -> bool {
        let c = &self.config;
        match action {
            Action::PrefillFinishes { request: r } => scheduler::finish_prefill(c, next, r),
            Action::PrefillWorkerLoads { rank, request } => {
                next.prefill_cell_mut(rank, request).load = LoadPhase::Done
            }
            Action::PrefillEngineSteps { raised: true, .. } => {
                next.once |= State::ONCE_PREFILL_STEP_RAISED;
                // Dropped: the workers handed their finished ids over and the executor
                // threw the outputs away, so the aggregator (and a recorder at its door)
                // sees no step. Kept: the retry carries them, as if the step had waited.
                if c.scheduler.failed_step == FailedStep::RetryDropsReports {
                    engine::prefill_step(c, next, true, false, StoresDone::default());
                }
            }
            Action::PrefillEngineSteps {
                output_lost,
                announces_count,
                stores_done,
                raised: false,
            } => {
                if output_lost {
                    next.once |= State::ONCE_PREFILL_OUTPUT_LOST;
                }
                observation.prefill_outputs = Some(engine::prefill_step(
                    c,
                    next,
                    output_lost,
                    announces_count,
                    stores_done,
                ))
            }
            Action::PrefillPreempted { request } => {
                next.once |= State::ONCE_PREFILL_PREEMPTED;
                for rank in 0..self.topology.prefill_world {
                    next.prefill_cell_mut(rank, request).stale_store = StaleStore::Running;
                }
            }
            Action::StaleStoreCompletes { rank, request } => {
                next.prefill_cell_mut(rank, request).stale_store = StaleStore::Done
            }
            Action::OffloadStoreRaises { rank, request } => {
                next.prefill_cell_mut(rank, request).store = match c.producer.failed_store {
                    FailedStore::Counted => StorePhase::Stored,
                    FailedStore::Leaked => StorePhase::Leaked,
                }
            }
            Action::LeaseExpires { rank, request } => {
                // Held if the reaper will stop before it; else as good as reaped: the
                // entries before it can only leave or expire, and later ones go behind.
                next.prefill_cell_mut(rank, request).send =
                    match crate::rank::reaper_stop(state, rank, request) {
                        Some(_) => SendPhase::Expired,
                        None => SendPhase::Done,
                    }
            }
            Action::DecodeAdmits {
                request,
                prefix_hit,
            } => scheduler::admit_decode(c, next, request, prefix_hit),
            Action::DecoderCrashes { request: r } => {
                next.requests[usize::from(r)].decode = DecodePhase::Crashed
            }
            Action::DecodeRejects { request: r } => decoder::reject(c, next, r),
            Action::HandshakeCompletes {
                decoder,
                request,
                ok,
            } => decoder::complete_handshake(c, next, decoder, request, ok),
            Action::ReadCompletes {
                handle,
                request,
                notification_lost,
                notification_duplicated,
            } => decoder::complete_read(
                c,
                next,
                usize::from(handle),
                request,
                match (notification_lost, notification_duplicated) {
                    (true, _) => 0,
                    (false, true) => 2,
                    (false, false) => 1,
                },
            ),
            Action::NotificationArrives { rank, request } => {
                crate::rank::notification_arrives(next, rank, request)
            }
            Action::ReadFails { handle, request } => {
                decoder::fail_read(c, next, usize::from(handle), request)
            }
            Action::DecodeChildLoads { decoder, request } => {
                *next.child_load_mut(decoder, request) = LoadPhase::Done
            }
            Action::ChildReportsAgain { decoder, request } => {
                next.once |= State::ONCE_CHILD_REPORTED_TWICE;
                *next.decode_cell_mut(decoder, request) = DecodeCell::ReportsAgain;
            }
            Action::DecodeEngineSteps { raised: true, .. } => {
                next.once |= State::ONCE_DECODE_STEP_RAISED;
                if c.scheduler.failed_step == FailedStep::RetryDropsReports {
                    engine::decode_step(c, next, true);
                }
            }
            Action::DecodeEngineSteps {
                output_lost,
                raised: false,
            } => {
                if output_lost {
                    next.once |= State::ONCE_DECODE_OUTPUT_LOST;
                }
                observation.decode_outputs = Some(engine::decode_step(c, next, output_lost))
            }
            Action::ClientAborts { request: r } => scheduler::abort(c, next, r),
            Action::DecodeFinishes { request: r } => scheduler::finish_decode(next, r),
            Action::DecodePreempted { request: r } => scheduler::preempt_decode(c, next, r),
            Action::LookupAnswers { request: r } => scheduler::answer_lookup(next, r),
            Action::PrefillPreemptedInFinalStep { request: r } => {
                scheduler::preempt_in_final_step(c, next, r)
            }
        }
        if c.decode.kv_blocks.is_some() {
            scheduler::renumber_arrivals(next);
        }
        if self.topology.ordered_leases {
            crate::rank::renumber_queue(next);
        }
        if *next == *state {
            return false;
        }
        if c.producer.lease {
            self.note_rescue(state, next, &action);
        }
        true
    }

    /// Whether `action` is an injected fault: everything a spec's `[faults]` table
    /// injects, and the client's abort.
    pub fn is_fault_action(&self, action: &Action) -> bool {
        action.is_injected_only()
            || match *action {
                Action::ReadCompletes {
                    notification_lost,
                    notification_duplicated,
                    ..
                } => notification_lost || notification_duplicated,
                Action::HandshakeCompletes { ok, .. } => !ok,
                // A newly announced count is a behaviour the spec enables
                // (`announced-count`), not an injected fault.
                Action::PrefillEngineSteps { .. } | Action::DecodeEngineSteps { .. } => action
                    .step_faults()
                    .is_some_and(|(lost, raised)| lost || raised),
                _ => false,
            }
    }

    /// Remembers, until P frees a request, whether a fault touched it and whether a
    /// lease expired on it: a lease is the designed rescue from faults, and a free by a
    /// lease alone hides a happy path that never completes ([`Incidents::FREED_BY_LEASE_ALONE`]).
    fn note_rescue(&self, before: &State, next: &mut State, action: &Action) {
        let expiry_of = |rank, r| lease::expiry_is_a_fault(&self.config, before, rank, r);
        let faulted: Vec<RequestId> = match *action {
            Action::LeaseExpires { rank, request } => {
                let bits = if expiry_of(rank, request) {
                    Request::LEASE_EXPIRED | Request::FAULTED
                } else {
                    Request::LEASE_EXPIRED
                };
                mark(next, request, bits);
                return;
            }
            // A lost engine output, or a failed step, may have carried any request's
            // report.
            Action::PrefillEngineSteps { .. } | Action::DecodeEngineSteps { .. }
                if self.is_fault_action(action) =>
            {
                (0..next.request_count() as RequestId).collect()
            }
            Action::ClientAborts { request }
            | Action::DecoderCrashes { request }
            | Action::DecodeRejects { request }
            | Action::ReadFails { request, .. }
            | Action::ChildReportsAgain { request, .. }
            | Action::OffloadStoreRaises { request, .. }
            | Action::PrefillPreempted { request }
            | Action::DecodePreempted { request }
            | Action::ReadCompletes { request, .. }
            | Action::HandshakeCompletes { request, .. }
                if self.is_fault_action(action) =>
            {
                vec![request]
            }
            _ => Vec::new(),
        };
        for r in faulted {
            mark(next, r, Request::FAULTED);
        }
    }
}

impl crate::checker::Checkable for ContractModel {
    fn expand_actions(&self, state: &State, actions: &mut Vec<Action>) -> Result<(), u64> {
        self.enabled_actions(state, actions, crate::checker::SUCCESSORS_MAX)
    }

    fn canonicalize(&self, state: &mut State) {
        state.canonicalize()
    }

    fn step_into(&self, state: &State, action: Action, next: &mut State) -> bool {
        next.clone_from(state);
        self.step_in_place(state, action, next, &mut Observation::default())
    }

    fn pack(&self, state: &State, out: &mut Vec<u8>) {
        crate::pack::pack(state, out)
    }

    fn pack_successor(
        &self,
        parent: &State,
        parent_bytes: &[u8],
        state: &State,
        out: &mut Vec<u8>,
    ) {
        crate::pack::pack_successor(parent, parent_bytes, state, out)
    }

    fn unpack(&self, bytes: &[u8]) -> State {
        crate::pack::unpack(self.topology, usize::from(self.config.requests), bytes)
    }

    fn progress(&self, state: &State, packed: &[u8]) -> u64 {
        let progress = self.progress.of(packed);
        debug_assert_eq!(progress, state.progress(), "{state:?} packed as {packed:?}");
        u64::from(progress)
    }

    fn is_optional(&self, action: &Action) -> bool {
        // Faults and client choices. Their fair counterparts (the read completing, the
        // step happening, D admitting) are separate actions that stay forced.
        action.is_injected_only()
    }

    fn forces(&self, state: &State, action: &Action) -> bool {
        ContractModel::forces(self, state, action)
    }

    fn is_fault(&self, action: &Action) -> bool {
        self.is_fault_action(action)
    }

    fn is_expiry(&self, action: &Action) -> bool {
        matches!(action, Action::LeaseExpires { .. })
    }

    fn clause_count(&self) -> usize {
        CLAUSES.len()
    }

    fn clause_kind(&self, clause: usize) -> Kind {
        CLAUSES[clause].kind
    }

    fn clause_name(&self, clause: usize) -> String {
        format!("{}: {}", CLAUSES[clause].property, CLAUSES[clause].clause)
    }

    fn clause_holds(&self, clause: usize, state: &State) -> bool {
        (CLAUSES[clause].holds)(&self.config, state)
    }
}

/// Sets `bits` of request `r`'s rescue record, unless P already freed its blocks.
fn mark(state: &mut State, r: RequestId, bits: u8) {
    let request = &mut state.requests[usize::from(r)];
    if !matches!(
        request.prefill,
        PrefillPhase::Released | PrefillPhase::Dropped | PrefillPhase::AbortFreed
    ) {
        request.rescue |= bits;
    }
}
