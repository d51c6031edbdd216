//! `kvcc simulate`.

use crate::out::outln;
use crate::report::print_errors;
use crate::simulate::{run_seed, simulate, End, Simulation};
use crate::spec::point::Selector;
use crate::spec::Spec;
use crate::trace::shell_quote;
use crate::Exit;
use kvcc_model::ContractModel;
use kvcc_model::InputError;
use serde::Serialize;
use std::path::Path;

/// Write random executions of a spec's model as recorded runs, for `kvcc conform`.
///
/// Each run starts from the model's initial state and picks uniformly among the enabled
/// actions that change the state, faults included; it ends where no action that fairness
/// forces is enabled (where the model judges liveness), at the first state that breaks a
/// safety clause, or after --max-actions. Run I is written to DIR/run-IIII/ as
/// `prefill/` and `decode/` (docs/recorded-run.md), plus `model.json` with its seed, its
/// actions and the clauses the model finds violated where it ended. The same SPEC,
/// point, --seed and run index always give the same run. In a spec with a matrix,
/// `--point` selects the point; when several match, the first is simulated (and named).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  kvcc simulate specs/pr59325-regression.toml --seed 1 --runs 8 --out sim
  kvcc conform sim/run-*                      # flags eventually-freed where the model leaks
  kvcc simulate specs/pr59325-fix.toml --point prefill.pcp=4 --runs 100 --out fix")]
pub struct Args {
    /// The spec file.
    #[arg(value_name = "SPEC")]
    pub spec: String,
    /// Select the matrix point where KEY has VALUE (repeatable; e.g. `prefill.pcp=2`).
    #[arg(long = "point", value_name = "KEY=VALUE")]
    pub points: Vec<Selector>,
    /// The seed of the whole simulation; run I uses a seed derived from it and I.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
    /// How many runs.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub runs: u64,
    /// Where to write the runs (DIR/run-0000/ ...); existing run directories are not
    /// overwritten.
    #[arg(long, value_name = "DIR")]
    pub out: String,
    /// Stop a run after this many actions (its liveness is then not judged).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub max_actions: usize,
}

/// `model.json`: how a simulated run came about.
#[derive(Serialize)]
struct ModelJson<'a> {
    format_version: u32,
    kvcc_version: &'static str,
    spec: &'a str,
    point: serde_json::Value,
    seed: u64,
    run: u64,
    run_seed: u64,
    command: &'a str,
    ends: &'static str,
    violated: Vec<String>,
    actions: &'a [kvcc_model::Action],
}

pub fn exec(args: Args) -> Exit {
    match run(&args) {
        Ok(()) => Exit::Ok,
        Err(e) => {
            print_errors(&[e]);
            Exit::Input
        }
    }
}

fn run(args: &Args) -> Result<(), InputError> {
    let spec = Spec::load(&args.spec)?;
    let case = spec
        .cases(&args.points)?
        .into_iter()
        .next()
        .expect("cases() never returns an empty list");
    let title = if case.point.is_empty() {
        spec.name.clone()
    } else {
        format!("{} [{}]", spec.name, case.point)
    };
    let mut command = vec!["kvcc".to_string(), "simulate".into(), spec.file.clone()];
    command.extend(case.point.args());
    command.extend([
        "--seed".into(),
        args.seed.to_string(),
        "--runs".into(),
        args.runs.to_string(),
        "--out".into(),
        args.out.clone(),
    ]);
    let command: Vec<String> = command.iter().map(|a| shell_quote(a)).collect();
    let command = command.join(" ");
    let model = ContractModel::new(case.config.clone());
    let out = Path::new(&args.out);
    for index in 0..args.runs {
        let dir = out.join(format!("run-{index:04}"));
        let shown = dir.display().to_string();
        if dir.exists() {
            return Err(InputError::file(
                &shown,
                "already exists: simulate into a new --out directory",
            ));
        }
        let seed = run_seed(args.seed, index);
        let simulation = simulate(&model, seed, args.max_actions);
        let write_error =
            |e: std::io::Error| InputError::file(&shown, format!("cannot write: {e}"));
        simulation.write(&dir).map_err(write_error)?;
        let meta = ModelJson {
            format_version: 1,
            kvcc_version: crate::VERSION,
            spec: &spec.file,
            point: case.point.to_json(),
            seed: args.seed,
            run: index,
            run_seed: seed,
            command: &command,
            ends: simulation.end.text(),
            violated: simulation.violated_names(),
            actions: &simulation.actions,
        };
        let mut json = serde_json::to_string_pretty(&meta).unwrap_or_default();
        json.push('\n');
        std::fs::write(dir.join("model.json"), json).map_err(write_error)?;
        outln!("{}", line(&shown, &simulation));
    }
    outln!(
        "{} runs of {title} in {}; check them with: kvcc conform {}",
        args.runs,
        args.out,
        shell_quote(&out.join("run-*").display().to_string()).replace('\'', "")
    );
    Ok(())
}

/// `sim/run-0000: 12 actions, P 4 steps, D 2 steps; ends: ...; model: ...`.
fn line(dir: &str, s: &Simulation) -> String {
    let verdict = match (s.end, s.violated.is_empty()) {
        (End::Capped | End::TooManySuccessors, _) => "not judged".to_string(),
        (_, true) => "holds".to_string(),
        (_, false) => format!("violates {}", s.violated_names().join(", ")),
    };
    format!(
        "{dir}: {} actions, P {} steps, D {} steps; ends where {}; model: {verdict}",
        s.actions.len(),
        s.prefill.steps.len(),
        s.decode.steps.len(),
        s.end.text()
    )
}
