//! One reader thread per rank file: parse a line, intern its ids, hand the consumer a
//! copy of what the rank reported (the monitors' evidence, with its line) and submit the
//! output to the concurrent aggregator — the same front the loom and shuttle suites
//! check, fed by as many threads as the engine has ranks.
//!
//! The evidence channel is bounded, so a reader runs at most a few batches of steps ahead
//! of the consumer, and the front buffers at most that many steps: memory follows the
//! window, not the file. The held rank (see [`super::run`]) does not submit its own output: it
//! sends it to the consumer, which submits it once the scheduler events before that step
//! have been applied.

use super::format::{from_json, line_error, EventKind, EventLine, IdText, Lines, RankLine};
use super::intern::{IdNum, Interner};
use crate::Front;
use kvcc_aggregator::{FrontError, Rank, Step, WorkerOutput};
use kvcc_model::InputError;
use std::collections::BTreeSet;
use std::io::BufRead;
use std::sync::mpsc::SyncSender;

/// Batches a reader may have sent ahead of the consumer: with [`BATCH`] steps each, a
/// reader runs at most `(WINDOW + 1) * BATCH` steps ahead.
pub const WINDOW: usize = 4;

/// One line of a rank file, parsed.
#[derive(Debug)]
pub struct RankStep {
    pub step: Step,
    /// Its 1-based line in the rank file.
    pub line: u64,
    /// None: the rank produced no output this step.
    pub output: Option<WorkerOutput<IdNum>>,
}

/// What a reader sends the consumer, in step order.
#[derive(Debug)]
pub enum Record {
    /// Consecutive steps, at most [`BATCH`] of them.
    Steps(Vec<RankStep>),
    /// The file ended after `lines` lines.
    End { lines: u64, bytes: u64 },
}

pub type Message = Result<Record, InputError>;

/// Steps per message: one handoff between threads per batch, not per step, which is
/// where the time went when every step woke the consumer and every reader. At 16, the
/// wake-ups of readers blocked on a full channel were still a futex call per step and
/// a context switch per step on the 1 GiB benchmark run; 64 cuts both by about 3x.
pub const BATCH: usize = 64;

/// Reads one rank file to its end, or to its first bad line. `front` is None for the
/// held rank, whose outputs the consumer submits.
pub fn read_rank<R: BufRead>(
    rank: Rank,
    mut lines: Lines<R>,
    front: Option<&Front>,
    interner: &Interner,
    to_consumer: SyncSender<Message>,
) {
    let mut step: Step = 0;
    loop {
        let mut batch = Vec::with_capacity(BATCH);
        let last = lines
            .read_batch(&mut batch, BATCH, |line| {
                let record = parse(rank, line.text, line.file, line.number, step, interner)?;
                step += 1;
                Ok(record)
            })
            .map(|end| {
                end.map(|()| Record::End {
                    lines: lines.line,
                    bytes: lines.bytes,
                })
            });
        if !batch.is_empty() && !send_batch(rank, batch, front, &lines.file, &to_consumer) {
            return;
        }
        if let Some(last) = last {
            // The steps before an error are handled first, so the error surfaces when
            // the consumer reaches its step: the same error whatever the timing.
            let _ = to_consumer.send(last);
            return;
        }
    }
}

/// Sends a batch to the consumer, then submits it to the front (unless this is the held
/// rank). False when the run is over: the consumer is gone or the front closed.
fn send_batch(
    rank: Rank,
    batch: Vec<RankStep>,
    front: Option<&Front>,
    file: &str,
    to_consumer: &SyncSender<Message>,
) -> bool {
    let Some(front) = front else {
        return to_consumer.send(Ok(Record::Steps(batch))).is_ok();
    };
    let evidence = batch
        .iter()
        .map(|r| RankStep {
            step: r.step,
            line: r.line,
            output: r.output.as_ref().map(evidence_of),
        })
        .collect();
    // The consumer is gone (it stopped at an error elsewhere): stop quietly.
    if to_consumer.send(Ok(Record::Steps(evidence))).is_err() {
        return false;
    }
    for record in batch {
        let submitted = match record.output {
            Some(output) => front.report(record.step, output),
            None => front.report_missing(record.step, rank),
        };
        match submitted {
            Ok(()) => {}
            Err(FrontError::Closed) => return false,
            Err(e) => {
                // Steps were checked when parsed, so this is kvcc's bug, not the input's;
                // say where it happened and stop the run rather than hang it.
                let _ = front.close();
                let _ = to_consumer.send(Err(InputError {
                    file: Some(file.to_string()),
                    at: Some((record.line as usize, 1)),
                    field: None,
                    message: format!("the aggregator refused this step: {e}"),
                    ..InputError::default()
                }));
                return false;
            }
        }
    }
    true
}

/// What the monitors need of an output: everything but the block ids.
fn evidence_of(output: &WorkerOutput<IdNum>) -> WorkerOutput<IdNum> {
    WorkerOutput {
        rank: output.rank,
        finished_sending: output.finished_sending.clone(),
        finished_recving: output.finished_recving.clone(),
        failed_recving: output.failed_recving.clone(),
        invalid_block_ids: BTreeSet::new(),
        expected_finished_count: output.expected_finished_count,
    }
}

/// One scheduler event, parsed.
#[derive(Debug)]
pub struct Event {
    pub step: Step,
    pub kind: EventKind,
    pub request_id: String,
    /// Its 1-based line in the scheduler log.
    pub line: u64,
}

/// What the scheduler log's reader sends the consumer, in order.
#[derive(Debug)]
pub enum EventRecord {
    /// Consecutive events, at most [`EVENT_BATCH`] of them.
    Events(Vec<Event>),
    /// The log ended; it held `bytes` bytes.
    End { bytes: u64 },
}

pub type EventMessage = Result<EventRecord, InputError>;

/// Events per message: a step has a few, so a batch spans many steps.
pub const EVENT_BATCH: usize = 256;

/// Reads the scheduler log to its end, or to its first bad line: parsing it is most of
/// what applying it costs, and the consumer, which must apply events one step at a time,
/// is the one thread every step waits for. Ids are interned by the consumer when it
/// applies an event, as they were when it read the log itself.
pub fn read_events<R: BufRead>(mut lines: Lines<R>, to_consumer: SyncSender<EventMessage>) {
    let mut floor: Step = 0;
    loop {
        let mut batch = Vec::with_capacity(EVENT_BATCH);
        let last = lines
            .read_batch(&mut batch, EVENT_BATCH, |line| {
                let event = parse_event(line.text, line.file, line.number, floor)?;
                floor = event.step;
                Ok(event)
            })
            .map(|end| end.map(|()| EventRecord::End { bytes: lines.bytes }));
        // The consumer is gone (it stopped at an error elsewhere): stop quietly.
        if !batch.is_empty() && to_consumer.send(Ok(EventRecord::Events(batch))).is_err() {
            return;
        }
        if let Some(last) = last {
            // After the events before it, so the error surfaces when the consumer
            // reaches it: the same error whatever the timing.
            let _ = to_consumer.send(last);
            return;
        }
    }
}

/// Parses line `line` of the scheduler log; `floor` is the step of the event before it.
fn parse_event(text: &[u8], file: &str, line: u64, floor: Step) -> Result<Event, InputError> {
    let event: EventLine = from_json(file, line, text)?;
    if event.step < floor {
        return Err(line_error(
            file,
            line,
            text,
            "\"step\"",
            format!(
                "event at step {} after an event at step {floor}: events are in step order",
                event.step
            ),
        ));
    }
    Ok(Event {
        step: event.step,
        kind: event.event,
        request_id: event.request_id.into_owned(),
        line,
    })
}

/// Parses line `line` of rank `rank`'s file, which must hold step `expected`.
pub fn parse(
    rank: Rank,
    text: &[u8],
    file: &str,
    line: u64,
    expected: Step,
    interner: &Interner,
) -> Result<RankStep, InputError> {
    let parsed: RankLine = from_json(file, line, text)?;
    let bad = |needle: &str, message: String| line_error(file, line, text, needle, message);
    if parsed.step != expected {
        let message = if parsed.step < expected {
            format!(
                "step {} out of order: the previous line was step {}",
                parsed.step,
                expected.wrapping_sub(1)
            )
        } else if expected == 0 {
            format!(
                "step {} skips step 0: a rank file starts at step 0",
                parsed.step
            )
        } else {
            format!(
                "step {} skips step {expected}: the previous line was step {} (a step without output is `{{\"step\": {expected}, \"missing\": true}}`)",
                parsed.step,
                expected - 1
            )
        };
        return Err(bad("\"step\"", message));
    }
    if parsed.missing_with_content() {
        return Err(bad(
            "\"missing\"",
            "a `\"missing\": true` step carries no other fields".into(),
        ));
    }
    if parsed.missing {
        return Ok(RankStep {
            step: expected,
            line,
            output: None,
        });
    }
    let ids = |field: &str, list: Option<Vec<IdText<'_>>>| -> Result<BTreeSet<IdNum>, InputError> {
        let list = list.unwrap_or_default();
        interner
            .intern_all(list.iter().map(|IdText(name)| &**name), expected)
            .map_err(|name| {
                bad(
                    &format!("\"{name}\""),
                    format!("{field} lists request \"{name}\" twice"),
                )
            })
    };
    let mut output = WorkerOutput::empty(rank);
    output.finished_sending = ids("finished_sending", parsed.finished_sending)?;
    output.finished_recving = ids("finished_recving", parsed.finished_recving)?;
    output.failed_recving = ids("failed_recving", parsed.failed_recving)?;
    for block in parsed.invalid_block_ids.unwrap_or_default() {
        if !output.invalid_block_ids.insert(block) {
            return Err(bad(
                "\"invalid_block_ids\"",
                format!("invalid_block_ids lists block {block} twice"),
            ));
        }
    }
    output.expected_finished_count = parsed.expected_finished_count.unwrap_or(0);
    Ok(RankStep {
        step: expected,
        line,
        output: Some(output),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_line(text: &str, expected: Step) -> Result<RankStep, InputError> {
        parse(
            1,
            text.as_bytes(),
            "rank-1.jsonl",
            7,
            expected,
            &Interner::new(),
        )
    }

    #[test]
    fn a_line_becomes_a_worker_output_of_its_rank() {
        let step = parse_line(
            r#"{"step": 2, "finished_sending": ["a"], "failed_recving": ["b"], "invalid_block_ids": [4], "expected_finished_count": 3}"#,
            2,
        )
        .unwrap();
        let output = step.output.unwrap();
        assert_eq!(output.rank, 1);
        assert_eq!(output.finished_sending.len(), 1);
        assert_eq!(output.failed_recving.len(), 1);
        assert_eq!(output.invalid_block_ids, BTreeSet::from([4]));
        assert_eq!(output.expected_finished_count, 3);
    }

    #[test]
    fn steps_must_follow_each_other() {
        let e = parse_line(r#"{"step": 5}"#, 3).unwrap_err();
        assert_eq!(
            e.to_string(),
            "rank-1.jsonl:7:2: step 5 skips step 3: the previous line was step 2 (a step without output is `{\"step\": 3, \"missing\": true}`)"
        );
        let e = parse_line(r#"{"step": 1}"#, 3).unwrap_err();
        assert!(e.to_string().contains("step 1 out of order"), "{e}");
    }

    #[test]
    fn truncated_and_contradictory_lines_are_errors() {
        let e = parse_line(r#"{"step": 0, "finished_sending": ["a""#, 0).unwrap_err();
        assert!(e.to_string().starts_with("rank-1.jsonl:7:"), "{e}");
        assert!(e.to_string().contains("truncated JSON"), "{e}");
        let e =
            parse_line(r#"{"step": 0, "missing": true, "finished_sending": []}"#, 0).unwrap_err();
        assert!(e.to_string().contains("carries no other fields"), "{e}");
        let e = parse_line(r#"{"step": 0, "finished_recving": ["a", "a"]}"#, 0).unwrap_err();
        assert!(e.to_string().contains("lists request \"a\" twice"), "{e}");
        let e = parse_line(r#"{"step": 0, "finished_recving": [7]}"#, 0).unwrap_err();
        assert!(e.to_string().contains("invalid type"), "{e}");
    }

    #[test]
    fn a_missing_step_has_no_output() {
        assert!(parse_line(r#"{"step": 0, "missing": true}"#, 0)
            .unwrap()
            .output
            .is_none());
    }
}
