//! Aggregator throughput (`kvcc-bench --aggregator`): rank-reports per second through the
//! deterministic core on one thread, through the concurrent front with one reporter
//! thread per rank, pinned to one core and then to two, and through `kvcc conform`, whose
//! reader threads (one per rank file) decode a recorded run into that front, on one core
//! and then two.
//!
//! The workload is a prefill engine of [`WORLD_SIZE`] ranks under `E = world_size`, shaped
//! like conform's benchmark run ([`crate::recorded_run`]): every step delay-frees
//! [`REQUESTS_PER_STEP`] requests and each rank reports each of them 1 to [`LAG`] steps
//! later, so countdowns stay open across steps and every step's outputs mix requests of
//! several ages. A rank-report is one request id in one rank's `finished_sending`.
//!
//! The same schedule runs with four kinds of id: `u64` (what the core counts once
//! conform has interned vLLM's ids), `string` (vLLM's own ids, [`request_id`], as the
//! core's `Id` — the baseline), `interned` (string ids in and out, numbered at the
//! boundary by conform's [`Interner`] exactly as conform's readers number them, the core
//! on the numbers, emitted numbers named again and forgotten once the core holds nothing
//! for them — the interning is inside the timing) and `request-name` (each output's ids
//! as [`RequestName`]s, hashed when the output was built, as vLLM's sets hold strings
//! that cached their hash when the set was built), with the core's entries in its ordered
//! map or in a hash map ([`HashedAggregator`]). `bench/aggregator_vs_vllm.py` times
//! vLLM's `KVOutputAggregator` on the string schedule (`--aggregator-workload` writes it).
//!
//! The schedule is periodic: ids are taken modulo one ring of [`RING_STEPS`] steps, so one
//! prebuilt ring of outputs is replayed pass after pass. After one untimed warm-up pass
//! every timed pass emits every id of the ring exactly once; that count is checked, so a
//! broken aggregator or an optimised-away loop cannot pass for a fast one.
//!
//! The front alone is handed prebuilt outputs, so all it does per step is lock, buffer
//! and count: work too small for a second core to take over (docs/benchmarks.md). In
//! conform, its use, each rank's reader decodes its file before it submits; the
//! `conform` setups measure that, on a run [`RecordedRun`] writes to a temporary
//! directory (the same schedule shape, [`crate::recorded_run`]), checked to conform and
//! to have every request seen.

use crate::recorded_run::Generated;
use kvcc_aggregator::{
    Aggregator, ConcurrentAggregator, Direction, EntryMap, HashedAggregator, Policy, Rank,
    RequestName, Step, StepOutcome, Violation, WorkerOutput,
};
use kvcc_conform::intern::{IdNum, Interner};
use serde::Serialize;
use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

pub use crate::schedule::{LAG, REQUESTS_PER_STEP, WORLD_SIZE};
/// Steps in one period of the schedule.
pub const RING_STEPS: u64 = 1024;
/// Timed passes over the ring for the core: 33.6 million rank-reports.
pub const CORE_PASSES: u64 = 512;
/// Timed passes for the front: 4.2 million rank-reports, each a lock round trip.
pub const FRONT_PASSES: u64 = 64;

const IDS: u64 = RING_STEPS * REQUESTS_PER_STEP;
const _: () = assert!(IDS % LAG == 0, "the schedule must repeat after one ring");

/// One ring of the schedule: each step's announcements and each rank's output.
pub struct Workload<Id: Ord> {
    /// `steps[s][r]`: rank `r`'s output at ring step `s`.
    steps: Vec<Vec<WorkerOutput<Id>>>,
    /// Ids the scheduler delay-frees at each ring step (announced under `Strict`).
    freed: Vec<Vec<Id>>,
}

impl Workload<u64> {
    pub fn new() -> Workload<u64> {
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

    /// The same schedule with vLLM's string ids ([`request_id`]).
    pub fn named(&self) -> Workload<String> {
        self.map_ids(|&id| request_id(id))
    }
}

impl Workload<String> {
    /// The same schedule with each id a [`RequestName`], made apart for every output that
    /// carries it (each rank's output arrives decoded on its own), its hash taken then.
    pub fn request_names(&self) -> Workload<RequestName> {
        self.map_ids(|name| RequestName::new(name))
    }
}

impl<Id: Ord> Workload<Id> {
    /// The same schedule with every id renamed by `rename`, which must be one-to-one.
    fn map_ids<T: Ord>(&self, rename: impl Fn(&Id) -> T) -> Workload<T> {
        let all = |ids: &BTreeSet<Id>| ids.iter().map(&rename).collect();
        Workload {
            steps: self
                .steps
                .iter()
                .map(|outputs| {
                    outputs
                        .iter()
                        .map(|o| WorkerOutput {
                            finished_sending: all(&o.finished_sending),
                            ..WorkerOutput::empty(o.rank)
                        })
                        .collect()
                })
                .collect(),
            freed: self
                .freed
                .iter()
                .map(|ids| ids.iter().map(&rename).collect())
                .collect(),
        }
    }

    /// Rank-reports in one pass over the ring.
    pub fn reports_per_pass(&self) -> u64 {
        IDS * u64::from(WORLD_SIZE)
    }

    /// Ids emitted per pass in steady state: every id once.
    pub fn emitted_per_pass(&self) -> u64 {
        IDS
    }

    /// Each ring step's outputs, rank by rank.
    pub fn steps(&self) -> &[Vec<WorkerOutput<Id>>] {
        &self.steps
    }
}

impl Default for Workload<u64> {
    fn default() -> Self {
        Workload::new()
    }
}

#[derive(Serialize)]
struct WorkloadFile<'a> {
    format_version: u32,
    world_size: u32,
    expected_finished_count: u32,
    output_rank: Rank,
    reports_per_pass: u64,
    emitted_per_pass: u64,
    /// `finished_sending[s][r]`: rank `r`'s ids at ring step `s`.
    finished_sending: Vec<Vec<&'a BTreeSet<String>>>,
}

/// The string-id ring as JSON, for timing another aggregator on the same reports.
pub fn workload_json(workload: &Workload<String>) -> String {
    let file = WorkloadFile {
        format_version: super::FORMAT_VERSION,
        world_size: WORLD_SIZE,
        expected_finished_count: WORLD_SIZE,
        output_rank: 0,
        reports_per_pass: workload.reports_per_pass(),
        emitted_per_pass: workload.emitted_per_pass(),
        finished_sending: workload
            .steps
            .iter()
            .map(|outputs| outputs.iter().map(|o| &o.finished_sending).collect())
            .collect(),
    };
    serde_json::to_string(&file).unwrap_or_default()
}

/// Request `n`'s id as vLLM 0.34's engine names a completion's first choice: the
/// server's `cmpl-<16 hex>-0` (entrypoints/openai/completion/serving.py) with `-<8 hex>`
/// appended by the engine (`assign_request_id`, vllm/v1/engine/input_processor.py) — random
/// digits there, splitmix64 of `n` here, so runs repeat.
pub fn request_id(n: u64) -> String {
    format!("cmpl-{:016x}-0-{:08x}", splitmix64(n), splitmix64(!n) >> 32)
}

fn splitmix64(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Both id kinds of the one schedule, built once before any timing.
pub struct Workloads {
    pub numbers: Workload<u64>,
    pub names: Workload<String>,
    pub request_names: Workload<RequestName>,
    /// The recorded run of the `conform` setups, written on first use.
    recorded: OnceLock<Result<RecordedRun, String>>,
}

impl Workloads {
    pub fn new() -> Workloads {
        let numbers = Workload::new();
        let names = numbers.named();
        let request_names = names.request_names();
        Workloads {
            numbers,
            names,
            request_names,
            recorded: OnceLock::new(),
        }
    }

    /// The `conform` setups' recorded run, written the first time it is asked for, of at
    /// least `bytes` bytes (the size asked for then).
    fn recorded_run(&self, bytes: u64) -> Result<&RecordedRun, String> {
        self.recorded
            .get_or_init(|| RecordedRun::write(bytes))
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// A conforming recorded run of [`WORLD_SIZE`] ranks in a temporary directory, removed
/// when dropped.
pub struct RecordedRun {
    _dir: tempfile::TempDir,
    run: String,
    generated: Generated,
}

impl RecordedRun {
    /// Bytes of the run the figures are taken on: about 26,000 steps, a second of conform
    /// on one core.
    pub const BYTES: u64 = 128 << 20;

    fn write(bytes: u64) -> Result<RecordedRun, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("cannot make a temp dir: {e}"))?;
        let run = dir.path().join("prefill");
        let generated = crate::recorded_run::generate(&run, bytes)
            .map_err(|e| format!("cannot write a recorded run in {}: {e}", run.display()))?;
        Ok(RecordedRun {
            run: run.display().to_string(),
            _dir: dir,
            generated,
        })
    }
}

/// `kvcc conform` on the recorded run, all its threads (a reader per rank file and one
/// for the scheduler's log, submitting into the front; the monitor consuming) pinned to
/// the first `cores` CPUs. Every request is reported once by every rank, so the reports
/// are requests × ranks; the run must conform with every request seen, or the figure is
/// of a wrong run.
pub fn conform(run: &RecordedRun, cores: usize) -> Result<Timing, String> {
    let _pinned = Pinned::to_first(cores)?;
    let start = Instant::now();
    let report = kvcc_conform::check_run(&run.run, &kvcc_conform::Options::default())
        .map_err(|e| e.to_string())?;
    let seconds = start.elapsed().as_secs_f64();
    let generated = &run.generated;
    if !report.conforms()
        || report.steps != generated.steps
        || report.requests_seen != generated.requests
    {
        return Err(format!(
            "conform of the recorded run: {} findings, {} steps of {}, {} requests of {}",
            report.findings.len(),
            report.steps,
            generated.steps,
            report.requests_seen,
            generated.requests
        ));
    }
    Ok(Timing {
        reports: generated.requests * u64::from(WORLD_SIZE),
        seconds,
    })
}

impl Default for Workloads {
    fn default() -> Self {
        Workloads::new()
    }
}

/// The core with string ids at its boundary, composed as `kvcc conform` composes it:
/// each output's ids numbered by conform's [`Interner`] (the readers' `intern_all`), the
/// core counting numbers, emitted numbers named again, and a number forgotten once the
/// core holds nothing for it, so the table follows the requests in flight. A report
/// costs a hash of its id and a lookup that allocates nothing; an id is copied once per
/// lifetime, when first interned.
pub struct Interned {
    interner: Interner,
    core: Aggregator<IdNum>,
    forgetting: Forgetting,
    /// Steps aggregated so far: the step the interner records mentions at.
    step: Step,
    /// One step's numbered outputs, kept so a steady stream reuses the vector.
    outputs: Vec<WorkerOutput<IdNum>>,
}

/// When a number is given up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Forgetting {
    /// Once the core holds nothing for it.
    WhenNothingHeld,
    /// The broken twin: as soon as it is emitted in one direction, though the other
    /// direction or a pending failure may still hold it; its next report then counts
    /// under a fresh number, as a request the core never saw.
    OnEmission,
}

impl Interned {
    pub fn new(core: Aggregator<IdNum>) -> Interned {
        Interned::build(core, Forgetting::WhenNothingHeld)
    }

    /// The broken twin (see `Forgetting::OnEmission`). It exists only so the differential
    /// test (bench/tests/interned_differential.rs) can prove it catches a wrong
    /// interning; never use it for anything else.
    #[doc(hidden)]
    pub fn with_forgetting_on_emission(core: Aggregator<IdNum>) -> Interned {
        Interned::build(core, Forgetting::OnEmission)
    }

    fn build(core: Aggregator<IdNum>, forgetting: Forgetting) -> Interned {
        Interned {
            interner: Interner::new(),
            core,
            forgetting,
            step: 0,
            outputs: Vec::new(),
        }
    }

    pub fn announce(&mut self, direction: Direction, name: &str) {
        let id = self.interner.intern(name, self.step);
        self.core.announce(direction, id);
        self.forget_unless_held(id);
    }

    pub fn retire(&mut self, direction: Direction, name: &str) {
        let id = self.interner.intern(name, self.step);
        self.core.retire(direction, &id);
        self.forget_unless_held(id);
    }

    /// One step's outputs, as [`Aggregator::aggregate`] takes them, with the same
    /// outcome as an `Aggregator<String>`'s except for the order of `violations`: the
    /// core refuses one output's ids in the order of their numbers, not their names.
    pub fn aggregate(
        &mut self,
        outputs: &[WorkerOutput<String>],
        output_rank: Rank,
    ) -> StepOutcome<Arc<str>> {
        let step = self.step;
        let number = |names: &BTreeSet<String>| {
            self.interner
                .intern_all(names.iter().map(String::as_str), step)
                .expect("a set lists each id once")
        };
        self.outputs.clear();
        for output in outputs {
            self.outputs.push(WorkerOutput {
                rank: output.rank,
                finished_sending: number(&output.finished_sending),
                finished_recving: number(&output.finished_recving),
                failed_recving: number(&output.failed_recving),
                invalid_block_ids: output.invalid_block_ids.clone(),
                expected_finished_count: output.expected_finished_count,
            });
        }
        let outcome = self.core.aggregate(&self.outputs, output_rank);
        let named = self.name(&outcome);
        // Only these can have left the core this step: emitted ids, ids refused without an
        // entry, and every id of a dropped step (interned, never counted).
        if outcome.dropped {
            let mentioned: Vec<IdNum> = self.outputs.iter().flat_map(ids_of).collect();
            mentioned
                .into_iter()
                .for_each(|id| self.forget_unless_held(id));
        } else {
            let emitted = outcome
                .finished_sending
                .iter()
                .chain(&outcome.finished_recving);
            let refused = outcome.violations.iter().map(|v| &v.id);
            for &id in emitted.chain(refused) {
                self.forget_unless_held(id);
            }
        }
        self.step += 1;
        named
    }

    /// Request ids the interner holds numbers for now.
    pub fn interned(&self) -> usize {
        self.interner.len()
    }

    fn name(&self, outcome: &StepOutcome<IdNum>) -> StepOutcome<Arc<str>> {
        let name = |id: &IdNum| {
            self.interner
                .name(*id)
                .expect("numbers the core holds are interned")
        };
        let names = |ids: &BTreeSet<IdNum>| ids.iter().map(name).collect();
        StepOutcome {
            dropped: outcome.dropped,
            finished_sending: names(&outcome.finished_sending),
            finished_recving: names(&outcome.finished_recving),
            failed_recving: names(&outcome.failed_recving),
            invalid_block_ids: outcome.invalid_block_ids.clone(),
            violations: outcome
                .violations
                .iter()
                .map(|v| Violation {
                    kind: v.kind,
                    direction: v.direction,
                    id: name(&v.id),
                    rank: v.rank,
                })
                .collect(),
        }
    }

    fn forget_unless_held(&self, id: IdNum) {
        if self.forgetting == Forgetting::OnEmission || !self.core.holds(&id) {
            self.interner.forget(id, self.step);
        }
    }
}

fn ids_of(output: &WorkerOutput<IdNum>) -> impl Iterator<Item = IdNum> + '_ {
    output
        .finished_sending
        .iter()
        .chain(&output.finished_recving)
        .chain(&output.failed_recving)
        .copied()
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

/// The core on this thread, as given: `passes` timed passes after a warm-up pass.
pub fn core<Id: Ord + Clone, Map: EntryMap<Id>>(
    workload: &Workload<Id>,
    mut aggregator: Aggregator<Id, Map>,
    passes: u64,
) -> Result<Timing, String> {
    let strict = aggregator.policy() == Policy::Strict;
    let pass = |aggregator: &mut Aggregator<Id, Map>| -> (u64, usize) {
        let mut emitted = 0u64;
        let mut refused = 0usize;
        for (outputs, freed) in workload.steps.iter().zip(&workload.freed) {
            if strict {
                for id in freed {
                    aggregator.announce(Direction::Sending, id.clone());
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
    timed(workload, passes, &mut aggregator, pass)
}

/// The core with its entries in `map`.
pub fn core_in<Id: Ord + Clone + std::hash::Hash>(
    map: Map,
    workload: &Workload<Id>,
    policy: Policy,
    passes: u64,
) -> Result<Timing, String> {
    match map {
        Map::Ordered => core(workload, Aggregator::new(policy, WORLD_SIZE), passes),
        Map::Hashed => core(
            workload,
            HashedAggregator::hashed(policy, WORLD_SIZE),
            passes,
        ),
    }
}

/// String ids through [`Interned`] under `Countdown`, interning included.
pub fn interned(workload: &Workload<String>, passes: u64) -> Result<Timing, String> {
    let mut fast = Interned::new(Aggregator::new(Policy::Countdown, WORLD_SIZE));
    let pass = |fast: &mut Interned| -> (u64, usize) {
        let mut emitted = 0u64;
        for outputs in &workload.steps {
            emitted += fast.aggregate(outputs, 0).finished_sending.len() as u64;
        }
        (emitted, 0)
    };
    timed(workload, passes, &mut fast, pass)
}

/// One warm-up pass, then `passes` timed ones, whose emissions are checked.
fn timed<Id: Ord, A>(
    workload: &Workload<Id>,
    passes: u64,
    aggregator: &mut A,
    pass: impl Fn(&mut A) -> (u64, usize),
) -> Result<Timing, String> {
    pass(aggregator);
    let start = Instant::now();
    let mut emitted = 0;
    let mut refused = 0;
    for _ in 0..passes {
        let (e, r) = pass(aggregator);
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

fn check_emitted<Id: Ord>(
    workload: &Workload<Id>,
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
pub fn front(
    workload: &Workload<u64>,
    map: Map,
    passes: u64,
    cores: usize,
) -> Result<Timing, String> {
    match map {
        Map::Ordered => front_of(
            workload,
            Aggregator::new(Policy::Countdown, WORLD_SIZE),
            passes,
            cores,
        ),
        Map::Hashed => front_of(
            workload,
            HashedAggregator::hashed(Policy::Countdown, WORLD_SIZE),
            passes,
            cores,
        ),
    }
}

fn front_of<M: EntryMap<u64> + Send + 'static>(
    workload: &Workload<u64>,
    core: Aggregator<u64, M>,
    passes: u64,
    cores: usize,
) -> Result<Timing, String> {
    let _pinned = Pinned::to_first(cores)?;
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

/// The request ids a measurement counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ids {
    /// Numbers, as the core sees them once conform has interned vLLM's ids.
    U64,
    /// vLLM's strings as the core's `Id`: the baseline the interning is measured against.
    String,
    /// vLLM's strings through [`Interned`]: interned at the boundary, numbers in the core.
    Interned,
    /// vLLM's strings as [`RequestName`]s, hashed once when made, as the sets vLLM's
    /// aggregator is handed hold strings that have cached their hash.
    RequestName,
}

impl Ids {
    pub fn name(self) -> &'static str {
        match self {
            Ids::U64 => "u64",
            Ids::String => "string",
            Ids::Interned => "interned",
            Ids::RequestName => "request-name",
        }
    }
}

/// Where the core keeps its entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Map {
    /// [`Aggregator`]'s ordered map: what the model and conform use.
    Ordered,
    /// [`HashedAggregator`]'s hash map.
    Hashed,
}

impl Map {
    pub fn name(self) -> &'static str {
        match self {
            Map::Ordered => "ordered",
            Map::Hashed => "hashed",
        }
    }
}

/// What one aggregator measurement is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    /// `core`, `front` or `conform`.
    pub bench: &'static str,
    pub policy: Policy,
    pub ids: Ids,
    pub map: Map,
    pub reporter_threads: u32,
    pub cores: usize,
}

const fn core_setup(policy: Policy, ids: Ids, map: Map) -> Setup {
    Setup {
        bench: "core",
        policy,
        ids,
        map,
        reporter_threads: 1,
        cores: 1,
    }
}

const fn front_setup(map: Map, cores: usize) -> Setup {
    Setup {
        bench: "front",
        policy: Policy::Countdown,
        ids: Ids::U64,
        map,
        reporter_threads: WORLD_SIZE,
        cores,
    }
}

/// Conform through the hashed front, its ids interned by its readers.
const fn conform_setup(cores: usize) -> Setup {
    Setup {
        bench: "conform",
        policy: Policy::Countdown,
        ids: Ids::Interned,
        map: Map::Hashed,
        reporter_threads: WORLD_SIZE,
        cores,
    }
}

/// The measurements `kvcc-bench --aggregator` makes, in order.
pub const SETUPS: [Setup; 12] = [
    core_setup(Policy::Countdown, Ids::U64, Map::Ordered),
    core_setup(Policy::Strict, Ids::U64, Map::Ordered),
    core_setup(Policy::Countdown, Ids::U64, Map::Hashed),
    core_setup(Policy::Countdown, Ids::String, Map::Ordered),
    core_setup(Policy::Countdown, Ids::Interned, Map::Ordered),
    core_setup(Policy::Countdown, Ids::RequestName, Map::Hashed),
    front_setup(Map::Ordered, 1),
    front_setup(Map::Ordered, 2),
    front_setup(Map::Hashed, 1),
    front_setup(Map::Hashed, 2),
    conform_setup(1),
    conform_setup(2),
];

/// Runs one setup once; `passes_divisor` divides the timed passes and the recorded run's
/// size (1 for the figures, more only to test the machinery quickly).
pub fn measure(workloads: &Workloads, setup: Setup, passes_divisor: u64) -> Result<Timing, String> {
    let divisor = passes_divisor.max(1);
    if setup.bench == "conform" {
        return conform(
            workloads.recorded_run(RecordedRun::BYTES / divisor)?,
            setup.cores,
        );
    }
    if setup.bench == "front" {
        return front(
            &workloads.numbers,
            setup.map,
            (FRONT_PASSES / divisor).max(1),
            setup.cores,
        );
    }
    let _pinned = Pinned::to_first(setup.cores)?;
    let passes = (CORE_PASSES / divisor).max(1);
    let (policy, map) = (setup.policy, setup.map);
    match setup.ids {
        Ids::U64 => core_in(map, &workloads.numbers, policy, passes),
        Ids::String => core_in(map, &workloads.names, policy, passes),
        Ids::RequestName => core_in(map, &workloads.request_names, policy, passes),
        Ids::Interned => interned(&workloads.names, passes),
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
    ids: &'static str,
    map: &'static str,
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
        ids: m.setup.ids.name(),
        map: m.setup.map.name(),
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

/// The human table, and how the front and conform scale from one core to two.
pub fn table(measured: &[Measured]) -> String {
    let header = [
        "BENCH",
        "POLICY",
        "IDS",
        "MAP",
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
                m.setup.ids.name().to_string(),
                m.setup.map.name().to_string(),
                m.setup.reporter_threads.to_string(),
                m.setup.cores.to_string(),
                m.timings.first().map_or(0, |t| t.reports).to_string(),
                format!("{:.3}", super::median(&m.seconds_all())),
                format!("{:.0}", m.reports_per_second_median()),
            ]
        })
        .collect();
    let mut out = super::render_table(&header, &rows, 2);
    let scaling = [
        ("front", Map::Ordered, "reporter threads, ordered map"),
        ("front", Map::Hashed, "reporter threads, hashed map"),
        (
            "conform",
            Map::Hashed,
            "reader threads into the hashed front",
        ),
    ];
    for (bench, map, threads) in scaling {
        let rate = |cores| {
            measured
                .iter()
                .find(|m| m.setup.bench == bench && m.setup.map == map && m.setup.cores == cores)
                .map(Measured::reports_per_second_median)
        };
        if let (Some(one), Some(two)) = (rate(1), rate(2)) {
            out += &format!(
                "\n{bench}, {WORLD_SIZE} {threads}: 2 cores / 1 core = {:.2}x",
                two / one.max(1e-9)
            );
        }
    }
    out.push('\n');
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
    fn the_core_emits_every_id_once_per_pass_under_both_policies_and_all_ids() {
        let workloads = Workloads::new();
        let reports = 2 * workloads.numbers.reports_per_pass();
        for policy in [Policy::Countdown, Policy::Strict] {
            for map in [Map::Ordered, Map::Hashed] {
                let timings = [
                    core_in(map, &workloads.numbers, policy, 2),
                    core_in(map, &workloads.names, policy, 2),
                    core_in(map, &workloads.request_names, policy, 2),
                ];
                for timing in timings {
                    assert_eq!(timing.unwrap().reports, reports, "{policy:?} {map:?}");
                }
            }
        }
        let timing = interned(&workloads.names, 2).unwrap();
        assert_eq!(timing.reports, 2 * workloads.names.reports_per_pass());
    }

    #[test]
    fn string_ids_look_like_vllms_and_are_distinct() {
        let id = request_id(0);
        assert_eq!(id.len(), "cmpl-".len() + 16 + "-0-".len() + 8, "{id}");
        assert!(
            id.starts_with("cmpl-") && id[21..].starts_with("-0-"),
            "{id}"
        );
        let names: BTreeSet<String> = (0..IDS).map(request_id).collect();
        assert_eq!(names.len() as u64, IDS);
    }

    /// Memory follows the requests in flight: halfway through the ring, the interner
    /// holds a number for exactly the ids whose countdowns are still open.
    #[test]
    fn the_interned_path_forgets_every_emitted_id() {
        let names = Workload::new().named();
        let mut fast = Interned::new(Aggregator::new(Policy::Countdown, WORLD_SIZE));
        for outputs in &names.steps[..names.steps.len() / 2] {
            fast.aggregate(outputs, 0);
        }
        let open = fast.core.open_entries();
        assert!(open > 0, "requests are in flight in mid-ring");
        assert_eq!(fast.interned(), open);
    }

    /// The conform figure counts a run's reports only when conform saw all of them: a
    /// run whose requests differ from what was written is an error, not a figure.
    #[test]
    fn conform_is_measured_only_on_the_run_written() {
        let mut run = RecordedRun::write(200_000).unwrap();
        let timing = conform(&run, 1).unwrap();
        assert_eq!(
            timing.reports,
            run.generated.requests * u64::from(WORLD_SIZE)
        );
        run.generated.requests += 1;
        let error = conform(&run, 1).unwrap_err();
        assert!(error.contains("requests of"), "{error}");
    }

    #[test]
    fn the_front_aggregates_every_step_and_emits_every_id() {
        let workload = Workload::new();
        let timing = front(&workload, Map::Ordered, 1, 1).unwrap();
        assert_eq!(timing.reports, 2 * workload.reports_per_pass());
    }
}
