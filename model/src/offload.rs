//! The offloading child's CPU stores under MultiConnector(NIXL, offloading) (docs/contracts.md
//! §8; vLLM's offloading connector completes stores per job through worker metadata).
//!
//! Each P worker stores each delay-freed request on its own; the MultiConnector forwards
//! the worker's `finished_sending` only once that store is done too. A store's completion
//! is observed by nothing but its own worker's next poll at a P engine step
//! ([`crate::rank::ready_to_report`]), and only when that poll finds the send done: a
//! store that completes anywhere before the poll is indistinguishable from one that
//! completes right before it. So the model does not interleave store completions with
//! every other action; each P step chooses which of the stores that matter to its poll
//! (store still running, send done by the poll) have completed by then
//! ([`StoresDone`]). This drops the "stored, not yet polled" states and the orderings of
//! stores among themselves and with every other action, and keeps every verdict:
//!
//! - every step of this model is a run of the interleaved one (the chosen stores
//!   complete, then the step), and completing a store never breaks a clause;
//! - an interleaved run maps to this model by delaying each completion to the first poll
//!   that finds the send done: every step reports exactly the same; the states in
//!   between differ only by stores still running, and the only clause that reads stores
//!   (`quorum-sound: send-emitted-before-offload-stores-done`) breaks in such a state
//!   only if it already broke when the send was emitted, with the stores as they were;
//! - liveness: no other action reads a store, so a run that ends with stores still
//!   running here (P no longer steps, or no poll needs them) ends in the interleaved
//!   model once they complete, with the same scheduler and aggregator state.
//!
//! A store that raises (`faults.offload-store-raises`) and a store job started before a
//! preemption (`faults.prefill-preempted`) complete by actions of their own, in this
//! model and in the interleaved one alike; neither is a running store of the current
//! lifecycle, so no step's choice includes them. With one count per request id
//! (`producer.store-ledger = "per-request"`) whether a send is forwarded still depends
//! only on the stores as the poll finds them, so delaying a completion to the poll keeps
//! every decision.
//!
//! `tests/reduction.rs` checks this against the interleaved model on every shipped spec
//! point that uses the offloading connector and on variations of them.

use crate::config::{Config, Connector, MAX_REQUESTS};
use crate::rank;
use crate::state::{RequestId, SendPhase, State, StorePhase};
use kvcc_aggregator::Rank;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The offloading stores a P step's poll finds completed, per request a set of P ranks.
/// Serialized as a list of `{"rank": R, "request": Q}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StoresDone([u64; MAX_REQUESTS]);

impl StoresDone {
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&ranks| ranks == 0)
    }

    pub fn contains(&self, rank: Rank, r: RequestId) -> bool {
        self.0
            .get(usize::from(r))
            .is_some_and(|&ranks| rank < 64 && ranks & (1u64 << rank) != 0)
    }

    fn insert(&mut self, rank: Rank, r: RequestId) {
        self.0[usize::from(r)] |= 1u64 << rank;
    }

    /// (rank, request) pairs, by request, then by rank.
    pub fn iter(&self) -> impl Iterator<Item = (Rank, RequestId)> + '_ {
        (0..MAX_REQUESTS as RequestId).flat_map(move |r| {
            (0..64)
                .filter(move |&rank| self.contains(rank, r))
                .map(move |rank| (rank, r))
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Cell {
    rank: Rank,
    request: RequestId,
}

impl Serialize for StoresDone {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter().map(|(rank, request)| Cell { rank, request }))
    }
}

impl<'de> Deserialize<'de> for StoresDone {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut stores = StoresDone::default();
        for Cell { rank, request } in Vec::<Cell>::deserialize(deserializer)? {
            if rank >= 64 || usize::from(request) >= MAX_REQUESTS {
                return Err(serde::de::Error::custom(format!(
                    "no store of rank {rank} for req{request}: ranks are below 64, requests below {MAX_REQUESTS}"
                )));
            }
            stores.insert(rank, request);
        }
        Ok(stores)
    }
}

/// The stores that matter to this step's poll: still running on a worker whose send is
/// done by the time it polls.
fn pending(config: &Config, state: &State) -> Vec<(Rank, RequestId)> {
    if config.connector != Connector::MultiOffload {
        return Vec::new();
    }
    let mut cells = Vec::new();
    for r in 0..state.request_count() as RequestId {
        for rank in 0..state.topology().prefill_world {
            if state.prefill_cell(rank, r).store == StorePhase::Storing
                && rank::send_at_poll(config, state, rank, r) == SendPhase::Done
            {
                cells.push((rank, r));
            }
        }
    }
    cells
}

/// Every choice of completed stores a P step from `state` needs, none first. Among
/// interchangeable cells ([`State::interchangeable_cells`]) only how many complete
/// matters: any j of them lead to symmetric successors, which the checker identifies
/// (and which, without its canonical form, still reach every symmetry class), so the
/// first j in rank order stand for all.
///
/// There are as many choices as the product of (class size + 1) over the classes, which
/// grows combinatorially with pending stores that are not interchangeable; past
/// `choices_max` none are generated and `Err` carries how many there would be (saturated
/// at `u64::MAX`), so that one state cannot exhaust memory before any limit is checked.
pub fn choices(config: &Config, state: &State, choices_max: u64) -> Result<Vec<StoresDone>, u64> {
    let classes = state.interchangeable_cells(&pending(config, state));
    let count = classes
        .iter()
        .fold(1u64, |n, class| n.saturating_mul(class.len() as u64 + 1));
    if count > choices_max {
        return Err(count);
    }
    let mut choices = vec![StoresDone::default()];
    for class in &classes {
        choices = choices
            .iter()
            .flat_map(|&base| {
                (0..=class.len()).map(move |j| {
                    let mut stores = base;
                    for &(rank, r) in &class[..j] {
                        stores.insert(rank, r);
                    }
                    stores
                })
            })
            .collect();
    }
    Ok(choices)
}

/// The chosen stores complete, before the workers poll.
pub fn complete(state: &mut State, stores: StoresDone) {
    for (rank, r) in stores.iter() {
        state.prefill_cell_mut(rank, r).store = StorePhase::Stored;
    }
}
