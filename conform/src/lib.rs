//! kvcc conform: does a recorded run honour the completion contract?
//!
//! A run directory records one engine (docs/recorded-run.md, [`format`]). Checking it:
//!
//! - one reader thread per `rank-<N>.jsonl` parses its lines and submits them to
//!   `kvcc_aggregator::ConcurrentAggregator` — the one aggregator, the type loom and
//!   shuttle check and the model steps through — so what is verified is what runs;
//! - the consumer (this thread) takes the aggregated outcomes in step order and runs the
//!   [`monitor`]s over them, with the scheduler log applied between steps (read and
//!   parsed ahead by a thread of its own, [`reader::read_events`]);
//! - scheduler events must land exactly between two aggregations (a `strict` aggregator
//!   is told of a delayed free before the step whose reports it must precede). The front
//!   announces at once, so the consumer holds one rank back: rank 0's reader hands its
//!   outputs to the consumer, which submits them after applying the events before that
//!   step. A step cannot be aggregated before every rank submitted it, so no step
//!   overtakes its events, while the other readers run ahead in parallel;
//! - readers run a bounded number of steps ahead ([`reader::WINDOW`] batches of at most
//!   [`reader::BATCH`] lines and [`format::BATCH_BYTES_MAX`] bytes), ids are forgotten
//!   after their lifetime ([`intern`]): memory follows the requests in flight, not the
//!   log.
//!
//! Bad input (a missing header or rank file, an unknown rank file, a truncated or invalid
//! line, a line longer than [`format::LINE_BYTES_MAX`], a step out of order, rank files of
//! different lengths) is an [`InputError`] with file and line; nothing is skipped.

pub mod format;
pub mod intern;
pub mod monitor;
pub mod reader;
pub mod render;

use format::{Header, Lines, PolicyName, HEADER_FILE, SCHEDULER_FILE};
use intern::{IdNum, Interner};
use kvcc_aggregator::{
    connector_expected, ConcurrentAggregator, FrontError, HashedAggregator, HashedEntries, Rank,
    Step,
};
use kvcc_model::InputError;
use monitor::{Finding, Monitor, Setup};
use reader::{Event, EventMessage, EventRecord, Message, RankStep, Record};
use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver};
use std::time::Instant;

/// The one aggregator, as conform runs it: numbered ids, entries in a hash map.
pub(crate) type Front = ConcurrentAggregator<IdNum, HashedEntries<IdNum>>;

/// How runs are checked.
#[derive(Clone, Debug)]
pub struct Options {
    /// Conform under this policy instead of the header's.
    pub policy: Option<PolicyName>,
    /// Steps a request is remembered after its lifetime ends (late reports within it are
    /// classified as resends or reports beyond E; after it, as unannounced).
    pub grace_steps: Step,
    /// Findings kept per (property, clause); the rest are counted.
    pub findings_per_clause_max: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            policy: None,
            grace_steps: 1024,
            findings_per_clause_max: 1000,
        }
    }
}

/// What checking one engine's run found.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// The run directory as given.
    pub run: String,
    pub header: Header,
    pub policy: PolicyName,
    /// `E` the aggregator was built with.
    pub expected: u32,
    pub steps: Step,
    pub events: u64,
    /// Bytes of rank files and scheduler log read.
    pub bytes: u64,
    pub requests_seen: u64,
    /// The most requests tracked at once.
    pub tracked_max: usize,
    pub findings: Vec<Finding>,
    pub omitted: BTreeMap<(&'static str, &'static str), u64>,
    pub seconds: f64,
}

impl RunReport {
    pub fn conforms(&self) -> bool {
        self.findings.is_empty() && self.omitted.is_empty()
    }

    /// Violated properties, each once, in [`monitor::PROPERTIES`] order.
    pub fn properties(&self) -> Vec<&'static str> {
        monitor::PROPERTIES
            .iter()
            .copied()
            .filter(|p| {
                self.findings.iter().any(|f| f.property == *p)
                    || self.omitted.keys().any(|(q, _)| q == p)
            })
            .collect()
    }
}

/// The run directories named by `paths`: a directory with a `header.json` is a run; one
/// without, whose subdirectories have one (`kvcc simulate`'s `run-0000/`), stands for
/// those, in name order.
pub fn discover(paths: &[String]) -> Result<Vec<String>, InputError> {
    let mut runs = Vec::new();
    for path in paths {
        let dir = Path::new(path);
        if !dir.is_dir() {
            return Err(InputError::file(
                path,
                if dir.exists() {
                    "not a directory: give a recorded run's directory"
                } else {
                    "no such directory"
                },
            ));
        }
        if dir.join(HEADER_FILE).exists() {
            runs.push(path.clone());
            continue;
        }
        let mut engines: Vec<String> = Vec::new();
        for entry in std::fs::read_dir(dir)
            .map_err(|e| InputError::file(path, format!("cannot list: {e}")))?
            .filter_map(Result::ok)
            .filter(|e| e.path().join(HEADER_FILE).is_file())
        {
            let engine = dir.join(entry.file_name());
            not_a_link(&engine)?;
            engines.push(engine.display().to_string());
        }
        if engines.is_empty() {
            // Not a run and no runs inside: the header is what is missing.
            Header::load(&dir.join(HEADER_FILE))?;
        }
        engines.sort();
        runs.extend(engines);
    }
    Ok(runs)
}

fn internal(run: &str, e: FrontError) -> InputError {
    InputError::file(
        run,
        format!("kvcc internal error in the aggregator front: {e}"),
    )
}

/// A recorded run's files and engine directories are read only as they are inside the
/// directory the user named: a symbolic link there may lead outside it, or to another
/// rank's file, whose reports would then count as this rank's. Refused, as `kvcc check
/// DIR` refuses links inside a spec directory.
fn not_a_link(path: &Path) -> Result<(), InputError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(InputError::file(
            &path.display().to_string(),
            "a symbolic link: kvcc reads a recorded run's files only as they are in its directory (a link may lead outside it, or to another rank's file)",
        )),
        _ => Ok(()),
    }
}

/// The rank files of a run, checked against its header.
fn rank_files(run: &str, header: &Header) -> Result<Vec<String>, InputError> {
    let dir = Path::new(run);
    let mut found = vec![false; header.world_size as usize];
    let entries =
        std::fs::read_dir(dir).map_err(|e| InputError::file(run, format!("cannot list: {e}")))?;
    for entry in entries {
        let entry = entry.map_err(|e| InputError::file(run, format!("cannot list: {e}")))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(number) = name
            .strip_prefix("rank-")
            .and_then(|n| n.strip_suffix(".jsonl"))
        else {
            continue;
        };
        let path = dir.join(&name).display().to_string();
        let canonical = number
            .parse::<u32>()
            .ok()
            .filter(|n| n.to_string() == number);
        match canonical {
            Some(rank) if rank < header.world_size => found[rank as usize] = true,
            Some(rank) => {
                return Err(InputError::file(
                    &path,
                    format!(
                        "unknown rank file: rank {rank} is outside world_size {} ({})",
                        header.world_size,
                        dir.join(HEADER_FILE).display()
                    ),
                ))
            }
            None => {
                return Err(InputError::file(
                    &path,
                    "unknown rank file: rank files are named rank-<N>.jsonl",
                ))
            }
        }
    }
    let paths: Vec<String> = (0..header.world_size)
        .map(|r| {
            dir.join(format::rank_file_name(r as Rank))
                .display()
                .to_string()
        })
        .collect();
    if let Some(rank) = found.iter().position(|f| !f) {
        return Err(InputError::file(
            &paths[rank],
            format!(
                "missing: world_size is {} ({}), so every rank from 0 to {} has a file",
                header.world_size,
                dir.join(HEADER_FILE).display(),
                header.world_size - 1
            ),
        ));
    }
    Ok(paths)
}

fn open(path: &str) -> Result<BufReader<File>, InputError> {
    not_a_link(Path::new(path))?;
    if !Path::new(path).exists() {
        return Err(InputError::file(
            path,
            "missing: a recorded run has a scheduler log (it may be empty)",
        ));
    }
    // Rank files and the log are streamed, however long; they must still be regular
    // files, or a link to a device would feed the readers forever.
    let file = kvcc_model::input::open_regular(Path::new(path), "recorded run file")?;
    Ok(BufReader::with_capacity(256 << 10, file))
}

/// Checks one engine's recorded run.
pub fn check_run(run: &str, options: &Options) -> Result<RunReport, InputError> {
    let started = Instant::now();
    let dir = Path::new(run);
    not_a_link(&dir.join(HEADER_FILE))?;
    let header = Header::load(&dir.join(HEADER_FILE))?;
    let files = rank_files(run, &header)?;
    let scheduler_file = dir.join(SCHEDULER_FILE).display().to_string();
    let scheduler = Lines::new(open(&scheduler_file)?, scheduler_file.clone());
    let readers = files
        .iter()
        .map(|f| Ok(Lines::new(open(f)?, f.clone())))
        .collect::<Result<Vec<_>, InputError>>()?;
    let policy = options.policy.unwrap_or(header.aggregator_policy);
    // Conform only counts, and the ids' numbers come in no useful order: the hash map
    // serves it faster than the model's ordered one (docs/benchmarks.md).
    let core = HashedAggregator::hashed(
        policy.policy(),
        connector_expected(header.finished_count, header.world_size),
    );
    let expected = core.expected();
    let front =
        ConcurrentAggregator::new(core, header.world_size, header.output_rank).map_err(|e| {
            InputError::file(&dir.join(HEADER_FILE).display().to_string(), e.to_string())
        })?;
    let interner = Interner::new();
    let mut monitor = Monitor::new(Setup {
        engine: header.engine,
        policy: policy.policy(),
        world_size: header.world_size,
        transfer_ranks: header.transfer_ranks(),
        rank_files: files.clone(),
        scheduler_file: scheduler_file.clone(),
        grace_steps: options.grace_steps,
        free_after_all: header.aborted_transfers == format::AbortedTransfers::FreeAfterAll,
        findings_per_clause_max: options.findings_per_clause_max,
    });
    let (steps, rank_bytes, events) = std::thread::scope(|scope| {
        let (to_consumer, from_scheduler) = sync_channel::<EventMessage>(reader::WINDOW);
        std::thread::Builder::new()
            .name("kvcc-scheduler".into())
            .spawn_scoped(scope, move || reader::read_events(scheduler, to_consumer))
            .map_err(|e| InputError::file(run, format!("cannot start a reader thread: {e}")))?;
        // Dropped before the scope joins its threads, so a reader blocked on a full
        // channel sees the consumer gone and stops.
        let mut events = Events {
            from_reader: from_scheduler,
            file: scheduler_file,
            buffered: VecDeque::new(),
            bytes: None,
            count: 0,
        };
        let mut receivers = Vec::new();
        for (rank, lines) in readers.into_iter().enumerate() {
            let (to_consumer, from_reader) = sync_channel::<Message>(reader::WINDOW);
            receivers.push(from_reader);
            let front = (rank != HELD_RANK).then_some(&front);
            let interner = &interner;
            std::thread::Builder::new()
                .name(format!("kvcc-rank-{rank}"))
                .spawn_scoped(scope, move || {
                    reader::read_rank(rank as Rank, lines, front, interner, to_consumer)
                })
                .map_err(|e| InputError::file(run, format!("cannot start a reader thread: {e}")))?;
        }
        let consumed = consume(
            run,
            &files,
            &front,
            &interner,
            &mut monitor,
            &mut events,
            receivers,
        );
        let finished = consumed.and_then(|(steps, rank_bytes)| {
            events.finish(steps, &mut monitor, &front, &interner)?;
            Ok((steps, rank_bytes, events))
        });
        if finished.is_err() {
            let _ = front.close();
        }
        finished
    })?;
    monitor
        .finish(&front, steps)
        .map_err(|e| internal(run, e))?;
    let Monitor {
        findings,
        omitted,
        tracked_max,
        requests_seen,
        ..
    } = monitor;
    Ok(RunReport {
        run: run.to_string(),
        header,
        policy,
        expected,
        steps,
        events: events.count,
        bytes: rank_bytes + events.bytes.unwrap_or(0),
        requests_seen,
        tracked_max,
        findings,
        omitted,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The rank whose outputs the consumer submits (see the module docs).
const HELD_RANK: usize = 0;

/// The consumer: one engine step per iteration. Returns (steps, bytes of rank files).
fn consume(
    run: &str,
    files: &[String],
    front: &Front,
    interner: &Interner,
    monitor: &mut Monitor,
    events: &mut Events,
    receivers: Vec<Receiver<Message>>,
) -> Result<(Step, u64), InputError> {
    let ranks = receivers.len();
    let mut buffered: Vec<VecDeque<RankStep>> = (0..ranks).map(|_| VecDeque::new()).collect();
    let mut step: Step = 0;
    loop {
        let mut records: Vec<Option<RankStep>> = Vec::with_capacity(ranks);
        let mut ended: Vec<(usize, u64)> = Vec::new();
        let mut bytes = 0;
        for (rank, from_reader) in receivers.iter().enumerate() {
            while buffered[rank].is_empty() {
                match from_reader.recv() {
                    Ok(Ok(Record::Steps(batch))) => buffered[rank].extend(batch),
                    Ok(Ok(Record::End { lines, bytes: b })) => {
                        ended.push((rank, lines));
                        bytes += b;
                        break;
                    }
                    Ok(Err(e)) => return Err(e),
                    Err(_) => {
                        return Err(InputError::file(
                            &files[rank],
                            "kvcc internal error: its reader stopped without a word",
                        ))
                    }
                }
            }
            records.push(buffered[rank].pop_front());
        }
        if ended.len() == ranks {
            return Ok((step, bytes));
        }
        if let Some(&(short, lines)) = ended.first() {
            let (longer, record) = records
                .iter()
                .enumerate()
                .find_map(|(r, rec)| rec.as_ref().map(|rec| (r, rec)))
                .expect("some rank has a step");
            return Err(InputError::file(
                &files[short],
                format!(
                    "ends after {lines} lines, but {}:{} has step {step}: every rank file records every engine step",
                    files[longer], record.line
                ),
            ));
        }
        events.apply(step, monitor, front, interner)?;
        let outputs: Vec<(u64, Option<&kvcc_aggregator::WorkerOutput<IdNum>>)> = records
            .iter()
            .map(|r| {
                let r = r.as_ref().expect("every rank has this step");
                (r.line, r.output.as_ref())
            })
            .collect();
        monitor
            .before_step(front, interner, step, front.output_rank(), &outputs)
            .map_err(|e| internal(run, e))?;
        let held = records[HELD_RANK]
            .take()
            .expect("the held rank has this step");
        let submitted = match held.output {
            Some(output) => front.report(step, output),
            None => front.report_missing(step, HELD_RANK as Rank),
        };
        submitted.map_err(|e| internal(run, e))?;
        let (aggregated, outcome) = front
            .recv()
            .map_err(|e| internal(run, e))?
            .ok_or_else(|| internal(run, FrontError::Closed))?;
        if aggregated != step {
            return Err(InputError::file(
                run,
                format!("kvcc internal error: expected step {step} from the aggregator, got {aggregated}"),
            ));
        }
        monitor.after_step(step, &outcome);
        monitor
            .collect(front, interner, step)
            .map_err(|e| internal(run, e))?;
        step += 1;
    }
}

/// The scheduler log, applied between steps; read and parsed by its own thread
/// ([`reader::read_events`]), so the consumer only applies events.
struct Events {
    from_reader: Receiver<EventMessage>,
    file: String,
    /// Events read but not yet due, in order.
    buffered: VecDeque<Event>,
    /// Bytes of the log, once its reader reached the end.
    bytes: Option<u64>,
    count: u64,
}

impl Events {
    /// The step of the next event, receiving more from the reader if none is buffered.
    fn peek(&mut self) -> Result<Option<Step>, InputError> {
        while self.buffered.is_empty() && self.bytes.is_none() {
            match self.from_reader.recv() {
                Ok(Ok(EventRecord::Events(batch))) => {
                    self.count += batch.len() as u64;
                    self.buffered.extend(batch);
                }
                Ok(Ok(EventRecord::End { bytes })) => self.bytes = Some(bytes),
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(InputError::file(
                        &self.file,
                        "kvcc internal error: its reader stopped without a word",
                    ))
                }
            }
        }
        Ok(self.buffered.front().map(|event| event.step))
    }

    /// Applies every event due before step `step` is aggregated.
    fn apply(
        &mut self,
        step: Step,
        monitor: &mut Monitor,
        front: &Front,
        interner: &Interner,
    ) -> Result<(), InputError> {
        while let Some(due) = self.peek()? {
            if due > step {
                return Ok(());
            }
            let event = self.buffered.pop_front().expect("peeked");
            let id = interner.intern(&event.request_id, step);
            monitor
                .on_event(front, interner, step, event.kind, id, event.line)
                .map_err(|e| internal(&self.file, e))?;
        }
        Ok(())
    }

    /// Applies the events after the last step; an event beyond it is an error.
    fn finish(
        &mut self,
        steps: Step,
        monitor: &mut Monitor,
        front: &Front,
        interner: &Interner,
    ) -> Result<(), InputError> {
        self.apply(steps, monitor, front, interner)?;
        if let Some(event) = self.buffered.front() {
            let last = if steps == 0 {
                "the run has no engine steps, so every event has step 0".to_string()
            } else {
                format!(
                    "the run ends after step {} (an event after it has step {steps})",
                    steps - 1
                )
            };
            return Err(InputError {
                file: Some(self.file.clone()),
                at: Some((event.line as usize, 1)),
                field: None,
                message: format!("event at step {}, but {last}", event.step),
                ..InputError::default()
            });
        }
        Ok(())
    }
}
