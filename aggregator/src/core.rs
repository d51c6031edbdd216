//! The deterministic aggregator core: vLLM's `KVOutputAggregator` semantics, sans-IO.
//!
//! Restated from docs/contracts.md §4 (vLLM `kv_connector/utils.py`):
//! - `E` is fixed at construction (`connector.get_finished_count()`, or `world_size` when
//!   that is None or 0) and shared by both directions;
//! - each direction keeps request id → remaining count; a report subtracts one (a missing
//!   entry starts at the current `E`), at zero the id is emitted and the entry deleted;
//! - an output carrying `expected_finished_count > 0` replaces `E` before its own reports
//!   are counted, and only entries created afterwards use the new value;
//! - `invalid_block_ids` is a plain union acted on the same step;
//! - `failed_recving` ids wait in a pending set until their receive quorum completes, and
//!   are emitted together with that `finished_recving`;
//! - a step without the output rank's output is dropped whole (workers do not resend).
//!
//! [`Policy::Countdown`] keeps vLLM's blind spots on purpose (no reporter identity), so
//! the model can show what they cost. [`Policy::Strict`] knows who reported and returns
//! every report it cannot account for as a typed [`Violation`] instead of counting it.
//! By default only `BTreeMap`/`BTreeSet` and canonical rank bitsets are used: the model
//! hashes this struct into its state and replays paths through it, which needs a
//! deterministic iteration order and one representation per logical content.
//! [`HashedAggregator`] is the same logic with its entries in a hash map, for callers that
//! only count (see the `entries` module).

pub use crate::entries::HashedEntries;
pub use crate::entries::{Entry, Rank};
use crate::entries::{EntryMap, Fate, OrderedEntryMap, RankSet, SortedEntries};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::hash::Hash;

/// Which completion set a report belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// `finished_sending`: a producer worker is done with a request's KV blocks.
    Sending,
    /// `finished_recving`: a consumer worker has finished loading a request's KV.
    Recving,
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Sending => "finished_sending",
            Direction::Recving => "finished_recving",
        })
    }
}

/// How reports are counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Policy {
    /// vLLM's counting: anonymous reports, a stray report after emission opens a fresh
    /// countdown and enough of them emit the id again.
    Countdown,
    /// Reporter identity is tracked; reports that do not fit the contract are returned
    /// as violations and not counted.
    Strict,
}

/// One worker's completion output for one engine step (vLLM's `KVConnectorOutput`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WorkerOutput<Id: Ord> {
    pub rank: Rank,
    pub finished_sending: BTreeSet<Id>,
    pub finished_recving: BTreeSet<Id>,
    pub failed_recving: BTreeSet<Id>,
    pub invalid_block_ids: BTreeSet<u64>,
    /// 0 keeps the current `E` (vLLM's convention); anything else replaces it.
    pub expected_finished_count: u32,
}

impl<Id: Ord> WorkerOutput<Id> {
    /// An output with nothing to report.
    pub fn empty(rank: Rank) -> Self {
        WorkerOutput {
            rank,
            finished_sending: BTreeSet::new(),
            finished_recving: BTreeSet::new(),
            failed_recving: BTreeSet::new(),
            invalid_block_ids: BTreeSet::new(),
            expected_finished_count: 0,
        }
    }

    pub fn finished(&self, direction: Direction) -> &BTreeSet<Id> {
        match direction {
            Direction::Sending => &self.finished_sending,
            Direction::Recving => &self.finished_recving,
        }
    }

    pub fn finished_mut(&mut self, direction: Direction) -> &mut BTreeSet<Id> {
        match direction {
            Direction::Sending => &mut self.finished_sending,
            Direction::Recving => &mut self.finished_recving,
        }
    }
}

/// What a `Strict` aggregator refused to count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ViolationKind {
    /// The rank already reported this id while its countdown is open.
    DuplicateReport,
    /// The id was already emitted and this rank was one of its quorum: a resend.
    ReportAfterEmission,
    /// The id was already emitted and this rank was not in its quorum: one reporter
    /// more than `E`, so `E` is too small for the set of workers that report.
    ReportBeyondExpected,
    /// The scheduler never announced (or already retired) this id in this direction.
    Unannounced,
}

impl ViolationKind {
    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::DuplicateReport => "duplicate-report",
            ViolationKind::ReportAfterEmission => "report-after-emission",
            ViolationKind::ReportBeyondExpected => "report-beyond-expected",
            ViolationKind::Unannounced => "unannounced-id",
        }
    }
}

/// A report the `Strict` policy refused to count.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Violation<Id> {
    pub kind: ViolationKind,
    pub direction: Direction,
    pub id: Id,
    pub rank: Rank,
}

/// What one `aggregate` call produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepOutcome<Id: Ord> {
    /// The output rank's output was missing: nothing was counted this step.
    pub dropped: bool,
    pub finished_sending: BTreeSet<Id>,
    pub finished_recving: BTreeSet<Id>,
    /// Ids emitted in `finished_recving` this step whose load failed on some worker.
    pub failed_recving: BTreeSet<Id>,
    pub invalid_block_ids: BTreeSet<u64>,
    pub violations: Vec<Violation<Id>>,
}

impl<Id: Ord> StepOutcome<Id> {
    fn empty(dropped: bool) -> Self {
        StepOutcome {
            dropped,
            finished_sending: BTreeSet::new(),
            finished_recving: BTreeSet::new(),
            failed_recving: BTreeSet::new(),
            invalid_block_ids: BTreeSet::new(),
            violations: Vec::new(),
        }
    }

    pub fn finished(&self, direction: Direction) -> &BTreeSet<Id> {
        match direction {
            Direction::Sending => &self.finished_sending,
            Direction::Recving => &self.finished_recving,
        }
    }

    fn finished_mut(&mut self, direction: Direction) -> &mut BTreeSet<Id> {
        match direction {
            Direction::Sending => &mut self.finished_sending,
            Direction::Recving => &mut self.finished_recving,
        }
    }
}

/// The aggregator for one engine. See the module docs for the semantics. Its entries
/// live in an ordered map unless `Map` says otherwise ([`HashedAggregator`]; the
/// `entries` module says when each serves).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Aggregator<Id: Ord, Map = BTreeMap<Id, Entry>> {
    pub(crate) policy: Policy,
    /// `E` for countdowns opened from now on.
    pub(crate) expected: u32,
    pub(crate) sending: Map,
    pub(crate) recving: Map,
    /// `failed_recving` ids waiting for their receive quorum.
    pub(crate) pending_failed: BTreeSet<Id>,
}

/// The `E` a step's new countdowns open with: the first `expected_finished_count` the
/// step's outputs announce (the output rank's is first), else the current one. vLLM
/// applies an announcement to the step that carries it.
pub fn step_expected(announced: impl IntoIterator<Item = u32>, current: u32) -> u32 {
    announced
        .into_iter()
        .find(|&count| count > 0)
        .unwrap_or(current)
}

/// How many reports a countdown takes before the next silently opens a fresh entry —
/// the overflow vLLM's countdown cannot see: what is `remaining` while it is open;
/// nothing for an id already `emitted` (any report reopens it); `expected` for an id
/// never seen. The model and conform both judge `count-conserved` by it.
pub fn countdown_room(remaining: Option<u32>, emitted: bool, expected: u32) -> u32 {
    match remaining {
        Some(remaining) => remaining,
        None if emitted => 0,
        None => expected,
    }
}

/// The aggregator with its entries in a hash map: for ids that arrive in no useful order
/// (vLLM's request ids), where it counts faster; it cannot be ordered, hashed or packed,
/// so the model keeps an ordered one ([`SortedAggregator`]).
pub type HashedAggregator<Id> = Aggregator<Id, HashedEntries<Id>>;

/// The aggregator with its entries in a short sorted vector: the model's, whose
/// scenarios hold a few ids ([`SortedEntries`]).
pub type SortedAggregator<Id> = Aggregator<Id, SortedEntries<Id>>;

impl<Id: Ord + Clone> Aggregator<Id> {
    /// An aggregator expecting `expected` reports per id (must be at least 1).
    pub fn new(policy: Policy, expected: u32) -> Self {
        Aggregator::build(policy, expected)
    }
}

impl<Id: Ord + Clone> SortedAggregator<Id> {
    /// [`Aggregator::new`], keeping entries in a short sorted vector.
    pub fn sorted(policy: Policy, expected: u32) -> Self {
        Aggregator::build(policy, expected)
    }
}

impl<Id: Ord + Clone, Map: OrderedEntryMap<Id>> Aggregator<Id, Map> {
    /// Two ids ordered by what this aggregator holds for them, as the derived order
    /// compares this aggregator with the one where `a` and `b` swap what they hold:
    /// sends, then receives, then pending failures, and in each an id holding something
    /// before one holding nothing (with as many entries on both sides, the map whose
    /// next entry comes at the lower id is the less). The model's request symmetry sorts
    /// interchangeable requests by it.
    pub fn cmp_held(&self, a: &Id, b: &Id) -> std::cmp::Ordering {
        fn held<T: Ord>(a: Option<T>, b: Option<T>) -> std::cmp::Ordering {
            match (a, b) {
                (Some(a), Some(b)) => a.cmp(&b),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            }
        }
        let pending = |id: &Id| self.pending_failed.contains(id).then_some(());
        held(self.sending.get(a), self.sending.get(b))
            .then_with(|| held(self.recving.get(a), self.recving.get(b)))
            .then_with(|| held(pending(a), pending(b)))
    }

    /// The same aggregator with every id renamed by `rename`, which must be one-to-one:
    /// nothing here depends on what an id is, only on which reports share one (the
    /// model's request symmetry renames requests).
    pub fn renamed(&self, rename: impl Fn(&Id) -> Id) -> Self {
        self.restricted(|id| Some(rename(id)))
    }

    /// The same aggregator with only the ids `keep` names, each renamed to the name it
    /// gives (one-to-one): what one request sees of it (the model's independence of
    /// requests projects a state onto each).
    pub fn restricted(&self, keep: impl Fn(&Id) -> Option<Id>) -> Self {
        let entries = |map: &Map| -> Map {
            map.iter()
                .filter_map(|(id, e)| Some((keep(id)?, e.clone())))
                .collect()
        };
        Aggregator {
            policy: self.policy,
            expected: self.expected,
            sending: entries(&self.sending),
            recving: entries(&self.recving),
            pending_failed: self.pending_failed.iter().filter_map(&keep).collect(),
        }
    }
}

impl<Id: Ord + Clone + Hash> HashedAggregator<Id> {
    /// [`Aggregator::new`], keeping entries in a hash map.
    pub fn hashed(policy: Policy, expected: u32) -> Self {
        Aggregator::build(policy, expected)
    }
}

/// vLLM's `E`: the connector's count (`get_finished_count()`), or `world_size` when it has
/// none (None or 0).
pub fn connector_expected(connector_count: Option<u32>, world_size: u32) -> u32 {
    match connector_count {
        Some(count) if count > 0 => count,
        _ => world_size,
    }
}

impl<Id: Ord + Clone, Map: EntryMap<Id>> Aggregator<Id, Map> {
    fn build(policy: Policy, expected: u32) -> Self {
        assert!(expected > 0, "E must be at least 1");
        Aggregator {
            policy,
            expected,
            sending: Map::default(),
            recving: Map::default(),
            pending_failed: BTreeSet::new(),
        }
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// `E` for countdowns opened from now on.
    pub fn expected(&self) -> u32 {
        self.expected
    }

    /// Reports still needed for an open countdown, if one is open.
    pub fn remaining(&self, direction: Direction, id: &Id) -> Option<u32> {
        match self.entries(direction).get(id) {
            Some(Entry::Open { remaining, .. }) => Some(*remaining),
            _ => None,
        }
    }

    /// Open countdowns in one direction.
    pub fn open_ids(&self, direction: Direction) -> impl Iterator<Item = &Id> {
        self.entries(direction)
            .iter()
            .filter(|(_, entry)| matches!(entry, Entry::Open { .. }))
            .map(|(id, _)| id)
    }

    /// Open countdowns plus pending failures: what "bounded aggregator state" watches.
    pub fn open_entries(&self) -> usize {
        self.open_ids(Direction::Sending).count()
            + self.open_ids(Direction::Recving).count()
            + self.pending_failed.len()
    }

    /// Failed loads waiting for their receive quorum.
    pub fn pending_failed(&self) -> &BTreeSet<Id> {
        &self.pending_failed
    }

    /// Nothing held for any id: no entry in either direction, no pending failure.
    pub fn is_empty(&self) -> bool {
        self.sending.is_empty() && self.recving.is_empty() && self.pending_failed.is_empty()
    }

    /// Anything held for `id`: an entry in either direction or a pending failure. Whoever
    /// numbers ids may drop `id`'s number only once this is false, or a later report of
    /// the same request would start afresh under a new number.
    pub fn holds(&self, id: &Id) -> bool {
        self.sending.get(id).is_some()
            || self.recving.get(id).is_some()
            || self.pending_failed.contains(id)
    }

    /// Does this aggregator keep what [`Aggregator::announce`] and
    /// [`Aggregator::retire`] tell it? Only `Strict` does; `Countdown` ignores both, like
    /// vLLM. A caller sharing the aggregator copy-on-write need not unshare it for them.
    pub fn keeps_announcements(&self) -> bool {
        self.policy == Policy::Strict
    }

    /// The scheduler expects reports for `id` in `direction` (a delay-free for sends, a
    /// remote load for receives). `Countdown` ignores this, like vLLM.
    pub fn announce(&mut self, direction: Direction, id: Id) {
        if !self.keeps_announcements() {
            return;
        }
        let entry = self
            .entries_mut(direction)
            .get_or_insert(id, Entry::Announced);
        match entry {
            Entry::Open { announced, .. } => *announced = true,
            // A new lifetime: the old quorum no longer refuses anything.
            Entry::Emitted { .. } => *entry = Entry::Announced,
            Entry::Announced => {}
        }
    }

    /// The scheduler has forgotten `id`: later reports for it are `Unannounced`. An open
    /// countdown stays open (and keeps what it counted) in case `id` is announced again.
    pub fn retire(&mut self, direction: Direction, id: &Id) {
        if !self.keeps_announcements() {
            return;
        }
        let entries = self.entries_mut(direction);
        match entries.get_mut(id) {
            Some(Entry::Open { announced, .. }) => *announced = false,
            Some(Entry::Announced | Entry::Emitted { .. }) => {
                entries.remove(id);
            }
            None => {}
        }
    }

    /// Count one engine step's worker outputs, in the order given. A step without an
    /// output from `output_rank` is dropped whole, as vLLM's executor does.
    pub fn aggregate(
        &mut self,
        outputs: &[WorkerOutput<Id>],
        output_rank: Rank,
    ) -> StepOutcome<Id> {
        if !outputs.iter().any(|o| o.rank == output_rank) {
            return StepOutcome::empty(true);
        }
        let mut outcome = StepOutcome::empty(false);
        for output in outputs {
            if output.expected_finished_count > 0 {
                self.expected = output.expected_finished_count;
            }
            for id in &output.failed_recving {
                self.pending_failed.insert(id.clone());
            }
            for direction in [Direction::Sending, Direction::Recving] {
                for id in output.finished(direction) {
                    self.report(output.rank, direction, id, &mut outcome);
                }
            }
            outcome
                .invalid_block_ids
                .extend(output.invalid_block_ids.iter().copied());
        }
        // A failure is emitted only with its receive completion; until then it waits.
        let emitted_failures: BTreeSet<Id> = self
            .pending_failed
            .intersection(&outcome.finished_recving)
            .cloned()
            .collect();
        for id in &emitted_failures {
            self.pending_failed.remove(id);
        }
        outcome.failed_recving = emitted_failures;
        outcome
    }

    fn entries(&self, direction: Direction) -> &Map {
        match direction {
            Direction::Sending => &self.sending,
            Direction::Recving => &self.recving,
        }
    }

    fn entries_mut(&mut self, direction: Direction) -> &mut Map {
        match direction {
            Direction::Sending => &mut self.sending,
            Direction::Recving => &mut self.recving,
        }
    }

    /// Counts one report, or records why `Strict` refuses it. The id is looked up by
    /// reference (once, where the map can: [`EntryMap::settle`]) and cloned only when a
    /// countdown opens or an id is emitted: a `String` id cloned per report cost an
    /// allocation per report.
    fn report(&mut self, rank: Rank, direction: Direction, id: &Id, outcome: &mut StepOutcome<Id>) {
        let strict = self.policy == Policy::Strict;
        let expected = self.expected;
        let mut emitted = false;
        let removed = self.entries_mut(direction).settle(id, |entry| {
            let mut refused = |kind| {
                outcome.violations.push(Violation {
                    kind,
                    direction,
                    id: id.clone(),
                    rank,
                });
                Fate::Keep
            };
            let Some(entry) = entry else {
                if strict {
                    return refused(ViolationKind::Unannounced);
                }
                // `Countdown` opens a countdown at the current `E` on any first report,
                // which counts at once.
                if expected == 1 {
                    emitted = true;
                    return Fate::Keep;
                }
                return Fate::Put(Entry::Open {
                    remaining: expected - 1,
                    reporters: RankSet::default(),
                    announced: false,
                });
            };
            let quorum = match entry {
                Entry::Announced if expected > 1 => {
                    *entry = Entry::Open {
                        remaining: expected - 1,
                        reporters: RankSet::of(rank),
                        announced: true,
                    };
                    return Fate::Keep;
                }
                Entry::Announced => RankSet::of(rank),
                Entry::Open { announced, .. } if strict && !*announced => {
                    return refused(ViolationKind::Unannounced)
                }
                // `Countdown` keeps no reporters: nothing to look up.
                Entry::Open { reporters, .. } if strict && reporters.contains(rank) => {
                    return refused(ViolationKind::DuplicateReport)
                }
                Entry::Open {
                    remaining,
                    reporters,
                    ..
                } => {
                    *remaining -= 1;
                    if strict {
                        reporters.insert(rank);
                    }
                    if *remaining > 0 {
                        return Fate::Keep;
                    }
                    std::mem::take(reporters)
                }
                Entry::Emitted { quorum } if quorum.contains(rank) => {
                    return refused(ViolationKind::ReportAfterEmission)
                }
                Entry::Emitted { .. } => return refused(ViolationKind::ReportBeyondExpected),
            };
            // The countdown reached zero: emit. `Strict` remembers who emitted, to
            // classify later reports; `Countdown` forgets the id, as vLLM does.
            emitted = true;
            if strict {
                *entry = Entry::Emitted { quorum };
                Fate::Keep
            } else {
                Fate::Remove
            }
        });
        if emitted {
            // A removed entry's own copy of the id leaves with it: no clone.
            let id = removed.unwrap_or_else(|| id.clone());
            outcome.finished_mut(direction).insert(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The overflow rule the model and conform share, against the core itself: exactly
    /// `countdown_room` reports fit, one more reopens the countdown.
    #[test]
    fn countdown_room_is_what_the_countdown_takes_before_reopening() {
        for (before, emitted_first) in [(0u32, false), (1, false), (2, true)] {
            let mut core: Aggregator<u32> = Aggregator::new(Policy::Countdown, 3);
            for rank in 0..before {
                core.aggregate(&[sends(rank as Rank, &[7])], rank as Rank);
            }
            if emitted_first {
                core.aggregate(&[sends(2, &[7])], 2);
            }
            let remaining = core.remaining(Direction::Sending, &7);
            let room = countdown_room(remaining, emitted_first, 3);
            assert_eq!(room, if emitted_first { 0 } else { 3 - before });
            // Filling the room opens nothing new; the next report would.
            for rank in 0..room {
                core.aggregate(&[sends(rank as Rank, &[7])], rank as Rank);
            }
            assert_eq!(core.remaining(Direction::Sending, &7), None);
            // The twin: one report past the room opens a fresh countdown.
            core.aggregate(&[sends(0, &[7])], 0);
            assert_eq!(core.remaining(Direction::Sending, &7), Some(2));
        }
        assert_eq!(step_expected([0, 4, 2], 8), 4);
        assert_eq!(step_expected([0, 0], 8), 8);
    }

    fn sends(rank: Rank, ids: &[u32]) -> WorkerOutput<u32> {
        let mut output = WorkerOutput::empty(rank);
        output.finished_sending = ids.iter().copied().collect();
        output
    }

    fn recvs(rank: Rank, ids: &[u32], failed: &[u32]) -> WorkerOutput<u32> {
        let mut output = WorkerOutput::empty(rank);
        output.finished_recving = ids.iter().copied().collect();
        output.failed_recving = failed.iter().copied().collect();
        output
    }

    #[test]
    fn connector_count_of_none_or_zero_falls_back_to_world_size() {
        assert_eq!(connector_expected(None, 8), 8);
        assert_eq!(connector_expected(Some(0), 8), 8);
        assert_eq!(connector_expected(Some(2), 8), 2);
    }

    #[test]
    fn emits_once_e_reports_arrive_across_steps() {
        let mut agg = Aggregator::new(Policy::Countdown, 3);
        let first = agg.aggregate(&[sends(0, &[7]), sends(1, &[7])], 0);
        assert!(first.finished_sending.is_empty());
        assert_eq!(agg.remaining(Direction::Sending, &7), Some(1));
        let second = agg.aggregate(&[sends(0, &[]), sends(2, &[7])], 0);
        assert_eq!(second.finished_sending, BTreeSet::from([7]));
        assert_eq!(agg.open_entries(), 0);
    }

    /// Acceptance of the foundation issue: E+1 reports across two steps. With E = 1 the
    /// stray report opens a fresh countdown at E-1 = 0 and emits the id a second time.
    #[test]
    fn countdown_emits_twice_on_e_plus_one_reports_and_strict_refuses() {
        let mut countdown = Aggregator::new(Policy::Countdown, 1);
        let first = countdown.aggregate(&[sends(0, &[5])], 0);
        let second = countdown.aggregate(&[sends(0, &[]), sends(1, &[5])], 0);
        assert_eq!(first.finished_sending, BTreeSet::from([5]));
        assert_eq!(
            second.finished_sending,
            BTreeSet::from([5]),
            "vLLM's blind spot: emitted twice"
        );

        let mut strict = Aggregator::new(Policy::Strict, 1);
        strict.announce(Direction::Sending, 5);
        let first = strict.aggregate(&[sends(0, &[5])], 0);
        let second = strict.aggregate(&[sends(0, &[]), sends(1, &[5])], 0);
        assert_eq!(first.finished_sending, BTreeSet::from([5]));
        assert!(second.finished_sending.is_empty());
        assert_eq!(
            second.violations,
            vec![Violation {
                kind: ViolationKind::ReportBeyondExpected,
                direction: Direction::Sending,
                id: 5,
                rank: 1
            }]
        );
    }

    /// With E = 3, E+1 reports leave a countdown open forever (it never drains), and
    /// 2E reports emit twice.
    #[test]
    fn countdown_stray_reports_reopen_an_entry() {
        let mut agg = Aggregator::new(Policy::Countdown, 3);
        let all = [sends(0, &[9]), sends(1, &[9]), sends(2, &[9])];
        assert_eq!(agg.aggregate(&all, 0).finished_sending, BTreeSet::from([9]));
        agg.aggregate(&[sends(0, &[9])], 0);
        assert_eq!(
            agg.remaining(Direction::Sending, &9),
            Some(2),
            "stray report reopened at E-1"
        );
        let again = agg.aggregate(&[sends(1, &[9]), sends(2, &[9])], 1);
        assert_eq!(
            again.finished_sending,
            BTreeSet::from([9]),
            "emitted a second time"
        );
    }

    #[test]
    fn strict_classifies_every_refusal() {
        let mut agg = Aggregator::new(Policy::Strict, 2);
        agg.announce(Direction::Sending, 1);
        let step = agg.aggregate(&[sends(0, &[1, 2]), sends(0, &[1])], 0);
        let kinds: Vec<_> = step.violations.iter().map(|v| (v.kind, v.id)).collect();
        assert_eq!(
            kinds,
            vec![
                (ViolationKind::Unannounced, 2),
                (ViolationKind::DuplicateReport, 1)
            ]
        );
        let step = agg.aggregate(&[sends(1, &[1])], 1);
        assert_eq!(step.finished_sending, BTreeSet::from([1]));
        let step = agg.aggregate(&[sends(1, &[1]), sends(2, &[1])], 1);
        let kinds: Vec<_> = step.violations.iter().map(|v| v.kind).collect();
        assert_eq!(
            kinds,
            vec![
                ViolationKind::ReportAfterEmission,
                ViolationKind::ReportBeyondExpected
            ]
        );
        agg.retire(Direction::Sending, &1);
        let step = agg.aggregate(&[sends(1, &[1])], 1);
        assert_eq!(step.violations[0].kind, ViolationKind::Unannounced);
    }

    #[test]
    fn dynamic_count_applies_to_entries_opened_afterwards() {
        let mut agg = Aggregator::new(Policy::Countdown, 4);
        agg.aggregate(&[sends(0, &[1])], 0);
        let mut announcing = sends(1, &[2]);
        announcing.expected_finished_count = 2;
        agg.aggregate(&[announcing], 1);
        assert_eq!(
            agg.remaining(Direction::Sending, &1),
            Some(3),
            "old entry keeps old E"
        );
        assert_eq!(
            agg.remaining(Direction::Sending, &2),
            Some(1),
            "new entry uses new E"
        );
        assert_eq!(agg.expected(), 2);
    }

    #[test]
    fn failed_load_is_held_until_its_receive_quorum() {
        let mut agg = Aggregator::new(Policy::Countdown, 2);
        let step = agg.aggregate(&[recvs(0, &[3], &[3])], 0);
        assert!(step.failed_recving.is_empty());
        assert_eq!(agg.pending_failed(), &BTreeSet::from([3]));
        let step = agg.aggregate(&[recvs(1, &[3], &[])], 1);
        assert_eq!(step.finished_recving, BTreeSet::from([3]));
        assert_eq!(step.failed_recving, BTreeSet::from([3]));
        assert_eq!(agg.open_entries(), 0);
    }

    #[test]
    fn missing_output_rank_drops_the_whole_step() {
        let mut agg = Aggregator::new(Policy::Countdown, 1);
        let step = agg.aggregate(&[sends(1, &[4])], 0);
        assert!(step.dropped);
        assert!(step.finished_sending.is_empty());
        assert_eq!(agg.open_entries(), 0, "nothing was counted");
    }

    #[test]
    fn invalid_blocks_are_a_union_acted_on_the_same_step() {
        let mut agg = Aggregator::<u32>::new(Policy::Countdown, 2);
        let mut a = WorkerOutput::empty(0);
        a.invalid_block_ids = BTreeSet::from([1, 2]);
        let mut b = WorkerOutput::empty(1);
        b.invalid_block_ids = BTreeSet::from([2, 3]);
        assert_eq!(
            agg.aggregate(&[a, b], 0).invalid_block_ids,
            BTreeSet::from([1, 2, 3])
        );
    }

    /// Ranks beyond one bitset word (world sizes over 64) are told apart like any other,
    /// and the same quorum reached in a different order is the same state.
    #[test]
    fn strict_tells_ranks_beyond_64_apart_and_states_are_canonical() {
        let announced = || {
            let mut agg = Aggregator::new(Policy::Strict, 3);
            agg.announce(Direction::Sending, 1);
            agg
        };
        let mut agg = announced();
        let step = agg.aggregate(&[sends(0, &[1]), sends(64, &[1]), sends(64, &[1])], 0);
        let kinds: Vec<_> = step.violations.iter().map(|v| (v.kind, v.rank)).collect();
        assert_eq!(kinds, vec![(ViolationKind::DuplicateReport, 64)]);
        let step = agg.aggregate(&[sends(0, &[]), sends(65_535, &[1])], 0);
        assert_eq!(step.finished_sending, BTreeSet::from([1]));
        let step = agg.aggregate(&[sends(0, &[]), sends(65_535, &[1]), sends(63, &[1])], 0);
        let kinds: Vec<_> = step.violations.iter().map(|v| (v.kind, v.rank)).collect();
        assert_eq!(
            kinds,
            vec![
                (ViolationKind::ReportAfterEmission, 65_535),
                (ViolationKind::ReportBeyondExpected, 63)
            ]
        );

        let mut reordered = announced();
        reordered.aggregate(&[sends(65_535, &[1]), sends(0, &[1]), sends(64, &[1])], 0);
        let mut forward = announced();
        forward.aggregate(&[sends(0, &[1]), sends(64, &[1]), sends(65_535, &[1])], 0);
        assert_eq!(reordered, forward, "equal quorums, equal states");
        assert_eq!(
            reordered.cmp(&forward),
            std::cmp::Ordering::Equal,
            "and equal in the order the model sorts by"
        );
    }
}
