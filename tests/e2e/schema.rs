//! `kvcc schema` says what kvcc reads and writes. The JSON-lines schema: every line any
//! test's `kvcc check` or `kvcc merge --format json` writes validates against it
//! (`common::output` asks [`assert_json_lines`]), and lines with a field broken do not.
//! The spec schema: serde itself lists every field and variant of
//! `kvcc_model::Config` (through its "unknown field" and "unknown variant" errors), and
//! the schema generated from the types must name exactly those (a custom spelling such
//! as an engine fault's is where the two could part); every shipped spec validates
//! against it, and a spec with a wrong-typed field does not.

use kvcc::spec::schema::{config_field, resolve, schema, RESERVED};
use kvcc_model::properties::PROPERTIES;
use kvcc_model::Config;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// A valid Config, as a spec would write it.
const BASE: &str = r#"
requests = 1
expected-count = "world-size"
[prefill]
tp = 1
[decode]
tp = 1
"#;

/// The names serde lists after "expected" in an error message.
fn expected_names(message: &str) -> BTreeSet<String> {
    let rest = message.split_once("expected").map_or("", |(_, r)| r);
    rest.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The serde error of BASE with `value` written at `path` (a dotted Config path; empty
/// for the top level, where `value` must be a table merged in).
fn serde_error(path: &[&str], value: toml::Value) -> String {
    let mut table: toml::Table = toml::from_str(BASE).unwrap();
    let mut at = &mut table;
    for seg in &path[..path.len().saturating_sub(1)] {
        at = at
            .entry(seg.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .unwrap();
    }
    match path.last() {
        Some(last) => {
            at.insert(last.to_string(), value);
        }
        None => at.extend(value.as_table().unwrap().clone()),
    }
    match toml::Value::Table(table).try_into::<Config>() {
        Ok(_) => String::new(),
        Err(e) => e.message().to_string(),
    }
}

fn bogus_table() -> toml::Value {
    toml::Value::Table(toml::toml! { zz-bogus = 1 })
}

/// A node's alternatives (`oneOf` or `anyOf`).
fn alternatives(node: &Value) -> impl Iterator<Item = &Value> {
    ["oneOf", "anyOf"]
        .into_iter()
        .filter_map(|key| node.get(key).and_then(Value::as_array))
        .flatten()
}

/// Every string a schema node admits as an enum value, and the keys of its object
/// alternatives (externally tagged variants such as `{ fixed = 2 }`).
fn schema_variants(root: &Value, node: &Value) -> BTreeSet<String> {
    let node = resolve(root, node);
    let mut names = BTreeSet::new();
    for value in [node.get("enum"), node.get("const")].into_iter().flatten() {
        let values = value
            .as_array()
            .cloned()
            .unwrap_or_else(|| vec![value.clone()]);
        names.extend(values.iter().filter_map(Value::as_str).map(str::to_string));
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        names.extend(properties.keys().cloned());
    }
    for alternative in alternatives(node) {
        names.extend(schema_variants(root, alternative));
    }
    names
}

/// Walks the schema's Config part: at every object, serde must list exactly its
/// properties; at every property, an enum in serde must be the same enum in the schema.
fn compare(root: &Value, node: &Value, path: &mut Vec<String>, checked: &mut usize) {
    let node = resolve(root, node);
    let properties = node["properties"].as_object().expect("an object schema");
    let schema_fields: BTreeSet<String> = properties
        .keys()
        .filter(|k| !(path.is_empty() && RESERVED.contains(&k.as_str())))
        .cloned()
        .collect();
    let segs: Vec<&str> = path.iter().map(String::as_str).collect();
    let message = if path.is_empty() {
        serde_error(&[], bogus_table())
    } else {
        serde_error(&segs, bogus_table())
    };
    assert!(
        message.starts_with("unknown field `zz-bogus`"),
        "{}: {message}",
        path.join(".")
    );
    assert_eq!(
        expected_names(&message),
        schema_fields,
        "fields of `{}`",
        path.join(".")
    );
    for field in &schema_fields {
        path.push(field.clone());
        let segs: Vec<&str> = path.iter().map(String::as_str).collect();
        let field_node = resolve(root, &properties[field]);
        let as_enum = serde_error(&segs, toml::Value::String("zz-bogus".into()));
        if as_enum.starts_with("unknown variant `zz-bogus`") {
            assert_eq!(
                expected_names(&as_enum),
                schema_variants(root, field_node),
                "variants of `{}`",
                path.join(".")
            );
            *checked += 1;
        } else if as_enum.contains("untagged enum") {
            // Several spellings (a flag or a name): serde cannot list them, so every name
            // and flag the schema offers must load, and nothing else does (the bogus name
            // above failed).
            for name in schema_variants(root, field_node) {
                let error = serde_error(&segs, toml::Value::String(name.clone()));
                assert_eq!(error, "", "`{}` = {name:?}", path.join("."));
            }
            let flags =
                alternatives(field_node).any(|alternative| alternative["type"] == "boolean");
            for flag in [true, false] {
                let error = serde_error(&segs, toml::Value::Boolean(flag));
                assert_eq!(error.is_empty(), flags, "`{}` = {flag}", path.join("."));
            }
            *checked += 1;
        } else if field_node.get("properties").is_some() {
            compare(root, field_node, path, checked);
        } else {
            assert!(
                field_node.get("enum").is_none() && alternatives(field_node).next().is_none(),
                "`{}` is an enum in the schema but not in Config",
                path.join(".")
            );
        }
        *checked += 1;
        path.pop();
    }
}

#[test]
fn schema_names_exactly_the_fields_and_variants_of_config() {
    let root = schema();
    let mut checked = 0;
    compare(&root, &root, &mut Vec::new(), &mut checked);
    assert!(checked > 30, "walked only {checked} fields");
}

#[test]
fn schema_properties_are_the_model_properties() {
    let root = schema();
    let listed: Vec<&str> = root["$defs"]["property"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(listed, PROPERTIES);
}

#[test]
fn schema_knows_config_paths_and_not_spec_keys() {
    let root = schema();
    assert!(config_field(&root, "prefill.pcp").is_some());
    assert!(config_field(&root, "faults.client-abort").is_some());
    assert!(config_field(&root, "prefill.pcq").is_none());
    assert!(config_field(&root, "expect").is_none());
    for key in RESERVED {
        assert!(root["properties"].get(key).is_some(), "{key}");
    }
}

#[test]
fn kvcc_schema_prints_the_draft_2020_12_schema() {
    let (code, stdout, _) = crate::common::run(&["schema"]);
    assert_eq!(code, 0);
    let printed: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(
        printed["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(printed, schema());
}

/// A broken twin: what it breaks, and how.
type Break = (&'static str, fn(&mut Value));

/// Every shipped spec, as JSON, with its path.
fn shipped_specs() -> Vec<(String, Value)> {
    let mut files = Vec::new();
    let mut dirs = vec![crate::common::root().join("specs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "toml") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let spec: toml::Value = toml::from_str(&text).unwrap();
            (
                path.display().to_string(),
                serde_json::to_value(spec).unwrap(),
            )
        })
        .collect()
}

fn validator() -> jsonschema::Validator {
    jsonschema::validator_for(&schema()).expect("the spec schema is a valid JSON Schema")
}

#[test]
fn every_shipped_spec_validates_against_the_schema() {
    let validator = validator();
    let specs = shipped_specs();
    assert!(specs.len() > 30, "found only {} specs", specs.len());
    for (path, spec) in &specs {
        let errors: Vec<String> = validator.iter_errors(spec).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{path}: {errors:?}");
    }
}

/// The broken twins: a shipped spec with one field of the wrong type, an unknown key, a
/// value out of range or off its list, or a violated verdict without its properties, each
/// fails validation.
#[test]
fn a_spec_with_a_wrong_field_fails_the_schema() {
    let validator = validator();
    let (path, spec) = shipped_specs().remove(0);
    assert!(validator.is_valid(&spec), "{path}");
    let breaks: [Break; 6] = [
        ("requests as text", |s| s["requests"] = "two".into()),
        ("prefill.tp as a flag", |s| s["prefill"]["tp"] = true.into()),
        ("a misspelt key", |s| s["requets"] = 1.into()),
        ("prefill.tp past the cap", |s| {
            s["prefill"]["tp"] = 17.into()
        }),
        ("an unknown policy", |s| s["policy"] = "eager".into()),
        ("violated with no properties", |s| {
            s["expect"] = serde_json::json!({ "verdict": "violated" })
        }),
    ];
    for (what, break_it) in breaks {
        let mut twin = spec.clone();
        break_it(&mut twin);
        assert!(!validator.is_valid(&twin), "{what} passed in {path}");
    }
}

/// A Config field without a default (requests, expected-count, prefill, decode) must be
/// in the spec or named by a matrix key, as kvcc requires ("missing field"); the schema
/// says so for each, and accepts each when the matrix supplies it.
#[test]
fn a_spec_without_a_required_field_fails_the_schema_unless_its_matrix_has_it() {
    let validator = validator();
    let (path, spec) = shipped_specs().remove(0);
    let required = [
        ("requests", "requests", serde_json::json!([1, 2])),
        (
            "expected-count",
            "expected-count",
            serde_json::json!(["world-size"]),
        ),
        ("prefill", "prefill.tp", serde_json::json!([1, 2])),
        ("decode", "decode.tp", serde_json::json!([1])),
    ];
    for (field, matrix_key, values) in required {
        let mut twin = spec.clone();
        twin.as_object_mut().unwrap().remove(field);
        // What kvcc's Config makes of the same keys (the spec's own keys aside).
        let mut config = twin.clone();
        config
            .as_object_mut()
            .unwrap()
            .retain(|key, _| !RESERVED.contains(&key.as_str()));
        let text = toml::to_string(&config).unwrap();
        let kvcc_says = match toml::from_str::<toml::Value>(&text)
            .unwrap()
            .try_into::<Config>()
        {
            Ok(_) => String::new(),
            Err(e) => e.message().to_string(),
        };
        assert!(kvcc_says.contains("missing field"), "{field}: {kvcc_says}");
        assert!(!validator.is_valid(&twin), "{path} without {field} passed");
        let matrix = twin
            .as_object_mut()
            .unwrap()
            .entry("matrix")
            .or_insert_with(|| serde_json::json!({}));
        matrix[matrix_key] = values;
        let errors: Vec<String> = validator
            .iter_errors(&twin)
            .map(|e| e.to_string())
            .collect();
        assert!(
            errors.is_empty(),
            "{path}, {field} from the matrix: {errors:?}"
        );
    }
}

/// The JSON-lines schema's validator, built once for the whole suite.
fn lines_validator() -> &'static jsonschema::Validator {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        jsonschema::validator_for(&kvcc::report::json::schema())
            .expect("the JSON-lines schema is a valid JSON Schema")
    })
}

/// Every non-empty line of `stdout` is JSON that validates against the JSON-lines schema;
/// how many there were.
pub fn assert_json_lines(stdout: &str) -> usize {
    let mut count = 0;
    for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
        let value: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let errors: Vec<String> = lines_validator()
            .iter_errors(&value)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{errors:?}\n{line}");
        count += 1;
    }
    count
}

#[test]
fn kvcc_schema_json_lines_prints_the_generated_schema() {
    let (code, stdout, _) = crate::common::run(&["schema", "json-lines"]);
    assert_eq!(code, 0);
    let printed: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(printed, kvcc::report::json::schema());
    assert_eq!(
        printed["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
}

/// The lines of a run over every shipped spec, of a sharded run merged, of an incomplete
/// violated check and of an input error all validate (asserted here, and again by the
/// hook in `common::output`).
#[test]
fn json_lines_of_every_kind_validate() {
    let (_, whole, _) = crate::common::run(&["check", "--format", "json"]);
    let checks = assert_json_lines(&whole);
    assert!(checks > 30, "{checks} lines for the shipped specs");
    let dir = tempfile::tempdir().unwrap();
    let mut shards = Vec::new();
    for shard in ["1/2", "2/2"] {
        let (_, lines, _) = crate::common::run(&[
            "check",
            "specs/pr59325-regression.toml",
            "--shard",
            shard,
            "--format",
            "json",
        ]);
        let file = dir.path().join(shard.replace('/', "-"));
        std::fs::write(&file, &lines).unwrap();
        shards.push(file.display().to_string());
    }
    let mut merge = vec!["merge", "--format", "json"];
    merge.extend(shards.iter().map(String::as_str));
    let (code, merged, stderr) = crate::common::run(&merge);
    assert!(code == 0 || code == 1, "{stderr}");
    assert!(assert_json_lines(&merged) > 0);
    let cut_spec = crate::common::root().join("tests/fixtures/issue28-cut-after-violation.toml");
    let (_, cut, _) =
        crate::common::run(&["check", cut_spec.to_str().unwrap(), "--format", "json"]);
    assert!(cut.contains("\"incomplete_reason\":\"state limit"), "{cut}");
    assert_json_lines(&cut);
    let typo = dir.path().join("typo.toml");
    std::fs::write(
        &typo,
        "version = 1\nrequets = 1\n[expect]\nverdict = \"holds\"\n",
    )
    .unwrap();
    let (code, error, _) =
        crate::common::run(&["check", typo.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 2);
    assert!(error.contains("\"error\""), "{error}");
    assert_json_lines(&error);
}

/// The broken twins: a real check line and a real error line, each with one field
/// broken, fail the schema.
#[test]
fn json_lines_with_a_broken_field_fail_the_schema() {
    let (_, lines, _) =
        crate::common::run(&["check", "specs/pr59325-regression.toml", "--format", "json"]);
    let line: Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert!(lines_validator().is_valid(&line));
    let breaks: [Break; 7] = [
        ("a verdict off the list", |l| l["verdict"] = "maybe".into()),
        ("matches as text", |l| l["matches"] = "yes".into()),
        ("no run", |l| {
            l.as_object_mut().unwrap().remove("run");
        }),
        ("another format version", |l| l["format_version"] = 2.into()),
        (
            "an unknown clause",
            |l| {
                l["violations"] =
                    serde_json::json!([{"property": "exactly-once", "clause": "zz", "depth": 1}])
            },
        ),
        ("a violated expectation without properties", |l| {
            l["expected"] = serde_json::json!({"verdict": "violated"})
        }),
        ("a negative state count", |l| {
            l["unique_states"] = (-1).into()
        }),
    ];
    for (what, break_it) in breaks {
        let mut twin = line.clone();
        break_it(&mut twin);
        assert!(!lines_validator().is_valid(&twin), "{what} passed");
    }
    let error = serde_json::json!({"format_version": 3, "kvcc_version": "0.1.0",
        "error": {"file": null, "line": null, "column": null, "field": null, "message": "m", "help": null}});
    assert!(lines_validator().is_valid(&error));
    let mut twin = error.clone();
    twin["error"].as_object_mut().unwrap().remove("message");
    assert!(
        !lines_validator().is_valid(&twin),
        "an error without its message passed"
    );
}
