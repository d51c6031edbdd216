//! `kvcc check --sarif FILE` (and `kvcc merge`): SARIF 2.1.0 (typed by `serde-sarif`), so
//! that GitHub code scanning shows each unmet expectation at the spec line that states
//! it. One result per mismatched check (rule `kvcc/mismatch`; `kvcc/inconclusive` when a
//! run a limit cut did not reach an expected property) and one per input error (rule
//! `kvcc/input-error`, at its file, line and column); checks that met their expectation
//! are not results. The driver carries kvcc's version and commit.

use crate::run::Outcome;
use crate::Build;
use kvcc_model::InputError;
use serde_sarif::sarif::{
    ArtifactLocation, Location, Message, MultiformatMessageString, PhysicalLocation, Region,
    ReportingDescriptor, Result as SarifResult, ResultLevel, Run, Sarif, Tool, ToolComponent,
};

/// The rules a result can break: (id, what it means).
const RULES: [(&str, &str); 3] = [
    (
        "kvcc/mismatch",
        "The checker's verdict differs from the expectation the spec states.",
    ),
    (
        "kvcc/inconclusive",
        "A run cut by a limit did not reach a property the spec expects violated: nothing was decided.",
    ),
    (
        "kvcc/input-error",
        "The input could not be read: nothing was checked.",
    ),
];

/// The SARIF log of a run's outcomes and input errors, as JSON.
pub fn render(outcomes: &[Outcome], errors: &[InputError], build: &Build) -> String {
    let mut results: Vec<SarifResult> = outcomes
        .iter()
        .filter(|o| !o.matches)
        .map(mismatch)
        .collect();
    results.extend(errors.iter().map(input_error));
    let rules: Vec<ReportingDescriptor> = RULES
        .iter()
        .map(|(id, meaning)| {
            ReportingDescriptor::builder()
                .id(*id)
                .short_description(MultiformatMessageString::builder().text(*meaning).build())
                .build()
        })
        .collect();
    let driver = ToolComponent::builder()
        .name("kvcc")
        .version(format!("{} (commit {})", build.version, build.commit))
        .semantic_version(build.version.clone())
        .rules(rules)
        .build();
    let run = Run::builder()
        .tool(Tool::builder().driver(driver).build())
        .results(results)
        .build();
    let log = Sarif::builder()
        .schema(serde_sarif::sarif::SCHEMA_URL)
        .version(serde_json::json!("2.1.0"))
        .runs(vec![run])
        .build();
    serde_json::to_string_pretty(&log).unwrap_or_default()
}

fn mismatch(o: &Outcome) -> SarifResult {
    let mut text = format!(
        "{}: expected {}, got {}",
        o.title(),
        o.expectation,
        o.verdict_text()
    );
    let rule = if o.unreached.is_empty() {
        RULES[0].0
    } else {
        text += &format!("; {} not reached before the limit", o.unreached.join(", "));
        RULES[1].0
    };
    if let Some(trace) = o.traces.first() {
        text += &format!(" (trace: {})", trace.display());
    }
    result(rule, text, &o.file, o.expect_line, None)
}

fn input_error(error: &InputError) -> SarifResult {
    let text = match &error.field {
        Some(field) => format!("{field}: {}", error.message),
        None => error.message.clone(),
    };
    let file = error.file.as_deref().unwrap_or("kvcc");
    let (line, column) = error.at.map_or((1, None), |(l, c)| (l, Some(c)));
    result(RULES[2].0, text, file, line, column)
}

/// A result of `rule` at `file`:`line` (and `column`).
fn result(rule: &str, text: String, file: &str, line: usize, column: Option<usize>) -> SarifResult {
    let as_i64 = |n: usize| i64::try_from(n.max(1)).unwrap_or(i64::MAX);
    let region = match column {
        Some(column) => Region::builder()
            .start_line(as_i64(line))
            .start_column(as_i64(column))
            .build(),
        None => Region::builder().start_line(as_i64(line)).build(),
    };
    let at = PhysicalLocation::builder()
        .artifact_location(ArtifactLocation::builder().uri(file).build())
        .region(region)
        .build();
    SarifResult::builder()
        .rule_id(rule)
        .level(ResultLevel::Error)
        .message(Message::builder().text(text).build())
        .locations(vec![Location::builder().physical_location(at).build()])
        .build()
}
