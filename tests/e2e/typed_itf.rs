//! Issue 27: trace format 3 is typed. One Rust struct, read with the `itf` crate, reads
//! every trace of every topology the suite writes: no variable changes type between
//! states, facts sit in maps keyed by request, rank and handle, a fact a state or its
//! topology may lack is Quint's `Option`, and the action is a variant, as Quint writes
//! them for model-based testing. Format 2 traces still replay.

use crate::common::{fixture, run};
use crate::traces::every_trace;
use itf::de::{self, As};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// A state of any kvcc trace (format 3). Every field is required and no other is allowed:
/// a variable or field that a state lacks, or whose type changes, fails the read.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // read for their types; the test compares only some of them
struct State {
    #[serde(rename = "P_requests")]
    p_requests: BTreeMap<u8, PRequest>,
    #[serde(rename = "D_requests")]
    d_requests: BTreeMap<u8, DRequest>,
    #[serde(rename = "P_ranks")]
    p_ranks: BTreeMap<u16, BTreeMap<u8, PCell>>,
    #[serde(rename = "D_ranks")]
    d_ranks: BTreeMap<u16, BTreeMap<u8, DCell>>,
    transfers: BTreeMap<u16, BTreeMap<u8, Transfer>>,
    #[serde(rename = "P_aggregator")]
    p_aggregator: Aggregator,
    #[serde(rename = "D_aggregator")]
    d_aggregator: Aggregator,
    #[serde(rename = "D_free_blocks")]
    #[serde(with = "As::<de::Option::<_>>")]
    d_free_blocks: Option<(u32, u32)>,
    incidents: BTreeSet<String>,
    action: Action,
    #[serde(rename = "mbt::actionTaken")]
    action_taken: String,
    #[serde(rename = "mbt::nondetPicks")]
    nondet_picks: Picks,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct PRequest {
    phase: String,
    send_metadata: String,
    #[serde(with = "As::<de::Option::<_>>")]
    queued_after: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct DRequest {
    phase: String,
    load_metadata: String,
    #[serde(with = "As::<de::Option::<_>>")]
    queue_place: Option<u32>,
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    Transfer,
    Replica,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct PCell {
    role: Role,
    send: String,
    #[serde(with = "As::<de::Option::<_>>")]
    writes_done: Option<(u32, u32)>,
    #[serde(with = "As::<de::Option::<_>>")]
    notifications: Option<(u32, u32)>,
    #[serde(with = "As::<de::Option::<_>>")]
    notifications_on_their_way: Option<u32>,
    #[serde(with = "As::<de::Option::<_>>")]
    notifications_dropped_unrecognized: Option<u32>,
    #[serde(with = "As::<de::Option::<_>>")]
    offload_store: Option<String>,
    #[serde(with = "As::<de::Option::<_>>")]
    store_from_before_preemption: Option<String>,
    #[serde(with = "As::<de::Option::<_>>")]
    load: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct DCell {
    recv: String,
    #[serde(with = "As::<de::Option::<_>>")]
    push_notifications: Option<(u32, u32)>,
    #[serde(with = "As::<de::Option::<_>>")]
    offloading_child_load: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Transfer {
    p_rank: u16,
    d_rank: u16,
    kind: String,
    phase: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Aggregator {
    #[serde(rename = "E")]
    expected: u32,
    finished_sending: BTreeMap<u8, u32>,
    finished_recving: BTreeMap<u8, u32>,
    failed_recving_pending: BTreeSet<u8>,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(deny_unknown_fields)]
struct Store {
    rank: u16,
    request: u8,
}

/// Every action kvcc's model takes, in vLLM's names, and `Init`.
#[derive(Debug, Deserialize)]
#[serde(tag = "tag", content = "value")]
#[allow(dead_code)]
enum Action {
    Init,
    PrefillFinishes {
        request: u8,
    },
    PrefillWorkerLoads {
        rank: u16,
        request: u8,
    },
    PrefillEngineSteps {
        output_lost: bool,
        announces_count: bool,
        stores_done: BTreeSet<Store>,
        raised: bool,
    },
    LeaseExpires {
        rank: u16,
        request: u8,
    },
    NotificationArrives {
        rank: u16,
        request: u8,
    },
    OffloadStoreRaises {
        rank: u16,
        request: u8,
    },
    PrefillPreempted {
        request: u8,
    },
    PrefillPreemptedInFinalStep {
        request: u8,
    },
    StaleStoreCompletes {
        rank: u16,
        request: u8,
    },
    DecodeAdmits {
        request: u8,
        prefix_hit: bool,
    },
    DecoderCrashes {
        request: u8,
    },
    DecodeRejects {
        request: u8,
    },
    HandshakeCompletes {
        decoder: u16,
        request: u8,
        ok: bool,
    },
    ReadCompletes {
        handle: u16,
        request: u8,
        notification_lost: bool,
        notification_duplicated: bool,
    },
    ReadFails {
        handle: u16,
        request: u8,
    },
    DecodeChildLoads {
        decoder: u16,
        request: u8,
    },
    ChildReportsAgain {
        decoder: u16,
        request: u8,
    },
    DecodeEngineSteps {
        output_lost: bool,
        raised: bool,
    },
    ClientAborts {
        request: u8,
    },
    DecodeFinishes {
        request: u8,
    },
    DecodePreempted {
        request: u8,
    },
    LookupAnswers {
        request: u8,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Picks {
    #[serde(with = "As::<de::Option::<_>>")]
    request: Option<u8>,
    #[serde(with = "As::<de::Option::<_>>")]
    rank: Option<u16>,
    #[serde(with = "As::<de::Option::<_>>")]
    decoder: Option<u16>,
    #[serde(with = "As::<de::Option::<_>>")]
    handle: Option<u16>,
    #[serde(with = "As::<de::Option::<_>>")]
    ok: Option<bool>,
    #[serde(with = "As::<de::Option::<_>>")]
    prefix_hit: Option<bool>,
    #[serde(with = "As::<de::Option::<_>>")]
    notification_lost: Option<bool>,
    #[serde(with = "As::<de::Option::<_>>")]
    notification_duplicated: Option<bool>,
    #[serde(with = "As::<de::Option::<_>>")]
    output_lost: Option<bool>,
    #[serde(with = "As::<de::Option::<_>>")]
    announces_count: Option<bool>,
    #[serde(with = "As::<de::Option::<_>>")]
    raised: Option<bool>,
    #[serde(with = "As::<de::Option::<_>>")]
    stores_done: Option<BTreeSet<Store>>,
}

/// ITF read without types: what any well-formed trace is. (`itf::trace_from_str::<itf::Value>`
/// is not that: itf 0.4 re-decodes every value, and refuses the empty tuple `{"#tup": []}`
/// that Quint writes as `None`'s value.)
fn untyped(text: &str) -> serde_json::Result<itf::Trace<itf::Value>> {
    serde_json::from_str(text)
}

fn typed(text: &str) -> Result<itf::Trace<State>, itf::Error> {
    itf::trace_from_str::<State>(text)
}

#[test]
fn issue27_every_trace_reads_into_one_typed_struct() {
    let mut topologies = BTreeSet::new();
    for path in every_trace() {
        let text = std::fs::read_to_string(path).unwrap();
        let trace = typed(&text)
            .unwrap_or_else(|e| panic!("{}: not one typed struct: {e:?}", path.display()));
        // The typed reader and kvcc's own agree on every step's action.
        let loaded = kvcc::trace::replay::load(path.to_str().unwrap()).unwrap();
        assert_eq!(loaded.version, 3, "{}", path.display());
        assert_eq!(trace.states[0].value.action_taken, "init");
        for (state, action) in trace.states[1..].iter().zip(&loaded.actions) {
            let name = kvcc_model::describe::action_name(action);
            assert_eq!(state.value.action_taken, name, "{}", path.display());
            assert!(
                format!("{:?}", state.value.action).starts_with(name),
                "{}: {:?} is not {name}",
                path.display(),
                state.value.action
            );
        }
        let first = &trace.states[0].value;
        topologies.insert((
            first.p_ranks.len(),
            first.d_ranks.len(),
            first.transfers.len(),
            first.p_requests.len(),
        ));
    }
    // One struct, many shapes: the traces span topologies of different sizes.
    assert!(topologies.len() >= 4, "{topologies:?}");
}

/// The broken twin: a trace in which one variable changes type between states (what
/// format 2 wrote for `D reqN queue place`: `""` where the request is not queued, an
/// integer where it is) is refused by the typed struct, though it is still well-formed
/// ITF; and a format 2 trace is not one typed struct either.
#[test]
fn issue27_a_variable_that_changes_type_fails_the_typed_read() {
    let path = &every_trace()[0];
    let text = std::fs::read_to_string(path).unwrap();
    assert!(typed(&text).is_ok());
    let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let last = doc["states"].as_array().unwrap().len() - 1;
    doc["states"][last]["D_requests"]["#map"][0][1]["queue_place"] = serde_json::json!("");
    let changed = doc.to_string();
    assert!(untyped(&changed).is_ok());
    assert!(typed(&changed).is_err(), "a string where an Option was");

    let v2 = std::fs::read_to_string(crate::common::root().join(fixture(V2))).unwrap();
    assert!(untyped(&v2).is_ok());
    assert!(typed(&v2).is_err());
}

/// A trace kvcc wrote in format 2, kept as it was written.
const V2: &str = "itf-v2/pr59325-regression.itf.json";

#[test]
fn issue27_replay_still_reads_format_2() {
    let (code, stdout, stderr) = run(&["replay", &fixture(V2)]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(
        stdout,
        "reproduces: eventually-freed: delay-freed-request-never-freed at step 8\n"
    );
    let loaded = kvcc::trace::replay::load(
        &crate::common::root()
            .join(fixture(V2))
            .display()
            .to_string(),
    )
    .unwrap();
    assert_eq!(loaded.version, 2);
    // Its twin: a format this kvcc does not read is refused, naming the versions it reads.
    let mut doc: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(crate::common::root().join(fixture(V2))).unwrap(),
    )
    .unwrap();
    doc["#meta"]["trace-format-version"] = serde_json::json!("1");
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("v1.itf.json");
    std::fs::write(&old, doc.to_string()).unwrap();
    let (code, _, stderr) = run(&["replay", old.to_str().unwrap()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("it reads 2 and 3"), "{stderr}");
}
