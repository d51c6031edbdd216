//! One request stands for many: when no behaviour couples requests, a check of N
//! requests that holds for one request, among others the state leaves out, holds for N.
//!
//! Every clause is about one request (its cells, its countdowns, the incidents its own
//! events raise), and requests meet in only three ways:
//!
//! - **Engine steps.** A step acts on every request at once, each by its own cells, and
//!   its faults (an output lost, a worker raising, a count announced) act on all alike.
//!   But whether an engine steps at all depends on every request: one still prefilling
//!   keeps P stepping after another was aborted, and that step counts the aborted one's
//!   late report (`scheduler::prefill_steps`). So the reduced model is one request plus
//!   the others, left out: they may keep either engine stepping at any time, a step that
//!   fairness never forces ([`ContractModel::others_step`]). A request can also *block*
//!   a step (a woken request finishing first, a synchronous load): one the request
//!   itself blocks, no other request takes, so the reduced model takes none either;
//!   steps another request blocks only take behaviours away, and the reduced model
//!   keeps them all.
//! - **One-shot faults** (`State::once`): in N requests another request may use the
//!   fault up; the one request always still has it. More behaviours, never fewer.
//! - **Shared resources and orders**: D's finite block pool and its scan
//!   (`decode.kv-blocks`), and P's lease queue reaped from its head
//!   (`producer.lease-reaper = "head-only"`). Here one request's fate depends on the
//!   others' cells, and the reduction does not apply ([`coupling`]).
//!
//! So every run of N requests, seen through one request, is a run of the reduced model:
//! a state breaking a safety clause breaks it for some request, and a state where a run
//! of N may end (nothing fairness forces) is, for each request, one where the reduced
//! run may end. The reduced model has every violation N requests have, and perhaps
//! more: when it holds, N requests hold; when it does not, only the full search can say
//! (`kvcc check` then runs it, and its counterexamples are of N requests). The harness
//! tests this against the full search on every shipped spec point at two and three
//! requests whose full search fits its cap (60,000 states), with twins that leave the
//! others' steps out or ignore a coupling (tests/e2e/independence.rs).

use crate::config::Config;
use crate::model::ContractModel;
use crate::state::{RequestId, Shape, State};
use smallvec::SmallVec;
use std::sync::Arc;

/// What makes one request's fate depend on the others' cells, in `config`: None when
/// nothing does, and one request stands for all.
pub fn coupling(config: &Config) -> Option<&'static str> {
    if config.decode.kv_blocks.is_some() {
        // Requests share D's pool, and its scan stops at the first it cannot serve.
        return Some("decode.kv-blocks: the requests share D's block pool and its scan");
    }
    if config.reaps_in_queue_order() {
        // A reaper that stops at the first live lease holds an expired one behind it.
        return Some("producer.lease-reaper = \"head-only\": the reaper stops at the first live lease in P's queue");
    }
    None
}

/// The model that stands for `config`'s requests: one of them, the rest left out but
/// free to keep the engines stepping. None when there is one request already or a
/// behaviour couples them ([`coupling`]).
pub fn one_of_many(config: &Config) -> Option<ContractModel> {
    if config.requests < 2 || coupling(config).is_some() {
        return None;
    }
    let mut one = config.clone();
    one.requests = 1;
    let mut model = ContractModel::new(one);
    model.others_step = true;
    Some(model)
}

/// What request `r` of `state` sees: a state of `one` (a model of one request) holding
/// `r`'s cells and countdowns as request 0, and everything shared (the one-shot faults
/// used, the incidents seen) as it is. The argument above is that every transition of
/// `state`, seen so, is a transition of `one` or leaves `r` as it was; the harness checks
/// it on the first reachable states of every shipped point at two requests and of
/// random specs (tests/e2e/independence.rs).
pub fn seen_by(one: &ContractModel, state: &State, r: RequestId) -> State {
    let n = state.request_count();
    fn column<T: Copy, const N: usize>(cells: &[T], n: usize, r: RequestId) -> SmallVec<[T; N]>
    where
        [T; N]: smallvec::Array<Item = T>,
    {
        cells
            .iter()
            .skip(usize::from(r))
            .step_by(n)
            .copied()
            .collect()
    }
    let only = |id: &RequestId| (*id == r).then_some(0);
    State {
        requests: column(&state.requests, n, r),
        prefill: column(&state.prefill, n, r),
        handles: column(&state.handles, n, r),
        decode: column(&state.decode, n, r),
        child_loads: column(&state.child_loads, n, r),
        prefill_aggregator: Arc::new(state.prefill_aggregator.restricted(only)),
        decode_aggregator: Arc::new(state.decode_aggregator.restricted(only)),
        incidents: state.incidents,
        once: state.once,
        shape: Shape(one.topology),
    }
}
