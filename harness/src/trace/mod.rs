//! Counterexamples for people and tools, written four ways for every violated clause
//! (`--trace-dir`): `NAME.txt` (numbered steps, only what changed), `NAME.md` (the same
//! for a PR comment, with a Mermaid sequence diagram), `NAME.itf.json` (the Informal
//! Trace Format, replayable with `kvcc replay`; `itf_v2` reads the format before it) and
//! `NAME.sh` (the exact command that reproduces the run). NAME is
//! `SPEC[__POINT]__PROPERTY__CLAUSE`.

pub mod diagnosis;
pub mod itf;
pub mod itf_v2;
pub mod markdown;
pub mod replay;
pub mod text;

use crate::atomic;
use crate::spec::point::{sanitize, Point};
use crate::spec::Spec;
use kvcc_model::checker::{Choice, Cost, Counterexample, Kind};
use kvcc_model::properties::CLAUSES;
use kvcc_model::{describe, narrate, Action, ContractModel, State};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Named facts of one state, as text (`describe::facts`).
pub type Facts = BTreeMap<String, String>;

/// One step of a counterexample.
#[derive(Clone, Debug)]
pub struct Step {
    pub action: Action,
    /// The action in vLLM's vocabulary and what it did ([`narrate::step`]).
    pub description: String,
    /// What it did, as the diagram's messages and notes ([`narrate::events`]).
    pub events: Vec<narrate::Event>,
    /// Every fact after the step.
    pub facts: Facts,
    /// The same facts, typed and grouped, for ITF.
    pub described: describe::Described,
    /// (fact, before, after) for the facts the step changed.
    pub changes: Vec<(String, String, String)>,
}

impl Step {
    /// The step `action` takes from `before` to `after`, as every rendering shows it (the
    /// explorer's pages too, for any path).
    pub fn new(model: &ContractModel, action: Action, before: &State, after: &State) -> Step {
        Step {
            action,
            description: narrate::step(model.topology, &action, before, after),
            events: narrate::events(model.topology, &action, before, after),
            facts: describe::facts(after),
            described: describe::describe(after),
            changes: describe::diff(before, after)
                .into_iter()
                .map(|(name, was, now)| (name, shown(was), shown(now)))
                .collect(),
        }
    }
}

/// A fact's value in a change line: a fact a state does not have (or has empty) is `-`,
/// as an empty set is, never nothing (`P rank0 req0 offload store: - → storing`).
fn shown(value: String) -> String {
    if value.is_empty() {
        "-".to_string()
    } else {
        value
    }
}

/// A counterexample with everything its renderings need.
#[derive(Clone, Debug)]
pub struct Trace {
    pub spec_name: String,
    /// The spec path as given on the command line.
    pub spec_file: String,
    pub description: Option<String>,
    pub point: Point,
    pub property: String,
    pub clause: String,
    pub clause_index: usize,
    pub kind: Kind,
    pub meaning: String,
    /// The command that reproduces the run.
    pub command: String,
    /// The command that opens the same case in the web explorer.
    pub explore_command: String,
    pub initial: Facts,
    pub initial_described: describe::Described,
    pub steps: Vec<Step>,
    /// Its faults, expiries and steps, and how it was chosen among the clause's.
    pub cost: Cost,
    pub choice: Choice,
    /// What the violation is made of ([`diagnosis`]).
    pub diagnosis: Vec<String>,
    /// The obligations a liveness counterexample leaves open, each in a few words with its
    /// countdown ([`diagnosis::stuck`]); empty for safety.
    pub stuck: Vec<String>,
    /// Each aggregator's expected finished count (kvcc's facts call it `E`) and where vLLM
    /// gets it: `P 2 = world_size = ..., because the connector's get_finished_count()
    /// returns None`.
    pub counts: Vec<String>,
    /// The step after which no continuation keeps the clause (0: the initial state).
    pub point_of_no_return: Option<usize>,
    pub prefill_ranks: u16,
    pub decode_ranks: u16,
    /// Per read handle: (D rank, P rank it reads).
    pub handles: Vec<(u16, u16)>,
}

impl Trace {
    pub fn new(
        model: &ContractModel,
        spec: &Spec,
        point: &Point,
        counterexample: &Counterexample<ContractModel>,
        command: String,
    ) -> Trace {
        let clause = &CLAUSES[counterexample.clause];
        let mut before = &counterexample.initial;
        let mut steps = Vec::new();
        for (action, after) in &counterexample.steps {
            steps.push(Step::new(model, *action, before, after));
            before = after;
        }
        let initial = describe::facts(&counterexample.initial);
        let diagnosis = diagnosis::diagnose(model, counterexample, &steps);
        let stuck = diagnosis::stuck(model, counterexample);
        let counts = [
            ("P", true, model.topology.prefill_expected),
            ("D", false, model.topology.decode_expected),
        ]
        .into_iter()
        .map(|(engine, prefill, count)| {
            let source = describe::expected_count_source(&model.config, prefill, count)
                .map(|s| format!(" ({s})"))
                .unwrap_or_default();
            format!("{engine} {count}{source}")
        })
        .collect();
        let t = &model.topology;
        let explore: Vec<String> = ["kvcc".into(), "explore".into(), spec.file.clone()]
            .into_iter()
            .chain(point.args())
            .map(|a| shell_quote(&a))
            .collect();
        Trace {
            spec_name: spec.name.clone(),
            spec_file: spec.file.clone(),
            description: spec.description.clone(),
            point: point.clone(),
            property: clause.property.to_string(),
            clause: clause.clause.to_string(),
            clause_index: counterexample.clause,
            kind: clause.kind,
            meaning: clause.meaning.to_string(),
            command,
            explore_command: explore.join(" "),
            initial,
            initial_described: describe::describe(&counterexample.initial),
            steps,
            diagnosis,
            stuck,
            counts,
            point_of_no_return: counterexample.point_of_no_return,
            cost: counterexample.cost,
            choice: counterexample.choice,
            prefill_ranks: t.prefill_world,
            decode_ranks: t.decode_world,
            handles: t.handles.iter().map(|h| (h.decoder, h.source)).collect(),
        }
    }

    /// `property: clause`.
    pub fn clause_name(&self) -> String {
        format!("{}: {}", self.property, self.clause)
    }

    /// `SPEC[__POINT]__PROPERTY__CLAUSE`, file-name safe.
    pub fn stem(&self) -> String {
        let mut parts = vec![sanitize(&self.spec_name)];
        if !self.point.is_empty() {
            parts.push(self.point.file_label());
        }
        parts.push(sanitize(&self.property));
        parts.push(sanitize(&self.clause));
        parts.join("__")
    }

    /// The facts' `E`, in vLLM's words: `vLLM's expected finished count: P 2 (world_size =
    /// ...), D 1 (...)`.
    pub fn counts_line(&self) -> String {
        format!("vLLM's expected finished count: {}", self.counts.join(", "))
    }

    /// `0 faults, 0 expiries, 6 steps (the fewest faults, then expiries, then steps)`.
    pub fn cost_line(&self) -> String {
        let why = match self.choice {
            Choice::Cheapest => {
                "of this clause's counterexamples, the fewest faults, then expiries, then steps"
            }
            Choice::Shortest => "a shortest counterexample (--shortest)",
            Choice::ShortestCut => {
                "a shortest counterexample: the search was cut, so a cheaper one may lie beyond it"
            }
            Choice::ShortestLimited => {
                "a shortest counterexample: the time or memory limit ran out before the cheapest was found"
            }
        };
        format!("{} ({why})", self.cost)
    }

    /// Why the last state is a violation, in one line.
    pub fn ending(&self) -> &'static str {
        match self.kind {
            Kind::Safety => "the state after the last step breaks it",
            Kind::Liveness => {
                "a run may end after the last step (nothing fairness forces is enabled) with the obligation still open"
            }
        }
    }
}

/// The command that replays an ITF file.
pub fn replay_command(itf: &Path) -> String {
    format!("kvcc replay {}", shell_quote(&itf.display().to_string()))
}

/// Writes the four files of a trace into `dir`; returns their paths (`.txt` first). Each
/// file is written whole under a temporary name and renamed ([`crate::atomic`]).
pub fn write_all(trace: &Trace, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let stem = trace.stem();
    let path = |ext: &str| dir.join(format!("{stem}.{ext}"));
    let itf_path = path("itf.json");
    let replay = replay_command(&itf_path);
    let files = [
        (path("txt"), text::render(trace, &replay)),
        (path("md"), markdown::render(trace, &replay)),
        (itf_path.clone(), itf::render(trace)),
    ];
    let mut written = Vec::new();
    for (file, contents) in files {
        atomic::write(&file, contents.as_bytes())?;
        written.push(file);
    }
    let sh = path("sh");
    atomic::write_executable(&sh, script(trace, &replay).as_bytes())?;
    written.push(sh);
    Ok(written)
}

/// `NAME.sh`: the reproduce command, runnable from any directory and in any clone. The
/// command's paths are relative to the directory the check ran in, which is written as a
/// place in its checkout (`.` for the checkout's root): the script looks for the spec
/// there, walking up first from the script's own directory (traces kept in a clone), then
/// from the current one (traces downloaded from CI, run inside a clone), and only then in
/// the absolute directory the check ran in (the same machine, outside any checkout).
/// Exits as `kvcc check` does (0 as expected, 1 a finding), or 2 when no spec is found.
fn script(trace: &Trace, replay: &str) -> String {
    let cwd = std::env::current_dir().ok();
    let within = cwd
        .as_deref()
        .and_then(|cwd| {
            let root = cwd.ancestors().find(|d| d.join(".git").exists())?;
            cwd.strip_prefix(root).ok().map(Path::to_path_buf)
        })
        .filter(|rel| !rel.as_os_str().is_empty())
        .map_or_else(|| ".".to_string(), |rel| rel.display().to_string());
    let place = if within == "." {
        "the root of".to_string()
    } else {
        format!("{within}/ in")
    };
    let original = cwd
        .map(|d| single_quoted(&d.display().to_string()))
        .unwrap_or_else(|| "''".into());
    let header = format!(
        "#!/bin/sh\n# kvcc {}: reproduces the counterexample to {} (rewrites this trace).\n# To re-execute the recorded trace instead: {replay}\n",
        crate::VERSION,
        trace.clause_name(),
    );
    // An absolute spec path names one machine's file: nothing to look for.
    if Path::new(&trace.spec_file).is_absolute() {
        return format!("{header}set -eu\ncd {original}\nexec {}\n", trace.command);
    }
    format!(
        "{header}# The command's paths are relative to {place} the checkout it ran in: the checkout
# holding this script, else the one it is run from, else the directory it ran in.
set -eu
spec={spec}
within={within_quoted}
original={original}
here=$(cd \"$(dirname \"$0\")\" && pwd)
target=
for start in \"$here\" \"$PWD\"; do
    dir=$start
    while :; do
        if [ -f \"$dir/$within/$spec\" ]; then
            target=$dir/$within
            break 2
        fi
        [ \"$dir\" = / ] && break
        dir=$(dirname \"$dir\")
    done
done
if [ -z \"$target\" ] && [ -f \"$original/$spec\" ]; then
    target=$original
fi
if [ -z \"$target\" ]; then
    echo \"$0: no $within/$spec in a directory above this script or the current one: run it inside a clone of the repository the check ran in\" >&2
    exit 2
fi
cd \"$target\"
exec {command}
",
        within_quoted = single_quoted(&within),
        spec = single_quoted(&trace.spec_file),
        command = trace.command,
    )
}

/// Quotes an argument for a POSIX shell when it needs it.
pub fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./=:,+-@%".contains(c));
    if plain {
        arg.to_string()
    } else {
        single_quoted(arg)
    }
}

/// `arg` in single quotes, for a POSIX shell, whatever it holds.
fn single_quoted(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', "'\\''"))
}
