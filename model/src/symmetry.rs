//! Symmetry reduction: interchangeable ranks collapse to one canonical state.
//!
//! Two kinds of blocks are interchangeable (see [`crate::topology::Topology`]): transfer groups (P ranks
//! with the D ranks that read them, and their handles), and replicated PCP ranks > 0,
//! both *per request*. A rank's cells for different requests never meet: every
//! action touches one (rank, request) cell, `Countdown` counts reports per id without
//! asking who sent them, a worker reports a request from that request's cell alone, and
//! every property quantifies over all ranks of one request. So permuting the replicas, or
//! the transfer groups, of one request column, independently of the other columns, maps
//! behaviours to behaviours
//! and keeps every clause; the group is the product of one full permutation group per
//! column. (The output rank, whose output alone can drop a step or announce a count, is
//! PCP rank 0's in the last stage, never a replica; a group holds one rank of every stage,
//! and groups map stage to stage.)
//!
//! The one exception is P's `_reqs_to_send` order under a head-only reaper
//! ([`crate::topology::Topology::ordered_leases`]): a rank's reaper walks its requests in
//! order and stops at the first live lease, so a rank's cells for different requests do
//! meet there, and transfer groups are then permuted only as whole rows (every request
//! column alike). (A lost output-rank output drops the whole step, every rank's reports
//! alike, so the output rank's group is no exception.)
//!
//! The representative sorts each request column of the transfer groups by the groups'
//! cells in it (or the groups by their whole rows, under a head-only reaper) and each
//! request column of the replicas by its cells: sorting is a canonical form for a full
//! permutation group, and a product of groups acting on disjoint cells is canonicalised
//! part by part. So symmetric states get one fingerprint, and every member of a class gets the same
//! representative (which replaying a counterexample through concrete states relies on).
//!
//! Requests are interchangeable too: every request of a model has the same
//! configuration, actions on one request never read another's cells, and the aggregators
//! key their countdowns by id without reading what the id is. Renaming the requests
//! (their scheduler facts, their column of every per-(rank, request) vector, their ids in
//! both aggregators) maps behaviours to behaviours and keeps every clause, each of which
//! quantifies over all requests. The exception is P's `_reqs_to_send` order under a
//! head-only reaper, where requests that arrive in one step go in id order
//! ([`crate::topology::Topology::ordered_leases`]): there requests stay apart. The
//! representative is the least, in the derived order of [`State`], of the rank
//! representatives of the request orders that sort the requests by a key that renaming
//! ranks does not change (ties tried every way): the candidates are the same for every
//! member of a class, so the least is too.
//!
//! Only the `Countdown` aggregator is symmetric: it has no reporter identity. `Strict`
//! remembers which ranks formed a quorum, and when more than E reports arrive in one step
//! the quorum is the first E in rank order, so renaming ranks changes what it remembers.
//! Under `Strict` the reduction is off: sound, at the price of more states.

use crate::state::{RequestId, State};
use kvcc_aggregator::{Policy, Rank};
use smallvec::SmallVec;

impl State {
    /// Are interchangeable ranks really interchangeable in this state's model? Not under
    /// `Strict` (module docs), nor when stages before the last return no output: replicas
    /// of different stages then behave differently. Nor when a count may be announced and
    /// the output rank is not the first (pipeline stages): vLLM's aggregator takes a new
    /// count as it reaches the output rank's output, in rank order, so ranks before it
    /// open countdowns with the old count and ranks after it with the new one (a fuzz
    /// find: P pp 2 · pcp 2 loading KV with an announced count).
    pub fn symmetric(&self) -> bool {
        let t = self.topology();
        let order_matters = t.prefill_announced.is_some() && t.prefill_output_rank != 0;
        self.prefill_aggregator.policy() != Policy::Strict && !t.stages_differ && !order_matters
    }

    /// The canonical member of this state's symmetry class.
    pub fn representative(&self) -> State {
        self.clone().into_representative()
    }

    /// [`State::representative`], reusing this state when it is already canonical (the
    /// common case, which then costs no allocation).
    pub fn into_representative(self) -> State {
        if !self.symmetric() {
            return self;
        }
        if self.request_count() < 2 || self.topology().ordered_leases {
            return self.into_rank_representative();
        }
        // Requests with pairwise different scheduler facts are ordered by those alone
        // (the first part of the key): the common case, with no key built.
        let requests = &self.requests;
        let n = requests.len();
        if (0..n).all(|a| (a + 1..n).all(|b| requests[a] != requests[b])) {
            if (1..n).all(|i| requests[i - 1] < requests[i]) {
                return self.into_rank_representative();
            }
            let mut order: SmallVec<[RequestId; 3]> = (0..n as RequestId).collect();
            order.sort_by_key(|&r| requests[usize::from(r)]);
            return self.renamed(&order).into_rank_representative();
        }
        let orders = self.request_orders();
        if orders.len() == 1
            && orders[0]
                .iter()
                .enumerate()
                .all(|(i, &r)| usize::from(r) == i)
        {
            return self.into_rank_representative();
        }
        orders
            .iter()
            .map(|order| self.renamed(order).into_rank_representative())
            .min()
            .expect("at least one request order")
    }

    /// The request orders to try: requests sorted by [`State::request_key`], every order
    /// of requests whose keys tie. `order[i]` is the request that becomes request `i`.
    fn request_orders(&self) -> Vec<SmallVec<[RequestId; 3]>> {
        let keys: Vec<_> = (0..self.request_count() as RequestId)
            .map(|r| self.request_key(r))
            .collect();
        let mut sorted: SmallVec<[RequestId; 3]> = (0..self.request_count() as RequestId).collect();
        sorted.sort_by(|&a, &b| keys[usize::from(a)].cmp(&keys[usize::from(b)]));
        let mut orders = vec![SmallVec::new()];
        let mut start = 0;
        while start < sorted.len() {
            let tie = keys[usize::from(sorted[start])].clone();
            let end = start
                + sorted[start..]
                    .iter()
                    .take_while(|&&r| keys[usize::from(r)] == tie)
                    .count();
            let group = &sorted[start..end];
            // Requests equal cell for cell: every order of them is the same state.
            let alike = group.iter().all(|&r| self.same_request(group[0], r));
            let group_orders = if alike {
                vec![group.iter().copied().collect()]
            } else {
                permutations(group)
            };
            orders = orders
                .into_iter()
                .flat_map(|prefix: SmallVec<[RequestId; 3]>| {
                    group_orders.clone().into_iter().map(move |tail| {
                        let mut order = prefix.clone();
                        order.extend(tail);
                        order
                    })
                })
                .collect();
            start = end;
        }
        orders
    }

    /// Are requests `a` and `b` equal in every fact, rank by rank, so that swapping them
    /// changes nothing?
    fn same_request(&self, a: RequestId, b: RequestId) -> bool {
        use kvcc_aggregator::Direction;
        let n = self.request_count();
        let (a, b) = (usize::from(a), usize::from(b));
        fn column_eq<T: PartialEq>(cells: &[T], n: usize, a: usize, b: usize) -> bool {
            cells.chunks(n).all(|row| row[a] == row[b])
        }
        let aggregator_eq = |agg: &kvcc_aggregator::Aggregator<RequestId>| {
            let (a, b) = (a as RequestId, b as RequestId);
            [Direction::Sending, Direction::Recving]
                .iter()
                .all(|&d| agg.remaining(d, &a) == agg.remaining(d, &b))
                && agg.pending_failed().contains(&a) == agg.pending_failed().contains(&b)
        };
        self.requests[a] == self.requests[b]
            && column_eq(&self.prefill, n, a, b)
            && column_eq(&self.handles, n, a, b)
            && column_eq(&self.decode, n, a, b)
            && column_eq(&self.child_loads, n, a, b)
            && aggregator_eq(&self.prefill_aggregator)
            && aggregator_eq(&self.decode_aggregator)
    }

    /// What renaming ranks leaves of request `r`: its scheduler facts and the multiset of
    /// each of its columns.
    #[allow(clippy::type_complexity)]
    fn request_key(
        &self,
        r: RequestId,
    ) -> (
        crate::state::Request,
        SmallVec<[crate::state::PrefillCell; 16]>,
        SmallVec<[crate::state::HandlePhase; 16]>,
        SmallVec<[crate::state::DecodeCell; 16]>,
        SmallVec<[crate::state::LoadPhase; 16]>,
    ) {
        let n = self.request_count();
        let r = usize::from(r);
        fn column<T: Copy + Ord, const N: usize>(
            cells: &[T],
            n: usize,
            r: usize,
        ) -> SmallVec<[T; N]>
        where
            [T; N]: smallvec::Array<Item = T>,
        {
            let mut column: SmallVec<[T; N]> = cells.iter().skip(r).step_by(n).copied().collect();
            column.sort_unstable();
            column
        }
        (
            self.requests[r],
            column(&self.prefill, n, r),
            column(&self.handles, n, r),
            column(&self.decode, n, r),
            column(&self.child_loads, n, r),
        )
    }

    /// This state with request `order[i]` renamed `i`.
    fn renamed(&self, order: &[RequestId]) -> State {
        let n = self.request_count();
        let mut next = self.clone();
        let mut new_id = [0 as RequestId; crate::config::MAX_REQUESTS];
        for (i, &old) in order.iter().enumerate() {
            new_id[usize::from(old)] = i as RequestId;
            next.requests[i] = self.requests[usize::from(old)];
        }
        fn columns<T: Copy, const N: usize>(
            cells: &mut SmallVec<[T; N]>,
            from: &[T],
            n: usize,
            order: &[RequestId],
        ) where
            [T; N]: smallvec::Array<Item = T>,
        {
            for row in 0..from.len() / n {
                for (i, &old) in order.iter().enumerate() {
                    cells[row * n + i] = from[row * n + usize::from(old)];
                }
            }
        }
        columns(&mut next.prefill, &self.prefill, n, order);
        columns(&mut next.handles, &self.handles, n, order);
        columns(&mut next.decode, &self.decode, n, order);
        columns(&mut next.child_loads, &self.child_loads, n, order);
        let rename = |id: &RequestId| new_id[usize::from(*id)];
        // An empty aggregator stays shared: renaming changes nothing in it.
        if !self.prefill_aggregator.is_empty() {
            next.prefill_aggregator = std::sync::Arc::new(self.prefill_aggregator.renamed(rename));
        }
        if !self.decode_aggregator.is_empty() {
            next.decode_aggregator = std::sync::Arc::new(self.decode_aggregator.renamed(rename));
        }
        next
    }

    /// The canonical member of this state's class under renaming ranks alone: transfer
    /// groups sorted per request column where requests never meet on a rank, as whole
    /// rows where they do (a head-only reaper walks one rank's requests in order), and
    /// replicas per request column.
    fn into_rank_representative(self) -> State {
        if !self.topology().ordered_leases {
            let mut next = self;
            next.sort_group_columns();
            next.sort_replica_columns();
            return next;
        }
        let mut next = match self.group_order() {
            None => self,
            Some((prefill_from, decode_from, handle_from)) => {
                let n = self.request_count();
                let mut next = self;
                next.prefill = gather(
                    prefill_from.iter().map(|&k| usize::from(k)),
                    &next.prefill,
                    n,
                );
                next.decode = gather(decode_from.iter().map(|&k| usize::from(k)), &next.decode, n);
                next.child_loads = gather(
                    decode_from.iter().map(|&k| usize::from(k)),
                    &next.child_loads,
                    n,
                );
                next.handles = gather(handle_from.iter().copied(), &next.handles, n);
                next
            }
        };
        next.sort_replica_columns();
        next
    }

    /// Partitions `cells` (P worker, request) into classes of cells that a symmetry fixing
    /// this state permutes: replicas with equal cells in one request column. Cells of
    /// other ranks, and every cell under `Strict`, stand alone. Choosing any j cells of a
    /// class leads to symmetric successors, so one choice per count covers them all.
    /// Classes and their members keep the order of `cells`.
    pub fn interchangeable_cells(
        &self,
        cells: &[(Rank, RequestId)],
    ) -> Vec<Vec<(Rank, RequestId)>> {
        let replica = |k: Rank| self.symmetric() && self.topology().replicas.contains(&k);
        let mut classes: Vec<Vec<(Rank, RequestId)>> = Vec::new();
        for &(rank, r) in cells {
            let class = classes.iter_mut().find(|class| {
                let (other, q) = class[0];
                replica(rank)
                    && replica(other)
                    && q == r
                    && self.prefill_cell(other, q) == self.prefill_cell(rank, r)
            });
            match class {
                Some(class) => class.push((rank, r)),
                None => classes.push(vec![(rank, r)]),
            }
        }
        classes
    }

    /// Sorts each request column of the transfer groups in place: the groups' cells for
    /// one request (their P ranks', then their D ranks' with the offloading child's
    /// loads, then their handles') move as a block, independently of other columns.
    fn sort_group_columns(&mut self) {
        let topology = self.topology();
        let groups = &topology.groups;
        if groups.len() < 2 {
            return;
        }
        let n = self.request_count();
        for r in 0..n {
            let compare = |state: &State, a: usize, b: usize| -> std::cmp::Ordering {
                let (a, b) = (&groups[a], &groups[b]);
                let cell = |k: &Rank| state.prefill[usize::from(*k) * n + r];
                let load = |d: &Rank| {
                    let at = usize::from(*d) * n + r;
                    (state.decode[at], state.child_loads[at])
                };
                let handle = |h: &usize| state.handles[*h * n + r];
                a.prefill_ranks
                    .iter()
                    .map(cell)
                    .cmp(b.prefill_ranks.iter().map(cell))
                    .then_with(|| {
                        a.decode_ranks
                            .iter()
                            .map(load)
                            .cmp(b.decode_ranks.iter().map(load))
                    })
                    .then_with(|| {
                        a.handles
                            .iter()
                            .map(handle)
                            .cmp(b.handles.iter().map(handle))
                    })
            };
            if (1..groups.len()).all(|g| compare(self, g - 1, g).is_le()) {
                continue;
            }
            let mut order: SmallVec<[usize; 16]> = (0..groups.len()).collect();
            order.sort_by(|&a, &b| compare(self, a, b));
            // The column's cells, read before any is overwritten.
            let prefill: SmallVec<[crate::state::PrefillCell; 64]> = (0..self.prefill.len() / n)
                .map(|k| self.prefill[k * n + r])
                .collect();
            let decode: SmallVec<[(crate::state::DecodeCell, crate::state::LoadPhase); 16]> = (0
                ..self.decode.len() / n)
                .map(|d| (self.decode[d * n + r], self.child_loads[d * n + r]))
                .collect();
            let handles: SmallVec<[crate::state::HandlePhase; 64]> = (0..self.handles.len() / n)
                .map(|h| self.handles[h * n + r])
                .collect();
            for (slot, &from) in order.iter().enumerate() {
                let (to, from) = (&groups[slot], &groups[from]);
                for (&t, &f) in to.prefill_ranks.iter().zip(&from.prefill_ranks) {
                    self.prefill[usize::from(t) * n + r] = prefill[usize::from(f)];
                }
                for (&t, &f) in to.decode_ranks.iter().zip(&from.decode_ranks) {
                    let at = usize::from(t) * n + r;
                    (self.decode[at], self.child_loads[at]) = decode[usize::from(f)];
                }
                for (&t, &f) in to.handles.iter().zip(&from.handles) {
                    self.handles[t * n + r] = handles[f];
                }
            }
        }
    }

    /// Sorts each request column of the replicas' cells in place (an insertion sort over
    /// the column's strided positions: no allocation, and columns are nearly always
    /// sorted already).
    fn sort_replica_columns(&mut self) {
        let n = self.request_count();
        let replicas = &self.shape.0.replicas;
        let at = |i: usize, r: usize| usize::from(replicas[i]) * n + r;
        for r in 0..n {
            for i in 1..replicas.len() {
                let mut j = i;
                while j > 0 && self.prefill[at(j - 1, r)] > self.prefill[at(j, r)] {
                    self.prefill.swap(at(j - 1, r), at(j, r));
                    j -= 1;
                }
            }
        }
    }

    /// For each slot, the old rank (or handle) whose row moves there when the transfer
    /// groups are sorted; None when they already stand in canonical order.
    #[allow(clippy::type_complexity)]
    fn group_order(&self) -> Option<(Vec<Rank>, Vec<Rank>, Vec<usize>)> {
        let topology = self.topology();
        let n = self.request_count();
        let prefill_row =
            |rank: Rank| &self.prefill[usize::from(rank) * n..(usize::from(rank) + 1) * n];
        // A D rank's row: NIXL's cells, then the offloading child's loads.
        let decode_row = |rank: Rank| {
            let cells = usize::from(rank) * n..(usize::from(rank) + 1) * n;
            (&self.decode[cells.clone()], &self.child_loads[cells])
        };
        let handle_row = |h: usize| &self.handles[h * n..(h + 1) * n];

        // Groups compare by their rows in order: P ranks, then D ranks, then handles
        // (the derived order of the tuple of row lists, without building it).
        let compare_groups = |a: usize, b: usize| -> std::cmp::Ordering {
            let (a, b) = (&topology.groups[a], &topology.groups[b]);
            let prefill = a.prefill_ranks.iter().map(|&k| prefill_row(k));
            let decode = a.decode_ranks.iter().map(|&d| decode_row(d));
            let handles = a.handles.iter().map(|&h| handle_row(h));
            prefill
                .cmp(b.prefill_ranks.iter().map(|&k| prefill_row(k)))
                .then_with(|| decode.cmp(b.decode_ranks.iter().map(|&d| decode_row(d))))
                .then_with(|| handles.cmp(b.handles.iter().map(|&h| handle_row(h))))
        };
        let group_count = topology.groups.len();
        if (1..group_count).all(|g| compare_groups(g - 1, g).is_le()) {
            return None;
        }

        let mut prefill_from: Vec<Rank> = (0..topology.prefill_world).collect();
        let mut decode_from: Vec<Rank> = (0..topology.decode_world).collect();
        let mut handle_from: Vec<usize> = (0..topology.handles.len()).collect();
        let mut order: Vec<usize> = (0..group_count).collect();
        order.sort_by(|&a, &b| compare_groups(a, b));
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
        Some((prefill_from, decode_from, handle_from))
    }
}

/// Every order of `items` (at most 3 of them, so at most 6 orders).
fn permutations(items: &[RequestId]) -> Vec<SmallVec<[RequestId; 3]>> {
    if items.len() <= 1 {
        return vec![items.iter().copied().collect()];
    }
    let mut all = Vec::new();
    for (i, &first) in items.iter().enumerate() {
        let rest: SmallVec<[RequestId; 3]> = items
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .map(|(_, &r)| r)
            .collect();
        for tail in permutations(&rest) {
            let mut order: SmallVec<[RequestId; 3]> = SmallVec::new();
            order.push(first);
            order.extend(tail);
            all.push(order);
        }
    }
    all
}

/// Rows of `n` cells, taken from the old row positions `from` in order.
fn gather<T: Copy, const N: usize>(
    from: impl Iterator<Item = usize>,
    cells: &[T],
    n: usize,
) -> smallvec::SmallVec<[T; N]>
where
    [T; N]: smallvec::Array<Item = T>,
{
    from.flat_map(|old| cells[old * n..(old + 1) * n].iter().copied())
        .collect()
}

impl stateright::Representative for State {
    fn representative(&self) -> Self {
        State::representative(self)
    }
}
