//! The aggregator core against a reference written here from its module docs
//! (docs/contracts.md §4) with plain maps, sets and lists, under random event sequences:
//! several steps and ranks, duplicate and stray reports, dynamic `E`, failed loads,
//! invalid blocks, steps missing the output rank, announcements and retirements. Both
//! policies; every outcome and every observable piece of state is compared after every
//! event.
//!
//! Two mutants of the core, wrappers that reproduce plausible bugs, must be caught by the
//! same property, and shrunk to a one-step counterexample: a suite that cannot fail them
//! would prove nothing.
//!
//! Runs are pinned by a fixed seed; failures are saved to
//! `aggregator/proptest-regressions/proptest_core.txt` and replayed first on every run.

use std::collections::{BTreeMap, BTreeSet};

use kvcc_aggregator::{
    Aggregator, Direction, EntryMap, HashedAggregator, Policy, Rank, SortedAggregator, StepOutcome,
    Violation, ViolationKind, WorkerOutput,
};
use proptest::collection::{btree_set, vec};
use proptest::prelude::*;
use proptest::test_runner::{
    Config, FileFailurePersistence, RngSeed, TestCaseError, TestError, TestRunner,
};

type Id = u32;

/// Step outputs without rank 0 are dropped whole.
const OUTPUT_RANK: Rank = 0;
/// Small domains so ids collide, ranks repeat and countdowns complete.
const IDS: u32 = 4;
const RANKS: Rank = 4;
const E_MAX: u32 = 4;

#[derive(Clone, Debug)]
enum Event {
    Announce(Direction, Id),
    Retire(Direction, Id),
    /// One engine step's outputs, in the order the executor passes them (ranks may
    /// repeat or be absent).
    Step(Vec<WorkerOutput<Id>>),
}

#[derive(Clone, Debug)]
struct Case {
    policy: Policy,
    expected: u32,
    announced: BTreeSet<(Direction, Id)>,
    events: Vec<Event>,
}

fn direction() -> impl Strategy<Value = Direction> {
    prop_oneof![Just(Direction::Sending), Just(Direction::Recving)]
}

fn worker_output() -> impl Strategy<Value = WorkerOutput<Id>> {
    let ids = || btree_set(0..IDS, 0..3);
    // Mostly 0 (keep `E`), as in vLLM where only some connectors announce a count.
    let expected_finished_count = prop_oneof![4 => Just(0), 1 => 1..=E_MAX];
    (
        0..RANKS,
        ids(),
        ids(),
        btree_set(0..IDS, 0..2),
        btree_set(0..8u64, 0..3),
        expected_finished_count,
    )
        .prop_map(
            |(
                rank,
                finished_sending,
                finished_recving,
                failed_recving,
                invalid_block_ids,
                expected_finished_count,
            )| {
                WorkerOutput {
                    rank,
                    finished_sending,
                    finished_recving,
                    failed_recving,
                    invalid_block_ids,
                    expected_finished_count,
                }
            },
        )
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        5 => vec(worker_output(), 0..5).prop_map(Event::Step),
        2 => (direction(), 0..IDS).prop_map(|(direction, id)| Event::Announce(direction, id)),
        1 => (direction(), 0..IDS).prop_map(|(direction, id)| Event::Retire(direction, id)),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let policy = prop_oneof![Just(Policy::Countdown), Just(Policy::Strict)];
    (
        policy,
        1..=E_MAX,
        btree_set((direction(), 0..IDS), 0..=8),
        vec(event(), 0..16),
    )
        .prop_map(|(policy, expected, announced, events)| Case {
            policy,
            expected,
            announced,
            events,
        })
}

/// An open countdown as vLLM keeps it, plus who was counted: it emits once `counted`
/// holds `target` reports. `target` is the `E` when it opened.
#[derive(Clone, Debug)]
struct Open {
    target: u32,
    counted: Vec<Rank>,
}

/// The semantics, restated naively. `Countdown` is vLLM's `update_finished_set`:
/// anonymous reports, a missing entry starts at `E`. `Strict` refuses, in this order: an
/// id the scheduler does not expect, a report after emission (from the quorum: a resend;
/// from outside it: one reporter too many), a rank already counted in the open countdown.
#[derive(Clone, Debug)]
struct Reference {
    strict: bool,
    e: u32,
    open: BTreeMap<(Direction, Id), Open>,
    failed: BTreeSet<Id>,
    /// `Strict`: announced pairs, with the quorum that emitted them once emitted.
    /// Retiring forgets the pair but not an open countdown, as the core does.
    known: BTreeMap<(Direction, Id), Option<BTreeSet<Rank>>>,
}

impl Reference {
    fn new(policy: Policy, e: u32) -> Self {
        Reference {
            strict: policy == Policy::Strict,
            e,
            open: BTreeMap::new(),
            failed: BTreeSet::new(),
            known: BTreeMap::new(),
        }
    }

    fn announce(&mut self, direction: Direction, id: Id) {
        if self.strict {
            self.known.insert((direction, id), None);
        }
    }

    fn retire(&mut self, direction: Direction, id: Id) {
        self.known.remove(&(direction, id));
    }

    fn step(&mut self, outputs: &[WorkerOutput<Id>]) -> StepOutcome<Id> {
        let mut outcome = StepOutcome {
            dropped: !outputs.iter().any(|output| output.rank == OUTPUT_RANK),
            finished_sending: BTreeSet::new(),
            finished_recving: BTreeSet::new(),
            failed_recving: BTreeSet::new(),
            invalid_block_ids: BTreeSet::new(),
            violations: Vec::new(),
        };
        if outcome.dropped {
            return outcome;
        }
        for output in outputs {
            if output.expected_finished_count > 0 {
                self.e = output.expected_finished_count;
            }
            self.failed.extend(&output.failed_recving);
            for &id in &output.finished_sending {
                self.report(output.rank, Direction::Sending, id, &mut outcome);
            }
            for &id in &output.finished_recving {
                self.report(output.rank, Direction::Recving, id, &mut outcome);
            }
            outcome.invalid_block_ids.extend(&output.invalid_block_ids);
        }
        outcome.failed_recving = &self.failed & &outcome.finished_recving;
        self.failed = &self.failed - &outcome.failed_recving;
        outcome
    }

    fn report(&mut self, rank: Rank, direction: Direction, id: Id, outcome: &mut StepOutcome<Id>) {
        let key = (direction, id);
        if let Some(kind) = self.refusal(rank, key) {
            outcome.violations.push(Violation {
                kind,
                direction,
                id,
                rank,
            });
            return;
        }
        let e = self.e;
        let open = self.open.entry(key).or_insert(Open {
            target: e,
            counted: Vec::new(),
        });
        open.counted.push(rank);
        if open.counted.len() == open.target as usize {
            let quorum = open.counted.iter().copied().collect();
            self.open.remove(&key);
            if self.strict {
                self.known.insert(key, Some(quorum));
            }
            match direction {
                Direction::Sending => outcome.finished_sending.insert(id),
                Direction::Recving => outcome.finished_recving.insert(id),
            };
        }
    }

    fn refusal(&self, rank: Rank, key: (Direction, Id)) -> Option<ViolationKind> {
        if !self.strict {
            return None;
        }
        match self.known.get(&key) {
            None => Some(ViolationKind::Unannounced),
            Some(Some(quorum)) if quorum.contains(&rank) => {
                Some(ViolationKind::ReportAfterEmission)
            }
            Some(Some(_)) => Some(ViolationKind::ReportBeyondExpected),
            Some(None) => {
                let counted = self
                    .open
                    .get(&key)
                    .is_some_and(|open| open.counted.contains(&rank));
                counted.then_some(ViolationKind::DuplicateReport)
            }
        }
    }
}

/// What is under test: the core itself, or the core with a plausible bug wrapped around it.
#[derive(Clone, Copy, Debug)]
enum Core {
    Faithful,
    /// Emits a failed load the step it is reported instead of with its receive quorum,
    /// so the scheduler may reuse blocks a handle is still writing (#56104).
    FailedLoadsEmittedAtOnce,
    /// Counts a step that lacks the output rank, which vLLM drops whole.
    DroppedStepsCounted,
}

impl Core {
    fn aggregate<M: EntryMap<Id>>(
        self,
        core: &mut Aggregator<Id, M>,
        outputs: &[WorkerOutput<Id>],
    ) -> StepOutcome<Id> {
        match self {
            Core::Faithful => core.aggregate(outputs, OUTPUT_RANK),
            Core::FailedLoadsEmittedAtOnce => {
                let mut outcome = core.aggregate(outputs, OUTPUT_RANK);
                if !outcome.dropped {
                    for output in outputs {
                        outcome.failed_recving.extend(&output.failed_recving);
                    }
                }
                outcome
            }
            Core::DroppedStepsCounted => {
                let present = outputs.first().map_or(OUTPUT_RANK, |output| output.rank);
                core.aggregate(outputs, present)
            }
        }
    }
}

/// The core under test with its entries in the ordered map...
fn ordered(policy: Policy, expected: u32) -> Aggregator<Id> {
    Aggregator::new(policy, expected)
}

/// ...in the short sorted vector (the model's; cases with more ids than it holds inline
/// spill it to the heap)...
fn sorted(policy: Policy, expected: u32) -> SortedAggregator<Id> {
    SortedAggregator::sorted(policy, expected)
}

/// ...or in the hash map.
fn hashed(policy: Policy, expected: u32) -> HashedAggregator<Id> {
    HashedAggregator::hashed(policy, expected)
}

/// Runs the case through the core and the reference side by side, comparing outcomes
/// and every observable piece of state after each event.
fn agrees_with_reference<M: EntryMap<Id>>(
    case: &Case,
    under_test: Core,
    make: fn(Policy, u32) -> Aggregator<Id, M>,
) -> Result<(), TestCaseError> {
    let mut core = make(case.policy, case.expected);
    let mut reference = Reference::new(case.policy, case.expected);
    for &(direction, id) in &case.announced {
        core.announce(direction, id);
        reference.announce(direction, id);
    }
    for (index, event) in case.events.iter().enumerate() {
        match event {
            Event::Announce(direction, id) => {
                core.announce(*direction, *id);
                reference.announce(*direction, *id);
            }
            Event::Retire(direction, id) => {
                core.retire(*direction, id);
                reference.retire(*direction, *id);
            }
            Event::Step(outputs) => {
                let outcome = under_test.aggregate(&mut core, outputs);
                let expected = reference.step(outputs);
                prop_assert_eq!(
                    outcome.dropped,
                    expected.dropped,
                    "event {}: dropped",
                    index
                );
                prop_assert_eq!(
                    &outcome.finished_sending,
                    &expected.finished_sending,
                    "event {}: sending",
                    index
                );
                prop_assert_eq!(
                    &outcome.finished_recving,
                    &expected.finished_recving,
                    "event {}: recving",
                    index
                );
                prop_assert_eq!(
                    &outcome.failed_recving,
                    &expected.failed_recving,
                    "event {}: failed_recving",
                    index
                );
                prop_assert_eq!(
                    &outcome.invalid_block_ids,
                    &expected.invalid_block_ids,
                    "event {}: invalid",
                    index
                );
                prop_assert_eq!(
                    &outcome.violations,
                    &expected.violations,
                    "event {}: violations",
                    index
                );
            }
        }
        agrees_on_state(index, &core, &reference)?;
    }
    Ok(())
}

fn agrees_on_state<M: EntryMap<Id>>(
    index: usize,
    core: &Aggregator<Id, M>,
    reference: &Reference,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(core.expected(), reference.e, "event {}: E", index);
    prop_assert_eq!(
        core.pending_failed(),
        &reference.failed,
        "event {}: pending failures",
        index
    );
    for direction in [Direction::Sending, Direction::Recving] {
        // In id order: the hash map keeps its own.
        let open: Vec<Id> = core
            .open_ids(direction)
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let expected: Vec<Id> = reference
            .open
            .keys()
            .filter(|(d, _)| *d == direction)
            .map(|&(_, id)| id)
            .collect();
        prop_assert_eq!(
            &open,
            &expected,
            "event {}: open {} countdowns",
            index,
            direction
        );
        for (&(_, id), countdown) in reference.open.iter().filter(|((d, _), _)| *d == direction) {
            let remaining = countdown.target - countdown.counted.len() as u32;
            prop_assert_eq!(
                core.remaining(direction, &id),
                Some(remaining),
                "event {}: remaining {}",
                index,
                id
            );
        }
    }
    prop_assert_eq!(
        core.open_entries(),
        reference.open.len() + reference.failed.len(),
        "event {}: entries",
        index
    );
    Ok(())
}

fn config() -> Config {
    Config {
        cases: 10_000,
        rng_seed: RngSeed::Fixed(0x6b76_6363_00c0),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/proptest_core.txt",
        ))),
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn core_agrees_with_the_reference(case in case()) {
        agrees_with_reference(&case, Core::Faithful, ordered)?;
    }

    #[test]
    fn sorted_core_agrees_with_the_reference(case in case()) {
        agrees_with_reference(&case, Core::Faithful, sorted)?;
    }

    #[test]
    fn hashed_core_agrees_with_the_reference(case in case()) {
        agrees_with_reference(&case, Core::Faithful, hashed)?;
    }
}

/// Runs the same property against a mutant; asserts it is caught, for the expected
/// clause, and shrunk to a single step with a single output.
fn assert_mutant_caught<M: EntryMap<Id>>(
    mutant: Core,
    make: fn(Policy, u32) -> Aggregator<Id, M>,
    clause: &str,
) {
    let config = Config {
        // A mutant's counterexamples are expected, not regressions of the real core.
        failure_persistence: None,
        ..config()
    };
    let result =
        TestRunner::new(config).run(&case(), |case| agrees_with_reference(&case, mutant, make));
    let Err(TestError::Fail(reason, minimal)) = result else {
        panic!("the reference suite must catch {mutant:?}, got {result:?}");
    };
    assert!(
        reason.message().contains(clause),
        "caught {mutant:?} on another clause: {}",
        reason.message()
    );
    let steps: Vec<&Vec<WorkerOutput<Id>>> = minimal
        .events
        .iter()
        .filter_map(|event| match event {
            Event::Step(outputs) => Some(outputs),
            _ => None,
        })
        .collect();
    assert_eq!(
        minimal.events.len(),
        1,
        "shrinking must leave one event: {minimal:?}"
    );
    assert_eq!(steps.len(), 1, "the one event must be a step: {minimal:?}");
    assert_eq!(
        steps[0].len(),
        1,
        "the step must shrink to one output: {minimal:?}"
    );
}

#[test]
fn the_suite_catches_failed_loads_emitted_before_their_quorum() {
    assert_mutant_caught(Core::FailedLoadsEmittedAtOnce, ordered, "failed_recving");
    assert_mutant_caught(Core::FailedLoadsEmittedAtOnce, sorted, "failed_recving");
    assert_mutant_caught(Core::FailedLoadsEmittedAtOnce, hashed, "failed_recving");
}

#[test]
fn the_suite_catches_dropped_steps_being_counted() {
    assert_mutant_caught(Core::DroppedStepsCounted, ordered, "dropped");
    assert_mutant_caught(Core::DroppedStepsCounted, sorted, "dropped");
    assert_mutant_caught(Core::DroppedStepsCounted, hashed, "dropped");
}

/// Guards the generator: if a strategy change stopped producing some rule's situation,
/// the property above would pass without testing it. Samples the same seeded stream.
#[test]
fn the_generator_reaches_every_rule() {
    use proptest::strategy::ValueTree;

    let mut runner = TestRunner::new(config());
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for _ in 0..config().cases {
        let case = case().new_tree(&mut runner).expect("case").current();
        let mut reference = Reference::new(case.policy, case.expected);
        for &(direction, id) in &case.announced {
            reference.announce(direction, id);
        }
        let mut emitted: BTreeSet<(Direction, Id)> = BTreeSet::new();
        for event in &case.events {
            let outputs = match event {
                Event::Announce(direction, id) => {
                    reference.announce(*direction, *id);
                    continue;
                }
                Event::Retire(direction, id) => {
                    reference.retire(*direction, *id);
                    continue;
                }
                Event::Step(outputs) => outputs,
            };
            let e = reference.e;
            let outcome = reference.step(outputs);
            let policy = format!("{:?}", case.policy);
            if outcome.dropped {
                seen.insert("dropped step".into());
            }
            if reference.e != e {
                seen.insert("E changed".into());
            }
            if !outcome.failed_recving.is_empty() {
                seen.insert("failed load emitted".into());
            }
            if !outcome.invalid_block_ids.is_empty() {
                seen.insert("invalid blocks".into());
            }
            for violation in &outcome.violations {
                seen.insert(violation.kind.name().into());
            }
            for direction in [Direction::Sending, Direction::Recving] {
                for &id in outcome.finished(direction) {
                    seen.insert(format!("{policy} emission"));
                    if !emitted.insert((direction, id)) {
                        seen.insert(format!("{policy} second emission"));
                    }
                }
            }
        }
    }
    let rules = [
        "dropped step",
        "E changed",
        "failed load emitted",
        "invalid blocks",
        "duplicate-report",
        "report-after-emission",
        "report-beyond-expected",
        "unannounced-id",
        "Countdown emission",
        "Countdown second emission",
        "Strict emission",
        "Strict second emission",
    ];
    for rule in rules {
        assert!(seen.contains(rule), "the generator never produced: {rule}");
    }
}
