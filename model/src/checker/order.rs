//! Which counterexample a reviewer sees: among all that violate a clause, the one with the
//! fewest injected faults, then the fewest timer (lease) expiries, then the fewest steps.
//!
//! A plain shortest path often tells a fault story (a client abort, then a lease expiry)
//! where the bug needs no fault at all: #59325's seed bug hangs on a fault-free run, and
//! that run is the one that convinces. The BFS finds *whether* a clause breaks; this
//! module finds the cheapest way, by Dijkstra's algorithm over the same state graph
//! with the lexicographic cost (faults, expiries, steps), which every transition grows
//! by (0 or 1, 0 or 1, 1). The search stops as soon as every violated clause has its
//! cheapest target, which on a fault-free bug is within the fault-free part of the graph.
//! Ties go to the state pushed first: deterministic, single-threaded, in action order.
//!
//! Targets are judged exactly as the BFS judges them: a safety clause where it is false
//! (such states are not expanded, unless the search explores past violations: then a
//! path to one clause's target may pass through another's), a liveness clause where it
//! is false, every safety clause holds and no action fairness forces is enabled (a run
//! may end there).

use super::allowance::{Allowance, Spent};
use super::{Checkable, Kind, Naming};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// What a counterexample costs, compared in this order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cost {
    /// Injected faults (`[FAULT]` steps): lost notifications, crashes, aborts, ...
    pub faults: u32,
    /// Timer expiries: leases that run out.
    pub expiries: u32,
    pub steps: u32,
}

impl Cost {
    /// The cost of one more step by `action`.
    fn then<M: Checkable>(self, model: &M, action: &M::Action) -> Cost
    where
        M::State: Clone + Eq + std::hash::Hash + Send + Sync,
        M::Action: Clone + std::fmt::Debug + Send,
    {
        Cost {
            faults: self.faults + u32::from(model.is_fault(action)),
            expiries: self.expiries + u32::from(model.is_expiry(action)),
            steps: self.steps + 1,
        }
    }

    /// The cost of a path of `actions`.
    pub fn of<'a, M: Checkable>(model: &M, actions: impl IntoIterator<Item = &'a M::Action>) -> Cost
    where
        M::State: Clone + Eq + std::hash::Hash + Send + Sync,
        M::Action: Clone + std::fmt::Debug + Send + 'a,
    {
        actions
            .into_iter()
            .fold(Cost::default(), |cost, action| cost.then(model, action))
    }
}

impl std::fmt::Display for Cost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural =
            |n: u32, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        write!(
            f,
            "{}, {}, {}",
            plural(self.faults, "fault", "faults"),
            plural(self.expiries, "expiry", "expiries"),
            plural(self.steps, "step", "steps")
        )
    }
}

/// A state reached by the cheapest path found so far.
struct Node {
    cost: Cost,
    /// The node it was reached from.
    parent: Option<usize>,
    fp: u64,
    packed: Vec<u8>,
    settled: bool,
}

/// For each clause in `clauses`, the fingerprints of its cheapest counterexample from the
/// first initial state to the violating state ([`super::replay`] turns them into
/// concrete steps, choosing the cheapest action between each two). A clause whose target
/// is not reached gets None: on a graph the search saw whole, only when `allowance` ran
/// out first (returned beside; the targets found by then are the cheapest).
pub(super) fn cheapest<M>(
    model: &M,
    naming: Naming,
    past_violations: bool,
    clauses: &[usize],
    allowance: &mut Allowance,
) -> (Vec<Option<Vec<u64>>>, Option<Spent>)
where
    M: Checkable,
    M::State: Clone + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    let mut found: Vec<Option<usize>> = vec![None; clauses.len()];
    let mut nodes: Vec<Node> = Vec::new();
    let mut by_fp: HashMap<u64, usize> = HashMap::new();
    // (cost, node): equal costs pop in the order their nodes were created.
    let mut heap: BinaryHeap<Reverse<(Cost, usize)>> = BinaryHeap::new();
    let Some(mut initial) = model.init_states().into_iter().next() else {
        return (vec![None; clauses.len()], None);
    };
    let mut packed = Vec::new();
    let fp = naming.pack(model, &mut initial, &mut packed);
    by_fp.insert(fp, 0);
    nodes.push(Node {
        cost: Cost::default(),
        parent: None,
        fp,
        packed,
        settled: false,
    });
    heap.push(Reverse((Cost::default(), 0)));
    let mut actions = Vec::new();
    let mut spent = None;
    while let Some(Reverse((cost, node))) = heap.pop() {
        if nodes[node].settled || nodes[node].cost != cost {
            continue;
        }
        spent = allowance.spent();
        if spent.is_some() {
            break;
        }
        nodes[node].settled = true;
        let state = model.unpack(&nodes[node].packed);
        let safe = mark_targets(model, &state, Kind::Safety, clauses, &mut found, node);
        // Where the BFS stops at a broken safety clause, so does this search.
        if super::expands(safe, past_violations) {
            actions.clear();
            if model.expand_actions(&state, &mut actions).is_err() {
                // The BFS ends such a search as inconclusive; it never gets here.
                continue;
            }
            let mut forced = false;
            for action in &actions {
                let Some(mut next) = model.next_state(&state, action.clone()) else {
                    continue;
                };
                forced |= model.forces(&state, action);
                let next_cost = cost.then(model, action);
                let mut bytes = Vec::new();
                let fp = naming.pack(model, &mut next, &mut bytes);
                let index = *by_fp.entry(fp).or_insert_with(|| {
                    nodes.push(Node {
                        cost: next_cost,
                        parent: Some(node),
                        fp,
                        packed: bytes,
                        settled: false,
                    });
                    heap.push(Reverse((next_cost, nodes.len() - 1)));
                    nodes.len() - 1
                });
                let known = &mut nodes[index];
                if !known.settled && next_cost < known.cost {
                    known.cost = next_cost;
                    known.parent = Some(node);
                    heap.push(Reverse((next_cost, index)));
                }
            }
            if super::judges_liveness(safe, forced) {
                mark_targets(model, &state, Kind::Liveness, clauses, &mut found, node);
            }
        }
        if found.iter().all(Option::is_some) {
            break;
        }
    }
    let paths = found
        .into_iter()
        .map(|target| {
            target.map(|mut node| {
                let mut path = vec![nodes[node].fp];
                while let Some(parent) = nodes[node].parent {
                    node = parent;
                    path.push(nodes[node].fp);
                }
                path.reverse();
                path
            })
        })
        .collect();
    (paths, spent)
}

/// Records `node` as the target of every not yet found clause of `kind` that `state`
/// breaks; returns whether it breaks none of that kind.
fn mark_targets<M>(
    model: &M,
    state: &M::State,
    kind: Kind,
    clauses: &[usize],
    found: &mut [Option<usize>],
    node: usize,
) -> bool
where
    M: Checkable,
    M::State: Clone + Eq + std::hash::Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    let mut kept = true;
    for clause in super::broken_clauses(model, state, kind) {
        kept = false;
        if let Some(i) = clauses.iter().position(|&c| c == clause) {
            found[i].get_or_insert(node);
        }
    }
    kept
}
