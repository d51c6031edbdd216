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
use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A request id as the aggregator sees it.
pub type IdNum = u64;

const SHARD_BITS: u32 = 5;
const SHARDS: usize = 1 << SHARD_BITS;

/// Request-id tables hash with foldhash, word at a time with a fixed seed: a byte-at-a-time
/// hash was most of interning's cost, and a fixed seed keeps shard choice the same run to run.
pub type WordHashBuild = foldhash::fast::FixedState;

struct Slot {
    id: IdNum,
    /// The latest step a reader or the scheduler log mentioned this string at. Atomic so
    /// that mentions of known strings, nearly all of them, need only a shared lock.
    last_seen: AtomicU64,
}

impl Slot {
    /// Records a mention at `step` and returns the id. Most mentions are not the latest
    /// (eight ranks report an id over a few steps), and those only read: a write would
    /// take the cache line, shared with the key every reader compares, from the others.
    /// A forget racing with this takes the write lock, so it sees the new step.
    fn seen_at(&self, step: Step) -> IdNum {
        if self.last_seen.load(Ordering::Relaxed) < step {
            self.last_seen.fetch_max(step, Ordering::Relaxed);
        }
        self.id
    }
}

#[derive(Default)]
struct Shard {
    by_name: HashMap<Arc<str>, Slot, WordHashBuild>,
    by_id: HashMap<IdNum, Arc<str>, WordHashBuild>,
    next: u64,
}

/// Sharded by the string's hash. Every rank's reader meets the same id at about the same
/// time, so a shard is read-locked: readers of a known string never wait for each other.
pub struct Interner {
    shards: Vec<RwLock<Shard>>,
}

impl Default for Interner {
    fn default() -> Self {
        Interner::new()
    }
}

impl Interner {
    pub fn new() -> Interner {
        Interner {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
        }
    }

    // A panic while holding a shard leaves a consistent map (every update is a single
    // insert or remove), so a poisoned lock is still usable.
    fn read(&self, index: usize) -> RwLockReadGuard<'_, Shard> {
        self.shards[index]
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self, index: usize) -> RwLockWriteGuard<'_, Shard> {
        self.shards[index]
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The number of `name`, mentioned at `step`.
    pub fn intern(&self, name: &str, step: Step) -> IdNum {
        let index = (WordHashBuild::default().hash_one(name) as usize) & (SHARDS - 1);
        if let Some(slot) = self.read(index).by_name.get(name) {
            return slot.seen_at(step);
        }
        let mut shard = self.write(index);
        if let Some(slot) = shard.by_name.get(name) {
            // Interned by another reader between the two locks.
            return slot.seen_at(step);
        }
        let id = (shard.next << SHARD_BITS) | index as u64;
        shard.next += 1;
        let name: Arc<str> = Arc::from(name);
        shard.by_name.insert(
            name.clone(),
            Slot {
                id,
                last_seen: AtomicU64::new(step),
            },
        );
        shard.by_id.insert(id, name);
        id
    }

    /// The numbers of one output's list of ids, mentioned at `step`; the first name listed
    /// twice is an error (a set of request ids holds each once). Readers intern every
    /// list through this.
    pub fn intern_all<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
        step: Step,
    ) -> Result<BTreeSet<IdNum>, &'a str> {
        let mut set = BTreeSet::new();
        for name in names {
            if !set.insert(self.intern(name, step)) {
                return Err(name);
            }
        }
        Ok(set)
    }

    /// The string of a number still interned.
    pub fn name(&self, id: IdNum) -> Option<Arc<str>> {
        let shard = self.read((id as usize) & (SHARDS - 1));
        shard.by_id.get(&id).cloned()
    }

    /// Forgets `id` unless a reader mentioned it after `handled` (the last step the
    /// consumer has finished). Returns whether it was forgotten (or already gone).
    pub fn forget(&self, id: IdNum, handled: Step) -> bool {
        let mut shard = self.write((id as usize) & (SHARDS - 1));
        let Some(name) = shard.by_id.get(&id).cloned() else {
            return true;
        };
        if shard
            .by_name
            .get(&name)
            .is_some_and(|s| s.last_seen.load(Ordering::Relaxed) > handled)
        {
            return false;
        }
        shard.by_id.remove(&id);
        shard.by_name.remove(&name);
        true
    }

    /// Ids interned now.
    pub fn len(&self) -> usize {
        (0..SHARDS).map(|i| self.read(i).by_id.len()).sum()
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
