//! Everything that can happen in a contract scenario, named as in vLLM: the actions of
//! [`crate::model::ContractModel`], which traces print ([`crate::describe`]) and ITF
//! files record for `kvcc replay`.

use crate::offload::StoresDone;
use crate::state::RequestId;
use kvcc_aggregator::Rank;

/// Everything that can happen, named as in vLLM. Serialized into ITF traces so that
/// `kvcc replay` can re-execute them.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(
    tag = "action",
    rename_all = "kebab-case",
    rename_all_fields = "kebab-case"
)]
pub enum Action {
    /// P finishes prefilling: `request_finished` returns True and the free is delayed.
    PrefillFinishes { request: RequestId },
    /// A P worker finishes loading its own copy of a request's KV.
    PrefillWorkerLoads { rank: Rank, request: RequestId },
    /// A P engine step: metadata reaches the workers, their outputs are aggregated, the
    /// scheduler frees what is emitted. Faults: the output rank's output is lost; a
    /// worker raises (`raised`: what follows is `scheduler.failed-step`). The output rank
    /// may announce a new `expected_finished_count`. Under MultiConnector, the offloading
    /// stores the workers' poll finds completed (see [`crate::offload`]).
    PrefillEngineSteps {
        output_lost: bool,
        announces_count: bool,
        // Defaults read what trace format 2 left out.
        #[serde(default)]
        stores_done: StoresDone,
        #[serde(default)]
        raised: bool,
    },
    /// P's scheduler preempts a prefilling request: its blocks go back to the pool and it
    /// is prefilled again, while the offloading child's store jobs of what was computed
    /// keep running.
    PrefillPreempted { request: RequestId },
    /// A store job started before the request's preemption completes on a P worker.
    StaleStoreCompletes { rank: Rank, request: RequestId },
    /// A store job of the offloading child on a P worker raises.
    OffloadStoreRaises { rank: Rank, request: RequestId },
    /// A P rank's lease on a request expires: it reports the request as sent.
    LeaseExpires { rank: Rank, request: RequestId },
    /// D admits a request and waits for remote KV (or hits its whole prefix locally).
    DecodeAdmits {
        request: RequestId,
        prefix_hit: bool,
    },
    /// D crashes before reading a request.
    DecoderCrashes { request: RequestId },
    /// D's serving layer rejects a request before its engine admits it (a template,
    /// validation or model check fails): D's scheduler never sees it.
    DecodeRejects { request: RequestId },
    /// A D rank's handshake with P finishes.
    HandshakeCompletes {
        decoder: Rank,
        request: RequestId,
        ok: bool,
    },
    /// A read handle completes and notifies its P rank (unless the notification is lost;
    /// twice when it is duplicated, `delivery.notification`).
    ReadCompletes {
        handle: u16,
        request: RequestId,
        notification_lost: bool,
        #[serde(default)]
        notification_duplicated: bool,
    },
    /// One of the D notifications on their way to a P rank arrives
    /// (`delivery.notification` late or duplicated).
    NotificationArrives { rank: Rank, request: RequestId },
    /// A read handle fails mid-transfer.
    ReadFails { handle: u16, request: RequestId },
    /// The offloading child on a D worker finishes loading its part of a request (two
    /// loading children only).
    DecodeChildLoads { decoder: Rank, request: RequestId },
    /// NIXL on a D worker reports a request's finished load once more, at the next step.
    ChildReportsAgain { decoder: Rank, request: RequestId },
    /// A D engine step: metadata reaches the workers, their outputs are aggregated, the
    /// scheduler wakes what is emitted. Faults: the output rank's output is lost; a worker
    /// raises.
    DecodeEngineSteps {
        output_lost: bool,
        #[serde(default)]
        raised: bool,
    },
    /// The client aborts a request (both schedulers hear of it).
    ClientAborts { request: RequestId },
    /// D's scheduler preempts a request running after its remote load landed
    /// (`faults.decode-preempted`): its blocks go back to the pool and it waits at the
    /// head of the queue to be scheduled again (`consumer.lookup-after-load`).
    DecodePreempted { request: RequestId },
    /// A request running on D reaches its end and its blocks return to the pool
    /// (`decode.kv-blocks`).
    DecodeFinishes { request: RequestId },
    /// D's connector's asynchronous lookup for a skipped request answers
    /// (`consumer.async-lookup`).
    LookupAnswers { request: RequestId },
    /// P's scheduler preempts a request whose final step's output is still in flight
    /// (`faults.final-step-preempted`).
    PrefillPreemptedInFinalStep { request: RequestId },
}

impl Action {
    /// Is this action nothing but an injected fault or a client's choice, whatever its
    /// fields? A run may always leave it out, so fairness never forces it. (Actions
    /// that are faults only with some fields, such as a read whose notification is lost,
    /// have fair twins: [`crate::ContractModel::is_fault_action`] says which.)
    pub fn is_injected_only(&self) -> bool {
        match self {
            Action::ClientAborts { .. }
            | Action::DecoderCrashes { .. }
            | Action::DecodeRejects { .. }
            | Action::ReadFails { .. }
            | Action::ChildReportsAgain { .. }
            | Action::OffloadStoreRaises { .. }
            | Action::PrefillPreempted { .. }
            | Action::PrefillPreemptedInFinalStep { .. }
            | Action::DecodePreempted { .. } => true,
            Action::PrefillFinishes { .. }
            | Action::PrefillWorkerLoads { .. }
            | Action::PrefillEngineSteps { .. }
            | Action::LeaseExpires { .. }
            | Action::DecodeAdmits { .. }
            | Action::HandshakeCompletes { .. }
            | Action::ReadCompletes { .. }
            | Action::NotificationArrives { .. }
            | Action::DecodeEngineSteps { .. }
            | Action::DecodeChildLoads { .. }
            | Action::DecodeFinishes { .. }
            | Action::LookupAnswers { .. }
            | Action::StaleStoreCompletes { .. } => false,
        }
    }

    /// For an engine step, its faults: (the output rank's output lost, a worker raised);
    /// None for any other action.
    pub fn step_faults(&self) -> Option<(bool, bool)> {
        match *self {
            Action::PrefillEngineSteps {
                output_lost,
                raised,
                ..
            }
            | Action::DecodeEngineSteps {
                output_lost,
                raised,
            } => Some((output_lost, raised)),
            _ => None,
        }
    }
}
