//! A spec's text with the spans of its keys and values, so that an error found after
//! deserializing (a `Config::validate` failure, a serde error on a value the matrix
//! set) can still point at `FILE:LINE:COLUMN`.

use kvcc_model::InputError;
use std::ops::Range;
use toml_edit::{ImDocument, Item, Table, TableLike, Value};

/// One step of a path into a TOML document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

impl Seg {
    /// Segments of a dotted path (`prefill.pcp`).
    pub fn dotted(path: &str) -> Vec<Seg> {
        path.split('.').map(|k| Seg::Key(k.to_string())).collect()
    }
}

/// Renders segments as a field path: `expect.when[0].verdict`.
pub fn field_path(segs: &[Seg]) -> String {
    let mut out = String::new();
    for seg in segs {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                // A quoted matrix key (`"prefill.pcp"`) stays one segment.
                if k.contains(['.', ' ']) {
                    out.push_str(&format!("\"{k}\""));
                } else {
                    out.push_str(k);
                }
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Whether an error is about a key (unknown field) or its value (wrong type, bad value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Key,
    Value,
}

pub struct Source {
    /// The path as given on the command line.
    pub file: String,
    doc: ImDocument<String>,
}

/// A node of the document while walking a path.
#[derive(Clone, Copy)]
enum Node<'a> {
    Table(&'a Table),
    Item(&'a Item),
    Value(&'a Value),
}

impl<'a> Node<'a> {
    fn table_like(self) -> Option<&'a dyn TableLike> {
        match self {
            Node::Table(t) => Some(t),
            Node::Item(i) => i.as_table_like(),
            Node::Value(v) => v.as_inline_table().map(|t| t as &dyn TableLike),
        }
    }

    fn index(self, i: usize) -> Option<Node<'a>> {
        match self {
            Node::Item(Item::ArrayOfTables(a)) => a.get(i).map(Node::Table),
            Node::Item(Item::Value(Value::Array(a))) | Node::Value(Value::Array(a)) => {
                a.get(i).map(Node::Value)
            }
            _ => None,
        }
    }

    fn span(self) -> Option<Range<usize>> {
        match self {
            Node::Table(t) => t.span(),
            Node::Item(i) => i.span(),
            Node::Value(v) => v.span(),
        }
    }
}

impl Source {
    /// Parses `text`; a syntax error names its line and column.
    pub fn parse(file: &str, text: String) -> Result<Source, InputError> {
        match ImDocument::parse(text.clone()) {
            Ok(doc) => Ok(Source {
                file: file.to_string(),
                doc,
            }),
            Err(e) => Err(syntax_error(file, &text, e.span(), e.message())),
        }
    }

    pub fn text(&self) -> &str {
        self.doc.raw()
    }

    /// 1-based line and column of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        line_col(self.text(), offset)
    }

    /// The span of the key or value at `segs`, or of the nearest enclosing key or table
    /// that exists (a missing field points at its table).
    pub fn locate(&self, segs: &[Seg], part: Part) -> Option<Range<usize>> {
        let mut node = Node::Table(self.doc.as_table());
        let mut best = None;
        for (i, seg) in segs.iter().enumerate() {
            let last = i + 1 == segs.len();
            let next = match seg {
                Seg::Key(k) => {
                    node.table_like()
                        .and_then(|t| t.get_key_value(k))
                        .map(|(key, item)| {
                            let item = Node::Item(item);
                            let span = match (last, part) {
                                (true, Part::Value) => item.span().or_else(|| key.span()),
                                _ => key.span().or_else(|| item.span()),
                            };
                            (item, span)
                        })
                }
                Seg::Index(idx) => node.index(*idx).map(|n| (n, n.span())),
            };
            let Some((n, span)) = next else { break };
            node = n;
            best = span.or(best);
        }
        best
    }

    /// 1-based (line, column) of `segs`, 1:1 when nothing of it exists in the file.
    pub fn position(&self, segs: &[Seg], part: Part) -> (usize, usize) {
        self.locate(segs, part)
            .map(|s| self.line_col(s.start))
            .unwrap_or((1, 1))
    }

    /// An error at a span (or at 1:1 when there is none).
    pub fn error_at(
        &self,
        span: Option<Range<usize>>,
        field: Option<String>,
        message: impl Into<String>,
    ) -> InputError {
        error_in(&self.file, self.text(), span, field, message.into())
    }

    /// An error about the field at `segs`.
    pub fn error(&self, segs: &[Seg], part: Part, message: impl Into<String>) -> InputError {
        let field = (!segs.is_empty()).then(|| field_path(segs));
        self.error_at(self.locate(segs, part), field, message)
    }

    /// The document, for walking tables in file order.
    pub fn table(&self) -> &Table {
        self.doc.as_table()
    }
}

/// An error at a span of `file`'s `text` (or at 1:1 when there is none).
fn error_in(
    file: &str,
    text: &str,
    span: Option<Range<usize>>,
    field: Option<String>,
    message: String,
) -> InputError {
    InputError {
        file: Some(file.to_string()),
        at: Some(span.clone().map_or((1, 1), |s| line_col(text, s.start))),
        field,
        message,
        len: span.map_or(0, |s| underline_len(text, s)),
        help: None,
    }
}

/// A TOML parser's error as kvcc reports it, from either parser: at its span, naming
/// the field it is in where the line says which ([`field_at`]).
pub fn syntax_error(
    file: &str,
    text: &str,
    span: Option<Range<usize>>,
    message: &str,
) -> InputError {
    let field = span.clone().and_then(|s| field_at(text, s.start));
    let message = syntax_message(text, span.clone(), message);
    error_in(file, text, span, field, message)
}

/// The characters of `span` on its first line: what a report underlines.
fn underline_len(text: &str, span: Range<usize>) -> usize {
    text.get(span)
        .map_or(0, |s| s.lines().next().unwrap_or("").chars().count())
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The field whose value holds byte `offset` of a document that does not parse: the key
/// of a `key = value` line whose value holds it, under the nearest table header above.
/// None wherever that is not certain — the offset in a key, a header or a comment, under
/// an array-of-tables header (whose element the line cannot tell), or under a line that
/// opens with `[` and is no header (inside a multi-line value) — since naming the wrong
/// field is worse than naming none.
fn field_at(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset)?;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let (key, value) = before[line_start..].split_once('=')?;
    let key = match dotted_key(key)? {
        (key, "") => key,
        _ => return None,
    };
    if in_comment(value) {
        return None;
    }
    let header = match before[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
    {
        None => Vec::new(),
        Some(l) if l.starts_with("[[") => return None,
        Some(l) => match dotted_key(&l[1..])? {
            (names, rest) if rest.starts_with(']') => names,
            _ => return None,
        },
    };
    let segs: Vec<Seg> = header.into_iter().chain(key).map(Seg::Key).collect();
    Some(field_path(&segs))
}

/// Does `value`, the start of a value up to some offset, end inside a comment?
fn in_comment(value: &str) -> bool {
    let mut quote = None;
    for c in value.chars() {
        match (quote, c) {
            (None, '#') => return true,
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
    }
    false
}

/// The parts of the TOML dotted key (`a.b`, `"a.b".c`) `text` starts with, and what
/// follows it; None if it starts with none.
fn dotted_key(text: &str) -> Option<(Vec<String>, &str)> {
    let mut parts = Vec::new();
    let mut rest = text.trim();
    loop {
        let part;
        (part, rest) = match rest.chars().next()? {
            quote @ ('"' | '\'') => {
                let end = rest[1..].find(quote)? + 1;
                (&rest[1..end], &rest[end + 1..])
            }
            _ => {
                let bare = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
                let end = rest.find(|c| !bare(c)).unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            }
        };
        if part.is_empty() {
            return None;
        }
        parts.push(part.to_string());
        rest = rest.trim_start();
        match rest.strip_prefix('.') {
            Some(after) => rest = after.trim_start(),
            None => return Some((parts, rest)),
        }
    }
}

/// `invalid TOML: ...` for a parser's message, which is sometimes empty (a control
/// character in a comment): then the offending character is named instead.
fn syntax_message(text: &str, span: Option<Range<usize>>, message: &str) -> String {
    let message = one_line(message);
    if !message.is_empty() {
        return format!("invalid TOML: {message}");
    }
    match span
        .and_then(|s| text.get(s.start..))
        .and_then(|t| t.chars().next())
    {
        Some(c) if c.is_control() => format!(
            "invalid TOML: control character U+{:04X} is not allowed here",
            u32::from(c)
        ),
        Some(c) => format!("invalid TOML: unexpected `{c}`"),
        None => "invalid TOML: unexpected end of file".to_string(),
    }
}

/// A multi-line parser message on one line.
pub fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}
