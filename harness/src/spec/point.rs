//! Matrix points: one assignment of values to the matrix's Config field paths, and the
//! `--point key=value` selectors that pick points on the command line.

use std::fmt;
use std::str::FromStr;

/// One matrix point, in matrix (file) order. Empty for a spec without a matrix.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Point(pub Vec<(String, toml::Value)>);

impl Point {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, path: &str) -> Option<&toml::Value> {
        self.0.iter().find(|(p, _)| p == path).map(|(_, v)| v)
    }

    /// `prefill.pcp=2,prefill.tp=1` (empty for no matrix).
    pub fn label(&self) -> String {
        self.0
            .iter()
            .map(|(p, v)| format!("{p}={}", value_text(v)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The label with only file-name-safe characters, shortened (with a hash of the
    /// whole label, so names stay distinct) when a long matrix would exceed what file
    /// systems allow.
    pub fn file_label(&self) -> String {
        const LABEL_MAX: usize = 120;
        let label = sanitize(&self.label());
        if label.len() <= LABEL_MAX {
            return label;
        }
        // FNV-1a: stable across runs and platforms, unlike std's hasher.
        let hash = label.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("{}~{:08x}", &label[..LABEL_MAX - 9], hash as u32)
    }

    /// The `--point` arguments that select this point.
    pub fn args(&self) -> Vec<String> {
        self.0
            .iter()
            .flat_map(|(p, v)| ["--point".to_string(), format!("{p}={}", value_text(v))])
            .collect()
    }

    /// `{"prefill.pcp": 2}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Object(
            self.0
                .iter()
                .map(|(p, v)| (p.clone(), toml_to_json(v)))
                .collect(),
        )
    }

    /// The inverse of [`Point::to_json`].
    pub fn from_json(value: &serde_json::Value) -> Result<Point, String> {
        let object = value
            .as_object()
            .ok_or("a matrix point must be a JSON object")?;
        let mut point = Vec::new();
        for (path, v) in object {
            point.push((
                path.clone(),
                json_to_toml(v).map_err(|e| format!("{path}: {e}"))?,
            ));
        }
        Ok(Point(point))
    }
}

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// A value as written after `key=`: strings bare, everything else as TOML.
pub fn value_text(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Parses a value given after `key=`: TOML when it parses as one value, else a string.
pub fn parse_value(text: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {text}"))
        .ok()
        .filter(|t| t.len() == 1)
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(text.to_string()))
}

/// Keeps `[A-Za-z0-9._=,-]`, replaces the rest with `_`.
pub fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._=,-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

pub fn toml_to_json(value: &toml::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        toml::Value::String(s) => J::String(s.clone()),
        toml::Value::Integer(i) => J::from(*i),
        toml::Value::Float(f) => J::from(*f),
        toml::Value::Boolean(b) => J::Bool(*b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(a) => J::Array(a.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => J::Object(
            t.iter()
                .map(|(k, v)| (k.clone(), toml_to_json(v)))
                .collect(),
        ),
    }
}

pub fn json_to_toml(value: &serde_json::Value) -> Result<toml::Value, String> {
    use serde_json::Value as J;
    Ok(match value {
        J::Null => return Err("null is not a TOML value".into()),
        J::Bool(b) => toml::Value::Boolean(*b),
        J::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => toml::Value::String(s.clone()),
        J::Array(a) => toml::Value::Array(a.iter().map(json_to_toml).collect::<Result<_, _>>()?),
        J::Object(o) => {
            let mut table = toml::Table::new();
            for (k, v) in o {
                table.insert(k.clone(), json_to_toml(v)?);
            }
            toml::Value::Table(table)
        }
    })
}

/// `--point key=value`: keeps the matrix points whose `key` has `value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Selector {
    pub path: String,
    pub value: toml::Value,
}

impl FromStr for Selector {
    type Err = String;

    fn from_str(text: &str) -> Result<Selector, String> {
        let (path, value) = text
            .split_once('=')
            .ok_or_else(|| format!("`{text}` is not KEY=VALUE (e.g. prefill.pcp=2)"))?;
        let path = path.trim();
        if path.is_empty() {
            return Err(format!("`{text}` has no key before `=`"));
        }
        Ok(Selector {
            path: path.to_string(),
            value: parse_value(value.trim()),
        })
    }
}

impl Selector {
    pub fn selects(&self, point: &Point) -> bool {
        point.get(&self.path) == Some(&self.value)
    }
}
