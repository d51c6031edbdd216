//! What one contract scenario fixes: topology, connector and scheduler behaviours, and
//! which faults may happen. Spec files deserialize straight into [`Config`]; every field
//! is named after the vLLM behaviour it selects (docs/contracts.md §2–§9).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most requests a model tracks at once. Requests are independent except through the
/// shared aggregators and engine steps, which is where the interesting interleavings are.
pub const MAX_REQUESTS: usize = 3;

/// The most ranks of one kind (TP, PP, PCP, DCP) a model tracks on an engine.
pub const MAX_RANKS: u16 = 16;

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    pub prefill: Prefill,
    pub decode: Decode,
    /// Requests in flight.
    #[schemars(range(min = 1, max = MAX_REQUESTS))]
    pub requests: u8,
    /// vLLM's `max_concurrent_batches`: with 2 (async scheduling or PP) a worker learns of
    /// a request finished in step k only at step k+1. Default 2: vLLM 0.34.0 turns async
    /// scheduling on unless something is incompatible (config/vllm.py,
    /// `VllmConfig.__post_init__`), and `max_concurrent_batches` is then pp + 1.
    #[serde(default = "two")]
    #[schemars(range(min = 1, max = 2))]
    pub max_concurrent_batches: u8,
    /// What the connector's `get_finished_count()` returns; `E` of both aggregators.
    pub expected_count: ExpectedCount,
    /// A count a worker output announces later (`expected_finished_count`), if any.
    #[serde(default)]
    pub announced_count: Option<ExpectedCount>,
    /// The aggregator policy: vLLM's countdown, or kvcc's strict one.
    #[serde(default)]
    pub policy: AggregatorPolicy,
    /// Which KV connector moves the KV.
    #[serde(default)]
    pub connector: Connector,
    /// Which side moves the KV.
    #[serde(default)]
    pub transfer: Transfer,
    #[serde(default)]
    pub producer: Producer,
    #[serde(default)]
    pub consumer: Consumer,
    #[serde(default)]
    pub scheduler: Scheduler,
    #[serde(default)]
    pub faults: Faults,
    #[serde(default)]
    pub delivery: Delivery,
}

/// The delivery faults a spec injects, per message that crosses a boundary (`[delivery]`;
/// the messages and what their receivers do in each state: docs/contracts.md §11,
/// [`crate::message`]). Off by default: vLLM's transports deliver these messages once
/// and promptly enough for the orders the model already explores.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Delivery {
    /// D's notification to the P rank it read ("request_id:expected_consumers", sent by
    /// NIXL with the read; counted by the P worker's `_get_new_notifs`). `late`: it
    /// travels as an event of its own, so P's lease, its reaper and its reports may all
    /// move on before it arrives; `duplicated`: a read's notification arrives twice;
    /// `lost`: it never arrives (also spelled `faults.lost-notification`).
    #[schemars(extend("uniqueItems" = true))]
    pub notification: Vec<crate::message::Delivery>,
}

fn two() -> u8 {
    2
}

/// The prefill instance P.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Prefill {
    /// Tensor parallelism (required).
    #[schemars(range(min = 1, max = MAX_RANKS))]
    pub tp: u16,
    /// Pipeline parallelism.
    #[serde(default = "one_u16")]
    #[schemars(range(min = 1, max = MAX_RANKS))]
    pub pp: u16,
    /// Prefill context parallelism.
    #[serde(default = "one_u16")]
    #[schemars(range(min = 1, max = MAX_RANKS))]
    pub pcp: u16,
    /// Decode context parallelism, carved out of TP (must divide tp).
    #[serde(default = "one_u16")]
    #[schemars(range(min = 1, max = MAX_RANKS))]
    pub dcp: u16,
    /// How PCP ranks hold the KV.
    #[serde(default)]
    pub layout: PcpLayout,
    /// How the KV heads spread across TP.
    #[serde(default)]
    pub attention: Attention,
    /// P also loads KV before prefilling (a `kv_both` role, or the offloading child's CPU
    /// loads): every worker loads its own copy and reports `finished_recving`.
    #[serde(default)]
    pub loads_kv: bool,
    /// P's connector saves a request while it loads it, and delays the free of a request
    /// aborted during its load for the save too: every P worker then reports the aborted
    /// request in `finished_sending` (at its next step, its save done) as well as in
    /// `finished_recving` once its load stops. LMCache does (kv_role kv_both: vLLM issue
    /// #46240, where both land in one step; LMCache PR #4284), as any kv_both connector
    /// whose `request_finished` delays an aborted request's free. vLLM 0.34's NIXL alone
    /// does not: `nixl/pull_scheduler.py:request_finished` delays no free for a request
    /// that did not stop normally. Needs `loads-kv`.
    #[serde(default)]
    pub saves_while_loading: bool,
    /// What a rank of a pipeline stage before the last returns each step (only with
    /// `pp` > 1): its connector part in an otherwise empty output, or nothing at all.
    #[serde(default)]
    pub pp_stage_output: StageOutput,
}

/// What a worker outside the last pipeline stage returns from a step when a KV connector
/// is configured (vllm/v1/worker/gpu_model_runner.py, `sample_tokens`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StageOutput {
    /// An empty model-runner output that carries the rank's KV-connector output, so the
    /// aggregator counts its reports: current vLLM (PR #28768 restored it, after
    /// #26866's async-scheduling refactor lost it).
    #[default]
    ConnectorOutput,
    /// No output (`None`): #26866's regression, fixed by #28768. vLLM's aggregator asserts
    /// that every worker other than the output rank handed it an output, so the first P
    /// step with PP kills the engine (vllm-ascend #4973 hit the same assert).
    None,
}

fn one_u16() -> u16 {
    1
}

/// The decode instance D.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Decode {
    /// Tensor parallelism (required); P tp and D tp must divide one another.
    #[schemars(range(min = 1, max = MAX_RANKS))]
    pub tp: u16,
    /// D's KV block pool, in blocks of one request's share: every request needs two,
    /// one for the prefix it loads from P and one for the rest of its sequence once it
    /// runs. Absent: the pool always has room (no admission ever waits for blocks).
    /// vLLM allocates a remote load's blocks when its scheduler admits the request
    /// (v1/core/sched/scheduler.py, `schedule`, `load_kv_async`), and a scan of the
    /// waiting queues stops at the first request it cannot allocate for.
    #[serde(default)]
    #[schemars(range(min = 2, max = 2 * MAX_REQUESTS))]
    pub kv_blocks: Option<u8>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PcpLayout {
    /// Every PCP rank holds an equivalent copy; only PCP rank 0 serves reads.
    #[default]
    Replicated,
    /// PCP+DCP: every PCP rank serves its own slice and reports real completions.
    Sharded,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Attention {
    /// KV heads split across TP: a D rank reads a head slice from each P rank it covers.
    #[default]
    Dense,
    /// KV replicated across TP: a D rank reads one P rank and notifies the rest.
    Mla,
}

/// `get_finished_count()`, evaluated on each engine's own topology.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ExpectedCount {
    /// The connector returns None: the aggregator falls back to `world_size`.
    WorldSize,
    /// `world_size // pcp_size` (= TP × PP): #52779's count, and the alternative fix
    /// discussed on #59325.
    WorldSizeOverPcp,
    /// A fixed number on every engine.
    Fixed(#[schemars(range(min = 1))] u16),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AggregatorPolicy {
    #[default]
    Countdown,
    Strict,
}

/// How NIXL moves a request's KV from P to D.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Transfer {
    /// D reads P's blocks and notifies P, which counts the notifications (NIXL's
    /// default).
    #[default]
    PullReads,
    /// P writes into D's blocks (nixl/push_worker.py, vLLM PR #35264): a P rank's send
    /// completes when its own WRITEs do, and each WRITE notifies the D rank it wrote,
    /// which counts them (one per P rank writing into it) before reporting the load.
    PushWrites,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Connector {
    /// The NIXL connector alone.
    #[default]
    Nixl,
    /// MultiConnector(NIXL, an offloading child): the child's count is None, it delays the
    /// free per worker until its CPU store finishes, and reports loads on every worker.
    MultiOffload,
}

/// The P-side worker behaviour of the connector.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Producer {
    /// What replicated PCP ranks > 0 report.
    pub replicated_reports: ReplicatedReports,
    /// The connector clears replicated ranks' sends (#52779's clear, carried over by #53781).
    pub clear_replicated: bool,
    /// A lease (`kv_lease_duration`) per P rank: expiry reports the request as sent.
    pub lease: bool,
    pub mla_notify: MlaNotify,
    pub lease_reaper: LeaseReaper,
    pub push_completion: PushCompletion,
    pub failed_store: FailedStore,
    pub store_ledger: StoreLedger,
    pub notification_after_report: NotificationAfterReport,
    pub notification_count: NotificationCount,
}

/// When a P rank read by several D ranks (heterogeneous TP with D tp > P tp, DCP or PCP
/// fan-in) reports a request sent. vLLM 0.34's NIXL worker counts D's notifications
/// against the number each one announces (`request_id:expected_consumers`) and reports
/// the request only when the last reader has notified (nixl/pull_worker.py:
/// `_get_new_notifs`, the count vLLM PR #18833 introduced for heterogeneous TP).
/// vllm-ascend's Mooncake connector freed a prefill rank's blocks at every decode rank's
/// `DONE_RECVING_MSG` until PR #5224 counted the times the rank would be pulled: the first
/// reader's message freed blocks the others were still reading, and later ones freed
/// them again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NotificationCount {
    /// Reported once every reader has notified (current vLLM).
    #[default]
    Counted,
    /// Reported at each notification: the first reader's, and again at a later one's.
    Each,
}

/// What a P rank does with a D notification for a request it has already reported sent
/// (its lease expired first, or a duplicate arrived after the count completed). vLLM
/// 0.34's NIXL worker no longer tracks the id and logs and drops it
/// (nixl/pull_worker.py:_get_new_notifs). vllm-ascend's Mooncake connector reported the
/// request finished again once D's pull completed after P's timeout had freed it, and
/// P's scheduler asserted on the id (vllm-ascend #6570, fixed by PR #5726). The model
/// re-reports a request at most once per rank.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NotificationAfterReport {
    /// Logged and dropped (current vLLM).
    #[default]
    Dropped,
    /// Reported finished again at the rank's next step.
    ReportedAgain,
}

/// How the store connector counts a request's outstanding store jobs, which decide when
/// the worker forwards its send (connector = multi-offload).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StoreLedger {
    /// Each job is its own entry (vLLM PR #52372, current): a job started before a
    /// preemption completes on its own.
    PerJob,
    /// One count per request id (the MooncakeStore connector before #52372, vLLM issue
    /// #51637): a preemption deletes the count while the jobs it started still run, the
    /// request's next prefill starts a fresh count under the same id, and the old jobs'
    /// completions count it down: it drains while a new job still runs, or goes below
    /// zero and the send is never forwarded.
    PerRequest,
}

/// What the offloading child does with a store job that raises
/// (`faults.offload-store-raises`): it forwards a request's send only once the request's
/// store jobs are counted down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FailedStore {
    /// Counted down all the same, so the send goes out (vLLM PR #43742 decrements the
    /// MooncakeStore connector's count in a `finally`): current vLLM.
    Counted,
    /// Never counted down: the worker holds the send for ever and P never frees the
    /// request (before #43742; vllm-ascend #10098 stalled the same way).
    Leaked,
}

/// What a P rank does with its own WRITEs' completions (`transfer = "push-writes"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PushCompletion {
    /// Reported as sent once every WRITE of the request is done (vLLM PR #58188).
    Reported,
    /// Filtered out: #56104 routed push completions through the receive-side
    /// bookkeeping, where P's WRITEs are unknown, so P never reports a pushed request
    /// and only its lease frees the blocks (the regression #58188 fixes).
    Filtered,
}

/// How a P worker's `get_finished` reaps expired leases from `_reqs_to_send`, a dict in
/// insertion order (vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LeaseReaper {
    /// From the oldest entry, stopping at the first lease not yet expired: vLLM before
    /// PR #50789, which assumed deadlines follow insertion order. D's heartbeats (vLLM PR
    /// #41383) renew a lease in place, so a renewed entry keeps its early position with
    /// a late deadline, and expired leases behind it stay held (vLLM issue #58222).
    HeadOnly,
    /// Every entry, whatever its position: current vLLM (PR #50789; 0.34.0's
    /// `_reap_expired_send_leases` in nixl/base_worker.py).
    FullScan,
}

impl Default for Producer {
    fn default() -> Self {
        Producer {
            replicated_reports: ReplicatedReports::Synthetic,
            clear_replicated: false,
            lease: true,
            mla_notify: MlaNotify::EveryCoveredRank,
            lease_reaper: LeaseReaper::FullScan,
            push_completion: PushCompletion::Reported,
            failed_store: FailedStore::Counted,
            store_ledger: StoreLedger::PerJob,
            notification_after_report: NotificationAfterReport::Dropped,
            notification_count: NotificationCount::Counted,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicatedReports {
    /// Silent (#52779).
    Nothing,
    /// A synthetic done for each request they were asked to send, at `start_load_kv`
    /// (#53903).
    Synthetic,
    /// A synthetic done for every request in their batch, sent or not: a broken twin.
    SyntheticOnBatch,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MlaNotify {
    /// Only the P rank actually read is notified.
    ReadRanksOnly,
    /// Every P rank the D rank covers gets a notification (notify-only for unread ones).
    EveryCoveredRank,
}

/// The D-side worker behaviour of the connector.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Consumer {
    pub failed_handle: FailedHandle,
    pub prefix_hit: PrefixHit,
    pub failed_load: FailedLoad,
    pub mla_notify_id: NotifyId,
    /// Which request id D's heartbeats name. vLLM 0.34's D scheduler side collects P's
    /// id from the transfer parameters (`remote_request_id`,
    /// nixl/base_scheduler.py:on_new_request) and its workers send them as "HB:ids"
    /// (nixl/base_worker.py:_send_heartbeats); P's `_handle_heartbeat` renews only ids
    /// in its `_reqs_to_send` and ignores the rest. With D's own id (vLLM #53095, push
    /// mode before PR #53244) nothing is renewed: P's lease runs out while D still waits
    /// or reads, as if D had gone.
    pub heartbeat_id: NotifyId,
    pub rejection_notice: RejectionNotice,
    /// How many MultiConnector children load each request on a D worker: 1, vLLM's
    /// MultiConnector giving the request to the first child that has tokens for it
    /// (`_requests_to_connector`), or 2, NIXL and the offloading child each loading
    /// their part, as the compose mode proposed in vLLM PR #50546 does.
    #[schemars(range(min = 1, max = 2))]
    pub loading_children: u8,
    pub recving_combine: RecvingCombine,
    pub push_failure: PushFailure,
    /// D's connector looks up what it can load asynchronously: the first time the
    /// scheduler's scan asks (`get_num_new_matched_tokens`) it answers None and the
    /// request is skipped, with no blocks, until the lookup answers. vLLM's offloading
    /// connector works this way; needs connector = "multi-offload" and decode.kv-blocks.
    pub async_lookup: bool,
    /// What D's connector answers when the scheduler asks again about a request whose
    /// remote load already landed (`faults.decode-preempted`).
    pub lookup_after_load: LookupAfterLoad,
    /// Whether D's connector loads a request asynchronously, while it waits, or
    /// synchronously, inside the step that runs it.
    pub load: LoadMode,
}

/// How D's connector loads: the second half of `get_num_new_matched_tokens`'s answer
/// (`load_kv_async`, kv_connector/v1/base.py), which the scheduler acts on in `schedule`
/// (v1/core/sched/scheduler.py).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LoadMode {
    /// The request waits in `WAITING_FOR_REMOTE_KVS`, holding its blocks, until its
    /// workers report it in `finished_recving` (or `failed_recving`): NIXL, MoRIIO and
    /// Mooncake answer True (nixl/pull_scheduler.py:get_num_new_matched_tokens), and every
    /// P/D connector kvcc models otherwise does.
    #[default]
    Asynchronous,
    /// The scheduler runs the request at once, counting the tokens to load as computed,
    /// and hands the load to its workers with that step; each worker loads in the step's
    /// forward pass (`start_load_kv`, then `wait_for_layer_load` per layer) and the step
    /// ends only when the load has. No completion is reported: a failed load comes back
    /// as the step's invalid blocks (`get_block_ids_with_load_errors`), which
    /// `_handle_invalid_blocks` maps to the running request (vLLM 0.34's
    /// lmcache_connector.py and example_connector.py answer False; vLLM PR #19330 added
    /// the failure path). Pull reads only (P writing into D is NIXL's push, which is
    /// asynchronous), one loading child, lookups answered at once.
    Synchronous,
}

/// D's scheduler asks its connector what it can load (`get_num_new_matched_tokens`)
/// whenever it takes a waiting request with nothing computed (v1/core/sched/scheduler.py,
/// `schedule`): a new request, and one preempted after its load landed, which went back
/// to the head of `waiting` with its blocks freed and its computed tokens reset
/// (`_preempt_request`). The transfer parameters are one-shot: P sent (or let D read) the
/// KV once, and the connector clears `do_remote_prefill` when it first allocates for the
/// request (`update_state_after_alloc`), so a second ask must offer nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LookupAfterLoad {
    /// Nothing to load: the rescheduled request is prefilled locally, which needs its
    /// whole sequence's blocks. Current vLLM: NIXL's and MoRIIO's
    /// `get_num_new_matched_tokens` offer tokens only while `do_remote_prefill` is set
    /// (kv_connector/v1/nixl/pull_scheduler.py, kv_connector/v1/moriio/moriio_connector.py,
    /// since vLLM PRs #53250 and #57705).
    #[default]
    LocalPrefill,
    /// Another asynchronous load of the prompt: MoRIIO's WRITE mode before PRs #53250
    /// and #57705 answered the prompt's tokens, asynchronously, whatever the parameters
    /// said. The request goes back to `WAITING_FOR_REMOTE_KVS`, but the connector's
    /// `update_state_after_alloc`, finding `do_remote_prefill` cleared, sets up no
    /// transfer: P is not asked to write again and D's workers are given nothing to wait
    /// for, so no completion ever comes and the request waits for ever, holding its
    /// blocks.
    SecondLoad,
}

/// What D hears when a P WRITE into it fails (`faults.push-write-fails`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PushFailure {
    /// Nothing: D counts P's notifications and never gets the failed WRITE's, so the
    /// request waits for ever (current vLLM; vLLM PR #50754 describes the hang).
    Unannounced,
    /// P sends D a failure notice (#50754's `PUSH_FAIL`), and D reports the load failed
    /// once every WRITE into it has stopped, for `kv_load_failure_policy` to handle.
    Notified,
}

/// How D's MultiConnector turns its children's `finished_recving` into its worker's
/// (vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py, `get_finished`).
/// Children report in configuration order, NIXL first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RecvingCombine {
    /// Every child's set is forwarded as it comes: current vLLM, sound only while one
    /// child loads each request (#50546 calls the union a live bug once two can).
    Union,
    /// The scheduler counts the extra children loading a request and the worker drops
    /// that many reports before forwarding one (vLLM PR #51595, mirroring the send
    /// side's `_extra_async_saves`). A count cannot tell children apart: a report one
    /// child repeats drains another child's share.
    Counted,
    /// Forwarded once every child that loads the request has reported it, remembered
    /// per child, so a repeated report is ignored.
    PerChild,
}

/// What P hears when D rejects a request before admitting it
/// (`faults.rejected-before-admission`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RejectionNotice {
    /// Nothing: D never opens a transfer, so no read ever notifies P, and P holds the
    /// blocks until its timeout (before vLLM PR #41269).
    None,
    /// D tells P the request will not be read, and P's ranks count it as the reads'
    /// notifications and release the blocks (vLLM PR #41269: the serving layer reports
    /// every pre-admission rejection of a remote-prefill request to the connector).
    NotifiesPrefill,
}
/// Which request id D writes in a message to P: an MLA notify-only message (P tp > D tp:
/// D reads one P rank and notifies the other ranks it covers), or a heartbeat. P and D
/// name a request differently (each engine suffixes its own id, vLLM #27987), and P
/// recognises only its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NotifyId {
    /// P's id, from the transfer parameters (`meta.remote.request_id`): current vLLM's
    /// nixl_connector.py.
    RemoteRequestId,
    /// D's own id: P does not recognise it, logs it and drops it, so the covered ranks
    /// never count the notification and hold the blocks until their lease expires (the
    /// leak vLLM PR #36958 describes for MLA with prefill TP above decode TP).
    LocalRequestId,
}

impl Default for Consumer {
    fn default() -> Self {
        Consumer {
            failed_handle: FailedHandle::AfterAllStopped,
            prefix_hit: PrefixHit::Off,
            failed_load: FailedLoad::Reported,
            mla_notify_id: NotifyId::RemoteRequestId,
            heartbeat_id: NotifyId::RemoteRequestId,
            rejection_notice: RejectionNotice::NotifiesPrefill,
            loading_children: 1,
            recving_combine: RecvingCombine::Union,
            push_failure: PushFailure::Unannounced,
            async_lookup: false,
            lookup_after_load: LookupAfterLoad::LocalPrefill,
            load: LoadMode::Asynchronous,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FailedHandle {
    /// Report failed+finished as soon as one handle fails (before #56104).
    FirstError,
    /// Report only once every handle of the request has stopped (#56104).
    AfterAllStopped,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PrefixHit {
    /// Requests never hit the local prefix cache fully.
    Off,
    /// A full hit notifies P and is reported as received (#56640).
    Reported,
    /// A full hit notifies P but is never reported as received (before #56640).
    Unreported,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FailedLoad {
    /// A failed load is reported in `failed_recving`.
    Reported,
    /// A failed load is only logged and reported as a plain `finished_recving`.
    LoggedOnly,
    /// A failed load is only logged and never reported at all: neither in
    /// `finished_recving` nor as failed, so the failure never reaches the scheduler's
    /// `kv_load_failure_policy` and the request waits for ever (vLLM issue #55181: a P2P
    /// NIXL transport exception during a fetch leaves the request pending until the
    /// client gives up).
    Unreported,
}

/// Scheduler behaviour (v1/core/sched/scheduler.py); each knob defaults to its enum's
/// `#[default]`, current vLLM.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Scheduler {
    pub abort_finished: AbortFinished,
    pub abort_loading: AbortLoading,
    /// Both engines' stepping, where `prefill-stepping` / `decode-stepping` do not say.
    pub stepping: Stepping,
    /// P's engine alone: bugs hit one side, e.g. an idle prefill engine holding
    /// delay-freed requests while decode keeps stepping (vLLM PR #41180 keeps a prefiller
    /// awake, polling `get_finished()`, while it holds delayed-free request ids).
    pub prefill_stepping: Option<Stepping>,
    /// D's engine alone.
    pub decode_stepping: Option<Stepping>,
    /// What an engine does after a worker's step raises (`faults.worker-step-raises`).
    pub failed_step: FailedStep,
    /// What D's scheduler must find free before admitting a remote load
    /// (`decode.kv-blocks`).
    pub load_reservation: LoadReservation,
    /// In what order D's scan takes the waiting requests (`decode.kv-blocks`).
    pub scan_order: ScanOrder,
    /// Whether D admits a load behind a request skipped with no blocks
    /// (`consumer.async-lookup`).
    pub admission_behind_skipped: AdmissionBehindSkipped,
    /// What P's scheduler makes of the in-flight output of a request it preempted in
    /// its final step (`faults.final-step-preempted`).
    pub final_step_preemption: FinalStepPreemption,
    /// What D's scheduler does with a request whose remote load failed.
    pub kv_load_failure_policy: KvLoadFailurePolicy,
    /// What D's scheduler makes of the output of a step still in flight when it rewound
    /// a request after a failed synchronous load (`consumer.load = "synchronous"`).
    pub rewound_in_flight_output: RewoundInFlightOutput,
    /// What either scheduler does with a completion for a request it has already freed.
    pub unknown_completion: UnknownCompletion,
    /// When P's scheduler frees a request aborted with both a load and a save in flight
    /// (`prefill.saves-while-loading`).
    pub aborted_transfers: AbortedTransfers,
}

/// A request aborted while it loads and saves at once waits for two completions. vLLM
/// 0.34's `_update_from_kv_xfer_finished` (v1/core/sched/scheduler.py) handles a step's
/// `finished_recving` before its `finished_sending` and frees a finished request at the
/// first of them (`_free_blocks`): the other then finds its id gone and asserts (vLLM
/// issue #46240, open), and a save reported first frees blocks the load still writes.
/// vLLM PR #56089 (open) tracks the two apart and frees only once both have arrived.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AbortedTransfers {
    /// The first completion frees it, receives first within a step (current vLLM).
    #[default]
    FreeAtFirst,
    /// Freed once its load and its save have both completed (vLLM PR #56089).
    FreeAfterAll,
}

/// A completion (`finished_sending`, `finished_recving`) naming a request the scheduler
/// has freed and forgotten: aborted and freed at once, failed, freed by an earlier
/// completion or its lease. vLLM 0.34's `_update_from_kv_xfer_finished`
/// (v1/core/sched/scheduler.py) asserts the id is still in `requests`; vLLM issue #43226
/// and PRs #43265, #45628 and #55286 propose to drop it instead. Either way a completion
/// for a request still live and not waiting for it (running, prefilling) fails the
/// assertions that follow, so only forgotten requests differ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UnknownCompletion {
    /// The assertion fails and the engine core dies (current vLLM).
    #[default]
    Assert,
    /// The stale id is skipped (logged at most): the engine lives on.
    Drop,
}

/// vLLM's `kv_load_failure_policy` (vllm/config/kv_transfer.py; the scheduler's
/// `_handle_failed_recving` and `_handle_invalid_blocks`, then
/// `_update_waiting_for_remote_kv`, in v1/core/sched/scheduler.py; vLLM PR #26171 and
/// its follow-ups).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum KvLoadFailurePolicy {
    /// The request is finished with an error (`FINISHED_ERROR`) in the step that
    /// reports the failure, and its blocks go back to the pool (current vLLM's default).
    #[default]
    Fail,
    /// The request is not failed: its computed tokens are reset to the last valid block
    /// (none, for a load that failed outright) and, once the workers report the load
    /// finished, its blocks are released and it goes back to WAITING where it stood in
    /// the queue, to be prefilled locally: it needs the whole sequence's blocks again.
    Recompute,
}

/// Under `kv_load_failure_policy = "recompute"` a request whose synchronous load failed
/// keeps running: `_update_requests_with_invalid_blocks` (v1/core/sched/scheduler.py)
/// rewinds its computed tokens to the first invalid block and `update_from_output` skips
/// the failed step's token (`failed_kv_load_req_ids`). With async scheduling the next
/// step was scheduled before that output came back, on the same blocks; its output is
/// the next step's to handle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RewoundInFlightOutput {
    /// Appended as any output is: the rewind marks nothing in flight as stale, unlike
    /// `_preempt_request`, so the token that step computed over the blocks the load never
    /// filled reaches the client (current vLLM; vLLM PR #56733, open, and #53298 for
    /// issue #49250 describe it).
    #[default]
    Delivered,
    /// Discarded as stale: the rewind counts the request's tokens in flight as stale
    /// (`num_stale_output_tokens`), as a preemption does, and their output is dropped
    /// (the fix of PRs #56733 and #53298; #45430 proposed the same).
    Discarded,
}

/// With async scheduling a step's output arrives after the next step was scheduled, so
/// the scheduler can preempt a request (freeing its blocks) whose final step is still
/// running (vLLM PR #50297, replacing #48141).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FinalStepPreemption {
    /// The stale output is dropped (`drop_stale_output` where the connector
    /// `requires_kv_delivery`): the request waits, is prefilled again and finishes with
    /// its blocks (current vLLM, #50297).
    #[default]
    DropsStaleOutput,
    /// The stale output still finishes the request: `request_finished` gets an empty
    /// block list, NIXL delays no free and hands D transfer parameters naming no remote
    /// blocks, and D, which still has tokens to load, asserts in
    /// `update_state_after_alloc` (before #50297; vllm-ascend #14180 saw D index the
    /// empty list).
    FinishesEmpty,
}

/// The order of D's scan over its waiting requests (vllm/v1/core/sched/scheduler.py,
/// `schedule`). The scan breaks at the first request it cannot allocate for, so a request
/// holding blocks must not sit behind one that holds none: that one's failed allocation
/// would leave the holder, and its blocks, where no scan reaches (vLLM issue #45388's
/// later comments; PR #57841 states the rule).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ScanOrder {
    /// Requests holding blocks first (`kv_holding_waiting`, always drained before
    /// `waiting`), then the rest in arrival order; a request skipped with no blocks goes
    /// back to `waiting`: current vLLM (0.31 to 0.34). vLLM keeps the holders in the
    /// order their loads started, kvcc in arrival order: under the full-sequence
    /// reservation a loaded holder always finds its block, so their order never stops
    /// the scan.
    #[default]
    HoldersFirst,
    /// Requests skipped earlier first (`skipped_waiting`, drained before `waiting`), in
    /// arrival order, whether they hold blocks or not: vLLM up to 0.30.
    Arrival,
}

/// Admission behind a request skipped holding no blocks (its connector lookup had not
/// answered). Under the `arrival` scan order, when that request's turn comes and the
/// pool cannot take it, the scan breaks at it; a load admitted behind it then never
/// reaches its promotion, holds its blocks, and nothing runs (vLLM issue #45388's
/// comments, PRs #45406, #54348, #57841).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AdmissionBehindSkipped {
    /// Loads are admitted behind it: vLLM, which keeps holders ahead by its scan order
    /// instead (`scheduler.scan-order`).
    #[default]
    Allowed,
    /// No load is admitted behind it until it is admitted itself, so a request holding
    /// blocks is never behind one holding none (vLLM PR #57841's proposal, FCFS).
    Refused,
}

/// The room D's scheduler asks for when it admits a request whose KV loads
/// asynchronously. A loading request cannot be preempted (it is not running), so blocks
/// handed to loads that can never all run are never given back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LoadReservation {
    /// The request's whole sequence must fit beside what every load already admitted
    /// still needs (`_inflight_prefill_reserved_blocks`): current vLLM, PR #44560.
    #[default]
    FullSequence,
    /// Only the loaded prefix must fit: before #44560. Loads admitted together can hold
    /// every block, each then needs more to run, the scan stops at the first and nothing
    /// runs to free any (vLLM issue #45388, "Running: 0, Waiting: N" for ever).
    PrefixOnly,
}

/// After a worker raises in `execute_model`: vLLM's executor turns the first failed reply
/// into an error before the step's outputs reach the aggregator
/// (vllm/v1/executor/multiproc_executor.py), while each worker's connector has already
/// handed over the ids it found finished (kv_connector_model_runner_mixin.py asks for
/// them even when the forward raises).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FailedStep {
    /// The engine dies (EngineDeadError): current vLLM is fail-stop (RFC #27866), so a
    /// raising step is not a completion path and `faults.worker-step-raises` needs one
    /// of the retry behaviours.
    #[default]
    FailStop,
    /// The step is retried and the failed step's finished ids are gone: the workers never
    /// report them again, so their requests wait for ever (the leak vLLM PR #56430, fault
    /// tolerance for P/D, was reviewed for).
    RetryDropsReports,
    /// The step is retried and the failed step's finished ids are kept and handed to the
    /// aggregator with the retry (#56430's pending-finished set).
    RetryKeepsReports,
}

impl Scheduler {
    /// How P's (`prefill`) or D's engine steps.
    pub fn stepping_of(&self, prefill: bool) -> Stepping {
        let own = if prefill {
            self.prefill_stepping
        } else {
            self.decode_stepping
        };
        own.unwrap_or(self.stepping)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AbortFinished {
    /// Aborting a delay-freed request is a no-op: its blocks wait for the connector.
    #[default]
    Ignore,
    /// Aborting a delay-freed request frees its blocks at once.
    Free,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AbortLoading {
    /// An aborted loader keeps its blocks until its `finished_recving` arrives.
    #[default]
    DelayFree,
    /// An aborted loader's blocks are freed at once.
    FreeAtOnce,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Stepping {
    /// The engine keeps stepping while it holds delay-freed or waiting requests.
    #[default]
    KeepStepping,
    /// The engine steps only while it has requests to run.
    Idle,
}

/// Faults the checker may inject; each adds nondeterministic actions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Faults {
    /// The client aborts a request at any point.
    #[serde(default)]
    pub client_abort: bool,
    /// A D read's notification to P is lost.
    #[serde(default)]
    pub lost_notification: bool,
    /// D crashes before reading a request.
    #[serde(default)]
    pub decoder_never_reads: bool,
    /// D's serving layer rejects a request before admitting it.
    #[serde(default)]
    pub rejected_before_admission: bool,
    /// A lease expires while D's read is merely late.
    #[serde(default)]
    pub late_read_after_lease: bool,
    /// A D rank's handshake with P fails.
    #[serde(default)]
    pub handshake_failure: bool,
    /// One read handle fails mid-transfer.
    #[serde(default)]
    pub transfer_error: bool,
    /// A MultiConnector child on a D worker reports a finished load a second time, at a
    /// later step (once per run): a repeat the combine rule must absorb.
    #[serde(default)]
    pub child_reports_twice: bool,
    /// P's scheduler preempts a prefilling request once, after the offloading child
    /// started storing what was computed; the request is prefilled again (MultiConnector
    /// only).
    #[serde(default)]
    pub prefill_preempted: bool,
    /// One of the offloading child's store jobs raises (MultiConnector only).
    #[serde(default)]
    pub offload_store_raises: bool,
    /// P's scheduler preempts a request while the output of its final step is still in
    /// flight (async scheduling, `max-concurrent-batches = 2`); what follows is
    /// `scheduler.final-step-preemption`.
    #[serde(default)]
    pub final_step_preempted: bool,
    /// A P WRITE into D fails (`transfer = "push-writes"`).
    #[serde(default)]
    pub push_write_fails: bool,
    /// D's scheduler preempts a running request once its remote load has landed (under
    /// pool pressure, `_preempt_request`): its blocks go back to the pool and it goes to
    /// the head of the waiting queue with nothing computed, to be asked about again
    /// (`consumer.lookup-after-load`); once per request. Needs decode.kv-blocks.
    #[serde(default)]
    pub decode_preempted: bool,
    /// One engine step loses the output rank's output (once per engine it targets).
    #[serde(default)]
    pub missing_output_rank: EngineFault,
    /// One engine step in which a worker's `execute_model` raises (once per engine it
    /// targets); what follows is `scheduler.failed-step`.
    #[serde(default)]
    pub worker_step_raises: EngineFault,
}

/// Which engines a one-shot engine fault may hit: `true` both, `false` none, or
/// `"prefill"` / `"decode"` one of them (real bugs hit one side).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(from = "EngineFaultSpelling", into = "EngineFaultSpelling")]
pub enum EngineFault {
    #[default]
    Off,
    Both,
    Prefill,
    Decode,
}

impl EngineFault {
    /// Does the fault target P's engine (`prefill`) or D's?
    pub fn hits(self, prefill: bool) -> bool {
        match self {
            EngineFault::Off => false,
            EngineFault::Both => true,
            EngineFault::Prefill => prefill,
            EngineFault::Decode => !prefill,
        }
    }
}

/// How a spec writes an [`EngineFault`].
#[derive(Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
enum EngineFaultSpelling {
    Flag(bool),
    Engine(EngineName),
}

#[derive(Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
enum EngineName {
    Prefill,
    Decode,
}

impl From<EngineFaultSpelling> for EngineFault {
    fn from(spelling: EngineFaultSpelling) -> Self {
        match spelling {
            EngineFaultSpelling::Flag(false) => EngineFault::Off,
            EngineFaultSpelling::Flag(true) => EngineFault::Both,
            EngineFaultSpelling::Engine(EngineName::Prefill) => EngineFault::Prefill,
            EngineFaultSpelling::Engine(EngineName::Decode) => EngineFault::Decode,
        }
    }
}

impl From<EngineFault> for EngineFaultSpelling {
    fn from(fault: EngineFault) -> Self {
        match fault {
            EngineFault::Off => EngineFaultSpelling::Flag(false),
            EngineFault::Both => EngineFaultSpelling::Flag(true),
            EngineFault::Prefill => EngineFaultSpelling::Engine(EngineName::Prefill),
            EngineFault::Decode => EngineFaultSpelling::Engine(EngineName::Decode),
        }
    }
}

/// A topology or behaviour combination that cannot exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The field path, e.g. `prefill.pcp`.
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl Config {
    /// May `fault` hit D's notifications to P?
    pub fn notification_delivery(&self, fault: crate::message::Delivery) -> bool {
        self.delivery.notification.contains(&fault)
            || (fault == crate::message::Delivery::Lost && self.faults.lost_notification)
    }

    /// Does P reap its leases in queue order, stopping at the first live one
    /// (`producer.lease-reaper = "head-only"`)? Then a request's place in the queue is
    /// part of its state, and one request's lease can hold another's.
    pub fn reaps_in_queue_order(&self) -> bool {
        self.producer.lease && self.producer.lease_reaper == LeaseReaper::HeadOnly
    }

    /// Rejects impossible topologies and contradictory behaviours.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field: &str, message: String| {
            Err(ConfigError {
                field: field.to_string(),
                message,
            })
        };
        let p = &self.prefill;
        for (field, value) in [
            ("prefill.tp", p.tp),
            ("prefill.pp", p.pp),
            ("prefill.pcp", p.pcp),
            ("prefill.dcp", p.dcp),
            ("decode.tp", self.decode.tp),
        ] {
            if value == 0 {
                return err(field, "must be at least 1".into());
            }
            if value > MAX_RANKS {
                return err(
                    field,
                    format!("{value} is beyond what kvcc models (at most {MAX_RANKS})"),
                );
            }
        }
        if p.saves_while_loading && !p.loads_kv {
            return err(
                "prefill.saves-while-loading",
                "a save during a load needs the load: set prefill.loads-kv = true".into(),
            );
        }
        if p.saves_while_loading && self.scheduler.abort_loading == AbortLoading::FreeAtOnce {
            // The connector takes over the free of an aborted loader for its save
            // (`_free_request` ORs the connector's delay into the scheduler's), so an
            // abort never frees it at once.
            return err(
                "scheduler.abort-loading",
                "\"free-at-once\" cannot free a request whose connector saves while it loads (prefill.saves-while-loading): the connector delays its free for the save".into(),
            );
        }
        if p.tp % p.dcp != 0 {
            return err(
                "prefill.dcp",
                format!(
                    "dcp {} must divide tp {} (DCP is carved out of TP)",
                    p.dcp, p.tp
                ),
            );
        }
        if p.layout == PcpLayout::Sharded && p.dcp != p.pcp {
            return err(
                "prefill.layout",
                format!(
                    "a sharded layout needs dcp == pcp (PCP+DCP), got pcp {} and dcp {}",
                    p.pcp, p.dcp
                ),
            );
        }
        let world = u32::from(p.tp) * u32::from(p.pp) * u32::from(p.pcp);
        if world > 64 {
            return err(
                "prefill",
                format!("world size {world} is beyond what kvcc models (at most 64)"),
            );
        }
        let (big, small) = (p.tp.max(self.decode.tp), p.tp.min(self.decode.tp));
        if big % small != 0 {
            return err(
                "decode.tp",
                format!(
                    "P tp {} and D tp {} must divide one another",
                    p.tp, self.decode.tp
                ),
            );
        }
        if self.requests == 0 || usize::from(self.requests) > MAX_REQUESTS {
            return err(
                "requests",
                format!("must be 1 to {MAX_REQUESTS}, got {}", self.requests),
            );
        }
        if !(1..=2).contains(&self.max_concurrent_batches) {
            return err(
                "max-concurrent-batches",
                format!("must be 1 or 2, got {}", self.max_concurrent_batches),
            );
        }
        if self.faults.worker_step_raises != EngineFault::Off
            && self.scheduler.failed_step == FailedStep::FailStop
        {
            return err(
                "faults.worker-step-raises",
                "with scheduler.failed-step = \"fail-stop\" (vLLM's default) a raising step kills the engine, which is no completion path to check; set scheduler.failed-step to \"retry-drops-reports\" or \"retry-keeps-reports\"".into(),
            );
        }
        let children = self.consumer.loading_children;
        if !(1..=2).contains(&children) {
            return err(
                "consumer.loading-children",
                format!("must be 1 or 2, got {children}"),
            );
        }
        if children == 2 && self.connector != Connector::MultiOffload {
            return err(
                "consumer.loading-children",
                "two loading children need connector = \"multi-offload\" (only MultiConnector has several children)".into(),
            );
        }
        if children == 2 && (self.faults.transfer_error || self.faults.handshake_failure) {
            return err(
                "consumer.loading-children",
                "a failed NIXL load with a second loading child is not modelled (vLLM reports it through the load-error blocks, outside the combine rule); turn off faults.transfer-error and faults.handshake-failure".into(),
            );
        }
        // The store knobs say what the offloading child does with its store jobs: with
        // no such child they would change nothing, and a spec setting one would read as if
        // it had been checked.
        for (field, on) in [
            (
                "faults.offload-store-raises",
                self.faults.offload_store_raises,
            ),
            ("faults.prefill-preempted", self.faults.prefill_preempted),
            (
                "producer.failed-store",
                self.producer.failed_store != FailedStore::Counted,
            ),
            (
                "producer.store-ledger",
                self.producer.store_ledger != StoreLedger::PerJob,
            ),
        ] {
            if on && self.connector != Connector::MultiOffload {
                return err(
                    field,
                    "needs connector = \"multi-offload\" (only the offloading child stores)".into(),
                );
            }
        }
        if self.transfer == Transfer::PushWrites {
            let unsupported = [
                ("prefill.attention", p.attention == Attention::Mla),
                (
                    "consumer.prefix-hit",
                    self.consumer.prefix_hit != PrefixHit::Off,
                ),
                ("faults.lost-notification", self.faults.lost_notification),
                (
                    "delivery.notification",
                    !self.delivery.notification.is_empty(),
                ),
                ("faults.transfer-error", self.faults.transfer_error),
                ("faults.handshake-failure", self.faults.handshake_failure),
                (
                    "faults.late-read-after-lease",
                    self.faults.late_read_after_lease,
                ),
                (
                    "faults.child-reports-twice",
                    self.faults.child_reports_twice,
                ),
                (
                    "consumer.loading-children",
                    self.consumer.loading_children != 1,
                ),
            ];
            if let Some((field, _)) = unsupported.iter().find(|(_, on)| *on) {
                return err(
                    field,
                    "not modelled with transfer = \"push-writes\" (push mode models dense attention, P's own WRITE completions, D's notification count and a failed WRITE: faults.push-write-fails)".into(),
                );
            }
        } else if self.faults.push_write_fails {
            return err(
                "faults.push-write-fails",
                "needs transfer = \"push-writes\" (in pull mode a failed read is faults.transfer-error)".into(),
            );
        }
        for fault in &self.delivery.notification {
            if !crate::message::message("notification").is_some_and(|m| m.delivery.contains(fault))
            {
                return err(
                    "delivery.notification",
                    format!("kvcc cannot inject {} delivery on it", fault.name()),
                );
            }
        }
        match self.decode.kv_blocks {
            Some(blocks) if !(2..=2 * self.requests).contains(&blocks) => {
                return err(
                    "decode.kv-blocks",
                    format!(
                        "must be 2 to {} (two blocks a request, {} requests), got {blocks}: a request needs one block for its loaded prefix and one to run, and vLLM refuses to start when one sequence cannot fit",
                        2 * self.requests,
                        self.requests
                    ),
                );
            }
            None => {
                let pool_only = [
                    (
                        "scheduler.load-reservation",
                        self.scheduler.load_reservation != LoadReservation::default(),
                    ),
                    (
                        "scheduler.scan-order",
                        self.scheduler.scan_order != ScanOrder::default(),
                    ),
                    (
                        "scheduler.admission-behind-skipped",
                        self.scheduler.admission_behind_skipped
                            != AdmissionBehindSkipped::default(),
                    ),
                    ("consumer.async-lookup", self.consumer.async_lookup),
                ];
                if let Some((field, _)) = pool_only.iter().find(|(_, on)| *on) {
                    return err(
                        field,
                        "needs decode.kv-blocks: without a finite pool no admission ever waits for blocks".into(),
                    );
                }
            }
            _ => {}
        }
        if self.faults.decode_preempted && self.decode.kv_blocks.is_none() {
            return err(
                "faults.decode-preempted",
                "needs decode.kv-blocks: D preempts a running request to give its blocks to others, and the preempted request waits for the scheduler's scan of a finite pool".into(),
            );
        }
        if self.consumer.lookup_after_load != LookupAfterLoad::LocalPrefill
            && !self.faults.decode_preempted
        {
            return err(
                "consumer.lookup-after-load",
                "needs faults.decode-preempted: only a request preempted after its load is asked about again".into(),
            );
        }
        if self.faults.final_step_preempted {
            if self.max_concurrent_batches != 2 {
                return err(
                    "faults.final-step-preempted",
                    "needs max-concurrent-batches = 2: only with async scheduling is a final step's output still in flight when the next step is scheduled".into(),
                );
            }
            if self.consumer.prefix_hit != PrefixHit::Off {
                return err(
                    "consumer.prefix-hit",
                    "not modelled with faults.final-step-preempted (a full prefix hit loads nothing, so an empty block list would not trip D)".into(),
                );
            }
        }
        if self.consumer.load == LoadMode::Synchronous {
            let unmodelled = [
                (self.transfer != Transfer::PullReads, "transfer", "a push WRITE is NIXL's, which loads asynchronously"),
                (self.consumer.loading_children != 1, "consumer.loading-children", "the second loading child is the offloading connector, which loads asynchronously"),
                (self.consumer.async_lookup, "consumer.async-lookup", "a lookup that answers later is an asynchronous load's"),
                (self.consumer.lookup_after_load != LookupAfterLoad::LocalPrefill, "consumer.lookup-after-load", "the second load is MoRIIO's, which is asynchronous"),
                (self.faults.missing_output_rank.hits(false), "faults.missing-output-rank", "a synchronous load's outcome is the step's output itself, and a D step without its output is not modelled with it"),
            ];
            if let Some((_, field, why)) = unmodelled.into_iter().find(|(on, _, _)| *on) {
                return err(
                    field,
                    format!("not modelled with consumer.load = \"synchronous\": {why}"),
                );
            }
        }
        if self.scheduler.rewound_in_flight_output != RewoundInFlightOutput::Delivered
            && !(self.consumer.load == LoadMode::Synchronous
                && self.scheduler.kv_load_failure_policy == KvLoadFailurePolicy::Recompute
                && self.max_concurrent_batches == 2)
        {
            return err(
                "scheduler.rewound-in-flight-output",
                "needs consumer.load = \"synchronous\", scheduler.kv-load-failure-policy = \"recompute\" and max-concurrent-batches = 2: only then is a step in flight when a failed load rewinds a running request".into(),
            );
        }
        if self.consumer.async_lookup && self.connector != Connector::MultiOffload {
            return err(
                "consumer.async-lookup",
                "needs connector = \"multi-offload\" (NIXL answers its lookup at once; the offloading child looks up asynchronously)".into(),
            );
        }
        for (field, count) in [
            ("expected-count", Some(self.expected_count)),
            ("announced-count", self.announced_count),
        ] {
            if count == Some(ExpectedCount::Fixed(0)) {
                return err(
                    field,
                    "a fixed count must be at least 1 (0 means None in vLLM)".into(),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn base() -> Config {
        Config {
            prefill: Prefill {
                tp: 1,
                pp: 1,
                pcp: 2,
                dcp: 1,
                layout: PcpLayout::Replicated,
                attention: Attention::Dense,
                loads_kv: false,
                saves_while_loading: false,
                pp_stage_output: StageOutput::ConnectorOutput,
            },
            decode: Decode {
                tp: 1,
                kv_blocks: None,
            },
            requests: 1,
            max_concurrent_batches: 1,
            expected_count: ExpectedCount::WorldSize,
            announced_count: None,
            policy: AggregatorPolicy::Countdown,
            connector: Connector::Nixl,
            transfer: Transfer::PullReads,
            producer: Producer::default(),
            consumer: Consumer::default(),
            scheduler: Scheduler::default(),
            faults: Faults::default(),
            delivery: Delivery::default(),
        }
    }

    #[test]
    fn impossible_topologies_name_their_field() {
        let mut c = base();
        c.prefill.pcp = 0;
        assert_eq!(c.validate().unwrap_err().field, "prefill.pcp");
        let mut c = base();
        c.prefill.layout = PcpLayout::Sharded;
        assert_eq!(c.validate().unwrap_err().field, "prefill.layout");
        let mut c = base();
        c.prefill.tp = 4;
        c.decode.tp = 3;
        assert_eq!(c.validate().unwrap_err().field, "decode.tp");
        let mut c = base();
        c.requests = 4;
        assert_eq!(c.validate().unwrap_err().field, "requests");
        assert!(base().validate().is_ok());
    }

    #[test]
    fn a_block_pool_fits_one_sequence_and_a_reservation_needs_a_pool() {
        let mut c = base();
        c.requests = 2;
        c.scheduler.load_reservation = LoadReservation::PrefixOnly;
        assert_eq!(
            c.validate().unwrap_err().field,
            "scheduler.load-reservation"
        );
        for (blocks, ok) in [(1, false), (2, true), (4, true), (5, false)] {
            c.decode.kv_blocks = Some(blocks);
            assert_eq!(c.validate().is_ok(), ok, "{blocks} blocks");
        }
        c.decode.kv_blocks = None;
        c.scheduler.load_reservation = LoadReservation::FullSequence;
        c.scheduler.admission_behind_skipped = AdmissionBehindSkipped::Refused;
        assert_eq!(
            c.validate().unwrap_err().field,
            "scheduler.admission-behind-skipped"
        );
        c.scheduler.admission_behind_skipped = AdmissionBehindSkipped::Allowed;
        c.scheduler.scan_order = ScanOrder::Arrival;
        assert_eq!(c.validate().unwrap_err().field, "scheduler.scan-order");
        c.scheduler.scan_order = ScanOrder::HoldersFirst;
        c.consumer.async_lookup = true;
        assert_eq!(c.validate().unwrap_err().field, "consumer.async-lookup");
        c.decode.kv_blocks = Some(3);
        assert_eq!(c.validate().unwrap_err().field, "consumer.async-lookup");
        c.connector = Connector::MultiOffload;
        assert!(c.validate().is_ok());
    }

    #[test]
    fn two_loading_children_need_a_multiconnector_without_failed_loads() {
        let mut c = base();
        c.consumer.loading_children = 2;
        assert_eq!(c.validate().unwrap_err().field, "consumer.loading-children");
        c.connector = Connector::MultiOffload;
        assert!(c.validate().is_ok());
        c.faults.transfer_error = true;
        assert_eq!(c.validate().unwrap_err().field, "consumer.loading-children");
        c.faults.transfer_error = false;
        c.consumer.loading_children = 3;
        assert_eq!(c.validate().unwrap_err().field, "consumer.loading-children");
    }

    #[test]
    fn push_mode_names_what_it_does_not_model() {
        let mut c = base();
        c.faults.push_write_fails = true;
        assert_eq!(c.validate().unwrap_err().field, "faults.push-write-fails");
        c.transfer = Transfer::PushWrites;
        assert!(c.validate().is_ok());
        c.faults.lost_notification = true;
        assert_eq!(c.validate().unwrap_err().field, "faults.lost-notification");
        c.faults.lost_notification = false;
        c.prefill.attention = Attention::Mla;
        assert_eq!(c.validate().unwrap_err().field, "prefill.attention");
    }

    #[test]
    fn a_preemption_on_d_needs_a_pool_and_a_second_load_needs_the_preemption() {
        let mut c = base();
        c.consumer.lookup_after_load = LookupAfterLoad::SecondLoad;
        assert_eq!(
            c.validate().unwrap_err().field,
            "consumer.lookup-after-load"
        );
        c.faults.decode_preempted = true;
        assert_eq!(c.validate().unwrap_err().field, "faults.decode-preempted");
        c.decode.kv_blocks = Some(2);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn a_raising_step_needs_a_retry_to_be_a_completion_path() {
        let mut c = base();
        c.faults.worker_step_raises = EngineFault::Decode;
        assert_eq!(c.validate().unwrap_err().field, "faults.worker-step-raises");
        c.scheduler.failed_step = FailedStep::RetryKeepsReports;
        assert!(c.validate().is_ok());
    }

    #[test]
    fn engine_faults_hit_the_engines_they_name() {
        let hits = |f: EngineFault| (f.hits(true), f.hits(false));
        assert_eq!(hits(EngineFault::Off), (false, false));
        assert_eq!(hits(EngineFault::Both), (true, true));
        assert_eq!(hits(EngineFault::Prefill), (true, false));
        assert_eq!(hits(EngineFault::Decode), (false, true));
        let spelled: Faults =
            toml::from_str("missing-output-rank = \"decode\"\nworker-step-raises = true").unwrap();
        assert_eq!(spelled.missing_output_rank, EngineFault::Decode);
        assert_eq!(spelled.worker_step_raises, EngineFault::Both);
    }
}
