//! States as short byte strings. The checker keeps every frontier state packed and
//! fingerprints the packed bytes, so packing runs once per transition and unpacking once
//! per explored state: both are written by hand (a generic serde encoding spent most of
//! its time dispatching). The topology and the request count, the same for every state
//! of a model, are left out and put back on unpacking.
//!
//! Layout: per request 4 bytes (scheduler phases and flags, metadata, emissions; D's
//! preemption and a stale token in the send metadata's top two bits); per P cell 2 bytes (send, store and load
//! phases in one, notifications); one byte per handle and per D cell; incidents and
//! one-shot bits; then both aggregators in the core's own canonical encoding
//! ([`kvcc_aggregator::Aggregator::pack`]). A successor whose step left both aggregators
//! shared with its parent copies their bytes from the parent's ([`pack_successor`]).
//! The progress measure is read off the packed bytes, a table lookup a byte
//! ([`ProgressTable`]).

use crate::progress::{self, flags};
use crate::state::{
    DecodeCell, DecodePhase, HandlePhase, Incidents, LoadPhase, Metadata, PrefillCell,
    PrefillPhase, Request, SendPhase, Shape, StaleStore, State, StorePhase,
};
use crate::topology::Topology;
use kvcc_aggregator::SortedAggregator;
use smallvec::SmallVec;
use std::sync::Arc;

/// A value with a one-byte code. Codes of the cells' types keep their type's order (the
/// request symmetry compares columns of codes: [`crate::symmetry`]); a test checks it.
pub(crate) trait Code: Sized + 'static {
    fn code(self) -> u8;
    /// The value of code `byte`, if it is one.
    fn decoded(byte: u8) -> Option<Self>;
    fn decode(byte: u8) -> Self {
        Self::decoded(byte).unwrap_or_else(|| corrupt())
    }
    /// Every value (Metadata: its kinds, with two step counts), for the tests.
    #[cfg(test)]
    const EVERY: &'static [Self];
}

fn corrupt() -> ! {
    panic!("unpacking bytes that pack did not write")
}

/// Codes of fieldless enums: their discriminants. The match in `code` is exhaustive, so
/// a variant added to a phase without being listed here does not compile.
macro_rules! codes {
    ($($ty:ident { $($variant:ident),* $(,)? })*) => {$(
        impl Code for $ty {
            fn code(self) -> u8 {
                match self { $($ty::$variant => $ty::$variant as u8,)* }
            }
            fn decoded(byte: u8) -> Option<$ty> {
                $(if byte == $ty::$variant as u8 { return Some($ty::$variant); })*
                None
            }
            #[cfg(test)]
            const EVERY: &'static [$ty] = &[$($ty::$variant),*];
        }
    )*};
}

codes! {
    PrefillPhase { LoadingKv, Prefilling, DelayFreed, Released, Dropped, AbortFreed, FinishedEmpty, AbortedLoadingKv }
    DecodePhase { Pending, Loading, AbortedLoading, Running, Failed, Freed, Gone, Crashed, Queued, Loaded, Done, Deferred, LookedUp, Recomputing, SyncLoading, Rewound }
    SendPhase { InBatch, ToSend, Expired, Done, Reported, Cleared, Silent, ReportsAgain, ReportedAgain }
    StorePhase { NotUsed, Storing, Stored, Leaked }
    LoadPhase { NotUsed, Loading, Done, Reported }
    StaleStore { None, Running, Done }
    HandlePhase { NotPosted, Handshaking, Reading, Done, Failed }
}

impl Code for Metadata {
    fn code(self) -> u8 {
        match self {
            Metadata::NotQueued => 0,
            Metadata::Delivered => 1,
            Metadata::Due(steps) => steps.checked_add(2).expect("metadata due within 253 steps"),
        }
    }

    fn decoded(byte: u8) -> Option<Metadata> {
        Some(match byte {
            0 => Metadata::NotQueued,
            1 => Metadata::Delivered,
            steps => Metadata::Due(steps - 2),
        })
    }

    #[cfg(test)]
    const EVERY: &'static [Metadata] = &[
        Metadata::NotQueued,
        Metadata::Due(0),
        Metadata::Due(3),
        Metadata::Delivered,
    ];
}

impl Code for DecodeCell {
    fn code(self) -> u8 {
        match self {
            DecodeCell::Idle => 0,
            DecodeCell::Loading => 1,
            DecodeCell::Done { failed: false } => 2,
            DecodeCell::Done { failed: true } => 3,
            DecodeCell::Reported => 4,
            DecodeCell::Silent => 5,
            DecodeCell::ReportsAgain => 6,
            DecodeCell::ReportedTwice => 7,
        }
    }

    fn decoded(byte: u8) -> Option<DecodeCell> {
        Some(match byte {
            0 => DecodeCell::Idle,
            1 => DecodeCell::Loading,
            2 => DecodeCell::Done { failed: false },
            3 => DecodeCell::Done { failed: true },
            4 => DecodeCell::Reported,
            5 => DecodeCell::Silent,
            6 => DecodeCell::ReportsAgain,
            7 => DecodeCell::ReportedTwice,
            _ => return None,
        })
    }

    #[cfg(test)]
    const EVERY: &'static [DecodeCell] = &[
        DecodeCell::Idle,
        DecodeCell::Loading,
        DecodeCell::Done { failed: false },
        DecodeCell::Done { failed: true },
        DecodeCell::Reported,
        DecodeCell::Silent,
        DecodeCell::ReportsAgain,
        DecodeCell::ReportedTwice,
    ];
}

/// `code` in a bit field of `width` bits at `shift`.
fn field(value: impl Code, width: u32, shift: u32) -> u8 {
    let code = value.code();
    assert!(
        u32::from(code) < 1 << width,
        "a phase code outgrew its bits"
    );
    code << shift
}

/// The value `field` wrote at `shift`, if its bits hold a code.
fn unfield<T: Code>(byte: u8, width: u32, shift: u32) -> Option<T> {
    T::decoded((byte >> shift) & ((1 << width) - 1))
}

/// Appends `state`'s packed bytes to `out`.
pub fn pack(state: &State, out: &mut Vec<u8>) {
    pack_cells(state, out);
    state.prefill_aggregator.pack(out);
    state.decode_aggregator.pack(out);
}

/// [`pack`] of a successor of `parent`, which was packed as `parent_bytes`. Most steps
/// (reads, notifications, leases) leave both aggregators shared with the parent
/// ([`State::prefill_aggregator`]), and then their bytes are the parent's, copied rather
/// than encoded again: the cells' part has the same length in every state of a model,
/// and the aggregators' encoding is canonical.
pub fn pack_successor(parent: &State, parent_bytes: &[u8], state: &State, out: &mut Vec<u8>) {
    let shared = Arc::ptr_eq(&state.prefill_aggregator, &parent.prefill_aggregator)
        && Arc::ptr_eq(&state.decode_aggregator, &parent.decode_aggregator);
    if !shared {
        return pack(state, out);
    }
    let begin = out.len();
    pack_cells(state, out);
    let cells = out.len() - begin;
    out.extend_from_slice(&parent_bytes[cells..]);
    debug_assert!(
        {
            let mut whole = Vec::new();
            pack(state, &mut whole);
            whole == out[begin..]
        },
        "a successor's copied aggregators differ from its own"
    );
}

/// Appends the packed bytes of `state`'s requests and cells: everything but the
/// aggregators.
fn pack_cells(state: &State, out: &mut Vec<u8>) {
    for q in &state.requests {
        out.extend_from_slice(&[
            field(q.prefill, 3, 0) | field(q.decode, 4, 3) | u8::from(q.aborted) << 7,
            field(q.send_meta, 6, 0)
                | u8::from(q.stale_token) << 6
                | u8::from(q.decode_preempted) << 7,
            field(q.recv_meta, 3, 0) | u8::from(q.prefix_hit) << 3 | q.arrival << 4,
            q.emitted | q.rescue << 4 | q.queued_after << 6,
        ]);
    }
    let travel = state.topology().notifications_travel;
    for cell in &state.prefill {
        out.extend_from_slice(&[
            field(cell.send, 4, 0) | field(cell.store, 2, 4) | field(cell.load, 2, 6),
            cell.notifications | field(cell.stale_store, 2, 6),
        ]);
        // Notifications on their way exist only where they travel.
        if travel {
            out.extend_from_slice(&[cell.in_flight, cell.dropped]);
        }
    }
    out.extend(state.handles.iter().map(|&h| h.code()));
    // A D worker's two children share its byte.
    out.extend(
        state
            .decode
            .iter()
            .zip(&state.child_loads)
            .map(|(&d, &l)| field(d, 3, 0) | field(l, 2, 3)),
    );
    out.extend_from_slice(&state.incidents.0.to_le_bytes());
    out.push(state.once);
}

/// The state `pack` wrote for a model of `requests` requests over `topology`.
pub fn unpack(topology: &'static Topology, requests: usize, mut bytes: &[u8]) -> State {
    let layout = Layout::of(topology, requests);
    let mut take = |len: usize| -> &[u8] {
        let (head, rest) = bytes.split_at(len);
        bytes = rest;
        head
    };
    let requests: SmallVec<[Request; 3]> = take(layout.requests)
        .chunks_exact(REQUEST_BYTES)
        .map(|b| request(b).unwrap_or_else(|| corrupt()))
        .collect();
    let prefill = take(layout.cells)
        .chunks_exact(layout.cell_bytes)
        .map(|b| cell(b).unwrap_or_else(|| corrupt()))
        .collect();
    let handles = take(layout.handles)
        .iter()
        .map(|&b| HandlePhase::decode(b))
        .collect();
    let workers = take(layout.workers);
    let worker = |b: &u8| worker(*b).unwrap_or_else(|| corrupt());
    let decode = workers.iter().map(|b| worker(b).0).collect();
    let child_loads = workers.iter().map(|b| worker(b).1).collect();
    let incidents = Incidents(u16::from_le_bytes([take(1)[0], take(1)[0]]));
    let once = take(1)[0];
    let mut aggregator = || SortedAggregator::unpack(&mut bytes).unwrap_or_else(|| corrupt());
    let prefill_aggregator = Arc::new(aggregator());
    let decode_aggregator = Arc::new(aggregator());
    State {
        requests,
        prefill,
        handles,
        decode,
        child_loads,
        prefill_aggregator,
        decode_aggregator,
        incidents,
        once,
        shape: Shape(topology),
    }
}

/// Bytes a request packs to.
const REQUEST_BYTES: usize = 4;

/// Where each part of the cells' part of a model's packed states lies: their lengths in
/// bytes, in packed order, then the incident and one-shot bytes (the same for every state
/// of a model).
struct Layout {
    requests: usize,
    cells: usize,
    cell_bytes: usize,
    handles: usize,
    workers: usize,
}

impl Layout {
    fn of(topology: &Topology, requests: usize) -> Layout {
        // Notifications on their way take two more bytes, only where they travel.
        let cell_bytes = if topology.notifications_travel { 4 } else { 2 };
        Layout {
            requests: REQUEST_BYTES * requests,
            cells: cell_bytes * usize::from(topology.prefill_world) * requests,
            cell_bytes,
            handles: topology.handles.len() * requests,
            workers: usize::from(topology.decode_world) * requests,
        }
    }
}

/// The request `pack_cells` wrote as `b`, if its bytes hold one.
fn request(b: &[u8]) -> Option<Request> {
    Some(Request {
        prefill: unfield(b[0], 3, 0)?,
        decode: unfield(b[0], 4, 3)?,
        aborted: b[0] & 1 << 7 != 0,
        send_meta: unfield(b[1], 6, 0)?,
        stale_token: b[1] & 1 << 6 != 0,
        decode_preempted: b[1] & 1 << 7 != 0,
        recv_meta: unfield(b[2], 3, 0)?,
        prefix_hit: b[2] & 1 << 3 != 0,
        arrival: b[2] >> 4,
        emitted: b[3] & 0x0f,
        rescue: (b[3] >> 4) & 0x03,
        queued_after: b[3] >> 6,
    })
}

/// The P cell `pack_cells` wrote as `b` (2 bytes, or 4 where notifications travel).
fn cell(b: &[u8]) -> Option<PrefillCell> {
    Some(PrefillCell {
        send: unfield(b[0], 4, 0)?,
        store: unfield(b[0], 2, 4)?,
        load: unfield(b[0], 2, 6)?,
        notifications: b[1] & 0x3f,
        stale_store: unfield(b[1], 2, 6)?,
        in_flight: b.get(2).copied().unwrap_or(0),
        dropped: b.get(3).copied().unwrap_or(0),
    })
}

/// The D worker's cell and its child's load that share byte `b`.
fn worker(b: u8) -> Option<(DecodeCell, LoadPhase)> {
    Some((unfield(b, 3, 0)?, unfield(b, 2, 3)?))
}

/// [`State::progress`] read off a state's packed bytes ([`crate::progress`]): each byte
/// of the cells' part belongs to one part of the state, whose term is a sum over its
/// fields, so each byte adds an amount fixed by its value and its place. One table per
/// place, filled by decoding each value of that byte with the rest of its part zero
/// (every part's zero is the start of its lifecycle, worth nothing; the test checks the
/// sum against the state's own measure). Reading the bytes costs a load and an add a
/// byte where the state's fields cost a match each.
#[derive(Clone)]
pub struct ProgressTable {
    /// Per byte of the cells' part: what each value adds.
    places: Vec<[u8; 256]>,
}

impl ProgressTable {
    pub fn new(topology: &Topology, requests: usize) -> ProgressTable {
        let layout = Layout::of(topology, requests);
        // What value `v` of byte `at` of a part of `len` bytes adds, by `decode`.
        fn place<T>(
            len: usize,
            at: usize,
            decode: impl Fn(&[u8]) -> Option<T>,
            term: impl Fn(T) -> u32,
        ) -> [u8; 256] {
            let mut table = [0; 256];
            for (v, slot) in table.iter_mut().enumerate() {
                // No part is longer than a request.
                let mut bytes = [0; REQUEST_BYTES];
                bytes[at] = v as u8;
                // A value no part packs to never occurs: it adds nothing.
                if let Some(part) = decode(&bytes[..len]) {
                    *slot = u8::try_from(term(part)).expect("a byte's progress fits a byte");
                }
            }
            table
        }
        let part = |len: usize, period: usize, places: Vec<[u8; 256]>| {
            (0..len).map(move |i| places[i % period])
        };
        let request_places = (0..REQUEST_BYTES)
            .map(|at| place(REQUEST_BYTES, at, request, |q| q.progress()))
            .collect();
        let cell_places = (0..layout.cell_bytes)
            .map(|at| place(layout.cell_bytes, at, cell, PrefillCell::progress))
            .collect();
        let handle = place(1, 0, |b| HandlePhase::decoded(b[0]), HandlePhase::progress);
        let worker = place(1, 0, |b| worker(b[0]), |(d, l)| progress::worker(d, l));
        let incidents_low = place(1, 0, |b| Some(b[0]), |b| flags(Incidents(b.into()), 0));
        let incidents_high = place(
            1,
            0,
            |b| Some(b[0]),
            |b| flags(Incidents(u16::from(b) << 8), 0),
        );
        let once = place(1, 0, |b| Some(b[0]), |b| flags(Incidents(0), b));
        let places = part(layout.requests, REQUEST_BYTES, request_places)
            .chain(part(layout.cells, layout.cell_bytes, cell_places))
            .chain(part(layout.handles, 1, vec![handle]))
            .chain(part(layout.workers, 1, vec![worker]))
            .chain([incidents_low, incidents_high, once])
            .collect();
        ProgressTable { places }
    }

    /// The measure of the state packed as `bytes` (the aggregators' bytes, after the
    /// cells', add nothing).
    pub fn of(&self, bytes: &[u8]) -> u32 {
        self.places
            .iter()
            .zip(bytes)
            .map(|(table, &b)| u32::from(table[usize::from(b)]))
            .sum()
    }
}

impl std::fmt::Debug for ProgressTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProgressTable({} places)", self.places.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code of every phase decodes to the phase that made it.
    #[test]
    fn codes_round_trip() {
        fn round_trip<T: Code + Copy + PartialEq + std::fmt::Debug>() {
            for &v in T::EVERY {
                assert_eq!(T::decode(v.code()), v);
            }
        }
        round_trip::<PrefillPhase>();
        round_trip::<DecodePhase>();
        round_trip::<SendPhase>();
        round_trip::<StorePhase>();
        round_trip::<LoadPhase>();
        round_trip::<StaleStore>();
        round_trip::<HandlePhase>();
        round_trip::<Metadata>();
        round_trip::<DecodeCell>();
    }

    /// A successor packed by copying the aggregators it shares with its parent has the
    /// bytes it packs to alone, on every transition of a small point, before and after
    /// its canonical form (which renames the aggregators of requests it reorders). The
    /// twin, which checks only that P's aggregator is shared, copies D's stale bytes on
    /// some transition.
    #[test]
    fn successors_pack_as_themselves() {
        let mut config = crate::config::tests::base();
        config.prefill.pcp = 2;
        // Two D workers: a first receive report opens a countdown in D's aggregator, a
        // change P's does not share.
        config.decode.tp = 2;
        config.requests = 2;
        config.faults.client_abort = true;
        config.faults.lost_notification = true;
        let model = crate::model::ContractModel::new(config);
        let (mut copied, mut twin_caught) = (0, false);
        let mut actions = Vec::new();
        for parent in model.reachable_states(usize::MAX) {
            let mut parent_bytes = Vec::new();
            pack(&parent, &mut parent_bytes);
            actions.clear();
            model
                .enabled_actions(&parent, &mut actions, u64::MAX)
                .expect("no cap on successors");
            for next in actions.iter().filter_map(|&a| model.apply(&parent, a)) {
                for state in [next.representative(), next] {
                    let (mut own, mut successor) = (Vec::new(), Vec::new());
                    pack(&state, &mut own);
                    pack_successor(&parent, &parent_bytes, &state, &mut successor);
                    assert_eq!(successor, own, "{state:?} after {parent:?}");
                    if Arc::ptr_eq(&state.prefill_aggregator, &parent.prefill_aggregator) {
                        copied += 1;
                        let mut twin = Vec::new();
                        pack_cells(&state, &mut twin);
                        let cells = twin.len();
                        twin.extend_from_slice(&parent_bytes[cells..]);
                        twin_caught |= twin != own;
                    }
                }
            }
        }
        assert!(copied > 1_000, "{copied} successors shared P's aggregator");
        assert!(
            twin_caught,
            "copying D's aggregator unchecked was not caught"
        );
    }

    /// The measure read off the packed bytes is the state's own, on every reachable state
    /// of points that use each part of a state (late and duplicated notifications for the
    /// 4-byte cells, offloading for the stores, two loading children on D for the child
    /// loads, a preemption on D for the request flags, faults for the incidents). The
    /// twin, a table that forgets the one-shot bits, is caught.
    #[test]
    fn packed_progress_is_the_states_own() {
        use crate::config::tests::base;
        use crate::config::{Connector, EngineFault};
        use crate::message::Delivery;
        let points: [fn(&mut crate::config::Config); 4] = [
            |c| {
                c.faults.client_abort = true;
                c.faults.lost_notification = true;
                c.delivery.notification = vec![Delivery::Late, Delivery::Duplicated];
            },
            |c| {
                c.connector = Connector::MultiOffload;
                c.consumer.loading_children = 2;
            },
            |c| {
                c.faults.missing_output_rank = EngineFault::Both;
                c.faults.worker_step_raises = EngineFault::Both;
                c.scheduler.failed_step = crate::config::FailedStep::RetryDropsReports;
                c.prefill.loads_kv = true;
            },
            |c| {
                c.faults.decode_preempted = true;
                c.decode.kv_blocks = Some(2);
                c.decode.tp = 2;
            },
        ];
        let (mut states, mut twin_caught) = (0, false);
        for edit in points {
            let mut config = base();
            config.prefill.pcp = 2;
            config.requests = 2;
            edit(&mut config);
            config.validate().expect("a valid point");
            let model = crate::model::ContractModel::new(config);
            let table = ProgressTable::new(model.topology, 2);
            let mut twin = table.clone();
            *twin.places.last_mut().expect("a one-shot byte") = [0; 256];
            for state in model.reachable_states(usize::MAX) {
                let mut bytes = Vec::new();
                pack(&state, &mut bytes);
                assert_eq!(table.of(&bytes), state.progress(), "{state:?}");
                twin_caught |= twin.of(&bytes) != state.progress();
                states += 1;
            }
        }
        assert!(states > 1_000, "{states} states");
        assert!(
            twin_caught,
            "a table without the one-shot bits was not caught"
        );
    }

    /// The codes of the cells' types order values as their types do (the request
    /// symmetry's keys compare codes); Metadata's do not, and are not read so.
    #[test]
    fn cell_codes_keep_their_types_order() {
        fn keeps_order<T: Code + Copy + Ord + std::fmt::Debug>() -> bool {
            T::EVERY.iter().all(|&a| {
                T::EVERY
                    .iter()
                    .all(|&b| a.cmp(&b) == a.code().cmp(&b.code()))
            })
        }
        assert!(keeps_order::<SendPhase>());
        assert!(keeps_order::<StorePhase>());
        assert!(keeps_order::<LoadPhase>());
        assert!(keeps_order::<StaleStore>());
        assert!(keeps_order::<HandlePhase>());
        assert!(keeps_order::<DecodeCell>());
        // The check can fail: Metadata's codes put Delivered before Due.
        assert!(!keeps_order::<Metadata>());
    }
}
