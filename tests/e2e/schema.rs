//! `kvcc schema` cannot rot: serde itself lists every field and variant of
//! `kvcc_model::Config` (through its "unknown field" and "unknown variant" errors), and
//! the hand-written schema must name exactly those.

use kvcc::spec::schema::{config_field, resolve, schema, RESERVED};
use kvcc_model::properties::PROPERTIES;
use kvcc_model::Config;
use serde_json::Value;
use std::collections::BTreeSet;

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

/// Every string a schema node admits as an enum value, and the keys of its object
/// alternatives (externally tagged variants such as `{ fixed = 2 }`).
fn schema_variants(root: &Value, node: &Value) -> BTreeSet<String> {
    let node = resolve(root, node);
    let mut names = BTreeSet::new();
    if let Some(values) = node.get("enum").and_then(Value::as_array) {
        names.extend(values.iter().filter_map(Value::as_str).map(str::to_string));
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        names.extend(properties.keys().cloned());
    }
    for alternative in node
        .get("oneOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
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
            let flags = field_node["oneOf"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|alternative| alternative["type"] == "boolean");
            for flag in [true, false] {
                let error = serde_error(&segs, toml::Value::Boolean(flag));
                assert_eq!(error.is_empty(), flags, "`{}` = {flag}", path.join("."));
            }
            *checked += 1;
        } else if field_node.get("properties").is_some() {
            compare(root, field_node, path, checked);
        } else {
            assert!(
                field_node.get("enum").is_none() && field_node.get("oneOf").is_none(),
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
