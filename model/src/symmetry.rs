//! Symmetry reduction: interchangeable ranks collapse to one canonical state.
//!
//! Two kinds of blocks are interchangeable (see [`Topology`]): replicated PCP ranks > 0,
//! each on its own, and transfer groups (P ranks with the D ranks that read them, and
//! their handles). The representative sorts each kind of block by its contents. Sorting
//! is a canonical form for a full permutation group acting on blocks, so symmetric states
//! get one fingerprint, and every member of a class gets the same representative (which
//! replaying a counterexample through concrete states relies on).
//!
//! Only the `Countdown` aggregator is symmetric: it has no reporter identity. `Strict`
//! remembers which ranks formed a quorum, and when more than E reports arrive in one step
//! the quorum is the first E in rank order, so renaming ranks changes what it remembers.
//! Under `Strict` the reduction is off: sound, at the price of more states.

use crate::state::{DecodeCell, HandlePhase, PrefillCell, State};
use crate::topology::Topology;
use kvcc_aggregator::{Policy, Rank};

impl State {
    /// The canonical member of this state's symmetry class.
    pub fn representative(&self) -> State {
        if self.prefill_aggregator.policy() == Policy::Strict {
            return self.clone();
        }
        let topology = self.shape.0.clone();
        let n = self.request_count();
        let prefill_row =
            |rank: Rank| &self.prefill[usize::from(rank) * n..(usize::from(rank) + 1) * n];
        let decode_row =
            |rank: Rank| &self.decode[usize::from(rank) * n..(usize::from(rank) + 1) * n];
        let handle_row = |h: usize| &self.handles[h * n..(h + 1) * n];

        // prefill_from[new] = old rank whose row lands at `new`; likewise for D and handles.
        let mut prefill_from: Vec<Rank> = (0..topology.prefill_world).collect();
        let mut decode_from: Vec<Rank> = (0..topology.decode_world).collect();
        let mut handle_from: Vec<usize> = (0..topology.handles.len()).collect();

        let mut replicas = topology.replicas.clone();
        replicas.sort_by_key(|&a| prefill_row(a));
        for (slot, &old) in topology.replicas.iter().zip(&replicas) {
            prefill_from[usize::from(*slot)] = old;
        }

        type GroupKey<'a> = (
            Vec<&'a [PrefillCell]>,
            Vec<&'a [DecodeCell]>,
            Vec<&'a [HandlePhase]>,
        );
        let key = |g: usize| -> GroupKey<'_> {
            let group = &topology.groups[g];
            (
                group
                    .prefill_ranks
                    .iter()
                    .map(|&k| prefill_row(k))
                    .collect(),
                group.decode_ranks.iter().map(|&d| decode_row(d)).collect(),
                group.handles.iter().map(|&h| handle_row(h)).collect(),
            )
        };
        let mut order: Vec<usize> = (0..topology.groups.len()).collect();
        let keys: Vec<GroupKey<'_>> = order.iter().map(|&g| key(g)).collect();
        order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
        for (slot, &old) in order.iter().enumerate() {
            let (to, from) = (&topology.groups[slot], &topology.groups[old]);
            for (&t, &f) in to.prefill_ranks.iter().zip(&from.prefill_ranks) {
                prefill_from[usize::from(t)] = f;
            }
            for (&t, &f) in to.decode_ranks.iter().zip(&from.decode_ranks) {
                decode_from[usize::from(t)] = f;
            }
            for (&t, &f) in to.handles.iter().zip(&from.handles) {
                handle_from[t] = f;
            }
        }
        self.permuted(&topology, &prefill_from, &decode_from, &handle_from)
    }

    fn permuted(
        &self,
        topology: &Topology,
        prefill_from: &[Rank],
        decode_from: &[Rank],
        handle_from: &[usize],
    ) -> State {
        let identity = prefill_from
            .iter()
            .enumerate()
            .all(|(i, &k)| usize::from(k) == i)
            && decode_from
                .iter()
                .enumerate()
                .all(|(i, &k)| usize::from(k) == i)
            && handle_from.iter().enumerate().all(|(i, &k)| k == i);
        if identity {
            return self.clone();
        }
        let n = self.request_count();
        let mut next = self.clone();
        next.prefill = gather(
            prefill_from.iter().map(|&k| usize::from(k)),
            &self.prefill,
            n,
        );
        next.decode = gather(decode_from.iter().map(|&k| usize::from(k)), &self.decode, n);
        next.handles = gather(handle_from.iter().copied(), &self.handles, n);
        debug_assert_eq!(topology.prefill_world as usize * n, next.prefill.len());
        next
    }
}

/// Rows of `n` cells, taken from the old row positions `from` in order.
fn gather<T: Copy>(from: impl Iterator<Item = usize>, cells: &[T], n: usize) -> Vec<T> {
    from.flat_map(|old| cells[old * n..(old + 1) * n].iter().copied())
        .collect()
}

impl stateright::Representative for State {
    fn representative(&self) -> Self {
        State::representative(self)
    }
}
