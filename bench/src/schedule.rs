//! The shape of the schedule every aggregator benchmark replays, in memory
//! ([`crate::aggregator`]) or as a recorded run ([`crate::recorded_run`]): one source, so
//! the core's, the front's and conform's figures are of one workload.

/// Ranks of the engine, and reporter threads of the front.
pub const WORLD_SIZE: u32 = 8;
/// Requests delay-freed per step.
pub const REQUESTS_PER_STEP: u64 = 8;
/// A rank reports a request 1 to `LAG` steps after it was delay-freed.
pub const LAG: u64 = 4;
