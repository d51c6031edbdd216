//! The point of no return of a liveness counterexample: the first state on its path from
//! which no continuation can meet the obligation any more — every run from there ends
//! with the clause broken. Before it the story could still have ended well; after it,
//! whatever happens, it does not. Reviewers look for the step that crossed it.
//!
//! Computed on the explored graph: every state reachable from the initial one (up to
//! [`STATES_MAX`], else there is no answer), the states where a run may end with the
//! clause kept (no forced action enabled, no safety clause broken), and, walking the
//! edges backwards from those, every state that can still reach one.

use super::Checkable;
use std::collections::HashMap;

/// Past this many states the answer is not computed (a trace does not wait for it).
pub const STATES_MAX: usize = 300_000;

/// The index (0 = the initial state) of the first state on `path` (canonical
/// fingerprints, initial first) from which `clause` can no longer be kept; None when
/// the graph is too large, or some continuation could still keep it from every state.
pub(super) fn point_of_no_return<M>(
    model: &M,
    symmetry: bool,
    clause: usize,
    path: &[u64],
) -> Option<usize>
where
    M: Checkable,
    M::State: Clone + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    let initial = model.init_states().into_iter().next()?;
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut packed: Vec<Vec<u8>> = Vec::new();
    let mut reverse: Vec<Vec<usize>> = Vec::new();
    let mut good: Vec<bool> = Vec::new();
    let mut bytes = Vec::new();
    let fp = super::pack_canonical(model, initial, symmetry, &mut bytes);
    index.insert(fp, 0);
    packed.push(bytes);
    reverse.push(Vec::new());
    let mut actions = Vec::new();
    let mut next = 0;
    while next < packed.len() {
        if packed.len() > STATES_MAX {
            return None;
        }
        let state = model.unpack(&packed[next]);
        let safe = super::broken_clauses(model, &state, super::Kind::Safety)
            .next()
            .is_none();
        let mut forced = false;
        if safe {
            actions.clear();
            model.expand_actions(&state, &mut actions).ok()?;
            for action in &actions {
                let Some(successor) = model.next_state(&state, action.clone()) else {
                    continue;
                };
                forced |= !model.is_optional(action);
                let mut bytes = Vec::new();
                let fp = super::pack_canonical(model, successor, symmetry, &mut bytes);
                let to = *index.entry(fp).or_insert_with(|| {
                    packed.push(bytes);
                    reverse.push(Vec::new());
                    packed.len() - 1
                });
                reverse[to].push(next);
            }
        }
        good.push(safe && !forced && model.clause_holds(clause, &state));
        next += 1;
    }
    // Backwards from the good ends: every state that can still reach one.
    let mut hopeful = good.clone();
    let mut stack: Vec<usize> = (0..good.len()).filter(|&s| good[s]).collect();
    while let Some(s) = stack.pop() {
        for &from in &reverse[s] {
            if !hopeful[from] {
                hopeful[from] = true;
                stack.push(from);
            }
        }
    }
    path.iter()
        .position(|fp| index.get(fp).is_some_and(|&s| !hopeful[s]))
}
