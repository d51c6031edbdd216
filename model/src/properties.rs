//! The completion contract (docs/contracts.md §10), one named clause per way it can break.
//!
//! Safety clauses must hold in every reachable state. Liveness clauses are checked where
//! a run ends: the checker proves every explored graph acyclic (each transition grows
//! [`State::progress`]), so every fair run is finite and ends in a state with no enabled
//! action, and an obligation still open there is pending forever.

use crate::config::{Config, Connector};
use crate::state::{
    DecodePhase, HandlePhase, Incidents, LoadPhase, PrefillPhase, Request, RequestId, SendPhase,
    State, StorePhase,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Must hold in every reachable state.
    Safety,
    /// Must hold in every state where a run ends.
    Liveness,
}

/// One clause of a contract property.
#[derive(Clone, Copy, Debug)]
pub struct Clause {
    /// The property, as specs cite it (`eventually-freed`).
    pub property: &'static str,
    /// Which part of it (`delay-freed-request-never-freed`).
    pub clause: &'static str,
    pub kind: Kind,
    /// What the clause means, for reviewers.
    pub meaning: &'static str,
    pub holds: fn(&Config, &State) -> bool,
}

pub const PROPERTIES: [&str; 12] = [
    "no-free-under-rdma",
    "quorum-sound",
    "exactly-once",
    "report-provenance",
    "recv-after-stable",
    "count-conserved",
    "lease-rescues-faults-only",
    "leases-reaped",
    "engine-survives",
    "eventually-freed",
    "eventually-woken",
    "aggregator-drains",
];

fn requests(state: &State) -> impl Iterator<Item = RequestId> {
    0..state.request_count() as RequestId
}

fn no_incident(state: &State, bits: u16) -> bool {
    state.incidents.0 & bits == 0
}

fn handles_of_request(state: &State, r: RequestId) -> impl Iterator<Item = HandlePhase> + '_ {
    (0..state.topology().handles.len()).map(move |h| state.handle(h, r))
}

fn p_blocks_free_only_after_reads(_: &Config, s: &State) -> bool {
    requests(s).all(|r| {
        let freed = matches!(
            s.requests[usize::from(r)].prefill,
            PrefillPhase::Released | PrefillPhase::AbortFreed
        );
        !(freed && s.reading(r))
    })
}

fn d_blocks_free_only_after_writes(_: &Config, s: &State) -> bool {
    requests(s).all(|r| {
        let released = matches!(
            s.requests[usize::from(r)].decode,
            DecodePhase::Failed | DecodePhase::Freed
        );
        !(released && (s.reading(r) || s.child_loading(r)))
    })
}

fn sends_emitted_after_transfer_ranks(_: &Config, s: &State) -> bool {
    requests(s).all(|r| {
        s.requests[usize::from(r)].emitted & Request::EMITTED_SEND == 0
            || (0..s.topology().prefill_world)
                .filter(|&k| s.topology().is_transfer(k))
                .all(|k| {
                    !matches!(
                        s.prefill_cell(k, r).send,
                        SendPhase::InBatch | SendPhase::ToSend
                    )
                })
    })
}

fn sends_emitted_after_stores(c: &Config, s: &State) -> bool {
    c.connector != Connector::MultiOffload
        || requests(s).all(|r| {
            s.requests[usize::from(r)].emitted & Request::EMITTED_SEND == 0
                || (0..s.topology().prefill_world)
                    .all(|k| s.prefill_cell(k, r).store != StorePhase::Storing)
        })
}

fn recvs_emitted_after_decoders(_: &Config, s: &State) -> bool {
    requests(s).all(|r| {
        let q = &s.requests[usize::from(r)];
        q.emitted & Request::EMITTED_RECV == 0
            || handles_of_request(s, r)
                .all(|h| !matches!(h, HandlePhase::Handshaking | HandlePhase::Reading))
                && (q.prefix_hit || handles_of_request(s, r).all(|h| h != HandlePhase::NotPosted))
                && !s.child_loading(r)
    })
}

fn loads_emitted_after_workers(_: &Config, s: &State) -> bool {
    requests(s).all(|r| {
        s.requests[usize::from(r)].emitted & Request::EMITTED_LOAD == 0
            || (0..s.topology().prefill_world)
                .all(|k| s.prefill_cell(k, r).load != LoadPhase::Loading)
    })
}

/// A request D runs (woken, or rewound and still running) while its reads still write.
fn woken_after_handles(_: &Config, s: &State) -> bool {
    requests(s).all(|r| {
        !matches!(
            s.requests[usize::from(r)].decode,
            DecodePhase::Running | DecodePhase::Rewound
        ) || !(s.reading(r) || s.child_loading(r))
    })
}

fn no_stale_token(_: &Config, s: &State) -> bool {
    s.requests.iter().all(|q| !q.stale_token)
}

/// A request D runs after a failed load, which its scheduler never heard of as failed.
/// (Under `kv_load_failure_policy = "recompute"` a reported failure runs it too, from a
/// local prefill.)
fn failures_not_reported_as_success(_: &Config, s: &State) -> bool {
    requests(s).all(|r| {
        let request = &s.requests[usize::from(r)];
        request.decode != DecodePhase::Running
            || request.emitted & Request::EMITTED_FAILURE != 0
            || handles_of_request(s, r).all(|h| h != HandlePhase::Failed)
    })
}

fn prefill_after_loads(_: &Config, s: &State) -> bool {
    requests(s).all(|r| {
        matches!(
            s.requests[usize::from(r)].prefill,
            PrefillPhase::LoadingKv | PrefillPhase::AbortedLoadingKv
        ) || (0..s.topology().prefill_world)
            .all(|k| s.prefill_cell(k, r).load != LoadPhase::Loading)
    })
}

fn no_delay_freed_left(_: &Config, s: &State) -> bool {
    s.requests
        .iter()
        .all(|q| q.prefill != PrefillPhase::DelayFreed)
}

fn no_loader_left(_: &Config, s: &State) -> bool {
    s.requests
        .iter()
        .all(|q| !matches!(q.decode, DecodePhase::Loading | DecodePhase::SyncLoading))
}

fn no_aborted_loader_left(_: &Config, s: &State) -> bool {
    s.requests
        .iter()
        .all(|q| q.decode != DecodePhase::AbortedLoading)
}

fn no_request_left_unscheduled(_: &Config, s: &State) -> bool {
    s.requests.iter().all(|q| !q.decode.unscheduled())
}

fn no_prefill_load_left(_: &Config, s: &State) -> bool {
    s.requests.iter().all(|q| {
        !matches!(
            q.prefill,
            PrefillPhase::LoadingKv | PrefillPhase::AbortedLoadingKv
        )
    })
}

fn no_countdown_left(_: &Config, s: &State) -> bool {
    s.prefill_aggregator.open_entries() - s.prefill_aggregator.pending_failed().len() == 0
        && s.decode_aggregator.open_entries() - s.decode_aggregator.pending_failed().len() == 0
}

fn no_failure_left(_: &Config, s: &State) -> bool {
    s.prefill_aggregator.pending_failed().is_empty()
        && s.decode_aggregator.pending_failed().is_empty()
}

macro_rules! incident_free {
    ($name:ident, $bits:expr) => {
        fn $name(_: &Config, s: &State) -> bool {
            no_incident(s, $bits)
        }
    };
}
incident_free!(no_double_emission, Incidents::EMITTED_TWICE);
incident_free!(
    no_unknown_emission,
    Incidents::SEND_FOR_UNKNOWN | Incidents::RECV_FOR_UNKNOWN | Incidents::LOAD_FOR_UNKNOWN
);
incident_free!(no_send_without_delay, Incidents::SEND_WITHOUT_DELAY);
incident_free!(no_unannounced_report, Incidents::STRICT_UNANNOUNCED);
incident_free!(no_reopened_countdown, Incidents::REOPENED);
incident_free!(
    no_duplicate_report,
    Incidents::STRICT_DUPLICATE | Incidents::REPORTED_TWICE
);
incident_free!(
    no_report_after_emission,
    Incidents::STRICT_AFTER_EMISSION | Incidents::REPORTED_AFTER_EMISSION
);
incident_free!(no_report_beyond_expected, Incidents::STRICT_BEYOND_EXPECTED);
incident_free!(no_free_by_lease_alone, Incidents::FREED_BY_LEASE_ALONE);
incident_free!(no_none_output, Incidents::NONE_OUTPUT);
incident_free!(no_empty_transfer_params, Incidents::EMPTY_TRANSFER_PARAMS);
incident_free!(no_lease_skipped, Incidents::LEASE_SKIPPED);

/// The clauses, each defined once: its property, name, kind, meaning and rule. Code
/// that names a clause (conform's monitors, reports) uses these constants.
pub const P_BLOCKS_FREED_UNDER_READ: Clause = Clause {
    property: "no-free-under-rdma",
    clause: "p-blocks-freed-under-read",
    kind: Kind::Safety,
    meaning: "P freed a request's KV blocks while a D read of them was in flight",
    holds: p_blocks_free_only_after_reads,
};
pub const D_BLOCKS_FREED_UNDER_WRITE: Clause = Clause {
    property: "no-free-under-rdma",
    clause: "d-blocks-freed-under-write",
    kind: Kind::Safety,
    meaning:
        "D released a request's blocks while RDMA or a loading child was still writing into them",
    holds: d_blocks_free_only_after_writes,
};
pub const SEND_EMITTED_BEFORE_TRANSFER_RANKS_DONE: Clause = Clause { property: "quorum-sound", clause: "send-emitted-before-transfer-ranks-done", kind: Kind::Safety, meaning: "the aggregator emitted finished_sending before every P transfer rank was done with the request", holds: sends_emitted_after_transfer_ranks };
pub const SEND_EMITTED_BEFORE_OFFLOAD_STORES_DONE: Clause = Clause {
    property: "quorum-sound",
    clause: "send-emitted-before-offload-stores-done",
    kind: Kind::Safety,
    meaning: "the aggregator emitted finished_sending before every worker's offload store finished",
    holds: sends_emitted_after_stores,
};
pub const RECV_EMITTED_BEFORE_DECODERS_DONE: Clause = Clause {
    property: "quorum-sound",
    clause: "recv-emitted-before-decoders-done",
    kind: Kind::Safety,
    meaning:
        "the aggregator emitted finished_recving before every D handle and loading child of the request had stopped",
    holds: recvs_emitted_after_decoders,
};
pub const LOAD_EMITTED_BEFORE_WORKERS_DONE: Clause = Clause {
    property: "quorum-sound",
    clause: "load-emitted-before-workers-done",
    kind: Kind::Safety,
    meaning: "P's aggregator emitted a load before every P worker had loaded",
    holds: loads_emitted_after_workers,
};
pub const EMITTED_TWICE: Clause = Clause {
    property: "exactly-once",
    clause: "emitted-twice",
    kind: Kind::Safety,
    meaning: "a request was emitted a second time in one direction",
    holds: no_double_emission,
};
pub const EMITTED_FOR_UNKNOWN_REQUEST: Clause = Clause { property: "exactly-once", clause: "emitted-for-unknown-request", kind: Kind::Safety, meaning: "a scheduler received a completion for a request it no longer knows (vLLM asserts: engine crash)", holds: no_unknown_emission };
pub const DUPLICATE_REPORT: Clause = Clause {
    property: "exactly-once",
    clause: "duplicate-report",
    kind: Kind::Safety,
    meaning:
        "a rank reported the same request twice (Strict refuses the second report, Countdown counts it again)",
    holds: no_duplicate_report,
};
pub const REPORT_AFTER_EMISSION: Clause = Clause {
    property: "exactly-once",
    clause: "report-after-emission",
    kind: Kind::Safety,
    meaning:
        "a rank reported the request again after it was emitted (Strict refuses it, Countdown opens a fresh entry)",
    holds: no_report_after_emission,
};
pub const SEND_WITHOUT_DELAYED_FREE: Clause = Clause {
    property: "report-provenance",
    clause: "send-without-delayed-free",
    kind: Kind::Safety,
    meaning: "a P worker reported a send for a request whose free was never delayed",
    holds: no_send_without_delay,
};
pub const UNANNOUNCED_REPORT: Clause = Clause { property: "report-provenance", clause: "unannounced-report", kind: Kind::Safety, meaning: "the Strict aggregator got a report for an id the scheduler never announced or already forgot", holds: no_unannounced_report };
pub const WOKEN_WHILE_HANDLE_IN_FLIGHT: Clause = Clause {
    property: "recv-after-stable",
    clause: "woken-while-handle-in-flight",
    kind: Kind::Safety,
    meaning: "D woke a request while one of its reads, or a loading child, was still writing",
    holds: woken_after_handles,
};
pub const FAILURE_REPORTED_AS_SUCCESS: Clause = Clause {
    property: "recv-after-stable",
    clause: "failure-reported-as-success",
    kind: Kind::Safety,
    meaning: "D woke a request as loaded although one of its handles failed",
    holds: failures_not_reported_as_success,
};
pub const TOKEN_FROM_FAILED_LOAD: Clause = Clause {
    property: "recv-after-stable",
    clause: "token-from-failed-load",
    kind: Kind::Safety,
    meaning: "D delivered a token computed over blocks a failed synchronous load never filled: the output of a step scheduled before the scheduler rewound the request to recompute",
    holds: no_stale_token,
};
pub const PREFILL_BEFORE_LOAD_COMPLETE: Clause = Clause {
    property: "recv-after-stable",
    clause: "prefill-before-load-complete",
    kind: Kind::Safety,
    meaning: "P moved a request past its own load (prefilled it, or freed it) while a worker was still loading its KV",
    holds: prefill_after_loads,
};
pub const COUNTDOWN_REOPENED: Clause = Clause {
    property: "count-conserved",
    clause: "countdown-reopened",
    kind: Kind::Safety,
    meaning:
        "a countdown got more reports than it had room for: a stray report opened a fresh entry",
    holds: no_reopened_countdown,
};
pub const REPORT_BEYOND_EXPECTED: Clause = Clause {
    property: "count-conserved",
    clause: "report-beyond-expected",
    kind: Kind::Safety,
    meaning: "the Strict aggregator refused a report from one reporter more than E",
    holds: no_report_beyond_expected,
};
// A lease is the remedy for faults (a lost notification, a crashed or aborted
// decoder); a request that P frees only by its lease in a run where no fault touched
// it shows a happy path that never completes, which eventually-freed alone accepts.
pub const FREED_ONLY_BY_LEASE_EXPIRY: Clause = Clause { property: "lease-rescues-faults-only", clause: "freed-only-by-lease-expiry", kind: Kind::Safety, meaning: "P freed a request's blocks only because a lease expired, though no injected fault touched the request", holds: no_free_by_lease_alone };
// A lease bounds how long P holds blocks nobody will read; a reaper that stops at a live
// lease holds every expired one behind it for as long as that lease is renewed.
pub const EXPIRED_LEASE_HELD_BEHIND_LIVE_ONE: Clause = Clause {
    property: "leases-reaped",
    clause: "expired-lease-held-behind-live-one",
    kind: Kind::Safety,
    meaning: "a P rank's reaper left a request whose lease had expired, stopping at an earlier entry whose lease is still live",
    holds: no_lease_skipped,
};
pub const NONE_OUTPUT_AT_NON_OUTPUT_RANK: Clause = Clause {
    property: "engine-survives",
    clause: "none-output-at-non-output-rank",
    kind: Kind::Safety,
    meaning: "a worker other than the output rank handed the aggregator no output (None); vLLM's aggregator asserts on it and the engine dies",
    holds: no_none_output,
};
pub const EMPTY_TRANSFER_PARAMS: Clause = Clause {
    property: "engine-survives",
    clause: "empty-transfer-params",
    kind: Kind::Safety,
    meaning: "D admitted a load whose transfer parameters name no remote blocks (P finished the request with none after preempting it in its final step); NIXL asserts in update_state_after_alloc and D's engine dies (vLLM PR #50297)",
    holds: no_empty_transfer_params,
};
pub const DELAY_FREED_REQUEST_NEVER_FREED: Clause = Clause {
    property: "eventually-freed",
    clause: "delay-freed-request-never-freed",
    kind: Kind::Liveness,
    meaning: "a delay-freed request's P blocks are never freed",
    holds: no_delay_freed_left,
};
pub const LOADER_NEVER_WOKEN: Clause = Clause {
    property: "eventually-woken",
    clause: "loader-never-woken",
    kind: Kind::Liveness,
    meaning: "a request waits for remote KV on D forever, or its synchronous load never ends",
    holds: no_loader_left,
};
pub const ABORTED_LOADER_NEVER_FREED: Clause = Clause {
    property: "eventually-woken",
    clause: "aborted-loader-never-freed",
    kind: Kind::Liveness,
    meaning: "an aborted loader on D is never freed",
    holds: no_aborted_loader_left,
};
pub const PREFILL_LOAD_NEVER_COMPLETES: Clause = Clause {
    property: "eventually-woken",
    clause: "prefill-load-never-completes",
    kind: Kind::Liveness,
    meaning: "a request waits for its own KV load on P forever",
    holds: no_prefill_load_left,
};
pub const REQUEST_NEVER_SCHEDULED: Clause = Clause {
    property: "eventually-woken",
    clause: "request-never-scheduled",
    kind: Kind::Liveness,
    meaning: "a request at D never runs: it waits in D's queue for blocks, or holds its loaded KV waiting for the block to run, behind a scan that stops at a request it cannot allocate for (vLLM issue #45388: Running 0, Waiting N)",
    holds: no_request_left_unscheduled,
};
pub const COUNTDOWN_LEFT_OPEN: Clause = Clause {
    property: "aggregator-drains",
    clause: "countdown-left-open",
    kind: Kind::Liveness,
    meaning: "an aggregator countdown is never removed",
    holds: no_countdown_left,
};
pub const FAILURE_LEFT_PENDING: Clause = Clause {
    property: "aggregator-drains",
    clause: "failure-left-pending",
    kind: Kind::Liveness,
    meaning: "a failed load waits in the aggregator forever",
    holds: no_failure_left,
};

/// Every clause, safety first, in a fixed order (counterexamples are reported in it).
pub const CLAUSES: &[Clause] = &[
    P_BLOCKS_FREED_UNDER_READ,
    D_BLOCKS_FREED_UNDER_WRITE,
    SEND_EMITTED_BEFORE_TRANSFER_RANKS_DONE,
    SEND_EMITTED_BEFORE_OFFLOAD_STORES_DONE,
    RECV_EMITTED_BEFORE_DECODERS_DONE,
    LOAD_EMITTED_BEFORE_WORKERS_DONE,
    EMITTED_TWICE,
    EMITTED_FOR_UNKNOWN_REQUEST,
    DUPLICATE_REPORT,
    REPORT_AFTER_EMISSION,
    SEND_WITHOUT_DELAYED_FREE,
    UNANNOUNCED_REPORT,
    WOKEN_WHILE_HANDLE_IN_FLIGHT,
    FAILURE_REPORTED_AS_SUCCESS,
    TOKEN_FROM_FAILED_LOAD,
    PREFILL_BEFORE_LOAD_COMPLETE,
    COUNTDOWN_REOPENED,
    REPORT_BEYOND_EXPECTED,
    FREED_ONLY_BY_LEASE_EXPIRY,
    EXPIRED_LEASE_HELD_BEHIND_LIVE_ONE,
    NONE_OUTPUT_AT_NON_OUTPUT_RANK,
    EMPTY_TRANSFER_PARAMS,
    DELAY_FREED_REQUEST_NEVER_FREED,
    LOADER_NEVER_WOKEN,
    ABORTED_LOADER_NEVER_FREED,
    PREFILL_LOAD_NEVER_COMPLETES,
    REQUEST_NEVER_SCHEDULED,
    COUNTDOWN_LEFT_OPEN,
    FAILURE_LEFT_PENDING,
];

/// Does `state` keep every safety clause? A run stops at the first state that does not:
/// a double free or an engine crash is where its story ends, and liveness is not judged
/// past it.
pub fn safe(config: &Config, state: &State) -> bool {
    CLAUSES
        .iter()
        .all(|c| c.kind == Kind::Liveness || (c.holds)(config, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_clause_belongs_to_a_named_property() {
        for clause in CLAUSES {
            assert!(PROPERTIES.contains(&clause.property), "{}", clause.property);
        }
        for property in PROPERTIES {
            assert!(
                CLAUSES.iter().any(|c| c.property == property),
                "{property} has no clause"
            );
        }
    }
}
