//! The recorded-run format, version 1 (docs/recorded-run.md): one directory per engine
//! holding `header.json`, one `rank-<N>.jsonl` per worker rank and `scheduler.jsonl`.
//!
//! Field names are vLLM's (`finished_sending`, `world_size`, ...). This module parses one
//! line at a time, so a reader never holds more than the line it is on, and writes the
//! same format for `kvcc simulate` and the benchmark generator. Every parse error names
//! the file, the line and, when it can, the column.

use kvcc_aggregator::{Policy, Rank, WorkerOutput};
use kvcc_model::InputError;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

/// The format version this kvcc reads and writes.
pub const FORMAT_VERSION: u64 = 1;

/// The longest line a reader accepts, its newline not counted. A line is held whole
/// while it is parsed, and what it lists is held while its step is in flight, so a long
/// line costs far more than its bytes (a 31 MB line of request ids took 3.5 GB). A real
/// line holds one rank's output for one step: a few thousand request ids and the blocks
/// of its failed loads, well under a MiB. Past this a reader stops, without reading the
/// rest of the line, and names the field the line was in.
pub const LINE_BYTES_MAX: usize = 4 << 20;

pub const HEADER_FILE: &str = "header.json";
pub const SCHEDULER_FILE: &str = "scheduler.jsonl";

/// `rank-<N>.jsonl`.
pub fn rank_file_name(rank: Rank) -> String {
    format!("rank-{rank}.jsonl")
}

/// Which engine of a P/D pair a run directory records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// The prefill instance P (vLLM `kv_role` `kv_producer`): sends KV, delays frees.
    Prefill,
    /// The decode instance D (`kv_consumer`): loads KV, waits for remote KV.
    Decode,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Prefill => "prefill",
            Engine::Decode => "decode",
        }
    }
}

/// The aggregator policy a run is conformed under (vLLM's is `countdown`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyName {
    #[default]
    Countdown,
    Strict,
}

/// How the scheduler frees a finished request with a load and a save in flight (aborted
/// during its own load, its connector saving while it loads, vLLM #46240): at the first
/// completion naming it, receives first (vLLM 0.34's `_update_from_kv_xfer_finished`),
/// so the second completion asserts; or once both have arrived (vLLM PR #56089, open).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AbortedTransfers {
    #[default]
    FreeAtFirst,
    FreeAfterAll,
}

impl AbortedTransfers {
    fn is_default(&self) -> bool {
        *self == AbortedTransfers::default()
    }
}

impl PolicyName {
    pub fn policy(self) -> Policy {
        match self {
            PolicyName::Countdown => Policy::Countdown,
            PolicyName::Strict => Policy::Strict,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PolicyName::Countdown => "countdown",
            PolicyName::Strict => "strict",
        }
    }
}

/// `header.json`: what the engine's aggregator was built from, and the topology facts
/// the monitors need.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub format_version: u64,
    pub engine: Engine,
    /// vLLM's `kv_role` (`kv_producer`, `kv_consumer`, `kv_both`); informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_role: Option<String>,
    /// vLLM's `kv_connector` (`NixlConnector`, `MultiConnector`, ...); informational.
    pub kv_connector: String,
    /// Worker ranks of this engine: `rank-0.jsonl` .. `rank-<world_size - 1>.jsonl`.
    pub world_size: u32,
    /// The rank whose output carries a step's results; a step without it is dropped.
    #[serde(default)]
    pub output_rank: Rank,
    /// What `connector.get_finished_count()` returned; null or 0 means `world_size`.
    #[serde(default)]
    pub finished_count: Option<u32>,
    #[serde(default)]
    pub aggregator_policy: PolicyName,
    /// Ranks that serve reads, so own part of every `finished_sending` quorum (PCP rank 0
    /// of a replicated layout, every rank otherwise); absent means every rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_ranks: Option<Vec<Rank>>,
    /// Parallel sizes, informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pp_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcp_size: Option<u32>,
    /// A scheduler that frees a request with a load and a save in flight after both
    /// (`free-after-all`, vLLM PR #56089); absent, vLLM's first-completion free.
    #[serde(default, skip_serializing_if = "AbortedTransfers::is_default")]
    pub aborted_transfers: AbortedTransfers,
}

impl Header {
    /// `E` as vLLM's aggregator computes it at construction.
    pub fn expected(&self) -> u32 {
        match self.finished_count {
            Some(count) if count > 0 => count,
            _ => self.world_size,
        }
    }

    /// Ranks whose report every `finished_sending` quorum must include.
    pub fn transfer_ranks(&self) -> Vec<Rank> {
        match &self.transfer_ranks {
            Some(ranks) => ranks.clone(),
            None => (0..self.world_size).map(|r| r as Rank).collect(),
        }
    }

    /// Reads and validates `header.json`.
    pub fn load(path: &Path) -> Result<Header, InputError> {
        let file = path.display().to_string();
        if !path.exists() {
            return Err(InputError::file(
                &file,
                "missing: a recorded run starts with its header (docs/recorded-run.md)",
            ));
        }
        let text = kvcc_model::input::read_text(path, "header")?;
        Header::parse(&file, &text)
    }

    /// Validates a header's text; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Header, InputError> {
        let file = file.to_string();
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| json_error(&file, 0, &e))?;
        match value.get("format_version").map(serde_json::Value::as_u64) {
            None => {
                return Err(InputError::file(
                    &file,
                    format!("missing `format_version` (this kvcc reads {FORMAT_VERSION})"),
                ))
            }
            Some(Some(FORMAT_VERSION)) => {}
            Some(_) => {
                return Err(InputError::file(
                    &file,
                    format!(
                        "format_version {} is not supported by kvcc {} (it reads {FORMAT_VERSION})",
                        value["format_version"],
                        kvcc_model::VERSION
                    ),
                ))
            }
        }
        let header: Header = from_json(&file, 0, text.as_bytes())?;
        header.validate(&file)?;
        Ok(header)
    }

    fn validate(&self, file: &str) -> Result<(), InputError> {
        let bad = |m: String| Err(InputError::file(file, m));
        if !(1..=65536).contains(&self.world_size) {
            return bad(format!(
                "world_size {} is not in 1..=65536",
                self.world_size
            ));
        }
        if u32::from(self.output_rank) >= self.world_size {
            return bad(format!(
                "output_rank {} is outside world_size {}",
                self.output_rank, self.world_size
            ));
        }
        if let Some(ranks) = &self.transfer_ranks {
            if let Some(r) = ranks.iter().find(|&&r| u32::from(r) >= self.world_size) {
                return bad(format!(
                    "transfer_ranks has rank {r}, outside world_size {}",
                    self.world_size
                ));
            }
        }
        Ok(())
    }
}

/// Parses one JSON document of `file` (line `line`; 0 for a whole file). An error names
/// the field it is in: the text is parsed again with the path tracked, so only a line
/// that fails pays for it.
pub fn from_json<'a, T: Deserialize<'a>>(
    file: &str,
    line: u64,
    text: &'a [u8],
) -> Result<T, InputError> {
    serde_json::from_slice(text).map_err(|e| {
        let mut error = json_error(file, line, &e);
        let mut tracked = serde_json::Deserializer::from_slice(text);
        if let Err(traced) = serde_path_to_error::deserialize::<_, T>(&mut tracked) {
            let path = traced.path().to_string();
            if path != "." {
                error.field = Some(path);
            }
        }
        error
    })
}

/// A serde_json error at `line` of a JSON Lines file (0: the error's own line counts).
fn json_error(file: &str, line: u64, e: &serde_json::Error) -> InputError {
    let at_line = if line == 0 { e.line() as u64 } else { line };
    let message = match e.classify() {
        serde_json::error::Category::Eof => {
            format!("truncated JSON ({})", strip_position(&e.to_string()))
        }
        serde_json::error::Category::Syntax => {
            format!("invalid JSON: {}", strip_position(&e.to_string()))
        }
        _ => strip_position(&e.to_string()),
    };
    InputError {
        file: Some(file.to_string()),
        at: Some((at_line as usize, e.column().max(1))),
        field: None,
        message,
        ..InputError::default()
    }
}

/// serde_json appends ` at line L column C`; the error already says where.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

/// An error about line `line` of `file`, pointing at `needle` in it when it occurs.
pub fn line_error(
    file: &str,
    line: u64,
    text: &[u8],
    needle: &str,
    message: impl Into<String>,
) -> InputError {
    let column = find(text, needle.as_bytes()).map_or(1, |i| i + 1);
    InputError {
        file: Some(file.to_string()),
        at: Some((line as usize, column)),
        field: None,
        message: message.into(),
        ..InputError::default()
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads a JSON Lines file one line at a time, counting lines and bytes.
pub struct Lines<R> {
    reader: R,
    pub file: String,
    /// The number of the line last returned (1-based).
    pub line: u64,
    pub bytes: u64,
    buf: Vec<u8>,
}

impl<R: BufRead> Lines<R> {
    pub fn new(reader: R, file: String) -> Self {
        Lines {
            reader,
            file,
            line: 0,
            bytes: 0,
            buf: Vec::new(),
        }
    }

    /// The next line without its newline, or None at the end. A blank line is an error:
    /// nothing in a recorded run is skipped.
    pub fn next_line(&mut self) -> Result<Option<Line<'_>>, InputError> {
        self.buf.clear();
        // One byte past the cap: a line of exactly the cap still ends in its newline.
        let read =
            read_line_capped(&mut self.reader, &mut self.buf, LINE_BYTES_MAX + 1).map_err(|e| {
                InputError::file(
                    &self.file,
                    format!("cannot read after line {}: {e}", self.line),
                )
            })?;
        if read == 0 {
            return Ok(None);
        }
        self.line += 1;
        self.bytes += read as u64;
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
        } else if read > LINE_BYTES_MAX {
            return Err(too_long(&self.file, self.line, &self.buf));
        }
        if self.buf.iter().all(u8::is_ascii_whitespace) {
            return Err(InputError {
                file: Some(self.file.clone()),
                at: Some((self.line as usize, 1)),
                field: None,
                message: "blank line: every line is one JSON object".into(),
                ..InputError::default()
            });
        }
        Ok(Some(Line {
            text: &self.buf,
            number: self.line,
            file: &self.file,
        }))
    }

    /// Up to `max` lines, each parsed by `parse`, into `batch`; stops early at the end of
    /// the file (`Some(Ok(()))`) or at its first bad line (`Some(Err)`), and returns None
    /// when the batch is full: `max` lines, or [`BATCH_BYTES_MAX`] bytes read for it, so
    /// that a reader's batches ahead of the consumer are bounded in bytes as well as in
    /// lines. Readers hand lines over in batches: one handoff between threads per
    /// batch, not per line.
    pub fn read_batch<T>(
        &mut self,
        batch: &mut Vec<T>,
        max: usize,
        mut parse: impl FnMut(Line<'_>) -> Result<T, InputError>,
    ) -> Option<Result<(), InputError>> {
        let until = self.bytes + BATCH_BYTES_MAX;
        while batch.len() < max && self.bytes < until {
            match self.next_line() {
                Ok(None) => return Some(Ok(())),
                Ok(Some(line)) => match parse(line) {
                    Ok(item) => batch.push(item),
                    Err(e) => return Some(Err(e)),
                },
                Err(e) => return Some(Err(e)),
            }
        }
        None
    }
}

/// The bytes of lines one batch may hold (see [`Lines::read_batch`]): one line at the cap,
/// many thousand real ones.
pub const BATCH_BYTES_MAX: u64 = LINE_BYTES_MAX as u64;

/// The error for line `line` of `file`, cut off at the cap after `start`: it names the
/// field the line was in there, whose list (most likely) made it too long.
fn too_long(file: &str, line: u64, start: &[u8]) -> InputError {
    let (field, column) = match field_at_end(start) {
        Some((field, column)) => (Some(field), column),
        None => (None, 1),
    };
    InputError {
        file: Some(file.to_string()),
        at: Some((line as usize, column)),
        field,
        message: format!(
            "line longer than {} MiB, the most one line may hold (a rank's output for one step, or one scheduler event); reading stopped there",
            LINE_BYTES_MAX >> 20
        ),
        ..InputError::default()
    }
}

/// The top-level field of a JSON object that the text `start`, cut off, ends inside, and
/// the 1-based column of its key; None when it ends outside any field.
fn field_at_end(start: &[u8]) -> Option<(String, usize)> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut string_start = 0;
    // The last string at the object's own level, and the key that last took a value.
    let mut last_string = None;
    let mut key = None;
    for (i, &byte) in start.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
                if depth == 1 {
                    last_string = Some((string_start, i));
                }
            }
            continue;
        }
        match byte {
            b'"' => {
                in_string = true;
                string_start = i + 1;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b':' if depth == 1 => key = last_string.take(),
            // A comma at the object's level closes the field before it.
            b',' if depth == 1 => key = None,
            _ => {}
        }
    }
    let (from, to) = key?;
    // The key's opening quote is at byte `from - 1`, so its 1-based column is `from`.
    Some((String::from_utf8_lossy(&start[from..to]).into_owned(), from))
}

/// One line of a JSON Lines file.
#[derive(Debug)]
pub struct Line<'a> {
    pub text: &'a [u8],
    /// 1-based.
    pub number: u64,
    pub file: &'a str,
}

fn refs(names: &[String]) -> Vec<&str> {
    names.iter().map(String::as_str).collect()
}

/// `read_until(b'\n')` that stops after `max` bytes.
fn read_line_capped<R: BufRead>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<usize> {
    let mut read = 0;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(read);
        }
        let room = max - read;
        // memchr scans a word or a vector at a time; a byte-wise scan of every line was
        // most of reading it.
        let window = &available[..available.len().min(room)];
        let (used, done) = match memchr::memchr(b'\n', window) {
            Some(i) => (i + 1, true),
            None => {
                let used = available.len().min(room);
                (used, used == room)
            }
        };
        buf.extend_from_slice(&available[..used]);
        reader.consume(used);
        read += used;
        if done {
            return Ok(read);
        }
    }
}

/// A request id as written: borrowed from the line unless it has escapes. (serde borrows
/// a `Cow` only when it is a field of its own, not an element of a `Vec`.)
#[derive(Debug, Deserialize)]
#[serde(transparent)]
pub struct IdText<'a>(#[serde(borrow)] pub Cow<'a, str>);

/// One line of `rank-<N>.jsonl`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankLine<'a> {
    pub step: u64,
    /// The rank produced no output this step (vLLM hands the aggregator None for it).
    #[serde(default)]
    pub missing: bool,
    #[serde(default, borrow)]
    pub finished_sending: Option<Vec<IdText<'a>>>,
    #[serde(default, borrow)]
    pub finished_recving: Option<Vec<IdText<'a>>>,
    #[serde(default, borrow)]
    pub failed_recving: Option<Vec<IdText<'a>>>,
    #[serde(default)]
    pub invalid_block_ids: Option<Vec<u64>>,
    #[serde(default)]
    pub expected_finished_count: Option<u32>,
}

impl RankLine<'_> {
    /// Does a `"missing": true` line carry anything else?
    pub fn missing_with_content(&self) -> bool {
        self.missing
            && (self.finished_sending.is_some()
                || self.finished_recving.is_some()
                || self.failed_recving.is_some()
                || self.invalid_block_ids.is_some()
                || self.expected_finished_count.is_some())
    }
}

/// A scheduler event (`scheduler.jsonl`), named after the scheduler's view of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    /// `request_finished` returned True: the connector owns the free (P).
    DelayFreed,
    /// The client aborted the request.
    Aborted,
    /// The request waits in `WAITING_FOR_REMOTE_KVS` for a remote load.
    WaitingForRemoteKvs,
    /// Its load completed and it is schedulable again.
    Woken,
    /// Its load completed as a failure (`failed_recving` or invalid blocks).
    LoadFailed,
    /// The scheduler freed the request's blocks.
    Freed,
}

impl EventKind {
    pub fn name(self) -> &'static str {
        match self {
            EventKind::DelayFreed => "delay-freed",
            EventKind::Aborted => "aborted",
            EventKind::WaitingForRemoteKvs => "waiting-for-remote-kvs",
            EventKind::Woken => "woken",
            EventKind::LoadFailed => "load-failed",
            EventKind::Freed => "freed",
        }
    }
}

/// One line of `scheduler.jsonl`. `step` is the number of engine steps aggregated before
/// the event: it happened after step `step - 1`'s outputs were aggregated and before step
/// `step`'s.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventLine<'a> {
    pub step: u64,
    pub event: EventKind,
    #[serde(borrow)]
    pub request_id: Cow<'a, str>,
}

#[derive(Serialize)]
struct RankLineOut<'a> {
    step: u64,
    finished_sending: &'a [&'a str],
    finished_recving: &'a [&'a str],
    failed_recving: &'a [&'a str],
    invalid_block_ids: &'a BTreeSet<u64>,
    expected_finished_count: u32,
}

#[derive(Serialize)]
struct MissingOut {
    step: u64,
    missing: bool,
}

#[derive(Serialize)]
struct EventOut<'a> {
    step: u64,
    event: EventKind,
    request_id: &'a str,
}

/// Writes one engine's recorded run.
pub struct RunWriter {
    dir: PathBuf,
    ranks: Vec<BufWriter<File>>,
    scheduler: BufWriter<File>,
}

impl RunWriter {
    /// Creates `dir` with its header and empty rank and scheduler files. A directory
    /// that already holds a run is refused: stale rank files would join the new run.
    pub fn create(dir: &Path, header: &Header) -> io::Result<RunWriter> {
        if dir.join(HEADER_FILE).exists() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} already holds a recorded run", dir.display()),
            ));
        }
        std::fs::create_dir_all(dir)?;
        let mut text = serde_json::to_string_pretty(header).map_err(io::Error::other)?;
        text.push('\n');
        std::fs::write(dir.join(HEADER_FILE), text)?;
        let ranks = (0..header.world_size)
            .map(|r| File::create(dir.join(rank_file_name(r as Rank))).map(BufWriter::new))
            .collect::<io::Result<Vec<_>>>()?;
        let scheduler = BufWriter::new(File::create(dir.join(SCHEDULER_FILE))?);
        Ok(RunWriter {
            dir: dir.to_path_buf(),
            ranks,
            scheduler,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// One rank's output for one step; `None` when the rank produced no output.
    pub fn rank_step<Id: Ord>(
        &mut self,
        rank: Rank,
        step: u64,
        output: Option<&WorkerOutput<Id>>,
        name: impl Fn(&Id) -> String,
    ) -> io::Result<()> {
        let out = &mut self.ranks[usize::from(rank)];
        match output {
            None => serde_json::to_writer(
                &mut *out,
                &MissingOut {
                    step,
                    missing: true,
                },
            )?,
            Some(o) => {
                let names = |set: &BTreeSet<Id>| set.iter().map(&name).collect::<Vec<_>>();
                let (s, r, f) = (
                    names(&o.finished_sending),
                    names(&o.finished_recving),
                    names(&o.failed_recving),
                );
                serde_json::to_writer(
                    &mut *out,
                    &RankLineOut {
                        step,
                        finished_sending: &refs(&s),
                        finished_recving: &refs(&r),
                        failed_recving: &refs(&f),
                        invalid_block_ids: &o.invalid_block_ids,
                        expected_finished_count: o.expected_finished_count,
                    },
                )?
            }
        }
        out.write_all(b"\n")
    }

    /// One scheduler event before step `step` is aggregated.
    pub fn event(&mut self, step: u64, event: EventKind, request_id: &str) -> io::Result<()> {
        serde_json::to_writer(
            &mut self.scheduler,
            &EventOut {
                step,
                event,
                request_id,
            },
        )?;
        self.scheduler.write_all(b"\n")
    }

    /// Flushes every file.
    pub fn finish(mut self) -> io::Result<()> {
        for rank in &mut self.ranks {
            rank.flush()?;
        }
        self.scheduler.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Lines<&[u8]> {
        Lines::new(text.as_bytes(), "f".into())
    }

    #[test]
    fn lines_strip_newlines_and_count() {
        let mut l = lines("{\"a\":1}\n{\"b\":2}");
        assert_eq!(l.next_line().unwrap().unwrap().text, b"{\"a\":1}");
        let second = l.next_line().unwrap().unwrap();
        assert_eq!((second.text, second.number), (&b"{\"b\":2}"[..], 2));
        assert!(l.next_line().unwrap().is_none());
        assert_eq!(l.bytes, 15);
    }

    #[test]
    fn a_blank_line_is_an_error_with_its_line() {
        let mut l = lines("{}\n\n{}\n");
        l.next_line().unwrap();
        let e = l.next_line().unwrap_err();
        assert_eq!(
            e.to_string(),
            "f:2:1: blank line: every line is one JSON object"
        );
    }

    #[test]
    fn a_line_past_the_cap_names_its_field_without_being_read_whole() {
        let ids = "\"r0\", ".repeat(LINE_BYTES_MAX / 6 + 1);
        let long = format!("{{\"step\": 1, \"finished_sending\": [{ids}\"r1\"]}}\n");
        let text = format!("{{\"step\": 0}}\n{long}{{\"step\": 2}}\n");
        let mut l = lines(&text);
        l.next_line().unwrap();
        let e = l.next_line().unwrap_err();
        assert_eq!(e.file.as_deref(), Some("f"));
        assert_eq!(e.at, Some((2, 13)));
        assert_eq!(e.field.as_deref(), Some("finished_sending"));
        assert!(e.message.starts_with("line longer than 4 MiB"), "{e}");
        // Stopped one byte past the cap: the rest of the line was never read.
        assert_eq!(l.bytes, 12 + LINE_BYTES_MAX as u64 + 1);
    }

    #[test]
    fn a_line_of_exactly_the_cap_is_read() {
        let pad = LINE_BYTES_MAX - r#"{"step": 0, "x": ""}"#.len();
        let line = format!("{{\"step\": 0, \"x\": \"{}\"}}", "a".repeat(pad));
        assert_eq!(line.len(), LINE_BYTES_MAX);
        let text = format!("{line}\n{{}}\n");
        let mut l = lines(&text);
        assert_eq!(l.next_line().unwrap().unwrap().text.len(), LINE_BYTES_MAX);
        assert_eq!(l.next_line().unwrap().unwrap().number, 2);
    }

    #[test]
    fn the_field_at_a_cut_is_the_last_key_at_the_objects_level() {
        let at = |text: &str| field_at_end(text.as_bytes());
        assert_eq!(
            at(r#"{"step": 3, "finished_sending": ["a", "b"#),
            Some(("finished_sending".into(), 13))
        );
        // Keys and colons inside strings and nested values do not count.
        assert_eq!(
            at(r#"{"a": {"b": 1}, "c": ["d:"e":", "#),
            Some(("c".into(), 17))
        );
        assert_eq!(at(r#"{"step": 3, "#), None);
        assert_eq!(at("    "), None);
    }

    #[test]
    fn a_batch_stops_at_its_bytes() {
        let line = format!("{{\"x\": \"{}\"}}\n", "a".repeat(1 << 20));
        let text = line.repeat(9);
        let mut l = lines(&text);
        let mut batch = Vec::new();
        assert!(l
            .read_batch(&mut batch, 64, |line| Ok(line.number))
            .is_none());
        // Full once 4 MiB were read: the fourth line crossed it.
        assert_eq!(batch, vec![1, 2, 3, 4]);
    }

    #[test]
    fn capped_read_stops_at_the_cap() {
        let mut buf = Vec::new();
        let mut r: &[u8] = b"abcdef\n";
        assert_eq!(read_line_capped(&mut r, &mut buf, 3).unwrap(), 3);
        assert_eq!(buf, b"abc");
    }

    #[test]
    fn rank_lines_borrow_ids_and_accept_null_sets() {
        let line: RankLine = serde_json::from_str(
            r#"{"step": 3, "finished_sending": ["a", "b\"c"], "finished_recving": null}"#,
        )
        .unwrap();
        assert_eq!(line.step, 3);
        let sent = line.finished_sending.unwrap();
        assert!(matches!(sent[0].0, Cow::Borrowed("a")));
        assert_eq!(sent[1].0, "b\"c");
        assert!(line.finished_recving.is_none());
    }

    /// A line that fails names the field its error is in (a value of the wrong kind deep
    /// in a set, a number too large for a step); the twin, a good line, parses.
    #[test]
    fn a_failing_line_names_its_field() {
        let field = |text: &str| from_json::<RankLine>("r.jsonl", 7, text.as_bytes()).err();
        let e = field(r#"{"step": 1, "finished_sending": ["a", [1]]}"#).unwrap();
        assert_eq!(e.field.as_deref(), Some("finished_sending[1]"), "{e}");
        assert_eq!(e.at.map(|(line, _)| line), Some(7));
        let e = field(r#"{"step": 18446744073709551616}"#).unwrap();
        assert_eq!(e.field.as_deref(), Some("step"), "{e}");
        assert!(field(r#"{"step": 1, "finished_sending": ["a"]}"#).is_none());
    }

    #[test]
    fn unknown_fields_are_errors_not_ignored() {
        let e =
            serde_json::from_str::<RankLine>(r#"{"step": 0, "finished_sendng": []}"#).unwrap_err();
        assert!(
            e.to_string().contains("unknown field `finished_sendng`"),
            "{e}"
        );
    }

    #[test]
    fn expected_count_falls_back_to_world_size() {
        let mut header = Header {
            format_version: 1,
            engine: Engine::Prefill,
            kv_role: None,
            kv_connector: "NixlConnector".into(),
            world_size: 4,
            output_rank: 0,
            finished_count: None,
            aggregator_policy: PolicyName::Countdown,
            transfer_ranks: None,
            tp_size: None,
            pp_size: None,
            pcp_size: None,
            aborted_transfers: AbortedTransfers::FreeAtFirst,
        };
        assert_eq!(header.expected(), 4);
        header.finished_count = Some(0);
        assert_eq!(header.expected(), 4);
        header.finished_count = Some(2);
        assert_eq!(header.expected(), 2);
        assert_eq!(header.transfer_ranks(), vec![0, 1, 2, 3]);
    }
}
