//! The JSON Schema (draft 2020-12) of the spec format, for editors (`kvcc schema`).
//!
//! Hand-written from `kvcc_model::config` so that its descriptions speak vLLM. It cannot
//! rot silently: `tests/schema.rs` asks serde itself (through "unknown field" and
//! "unknown variant" errors) for every field and variant of `Config` and compares them
//! with this document. kvcc also uses it to tell a Config field path from a typo in
//! `[matrix]`.

use serde_json::Value;

/// The schema text, as `kvcc schema` prints it.
pub const SCHEMA: &str = include_str!("schema.json");

/// Top-level spec keys that are not `Config` fields.
pub const RESERVED: [&str; 6] = [
    "version",
    "name",
    "description",
    "matrix",
    "expect",
    "limits",
];

/// The schema as JSON.
pub fn schema() -> Value {
    serde_json::from_str(SCHEMA).expect("schema.json is valid JSON (checked by tests)")
}

/// Follows a local `$ref` (`#/$defs/NAME`) to its definition.
pub fn resolve<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let name = reference.trim_start_matches("#/$defs/");
            resolve(root, &root["$defs"][name])
        }
        None => node,
    }
}

/// The schema of the Config field at a dotted path (`prefill.pcp`), or None when the path
/// names no Config field.
pub fn config_field<'a>(root: &'a Value, path: &str) -> Option<&'a Value> {
    let mut node = root;
    for (i, segment) in path.split('.').enumerate() {
        if i == 0 && RESERVED.contains(&segment) {
            return None;
        }
        node = resolve(root, node).get("properties")?.get(segment)?;
    }
    Some(node)
}

/// Every Config field path (`prefill.pcp`, `faults.client-abort`, ...), in schema order:
/// the candidates for a misspelt matrix path.
pub fn config_paths(root: &Value) -> Vec<String> {
    fn walk(root: &Value, node: &Value, prefix: &str, out: &mut Vec<String>) {
        let Some(properties) = resolve(root, node)
            .get("properties")
            .and_then(Value::as_object)
        else {
            return;
        };
        for (name, field) in properties {
            let path = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            out.push(path.clone());
            walk(root, field, &path, out);
        }
    }
    let mut out = Vec::new();
    walk(root, root, "", &mut out);
    out.retain(|p| config_field(root, p).is_some());
    out
}
