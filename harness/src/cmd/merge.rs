//! `kvcc merge`.

use crate::cmd::check::Format;
use crate::named::Named;
use crate::out::outln;
use crate::report::json::{self, Checked, Position, Read, RunIdentity};
use crate::report::{self, github, Output};
use crate::run::Outcome;
use crate::spec::point::Selector;
use crate::spec::Spec;
use crate::{Build, Exit};
use kvcc_model::InputError;
use std::cmp::Reverse;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Combine the JSON lines of sharded `kvcc check --shard I/N --format json` runs into one
/// report, one JUnit file and one exit code, as if one machine had checked everything.
///
/// Nothing in the files is taken on trust. Every line must come from the same run (the
/// same kvcc build, settings and spec contents; lines carry them), and every check of
/// that run must be in exactly one file: a missing shard (or one cut short), a shard
/// given twice or a shard of another run is an input error (exit 2), never a green merge.
/// Each spec is read again (run merge where the shards ran: a spec or trace a line names
/// is followed only inside the working directory or the shard's own): its content must
/// be what the shards checked, each line's point one of its points and each expectation
/// its own; whether a verdict matches is recomputed. An input error any shard reported
/// is reported again (exit 2). Otherwise exit 0 when every verdict matches its
/// expectation, 1 when any differs.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  kvcc check --shard 1/3 --format json > shard-1.jsonl    (and 2/3, 3/3 on other runners)
  kvcc merge shard-1.jsonl shard-2.jsonl shard-3.jsonl --junit kvcc.xml")]
pub struct Args {
    /// Files of JSON lines written by `kvcc check --format json`, one per shard.
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<String>,
    /// Output format: `human` (the table) or `json` (the lines again, in check order).
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// Also write JUnit XML (one testcase per check) to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<String>,
    /// Also write SARIF 2.1.0 to FILE: one result per mismatch at the spec line of its
    /// expectation, for GitHub code scanning (harness/FORMATS.md).
    #[arg(long, value_name = "FILE")]
    pub sarif: Option<String>,
    /// Print only mismatches and the summary line.
    #[arg(long, short)]
    pub quiet: bool,
}

/// A check read from a shard, and where: errors about it name the file and line.
struct Entry {
    checked: Checked,
    file: String,
    line: usize,
}

impl Entry {
    /// An error about `field` of this entry's line.
    fn error(&self, field: &str, message: String) -> InputError {
        InputError {
            file: Some(self.file.clone()),
            at: Some((self.line, 1)),
            field: Some(field.to_string()),
            message,
            ..InputError::default()
        }
    }

    /// `FILE:LINE`.
    fn place(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

pub fn exec(args: Args) -> Exit {
    let out = Output {
        json: args.format == Format::Json,
        junit: args.junit.clone(),
        sarif: args.sarif.clone(),
        quiet: args.quiet,
        trace_dir: None,
        github: github::active(),
    };
    let mut entries: Vec<Entry> = Vec::new();
    let mut errors: Vec<InputError> = Vec::new();
    for file in &args.files {
        if let Err(e) = read(file, &mut entries, &mut errors) {
            errors.push(e);
        }
    }
    // Each step presumes the one before it passed: a shard of another run would otherwise
    // also be reported as checks missing or twice.
    for step in [same_run, coverage, against_specs] {
        if errors.is_empty() {
            errors.extend(step(&entries));
        }
    }
    entries.sort_by_key(|e| e.checked.at.check);
    if out.json && errors.is_empty() {
        let identity = identity(&entries);
        for e in &entries {
            let whole = Position {
                shard: None,
                ..e.checked.at
            };
            outln!("{}", json::line(&e.checked.outcome, whole, &identity));
        }
    }
    // The JUnit report names the code that checked the shards, not this kvcc.
    let build = match entries.first() {
        Some(e) if errors.is_empty() => Build {
            version: e.checked.kvcc_version.clone(),
            commit: e.checked.kvcc_commit.clone(),
            dirty: e.checked.kvcc_dirty,
        },
        _ => Build::this(),
    };
    let outcomes: Vec<Outcome> = entries.into_iter().map(|e| e.checked.outcome).collect();
    report::finish(&out, &build, &outcomes, &errors)
}

/// Reads one shard's lines; a line that is not kvcc's names its file, line and field.
fn read(
    file: &str,
    entries: &mut Vec<Entry>,
    errors: &mut Vec<InputError>,
) -> Result<(), InputError> {
    let text = kvcc_model::input::read_text(Path::new(file), "shard")?;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match json::read(line) {
            Ok(Read::Check(checked)) => {
                check_traces(file, &checked.outcome.traces).map_err(|e| InputError {
                    at: Some((i + 1, 1)),
                    ..e
                })?;
                entries.push(Entry {
                    checked: *checked,
                    file: file.to_string(),
                    line: i + 1,
                })
            }
            Ok(Read::Error(e)) => errors.push(e),
            Err(e) => {
                return Err(InputError {
                    file: Some(file.to_string()),
                    at: Some((i + 1, e.at.map_or(1, |(_, column)| column))),
                    message: format!("not a line of `kvcc check --format json`: {}", e.message),
                    ..e
                })
            }
        }
    }
    Ok(())
}

/// Refuses a trace a shard line lists that kvcc may not read: each must be a trace file
/// that stays inside the working directory or the shard's (a shard may come from a
/// stranger, and the job summary copies its Markdown traces). One that is not there at
/// all is let be: the summary says it is not readable here.
fn check_traces(shard: &str, traces: &[PathBuf]) -> Result<(), InputError> {
    for trace in traces {
        let path = trace.to_string_lossy();
        Named {
            file: shard,
            field: "traces",
            path: &path,
            extensions: &["md", "txt", "json", "sh"],
            advice: "kvcc merge reads traces only where the shards wrote them",
        }
        .resolve()?;
    }
    Ok(())
}

/// Every line from one run: the same kvcc, settings, spec contents and plan. One error
/// per file, at its first line that differs from what most lines hold ([`reference`],
/// and for a spec's content the hash most of its lines hold).
fn same_run(entries: &[Entry]) -> Vec<InputError> {
    let Some(usual) = reference(entries) else {
        return Vec::new();
    };
    // Each spec's lines, and the one among them holding the content hash most carry.
    let mut of_spec: HashMap<&str, Vec<&Entry>> = HashMap::new();
    for e in entries {
        of_spec.entry(&e.checked.outcome.file).or_default().push(e);
    }
    let usual_content: HashMap<&str, &Entry> = of_spec
        .into_iter()
        .filter_map(|(spec, lines)| {
            let line = most_held(lines.into_iter(), |o| o.checked.spec_hash.clone())?;
            Some((spec, line))
        })
        .collect();
    let mut errors = Vec::new();
    let mut reported: Vec<&str> = Vec::new();
    for e in entries {
        if reported.contains(&e.file.as_str()) {
            continue;
        }
        let (a, b) = (&e.checked, &usual.checked);
        let same_spec = usual_content
            .get(a.outcome.file.as_str())
            .copied()
            .filter(|o| o.checked.spec_hash != a.spec_hash);
        let differs = if a.kvcc_version != b.kvcc_version {
            Some((
                "kvcc_version",
                a.kvcc_version.clone(),
                b.kvcc_version.clone(),
                usual,
            ))
        } else if a.kvcc_commit != b.kvcc_commit {
            Some((
                "kvcc_commit",
                a.kvcc_commit.clone(),
                b.kvcc_commit.clone(),
                usual,
            ))
        } else if a.kvcc_dirty != b.kvcc_dirty {
            let text = |d: Option<bool>| d.map_or("null".to_string(), |d| d.to_string());
            Some(("kvcc_dirty", text(a.kvcc_dirty), text(b.kvcc_dirty), usual))
        } else if a.settings != b.settings {
            let text = |s| serde_json::to_string(s).unwrap_or_default();
            Some(("settings", text(&a.settings), text(&b.settings), usual))
        } else if let Some(other) = same_spec {
            let other_hash = other.checked.spec_hash.clone();
            Some(("spec_hash", a.spec_hash.clone(), other_hash, other))
        } else if a.run != b.run {
            Some(("run", a.run.clone(), b.run.clone(), usual))
        } else {
            None
        };
        if let Some((field, here, there, other)) = differs {
            errors.push(e.error(
                field,
                format!(
                    "`{here}` here but `{there}` at {}: shards of different runs (the same kvcc, settings and specs must check every shard)",
                    other.place()
                ),
            ));
            reported.push(&e.file);
        }
    }
    errors
}

/// The line most lines agree with on the run's identity (build, settings, run, its number
/// of checks and of shards): what every other line is held to.
fn reference(entries: &[Entry]) -> Option<&Entry> {
    most_held(entries.iter(), |e| {
        let c = &e.checked;
        let shards = c.at.shard.map(|s| s.count);
        let fields = (&c.kvcc_version, &c.kvcc_commit, c.kvcc_dirty, &c.settings);
        serde_json::to_string(&(fields, &c.run, c.at.checks, shards)).unwrap_or_default()
    })
}

/// Of `lines`, the first holding the `key` most of them hold (a tie goes to the earliest):
/// held to it, one edited or stray line is blamed, not the good lines beside it.
fn most_held<'a>(
    lines: impl Iterator<Item = &'a Entry>,
    key: impl Fn(&Entry) -> String,
) -> Option<&'a Entry> {
    // key → (lines holding it, the order of the first of them, that line)
    let mut held: HashMap<String, (usize, Reverse<usize>, &Entry)> = HashMap::new();
    for (i, e) in lines.enumerate() {
        held.entry(key(e)).or_insert((0, Reverse(i), e)).0 += 1;
    }
    let (_, _, line) = held
        .into_values()
        .max_by_key(|&(lines, first, _)| (lines, first))?;
    Some(line)
}

/// Every check of the whole run exactly once, all from the same run size and shard count.
fn coverage(entries: &[Entry]) -> Vec<InputError> {
    let Some(usual) = reference(entries) else {
        return vec![InputError::usage("the files hold no check")];
    };
    let checks = usual.checked.at.checks;
    let mut errors = Vec::new();
    for e in entries {
        let at = &e.checked.at;
        if at.checks != checks {
            errors.push(e.error(
                "checks",
                format!(
                    "a run of {} checks, {} is one of {checks}: not the same run",
                    at.checks,
                    usual.place()
                ),
            ));
            return errors;
        }
        let count = |p: &Position| p.shard.map(|s| s.count);
        if count(at) != count(&usual.checked.at) {
            errors.push(e.error(
                "shard",
                format!(
                    "{} splits the run into different shard counts",
                    usual.place()
                ),
            ));
            return errors;
        }
    }
    let mut seen: Vec<Option<&Entry>> = vec![None; checks];
    for e in entries {
        let check = e.checked.at.check;
        match seen.get_mut(check) {
            None => errors.push(e.error(
                "check",
                format!("check {check} is beyond the run's {checks} checks"),
            )),
            Some(Some(other)) => errors.push(e.error(
                "check",
                format!(
                    "check {check} ({}) is in both {} and here: a shard given twice?",
                    e.checked.outcome.title(),
                    other.place()
                ),
            )),
            Some(slot) => *slot = Some(e),
        }
    }
    let missing: Vec<String> = seen
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_none())
        .map(|(i, _)| i.to_string())
        .collect();
    if !missing.is_empty() {
        errors.push(InputError::usage(format!(
            "{} of the run's {checks} checks are in no file (checks {}): a shard is missing or was cut short",
            missing.len(),
            missing.join(", ")
        )));
    }
    errors
}

/// Each line against its spec as it is now: the content the shard checked, a point the
/// spec has (each once), the spec's expectation there, and `matches` as recomputed.
fn against_specs(entries: &[Entry]) -> Vec<InputError> {
    let mut files: Vec<&str> = Vec::new();
    for e in entries {
        if !files.contains(&e.checked.outcome.file.as_str()) {
            files.push(&e.checked.outcome.file);
        }
    }
    let mut errors = Vec::new();
    for file in files {
        let lines: Vec<&Entry> = entries
            .iter()
            .filter(|e| e.checked.outcome.file == file)
            .collect();
        if let Err(e) = against_spec(file, &lines) {
            errors.push(e);
        }
    }
    errors
}

/// The lines of one spec file against it; the first error found.
fn against_spec(file: &str, lines: &[&Entry]) -> Result<(), InputError> {
    let first = lines[0];
    let named = Named {
        file: &first.file,
        field: "file",
        path: file,
        extensions: &["toml"],
        advice: "kvcc merge reads each spec again: run it where the shards ran",
    };
    let shown = named.resolve().map_err(|e| InputError {
        at: Some((first.line, 1)),
        ..e
    })?;
    let spec = Spec::load(shown.as_deref().unwrap_or(file)).map_err(|e| {
        e.with_help(format!(
            "kvcc merge reads each spec again: run it where {} ran",
            first.file
        ))
    })?;
    let hash = json::spec_hash(spec.source.text());
    if hash != first.checked.spec_hash {
        return Err(first.error(
            "spec_hash",
            format!(
                "{file} has changed since the shard checked it (its content hashes to `{hash}` now, `{}` then)",
                first.checked.spec_hash
            ),
        ));
    }
    let selectors = first
        .checked
        .settings
        .points
        .iter()
        .map(|p| p.parse::<Selector>())
        .collect::<Result<Vec<_>, String>>()
        .map_err(|m| first.error("settings.points", m))?;
    let cases = spec.cases(&selectors)?;
    let mut seen: Vec<Option<&Entry>> = vec![None; cases.len()];
    for e in lines {
        let o = &e.checked.outcome;
        if o.spec != spec.name {
            return Err(e.error(
                "spec",
                format!("`{}`, but {file} names its spec `{}`", o.spec, spec.name),
            ));
        }
        let point = o.point.to_json();
        let Some(i) = cases.iter().position(|c| c.point.to_json() == point) else {
            return Err(e.error("point", format!("{file} has no matrix point {point}")));
        };
        if let Some(other) = seen[i] {
            return Err(e.error(
                "point",
                format!("point {point} of {file} is also at {}", other.place()),
            ));
        }
        seen[i] = Some(e);
        let case = &cases[i];
        if o.expectation != case.expectation {
            return Err(e.error(
                "expected",
                format!(
                    "`{}`, but {file} expects `{}` at this point",
                    o.expectation, case.expectation
                ),
            ));
        }
        if o.expect_line != case.expect_line {
            return Err(e.error(
                "line",
                format!(
                    "{}, but {file} states this point's expectation on line {}",
                    o.expect_line, case.expect_line
                ),
            ));
        }
        if e.checked.matches_stated != o.matches {
            return Err(e.error(
                "matches",
                format!(
                    "{}, but the verdict `{}` {} the expectation `{}`",
                    e.checked.matches_stated,
                    o.verdict_text(),
                    if o.matches { "meets" } else { "does not meet" },
                    o.expectation
                ),
            ));
        }
    }
    if let Some(i) = seen.iter().position(Option::is_none) {
        return Err(first.error(
            "point",
            format!(
                "point {} of {file} is in no line, though every check of the run is",
                cases[i].point.to_json()
            ),
        ));
    }
    Ok(())
}

/// The run's identity as its lines state it (all equal, by [`same_run`]), to write the
/// merged lines with.
fn identity(entries: &[Entry]) -> RunIdentity {
    let Some(first) = entries.first() else {
        return RunIdentity::default();
    };
    let c = &first.checked;
    RunIdentity {
        kvcc_version: c.kvcc_version.clone(),
        kvcc_commit: c.kvcc_commit.clone(),
        kvcc_dirty: c.kvcc_dirty,
        settings: c.settings.clone(),
        spec_hashes: entries
            .iter()
            .map(|e| (e.checked.outcome.file.clone(), e.checked.spec_hash.clone()))
            .collect(),
        run: c.run.clone(),
    }
}
