//! What the core holds for one (direction, id), and the map it keeps those entries in.
//!
//! The core's logic is one; where it keeps its entries is a choice. The model hashes,
//! orders and packs aggregators into its states and replays paths through them, so it
//! needs one representation per content and a fixed iteration order: an ordered map
//! ([`OrderedEntryMap`]). The ordered map is the default; a short sorted vector
//! ([`SortedEntries`]) is the same ordered map for the few ids a model scenario holds,
//! with nothing to allocate. A hash map serves ids that arrive in no useful order, such
//! as vLLM's random request ids: an ordered search over random keys mispredicts a branch
//! at every level, and opening or closing a countdown shifts a node, where a hash map
//! probes once ([`crate::HashedAggregator`]).

use foldhash::fast::FixedState;
use hashbrown::hash_table::{self, HashTable};
use smallvec::SmallVec;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{BuildHasher, Hash};

/// A worker's global rank in its engine (`0..world_size`).
pub type Rank = u16;

/// A set of ranks as a bitset: one word covers the world sizes kvcc models (≤ 64)
/// without allocating, larger ranks spill to the heap. Canonical, so derived `Eq`, `Ord`,
/// `Hash` and the packed bytes see logical contents: words are only ever set, and only up to the
/// word holding the highest rank inserted, so the last word is never zero.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RankSet {
    pub(crate) words: SmallVec<[u64; 1]>,
}

impl RankSet {
    pub(crate) fn of(rank: Rank) -> Self {
        let mut set = RankSet::default();
        set.insert(rank);
        set
    }

    pub fn contains(&self, rank: Rank) -> bool {
        let (word, bit) = (usize::from(rank) / 64, rank % 64);
        self.words.get(word).is_some_and(|w| w & (1u64 << bit) != 0)
    }

    pub(crate) fn insert(&mut self, rank: Rank) {
        let (word, bit) = (usize::from(rank) / 64, rank % 64);
        if word >= self.words.len() {
            self.words.resize(word + 1, 0);
        }
        self.words[word] |= 1u64 << bit;
    }
}

/// Everything known about one (direction, id), so a report costs one map lookup. Absent
/// means: no countdown open and, under `Strict`, not announced.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Entry {
    /// `Strict` only: announced by the scheduler, no report counted yet.
    Announced,
    /// A countdown is open.
    Open {
        /// Reports still needed before emission; never 0 (emission closes it).
        remaining: u32,
        /// Ranks counted so far; always empty under `Countdown`, which has no identity.
        reporters: RankSet,
        /// `Strict`: still announced (false once retired while open, when later reports
        /// are refused as unannounced). Always false under `Countdown`.
        announced: bool,
    },
    /// `Strict` only: emitted to the scheduler by this quorum, announced until retired.
    Emitted { quorum: RankSet },
}

/// Where the core keeps its entries for one direction.
pub trait EntryMap<Id>: Default {
    fn get(&self, id: &Id) -> Option<&Entry>;
    fn get_mut(&mut self, id: &Id) -> Option<&mut Entry>;
    /// The entry of `id`, made from `new` when there is none.
    fn get_or_insert(&mut self, id: Id, new: Entry) -> &mut Entry;
    fn insert(&mut self, id: Id, entry: Entry);
    /// Removes `id`'s entry, returning the map's own copy of the id.
    fn remove(&mut self, id: &Id) -> Option<Id>;
    /// Counts one report against `id`'s entry: `count` sees the entry (None when there is
    /// none) and says what becomes of it. Returns the map's own copy of the id when the
    /// entry was removed. Maps that can reuse one look-up for the change do.
    fn settle(&mut self, id: &Id, count: impl FnOnce(Option<&mut Entry>) -> Fate) -> Option<Id>
    where
        Id: Clone,
    {
        match count(self.get_mut(id)) {
            Fate::Keep => None,
            Fate::Remove => self.remove(id),
            Fate::Put(entry) => {
                self.insert(id.clone(), entry);
                None
            }
        }
    }
    fn is_empty(&self) -> bool;
    fn len(&self) -> usize;
    /// Every entry, in the map's own order: by id for the ordered map; for the hash map,
    /// an order its fixed-seed hasher makes the same in every run of the same reports.
    fn iter<'a>(&'a self) -> impl Iterator<Item = (&'a Id, &'a Entry)>
    where
        Id: 'a;
}

impl<Id: Ord> EntryMap<Id> for BTreeMap<Id, Entry> {
    fn get(&self, id: &Id) -> Option<&Entry> {
        BTreeMap::get(self, id)
    }

    fn get_mut(&mut self, id: &Id) -> Option<&mut Entry> {
        BTreeMap::get_mut(self, id)
    }

    fn get_or_insert(&mut self, id: Id, new: Entry) -> &mut Entry {
        self.entry(id).or_insert(new)
    }

    fn insert(&mut self, id: Id, entry: Entry) {
        BTreeMap::insert(self, id, entry);
    }

    fn remove(&mut self, id: &Id) -> Option<Id> {
        BTreeMap::remove_entry(self, id).map(|(id, _)| id)
    }

    fn is_empty(&self) -> bool {
        BTreeMap::is_empty(self)
    }

    fn len(&self) -> usize {
        BTreeMap::len(self)
    }

    fn iter<'a>(&'a self) -> impl Iterator<Item = (&'a Id, &'a Entry)>
    where
        Id: 'a,
    {
        BTreeMap::iter(self)
    }
}

/// An [`EntryMap`] whose `iter` runs in id order, and that can be built from entries in
/// any order: one whose contents have one order, hash and encoding.
pub trait OrderedEntryMap<Id>: EntryMap<Id> + FromIterator<(Id, Entry)> {}

impl<Id: Ord> OrderedEntryMap<Id> for BTreeMap<Id, Entry> {}

/// Entries in a short vector sorted by id, kept inline up to four: the model's
/// aggregators hold an entry for each of a scenario's few requests, and every state it
/// explores holds two aggregators, built, cloned and dropped at every step. Ordered,
/// compared and packed as the ordered map is (both compare their entries in id order),
/// so a state's representative and bytes do not depend on which of the two it holds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SortedEntries<Id>(SmallVec<[(Id, Entry); 4]>);

impl<Id> Default for SortedEntries<Id> {
    fn default() -> Self {
        SortedEntries(SmallVec::new())
    }
}

impl<Id: Ord> SortedEntries<Id> {
    fn find(&self, id: &Id) -> Result<usize, usize> {
        self.0.binary_search_by(|(key, _)| key.cmp(id))
    }
}

impl<Id: Ord> EntryMap<Id> for SortedEntries<Id> {
    fn get(&self, id: &Id) -> Option<&Entry> {
        self.find(id).ok().map(|at| &self.0[at].1)
    }

    fn get_mut(&mut self, id: &Id) -> Option<&mut Entry> {
        self.find(id).ok().map(|at| &mut self.0[at].1)
    }

    fn get_or_insert(&mut self, id: Id, new: Entry) -> &mut Entry {
        let at = match self.find(&id) {
            Ok(at) => at,
            Err(at) => {
                self.0.insert(at, (id, new));
                at
            }
        };
        &mut self.0[at].1
    }

    fn insert(&mut self, id: Id, entry: Entry) {
        match self.find(&id) {
            Ok(at) => self.0[at].1 = entry,
            Err(at) => self.0.insert(at, (id, entry)),
        }
    }

    fn remove(&mut self, id: &Id) -> Option<Id> {
        self.find(id).ok().map(|at| self.0.remove(at).0)
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn iter<'a>(&'a self) -> impl Iterator<Item = (&'a Id, &'a Entry)>
    where
        Id: 'a,
    {
        self.0.iter().map(|(id, entry)| (id, entry))
    }
}

/// Later entries of an id replace earlier ones, as collecting into the ordered map does.
impl<Id: Ord> FromIterator<(Id, Entry)> for SortedEntries<Id> {
    fn from_iter<I: IntoIterator<Item = (Id, Entry)>>(entries: I) -> Self {
        let mut map = SortedEntries::default();
        for (id, entry) in entries {
            map.insert(id, entry);
        }
        map
    }
}

impl<Id: Ord> OrderedEntryMap<Id> for SortedEntries<Id> {}

/// What a report leaves of an id's entry ([`EntryMap::settle`]).
pub enum Fate {
    /// The entry stays as the report left it (or stays absent).
    Keep,
    /// The entry goes: the countdown emitted and nothing is remembered of the id.
    Remove,
    /// The entry becomes this one (a countdown opens on a first report).
    Put(Entry),
}

/// Entries in a hash table keyed by the id's hash under foldhash's fixed default seed, so
/// runs repeat. A report finds its entry in one probe, and the removal that closes a
/// countdown reuses it ([`EntryMap::settle`]); the insertion that opens one probes only
/// for room, comparing no ids. Looking the id up again to insert or remove it cost a
/// second probe for one report in four of the aggregator benchmark's (8 ranks;
/// `bench/src/aggregator.rs`).
#[derive(Clone)]
pub struct HashedEntries<Id>(HashTable<(Id, Entry)>);

impl<Id> Default for HashedEntries<Id> {
    fn default() -> Self {
        HashedEntries(HashTable::new())
    }
}

impl<Id: fmt::Debug> fmt::Debug for HashedEntries<Id> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(id, entry)| (id, entry)))
            .finish()
    }
}

fn hash_of<Id: Hash>(id: &Id) -> u64 {
    FixedState::default().hash_one(id)
}

impl<Id: Eq + Hash> EntryMap<Id> for HashedEntries<Id> {
    fn get(&self, id: &Id) -> Option<&Entry> {
        let found = self.0.find(hash_of(id), |(key, _)| key == id);
        found.map(|(_, entry)| entry)
    }

    fn get_mut(&mut self, id: &Id) -> Option<&mut Entry> {
        let found = self.0.find_mut(hash_of(id), |(key, _)| key == id);
        found.map(|(_, entry)| entry)
    }

    fn get_or_insert(&mut self, id: Id, new: Entry) -> &mut Entry {
        let hash = hash_of(&id);
        let slot = self
            .0
            .entry(hash, |(key, _)| *key == id, |(key, _)| hash_of(key));
        match slot {
            hash_table::Entry::Occupied(found) => &mut found.into_mut().1,
            hash_table::Entry::Vacant(room) => &mut room.insert((id, new)).into_mut().1,
        }
    }

    fn insert(&mut self, id: Id, entry: Entry) {
        *self.get_or_insert(id, Entry::Announced) = entry;
    }

    fn remove(&mut self, id: &Id) -> Option<Id> {
        let found = self.0.find_entry(hash_of(id), |(key, _)| key == id);
        found.ok().map(|found| found.remove().0 .0)
    }

    fn settle(&mut self, id: &Id, count: impl FnOnce(Option<&mut Entry>) -> Fate) -> Option<Id>
    where
        Id: Clone,
    {
        // Most reports find an open countdown: a plain find serves them, and its entry
        // removes an emitted one without a second probe. A miss then inserts where the
        // table has room, comparing no ids.
        let hash = hash_of(id);
        match self.0.find_entry(hash, |(key, _)| key == id) {
            Ok(mut found) => match count(Some(&mut found.get_mut().1)) {
                Fate::Keep => None,
                Fate::Remove => Some(found.remove().0 .0),
                Fate::Put(entry) => {
                    found.get_mut().1 = entry;
                    None
                }
            },
            Err(absent) => {
                if let Fate::Put(entry) = count(None) {
                    let table = absent.into_table();
                    table.insert_unique(hash, (id.clone(), entry), |(key, _)| hash_of(key));
                }
                None
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn iter<'a>(&'a self) -> impl Iterator<Item = (&'a Id, &'a Entry)>
    where
        Id: 'a,
    {
        self.0.iter().map(|(id, entry)| (id, entry))
    }
}
