//! The point of no return of a liveness counterexample: the first state on its path from
//! which no continuation can meet the obligation any more — every run from there ends
//! with the clause broken. Before it the story could still have ended well; after it,
//! whatever happens, it does not. Reviewers look for the step that crossed it.
//!
//! Computed on the explored graph, once for every violated liveness clause: every state
//! reachable from the initial one (through a state that breaks safety only when the
//! search explores past violations), the states where a run may end with a clause kept
//! (no forced action enabled, no safety clause broken), and, walking the edges backwards
//! from those, every state that can still reach one. The walk repeats the search's, so it is
//! only taken when the search saw the graph whole (a cut search's graph is larger than the
//! limits the user set) and it is no larger than [`STATES_MAX`], and it stops at the
//! search's time and memory limits: past any of these there is no answer rather than a
//! limit that does not bite.

use super::allowance::Allowance;
use super::{Checkable, Naming};
use std::collections::HashMap;

/// Past this many states the answer is not computed (a trace does not wait for it).
pub const STATES_MAX: usize = 300_000;

/// For each of `clauses` with its `path` (canonical fingerprints, initial first): the
/// index (0 = the initial state) of the first state on the path from which the clause
/// can no longer be kept. None for each when the walk passes `STATES_MAX` or `allowance`,
/// and for a clause some continuation could still keep from every state of its path.
pub(super) fn points_of_no_return<M>(
    model: &M,
    naming: Naming,
    past_violations: bool,
    clauses: &[(usize, &[u64])],
    allowance: &mut Allowance,
) -> Vec<Option<usize>>
where
    M: Checkable,
    M::State: Clone + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    let unknown = vec![None; clauses.len()];
    let Some(mut initial) = model.init_states().into_iter().next() else {
        return unknown;
    };
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut packed: Vec<Vec<u8>> = Vec::new();
    let mut reverse: Vec<Vec<usize>> = Vec::new();
    // good[c][s]: a run may end at state s with clause c kept.
    let mut good: Vec<Vec<bool>> = vec![Vec::new(); clauses.len()];
    let mut bytes = Vec::new();
    let fp = naming.pack(model, &mut initial, &mut bytes);
    index.insert(fp, 0);
    packed.push(bytes);
    reverse.push(Vec::new());
    let mut actions = Vec::new();
    let mut next = 0;
    while next < packed.len() {
        if packed.len() > STATES_MAX || allowance.spent().is_some() {
            return unknown;
        }
        let state = model.unpack(&packed[next]);
        let safe = super::broken_clauses(model, &state, super::Kind::Safety)
            .next()
            .is_none();
        let mut forced = false;
        if super::expands(safe, past_violations) {
            actions.clear();
            if model.expand_actions(&state, &mut actions).is_err() {
                return unknown;
            }
            for action in &actions {
                let Some(mut successor) = model.next_state(&state, action.clone()) else {
                    continue;
                };
                forced |= model.forces(&state, action);
                let mut bytes = Vec::new();
                let fp = naming.pack(model, &mut successor, &mut bytes);
                let to = *index.entry(fp).or_insert_with(|| {
                    packed.push(bytes);
                    reverse.push(Vec::new());
                    packed.len() - 1
                });
                reverse[to].push(next);
            }
        }
        let end = super::judges_liveness(safe, forced);
        for (good, &(clause, _)) in good.iter_mut().zip(clauses) {
            good.push(end && model.clause_holds(clause, &state));
        }
        next += 1;
    }
    good.into_iter()
        .zip(clauses)
        .map(|(good, &(_, path))| {
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
        })
        .collect()
}
