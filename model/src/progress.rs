//! The progress measure: a number every transition increases, which proves the state
//! graph acyclic (`checker::Checkable::progress`; the liveness check relies on it).
//!
//! It sums, over a state's parts, each field's position in its progress-ordered
//! lifecycle. Aggregator contents are left out: they change only together with a cell or
//! a scheduler phase. Each part's term reads that part alone — a request's scheduler
//! facts, a P cell, a handle, a D worker's cell with its child's load, the incident and
//! one-shot bits — so the packed form, which keeps each part in bytes of its own, sums it
//! byte by byte ([`crate::pack::ProgressTable`]). Renaming requests and ranks permutes
//! parts, so every member of a symmetry class has the same measure.

use crate::state::{
    DecodeCell, DecodePhase, HandlePhase, Incidents, LoadPhase, Metadata, PrefillCell,
    PrefillPhase, Request, SendPhase, State,
};

/// What a preemption on D adds: more than D's phases ever climb, so the step back from
/// running to waiting still makes progress.
const PREEMPTED: u32 = 8;

impl State {
    /// The measure (module docs).
    pub fn progress(&self) -> u32 {
        // Plain loops: a handful of parts each, where vectorised sums cost more in setup
        // than they save.
        let mut sum = flags(self.incidents, self.once);
        for q in &self.requests {
            sum += q.progress();
        }
        for c in &self.prefill {
            sum += c.progress();
        }
        for &h in &self.handles {
            sum += h.progress();
        }
        for (&c, &l) in self.decode.iter().zip(&self.child_loads) {
            sum += worker(c, l);
        }
        sum
    }
}

impl Request {
    /// This request's scheduler facts' part of the measure.
    pub(crate) fn progress(&self) -> u32 {
        self.send_meta.progress()
            + self.recv_meta.progress()
            + self.prefill.progress()
            + self.decode.progress()
            + u32::from(self.aborted)
            + u32::from(self.decode_preempted) * PREEMPTED
            + u32::from(self.stale_token)
            + self.emitted.count_ones()
    }
}

impl PrefillCell {
    /// This P cell's part of the measure.
    pub(crate) fn progress(self) -> u32 {
        u32::from(self.notifications)
            + u32::from(self.dropped)
            + self.send.progress()
            + self.store as u32
            + self.load as u32
            + self.stale_store as u32
    }
}

impl HandlePhase {
    /// This handle's part of the measure.
    pub(crate) fn progress(self) -> u32 {
        match self {
            HandlePhase::NotPosted => 0,
            HandlePhase::Handshaking => 1,
            HandlePhase::Reading => 2,
            HandlePhase::Done | HandlePhase::Failed => 3,
        }
    }
}

/// A D worker's part of the measure: its cell and its offloading child's load.
pub(crate) fn worker(cell: DecodeCell, load: LoadPhase) -> u32 {
    let cell = match cell {
        DecodeCell::Idle => 0,
        DecodeCell::Loading => 1,
        DecodeCell::Done { .. } => 2,
        DecodeCell::Reported | DecodeCell::Silent => 3,
        DecodeCell::ReportsAgain => 4,
        DecodeCell::ReportedTwice => 5,
    };
    cell + load as u32
}

/// The incident and one-shot bits' part: one a bit (each is only ever set).
pub(crate) fn flags(incidents: Incidents, once: u8) -> u32 {
    incidents.0.count_ones() + once.count_ones()
}

impl Metadata {
    fn progress(self) -> u32 {
        match self {
            Metadata::NotQueued => 0,
            Metadata::Due(steps) => 3 - u32::from(steps.min(2)),
            Metadata::Delivered => 4,
        }
    }
}

impl PrefillPhase {
    fn progress(self) -> u32 {
        match self {
            PrefillPhase::LoadingKv => 0,
            PrefillPhase::Prefilling | PrefillPhase::AbortedLoadingKv => 1,
            PrefillPhase::DelayFreed => 2,
            PrefillPhase::Released | PrefillPhase::Dropped | PrefillPhase::FinishedEmpty => 4,
            PrefillPhase::AbortFreed => 3,
        }
    }
}

impl DecodePhase {
    fn progress(self) -> u32 {
        match self {
            DecodePhase::Pending => 0,
            DecodePhase::Queued => 1,
            DecodePhase::Deferred => 2,
            DecodePhase::LookedUp => 3,
            DecodePhase::Loading | DecodePhase::SyncLoading => 4,
            DecodePhase::AbortedLoading
            | DecodePhase::Loaded
            | DecodePhase::Recomputing
            | DecodePhase::Rewound => 5,
            DecodePhase::Running => 6,
            _ => 7,
        }
    }
}

impl SendPhase {
    fn progress(self) -> u32 {
        match self {
            SendPhase::InBatch => 0,
            SendPhase::ToSend => 1,
            SendPhase::Expired => 2,
            SendPhase::Done => 3,
            SendPhase::Reported | SendPhase::Cleared | SendPhase::Silent => 4,
            SendPhase::ReportsAgain => 5,
            SendPhase::ReportedAgain => 6,
        }
    }
}
