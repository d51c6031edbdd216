//! Every state seen so far and how it was first reached.
//!
//! The expanding threads insert successors as they generate them, so a level never
//! buffers a duplicate (buffering them first cost about half the peak memory of a large
//! search). Which thread inserts first depends on timing; what is kept does not: each
//! state keeps the *smallest* [`discovery`] of all the ways it was reached, which is the
//! first way a sequential BFS would have reached it. Parents, the next frontier's order
//! and so every counterexample are therefore the same for any thread count.
//!
//! The set is sharded by fingerprint, one lock per shard; each shard is an open-addressing
//! table of (fingerprint, discovery) pairs, 16 bytes a slot, one cache line per probe.

use std::sync::{Mutex, MutexGuard};

/// The discovery of an initial state: smaller than any other.
pub(super) const ROOT: u64 = 0;

/// Bits of a discovery that number the action among its parent's successors.
const ACTION_BITS: u32 = 16;

/// How many successors a discovery can number.
pub(super) const ACTIONS_MAX: u64 = 1 << ACTION_BITS;

/// How a state was reached, ordered as a sequential BFS meets it: by the parent's index in
/// BFS order (across all levels), then by the action's position among the parent's.
pub(super) fn discovery(parent_index: u64, action: usize) -> u64 {
    debug_assert!(
        (action as u64) < ACTIONS_MAX,
        "the search refuses states with more successors"
    );
    ((parent_index + 1) << ACTION_BITS) | action as u64
}

/// The BFS index of the parent a discovery names; None for an initial state.
pub(super) fn parent_index(discovery: u64) -> Option<u64> {
    (discovery != ROOT).then(|| (discovery >> ACTION_BITS) - 1)
}

/// Shards: enough that two to a few threads rarely wait on one another.
const SHARD_BITS: u32 = 6;

/// Fingerprints are never 0 (see [`super::fingerprint`]), so 0 marks an empty slot.
const EMPTY: u64 = 0;

struct Table {
    slots: Vec<(u64, u64)>,
    len: usize,
}

impl Table {
    fn new() -> Table {
        Table {
            slots: vec![(EMPTY, 0); 1 << 10],
            len: 0,
        }
    }

    /// The slot holding `fp`, or the empty slot where it belongs (linear probing from the
    /// fingerprint's low bits; the high bits chose the shard).
    fn slot(&self, fp: u64) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = fp as usize & mask;
        loop {
            let key = self.slots[i].0;
            if key == fp || key == EMPTY {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    fn get(&self, fp: u64) -> Option<u64> {
        let (key, value) = self.slots[self.slot(fp)];
        (key == fp).then_some(value)
    }

    /// Records `fp` as reached by `discovery`; true when it is new.
    fn visit(&mut self, fp: u64, discovery: u64) -> bool {
        let i = self.slot(fp);
        let slot = &mut self.slots[i];
        if slot.0 == fp {
            slot.1 = slot.1.min(discovery);
            return false;
        }
        *slot = (fp, discovery);
        self.len += 1;
        // At most 3/4 full: linear probing stays at one or two probes on average.
        if self.len * 4 > self.slots.len() * 3 {
            self.grow();
        }
        true
    }

    fn grow(&mut self) {
        let doubled = vec![(EMPTY, 0); self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        for (fp, discovery) in old {
            if fp != EMPTY {
                let i = self.slot(fp);
                self.slots[i] = (fp, discovery);
            }
        }
    }
}

pub(super) struct Visited {
    shards: Vec<Mutex<Table>>,
}

impl Visited {
    pub(super) fn new() -> Visited {
        Visited {
            shards: (0..1 << SHARD_BITS)
                .map(|_| Mutex::new(Table::new()))
                .collect(),
        }
    }

    fn shard_index(fp: u64) -> usize {
        (fp >> (64 - SHARD_BITS)) as usize
    }

    fn shard(&self, fp: u64) -> MutexGuard<'_, Table> {
        self.shards[Self::shard_index(fp)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Records that `fp` was reached by `discovery`; true when it was never seen before.
    /// Otherwise the smaller of the two discoveries is kept.
    pub(super) fn visit(&self, fp: u64, discovery: u64) -> bool {
        self.shard(fp).visit(fp, discovery)
    }

    /// The smallest discovery recorded for `fp`.
    pub(super) fn discovery_of(&self, fp: u64) -> Option<u64> {
        self.shard(fp).get(fp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_discovery_in_bfs_order_whatever_the_insertion_order() {
        let visited = Visited::new();
        let fp = 0xdead_beef_u64 << 20;
        assert!(visited.visit(fp, discovery(7, 3)));
        assert!(!visited.visit(fp, discovery(9, 0)));
        assert!(!visited.visit(fp, discovery(7, 1)));
        assert_eq!(visited.discovery_of(fp), Some(discovery(7, 1)));
        assert_eq!(parent_index(discovery(7, 1)), Some(7));
        assert!(visited.visit(1, ROOT));
        assert!(!visited.visit(1, discovery(0, 0)));
        assert_eq!(parent_index(visited.discovery_of(1).unwrap()), None);
    }

    #[test]
    fn grows_without_losing_entries() {
        let visited = Visited::new();
        // Fingerprints that all land in one shard and collide on low bits.
        let fps: Vec<u64> = (1..=20_000u64).map(|i| (i << 12) | 1).collect();
        for (i, &fp) in fps.iter().enumerate() {
            assert!(visited.visit(fp, discovery(i as u64, 0)));
        }
        for (i, &fp) in fps.iter().enumerate() {
            assert_eq!(visited.discovery_of(fp), Some(discovery(i as u64, 0)));
        }
        assert_eq!(visited.discovery_of(2), None);
    }
}
