//! D workers (NIXL's consumer side; docs/contracts.md §7).
//!
//! Per request, a D rank holds one read handle per P rank in its read plan. Each handle
//! carries its notification to P when it completes. The D rank reports `finished_recving`
//! once all its handles are done; a failed handle must make it report failed *and*
//! finished, but only after every handle has stopped, because posted RDMA cannot be
//! cancelled (#56104). A full local prefix hit reads nothing, notifies P, and must still be
//! reported as received (#56640).

use crate::config::{
    Config, FailedHandle, FailedLoad, PrefixHit, PushFailure, RecvingCombine, RejectionNotice,
};
use crate::rank;
use crate::state::{
    DecodeCell, DecodePhase, HandlePhase, Incidents, LoadPhase, Request, RequestId, State,
};
use kvcc_aggregator::Rank;

/// `start_load_kv` on D rank `decoder`: post its handles, or notify P on a prefix hit.
pub fn receive_load_metadata(config: &Config, state: &mut State, decoder: Rank, r: RequestId) {
    if state.requests[usize::from(r)].prefix_hit {
        notify_covered_ranks(state, decoder, r);
        *state.decode_cell_mut(decoder, r) = match config.consumer.prefix_hit {
            PrefixHit::Reported => DecodeCell::Done { failed: false },
            PrefixHit::Unreported | PrefixHit::Off => DecodeCell::Silent,
        };
        return;
    }
    let first = if config.faults.handshake_failure {
        HandlePhase::Handshaking
    } else {
        HandlePhase::Reading
    };
    let handles: Vec<usize> = state.topology().handles_of(decoder).collect();
    for h in handles {
        *state.handle_mut(h, r) = first;
    }
    *state.decode_cell_mut(decoder, r) = DecodeCell::Loading;
    if config.consumer.loading_children == 2 {
        *state.child_load_mut(decoder, r) = LoadPhase::Loading;
    }
}

/// Every P rank this D rank read or covers gets its notification.
fn notify_covered_ranks(state: &mut State, decoder: Rank, r: RequestId) {
    let topology = state.topology();
    let read = topology.handles.iter().filter(|h| h.decoder == decoder);
    let notify_only = topology.notify_only.iter().filter(|h| h.decoder == decoder);
    for plan in read.chain(notify_only) {
        rank::receive_notification(state, plan.source, r);
    }
}

/// The background handshake of `decoder` with P finishes, for all its handles of `r`.
pub fn complete_handshake(
    config: &Config,
    state: &mut State,
    decoder: Rank,
    r: RequestId,
    ok: bool,
) {
    let handles: Vec<usize> = state.topology().handles_of(decoder).collect();
    for h in handles {
        *state.handle_mut(h, r) = if ok {
            HandlePhase::Reading
        } else {
            HandlePhase::Failed
        };
    }
    settle(config, state, decoder, r);
}

/// A read finishes and D sends `notifications` notifications for it (1; 0 when lost; 2
/// when duplicated).
pub fn complete_read(
    config: &Config,
    state: &mut State,
    handle: usize,
    r: RequestId,
    notifications: u8,
) {
    *state.handle_mut(handle, r) = HandlePhase::Done;
    let plan = state.topology().handles[handle];
    if state.topology().push {
        // P's WRITE: P sees its own completion; its notification reaches D, whose count
        // is the WRITEs into it that are done.
        rank::own_write_done(config, state, plan.source, r);
    } else {
        rank::send_notification(state, plan.source, r, notifications);
    }
    settle(config, state, plan.decoder, r);
}

/// A read fails mid-transfer (its own RDMA has stopped; the others may not have).
pub fn fail_read(config: &Config, state: &mut State, handle: usize, r: RequestId) {
    *state.handle_mut(handle, r) = HandlePhase::Failed;
    let decoder = state.topology().handles[handle].decoder;
    settle(config, state, decoder, r);
}

/// Decides whether D rank `decoder` has something to report for `r`.
fn settle(config: &Config, state: &mut State, decoder: Rank, r: RequestId) {
    if state.decode_cell(decoder, r) != DecodeCell::Loading {
        return;
    }
    let phases: Vec<HandlePhase> = state
        .topology()
        .handles_of(decoder)
        .map(|h| state.handle(h, r))
        .collect();
    // A failed push WRITE is news to D only with #50754's notice; without it D goes on
    // waiting for that WRITE's notification.
    let failure_known =
        !state.topology().push || config.consumer.push_failure == PushFailure::Notified;
    let any_failed = phases.contains(&HandlePhase::Failed) && failure_known;
    let all_stopped = phases
        .iter()
        .all(|&p| p == HandlePhase::Done || (p == HandlePhase::Failed && failure_known));
    let report_now =
        all_stopped || (any_failed && config.consumer.failed_handle == FailedHandle::FirstError);
    if !report_now {
        return;
    }
    if !any_failed {
        // Notify-only messages go out once the read they stand in for is done; a P rank
        // counts one only if it recognises the request id it carries.
        let topology = state.topology();
        if !topology.notify_only_unrecognised {
            for plan in topology.notify_only.iter().filter(|h| h.decoder == decoder) {
                rank::send_notification(state, plan.source, r, 1);
            }
        }
    }
    *state.decode_cell_mut(decoder, r) = match (any_failed, config.consumer.failed_load) {
        (true, FailedLoad::Unreported) => DecodeCell::Silent,
        (true, FailedLoad::Reported) => DecodeCell::Done { failed: true },
        // Logged only: the failure goes out as a plain success.
        (true, FailedLoad::LoggedOnly) | (false, _) => DecodeCell::Done { failed: false },
    };
}

/// What D worker `worker` forwards for `r` at this step's poll: each child hands over its
/// report if it has one, and the MultiConnector's combine rule decides whether the
/// worker's `finished_recving` carries `r`. `Some(failed)` when it does (`failed`: also
/// in `failed_recving`). A worker that forwards `r` a second time is an incident: the
/// aggregator counts it again.
pub fn forward_reports(
    config: &Config,
    state: &mut State,
    worker: Rank,
    r: RequestId,
) -> Option<bool> {
    let before = (state.decode_cell(worker, r), state.child_load(worker, r));
    let cell = state.decode_cell_mut(worker, r);
    *cell = match *cell {
        DecodeCell::Done { .. } => DecodeCell::Reported,
        DecodeCell::ReportsAgain => DecodeCell::ReportedTwice,
        other => other,
    };
    let child = state.child_load_mut(worker, r);
    if *child == LoadPhase::Done {
        *child = LoadPhase::Reported;
    }
    let after = (state.decode_cell(worker, r), state.child_load(worker, r));
    let poll = ChildPoll::between(before, after);
    let combine = config.consumer.recving_combine;
    let forwarded = poll.forwarded(combine);
    if forwarded.is_some() && poll.forwarded_before(combine) {
        let emitted = state.requests[usize::from(r)].emitted & Request::EMITTED_RECV != 0;
        state.incidents.set(if emitted {
            Incidents::REPORTED_AFTER_EMISSION
        } else {
            Incidents::REPORTED_TWICE
        });
    }
    forwarded
}

/// One D worker's children at one poll, for one request: the one place that says what
/// the worker forwards, for the engine step and for the trace that tells it.
pub struct ChildPoll {
    /// Children loading the request: NIXL, and the offloading child if it loads too.
    children: u8,
    /// Reports the children handed over at earlier polls, repeats included.
    earlier: u8,
    /// Children that had reported at earlier polls.
    reporters_before: u8,
    /// This poll's reports, NIXL's first (configuration order): (a repeat?, failed?).
    now: [Option<(bool, bool)>; 2],
}

impl ChildPoll {
    /// The poll that took a worker's (NIXL cell, offloading child's load) from `before`
    /// to `after`.
    pub fn between(before: (DecodeCell, LoadPhase), after: (DecodeCell, LoadPhase)) -> Self {
        let nixl_reports = |cell| match cell {
            DecodeCell::Reported | DecodeCell::ReportsAgain => 1,
            DecodeCell::ReportedTwice => 2,
            _ => 0,
        };
        let nixl_now = match (before.0, after.0) {
            (DecodeCell::ReportsAgain, DecodeCell::ReportedTwice) => Some((true, false)),
            (b, DecodeCell::Reported) if nixl_reports(b) == 0 => {
                Some((false, b == DecodeCell::Done { failed: true }))
            }
            _ => None,
        };
        let child_now = (before.1 != LoadPhase::Reported && after.1 == LoadPhase::Reported)
            .then_some((false, false));
        ChildPoll {
            children: if after.1 == LoadPhase::NotUsed { 1 } else { 2 },
            earlier: nixl_reports(before.0) + u8::from(before.1 == LoadPhase::Reported),
            reporters_before: u8::from(nixl_reports(before.0) > 0)
                + u8::from(before.1 == LoadPhase::Reported),
            now: [nixl_now, child_now],
        }
    }

    /// Had the worker forwarded the request at an earlier poll? Under the union every
    /// report went out; a count absorbs the first `children - 1`; per child, only the
    /// poll at which the last child first reported forwards.
    pub fn forwarded_before(&self, combine: RecvingCombine) -> bool {
        match combine {
            RecvingCombine::Union => self.earlier > 0,
            RecvingCombine::Counted => self.earlier >= self.children,
            RecvingCombine::PerChild => self.reporters_before == self.children,
        }
    }

    /// What the worker forwards under `combine`: `Some(failed)` if it puts the request
    /// in its `finished_recving`.
    pub fn forwarded(&self, combine: RecvingCombine) -> Option<bool> {
        let first_reports = self
            .now
            .iter()
            .flatten()
            .filter(|(repeat, _)| !repeat)
            .count();
        // Has every child now reported at least once? Repeats add reports, not reporters.
        let all_reported =
            usize::from(self.reporters_before) + first_reports >= usize::from(self.children);
        let mut forwarded = None;
        // `seen`: the reports handed over before this one.
        for (seen, &(repeat, failed)) in (self.earlier..).zip(self.now.iter().flatten()) {
            let forward = match combine {
                RecvingCombine::Union => true,
                // The count of extra loaders (children - 1) drains first, whoever reports.
                RecvingCombine::Counted => seen >= self.children - 1,
                RecvingCombine::PerChild => !repeat && all_reported,
            };
            if forward {
                forwarded = Some(forwarded.unwrap_or(false) || failed);
            }
        }
        forwarded
    }
}

/// D rejects `r` before admitting it: its scheduler never sees the request, and with
/// #41269's notice every P rank a D rank would have read or notified counts it as done.
pub fn reject(config: &Config, state: &mut State, r: RequestId) {
    state.requests[usize::from(r)].decode = DecodePhase::Gone;
    if config.consumer.rejection_notice == RejectionNotice::NotifiesPrefill {
        for decoder in 0..state.topology().decode_world {
            notify_covered_ranks(state, decoder, r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DecodeCell::{Done, Loading, Reported, ReportedTwice, ReportsAgain};
    use RecvingCombine::{Counted, PerChild, Union};

    /// What each rule forwards for one poll, from a worker's (NIXL cell, child load)
    /// before and after it.
    fn forwards(before: (DecodeCell, LoadPhase), after: (DecodeCell, LoadPhase)) -> [bool; 3] {
        let poll = ChildPoll::between(before, after);
        [Union, Counted, PerChild].map(|rule| poll.forwarded(rule).is_some())
    }

    #[test]
    fn one_loading_child_is_forwarded_by_every_rule_with_its_failure() {
        let done = (Done { failed: true }, LoadPhase::NotUsed);
        let poll = ChildPoll::between(done, (Reported, LoadPhase::NotUsed));
        for rule in [Union, Counted, PerChild] {
            assert_eq!(poll.forwarded(rule), Some(true), "{rule:?}");
        }
    }

    #[test]
    fn with_two_loading_children_only_union_forwards_the_first() {
        let first = forwards(
            (Done { failed: false }, LoadPhase::Loading),
            (Reported, LoadPhase::Loading),
        );
        assert_eq!(first, [true, false, false]);
        let second = forwards((Reported, LoadPhase::Done), (Reported, LoadPhase::Reported));
        assert_eq!(second, [true, true, true]);
        let together = forwards(
            (Done { failed: false }, LoadPhase::Done),
            (Reported, LoadPhase::Reported),
        );
        assert_eq!(together, [true, true, true]);
    }

    #[test]
    fn a_repeat_drains_the_count_but_not_the_per_child_record() {
        let repeat_while_child_loads = forwards(
            (ReportsAgain, LoadPhase::Loading),
            (ReportedTwice, LoadPhase::Loading),
        );
        assert_eq!(repeat_while_child_loads, [true, true, false]);
        let child_after_repeat = forwards(
            (ReportedTwice, LoadPhase::Done),
            (ReportedTwice, LoadPhase::Reported),
        );
        assert_eq!(child_after_repeat, [true, true, true]);
        let repeat_of_one_child = forwards(
            (ReportsAgain, LoadPhase::NotUsed),
            (ReportedTwice, LoadPhase::NotUsed),
        );
        assert_eq!(repeat_of_one_child, [true, true, false]);
        let nothing = forwards((Loading, LoadPhase::Loading), (Loading, LoadPhase::Loading));
        assert_eq!(nothing, [false, false, false]);
    }
}
