//! Aggregator throughput (`kvcc-bench --aggregator`): rank-reports per second through the
//! deterministic core on one thread, and through the concurrent front with one reporter
//! thread per rank, pinned to one core and then to two.
//!
//! The workload is a prefill engine of [`WORLD_SIZE`] ranks under `E = world_size`, shaped
//! like conform's benchmark run (`conform::bench`): every step delay-frees
//! [`REQUESTS_PER_STEP`] requests and each rank reports each of them 1 to [`LAG`] steps
//! later, so countdowns stay open across steps and every step's outputs mix requests of
//! several ages. A rank-report is one request id in one rank's `finished_sending`. Ids are
//! `u64`, as conform interns vLLM's request ids.
//!
//! The schedule is periodic: ids are taken modulo one ring of [`RING_STEPS`] steps, so one
//! prebuilt ring of outputs is replayed pass after pass. After one untimed warm-up pass
//! every timed pass emits every id of the ring exactly once; that count is checked, so a
//! broken aggregator or an optimised-away loop cannot pass for a fast one.

use kvcc_aggregator::{Aggregator, ConcurrentAggregator, Direction, Policy, Rank, WorkerOutput};
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;

/// Ranks of the engine, and reporter threads of the front.
pub const WORLD_SIZE: u32 = 8;
/// Requests delay-freed per step.
pub const REQUESTS_PER_STEP: u64 = 8;
/// A rank reports a request 1 to `LAG` steps after it was delay-freed.
pub const LAG: u64 = 4;
/// Steps in one period of the schedule.
pub const RING_STEPS: u64 = 1024;
/// Timed passes over the ring for the core: 33.6 million rank-reports.
pub const CORE_PASSES: u64 = 512;
/// Timed passes for the front: 4.2 million rank-reports, each a lock round trip.
pub const FRONT_PASSES: u64 = 64;

const IDS: u64 = RING_STEPS * REQUESTS_PER_STEP;
const _: () = assert!(IDS % LAG == 0, "the schedule must repeat after one ring");

/// One ring of the schedule: each step's announcements and each rank's output.
pub struct Workload {
    /// `steps[s][r]`: rank `r`'s output at ring step `s`.
    steps: Vec<Vec<WorkerOutput<u64>>>,
    /// Ids the scheduler delay-frees at each ring step (announced under `Strict`).
    freed: Vec<Vec<u64>>,
}

impl Workload {
    pub fn new() -> Workload {
        let ranks = WORLD_SIZE as usize;
        let mut steps: Vec<Vec<WorkerOutput<u64>>> = (0..RING_STEPS)
            .map(|_| {
                (0..WORLD_SIZE)
                    .map(|r| WorkerOutput::empty(r as Rank))
                    .collect()
            })
            .collect();
        let mut freed = vec![Vec::new(); RING_STEPS as usize];
        for id in 0..IDS {
            let freed_at = id / REQUESTS_PER_STEP;
            freed[freed_at as usize].push(id);
            for rank in 0..ranks as u64 {
                let at = (freed_at + 1 + (id + rank) % LAG) % RING_STEPS;
                steps[at as usize][rank as usize]
                    .finished_sending
                    .insert(id);
            }
        }
        Workload { steps, freed }
    }

    /// Rank-reports in one pass over the ring.
    pub fn reports_per_pass(&self) -> u64 {
        IDS * u64::from(WORLD_SIZE)
    }

    /// Ids emitted per pass in steady state: every id once.
    pub fn emitted_per_pass(&self) -> u64 {
        IDS
    }
}

impl Default for Workload {
    fn default() -> Self {
        Workload::new()
    }
}

/// One timed run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    pub reports: u64,
    pub seconds: f64,
}

impl Timing {
    pub fn reports_per_second(&self) -> f64 {
        self.reports as f64 / self.seconds.max(1e-9)
    }
}

/// The core on this thread: `passes` timed passes after a warm-up pass.
pub fn core(workload: &Workload, policy: Policy, passes: u64) -> Result<Timing, String> {
    let mut aggregator = Aggregator::new(policy, WORLD_SIZE);
    let strict = policy == Policy::Strict;
    let pass = |aggregator: &mut Aggregator<u64>| -> (u64, usize) {
        let mut emitted = 0u64;
        let mut refused = 0usize;
        for (outputs, freed) in workload.steps.iter().zip(&workload.freed) {
            if strict {
                for &id in freed {
                    aggregator.announce(Direction::Sending, id);
                }
            }
            let outcome = aggregator.aggregate(outputs, 0);
            emitted += outcome.finished_sending.len() as u64;
            refused += outcome.violations.len();
            if strict {
                for id in &outcome.finished_sending {
                    aggregator.retire(Direction::Sending, id);
                }
            }
        }
        (emitted, refused)
    };
    pass(&mut aggregator);
    let start = Instant::now();
    let mut emitted = 0;
    let mut refused = 0;
    for _ in 0..passes {
        let (e, r) = pass(&mut aggregator);
        emitted += e;
        refused += r;
    }
    let seconds = start.elapsed().as_secs_f64();
    check_emitted(workload, passes, emitted, refused)?;
    Ok(Timing {
        reports: passes * workload.reports_per_pass(),
        seconds,
    })
}

fn check_emitted(
    workload: &Workload,
    passes: u64,
    emitted: u64,
    refused: usize,
) -> Result<(), String> {
    let want = passes * workload.emitted_per_pass();
    if emitted != want || refused != 0 {
        return Err(format!(
            "the aggregator emitted {emitted} ids (want {want}) and refused {refused} reports (want 0)"
        ));
    }
    Ok(())
}

/// The concurrent front under `Countdown`: one reporter thread per rank submitting its own
/// prebuilt outputs step after step, and one consumer taking outcomes, all pinned to the
/// first `cores` CPUs this process may use. Outputs for every step are built before the
/// clock starts, so the figure is the front's (locking, buffering, the core under the
/// lock), not the building of outputs.
pub fn front(workload: &Workload, passes: u64, cores: usize) -> Result<Timing, String> {
    let _pinned = Pinned::to_first(cores)?;
    let core = Aggregator::new(Policy::Countdown, WORLD_SIZE);
    let front =
        Arc::new(ConcurrentAggregator::new(core, WORLD_SIZE, 0).map_err(|e| e.to_string())?);
    let steps = (passes + 1) * RING_STEPS;
    let per_rank: Vec<Vec<WorkerOutput<u64>>> = (0..WORLD_SIZE as usize)
        .map(|rank| {
            (0..steps)
                .map(|step| workload.steps[(step % RING_STEPS) as usize][rank].clone())
                .collect()
        })
        .collect();
    let start = Instant::now();
    let consumer = {
        let front = Arc::clone(&front);
        std::thread::spawn(move || -> Result<(u64, u64), String> {
            let mut emitted_timed = 0u64;
            let mut steps = 0u64;
            while let Some((step, outcome)) = front.recv().map_err(|e| e.to_string())? {
                steps += 1;
                if step >= RING_STEPS {
                    emitted_timed += outcome.finished_sending.len() as u64;
                }
            }
            Ok((steps, emitted_timed))
        })
    };
    let reporters: Vec<_> = per_rank
        .into_iter()
        .map(|outputs| {
            let front = Arc::clone(&front);
            std::thread::spawn(move || -> Result<(), String> {
                for (step, output) in outputs.into_iter().enumerate() {
                    front
                        .report(step as u64, output)
                        .map_err(|e| e.to_string())?;
                }
                Ok(())
            })
        })
        .collect();
    for reporter in reporters {
        reporter.join().map_err(|_| "a reporter panicked")??;
    }
    front.close().map_err(|e| e.to_string())?;
    let (aggregated, emitted) = consumer.join().map_err(|_| "the consumer panicked")??;
    let seconds = start.elapsed().as_secs_f64();
    if aggregated != steps {
        return Err(format!(
            "the front aggregated {aggregated} steps of {steps}"
        ));
    }
    check_emitted(workload, passes, emitted, 0)?;
    // The warm-up pass is timed here too (the threads run it first): count its reports.
    Ok(Timing {
        reports: (passes + 1) * workload.reports_per_pass(),
        seconds,
    })
}

/// This thread's CPU affinity narrowed to the first `cores` CPUs it may use, restored
/// when dropped. Threads spawned meanwhile inherit the narrowed set.
struct Pinned {
    #[cfg(target_os = "linux")]
    previous: libc::cpu_set_t,
}

#[cfg(target_os = "linux")]
impl Pinned {
    fn to_first(cores: usize) -> Result<Pinned, String> {
        // SAFETY: cpu_set_t is plain data; sched_{get,set}affinity read and write exactly
        // size_of::<cpu_set_t>() bytes of it, for this thread (pid 0).
        unsafe {
            let mut previous: libc::cpu_set_t = std::mem::zeroed();
            let size = std::mem::size_of::<libc::cpu_set_t>();
            if libc::sched_getaffinity(0, size, &mut previous) != 0 {
                return Err(format!(
                    "cannot read the CPU affinity: {}",
                    std::io::Error::last_os_error()
                ));
            }
            let allowed: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
                .filter(|&cpu| libc::CPU_ISSET(cpu, &previous))
                .collect();
            if allowed.len() < cores {
                return Err(format!(
                    "{cores} cores requested, this process may use {}",
                    allowed.len()
                ));
            }
            let mut narrowed: libc::cpu_set_t = std::mem::zeroed();
            for &cpu in &allowed[..cores] {
                libc::CPU_SET(cpu, &mut narrowed);
            }
            if libc::sched_setaffinity(0, size, &narrowed) != 0 {
                return Err(format!(
                    "cannot set the CPU affinity: {}",
                    std::io::Error::last_os_error()
                ));
            }
            Ok(Pinned { previous })
        }
    }
}

#[cfg(target_os = "linux")]
impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: as in `to_first`.
        unsafe {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.previous);
        }
    }
}

#[cfg(not(target_os = "linux"))]
impl Pinned {
    fn to_first(_cores: usize) -> Result<Pinned, String> {
        Err("pinning threads to cores needs Linux".into())
    }
}

/// What one aggregator measurement is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    /// `core` or `front`.
    pub bench: &'static str,
    pub policy: Policy,
    pub reporter_threads: u32,
    pub cores: usize,
}

/// The measurements `kvcc-bench --aggregator` makes, in order.
pub const SETUPS: [Setup; 4] = [
    Setup {
        bench: "core",
        policy: Policy::Countdown,
        reporter_threads: 1,
        cores: 1,
    },
    Setup {
        bench: "core",
        policy: Policy::Strict,
        reporter_threads: 1,
        cores: 1,
    },
    Setup {
        bench: "front",
        policy: Policy::Countdown,
        reporter_threads: WORLD_SIZE,
        cores: 1,
    },
    Setup {
        bench: "front",
        policy: Policy::Countdown,
        reporter_threads: WORLD_SIZE,
        cores: 2,
    },
];

/// Runs one setup once; `passes_divisor` divides the timed passes (1 for the figures,
/// more only to test the machinery quickly).
pub fn measure(workload: &Workload, setup: Setup, passes_divisor: u64) -> Result<Timing, String> {
    let divisor = passes_divisor.max(1);
    match setup.bench {
        "core" => {
            let _pinned = Pinned::to_first(setup.cores)?;
            core(workload, setup.policy, (CORE_PASSES / divisor).max(1))
        }
        _ => front(workload, (FRONT_PASSES / divisor).max(1), setup.cores),
    }
}

/// Every run of one setup.
#[derive(Clone, Debug)]
pub struct Measured {
    pub setup: Setup,
    pub timings: Vec<Timing>,
    pub load_average: Option<f64>,
}

impl Measured {
    pub fn seconds_all(&self) -> Vec<f64> {
        self.timings.iter().map(|t| t.seconds).collect()
    }

    pub fn reports_per_second_median(&self) -> f64 {
        let rates: Vec<f64> = self
            .timings
            .iter()
            .map(Timing::reports_per_second)
            .collect();
        super::median(&rates)
    }
}

fn policy_name(policy: Policy) -> &'static str {
    match policy {
        Policy::Countdown => "countdown",
        Policy::Strict => "strict",
    }
}

#[derive(Serialize)]
struct Line<'a> {
    format_version: u32,
    kvcc_version: &'static str,
    kind: &'static str,
    bench: &'a str,
    policy: &'static str,
    world_size: u32,
    reporter_threads: u32,
    cores: usize,
    runs: usize,
    release_build: bool,
    load_average: Option<f64>,
    reports: u64,
    seconds: f64,
    seconds_all: Vec<f64>,
    reports_per_second: f64,
}

/// One setup's JSON line, in the documented field order (harness/FORMATS.md).
pub fn json_line(m: &Measured) -> String {
    let line = Line {
        format_version: super::FORMAT_VERSION,
        kvcc_version: kvcc::VERSION,
        kind: "aggregator",
        bench: m.setup.bench,
        policy: policy_name(m.setup.policy),
        world_size: WORLD_SIZE,
        reporter_threads: m.setup.reporter_threads,
        cores: m.setup.cores,
        runs: m.timings.len(),
        release_build: super::RELEASE_BUILD,
        load_average: m.load_average,
        reports: m.timings.first().map_or(0, |t| t.reports),
        seconds: super::median(&m.seconds_all()),
        seconds_all: m.seconds_all(),
        reports_per_second: m.reports_per_second_median(),
    };
    serde_json::to_string(&line).unwrap_or_default()
}

/// The human table, and how the front scales from one core to two.
pub fn table(measured: &[Measured]) -> String {
    let header = [
        "BENCH",
        "POLICY",
        "REPORTER THREADS",
        "CORES",
        "REPORTS",
        "SECONDS",
        "REPORTS/S",
    ];
    let rows: Vec<Vec<String>> = measured
        .iter()
        .map(|m| {
            vec![
                m.setup.bench.to_string(),
                policy_name(m.setup.policy).to_string(),
                m.setup.reporter_threads.to_string(),
                m.setup.cores.to_string(),
                m.timings.first().map_or(0, |t| t.reports).to_string(),
                format!("{:.3}", super::median(&m.seconds_all())),
                format!("{:.0}", m.reports_per_second_median()),
            ]
        })
        .collect();
    let mut out = super::render_table(&header, &rows, 2);
    let front = |cores| {
        measured
            .iter()
            .find(|m| m.setup.bench == "front" && m.setup.cores == cores)
            .map(Measured::reports_per_second_median)
    };
    if let (Some(one), Some(two)) = (front(1), front(2)) {
        out += &format!(
            "\nfront, {WORLD_SIZE} reporter threads: 2 cores / 1 core = {:.2}x\n",
            two / one.max(1e-9)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_reports_every_id_once_per_ring() {
        let workload = Workload::new();
        let reports: u64 = workload
            .steps
            .iter()
            .flatten()
            .map(|o| o.finished_sending.len() as u64)
            .sum();
        assert_eq!(reports, workload.reports_per_pass());
        // Request 0 is delay-freed at step 0 and reported by rank 0 at step 1.
        assert!(workload.steps[1][0].finished_sending.contains(&0));
    }

    #[test]
    fn the_core_emits_every_id_once_per_pass_under_both_policies() {
        let workload = Workload::new();
        for policy in [Policy::Countdown, Policy::Strict] {
            let timing = core(&workload, policy, 2).unwrap();
            assert_eq!(timing.reports, 2 * workload.reports_per_pass());
        }
    }

    #[test]
    fn the_front_aggregates_every_step_and_emits_every_id() {
        let workload = Workload::new();
        let timing = front(&workload, 1, 1).unwrap();
        assert_eq!(timing.reports, 2 * workload.reports_per_pass());
    }
}
