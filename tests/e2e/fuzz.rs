//! Issue 16: fuzzing on stable, in the suite. Each target feeds one reader of untrusted
//! input with mutations of real inputs (the shipped specs, a real ITF trace, a recorded
//! run's lines) or random in-range specs, and asserts what hostile input must never break:
//! no panic, an error that names the file, and (for the model) the same result on one
//! thread and two.
//!
//! The suite runs a few hundred cases per target (seconds). A long run, as recorded in
//! docs/fuzzing.md:
//!
//! ```sh
//! KVCC_FUZZ_CASES=1000000 cargo test --release -p kvcc-e2e -- fuzz:: --test-threads 1
//! ```
//!
//! A failing case is saved by proptest under `tests/proptest-regressions/` and replayed
//! first on every later run: commit it with the fix, as a regression test.

use crate::common::root;
use kvcc::run::{self, Observed, Settings};
use kvcc::spec::Spec;
use kvcc_conform::intern::Interner;
use kvcc_model::checker::Limits;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use std::sync::OnceLock;
use std::time::Duration;

/// Cases per target: `KVCC_FUZZ_CASES`, else `default`.
fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("KVCC_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        // A crash is found by the input, not by shrinking it for minutes.
        max_shrink_iters: 256,
        ..ProptestConfig::default()
    }
}

/// One edit of a byte string, at a position given as a fraction of its length.
#[derive(Clone, Debug)]
enum Edit {
    /// Replace the byte there.
    Set(f64, u8),
    /// Remove up to `n` bytes from there.
    Delete(f64, usize),
    /// Insert bytes there.
    Insert(f64, Vec<u8>),
    /// Copy up to `n` bytes from one place to another (duplicated keys, lines, arrays).
    Copy(f64, f64, usize),
    /// Replace the next run of digits there by a hostile number.
    Number(f64, &'static str),
}

fn edit() -> impl Strategy<Value = Edit> {
    let at = 0.0..1.0f64;
    prop_oneof![
        (at.clone(), any::<u8>()).prop_map(|(a, b)| Edit::Set(a, b)),
        (at.clone(), 1..64usize).prop_map(|(a, n)| Edit::Delete(a, n)),
        (at.clone(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(a, b)| Edit::Insert(a, b)),
        (at.clone(), at.clone(), 1..256usize).prop_map(|(a, b, n)| Edit::Copy(a, b, n)),
        (
            at,
            prop::sample::select(vec![
                "0",
                "-1",
                "65536",
                "4294967296",
                "18446744073709551616",
                "1e999",
                "99999999999999999999999",
            ])
        )
            .prop_map(|(a, n)| Edit::Number(a, n)),
    ]
}

fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    let pos = |bytes: &Vec<u8>, at: f64| ((bytes.len() as f64) * at) as usize;
    for edit in edits {
        match edit {
            Edit::Set(at, b) => {
                let i = pos(&bytes, *at);
                if i < bytes.len() {
                    bytes[i] = *b;
                }
            }
            Edit::Delete(at, n) => {
                let i = pos(&bytes, *at);
                let end = (i + n).min(bytes.len());
                bytes.drain(i..end);
            }
            Edit::Insert(at, b) => {
                let i = pos(&bytes, *at);
                bytes.splice(i..i, b.iter().copied());
            }
            Edit::Copy(from, to, n) => {
                let i = pos(&bytes, *from);
                let piece: Vec<u8> = bytes[i..(i + n).min(bytes.len())].to_vec();
                let j = pos(&bytes, *to);
                bytes.splice(j..j, piece);
            }
            Edit::Number(at, n) => {
                let i = pos(&bytes, *at);
                if let Some(start) = bytes[i..].iter().position(u8::is_ascii_digit) {
                    let start = i + start;
                    let len = bytes[start..]
                        .iter()
                        .take_while(|b| b.is_ascii_digit())
                        .count();
                    bytes.splice(start..start + len, n.bytes());
                }
            }
        }
    }
    bytes
}

/// A corpus item and the edits to make to it.
fn mutated(corpus: &'static [Vec<u8>]) -> impl Strategy<Value = Vec<u8>> {
    (0..corpus.len(), prop::collection::vec(edit(), 0..6))
        .prop_map(move |(i, edits)| apply(corpus[i].clone(), &edits))
}

fn shipped_specs() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        crate::common::shipped_specs()
            .iter()
            .map(|f| std::fs::read(f).unwrap())
            .collect()
    })
}

/// A real trace: the seed regression's, written once by the checker.
fn real_traces() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let spec = root().join(crate::common::fixture("seed-59325.toml"));
        let spec = Spec::load(spec.to_str().unwrap()).unwrap();
        let settings = Settings {
            threads: 1,
            trace_dir: Some(dir.path().to_path_buf()),
            all_traces: true,
            ..Settings::default()
        };
        let case = &spec.cases(&[]).unwrap()[0];
        let outcome = run::check(&spec, case, &settings).unwrap();
        outcome
            .traces
            .iter()
            .filter(|t| t.to_string_lossy().ends_with(".itf.json"))
            .map(|t| std::fs::read(t).unwrap())
            .collect()
    })
}

fn recorded_lines() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let run = root().join("tests/fixtures/runs/strict-duplicate");
        let mut lines = Vec::new();
        for file in [
            "rank-0.jsonl",
            "rank-1.jsonl",
            "rank-2.jsonl",
            "header.json",
        ] {
            let text = std::fs::read_to_string(run.join(file)).unwrap();
            lines.extend(text.lines().map(|l| l.as_bytes().to_vec()));
            lines.push(text.into_bytes());
        }
        lines
    })
}

proptest! {
    #![proptest_config(cases(512))]

    #[test]
    fn fuzz_spec_loader(bytes in mutated(shipped_specs())) {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        match Spec::parse("fuzz.toml", text) {
            Err(e) => prop_assert_eq!(e.file.as_deref(), Some("fuzz.toml")),
            // A spec that loads builds every point's config or says why, naming it.
            Ok(spec) => if let Err(e) = spec.cases(&[]) {
                prop_assert_eq!(e.file.as_deref(), Some("fuzz.toml"));
            },
        }
    }

    #[test]
    fn fuzz_itf_reader(bytes in mutated(real_traces())) {
        let text = String::from_utf8_lossy(&bytes);
        if let Err(e) = kvcc::trace::replay::parse("fuzz.itf.json", &text) {
            prop_assert_eq!(e.file.as_deref(), Some("fuzz.itf.json"));
        }
    }

    #[test]
    fn fuzz_recorded_run_reader(bytes in mutated(recorded_lines())) {
        let interner = Interner::new();
        for expected in [0, 2] {
            if let Err(e) = kvcc_conform::reader::parse(1, &bytes, "rank-1.jsonl", 7, expected, &interner) {
                prop_assert_eq!(e.file.as_deref(), Some("rank-1.jsonl"));
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        if let Err(e) = kvcc_conform::format::Header::parse("header.json", &text) {
            prop_assert_eq!(e.file.as_deref(), Some("header.json"));
        }
    }
}

/// Every knob of the spec format with the values a random spec draws from (TOML, ready to
/// write; an empty value leaves the key out), grouped by table. The schema is the source of
/// what is in range; `random_specs_cover_every_schema_key` fails when a key is missing here.
const KNOBS: &[(&str, &str, &[&str])] = &[
    ("", "requests", &["1", "2", "3"]),
    ("", "max-concurrent-batches", &["1", "2"]),
    (
        "",
        "expected-count",
        &["\"world-size\"", "\"world-size-over-pcp\"", "{ fixed = 2 }"],
    ),
    (
        "",
        "announced-count",
        &["", "\"world-size\"", "\"world-size-over-pcp\""],
    ),
    ("", "connector", &["\"nixl\"", "\"multi-offload\""]),
    ("", "policy", &["\"countdown\"", "\"strict\""]),
    ("", "transfer", &["\"pull-reads\"", "\"push-writes\""]),
    ("prefill", "tp", &["1", "2", "4"]),
    ("prefill", "pp", &["1", "2"]),
    ("prefill", "pcp", &["1", "2", "4"]),
    ("prefill", "dcp", &["1", "2", "4"]),
    ("prefill", "layout", &["\"replicated\"", "\"sharded\""]),
    ("prefill", "attention", &["\"dense\"", "\"mla\""]),
    ("prefill", "loads-kv", &["false", "true"]),
    ("prefill", "saves-while-loading", &["false", "true"]),
    (
        "prefill",
        "pp-stage-output",
        &["\"connector-output\"", "\"none\""],
    ),
    ("decode", "tp", &["1", "2", "4"]),
    ("decode", "kv-blocks", &["", "2", "3", "4"]),
    (
        "producer",
        "replicated-reports",
        &["\"nothing\"", "\"synthetic\"", "\"synthetic-on-batch\""],
    ),
    ("producer", "clear-replicated", &["false", "true"]),
    ("producer", "lease", &["false", "true"]),
    ("producer", "failed-store", &["\"counted\"", "\"leaked\""]),
    (
        "producer",
        "store-ledger",
        &["\"per-job\"", "\"per-request\""],
    ),
    (
        "producer",
        "notification-after-report",
        &["\"dropped\"", "\"reported-again\""],
    ),
    (
        "producer",
        "notification-count",
        &["\"counted\"", "\"each\""],
    ),
    (
        "producer",
        "push-completion",
        &["\"reported\"", "\"filtered\""],
    ),
    (
        "producer",
        "lease-reaper",
        &["\"head-only\"", "\"full-scan\""],
    ),
    (
        "producer",
        "mla-notify",
        &["\"read-ranks-only\"", "\"every-covered-rank\""],
    ),
    (
        "consumer",
        "failed-handle",
        &["\"first-error\"", "\"after-all-stopped\""],
    ),
    (
        "consumer",
        "prefix-hit",
        &["\"off\"", "\"reported\"", "\"unreported\""],
    ),
    (
        "consumer",
        "failed-load",
        &["\"reported\"", "\"logged-only\"", "\"unreported\""],
    ),
    (
        "consumer",
        "mla-notify-id",
        &["\"remote-request-id\"", "\"local-request-id\""],
    ),
    (
        "consumer",
        "heartbeat-id",
        &["\"remote-request-id\"", "\"local-request-id\""],
    ),
    (
        "consumer",
        "rejection-notice",
        &["\"none\"", "\"notifies-prefill\""],
    ),
    ("consumer", "loading-children", &["1", "2"]),
    ("consumer", "async-lookup", &["false", "true"]),
    (
        "consumer",
        "lookup-after-load",
        &["\"local-prefill\"", "\"second-load\""],
    ),
    ("consumer", "load", &["\"asynchronous\"", "\"synchronous\""]),
    (
        "consumer",
        "push-failure",
        &["\"unannounced\"", "\"notified\""],
    ),
    (
        "consumer",
        "recving-combine",
        &["\"union\"", "\"counted\"", "\"per-child\""],
    ),
    ("scheduler", "abort-finished", &["\"ignore\"", "\"free\""]),
    (
        "scheduler",
        "abort-loading",
        &["\"delay-free\"", "\"free-at-once\""],
    ),
    ("scheduler", "stepping", &["\"keep-stepping\"", "\"idle\""]),
    (
        "scheduler",
        "prefill-stepping",
        &["", "\"keep-stepping\"", "\"idle\""],
    ),
    (
        "scheduler",
        "decode-stepping",
        &["", "\"keep-stepping\"", "\"idle\""],
    ),
    (
        "scheduler",
        "failed-step",
        &[
            "\"fail-stop\"",
            "\"retry-drops-reports\"",
            "\"retry-keeps-reports\"",
        ],
    ),
    (
        "scheduler",
        "load-reservation",
        &["\"full-sequence\"", "\"prefix-only\""],
    ),
    (
        "scheduler",
        "scan-order",
        &["\"holders-first\"", "\"arrival\""],
    ),
    (
        "scheduler",
        "admission-behind-skipped",
        &["\"allowed\"", "\"refused\""],
    ),
    (
        "scheduler",
        "final-step-preemption",
        &["\"drops-stale-output\"", "\"finishes-empty\""],
    ),
    (
        "scheduler",
        "kv-load-failure-policy",
        &["\"fail\"", "\"recompute\""],
    ),
    (
        "scheduler",
        "rewound-in-flight-output",
        &["\"delivered\"", "\"discarded\""],
    ),
    (
        "scheduler",
        "unknown-completion",
        &["\"assert\"", "\"drop\""],
    ),
    (
        "scheduler",
        "aborted-transfers",
        &["\"free-at-first\"", "\"free-after-all\""],
    ),
    (
        "delivery",
        "notification",
        &[
            "[]",
            "[\"late\"]",
            "[\"duplicated\"]",
            "[\"late\", \"duplicated\"]",
        ],
    ),
    ("faults", "client-abort", &["false", "true"]),
    ("faults", "final-step-preempted", &["false", "true"]),
    ("faults", "lost-notification", &["false", "true"]),
    ("faults", "decoder-never-reads", &["false", "true"]),
    ("faults", "rejected-before-admission", &["false", "true"]),
    ("faults", "child-reports-twice", &["false", "true"]),
    ("faults", "push-write-fails", &["false", "true"]),
    ("faults", "offload-store-raises", &["false", "true"]),
    ("faults", "prefill-preempted", &["false", "true"]),
    ("faults", "decode-preempted", &["false", "true"]),
    ("faults", "late-read-after-lease", &["false", "true"]),
    ("faults", "handshake-failure", &["false", "true"]),
    ("faults", "transfer-error", &["false", "true"]),
    (
        "faults",
        "missing-output-rank",
        &["false", "true", "\"prefill\"", "\"decode\""],
    ),
    (
        "faults",
        "worker-step-raises",
        &["false", "true", "\"prefill\"", "\"decode\""],
    ),
];

/// A random spec with every knob in range (the schema's), expecting `holds`. Knobs
/// constrain one another (push mode refuses pull-side faults, two loading children need a
/// MultiConnector, ...); a combination the loader refuses has the knob it names set back
/// to its first value, the default, until the spec loads, so that most random specs reach
/// the model (`random_specs_mostly_reach_the_model`) and the loader stays the one judge.
pub(crate) fn random_spec() -> impl Strategy<Value = String> {
    random_spec_of(usize::MAX)
}

/// Knobs that multiply the state space: requests and ranks.
const SIZE_KNOBS: &[(&str, &str)] = &[
    ("", "requests"),
    ("prefill", "tp"),
    ("prefill", "pcp"),
    ("prefill", "dcp"),
    ("decode", "tp"),
];

/// A random spec as [`random_spec`] draws, with at most two requests and two ranks per
/// parallel dimension: small enough that most are explored whole in milliseconds, for
/// checks that compare whole explorations.
pub(crate) fn small_random_spec() -> impl Strategy<Value = String> {
    random_spec_of(2)
}

/// A random spec whose size knobs take one of their first `size_values` values (they are
/// listed smallest first).
fn random_spec_of(size_values: usize) -> impl Strategy<Value = String> {
    let picks: Vec<_> = KNOBS
        .iter()
        .map(|&(section, key, values)| {
            let size = SIZE_KNOBS.contains(&(section, key));
            0..if size {
                values.len().min(size_values)
            } else {
                values.len()
            }
        })
        .collect();
    picks.prop_map(|mut picks| {
        for _ in 0..KNOBS.len() {
            let text = spec_text(&picks);
            let Err(e) = Spec::parse("random.toml", text.clone()) else {
                return text;
            };
            let knob = e.field.as_deref().and_then(|field| {
                KNOBS.iter().position(|(section, key, _)| {
                    field == *key || field == format!("{section}.{key}")
                })
            });
            match knob {
                Some(i) if picks[i] != 0 => picks[i] = 0,
                _ => return text,
            }
        }
        spec_text(&picks)
    })
}

fn spec_text(picks: &[usize]) -> String {
    let mut text = String::from("version = 1\n");
    let mut table = "";
    for ((section, key, values), &pick) in KNOBS.iter().zip(picks) {
        if *section != table {
            table = section;
            text += &format!("[{section}]\n");
        }
        if !values[pick].is_empty() {
            text += &format!("{key} = {}\n", values[pick]);
        }
    }
    text + "[expect]\nverdict = \"holds\"\n"
}

/// A fuzz target whose inputs the loader refuses tests the loader, not the model: most
/// random specs must load.
#[test]
fn random_specs_mostly_reach_the_model() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = random_spec();
    let loaded = (0..200)
        .filter(|_| {
            let text = strategy.new_tree(&mut runner).unwrap().current();
            Spec::parse("random.toml", text).is_ok()
        })
        .count();
    assert!(loaded >= 180, "only {loaded} of 200 random specs load");
}

#[test]
fn random_specs_cover_every_schema_key() {
    let schema = kvcc::spec::schema::schema();
    let mut missing = Vec::new();
    for (key, value) in schema["properties"].as_object().unwrap() {
        if kvcc::spec::schema::RESERVED.contains(&key.as_str()) {
            continue;
        }
        match kvcc::spec::schema::resolve(&schema, value)["properties"].as_object() {
            Some(table) => missing.extend(
                table
                    .keys()
                    .filter(|k| !KNOBS.iter().any(|(s, n, _)| s == key && n == k))
                    .map(|k| format!("{key}.{k}")),
            ),
            None if !KNOBS.iter().any(|(s, n, _)| s.is_empty() && n == key) => {
                missing.push(key.clone())
            }
            None => {}
        }
    }
    assert!(missing.is_empty(), "random specs never set {missing:?}");
}

/// (observed, unique states, violated clauses, max depth) on `threads` threads.
fn checked(spec: &Spec, threads: usize) -> Option<(Observed, u64, Vec<String>, u32)> {
    let settings = Settings {
        threads,
        limits: Limits {
            max_states: Some(400),
            timeout: Some(Duration::from_secs(5)),
            ..Limits::default()
        },
        ..Settings::default()
    };
    let case = &spec.cases(&[]).ok()?[0];
    let outcome = run::check(spec, case, &settings).expect("a valid spec checks");
    let clauses = outcome
        .violations
        .iter()
        .map(|v| format!("{}: {}", v.property, v.clause))
        .collect();
    Some((
        outcome.observed,
        outcome.unique_states,
        clauses,
        outcome.max_depth,
    ))
}

proptest! {
    #![proptest_config(cases(48))]

    #[test]
    fn fuzz_model_on_random_specs(text in random_spec()) {
        let Ok(spec) = Spec::parse("random.toml", text.clone()) else {
            // Out of the model's range (the loader says why; fuzz_spec_loader covers it).
            return Ok(());
        };
        let one = checked(&spec, 1);
        let two = checked(&spec, 2);
        let timed_out = |r: &Option<(Observed, u64, Vec<String>, u32)>| {
            let why = match r {
                Some((Observed::Inconclusive(why), ..)) => Some(why.as_str()),
                Some((observed, ..)) => observed.incomplete(),
                None => None,
            };
            why.is_some_and(|why| why.contains("time limit"))
        };
        if !timed_out(&one) && !timed_out(&two) {
            prop_assert_eq!(one, two, "{}", text);
        }
    }
}
