//! Request ids are strings in vLLM; the aggregator counts small integers. Every reader
//! thread interns the ids of its lines here, so equal strings get equal numbers across
//! ranks and the scheduler log.
//!
//! Memory must follow the requests in flight, not the log: the consumer forgets an id
//! once its lifetime is over and its countdowns are gone. A reader may already have
//! interned the same string for a step the consumer has not reached, so each entry keeps
//! the latest step it was seen at and is only forgotten when that step has been handled;
//! a string seen again after that gets a fresh number, which is sound because nothing
//! holds the old one any more.

use kvcc_aggregator::Step;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

/// A request id as the aggregator sees it.
pub type IdNum = u64;

const SHARD_BITS: u32 = 5;
const SHARDS: usize = 1 << SHARD_BITS;

/// FNV-1a: request ids are short strings, and SipHash's DoS resistance buys nothing for
/// a log the user hands us.
#[derive(Default, Clone, Copy)]
pub struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

pub type FnvBuild = BuildHasherDefault<Fnv>;

struct Slot {
    id: IdNum,
    /// The latest step a reader or the scheduler log mentioned this string at.
    last_seen: Step,
}

#[derive(Default)]
struct Shard {
    by_name: HashMap<Arc<str>, Slot, FnvBuild>,
    by_id: HashMap<IdNum, Arc<str>, FnvBuild>,
    next: u64,
}

/// Sharded by the string's hash, so reader threads rarely wait on each other.
pub struct Interner {
    shards: Vec<Mutex<Shard>>,
}

impl Default for Interner {
    fn default() -> Self {
        Interner::new()
    }
}

impl Interner {
    pub fn new() -> Interner {
        Interner {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    fn shard(&self, index: usize) -> MutexGuard<'_, Shard> {
        // A panic while holding a shard leaves a consistent map (every update is a single
        // insert or remove), so a poisoned lock is still usable.
        self.shards[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The number of `name`, mentioned at `step`.
    pub fn intern(&self, name: &str, step: Step) -> IdNum {
        let index = (FnvBuild::default().hash_one(name) as usize) & (SHARDS - 1);
        let mut shard = self.shard(index);
        if let Some(slot) = shard.by_name.get_mut(name) {
            slot.last_seen = slot.last_seen.max(step);
            return slot.id;
        }
        let id = (shard.next << SHARD_BITS) | index as u64;
        shard.next += 1;
        let name: Arc<str> = Arc::from(name);
        shard.by_name.insert(
            name.clone(),
            Slot {
                id,
                last_seen: step,
            },
        );
        shard.by_id.insert(id, name);
        id
    }

    /// The string of a number still interned.
    pub fn name(&self, id: IdNum) -> Option<Arc<str>> {
        let shard = self.shard((id as usize) & (SHARDS - 1));
        shard.by_id.get(&id).cloned()
    }

    /// Forgets `id` unless a reader mentioned it after `handled` (the last step the
    /// consumer has finished). Returns whether it was forgotten (or already gone).
    pub fn forget(&self, id: IdNum, handled: Step) -> bool {
        let mut shard = self.shard((id as usize) & (SHARDS - 1));
        let Some(name) = shard.by_id.get(&id).cloned() else {
            return true;
        };
        if shard
            .by_name
            .get(&name)
            .is_some_and(|s| s.last_seen > handled)
        {
            return false;
        }
        shard.by_id.remove(&id);
        shard.by_name.remove(&name);
        true
    }

    /// Ids interned now.
    pub fn len(&self) -> usize {
        (0..SHARDS).map(|i| self.shard(i).by_id.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_get_equal_numbers_and_names_round_trip() {
        let interner = Interner::new();
        let a = interner.intern("cmpl-a", 0);
        let b = interner.intern("cmpl-b", 0);
        assert_ne!(a, b);
        assert_eq!(interner.intern("cmpl-a", 3), a);
        assert_eq!(interner.name(a).as_deref(), Some("cmpl-a"));
        assert_eq!(interner.len(), 2);
    }

    #[test]
    fn an_id_seen_ahead_of_the_consumer_is_not_forgotten() {
        let interner = Interner::new();
        let a = interner.intern("r", 2);
        interner.intern("r", 9);
        assert!(!interner.forget(a, 5), "a reader saw it at step 9");
        assert!(interner.forget(a, 9));
        assert_eq!(interner.name(a), None);
        assert_ne!(
            interner.intern("r", 10),
            a,
            "a fresh number after forgetting"
        );
    }
}
