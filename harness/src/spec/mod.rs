//! Spec files: one contract scenario, its matrix and what the checker must conclude.
//!
//! ```toml
//! version = 1
//! requests = 1
//! expected-count = "world-size"
//! [prefill]
//! tp = 1
//! pcp = 2
//! [decode]
//! tp = 1
//! [matrix]
//! "prefill.pcp" = [2, 4]
//! [expect]
//! verdict = "violated"
//! violates = ["eventually-freed", "aggregator-drains"]
//! ```
//!
//! Top-level `version`, `name`, `description`, `matrix`, `expect` and `limits` belong to
//! the spec; every other key is a field of `kvcc_model::Config`. Matrix values are written
//! into the TOML before `Config` is deserialized, so every error still names its field,
//! and points at the matrix entry when the matrix put the value there.

pub mod point;
pub mod schema;
pub mod source;

use crate::spec::point::{value_text, Point, Selector};
use crate::spec::source::{field_path, syntax_error, Part, Seg, Source};
use kvcc_model::checker::Limits;
use kvcc_model::properties::PROPERTIES;
use kvcc_model::Config;
use kvcc_model::InputError;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::num::NonZeroU64;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

/// The spec format version this kvcc reads.
pub const FORMAT_VERSION: i64 = 1;

/// What the checker must conclude at a point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expectation {
    Holds,
    /// Exactly these properties are violated (in `PROPERTIES` order): `violates`.
    Violated(Vec<String>),
    /// At least these, perhaps more: `violates-all`.
    ViolatedAll(Vec<String>),
    /// At least one of these, perhaps others too: `violates-any`.
    ViolatedAny(Vec<String>),
}

impl std::fmt::Display for Expectation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expectation::Holds => write!(f, "holds"),
            Expectation::Violated(p) => write!(f, "violated ({})", p.join(", ")),
            Expectation::ViolatedAll(p) => write!(f, "violated (at least {})", p.join(", ")),
            Expectation::ViolatedAny(p) => write!(f, "violated (any of {})", p.join(", ")),
        }
    }
}

/// One `[matrix]` entry: a Config field path and the values it takes.
#[derive(Clone, Debug)]
pub struct MatrixEntry {
    pub path: String,
    pub values: Vec<toml::Value>,
    /// Where the entry's list is in the document.
    segs: Vec<Seg>,
}

/// An `[[expect.when]]` override.
#[derive(Clone, Debug)]
pub struct When {
    pub selectors: Vec<Selector>,
    pub expectation: Expectation,
    /// The line of its `[[expect.when]]` header.
    pub line: usize,
}

#[derive(Clone, Debug)]
pub struct Expect {
    pub default: Expectation,
    /// `past-violations = true`: every point's search explores past a state that breaks
    /// a safety clause, so the expectation can name clauses reachable only after another
    /// one broke (`kvcc_model::checker::Options::past_violations`).
    pub past_violations: bool,
    /// The line of the `[expect]` table.
    pub line: usize,
    pub when: Vec<When>,
}

/// One check a spec asks for: a matrix point, its config and its expectation.
#[derive(Clone, Debug)]
pub struct Case {
    pub point: Point,
    pub config: Config,
    pub expectation: Expectation,
    /// The line that states the expectation (`[expect]` or the matching `[[expect.when]]`).
    pub expect_line: usize,
}

pub struct Spec {
    /// The path as given on the command line.
    pub file: String,
    pub name: String,
    pub description: Option<String>,
    pub source: Source,
    /// The Config part of the document (every non-reserved top-level key).
    config: toml::Table,
    pub matrix: Vec<MatrixEntry>,
    pub expect: Expect,
    pub limits: Limits,
}

/// The checker's verdict.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[schemars(rename = "verdict")]
enum VerdictToml {
    Holds,
    Violated,
}

/// What the checker must conclude; `[[expect.when]]` overrides it per matrix point (first
/// match wins).
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[schemars(rename = "expect", transform = schema::expectation_rule)]
struct ExpectToml {
    verdict: VerdictToml,
    /// With verdict = "violated": exactly the set of violated properties.
    #[serde(default)]
    #[schemars(with = "Option<schema::Properties>")]
    violates: Option<Vec<String>>,
    /// With verdict = "violated": at least these properties are violated, perhaps others
    /// too.
    #[serde(default)]
    #[schemars(with = "Option<schema::Properties>")]
    violates_all: Option<Vec<String>>,
    /// With verdict = "violated": at least one of these properties is violated, perhaps
    /// others too.
    #[serde(default)]
    #[schemars(with = "Option<schema::Properties>")]
    violates_any: Option<Vec<String>>,
    /// Explore past a state that breaks a safety clause instead of ending its run there,
    /// at every point, so that the expectation can name clauses reachable only after
    /// another one broke (a completion for a request the scheduler already forgot). Costs
    /// states; liveness is still judged only where a run ends with every safety clause
    /// kept. `kvcc check --past-violations` does it for every spec.
    #[serde(default)]
    past_violations: bool,
    /// Overrides per matrix point, the first that matches wins.
    #[serde(default)]
    when: Vec<WhenToml>,
}

/// An expectation for the matrix points it matches.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[schemars(rename = "expect-when", transform = schema::expectation_rule)]
struct WhenToml {
    /// Matrix paths to values; the override applies where all are equal.
    #[serde(rename = "match")]
    #[schemars(with = "schema::Match")]
    matches: toml::Table,
    verdict: VerdictToml,
    /// With verdict = "violated": exactly the set of violated properties.
    #[serde(default)]
    #[schemars(with = "Option<schema::Properties>")]
    violates: Option<Vec<String>>,
    /// With verdict = "violated": at least these properties are violated, perhaps others
    /// too.
    #[serde(default)]
    #[schemars(with = "Option<schema::Properties>")]
    violates_all: Option<Vec<String>>,
    /// With verdict = "violated": at least one of these properties is violated, perhaps
    /// others too.
    #[serde(default)]
    #[schemars(with = "Option<schema::Properties>")]
    violates_any: Option<Vec<String>>,
}

/// Bounds on each check; a run cut by any of them is inconclusive, never a pass.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[schemars(rename = "limits")]
struct LimitsToml {
    /// The most unique states a check explores.
    max_states: Option<NonZeroU64>,
    /// The deepest a check's search goes, in steps from the initial state.
    max_depth: Option<u32>,
    /// The most wall-clock seconds a check runs.
    timeout_seconds: Option<NonZeroU64>,
}

fn key(k: &str) -> Seg {
    Seg::Key(k.to_string())
}

impl Spec {
    /// Reads and validates a spec file (everything but the per-point configs); its first
    /// error, if any ([`Spec::load_all`] has them all).
    pub fn load(file: &str) -> Result<Spec, InputError> {
        Spec::load_all(file).map_err(first)
    }

    /// Validates a spec's text; `file` is used for messages and the default name. Its
    /// first error, if any ([`Spec::parse_all`] has them all).
    pub fn parse(file: &str, text: String) -> Result<Spec, InputError> {
        Spec::parse_all(file, text).map_err(first)
    }

    /// [`Spec::load`] with every error the file has, in file order.
    pub fn load_all(file: &str) -> Result<Spec, Vec<InputError>> {
        let text = kvcc_model::input::read_text(Path::new(file), "spec").map_err(|e| vec![e])?;
        Spec::parse_all(file, text)
    }

    /// [`Spec::parse`] with every error the text has, in file order: a user who fixes one
    /// typo should not have to run kvcc again to meet the next. A syntax error stops
    /// everything (nothing after it can be read); a bad `[matrix]` stops `[expect]` (whose
    /// `when` tables name matrix paths) from being judged against it.
    pub fn parse_all(file: &str, text: String) -> Result<Spec, Vec<InputError>> {
        let source = Source::parse(file, text).map_err(|e| vec![e])?;
        let mut table: toml::Table = toml::from_str(source.text())
            .map_err(|e| vec![syntax_error(file, source.text(), e.span(), e.message())])?;
        let mut errors = Vec::new();
        let version = table.remove("version");
        errors.extend(check_version(&source, version).err());
        let unknown = check_top_level_keys(&source, &table);
        let typo_at_top = !unknown.is_empty();
        for (name, error) in unknown {
            table.remove(&name);
            errors.push(error);
        }
        let name = match table.remove("name") {
            None => default_name(file),
            Some(toml::Value::String(s)) if !s.trim().is_empty() => s,
            Some(_) => {
                errors.push(source.error(
                    &[key("name")],
                    Part::Value,
                    "must be a non-empty string",
                ));
                default_name(file)
            }
        };
        let description = match table.remove("description") {
            None => None,
            Some(toml::Value::String(s)) => Some(s),
            Some(_) => {
                errors.push(source.error(&[key("description")], Part::Value, "must be a string"));
                None
            }
        };
        let limits = match table.remove("limits") {
            None => Limits::default(),
            Some(v) => match deserialize::<LimitsToml>(&source, &[key("limits")], v) {
                Ok(l) => Limits {
                    max_states: l.max_states.map(NonZeroU64::get),
                    max_depth: l.max_depth,
                    timeout: l.timeout_seconds.map(|s| Duration::from_secs(s.get())),
                    // A spec describes the model, not the machine it is checked on.
                    max_memory: None,
                },
                Err(e) => {
                    errors.push(e);
                    Limits::default()
                }
            },
        };
        let matrix = match table.remove("matrix").map(|v| matrix_entries(&source, v)) {
            None => Some(Vec::new()),
            Some(Ok(matrix)) => Some(matrix),
            Some(Err(e)) => {
                errors.push(e);
                None
            }
        };
        let expect = match (table.remove("expect"), &matrix) {
            (None, _) => {
                errors.push(source.error_at(
                    None,
                    Some("expect".into()),
                    "missing: say what the checker must conclude, e.g. `[expect]` with `verdict = \"holds\"`",
                ));
                None
            }
            (Some(_), None) => None,
            (Some(v), Some(matrix)) => expectations(&source, matrix, v)
                .map_err(|e| errors.push(e))
                .ok(),
        };
        let spec = Spec {
            file: file.to_string(),
            name,
            description,
            source,
            config: table,
            matrix: matrix.unwrap_or_default(),
            expect: expect.unwrap_or(Expect {
                default: Expectation::Holds,
                past_violations: false,
                line: 0,
                when: Vec::new(),
            }),
            limits,
        };
        // The spec's own values must make a valid config even where the matrix writes
        // over them at every point: a `pcp = 0` under `[prefill]` is a mistake to report,
        // not to hide behind `[matrix] "prefill.pcp"`.
        if let Err(config_errors) = spec.config_all(&Point::default()) {
            // A top-level field missing beside a top-level typo is the typo's.
            errors.extend(config_errors.into_iter().filter(|e| {
                let missing = e.message.starts_with("missing field `");
                let top = e.field.as_deref().is_some_and(|f| !f.contains('.'));
                !(typo_at_top && missing && top)
            }));
        }
        if errors.is_empty() {
            return Ok(spec);
        }
        // In file order, as a compiler lists them; errors with no line (a missing table)
        // last.
        errors.sort_by_key(|e| e.at.map_or((usize::MAX, 0), |at| at));
        Err(errors)
    }

    /// Every matrix point, first matrix entry varying slowest.
    pub fn points(&self) -> Vec<Point> {
        let mut points = vec![Point::default()];
        for entry in &self.matrix {
            points = points
                .into_iter()
                .flat_map(|p| {
                    entry.values.iter().map(move |v| {
                        let mut p = p.clone();
                        p.0.push((entry.path.clone(), v.clone()));
                        p
                    })
                })
                .collect();
        }
        points
    }

    /// The checks this spec asks for, narrowed by `--point` selectors; every config is
    /// built and validated, so a run never starts on a bad spec.
    pub fn cases(&self, selectors: &[Selector]) -> Result<Vec<Case>, InputError> {
        for s in selectors {
            self.check_selector(s)?;
        }
        let mut cases = Vec::new();
        for point in self.points() {
            if !selectors.iter().all(|s| s.selects(&point)) {
                continue;
            }
            let config = self.config(&point)?;
            let (expectation, expect_line) = self.expectation(&point);
            cases.push(Case {
                point,
                config,
                expectation,
                expect_line,
            });
        }
        if cases.is_empty() {
            let wanted: Vec<String> = selectors
                .iter()
                .map(|s| format!("{}={}", s.path, value_text(&s.value)))
                .collect();
            return Err(InputError::file(
                &self.file,
                format!("no matrix point has {}", wanted.join(" and ")),
            ));
        }
        Ok(cases)
    }

    fn check_selector(&self, s: &Selector) -> Result<(), InputError> {
        let Some(entry) = self.matrix.iter().find(|e| e.path == s.path) else {
            let known: Vec<&str> = self.matrix.iter().map(|e| e.path.as_str()).collect();
            let known = if known.is_empty() {
                "it has no matrix".to_string()
            } else {
                format!("its matrix has {}", known.join(", "))
            };
            let error = InputError::file(
                &self.file,
                format!(
                    "--point {}: not a matrix path of this spec ({known})",
                    s.path
                ),
            );
            return Err(suggest(
                error,
                &s.path,
                self.matrix.iter().map(|e| e.path.as_str()),
            ));
        };
        if !entry.values.contains(&s.value) {
            return Err(InputError::file(
                &self.file,
                format!(
                    "--point {}={}: not a value of the matrix ({})",
                    s.path,
                    value_text(&s.value),
                    values_text(&entry.values)
                ),
            ));
        }
        Ok(())
    }

    /// The config at a point recorded elsewhere (a trace), against a spec that may have
    /// changed since, or another spec (`--spec`): the point's values are written whether
    /// or not the matrix still has them. A matrix path the point does not name takes the
    /// value `recorded` has there (the configuration the trace was found in, when its own
    /// spec can be read), else the matrix's first value; a note says which.
    pub fn config_for_recorded(
        &self,
        recorded_point: &Point,
        recorded: Option<&Config>,
    ) -> Result<(Config, Vec<String>), InputError> {
        let schema = schema::schema();
        for (path, _) in &recorded_point.0 {
            if schema::config_field(&schema, path).is_none() {
                return Err(InputError::file(
                    &self.file,
                    format!("the recorded matrix point names `{path}`, which is not a Config field path"),
                ));
            }
        }
        let recorded = recorded.and_then(|config| toml::Table::try_from(config).ok());
        let mut point = recorded_point.clone();
        let mut notes = Vec::new();
        for entry in &self.matrix {
            if recorded_point.get(&entry.path).is_some() {
                continue;
            }
            let (value, whence) = match recorded.as_ref().and_then(|t| get_path(t, &entry.path)) {
                Some(value) => (value.clone(), "the trace's own spec's value"),
                None => (entry.values[0].clone(), "its first value"),
            };
            notes.push(format!(
                "{}: the recorded point does not name matrix path `{}`; using {whence}, {}",
                self.file,
                entry.path,
                value_text(&value)
            ));
            point.0.push((entry.path.clone(), value));
        }
        Ok((self.config(&point)?, notes))
    }

    /// The config at a point: the spec's Config fields with the point's values written in.
    /// Its first error, if any.
    pub fn config(&self, point: &Point) -> Result<Config, InputError> {
        self.config_all(point).map_err(first)
    }

    /// [`Spec::config`] with every field error: serde stops at the first, so each failing
    /// field is taken out and the rest deserialized again (its default then stands in, and
    /// a "missing" error for a field taken out is not reported). The combination of
    /// values is judged (`Config::validate`) only when every field reads.
    fn config_all(&self, point: &Point) -> Result<Config, Vec<InputError>> {
        let mut table = self.config.clone();
        for (path, value) in &point.0 {
            set_path(&mut table, path, value.clone())
                .map_err(|m| vec![self.field_error(point, &Seg::dotted(path), Part::Value, m)])?;
        }
        let schema = schema::schema();
        let mut errors = Vec::new();
        // Unknown keys first, from the schema, wherever they are: serde would report one
        // and then stop at the field it stands for ("missing field `tp`" after `tpp`).
        let mut removed: Vec<Vec<Seg>> = Vec::new();
        for (segs, known) in unknown_keys(&schema, &schema, &table, &[]) {
            let Some(Seg::Key(name)) = segs.last() else {
                continue;
            };
            let message = format!(
                "unknown field `{name}`, expected {}",
                known
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let error = self.field_error(point, &segs, Part::Key, message);
            errors.push(suggest(error, name, known.iter().map(String::as_str)));
            if let Some((_, parent)) = segs.split_last() {
                removed.push(parent.to_vec());
            }
            remove_field(&mut table, &schema, &segs);
        }
        let config = loop {
            match serde_path_to_error::deserialize::<_, Config>(toml::Value::Table(table.clone())) {
                Ok(config) => break Some(config),
                Err(e) => {
                    let message = e.inner().message();
                    let (field, at, part) = serde_failure(e.path(), message);
                    // A field missing beside a typo is the typo's; a field taken out is
                    // already reported.
                    let missing = message.starts_with("missing field `");
                    let parent = &field[..field.len().saturating_sub(1)];
                    if removed
                        .iter()
                        .any(|r| field.starts_with(r) && (missing || r.len() == field.len()))
                        || (missing && removed.iter().any(|r| r.as_slice() == parent))
                    {
                        break None;
                    }
                    let dotted = field_path(&field);
                    let plain = plain_message(message, field_schema(&schema, &dotted));
                    let error = self.field_error(point, &at, part, plain);
                    errors.push(serde_help(
                        InputError {
                            field: Some(dotted),
                            ..error
                        },
                        message,
                    ));
                    let Some(out) = remove_field(&mut table, &schema, &field) else {
                        break None;
                    };
                    removed.push(out);
                }
            }
        };
        let (Some(config), true) = (config, errors.is_empty()) else {
            return Err(errors);
        };
        config.validate().map_err(|e| {
            vec![self.field_error(point, &Seg::dotted(&e.field), Part::Value, e.message)]
        })?;
        Ok(config)
    }

    /// An error about a Config field: at the matrix value when the matrix set it.
    fn field_error(
        &self,
        point: &Point,
        segs: &[Seg],
        part: Part,
        message: impl Into<String>,
    ) -> InputError {
        let field = Some(field_path(segs));
        let dotted = field_path(segs);
        for entry in &self.matrix {
            let covers = dotted == entry.path || dotted.starts_with(&format!("{}.", entry.path));
            let index = point
                .get(&entry.path)
                .and_then(|v| entry.values.iter().position(|x| x == v));
            if let (true, Some(i)) = (covers, index) {
                let mut at = entry.segs.clone();
                at.push(Seg::Index(i));
                let span = self.source.locate(&at, Part::Value);
                let message = format!("{} (from [matrix] \"{}\")", message.into(), entry.path);
                return self.source.error_at(span, field, message);
            }
        }
        // An error about a whole table (a topology's world size) that matrix values inside
        // it made: at the first of them, naming each.
        let inside: Vec<(&MatrixEntry, usize)> = self
            .matrix
            .iter()
            .filter(|e| e.path.starts_with(&format!("{dotted}.")))
            .filter_map(|e| {
                let value = point.get(&e.path)?;
                Some((e, e.values.iter().position(|x| x == value)?))
            })
            .collect();
        if let Some(&(first, i)) = inside.first() {
            let mut at = first.segs.clone();
            at.push(Seg::Index(i));
            let span = self.source.locate(&at, Part::Value);
            let values: Vec<String> = inside
                .iter()
                .map(|(e, i)| format!("\"{}\" = {}", e.path, value_text(&e.values[*i])))
                .collect();
            let message = format!("{} (from [matrix] {})", message.into(), values.join(", "));
            return self.source.error_at(span, field, message);
        }
        self.source
            .error_at(self.source.locate(segs, part), field, message)
    }

    /// The expectation at a point: the first matching `[[expect.when]]`, else `[expect]`.
    pub fn expectation(&self, point: &Point) -> (Expectation, usize) {
        for when in &self.expect.when {
            if when.selectors.iter().all(|s| s.selects(point)) {
                return (when.expectation.clone(), when.line);
            }
        }
        (self.expect.default.clone(), self.expect.line)
    }
}

fn default_name(file: &str) -> String {
    Path::new(file)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| file.to_string())
}

fn values_text(values: &[toml::Value]) -> String {
    values.iter().map(value_text).collect::<Vec<_>>().join(", ")
}

/// A top-level key must be a spec key or a Config field: catches `[expected]` before the
/// missing `[expect]` would hide it. Every unknown key, with its error.
fn check_top_level_keys(source: &Source, table: &toml::Table) -> Vec<(String, InputError)> {
    let schema = schema::schema();
    let mut unknown = Vec::new();
    for key in table.keys() {
        if !schema::RESERVED.contains(&key.as_str()) && schema::config_field(&schema, key).is_none()
        {
            let fields: Vec<&String> = schema["properties"]
                .as_object()
                .map(|p| p.keys().collect())
                .unwrap_or_default();
            let fields: Vec<&str> = fields.iter().map(|f| f.as_str()).collect();
            let error = source.error(
                &[Seg::Key(key.clone())],
                Part::Key,
                format!(
                    "unknown field `{key}`, expected one of {}",
                    fields
                        .iter()
                        .map(|f| format!("`{f}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
            unknown.push((key.clone(), suggest(error, key, fields)));
        }
    }
    unknown
}

fn check_version(source: &Source, version: Option<toml::Value>) -> Result<(), InputError> {
    let at = [key("version")];
    match version {
        None => Err(source.error_at(
            None,
            Some("version".into()),
            format!("missing: start the spec with `version = {FORMAT_VERSION}`"),
        )),
        Some(toml::Value::Integer(FORMAT_VERSION)) => Ok(()),
        Some(toml::Value::Integer(v)) => Err(source.error(
            &at,
            Part::Value,
            format!(
                "spec format version {v} is not supported by kvcc {} (it reads version {FORMAT_VERSION})",
                crate::VERSION
            ),
        )),
        Some(_) => Err(source.error(&at, Part::Value, "must be an integer (`version = 1`)")),
    }
}

/// Deserializes a reserved table, naming the failing field and its position.
fn deserialize<T: DeserializeOwned>(
    source: &Source,
    prefix: &[Seg],
    value: toml::Value,
) -> Result<T, InputError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let (field, at, part) = serde_failure(e.path(), e.inner().message());
        let join = |segs: Vec<Seg>| prefix.iter().cloned().chain(segs).collect::<Vec<_>>();
        let schema = schema::schema();
        let plain = plain_message(
            e.inner().message(),
            field_schema(&schema, &field_path(&join(field.clone()))),
        );
        let error = source.error(&join(at), part, plain);
        serde_help(
            InputError {
                field: Some(field_path(&join(field))),
                ..error
            },
            e.inner().message(),
        )
    })
}

/// Every key of `table` (at `at`) the schema `node` does not know, with the keys it
/// knows there, in document order of the tables (toml's maps are sorted).
fn unknown_keys(
    root: &serde_json::Value,
    node: &serde_json::Value,
    table: &toml::Table,
    at: &[Seg],
) -> Vec<(Vec<Seg>, Vec<String>)> {
    let Some(properties) = schema::resolve(root, node)
        .get("properties")
        .and_then(serde_json::Value::as_object)
    else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for (name, value) in table {
        if at.is_empty() && schema::RESERVED.contains(&name.as_str()) {
            continue;
        }
        let mut segs = at.to_vec();
        segs.push(key(name));
        match (properties.get(name), value) {
            (None, _) => found.push((segs, properties.keys().cloned().collect())),
            (Some(field), toml::Value::Table(inner)) => {
                found.extend(unknown_keys(root, field, inner, &segs));
            }
            _ => {}
        }
    }
    found
}

/// The first of a file's errors, for callers that stop at one.
fn first(errors: Vec<InputError>) -> InputError {
    errors
        .into_iter()
        .next()
        .unwrap_or_else(|| InputError::usage("an input error that says nothing (a kvcc bug)"))
}

/// The schema of the field at a dotted path, reserved tables (`limits`) included.
fn field_schema<'a>(root: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    let mut node = root;
    for segment in path.split('.') {
        node = schema::resolve(root, node)
            .get("properties")?
            .get(segment)?;
    }
    Some(schema::resolve(root, node))
}

/// Takes a failing field out of `table`: the whole value of the first Config field on
/// its path that is a leaf in the schema (`expected-count`, not `expected-count.fixed`),
/// else the path itself (an unknown field). The path taken out, or None when nothing was
/// there (a missing field: taking nothing out cannot get past it).
fn remove_field(
    table: &mut toml::Table,
    schema: &serde_json::Value,
    field: &[Seg],
) -> Option<Vec<Seg>> {
    let keys: Vec<&str> = field
        .iter()
        .map_while(|s| match s {
            Seg::Key(k) => Some(k.as_str()),
            Seg::Index(_) => None,
        })
        .collect();
    let leaf = (1..=keys.len())
        .find(|&n| {
            field_schema(schema, &keys[..n].join("."))
                .is_some_and(|node| node.get("properties").is_none())
        })
        .unwrap_or(keys.len());
    let (last, parents) = keys[..leaf].split_last()?;
    let stand_in = field_schema(schema, &keys[..leaf].join(".")).and_then(stand_in);
    let mut at = table;
    for parent in parents {
        at = at.get_mut(*parent)?.as_table_mut()?;
    }
    at.remove(*last)?;
    // A required field taken out would only be reported missing; a valid value in its
    // place lets the fields after it be read.
    if let Some(value) = stand_in {
        at.insert(last.to_string(), value);
    }
    Some(keys[..leaf].iter().map(|k| key(k)).collect())
}

/// A valid value for a field, from its schema: its default, its minimum, its first choice.
fn stand_in(node: &serde_json::Value) -> Option<toml::Value> {
    let from_json = |v: &serde_json::Value| match v {
        serde_json::Value::Bool(b) => Some(toml::Value::Boolean(*b)),
        serde_json::Value::Number(n) => n.as_i64().map(toml::Value::Integer),
        serde_json::Value::String(s) => Some(toml::Value::String(s.clone())),
        _ => None,
    };
    node.get("default")
        .and_then(from_json)
        .or_else(|| node.get("minimum").and_then(from_json))
        .or_else(|| schema::choices(node).first().and_then(from_json))
}

/// serde's message in the words of the spec's values, not Rust's types: `invalid value:
/// integer `-1`, expected u16` becomes `got -1, expected a whole number from 1 to 16`
/// (the schema's bounds where it has them, else the type's).
fn plain_message(message: &str, schema: Option<&serde_json::Value>) -> String {
    let message = message.trim();
    let Some(rest) = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
    else {
        return message.to_string();
    };
    let Some((got, expected)) = rest.rsplit_once(", expected ") else {
        return message.to_string();
    };
    let unquote = |s: &str| s.trim_matches('`').to_string();
    let got = if let Some(n) = got.strip_prefix("integer ") {
        unquote(n)
    } else if let Some(n) = got.strip_prefix("floating point ") {
        format!("{}, a number with a fraction", unquote(n))
    } else if let Some(b) = got.strip_prefix("boolean ") {
        unquote(b)
    } else if let Some(text) = got.strip_prefix("string ") {
        format!("the text {text}")
    } else {
        match got {
            "sequence" => "a list".to_string(),
            "map" => "a table".to_string(),
            _ => "a value of another kind".to_string(),
        }
    };
    let bounds = |min: i128, max: i128| {
        let min = schema
            .and_then(|s| s.get("minimum"))
            .and_then(serde_json::Value::as_i64)
            .map_or(min, i128::from);
        let max = schema
            .and_then(|s| s.get("maximum"))
            .and_then(serde_json::Value::as_i64)
            .map_or(max, i128::from);
        if max >= i128::from(u32::MAX) {
            format!("a whole number, {min} or more")
        } else {
            format!("a whole number from {min} to {max}")
        }
    };
    let choices = schema
        .map(schema::choices)
        .filter(|values| !values.is_empty())
        .map(|values| {
            let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
            format!("one of {}", values.join(", "))
        });
    let expected = match expected {
        "u8" => bounds(0, u8::MAX.into()),
        "u16" => bounds(0, u16::MAX.into()),
        "u32" => bounds(0, u32::MAX.into()),
        "u64" | "usize" => bounds(0, u64::MAX.into()),
        "a nonzero u64" => bounds(1, u64::MAX.into()),
        "i64" => bounds(i64::MIN.into(), i64::MAX.into()),
        "a boolean" => "true or false".to_string(),
        "a string" => "text in quotes".to_string(),
        "a sequence" => "a list `[...]`".to_string(),
        "string only" | "string or map" => choices.unwrap_or_else(|| "text in quotes".into()),
        other => choices.unwrap_or_else(|| other.to_string()),
    };
    format!("got {got}, expected {expected}")
}

/// serde names what it expected (`unknown field `pcq`, expected one of `tp`, `pp`, ...`,
/// and the same for an unknown variant): the closest of those is the help line.
fn serde_help(error: InputError, message: &str) -> InputError {
    let unknown = ["unknown field `", "unknown variant `"]
        .iter()
        .find_map(|prefix| message.strip_prefix(prefix))
        .and_then(|rest| rest.split('`').next());
    let Some(word) = unknown else {
        return error;
    };
    let expected: Vec<&str> = message
        .split_once("expected")
        .map(|(_, list)| list.split('`').skip(1).step_by(2).collect())
        .unwrap_or_default();
    suggest(error, word, expected)
}

/// From a serde error: the field path, where to point, and whether at the key or value.
/// serde reports an unknown or missing field at its table; the field's name is in the
/// message.
fn serde_failure(path: &serde_path_to_error::Path, message: &str) -> (Vec<Seg>, Vec<Seg>, Part) {
    let mut segs = Vec::new();
    for seg in path {
        match seg {
            serde_path_to_error::Segment::Map { key } => segs.push(Seg::Key(key.clone())),
            serde_path_to_error::Segment::Seq { index } => segs.push(Seg::Index(*index)),
            serde_path_to_error::Segment::Enum { variant } => segs.push(Seg::Key(variant.clone())),
            serde_path_to_error::Segment::Unknown => break,
        }
    }
    let quoted = |prefix: &str| {
        message
            .strip_prefix(prefix)
            .and_then(|rest| rest.split('`').next())
            .map(str::to_string)
    };
    if let Some(name) = quoted("unknown field `") {
        if segs.last() != Some(&Seg::Key(name.clone())) {
            segs.push(Seg::Key(name));
        }
        return (segs.clone(), segs, Part::Key);
    }
    if let Some(name) = quoted("missing field `") {
        let mut field = segs.clone();
        field.push(Seg::Key(name));
        return (field, segs, Part::Key);
    }
    (segs.clone(), segs, Part::Value)
}

/// The value at a dotted Config path of `table`, if it has one.
fn get_path<'a>(table: &'a toml::Table, path: &str) -> Option<&'a toml::Value> {
    let mut segments = path.split('.');
    let mut value = table.get(segments.next()?)?;
    for seg in segments {
        value = value.as_table()?.get(seg)?;
    }
    Some(value)
}

/// Writes `value` at a dotted path, creating tables on the way.
fn set_path(table: &mut toml::Table, path: &str, value: toml::Value) -> Result<(), String> {
    let mut segments = path.split('.').peekable();
    let mut table = table;
    while let Some(seg) = segments.next() {
        if segments.peek().is_none() {
            table.insert(seg.to_string(), value);
            return Ok(());
        }
        let entry = table
            .entry(seg.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = match entry {
            toml::Value::Table(t) => t,
            _ => return Err(format!("`{seg}` is not a table, so `{path}` cannot be set")),
        };
    }
    Ok(())
}

/// Flattens `[matrix]` (quoted dotted keys or nested tables) into entries, in file order.
fn matrix_entries(source: &Source, matrix: toml::Value) -> Result<Vec<MatrixEntry>, InputError> {
    let schema = schema::schema();
    let mut entries = Vec::new();
    let root = [key("matrix")];
    let toml::Value::Table(table) = matrix else {
        return Err(source.error(
            &root,
            Part::Value,
            "must be a table of `\"field.path\" = [values]`",
        ));
    };
    let is_field = |path: &str| schema::config_field(&schema, path).is_some();
    dotted_leaves(&root, table, is_field, |path, segs, v| {
        if !is_field(&path) {
            let error = source.error(
                &segs,
                Part::Key,
                format!("`{path}` is not a Config field path (see `kvcc schema`)"),
            );
            let paths = schema::config_paths(&schema);
            return Err(suggest(error, &path, paths.iter().map(String::as_str)));
        }
        match v {
            toml::Value::Array(values) if values.is_empty() => {
                Err(source.error(&segs, Part::Value, "an empty list gives no matrix point"))
            }
            toml::Value::Array(values) => {
                // A value twice would check its points twice, and `kvcc merge` could not
                // tell the two checks apart.
                if let Some(twice) = values
                    .iter()
                    .enumerate()
                    .find(|(i, v)| values[..*i].contains(v))
                    .map(|(_, v)| v)
                {
                    return Err(source.error(
                        &segs,
                        Part::Value,
                        format!("{} is in the list twice", value_text(twice)),
                    ));
                }
                entries.push(MatrixEntry { path, values, segs });
                Ok(())
            }
            _ => Err(source.error(
                &segs,
                Part::Value,
                format!("a matrix entry is a list of values: `\"{path}\" = [...]`"),
            )),
        }
    })?;
    entries.sort_by_key(|e| {
        source
            .locate(&e.segs, Part::Key)
            .map(|s: Range<usize>| s.start)
    });
    for (i, a) in entries.iter().enumerate() {
        for b in &entries[i + 1..] {
            let (short, long) = if a.path.len() <= b.path.len() {
                (a, b)
            } else {
                (b, a)
            };
            if long.path == short.path || long.path.starts_with(&format!("{}.", short.path)) {
                return Err(source.error(
                    &long.segs,
                    Part::Key,
                    format!("overlaps the matrix entry `{}`", short.path),
                ));
            }
        }
    }
    // Counted before any point is built: a matrix of millions would take minutes and
    // gigabytes to expand and validate before its first check, or its first error.
    let points = entries
        .iter()
        .fold(1u128, |n, e| n.saturating_mul(e.values.len() as u128));
    if points > POINTS_MAX as u128 {
        return Err(source.error(
            &root,
            Part::Key,
            format!(
                "expands to {points} points, more than the {POINTS_MAX} kvcc checks in one spec: \
                 split it, or narrow it with fewer values"
            ),
        ));
    }
    Ok(entries)
}

/// The most matrix points one spec may expand to. The shipped specs have at most a few
/// dozen; ten thousand checks of even the smallest model take minutes.
pub const POINTS_MAX: usize = 10_000;

/// The violated-property lists of an expectation: `violates` (exactly these),
/// `violates-all` (at least these) or `violates-any` (at least one of these).
struct Violates {
    exactly: Option<Vec<String>>,
    all: Option<Vec<String>>,
    any: Option<Vec<String>>,
}

fn expectation(
    source: &Source,
    at: &[Seg],
    verdict: VerdictToml,
    violates: Violates,
) -> Result<Expectation, InputError> {
    let given: Vec<(&str, Vec<String>)> = [
        ("violates", violates.exactly),
        ("violates-all", violates.all),
        ("violates-any", violates.any),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k, v)))
    .collect();
    let key_at = |k: &str| {
        let mut segs = at.to_vec();
        segs.push(key(k));
        segs
    };
    match (verdict, given.as_slice()) {
        (VerdictToml::Holds, []) => Ok(Expectation::Holds),
        (VerdictToml::Holds, [(k, _), ..]) => Err(source.error(
            &key_at(k),
            Part::Key,
            "only a \"violated\" verdict names violated properties",
        )),
        (VerdictToml::Violated, []) => Err(source.error(
            at,
            Part::Key,
            "verdict \"violated\" needs `violates = [...]` (exactly these properties), \
             `violates-all` (at least these) or `violates-any` (at least one of these)",
        )),
        (VerdictToml::Violated, [_, (k, _), ..]) => Err(source.error(
            &key_at(k),
            Part::Key,
            "give one of `violates`, `violates-all` and `violates-any`",
        )),
        (VerdictToml::Violated, [(k, names)]) => {
            let violates_at = key_at(k);
            if names.is_empty() {
                return Err(source.error(&violates_at, Part::Value, "names no property"));
            }
            for (i, name) in names.iter().enumerate() {
                if !PROPERTIES.contains(&name.as_str()) {
                    let mut item = violates_at.clone();
                    item.push(Seg::Index(i));
                    let error = source.error(
                        &item,
                        Part::Value,
                        format!(
                            "unknown property `{name}` (known: {})",
                            PROPERTIES.join(", ")
                        ),
                    );
                    return Err(suggest(error, name, PROPERTIES));
                }
            }
            let ordered = PROPERTIES
                .iter()
                .filter(|p| names.iter().any(|n| n == *p))
                .map(|p| p.to_string())
                .collect();
            Ok(match *k {
                "violates-all" => Expectation::ViolatedAll(ordered),
                "violates-any" => Expectation::ViolatedAny(ordered),
                _ => Expectation::Violated(ordered),
            })
        }
    }
}

fn expectations(
    source: &Source,
    matrix: &[MatrixEntry],
    value: toml::Value,
) -> Result<Expect, InputError> {
    let root = [key("expect")];
    let parsed: ExpectToml = deserialize(source, &root, value)?;
    let default = expectation(
        source,
        &root,
        parsed.verdict,
        Violates {
            exactly: parsed.violates,
            all: parsed.violates_all,
            any: parsed.violates_any,
        },
    )?;
    let mut when = Vec::new();
    for (i, w) in parsed.when.into_iter().enumerate() {
        let at = vec![key("expect"), key("when"), Seg::Index(i)];
        let expectation = expectation(
            source,
            &at,
            w.verdict,
            Violates {
                exactly: w.violates,
                all: w.violates_all,
                any: w.violates_any,
            },
        )?;
        let mut match_at = at.clone();
        match_at.push(key("match"));
        let selectors = when_selectors(source, matrix, &match_at, w.matches)?;
        when.push(When {
            selectors,
            expectation,
            line: source.position(&at, Part::Key).0,
        });
    }
    Ok(Expect {
        default,
        past_violations: parsed.past_violations,
        line: source.position(&root, Part::Key).0,
        when,
    })
}

/// Walks a table of field paths written as quoted dotted keys or nested tables, and hands
/// each leaf to `visit` with its joined path and its segments below `at`. A nested table
/// whose path `is_leaf` is a leaf too; any other table is descended into.
fn dotted_leaves(
    at: &[Seg],
    table: toml::Table,
    is_leaf: impl Fn(&str) -> bool,
    mut visit: impl FnMut(String, Vec<Seg>, toml::Value) -> Result<(), InputError>,
) -> Result<(), InputError> {
    let mut stack: Vec<(Vec<String>, toml::Table)> = vec![(Vec::new(), table)];
    while let Some((prefix, table)) = stack.pop() {
        for (k, v) in table {
            let mut keys = prefix.clone();
            keys.push(k);
            let path = keys.join(".");
            match v {
                toml::Value::Table(t) if !is_leaf(&path) => stack.push((keys, t)),
                v => {
                    let segs = at
                        .iter()
                        .cloned()
                        .chain(keys.iter().map(|k| key(k)))
                        .collect();
                    visit(path, segs, v)?;
                }
            }
        }
    }
    Ok(())
}

/// `match = { "prefill.pcp" = 1 }`: matrix paths (quoted or nested) to matrix values.
fn when_selectors(
    source: &Source,
    matrix: &[MatrixEntry],
    at: &[Seg],
    table: toml::Table,
) -> Result<Vec<Selector>, InputError> {
    if table.is_empty() {
        return Err(source.error(
            at,
            Part::Value,
            "matches nothing: name matrix paths and values",
        ));
    }
    let mut selectors = Vec::new();
    let entry = |path: &str| matrix.iter().find(|e| e.path == path);
    dotted_leaves(
        at,
        table,
        |path| entry(path).is_some(),
        |path, segs, v| {
            let Some(entry) = entry(&path) else {
                let error = source.error(
                    &segs,
                    Part::Key,
                    format!("`{path}` is not a path of this spec's [matrix]"),
                );
                return Err(suggest(
                    error,
                    &path,
                    matrix.iter().map(|e| e.path.as_str()),
                ));
            };
            if !entry.values.contains(&v) {
                return Err(source.error(
                    &segs,
                    Part::Value,
                    format!(
                        "never matches: {} is not a value of the matrix ({})",
                        value_text(&v),
                        values_text(&entry.values)
                    ),
                ));
            }
            selectors.push(Selector { path, value: v });
            Ok(())
        },
    )?;
    Ok(selectors)
}

/// The directory of the shipped specs, `kvcc check`'s default path.
pub const SPECS_DIR: &str = "specs";

/// The benchmark set's directory inside [`SPECS_DIR`]: its specs take minutes, so walking
/// a directory named `specs` skips it; `kvcc-bench` runs it, as does naming it.
pub const BENCH_DIR: &str = "bench";

/// The spec files under `paths`: files as given, directories searched recursively for
/// `*.toml`, each directory's files sorted. A directory named `specs` (the default path,
/// however written) is walked without its `bench/` subdirectory.
pub fn discover(paths: &[String]) -> Result<Vec<String>, InputError> {
    let mut files = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| not_found(path, e))?;
        if meta.is_dir() {
            let before = files.len();
            let root = Path::new(path);
            let skip = (root.file_name() == Some(SPECS_DIR.as_ref())).then_some(BENCH_DIR);
            walk(root, skip, &mut files)
                .map_err(|e| InputError::file(path, format!("cannot read directory: {e}")))?;
            if files.len() == before {
                return Err(InputError::file(
                    path,
                    "no spec files (*.toml) in this directory",
                ));
            }
        } else {
            files.push(path.clone());
        }
    }
    // `kvcc check specs specs/x.toml` checks x once.
    let mut seen = std::collections::BTreeSet::new();
    files.retain(|f| seen.insert(std::fs::canonicalize(f).unwrap_or_else(|_| f.into())));
    Ok(files)
}

/// A path that cannot be read: where kvcc looked, and for the default `specs`, that
/// `kvcc check` with no PATH expects to run from a kvcc checkout's root.
fn not_found(path: &str, e: std::io::Error) -> InputError {
    let looked = std::env::current_dir()
        .map(|cwd| cwd.join(path).display().to_string())
        .unwrap_or_else(|_| path.to_string());
    let error = InputError::file(path, format!("cannot read {looked}: {e}"));
    if path == SPECS_DIR && e.kind() == std::io::ErrorKind::NotFound {
        return error.with_help(
            "with no PATH, kvcc check reads the specs/ directory of a kvcc checkout: run it \
             from the checkout's root, or name spec files or directories (kvcc check my-spec.toml)",
        );
    }
    error
}

/// `skip` names a subdirectory of `dir` itself (not of its subdirectories) to leave out.
fn walk(dir: &Path, skip: Option<&str>, files: &mut Vec<String>) -> std::io::Result<()> {
    let mut entries: Vec<std::path::PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for entry in entries {
        // A link inside a walked directory could lead anywhere (or back up, forever):
        // only what the user named is read, so links are named explicitly or not at all.
        if entry.is_symlink() {
            return Err(std::io::Error::other(format!(
                "{} is a symbolic link; kvcc does not follow links inside a directory (name the file itself)",
                entry.display()
            )));
        }
        if entry.is_dir() {
            if skip.is_some_and(|skip| entry.file_name() == Some(skip.as_ref())) {
                continue;
            }
            walk(&entry, None, files)?;
        } else if entry.extension().is_some_and(|e| e == "toml") {
            files.push(entry.display().to_string());
        }
    }
    Ok(())
}

/// The candidate closest to `word` by edit distance, if close enough to be a likely typo
/// (within a third of its length, as cargo judges `did you mean`).
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (strsim::levenshtein(word, c), c))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, c)| c)
}

/// `did you mean `x`?` for the closest candidate, if any.
fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    closest(word, candidates).map(|c| format!("did you mean `{c}`?"))
}

/// Adds the help line of [`did_you_mean`] to an error, when there is a close candidate.
fn suggest<'a>(
    error: InputError,
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> InputError {
    match did_you_mean(word, candidates) {
        Some(help) => error.with_help(help),
        None => error,
    }
}
