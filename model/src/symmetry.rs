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
//! The one exception is P's `_reqs_to_send` under a head-only reaper
//! ([`crate::topology::Topology::ordered_leases`]): a rank's reaper walks its requests in
//! order and stops at the first live lease, so a rank's cells for different requests do
//! meet there, and transfer groups are then permuted as whole rows over the columns of
//! the requests the reaper can still reach (every such column alike). A request past its
//! reach (send metadata arrived, in no rank's `_reqs_to_send`) never comes back into it,
//! so its column meets no other and is permuted on its own; which requests are past it is
//! a fact of the class (renaming ranks or requests does not change it), and a request only
//! ever leaves the reaper's reach, so this state-dependent product is again a bisimulation. (A lost output-rank output drops the whole step, every rank's reports
//! alike, so the output rank's group is no exception.)
//!
//! The representative sorts each request column of the transfer groups by the groups'
//! cells in it (or, under a head-only reaper, the groups by their rows over the columns
//! the reaper can reach, then each other column on its own) and each
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
//! quantifies over all requests.
//!
//! Under a head-only reaper ([`crate::topology::Topology::ordered_leases`]) a request's
//! place in P's `_reqs_to_send` is one of its scheduler facts (`Request::queued_after`),
//! unique among the requests in the queue ([`crate::rank::renumber_queue`]); the reaper
//! reads places, never ids, so a renaming carries each request's place with it and the
//! image of a reaper's walk is the walk of the image. One transition still reads ids:
//! requests whose send metadata arrives in one step join the queue in id order. A
//! renaming that reverses two such requests maps that step to a step the model never
//! takes (it would queue them the other way round), so it is excluded: a renaming may
//! reorder requests freely, but must keep the id order of the requests whose send
//! metadata has not arrived yet (the only ones that can still arrive together). These
//! renamings do not form one group, but "s' is s renamed by a renaming that keeps the
//! id order of s's undelivered requests" is an equivalence (the inverse and composites of
//! such renamings keep it too) and a bisimulation: a step of s renamed is a step of s'
//! (the requests arriving in it are undelivered in s, so they queue in the same order in
//! both), it delivers requests and never undelivers one (send metadata is queued once,
//! when prefill finishes), so the same renaming still keeps the order of what is left
//! undelivered; and every clause judges s and s' alike. So the quotient keeps every
//! verdict.
//!
//! The representative is the least, in the derived order of [`State`], of the rank
//! representatives of the request orders that sort the requests by a key that the
//! allowed renamings and renaming ranks do not change (ties tried every way): first an
//! undelivered request's rank among the undelivered ones by id (under a head-only reaper;
//! unique, so these requests keep their id order and the candidates are allowed
//! renamings), then its scheduler facts and the multiset of each of its columns. The
//! candidates are the same for every member of a class, so the least is too. Without a
//! head-only reaper the least is found without building a state per candidate: ranks are
//! renamed per request column there, which commutes with renaming requests, and the
//! least candidate sorts tied requests by everything a renaming moves, field by field
//! (`State::sort_tied_requests` says why; its test checks it against the
//! definition on every reachable state of small points).
//!
//! Only the `Countdown` aggregator is symmetric: it has no reporter identity. `Strict`
//! remembers which ranks formed a quorum, and when more than E reports arrive in one step
//! the quorum is the first E in rank order, so renaming ranks changes what it remembers.
//! Under `Strict` the reduction is off: sound, at the price of more states.

use crate::config::MAX_REQUESTS;
use crate::pack::Code;
use crate::state::{Metadata, PrefillCell, Request, RequestId, State};
use kvcc_aggregator::{Policy, Rank};
use smallvec::SmallVec;
use std::cell::OnceCell;

/// A renaming of requests: `order[i]` is the request that becomes request `i`.
type Order = SmallVec<[RequestId; MAX_REQUESTS]>;

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
        let mut representative = self.clone();
        representative.canonicalize();
        representative
    }

    /// Makes this state [`State::representative`] in place: in the common case it is
    /// canonical already, or needs only columns sorted, and nothing is copied.
    pub fn canonicalize(&mut self) {
        if !self.symmetric() {
            return;
        }
        if self.request_count() < 2 {
            return self.put_ranks_in_order();
        }
        // Requests with pairwise different scheduler facts (after their arrival ranks)
        // are ordered by those alone (the first parts of the key): the common case, with
        // no key built. Each head is taken once: this runs for every successor.
        let n = self.request_count();
        let heads = self.heads();
        if heads.windows(2).all(|w| w[0] < w[1]) {
            return self.put_ranks_in_order();
        }
        if (0..n).all(|a| (a + 1..n).all(|b| heads[a] != heads[b])) {
            let mut order: Order = (0..n as RequestId).collect();
            order.sort_by_key(|&r| heads[usize::from(r)]);
            self.rename(&order);
            return self.put_ranks_in_order();
        }
        if self.topology().ordered_leases {
            self.become_least_candidate()
        } else {
            self.sort_tied_requests(State::cmp_moved)
        }
    }

    /// Becomes the least, in the derived order of [`State`], of the rank representatives
    /// of the candidate request orders ([`State::request_orders`]): the representative's
    /// definition, for any state. Under a head-only reaper the transfer groups are
    /// permuted as whole rows, so each order is renamed and put in rank order in turn.
    fn become_least_candidate(&mut self) {
        let orders = self.request_orders();
        if orders.len() == 1 && is_identity(&orders[0]) {
            return self.put_ranks_in_order();
        }
        *self = orders
            .iter()
            .map(|order| {
                let mut candidate = self.renamed(order);
                candidate.put_ranks_in_order();
                candidate
            })
            .min()
            .expect("at least one request order");
    }

    /// [`State::become_least_candidate`] without a state per order, where ranks are
    /// renamed per request column (no head-only reaper): renaming ranks then commutes
    /// with renaming requests, so ranks are put in order once, and requests are sorted
    /// by their keys with ties broken by `tie_break` ([`State::cmp_moved`]). The derived
    /// order compares each field of two candidates slot by slot (a column of cells row by
    /// row), so among orders that differ only within groups of tied requests the least
    /// sorts each group by its requests' fields, field by field: the same state. The
    /// module's tests check it on every reachable state of small points, and that a
    /// careless tie-break differs.
    fn sort_tied_requests(
        &mut self,
        tie_break: impl Fn(&State, usize, usize) -> std::cmp::Ordering,
    ) {
        self.put_ranks_in_order();
        let n = self.request_count();
        let keys = RequestKeys::of(self);
        let mut order: Order = (0..n as RequestId).collect();
        order.sort_by(|&a, &b| {
            let (a, b) = (usize::from(a), usize::from(b));
            keys.cmp(a, b).then_with(|| tie_break(self, a, b))
        });
        self.rename(&order);
    }

    /// Requests `a` and `b` compared by their scheduler facts, then each column of cells
    /// row by row, as the derived order of [`State`] compares those fields.
    fn cmp_cells(&self, a: usize, b: usize) -> std::cmp::Ordering {
        let n = self.request_count();
        fn column<T: Ord>(cells: &[T], n: usize, a: usize, b: usize) -> std::cmp::Ordering {
            cells
                .chunks(n)
                .map(|row| row[a].cmp(&row[b]))
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        }
        self.requests[a]
            .cmp(&self.requests[b])
            .then_with(|| column(&self.prefill, n, a, b))
            .then_with(|| column(&self.handles, n, a, b))
            .then_with(|| column(&self.decode, n, a, b))
            .then_with(|| column(&self.child_loads, n, a, b))
    }

    /// Requests `a` and `b` compared by everything a renaming moves, in the order the
    /// derived order of [`State`] compares its fields: scheduler facts, then each column
    /// of cells row by row, then what each aggregator holds for them.
    fn cmp_moved(&self, a: usize, b: usize) -> std::cmp::Ordering {
        let (ida, idb) = (a as RequestId, b as RequestId);
        self.cmp_cells(a, b)
            .then_with(|| self.prefill_aggregator.cmp_held(&ida, &idb))
            .then_with(|| self.decode_aggregator.cmp_held(&ida, &idb))
    }

    /// The request orders to try: requests sorted by their [`RequestKeys`], every order
    /// of requests whose keys tie. `order[i]` is the request that becomes request `i`.
    /// On the stack: under a head-only reaper it runs for every successor with tied
    /// requests.
    fn request_orders(&self) -> SmallVec<[Order; 6]> {
        let keys = RequestKeys::of(self);
        let mut sorted: Order = (0..self.request_count() as RequestId).collect();
        sorted.sort_by(|&a, &b| keys.cmp(usize::from(a), usize::from(b)));
        let mut orders: SmallVec<[Order; 6]> = smallvec::smallvec![Order::new()];
        let mut start = 0;
        while start < sorted.len() {
            let tie = usize::from(sorted[start]);
            let end = start
                + sorted[start..]
                    .iter()
                    .take_while(|&&r| keys.cmp(usize::from(r), tie).is_eq())
                    .count();
            let group = &sorted[start..end];
            // Requests equal in everything a renaming moves: every order of them is the
            // same state.
            let first = usize::from(group[0]);
            let alike = group
                .iter()
                .all(|&r| self.cmp_moved(first, usize::from(r)).is_eq());
            let group_orders = if alike {
                smallvec::smallvec![group.iter().copied().collect()]
            } else {
                permutations(group)
            };
            orders = orders
                .iter()
                .flat_map(|prefix| {
                    group_orders.iter().map(move |tail| {
                        let mut order = prefix.clone();
                        order.extend(tail.iter().copied());
                        order
                    })
                })
                .collect();
            start = end;
        }
        orders
    }

    /// Each request's arrival rank and scheduler facts: the first parts of its key,
    /// compared before any column, taken in one pass for every successor's canonical form.
    /// The arrival rank is where a renaming must keep the request (module docs): under a
    /// head-only reaper, an undelivered request's rank by id among the undelivered ones,
    /// from 1; 0 for every other request, which renamings may move freely.
    fn heads(&self) -> SmallVec<[(u8, Request); MAX_REQUESTS]> {
        let ordered = self.topology().ordered_leases;
        let mut undelivered = 0;
        self.requests
            .iter()
            .map(|&request| {
                if !ordered || request.send_meta == Metadata::Delivered {
                    return (0, request);
                }
                undelivered += 1;
                (undelivered, request)
            })
            .collect()
    }

    /// This state with request `order[i]` renamed `i`: whether that is a symmetry of
    /// this state is the caller's to know (module docs).
    pub fn renamed(&self, order: &[RequestId]) -> State {
        let mut next = self.clone();
        next.rename(order);
        next
    }

    /// Renames request `order[i]` to `i` in place ([`State::renamed`]): a successor
    /// whose requests come out of order is put in order without a second state.
    fn rename(&mut self, order: &[RequestId]) {
        // The identity keeps everything, the shared aggregators too (renaming rebuilds
        // them): the common order when tied requests are tried every way.
        if is_identity(order) {
            return;
        }
        let mut new_id = [0 as RequestId; MAX_REQUESTS];
        for (i, &old) in order.iter().enumerate() {
            new_id[usize::from(old)] = i as RequestId;
        }
        /// Each row of `n` cells (one per request) reordered by `order`.
        fn columns<T: Copy>(cells: &mut [T], order: &[RequestId]) {
            for row in cells.chunks_exact_mut(order.len()) {
                // The row as it was, cell by cell: a library copy of two or three cells
                // cost more than the cells.
                let from: [T; MAX_REQUESTS] = std::array::from_fn(|i| row[i.min(row.len() - 1)]);
                for (cell, &old) in row.iter_mut().zip(order) {
                    *cell = from[usize::from(old)];
                }
            }
        }
        columns(&mut self.requests, order);
        columns(&mut self.prefill, order);
        columns(&mut self.handles, order);
        columns(&mut self.decode, order);
        columns(&mut self.child_loads, order);
        let rename = |id: &RequestId| new_id[usize::from(*id)];
        // An empty aggregator stays shared: renaming changes nothing in it.
        if !self.prefill_aggregator.is_empty() {
            self.prefill_aggregator = std::sync::Arc::new(self.prefill_aggregator.renamed(rename));
        }
        if !self.decode_aggregator.is_empty() {
            self.decode_aggregator = std::sync::Arc::new(self.decode_aggregator.renamed(rename));
        }
    }

    /// Makes this state the canonical member of its class under renaming ranks alone:
    /// transfer groups sorted per request column where requests never meet on a rank, as
    /// whole rows where they do (a head-only reaper walks one rank's requests in order),
    /// and replicas per request column.
    fn put_ranks_in_order(&mut self) {
        if !self.topology().ordered_leases {
            self.sort_group_columns(|_| true);
            self.sort_replica_columns();
            return;
        }
        let free: SmallVec<[bool; 3]> = (0..self.request_count() as RequestId)
            .map(|r| self.past_the_reaper(r))
            .collect();
        if let Some((prefill_from, decode_from, handle_from)) = self.group_order(&free) {
            let n = self.request_count();
            let decode_rows = || decode_from.iter().map(|&k| usize::from(k));
            self.prefill = gather(
                prefill_from.iter().map(|&k| usize::from(k)),
                &self.prefill,
                n,
            );
            self.decode = gather(decode_rows(), &self.decode, n);
            self.child_loads = gather(decode_rows(), &self.child_loads, n);
            self.handles = gather(handle_from.iter().copied(), &self.handles, n);
        }
        self.sort_group_columns(|r| free[r]);
        self.sort_replica_columns();
    }

    /// Has request `r` left the reaper's reach for good: its send metadata arrived and no
    /// P rank holds it in `_reqs_to_send` (it never returns: metadata arrives once)? Its
    /// cells then meet no other request's on any rank, and its column of the transfer
    /// groups is permuted on its own, as without a head-only reaper.
    fn past_the_reaper(&self, r: RequestId) -> bool {
        self.requests[usize::from(r)].send_meta == Metadata::Delivered
            && !crate::rank::in_queue(self, r)
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
    fn sort_group_columns(&mut self, columns: impl Fn(usize) -> bool) {
        let topology = self.topology();
        let groups = &topology.groups;
        if groups.len() < 2 {
            return;
        }
        let n = self.request_count();
        for r in (0..n).filter(|&r| columns(r)) {
            let compare = |state: &State, a: usize, b: usize| -> std::cmp::Ordering {
                let (a, b) = (&groups[a], &groups[b]);
                // Keyed as the derived order compares cells, in one load each.
                let cell = |k: &Rank| state.prefill[usize::from(*k) * n + r].order_key();
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

    /// Sorts each request column of the replicas' cells in place. A column already in
    /// order, as nearly all are, is left after one pass that keys each cell once
    /// ([`PrefillCell::order_key`]); the rest take an insertion sort over the column's
    /// strided positions (no allocation).
    fn sort_replica_columns(&mut self) {
        let n = self.request_count();
        let replicas = &self.shape.0.replicas;
        let prefill: &mut [PrefillCell] = &mut self.prefill;
        let at = |i: usize, r: usize| usize::from(replicas[i]) * n + r;
        for r in 0..n {
            let keys = (0..replicas.len()).map(|i| prefill[at(i, r)].order_key());
            if keys.is_sorted() {
                continue;
            }
            for i in 1..replicas.len() {
                let mut j = i;
                while j > 0 && prefill[at(j - 1, r)] > prefill[at(j, r)] {
                    prefill.swap(at(j - 1, r), at(j, r));
                    j -= 1;
                }
            }
        }
    }

    /// For each slot, the old rank (or handle) whose row moves there when the transfer
    /// groups are sorted by their rows outside the `free` columns (those are sorted on
    /// their own); None when they already stand in canonical order.
    #[allow(clippy::type_complexity)]
    fn group_order(&self, free: &[bool]) -> Option<(Vec<Rank>, Vec<Rank>, Vec<usize>)> {
        let topology = self.topology();
        let n = self.request_count();
        let tied: SmallVec<[usize; 3]> = (0..n).filter(|&r| !free[r]).collect();
        // Two rows of `cells`, compared over the tied columns.
        fn rows<T: Ord + Copy>(
            cells: &[T],
            n: usize,
            tied: &[usize],
            a: usize,
            b: usize,
        ) -> std::cmp::Ordering {
            let row = |k: usize| tied.iter().map(move |&r| cells[k * n + r]);
            row(a).cmp(row(b))
        }
        // Lists of rows, compared row by row (groups have as many of each).
        fn lists<K: Copy>(
            a: &[K],
            b: &[K],
            row: impl Fn(K, K) -> std::cmp::Ordering,
        ) -> std::cmp::Ordering {
            a.iter()
                .zip(b)
                .map(|(&x, &y)| row(x, y))
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        }
        // Groups compare by their rows in order: P ranks, then D ranks (NIXL's cells,
        // then the offloading child's loads), then handles.
        let compare_groups = |a: usize, b: usize| -> std::cmp::Ordering {
            let (a, b) = (&topology.groups[a], &topology.groups[b]);
            let prefill =
                |x: Rank, y: Rank| rows(&self.prefill, n, &tied, usize::from(x), usize::from(y));
            let decode = |x: Rank, y: Rank| {
                let (x, y) = (usize::from(x), usize::from(y));
                rows(&self.decode, n, &tied, x, y)
                    .then_with(|| rows(&self.child_loads, n, &tied, x, y))
            };
            let handle = |x: usize, y: usize| rows(&self.handles, n, &tied, x, y);
            lists(&a.prefill_ranks, &b.prefill_ranks, prefill)
                .then_with(|| lists(&a.decode_ranks, &b.decode_ranks, decode))
                .then_with(|| lists(&a.handles, &b.handles, handle))
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

/// What the allowed renamings of requests and renaming ranks leave of each request of a
/// state (module docs): its arrival rank, its scheduler facts, and the multiset of each of
/// its columns, compared in that order. A column's multiset is kept as its cell codes,
/// sorted (the codes keep their types' order: [`crate::pack`], [`PrefillCell::order_key`]),
/// and built for every request the first time a comparison reaches that column: the keys
/// are taken for every successor whose requests tie, and most ties are broken by the
/// first column.
struct RequestKeys<'s> {
    state: &'s State,
    heads: SmallVec<[(u8, Request); MAX_REQUESTS]>,
    /// Per column in field order: each request's sorted codes, one run per request.
    columns: [OnceCell<SmallVec<[u64; 32]>>; COLUMNS],
}

/// The per-request columns of a state: prefill cells, handles, decode cells, child loads.
const COLUMNS: usize = 4;

impl<'s> RequestKeys<'s> {
    fn of(state: &'s State) -> RequestKeys<'s> {
        RequestKeys {
            state,
            heads: state.heads(),
            columns: Default::default(),
        }
    }

    /// Column `c` of every request, sorted per request.
    fn column(&self, c: usize) -> &[u64] {
        self.columns[c].get_or_init(|| {
            let state = self.state;
            let n = state.request_count();
            let mut codes = SmallVec::new();
            for r in 0..n {
                match c {
                    0 => sorted_column(&mut codes, &state.prefill, n, r, PrefillCell::order_key),
                    1 => sorted_column(&mut codes, &state.handles, n, r, |c| c.code().into()),
                    2 => sorted_column(&mut codes, &state.decode, n, r, |c| c.code().into()),
                    3 => sorted_column(&mut codes, &state.child_loads, n, r, |c| c.code().into()),
                    _ => unreachable!("a state has {COLUMNS} per-request columns"),
                }
            }
            codes
        })
    }

    fn cmp(&self, a: usize, b: usize) -> std::cmp::Ordering {
        self.heads[a].cmp(&self.heads[b]).then_with(|| {
            (0..COLUMNS)
                .map(|c| {
                    let codes = self.column(c);
                    // Every request has as many cells in a column.
                    let width = codes.len() / self.heads.len();
                    codes[a * width..(a + 1) * width].cmp(&codes[b * width..(b + 1) * width])
                })
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        })
    }
}

/// Appends the codes of request `r`'s column of `cells` (`n` requests), sorted.
fn sorted_column<T: Copy>(
    codes: &mut SmallVec<[u64; 32]>,
    cells: &[T],
    n: usize,
    r: usize,
    code: impl Fn(T) -> u64,
) {
    let start = codes.len();
    codes.extend(cells.chunks_exact(n).map(|row| code(row[r])));
    codes[start..].sort_unstable();
}

/// Does `order` rename no request?
fn is_identity(order: &[RequestId]) -> bool {
    order.iter().enumerate().all(|(i, &r)| usize::from(r) == i)
}

/// Every order of `items` (at most 3 of them, so at most 6 orders).
fn permutations(items: &[RequestId]) -> SmallVec<[Order; 6]> {
    if items.len() <= 1 {
        return smallvec::smallvec![items.iter().copied().collect()];
    }
    let mut all = SmallVec::new();
    for (i, &first) in items.iter().enumerate() {
        let rest: Order = items
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .map(|(_, &r)| r)
            .collect();
        for tail in permutations(&rest) {
            let mut order = Order::new();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::base;
    use crate::config::{Config, Connector, EngineFault};
    use crate::model::ContractModel;

    /// Points without a head-only reaper whose requests often tie: transfer groups and
    /// replicas, two and three requests, both aggregators, aborts and lost notifications.
    fn points() -> Vec<Config> {
        let with = |pcp: u16, tp: u16, requests: u8, edit: fn(&mut Config)| {
            let mut config = base();
            config.prefill.pcp = pcp;
            config.prefill.tp = tp;
            config.decode.tp = tp;
            config.requests = requests;
            edit(&mut config);
            config
        };
        vec![
            with(2, 2, 2, |_| {}),
            with(2, 1, 3, |_| {}),
            with(2, 1, 2, |c| {
                c.faults.client_abort = true;
                c.faults.lost_notification = true;
            }),
            with(2, 1, 2, |c| c.prefill.loads_kv = true),
            with(2, 1, 2, |c| c.connector = Connector::MultiOffload),
            // A lost output: reports the ranks made that the aggregator never counted.
            with(2, 1, 2, |c| {
                c.faults.missing_output_rank = EngineFault::Both
            }),
            with(2, 1, 2, |c| c.faults.worker_step_raises = EngineFault::Both),
        ]
    }

    /// Sorting tied requests by everything a renaming moves finds the least candidate,
    /// the representative's definition, on every reachable state of the points above (the
    /// representative too, with its shortcut for requests that do not tie). Two careless
    /// tie-breaks, one leaving out what the aggregators hold and one reversed, each give
    /// another state somewhere, so the check can see a wrong one.
    #[test]
    fn sorting_tied_requests_finds_the_least_candidate_and_careless_tie_breaks_do_not() {
        let without_aggregators = |s: &State, a: usize, b: usize| s.cmp_cells(a, b);
        let reversed = |s: &State, a: usize, b: usize| s.cmp_moved(b, a);
        let (mut tied, mut aggregators_caught, mut reversed_caught) = (0, false, false);
        for config in points() {
            let model = ContractModel::new(config);
            assert!(!model.topology.ordered_leases);
            for state in model.reachable_states(usize::MAX) {
                let n = state.request_count();
                if !state.symmetric() || n < 2 {
                    continue;
                }
                let mut least = state.clone();
                least.become_least_candidate();
                assert!(state.representative() == least, "{state:?}");
                let sorted = |tie_break: &dyn Fn(&State, usize, usize) -> std::cmp::Ordering| {
                    let mut sorted = state.clone();
                    sorted.sort_tied_requests(tie_break);
                    sorted
                };
                if (0..n).any(|a| (a + 1..n).any(|b| state.requests[a] == state.requests[b])) {
                    tied += 1;
                    assert!(sorted(&State::cmp_moved) == least, "{state:?}");
                }
                aggregators_caught |= sorted(&without_aggregators) != least;
                reversed_caught |= sorted(&reversed) != least;
            }
        }
        assert!(tied > 1000, "{tied} states with tied requests");
        assert!(
            aggregators_caught,
            "a tie-break without the aggregators was not caught"
        );
        assert!(reversed_caught, "a reversed tie-break was not caught");
    }

    /// The request key's definition, field by field: arrival rank (module docs),
    /// scheduler facts, and each column's cells sorted.
    #[allow(clippy::type_complexity)]
    fn defined_key(
        state: &State,
        r: usize,
    ) -> (
        u8,
        Request,
        Vec<PrefillCell>,
        Vec<crate::state::HandlePhase>,
        Vec<crate::state::DecodeCell>,
        Vec<crate::state::LoadPhase>,
    ) {
        let n = state.request_count();
        fn column<T: Copy + Ord>(cells: &[T], n: usize, r: usize) -> Vec<T> {
            let mut column: Vec<T> = cells.iter().skip(r).step_by(n).copied().collect();
            column.sort_unstable();
            column
        }
        let undelivered = |q: usize| state.requests[q].send_meta != Metadata::Delivered;
        let arrival_rank = if state.topology().ordered_leases && undelivered(r) {
            1 + (0..r).filter(|&q| undelivered(q)).count() as u8
        } else {
            0
        };
        (
            arrival_rank,
            state.requests[r],
            column(&state.prefill, n, r),
            column(&state.handles, n, r),
            column(&state.decode, n, r),
            column(&state.child_loads, n, r),
        )
    }

    /// The keys' strings of codes order requests as their definition does, on every
    /// reachable state of the points above and of a head-only reaper's (where the keys
    /// are taken before ranks are put in order). The twin, keys of scheduler facts
    /// alone, orders some pair otherwise, so the check sees the columns.
    #[test]
    fn request_keys_order_requests_as_their_definition() {
        let mut head_only = base();
        head_only.prefill.tp = 2;
        head_only.requests = 2;
        head_only.producer.lease_reaper = crate::config::LeaseReaper::HeadOnly;
        let (mut pairs, mut twin_caught) = (0, false);
        for config in points().into_iter().chain([head_only]) {
            let model = ContractModel::new(config);
            for state in model.reachable_states(usize::MAX) {
                let keys = RequestKeys::of(&state);
                let n = state.request_count();
                for (a, b) in (0..n).flat_map(|a| (0..n).map(move |b| (a, b))) {
                    let defined = defined_key(&state, a).cmp(&defined_key(&state, b));
                    assert_eq!(keys.cmp(a, b), defined, "requests {a}, {b} of {state:?}");
                    pairs += 1;
                    twin_caught |= keys.heads[a].cmp(&keys.heads[b]) != defined;
                }
            }
        }
        assert!(pairs > 10_000, "{pairs} pairs");
        assert!(twin_caught, "keys without columns were not caught");
    }
}
