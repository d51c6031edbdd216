//! The model state: one compact, canonical value per reachable configuration.
//!
//! Per-(worker, request) facts live in flat vectors of one-to-four-byte cells indexed
//! `worker * requests + request`, stored inline up to typical sizes so that cloning a
//! state for each transition does not allocate. The checker keeps states packed into
//! short byte strings ([`crate::pack`]) between levels. Every phase enum is ordered by progress: the checker proves the state graph
//! acyclic by checking that [`State::progress`] grows on every transition.

use crate::topology::Topology;
use kvcc_aggregator::{Direction, Rank, SortedAggregator};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Which engine: P's (prefill) or D's (decode), each with its scheduler and aggregator.
#[derive(Clone, Copy)]
pub enum Engine {
    Prefill,
    Decode,
}

/// A request id in the model: its index, `0..requests`.
pub type RequestId = u8;

/// P's scheduler view of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PrefillPhase {
    /// Waiting for its own KV load (P loads KV: `WAITING_FOR_REMOTE_KVS` on P).
    LoadingKv,
    /// Being prefilled.
    Prefilling,
    /// Finished; `request_finished` returned True, blocks held until `finished_sending`.
    DelayFreed,
    /// Blocks freed on aggregated `finished_sending`.
    Released,
    /// Aborted before it finished: freed with no transfer planned.
    Dropped,
    /// Aborted after its delayed free and freed at once (scheduler `abort-finished = free`).
    AbortFreed,
    /// Aborted while waiting for its own KV load: finished (`FINISHED_ABORTED`), its
    /// blocks held until the load's `finished_recving` says the workers stopped writing,
    /// then freed with nothing to send (`scheduler.abort-loading = "delay-free"`; vLLM
    /// 0.34's `finish_requests` treats a load on P as one on D).
    AbortedLoadingKv,
    /// Finished by the in-flight output of its final step after a preemption had freed
    /// its blocks: nothing delay-freed, nothing to send, and D handed transfer
    /// parameters that name no blocks (`scheduler.final-step-preemption =
    /// "finishes-empty"`).
    FinishedEmpty,
}

/// D's scheduler view of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum DecodePhase {
    /// Not at D yet; D admits it once P has finished it.
    Pending,
    /// `WAITING_FOR_REMOTE_KVS`: blocks held while D workers load.
    Loading,
    /// Aborted while loading; its free waits for `finished_recving`.
    AbortedLoading,
    /// Woken: its KV is loaded and it runs.
    Running,
    /// Woken with a failed load: errored or recomputed, its blocks released.
    Failed,
    /// Freed after an abort.
    Freed,
    /// Aborted before D admitted it, or dropped on P: D never sees it.
    Gone,
    /// D crashed before reading it.
    Crashed,
    /// In D's waiting queue without blocks: the pool (`decode.kv-blocks`) had no room
    /// when the scheduler's scan reached it, or the scan stopped before it.
    Queued,
    /// Its load was reported, and it waits (holding the prefix's block) for the block it
    /// needs to run; promoted by a later scan (`_update_waiting_for_remote_kv`). Only
    /// with a finite pool: without one it runs at once.
    Loaded,
    /// Ran to its end and released its blocks (only modelled with a finite pool, where
    /// the blocks matter).
    Done,
    /// Skipped with no blocks: its connector's lookup had not answered when the scan
    /// reached it (`get_num_new_matched_tokens` returned None), so it waits, in its place
    /// by arrival, for the lookup (`consumer.async-lookup`): in `waiting`, behind every
    /// request holding blocks (current vLLM), or in `skipped_waiting` ahead of them (up to
    /// 0.30; `scheduler.scan-order`).
    Deferred,
    /// Still skipped with no blocks, its lookup answered: the next scan to reach it tries
    /// to admit it where it stands.
    LookedUp,
    /// Back in WAITING with no blocks and nothing to load, to be prefilled locally: the
    /// scan admits it as a local prefill, which needs the whole sequence's blocks. Its
    /// load failed and `kv_load_failure_policy = "recompute"` sent it back, in its place
    /// by arrival (only with a finite pool: without one it runs at once); or D preempted
    /// it after its load and its connector offers nothing again
    /// ([`Request::decode_preempted`], `consumer.lookup-after-load = "local-prefill"`).
    Recomputing,
    /// Running in the step that loads its KV synchronously (`consumer.load =
    /// "synchronous"`): scheduled at once with its whole sequence's blocks, its load
    /// metadata travels with the step, and the step's forward pass waits for the load
    /// (`wait_for_layer_load`), so D's engine completes no step until every worker has
    /// stopped loading it.
    SyncLoading,
    /// Its synchronous load failed and the scheduler rewound it to recompute
    /// (`kv_load_failure_policy = "recompute"`), keeping it running; with two batches in
    /// flight, a step scheduled before the rewind still runs on the blocks the load never
    /// filled, and its output arrives with D's next step
    /// (`scheduler.rewound-in-flight-output`).
    Rewound,
}

impl PrefillPhase {
    /// Freed and removed from P scheduler's `requests`: a completion naming it finds
    /// nothing (`scheduler.unknown-completion`).
    pub fn forgotten(self) -> bool {
        matches!(
            self,
            PrefillPhase::Released
                | PrefillPhase::Dropped
                | PrefillPhase::AbortFreed
                | PrefillPhase::FinishedEmpty
        )
    }
}

impl DecodePhase {
    /// Freed and removed from D scheduler's `requests` (an error under
    /// `kv_load_failure_policy = "fail"` included): a completion naming it finds nothing
    /// (`scheduler.unknown-completion`).
    pub fn forgotten(self) -> bool {
        matches!(
            self,
            DecodePhase::Failed | DecodePhase::Freed | DecodePhase::Gone | DecodePhase::Done
        )
    }

    /// Blocks of D's pool the request holds (`decode.kv-blocks`): the prefix's from
    /// admission until it is freed, the rest's while it runs. An aborted load keeps its
    /// block until `finished_recving` says the workers stopped writing into it.
    pub fn blocks(self) -> u8 {
        match self {
            DecodePhase::Loading | DecodePhase::AbortedLoading | DecodePhase::Loaded => 1,
            DecodePhase::Running | DecodePhase::SyncLoading | DecodePhase::Rewound => 2,
            _ => 0,
        }
    }

    /// In D's scheduler queues (waiting, or skipped while it loads or looks up), in
    /// arrival order.
    pub fn queued(self) -> bool {
        self.unscheduled() || self == DecodePhase::Loading
    }

    /// At D and not running, with nothing left to wait for but the scheduler's scan (or
    /// a lookup): a run that ends here never schedules it.
    pub fn unscheduled(self) -> bool {
        matches!(
            self,
            DecodePhase::Queued
                | DecodePhase::Deferred
                | DecodePhase::LookedUp
                | DecodePhase::Loaded
                | DecodePhase::Recomputing
        )
    }

    /// In a synchronous load's own life (`consumer.load = "synchronous"`): running in the
    /// step that loads, or rewound with a step in flight. D's engine steps for it, and
    /// no recorder logs it (it waits in no queue and reports no completion).
    pub fn sync_load(self) -> bool {
        matches!(self, DecodePhase::SyncLoading | DecodePhase::Rewound)
    }

    /// Skipped with no blocks held: what vLLM PR #57841 keeps loads from being admitted
    /// behind.
    pub fn skipped_without_blocks(self) -> bool {
        matches!(self, DecodePhase::Deferred | DecodePhase::LookedUp)
    }
}

/// How far a request's connector metadata is on its way to an engine's workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Metadata {
    NotQueued,
    /// Delivered by the engine step after this many more steps.
    Due(u8),
    Delivered,
}

/// NIXL's send side on one P rank for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SendPhase {
    /// Knows the request from its batch (`_reqs_to_process`) and counts notifications;
    /// no send metadata yet.
    InBatch,
    /// Send metadata arrived (`_reqs_to_send`): the lease, if any, runs.
    ToSend,
    /// The lease expired, but the reaper has not reached it: it stops at an earlier
    /// entry whose lease is still live (`producer.lease-reaper = "head-only"`).
    Expired,
    /// Completion reached (notifications, lease expiry, or synthetic): reported next step.
    Done,
    Reported,
    /// Reported, but the connector cleared the report before it reached the aggregator
    /// (the clear of replicated ranks' sends, #52779 / #53781).
    Cleared,
    /// Never reports this request.
    Silent,
    /// A notification arrived after the rank had reported the request, and the rank
    /// reports it again at its next step (`producer.notification-after-report =
    /// "reported-again"`).
    ReportsAgain,
    /// Reported a second time.
    ReportedAgain,
}

/// The offloading child's CPU store on one P worker (MultiConnector only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum StorePhase {
    NotUsed,
    Storing,
    Stored,
    /// The store raised and was never counted down (`producer.failed-store = "leaked"`).
    Leaked,
}

/// The offloading child's store job started before a preemption of the request, on one
/// P worker (`faults.prefill-preempted`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum StaleStore {
    None,
    Running,
    Done,
}

/// A P worker's own KV load for one request (P loads KV only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum LoadPhase {
    NotUsed,
    Loading,
    Done,
    Reported,
}

/// One P worker's view of one request. Ordered field by field, as a derived order would
/// be ([`PrefillCell::order_key`]). Laid out in declaration order, so that the key is
/// the cell's bytes loaded in place (rustc's own layout scattered them, and each key took
/// a dozen shifts: 2% of a head-only reaper's search).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(C)]
pub struct PrefillCell {
    /// D notifications counted (`consumer_notification_counts_by_req`).
    pub notifications: u8,
    /// D notifications on their way to this rank (`delivery.notification` late or
    /// duplicated; always 0 otherwise).
    pub in_flight: u8,
    /// Notifications that arrived after the rank was done with the request, which vLLM
    /// only logs (`_get_new_notifs`: "unrecognized request").
    pub dropped: u8,
    pub send: SendPhase,
    pub store: StorePhase,
    pub load: LoadPhase,
    pub stale_store: StaleStore,
}

impl PrefillCell {
    /// The cell as one number that orders cells as comparing their fields in declaration
    /// order does (each field a byte: a count, or a phase's discriminant, which is its
    /// place in its type's order). The symmetry reduction sorts columns of cells that are
    /// mostly equal, where comparing field by field walks all seven fields.
    pub fn order_key(self) -> u64 {
        let PrefillCell {
            notifications,
            in_flight,
            dropped,
            send,
            store,
            load,
            stale_store,
        } = self;
        u64::from_be_bytes([
            0,
            notifications,
            in_flight,
            dropped,
            send as u8,
            store as u8,
            load as u8,
            stale_store as u8,
        ])
    }
}

impl PartialOrd for PrefillCell {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PrefillCell {
    fn cmp(&self, other: &Self) -> Ordering {
        self.order_key().cmp(&other.order_key())
    }
}

/// One D read handle for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum HandlePhase {
    NotPosted,
    Handshaking,
    /// RDMA posted: reading P's blocks and writing D's.
    Reading,
    Done,
    Failed,
}

/// One D worker's view of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum DecodeCell {
    Idle,
    /// Metadata arrived; its handles are running.
    Loading,
    /// Ready to report `finished_recving` next step (`failed`: also `failed_recving`).
    Done {
        failed: bool,
    },
    Reported,
    /// Will never report this request.
    Silent,
    /// Reported, and the connector reports it once more next step
    /// (`faults.child-reports-twice`).
    ReportsAgain,
    /// Reported twice.
    ReportedTwice,
}

/// Contract breaches seen on a transition (not visible in the resulting state alone).
/// Sticky, so a property can point at the state where they happened.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Incidents(pub u16);

impl Incidents {
    /// P's scheduler got `finished_sending` for a request it no longer holds.
    pub const SEND_FOR_UNKNOWN: u16 = 1 << 0;
    /// D's scheduler got `finished_recving` for a request it no longer waits for.
    pub const RECV_FOR_UNKNOWN: u16 = 1 << 1;
    /// An id was emitted a second time in one direction.
    pub const EMITTED_TWICE: u16 = 1 << 2;
    /// A report was counted for an id already emitted (a countdown reopened).
    pub const REOPENED: u16 = 1 << 3;
    /// A P rank reported a send for a request whose free was never delayed.
    pub const SEND_WITHOUT_DELAY: u16 = 1 << 4;
    /// Strict refusals, by kind.
    pub const STRICT_DUPLICATE: u16 = 1 << 5;
    pub const STRICT_AFTER_EMISSION: u16 = 1 << 6;
    pub const STRICT_BEYOND_EXPECTED: u16 = 1 << 7;
    pub const STRICT_UNANNOUNCED: u16 = 1 << 8;
    /// P's loads emitted for a request no longer loading.
    pub const LOAD_FOR_UNKNOWN: u16 = 1 << 9;
    /// P freed a request's blocks only because a lease expired, and no injected fault
    /// touched the request: the happy path never completed, and the lease hid it.
    pub const FREED_BY_LEASE_ALONE: u16 = 1 << 10;
    /// A worker other than the output rank handed the aggregator no output (`None`).
    pub const NONE_OUTPUT: u16 = 1 << 11;
    /// A P rank's reaper left a request whose lease had expired, stopping at an earlier
    /// entry whose lease was still live.
    pub const LEASE_SKIPPED: u16 = 1 << 12;
    /// A worker forwarded a request it had forwarded before (Countdown counts it again;
    /// Strict's refusal of the same report is [`Incidents::STRICT_DUPLICATE`]), before
    /// the request was emitted, or after.
    pub const REPORTED_TWICE: u16 = 1 << 13;
    pub const REPORTED_AFTER_EMISSION: u16 = 1 << 14;
    /// D admitted a load whose transfer parameters name no remote blocks: NIXL asserts
    /// and D's engine dies.
    pub const EMPTY_TRANSFER_PARAMS: u16 = 1 << 15;

    pub fn has(self, bit: u16) -> bool {
        self.0 & bit != 0
    }

    pub fn set(&mut self, bit: u16) {
        self.0 |= bit;
    }
}

/// Scheduler-level facts of one request on both engines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Request {
    pub prefill: PrefillPhase,
    pub decode: DecodePhase,
    /// Send metadata on its way to P's workers.
    pub send_meta: Metadata,
    /// Load metadata on its way to D's workers.
    pub recv_meta: Metadata,
    /// D hit its whole prompt in the local prefix cache: no reads, notify-only.
    pub prefix_hit: bool,
    pub aborted: bool,
    /// Emissions so far: bit 0 sends (P), bit 1 loads (P), bit 2 receives (D), bit 3 a
    /// failed load D's scheduler acted on (`failed_recving` or invalid blocks).
    pub emitted: u8,
    /// How a lease came to free it, kept (with leases on) until P frees its blocks:
    /// [`Request::FAULTED`], [`Request::LEASE_EXPIRED`].
    pub rescue: u8,
    /// Its place in P's `_reqs_to_send`: how many of the entries still in it are ahead
    /// of it (requests whose metadata arrives in one step go in id order, behind every
    /// entry), unique and dense over the entries ([`crate::rank::renumber_queue`]), 0 for
    /// a request not in it. Kept only where the reaper reads it
    /// ([`crate::topology::Topology::ordered_leases`]), else 0.
    pub queued_after: u8,
    /// Its place in D's queues among the requests still in them
    /// ([`DecodePhase::queued`]), kept dense; 0 elsewhere and without a finite pool.
    pub arrival: u8,
    /// D preempted it once its load had landed (`faults.decode-preempted`, at most once
    /// a request): from then on its D phase is its second life at D, a local prefill or
    /// a second load no one sets up (`consumer.lookup-after-load`).
    pub decode_preempted: bool,
    /// D delivered a token computed on KV its synchronous load never filled: the output
    /// of a step scheduled before the scheduler rewound the request
    /// (`scheduler.rewound-in-flight-output = "delivered"`).
    pub stale_token: bool,
}

impl Request {
    pub const EMITTED_SEND: u8 = 1;
    pub const EMITTED_LOAD: u8 = 2;
    pub const EMITTED_RECV: u8 = 4;
    pub const EMITTED_FAILURE: u8 = 8;
    /// An injected fault touched the request (its own, or a lost engine output).
    pub const FAULTED: u8 = 1;
    /// A P rank's lease on it expired.
    pub const LEASE_EXPIRED: u8 = 2;
}

/// Where the symmetric blocks of a topology are. Shared by all states of a model and
/// invisible to hashing and equality: it is the same for every state. A plain reference:
/// a shared `Arc` cost a refcount write on one contended cache line at every state clone
/// and drop (~7% of a 2-thread search).
#[derive(Clone, Copy)]
pub struct Shape(pub &'static Topology);

impl Hash for Shape {
    fn hash<H: Hasher>(&self, _: &mut H) {}
}
impl PartialEq for Shape {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for Shape {}
impl PartialOrd for Shape {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Shape {
    fn cmp(&self, _: &Self) -> Ordering {
        Ordering::Equal
    }
}
impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Shape")
    }
}

/// `Debug` prints the state's named facts (see [`crate::describe`]).
#[derive(PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct State {
    /// Per request, indexed by [`RequestId`].
    pub requests: SmallVec<[Request; 3]>,
    /// Per (P rank, request).
    pub prefill: SmallVec<[PrefillCell; 16]>,
    /// Per (read handle, request).
    pub handles: SmallVec<[HandlePhase; 16]>,
    /// Per (D rank, request): NIXL's side of the worker.
    pub decode: SmallVec<[DecodeCell; 16]>,
    /// Per (D rank, request): the offloading child's own load, when two MultiConnector
    /// children load each request (`consumer.loading-children`).
    pub child_loads: SmallVec<[LoadPhase; 16]>,
    /// P's aggregator: the real one. Shared copy-on-write: most transitions (reads,
    /// notifications, leases) leave both aggregators alone, and cloning their maps for
    /// every successor was a tenth of the search. Mutate through
    /// [`State::aggregator_mut`].
    pub prefill_aggregator: Arc<SortedAggregator<RequestId>>,
    /// D's aggregator: the real one, shared as P's is.
    pub decode_aggregator: Arc<SortedAggregator<RequestId>>,
    pub incidents: Incidents,
    /// One-shot faults and announcements already used (the `ONCE_` bits).
    pub once: u8,
    pub shape: Shape,
}

/// Every transition copies its state. The cells are `Copy`, so each vector is copied as
/// one block: a derived clone copies a `SmallVec` element by element (a tenth of a
/// search's instructions went there). (A field added to `State` must be named here: the
/// literal below, and the pattern in `clone_from`, do not compile without it.)
impl Clone for State {
    fn clone(&self) -> State {
        State {
            requests: SmallVec::from_slice(&self.requests),
            prefill: SmallVec::from_slice(&self.prefill),
            handles: SmallVec::from_slice(&self.handles),
            decode: SmallVec::from_slice(&self.decode),
            child_loads: SmallVec::from_slice(&self.child_loads),
            prefill_aggregator: Arc::clone(&self.prefill_aggregator),
            decode_aggregator: Arc::clone(&self.decode_aggregator),
            incidents: self.incidents,
            once: self.once,
            shape: self.shape,
        }
    }

    /// Copies `source` into this state's own storage: the search steps every successor
    /// of a state in one scratch state.
    fn clone_from(&mut self, source: &State) {
        let State {
            requests,
            prefill,
            handles,
            decode,
            child_loads,
            prefill_aggregator,
            decode_aggregator,
            incidents,
            once,
            shape,
        } = source;
        fn copy<T: Copy, const N: usize>(to: &mut SmallVec<[T; N]>, from: &[T])
        where
            [T; N]: smallvec::Array<Item = T>,
        {
            // Every state of a model has vectors of the same lengths: one copy, where
            // clearing and extending made two library calls per vector.
            if to.len() == from.len() {
                to.copy_from_slice(from);
            } else {
                to.clear();
                to.extend_from_slice(from);
            }
        }
        copy(&mut self.requests, requests);
        copy(&mut self.prefill, prefill);
        copy(&mut self.handles, handles);
        copy(&mut self.decode, decode);
        copy(&mut self.child_loads, child_loads);
        self.prefill_aggregator.clone_from(prefill_aggregator);
        self.decode_aggregator.clone_from(decode_aggregator);
        self.incidents = *incidents;
        self.once = *once;
        self.shape = *shape;
    }
}

impl State {
    pub const ONCE_PREFILL_OUTPUT_LOST: u8 = 1;
    pub const ONCE_DECODE_OUTPUT_LOST: u8 = 2;
    pub const ONCE_COUNT_ANNOUNCED: u8 = 4;
    pub const ONCE_PREFILL_STEP_RAISED: u8 = 8;
    pub const ONCE_DECODE_STEP_RAISED: u8 = 16;
    pub const ONCE_CHILD_REPORTED_TWICE: u8 = 32;
    pub const ONCE_PREFILL_PREEMPTED: u8 = 64;
    pub const ONCE_FINAL_STEP_PREEMPTED: u8 = 128;

    pub fn request_count(&self) -> usize {
        self.requests.len()
    }

    /// Free blocks of D's pool (`decode.kv-blocks`): the pool less what its requests hold
    /// ([`DecodePhase::blocks`]); None without a finite pool.
    pub fn decode_blocks_free(&self) -> Option<u8> {
        let held: u8 = self.requests.iter().map(|q| q.decode.blocks()).sum();
        self.topology().decode_blocks.map(|pool| {
            pool.checked_sub(held)
                .expect("D holds no more blocks than its pool")
        })
    }

    pub fn prefill_cell(&self, rank: Rank, r: RequestId) -> &PrefillCell {
        &self.prefill[usize::from(rank) * self.requests.len() + usize::from(r)]
    }

    pub fn prefill_cell_mut(&mut self, rank: Rank, r: RequestId) -> &mut PrefillCell {
        let n = self.requests.len();
        &mut self.prefill[usize::from(rank) * n + usize::from(r)]
    }

    pub fn handle(&self, handle: usize, r: RequestId) -> HandlePhase {
        self.handles[handle * self.requests.len() + usize::from(r)]
    }

    pub fn handle_mut(&mut self, handle: usize, r: RequestId) -> &mut HandlePhase {
        let n = self.requests.len();
        &mut self.handles[handle * n + usize::from(r)]
    }

    pub fn decode_cell(&self, rank: Rank, r: RequestId) -> DecodeCell {
        self.decode[usize::from(rank) * self.requests.len() + usize::from(r)]
    }

    pub fn decode_cell_mut(&mut self, rank: Rank, r: RequestId) -> &mut DecodeCell {
        let n = self.requests.len();
        &mut self.decode[usize::from(rank) * n + usize::from(r)]
    }

    pub fn child_load(&self, rank: Rank, r: RequestId) -> LoadPhase {
        self.child_loads[usize::from(rank) * self.requests.len() + usize::from(r)]
    }

    pub fn child_load_mut(&mut self, rank: Rank, r: RequestId) -> &mut LoadPhase {
        let n = self.requests.len();
        &mut self.child_loads[usize::from(rank) * n + usize::from(r)]
    }

    /// Is any D worker's offloading child still writing request `r`'s blocks?
    pub fn child_loading(&self, r: RequestId) -> bool {
        (0..self.topology().decode_world).any(|d| self.child_load(d, r) == LoadPhase::Loading)
    }

    /// `engine`'s aggregator, shared with other states.
    pub fn aggregator(&self, engine: Engine) -> &Arc<SortedAggregator<RequestId>> {
        match engine {
            Engine::Prefill => &self.prefill_aggregator,
            Engine::Decode => &self.decode_aggregator,
        }
    }

    /// `engine`'s aggregator, unshared first if another state holds it too.
    pub fn aggregator_mut(&mut self, engine: Engine) -> &mut SortedAggregator<RequestId> {
        Arc::make_mut(match engine {
            Engine::Prefill => &mut self.prefill_aggregator,
            Engine::Decode => &mut self.decode_aggregator,
        })
    }

    /// Tells `engine`'s aggregator that the scheduler expects reports for `r`
    /// ([`kvcc_aggregator::Aggregator::announce`]). Under a policy that ignores it
    /// (`Countdown`, vLLM's) the aggregator stays shared: unsharing it copied it for
    /// nothing, and kept the successor from reusing its parent's packed bytes.
    pub fn announce(&mut self, engine: Engine, direction: Direction, r: RequestId) {
        if self.aggregator(engine).keeps_announcements() {
            self.aggregator_mut(engine).announce(direction, r);
        }
    }

    /// Tells `engine`'s aggregator that the scheduler forgot `r`
    /// ([`kvcc_aggregator::Aggregator::retire`]), unsharing it only where that is kept,
    /// as [`State::announce`].
    pub fn retire(&mut self, engine: Engine, direction: Direction, r: RequestId) {
        if self.aggregator(engine).keeps_announcements() {
            self.aggregator_mut(engine).retire(direction, &r);
        }
    }

    pub fn topology(&self) -> &'static Topology {
        self.shape.0
    }

    /// Any of request `r`'s read handles still moving data?
    pub fn reading(&self, r: RequestId) -> bool {
        (0..self.topology().handles.len()).any(|h| self.handle(h, r) == HandlePhase::Reading)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::Code;

    /// Cells sorted by their order key come out as sorting by their fields in declaration
    /// order does, over every phase and a few counts; the twin, a key with two fields
    /// swapped, sorts them otherwise, so the check sees the field order.
    #[test]
    fn order_key_orders_cells_field_by_field() {
        let mut cells = Vec::new();
        for (notifications, in_flight, dropped) in [(0, 0, 0), (0, 1, 0), (1, 0, 2), (2, 1, 1)] {
            for &send in SendPhase::EVERY {
                for &store in StorePhase::EVERY {
                    for &load in LoadPhase::EVERY {
                        for &stale_store in StaleStore::EVERY {
                            cells.push(PrefillCell {
                                notifications,
                                in_flight,
                                dropped,
                                send,
                                store,
                                load,
                                stale_store,
                            });
                        }
                    }
                }
            }
        }
        cells.reverse();
        let fields = |c: &PrefillCell| {
            (
                c.notifications,
                c.in_flight,
                c.dropped,
                c.send,
                c.store,
                c.load,
                c.stale_store,
            )
        };
        let mut by_fields = cells.clone();
        by_fields.sort_by_key(fields);
        let mut by_key = cells.clone();
        by_key.sort();
        assert_eq!(by_key, by_fields);
        let mut swapped = cells;
        swapped.sort_by_key(|c| {
            (
                c.notifications,
                c.in_flight,
                c.dropped,
                c.send,
                c.store,
                c.stale_store,
                c.load,
            )
        });
        assert_ne!(
            swapped, by_fields,
            "a key with two fields swapped was not caught"
        );
    }
}
