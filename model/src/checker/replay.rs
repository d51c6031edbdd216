//! Turning a violating fingerprint into a concrete, re-checked counterexample, and
//! re-executing a recorded action sequence (`kvcc replay`).

use super::visited::{self, Visited};
use super::{Checkable, Kind, Naming};
use std::fmt;

/// Why a path does not reproduce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayError {
    /// No initial state matches.
    NoInitialState,
    /// Step `step` (1-based) is not a transition of the model from the state before it.
    NotEnabled { step: usize, action: String },
    /// The path replays but its last state does not break the clause.
    NotViolated { clause: String },
    /// Step `step` (1-based) leaves a state that breaks safety clause `clause`, where the
    /// model stops: the trace was found exploring past violations, and the spec no
    /// longer asks for it (`[expect] past-violations`).
    PastViolation { step: usize, clause: String },
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::NoInitialState => {
                write!(f, "no initial state of the model matches the trace")
            }
            ReplayError::NotEnabled { step, action } => {
                write!(f, "step {step} (`{action}`) is not possible in the model from the state before it")
            }
            ReplayError::PastViolation { step, clause } => {
                write!(f, "step {step} continues past a state that violates `{clause}`, where the spec stops (`[expect] past-violations = true` explores past it)")
            }
            ReplayError::NotViolated { clause } => {
                write!(
                    f,
                    "the path replays, but its last state does not violate `{clause}`"
                )
            }
        }
    }
}

/// Fingerprints from an initial state to the state with BFS index `target`, following
/// each state's first discovery back to its parent.
pub(super) fn path_to(visited: &Visited, bfs_fps: &[u64], target: u64) -> Vec<u64> {
    let mut index = target;
    let mut path = Vec::new();
    loop {
        let fp = bfs_fps[index as usize];
        path.push(fp);
        let discovery = visited
            .discovery_of(fp)
            .expect("every state in BFS order is visited");
        match visited::parent_index(discovery) {
            Some(parent) => index = parent,
            None => break,
        }
    }
    path.reverse();
    path
}

type Replayed<M> = (
    <M as stateright::Model>::State,
    Vec<(
        <M as stateright::Model>::Action,
        <M as stateright::Model>::State,
    )>,
);

/// Re-executes a fingerprint path from a concrete initial state, picking at each step the
/// cheapest action ([`super::order::Cost`]: no fault over a fault, no expiry over one;
/// then the first in `actions` order) whose canonical successor has the next fingerprint.
/// Steps are listed as the search lists them ([`Checkable::expand_actions`]), so a path
/// the search took past a safety violation replays whatever the model's own `actions`
/// does there.
pub(super) fn replay_fingerprints<M>(
    model: &M,
    path: &[u64],
    naming: Naming,
    clause: usize,
) -> Result<Replayed<M>, ReplayError>
where
    M: Checkable,
    M::State: Clone + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    let mut buffer = Vec::new();
    let mut canonical_fp = |s: &M::State| naming.fingerprint(model, &mut s.clone(), &mut buffer);
    let initial = model
        .init_states()
        .into_iter()
        .find(|s| canonical_fp(s) == path[0])
        .ok_or(ReplayError::NoInitialState)?;
    let mut state = initial.clone();
    let mut steps = Vec::new();
    let mut actions = Vec::new();
    for (i, &want) in path.iter().enumerate().skip(1) {
        actions.clear();
        // A listing the search would have refused is no path it took.
        if model.expand_actions(&state, &mut actions).is_err() {
            actions.clear();
        }
        let step = actions
            .drain(..)
            .filter_map(|action| {
                let next = model.next_state(&state, action.clone())?;
                (canonical_fp(&next) == want).then_some((action, next))
            })
            .min_by_key(|(action, _)| (model.is_fault(action), model.is_expiry(action)));
        let (action, next) = step.ok_or(ReplayError::NotEnabled {
            step: i,
            action: format!("fingerprint {want:#x}"),
        })?;
        state = next.clone();
        steps.push((action, next));
    }
    confirm_violation(model, &state, clause)?;
    Ok((initial, steps))
}

/// Re-executes `actions` from the model's first initial state and confirms the last state
/// violates `clause`. Returns every state, initial first.
pub fn replay_path<M>(
    model: &M,
    actions: &[M::Action],
    clause: usize,
) -> Result<Vec<M::State>, ReplayError>
where
    M: Checkable,
    M::State: Clone + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send + PartialEq,
{
    let mut state = model
        .init_states()
        .into_iter()
        .next()
        .ok_or(ReplayError::NoInitialState)?;
    let mut states = vec![state.clone()];
    let mut enabled = Vec::new();
    for (i, action) in actions.iter().enumerate() {
        enabled.clear();
        model.actions(&state, &mut enabled);
        let not_enabled = || ReplayError::NotEnabled {
            step: i + 1,
            action: model.format_action(action),
        };
        if !enabled.contains(action) {
            if enabled.is_empty() {
                if let Some(clause) = super::broken_clauses(model, &state, Kind::Safety).next() {
                    return Err(ReplayError::PastViolation {
                        step: i + 1,
                        clause: model.clause_name(clause),
                    });
                }
            }
            return Err(not_enabled());
        }
        state = model
            .next_state(&state, action.clone())
            .ok_or_else(not_enabled)?;
        states.push(state.clone());
    }
    confirm_violation(model, &state, clause)?;
    Ok(states)
}

/// The clause really breaks in `state`: a safety clause is false there; a liveness clause
/// is false and a run may end there (no action that fairness forces is enabled).
fn confirm_violation<M>(model: &M, state: &M::State, clause: usize) -> Result<(), ReplayError>
where
    M: Checkable,
    M::State: Clone + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    let broken = !model.clause_holds(clause, state);
    let ends_here = model.clause_kind(clause) == Kind::Safety || !super::forced_step(model, state);
    if broken && ends_here {
        Ok(())
    } else {
        Err(ReplayError::NotViolated {
            clause: model.clause_name(clause),
        })
    }
}
