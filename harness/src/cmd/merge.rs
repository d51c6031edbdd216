//! `kvcc merge`.

use crate::cmd::check::Format;
use crate::report::json::{self, Position, Read};
use crate::report::{self, Output};
use crate::run::Outcome;
use crate::Exit;
use kvcc_model::InputError;

/// Combine the JSON lines of sharded `kvcc check --shard I/N --format json` runs into one
/// report, one JUnit file and one exit code, as if one machine had checked everything.
///
/// Every check of the whole run must be in exactly one file: a missing shard (or one cut
/// short) or a shard given twice is an input error (exit 2), never a green merge. An
/// input error any shard reported is reported again (exit 2). Otherwise exit 0 when every
/// verdict matches its expectation, 1 when any differs.
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
    /// Print only mismatches and the summary line.
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn exec(args: Args) -> Exit {
    let out = Output {
        json: args.format == Format::Json,
        junit: args.junit.clone(),
        quiet: args.quiet,
        trace_dir: None,
    };
    let mut checks: Vec<(Position, Outcome, String)> = Vec::new();
    let mut errors: Vec<InputError> = Vec::new();
    for file in &args.files {
        if let Err(e) = read(file, &mut checks, &mut errors) {
            errors.push(e);
        }
    }
    if errors.is_empty() {
        errors.extend(coverage(&checks));
    }
    checks.sort_by_key(|(at, _, _)| at.check);
    if out.json && errors.is_empty() {
        for (at, outcome, _) in &checks {
            let whole = Position { shard: None, ..*at };
            println!("{}", json::line(outcome, whole));
        }
    }
    let outcomes: Vec<Outcome> = checks.into_iter().map(|(_, o, _)| o).collect();
    report::finish(&out, &outcomes, &errors)
}

/// Reads one shard's lines; a line that is not kvcc's names its file and line.
fn read(
    file: &str,
    checks: &mut Vec<(Position, Outcome, String)>,
    errors: &mut Vec<InputError>,
) -> Result<(), InputError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| InputError::file(file, format!("cannot read: {e}")))?;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match json::read(line) {
            Ok(Read::Check(at, outcome)) => checks.push((at, *outcome, file.to_string())),
            Ok(Read::Error(e)) => errors.push(e),
            Err(message) => {
                return Err(InputError {
                    file: Some(file.to_string()),
                    at: Some((i + 1, 1)),
                    message: format!("not a line of `kvcc check --format json`: {message}"),
                    ..InputError::default()
                })
            }
        }
    }
    Ok(())
}

/// Every check of the whole run exactly once, all from the same run size and shard count.
fn coverage(checks: &[(Position, Outcome, String)]) -> Vec<InputError> {
    let Some((first, _, first_file)) = checks.first() else {
        return vec![InputError::usage("the files hold no check")];
    };
    let mut errors = Vec::new();
    for (at, _, file) in checks {
        if at.checks != first.checks {
            errors.push(InputError::usage(format!(
                "{file} is from a run of {} checks, {first_file} from one of {}: not the same run",
                at.checks, first.checks
            )));
            return errors;
        }
        let count = |p: &Position| p.shard.map(|s| s.count);
        if count(at) != count(first) {
            errors.push(InputError::usage(format!(
                "{file} and {first_file} split the run into different shard counts"
            )));
            return errors;
        }
    }
    let mut seen: Vec<Option<&str>> = vec![None; first.checks];
    for (at, outcome, file) in checks {
        match seen.get_mut(at.check) {
            None => errors.push(InputError::usage(format!(
                "{file}: check {} is beyond the run's {} checks",
                at.check, first.checks
            ))),
            Some(Some(other)) => errors.push(InputError::usage(format!(
                "check {} ({}) is in both {other} and {file}: a shard given twice?",
                at.check,
                outcome.title()
            ))),
            Some(slot) => *slot = Some(file.as_str()),
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
            "{} of the run's {} checks are in no file (checks {}): a shard is missing or was cut short",
            missing.len(),
            first.checks,
            missing.join(", ")
        )));
    }
    errors
}
