//! Issue 23: a *holds* is worth what the fingerprints behind it are. The search names a
//! state by a 64-bit hash of its packed bytes; two states with one name hide the second
//! and all behind it. Here the hash is measured on real encodings, and the search's
//! counts are cross-checked against `--exact` (states compared in full) and stateright's
//! own BFS, on the shipped specs and on random valid specs, with answers compared across
//! 1, 2 and 4 threads. The broken twin is the hasher kvcc used before, rebuilt from its
//! description: every test here must catch it.

use crate::common::{fixture, root};
use kvcc::spec::Spec;
use kvcc_model::checker::{self, Checkable, Cutoff, Hash, Limits, Options, Report};
use kvcc_model::{Config, ContractModel, State};
use proptest::strategy::{Strategy, ValueTree};
use stateright::{Checker, HasDiscoveries, Model};
use std::collections::{BTreeSet, HashSet, VecDeque};

/// The fingerprint kvcc used until issue 23: eight bytes at a time as
/// `h = (rotl(h, 5) ^ w) * K`, a last word holding the tail and its length, then murmur3's
/// finaliser. A difference in one word's top bit becomes bit 4 of the next step's input,
/// where the same difference in the next word cancels it; the finaliser cannot undo a
/// collision that already happened.
fn word_at_a_time(bytes: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let add = |h: u64, w: u64| (h.rotate_left(5) ^ w).wrapping_mul(K);
    let mut chunks = bytes.chunks_exact(8);
    let mut h = 0;
    for chunk in &mut chunks {
        h = add(h, u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
    }
    let rest = chunks.remainder();
    let mut tail = [0u8; 8];
    tail[..rest.len()].copy_from_slice(rest);
    h = add(h, u64::from_le_bytes(tail) ^ ((rest.len() as u64) << 56));
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

fn options(threads: usize, symmetry: bool, exact: bool, hash: Hash, max_states: u64) -> Options {
    Options {
        threads,
        symmetry,
        exact,
        hash,
        limits: Limits {
            max_states: Some(max_states),
            ..Limits::default()
        },
        ..Options::default()
    }
}

/// Everything a user sees of a check: states, verdict, cut, and each counterexample.
#[derive(Debug, PartialEq)]
struct Answer {
    unique_states: u64,
    verdict: String,
    cutoff: Option<Cutoff>,
    counterexamples: Vec<(String, String, Vec<String>)>,
}

fn answer(report: &Report<ContractModel>) -> Answer {
    Answer {
        unique_states: report.unique_states,
        verdict: format!("{:?}", report.verdict),
        cutoff: report.cutoff.clone(),
        counterexamples: report
            .counterexamples
            .iter()
            .map(|c| {
                let steps = c.steps.iter().map(|(a, _)| format!("{a:?}")).collect();
                (c.name.clone(), format!("{:?}", c.initial), steps)
            })
            .collect(),
    }
}

/// Whether a report saw its whole state space.
fn whole(report: &Report<ContractModel>) -> bool {
    report.cut().is_none()
}

/// Unique states stateright's own BFS finds without symmetry, explored to the end (by
/// default it stops once every property has a discovery). Unbounded: its bound counts
/// transitions, not states, and the model is finite; it is asked only of specs kvcc
/// explored whole.
fn stateright_bfs(config: &Config) -> u64 {
    let theirs = ContractModel::new(config.clone())
        .checker()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::new()))
        .spawn_bfs()
        .join();
    assert!(theirs.is_done());
    theirs.unique_state_count() as u64
}

fn config_of(file: &std::path::Path) -> Config {
    let spec = Spec::load(file.to_str().expect("utf-8")).expect("spec loads");
    spec.cases(&[]).expect("cases")[0].config.clone()
}

#[test]
fn issue23_the_collision_spec_counts_alike_by_default_exactly_and_in_stateright() {
    let config = config_of(&root().join(fixture("issue23-collision.toml")));
    let model = ContractModel::new(config.clone());
    let hash = checker::fingerprint_bytes as Hash;
    // Unreduced, to compare with stateright's BFS state for state: since da53e11 request
    // symmetry holds under this spec's head-only reaper too (reduced counts below).
    let default = checker::check(&model, &options(1, false, false, hash, u64::MAX));
    let exact = checker::check(&model, &options(2, false, true, hash, u64::MAX));
    assert_eq!(exact.cutoff, None, "--exact completes without a collision");
    // Pinned: 3,528 is stateright's count (6,046 before da53e11 kept P's queue places
    // dense, so states that differ only in gaps between places are one); at 6,046 the
    // old hasher's default run said 6,006.
    assert_eq!(stateright_bfs(&config), 3_528);
    assert_eq!(default.unique_states, 3_528);
    assert_eq!(exact.unique_states, 3_528);
    for threads in [2, 4] {
        let again = checker::check(&model, &options(threads, false, false, hash, u64::MAX));
        assert_eq!(answer(&again), answer(&default), "{threads} threads");
    }
    // Reduced, the default run and --exact agree too (pinned: 1,865 representatives).
    let reduced = checker::check(&model, &options(1, true, false, hash, u64::MAX));
    let reduced_exact = checker::check(&model, &options(2, true, true, hash, u64::MAX));
    assert_eq!(reduced_exact.cutoff, None);
    assert_eq!(reduced.unique_states, 1_865);
    assert_eq!(reduced_exact.unique_states, 1_865);

    // The twin: the old hasher hides states, and --exact says so.
    let twin = word_at_a_time as Hash;
    let hidden = checker::check(&model, &options(1, false, false, twin, u64::MAX));
    assert!(hidden.unique_states < 3_528, "{}", hidden.unique_states);
    let caught = checker::check(&model, &options(1, false, true, twin, u64::MAX));
    assert!(
        matches!(caught.cutoff, Some(Cutoff::Collision { .. })),
        "{:?}",
        caught.cutoff
    );
}

/// `name` from the environment, else `default`: the suite runs the default; a long
/// campaign (docs/fuzzing.md) sets more.
fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// Small random valid specs (`KVCC_RANDOM_SPECS`, 1,000 by default) whose spaces are
/// whole within `KVCC_RANDOM_STATES` states (6,000; larger ones are counted and skipped),
/// checked every way: default, exact, unreduced and stateright's BFS agree on states; 1, 2
/// and 4 threads agree on everything a user sees.
#[test]
fn issue23_random_specs_count_alike_and_answer_alike_on_any_thread_count() {
    let cases = env_or("KVCC_RANDOM_SPECS", 1_000);
    let states_max = env_or("KVCC_RANDOM_STATES", 6_000);
    let hash = checker::fingerprint_bytes as Hash;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = crate::fuzz::small_random_spec();
    let (mut checked, mut too_large, mut drawn) = (0u64, 0u64, 0u64);
    while checked < cases {
        drawn += 1;
        assert!(
            drawn < cases * 5,
            "too few random specs fit: {checked} of {drawn}"
        );
        let text = strategy.new_tree(&mut runner).expect("a spec").current();
        let Ok(spec) = Spec::parse("random.toml", text.clone()) else {
            continue;
        };
        let Ok(cases) = spec.cases(&[]) else {
            continue;
        };
        let config = &cases[0].config;
        let model = ContractModel::new(config.clone());
        let one = checker::check(&model, &options(1, true, false, hash, states_max));
        let unreduced = whole(&one)
            .then(|| checker::check(&model, &options(1, false, false, hash, states_max)))
            .filter(whole);
        let Some(unreduced) = unreduced else {
            too_large += 1;
            continue;
        };
        let exact = checker::check(&model, &options(2, true, true, hash, states_max));
        assert_eq!(exact.cutoff, None, "--exact: {text}");
        assert_eq!(exact.unique_states, one.unique_states, "--exact: {text}");
        let theirs = stateright_bfs(config);
        assert_eq!(theirs, unreduced.unique_states, "stateright BFS: {text}");
        for threads in [2, 4] {
            let again = checker::check(&model, &options(threads, true, false, hash, states_max));
            assert_eq!(answer(&again), answer(&one), "{threads} threads: {text}");
        }
        checked += 1;
    }
    eprintln!(
        "{checked} random specs cross-checked, {too_large} larger than {states_max} states skipped"
    );
}

/// The same cross-check has the power to see the old hasher's collisions on random specs:
/// one of the first few hundred that are whole within 20,000 states loses states under it.
#[test]
fn issue23_the_random_cross_check_catches_the_old_hasher() {
    let states_max = 20_000;
    let twin = word_at_a_time as Hash;
    let hash = checker::fingerprint_bytes as Hash;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = crate::fuzz::small_random_spec();
    let mut checked = 0;
    // The first collision comes at the 470th whole spec of this stream (2026-12-06, the
    // same with one run per spec as with two; the 488th, and the 300th before that, as
    // knobs joined the generator).
    while checked < 1000 {
        let text = strategy.new_tree(&mut runner).expect("a spec").current();
        let Some(config) = Spec::parse("random.toml", text)
            .ok()
            .and_then(|spec| spec.cases(&[]).ok())
            .map(|cases| cases[0].config.clone())
        else {
            continue;
        };
        let model = ContractModel::new(config);
        // --exact compares every state in full, so until it meets a collision it counts
        // what the right hasher counts: one run tells a whole spec without a collision.
        // A collision counts only in a spec whole within the bound, which the right
        // hasher's run then tells.
        let exact = checker::check(&model, &options(1, true, true, twin, states_max));
        if matches!(exact.cutoff, Some(Cutoff::Collision { .. })) {
            let right = checker::check(&model, &options(1, true, false, hash, states_max));
            if whole(&right) {
                return;
            }
        } else if whole(&exact) {
            checked += 1;
        }
    }
    panic!("the old hasher collided on none of {checked} random specs");
}

/// Every matrix point of the shipped specs: default and exact counts agree, stateright's
/// BFS counts what the unreduced search counts, and 1, 2 and 4 threads answer alike.
#[test]
fn issue23_shipped_specs_count_alike_and_answer_alike_on_any_thread_count() {
    let hash = checker::fingerprint_bytes as Hash;
    let mut points = 0;
    for file in crate::common::shipped_specs() {
        let spec = Spec::load(file.to_str().expect("utf-8")).expect("shipped spec loads");
        for case in spec.cases(&[]).expect("cases") {
            let name = format!("{} {}", spec.name, case.point.to_json());
            let model = ContractModel::new(case.config.clone());
            let one = checker::check(&model, &options(1, true, false, hash, u64::MAX));
            let exact = checker::check(&model, &options(2, true, true, hash, u64::MAX));
            assert_eq!(exact.cutoff, one.cutoff, "{name}: --exact");
            assert_eq!(exact.unique_states, one.unique_states, "{name}: --exact");
            for threads in [2, 4] {
                let again = checker::check(&model, &options(threads, true, false, hash, u64::MAX));
                assert_eq!(answer(&again), answer(&one), "{name}: {threads} threads");
            }
            let unreduced = checker::check(&model, &options(2, false, false, hash, u64::MAX));
            assert_eq!(
                stateright_bfs(&case.config),
                unreduced.unique_states,
                "{name}: stateright BFS"
            );
            points += 1;
        }
    }
    assert!(points > 150, "{points} points");
}

/// Distinct packed encodings of real states, `count` of them: the states reachable in the
/// shipped specs, then the benchmark set's, as the search packs them (canonical) and as
/// they are (not).
fn real_encodings(count: usize) -> Vec<Vec<u8>> {
    let mut files = crate::common::shipped_specs();
    files.push(root().join(fixture("issue23-collision.toml")));
    let mut bench: Vec<_> = std::fs::read_dir(root().join("specs/bench"))
        .expect("specs/bench readable")
        .map(|e| e.expect("entry").path())
        .collect();
    bench.sort();
    files.extend(bench);
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    let mut encodings = Vec::new();
    'specs: for file in files {
        let spec = Spec::load(file.to_str().expect("utf-8")).expect("spec loads");
        for case in spec.cases(&[]).expect("cases") {
            let model = ContractModel::new(case.config);
            let mut queue: VecDeque<State> = model.init_states().into();
            let mut states: HashSet<State> = queue.iter().cloned().collect();
            let mut actions = Vec::new();
            while let Some(state) = queue.pop_front() {
                for packed in [state.clone(), state.representative()] {
                    let mut bytes = Vec::new();
                    model.pack(&packed, &mut bytes);
                    if seen.insert(bytes.clone()) {
                        encodings.push(bytes);
                        if encodings.len() == count {
                            break 'specs;
                        }
                    }
                }
                actions.clear();
                model.actions(&state, &mut actions);
                for action in actions.drain(..) {
                    if let Some(next) = model.next_state(&state, action) {
                        if states.insert(next.clone()) {
                            queue.push_back(next);
                        }
                    }
                }
            }
        }
    }
    encodings
}

/// What a uniform 64-bit hash must show on distinct inputs, or why `hash` does not:
/// - no two share all 64 bits (expected n²/2^65, under 10^-7 here);
/// - the top and the low 16 bits fill 2^16 buckets as a uniform draw does (chi-square
///   within 6 standard deviations of its mean);
/// - 32-bit truncations collide as often as the birthday bound says (within 6 standard
///   deviations of the Poisson mean);
/// - two bits flipped in neighbouring words never give the input's own fingerprint.
fn uniform_on(hash: Hash, encodings: &[Vec<u8>]) -> Result<(), String> {
    let fps: Vec<u64> = encodings.iter().map(|e| hash(e)).collect();
    let n = fps.len() as f64;
    let mut sorted = fps.clone();
    sorted.sort_unstable();
    let full = sorted.windows(2).filter(|w| w[0] == w[1]).count();
    if full > 0 {
        return Err(format!(
            "{full} pairs of distinct encodings share a fingerprint"
        ));
    }
    for (bits, shift) in [("top", 48), ("low", 0)] {
        let mut buckets = vec![0u64; 1 << 16];
        for fp in &fps {
            buckets[((fp >> shift) & 0xffff) as usize] += 1;
        }
        let expected = n / 65_536.0;
        let chi2: f64 = buckets
            .iter()
            .map(|&b| (b as f64 - expected).powi(2) / expected)
            .sum();
        let sd = (2.0 * 65_535.0f64).sqrt();
        if (chi2 - 65_535.0).abs() > 6.0 * sd {
            return Err(format!(
                "{bits} 16 bits: chi-square {chi2:.0}, expected 65535 ± {sd:.0}"
            ));
        }
    }
    let mut low: Vec<u32> = fps.iter().map(|&fp| (fp >> 16) as u32).collect();
    low.sort_unstable();
    let truncated = low.windows(2).filter(|w| w[0] == w[1]).count() as f64;
    let mean = n * (n - 1.0) / 2.0 / 2f64.powi(32);
    if (truncated - mean).abs() > 6.0 * mean.sqrt() {
        return Err(format!(
            "32-bit truncations: {truncated} collisions, expected {mean:.0}"
        ));
    }
    for bytes in encodings.iter().filter(|e| e.len() >= 16).take(64) {
        for a in 0..64 {
            for b in 0..64 {
                let mut flipped = bytes.clone();
                flipped[a / 8] ^= 1 << (a % 8);
                flipped[8 + b / 8] ^= 1 << (b % 8);
                if hash(&flipped) == hash(bytes) {
                    return Err(format!("bits {a} and {} of {bytes:?} cancel", 64 + b));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn issue23_fingerprints_of_real_states_look_uniform() {
    let encodings = real_encodings(1 << 20);
    assert_eq!(encodings.len(), 1 << 20, "enough real states");
    assert_eq!(uniform_on(checker::fingerprint_bytes, &encodings), Ok(()));
    let twin = uniform_on(word_at_a_time, &encodings);
    assert!(twin.is_err(), "the old hasher passes: {twin:?}");
}
