//! Issue 14: the repository's own structure, checked. Every `§N` the code, specs and docs
//! cite resolves to a section of docs/contracts.md, which lists every clause of the
//! registry; and no module of a crate imports a module that (transitively) imports it.

use crate::common::root;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every file under `dir` with one of `extensions`, skipping build output.
fn files(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                files(&path, extensions, out);
            }
        } else if path
            .extension()
            .is_some_and(|e| extensions.contains(&e.to_string_lossy().as_ref()))
        {
            out.push(path);
        }
    }
}

/// The section numbers cited in `text`: `§3`, lists `§2, §6` and ranges `§3–§5`.
fn cited(text: &str) -> BTreeSet<u32> {
    let mut sections = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find('§') {
        rest = &rest[at + '§'.len_utf8()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(first) = digits.parse::<u32>() else {
            continue;
        };
        let after = &rest[digits.len()..];
        let last = after
            .strip_prefix("–§")
            .map(|r| {
                r.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
            .and_then(|d| d.parse::<u32>().ok())
            .unwrap_or(first);
        sections.extend(first..=last);
    }
    sections
}

/// The `## §N.` headings of docs/contracts.md.
fn headings(doc: &str) -> BTreeSet<u32> {
    doc.lines()
        .filter_map(|l| l.strip_prefix("## §"))
        .filter_map(|l| l.split('.').next()?.parse().ok())
        .collect()
}

#[test]
fn issue14_every_cited_contract_section_exists() {
    let doc = std::fs::read_to_string(root().join("docs/contracts.md")).unwrap();
    let sections = headings(&doc);
    let mut sources = Vec::new();
    files(&root(), &["rs", "toml", "md", "sh"], &mut sources);
    let mut citing = 0;
    for file in sources {
        // The contract itself, and this test with its own broken twins.
        if file.ends_with("docs/contracts.md") || file.ends_with("tests/e2e/layout.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            !text.contains("shared/contracts.md"),
            "{} cites the outside reference; cite docs/contracts.md",
            file.display()
        );
        let wanted = cited(&text);
        if !wanted.is_empty() {
            citing += 1;
        }
        for n in wanted {
            assert!(
                sections.contains(&n),
                "{}: §{n} is not in docs/contracts.md",
                file.display()
            );
        }
    }
    assert!(citing >= 15, "only {citing} files cite the contract");
    // The parser's broken twins: a range and a list are read whole, a dangling one is seen.
    assert_eq!(
        cited("(docs/contracts.md §3–§5, §10)"),
        BTreeSet::from([3, 4, 5, 10])
    );
    assert!(!cited("docs/contracts.md §99").is_subset(&sections));
}

#[test]
fn issue14_docs_contracts_lists_every_clause_of_the_registry() {
    let doc = std::fs::read_to_string(root().join("docs/contracts.md")).unwrap();
    for clause in kvcc_model::properties::CLAUSES {
        let kind = format!("{:?}", clause.kind).to_lowercase();
        let row = format!("| `{}` | `{}` | {kind} |", clause.property, clause.clause);
        assert!(doc.contains(&row), "docs/contracts.md lacks {row}");
    }
}

/// The verbs a cell of §11's table may start with (docs/contracts.md §11 defines them).
const RECEIVER_VERBS: [&str; 10] = [
    "drop", "buffer", "count", "report", "free", "wake", "assert", "arm", "renew", "n/a",
];

/// §11's messages x receiver-states table, as written.
#[derive(Clone, Debug)]
struct MessageTable {
    /// The header's receiver-state columns (after `message` and `from → to`).
    states: Vec<String>,
    rows: Vec<MessageRow>,
}

#[derive(Clone, Debug)]
struct MessageRow {
    /// The first cell, backquotes included.
    name: String,
    /// `from → to`.
    route: String,
    cells: Vec<String>,
}

/// The text of `## §N.`, up to the next section.
fn section(doc: &str, n: u32) -> Option<&str> {
    let start = doc.find(&format!("\n## §{n}."))? + 1;
    let end = doc[start..]
        .find("\n## §")
        .map_or(doc.len(), |at| start + at + 1);
    Some(&doc[start..end])
}

fn table_cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

/// The table of §11 headed `| message | from → to | ...`.
fn message_table(doc: &str) -> Option<MessageTable> {
    let text = section(doc, 11)?;
    let mut lines = text
        .lines()
        .skip_while(|l| !l.starts_with("| message | from → to |"));
    let header = table_cells(lines.next()?);
    let rows = lines
        .take_while(|l| l.starts_with('|'))
        .filter(|l| !l.starts_with("|---"))
        .map(|l| {
            let mut cells = table_cells(l).into_iter();
            let name = cells.next().unwrap_or_default();
            let route = cells.next().unwrap_or_default();
            MessageRow {
                name,
                route,
                cells: cells.collect(),
            }
        })
        .collect();
    Some(MessageTable {
        states: header.into_iter().skip(2).collect(),
        rows,
    })
}

/// The header's state columns are `RECEIVER_STATES`, in order.
fn states_problem(table: &MessageTable) -> Option<String> {
    let wanted: Vec<&str> = kvcc_model::message::RECEIVER_STATES.to_vec();
    (table.states != wanted).then(|| format!("columns {:?}, want {wanted:?}", table.states))
}

/// The rows are `MESSAGES`, in order, each routed as the registry routes it and with one
/// cell per state.
fn rows_problem(table: &MessageTable) -> Option<String> {
    let messages = kvcc_model::message::MESSAGES;
    if table.rows.len() != messages.len() {
        return Some(format!(
            "{} rows for {} messages",
            table.rows.len(),
            messages.len()
        ));
    }
    messages.iter().zip(&table.rows).find_map(|(m, row)| {
        let name = format!("`{}`", m.name);
        let route = format!("{} → {}", m.from.name(), m.to.name());
        if row.name != name {
            Some(format!("row {} where {name} belongs", row.name))
        } else if row.route != route {
            Some(format!("{name} routed {:?}, want {route:?}", row.route))
        } else if row.cells.len() != kvcc_model::message::RECEIVER_STATES.len() {
            Some(format!("{name} has {} state cells", row.cells.len()))
        } else {
            None
        }
    })
}

/// Every cell starts with a verb of the vocabulary, in bold, and says how kvcc models it.
fn cells_problem(table: &MessageTable) -> Option<String> {
    table.rows.iter().find_map(|row| {
        row.cells
            .iter()
            .zip(&table.states)
            .find_map(|(cell, state)| {
                let verb = cell
                    .strip_prefix("**")
                    .and_then(|rest| rest.split_once("**"))
                    .map(|(verb, _)| verb);
                if !verb.is_some_and(|v| RECEIVER_VERBS.contains(&v)) {
                    Some(format!("{} / {state}: no verb first in {cell:?}", row.name))
                } else if !cell.contains("kvcc:") {
                    Some(format!("{} / {state}: no `kvcc:` in {cell:?}", row.name))
                } else {
                    None
                }
            })
    })
}

/// Every event the registry names is one of the model's actions (`actions`: their names).
fn events_problem(actions: &[&str]) -> Option<String> {
    let unknown: Vec<String> = kvcc_model::message::MESSAGES
        .iter()
        .flat_map(|m| m.events.iter().map(move |e| (m.name, *e)))
        .filter(|(_, e)| !actions.contains(e))
        .map(|(m, e)| format!("{m}: {e}"))
        .collect();
    (!unknown.is_empty()).then(|| format!("events that are no action of the model: {unknown:?}"))
}

/// §11 lists each message's delivery faults as the registry has them.
fn delivery_problem(doc: &str) -> Option<String> {
    let text = section(doc, 11).unwrap_or_default();
    kvcc_model::message::MESSAGES.iter().find_map(|m| {
        let faults: Vec<&str> = m.delivery.iter().map(|d| d.name()).collect();
        let faults = if faults.is_empty() {
            "none".to_string()
        } else {
            faults.join(", ")
        };
        let line = format!("**`{}`** (delivery: {faults})", m.name);
        (!text.contains(&line)).then(|| format!("§11 lacks {line}"))
    })
}

/// Issue 24, item 1: docs/contracts.md §11 tables every message of the registry
/// (`model/src/message.rs`) in every receiver state, with what vLLM does and how kvcc
/// models it, and the registry's events are the model's actions.
#[test]
fn issue24_docs_contracts_tables_every_message_in_every_receiver_state() {
    let doc = std::fs::read_to_string(root().join("docs/contracts.md")).unwrap();
    let table = message_table(&doc).expect("§11 has a table headed `| message | from → to |`");
    assert_eq!(states_problem(&table), None, "§11's columns");
    assert_eq!(rows_problem(&table), None, "§11's rows");
    assert_eq!(cells_problem(&table), None, "§11's cells");
    assert_eq!(
        events_problem(&kvcc_model::describe::ACTION_NAMES),
        None,
        "MESSAGES' events"
    );
    assert_eq!(delivery_problem(&doc), None, "§11's delivery faults");
    let names: BTreeSet<&str> = kvcc_model::describe::ACTION_NAMES.into_iter().collect();
    assert_eq!(
        names.len(),
        kvcc_model::describe::ACTION_NAMES.len(),
        "an action name written twice"
    );

    // The broken twins: each doctored copy of the table is caught by its own check.
    let mut renamed = table.clone();
    renamed.states[3] = "freed".into();
    assert!(states_problem(&renamed).is_some(), "a renamed column");
    let mut short = table.clone();
    short.rows.remove(4);
    assert!(rows_problem(&short).is_some(), "a row removed");
    let mut swapped = table.clone();
    swapped.rows.swap(0, 1);
    assert!(rows_problem(&swapped).is_some(), "two rows swapped");
    let mut rerouted = table.clone();
    rerouted.rows[0].route = "P worker → D scheduler".into();
    assert!(rows_problem(&rerouted).is_some(), "a row misrouted");
    let mut unmodelled = table.clone();
    unmodelled.rows[2].cells[1] = unmodelled.rows[2].cells[1].replace("kvcc:", "model:");
    assert!(cells_problem(&unmodelled).is_some(), "a cell without kvcc:");
    let mut verbless = table.clone();
    verbless.rows[5].cells[0] = verbless.rows[5].cells[0].replacen("**", "**forward", 1);
    assert!(
        cells_problem(&verbless).is_some(),
        "a verb outside the vocabulary"
    );
    let fewer: Vec<&str> = kvcc_model::describe::ACTION_NAMES
        .into_iter()
        .filter(|a| *a != "NotificationArrives")
        .collect();
    assert!(
        events_problem(&fewer).is_some_and(|p| p.contains("notification: NotificationArrives")),
        "an event that is no action"
    );
    let undelivered = doc.replace("(delivery: late, duplicated, lost)", "(delivery: none)");
    assert!(
        delivery_problem(&undelivered).is_some(),
        "delivery faults left out"
    );
    let from_doc = message_table(&doc.replace("| `heartbeat` |", "| `heartbeats` |")).unwrap();
    assert!(
        rows_problem(&from_doc).is_some(),
        "a row renamed in the text"
    );
}

/// A source file's own code: without its test module and its comments.
fn own_code(source: &str) -> String {
    source
        .split("#[cfg(test)]")
        .next()
        .unwrap_or_default()
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Module -> modules it uses, for the crate whose sources are under `src`.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut sources = Vec::new();
    files(src, &["rs"], &mut sources);
    let module_of = |file: &Path| -> String {
        let rel = file.strip_prefix(src).unwrap().with_extension("");
        let mut parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        if matches!(
            parts.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            parts.pop();
        }
        parts.join("::")
    };
    let modules: BTreeSet<String> = sources.iter().map(|f| module_of(f)).collect();
    let mut graph = BTreeMap::new();
    for file in &sources {
        let from = module_of(file);
        let text = std::fs::read_to_string(file).unwrap();
        // Tests inside a module may use anything, and a doc link is no dependency.
        let code = own_code(&text);
        let mut uses = BTreeSet::new();
        for (i, _) in code.match_indices("crate::") {
            let path: String = code[i + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            // The longest module the path names: `crate::trace::itf::x` is trace::itf.
            let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
            let target = (1..=segments.len())
                .rev()
                .map(|n| segments[..n].join("::"))
                .find(|m| modules.contains(m));
            if let Some(target) = target {
                // A module may use its own submodules, and its parent's items.
                if target != from
                    && !target.starts_with(&format!("{from}::"))
                    && !from.starts_with(&format!("{target}::"))
                {
                    uses.insert(target);
                }
            }
        }
        graph.insert(from, uses);
    }
    graph
}

/// A cycle in `graph`, as the modules along it.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            let mut found = path[start..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn issue14_no_module_imports_its_importer() {
    for krate in ["aggregator", "model", "conform", "harness", "bench"] {
        let graph = module_graph(&root().join(krate).join("src"));
        assert!(
            graph.len() > 1 || krate == "bench" || krate == "aggregator",
            "{krate}: {graph:?}"
        );
        if let Some(found) = cycle(&graph) {
            panic!("{krate}: module cycle {}", found.join(" -> "));
        }
    }
    // The broken twin: a cycle through three modules is found.
    let twin: BTreeMap<String, BTreeSet<String>> = [
        ("error", "report::github"),
        ("report::github", "run"),
        ("run", "error"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), BTreeSet::from([b.to_string()])))
    .collect();
    assert!(cycle(&twin).is_some());
}

/// The clause-name string literals in `source`'s own code (comments and test modules
/// aside).
fn clause_literals(source: &str) -> Vec<&'static str> {
    let code = own_code(source);
    kvcc_model::properties::CLAUSES
        .iter()
        .map(|c| c.clause)
        .filter(|name| code.contains(&format!("\"{name}\"")))
        .collect()
}

/// Issue 14: a clause's name is written once, in the registry
/// (`model/src/properties.rs`); the model, conform and the CLI name clauses through its
/// constants. (The aggregator, below the model, has its own words for what its strict
/// policy refuses.)
#[test]
fn issue14_the_registry_is_the_only_source_of_clause_names() {
    let mut sources = Vec::new();
    for krate in ["model", "conform", "harness", "bench"] {
        files(&root().join(krate).join("src"), &["rs"], &mut sources);
    }
    let mut scanned = 0;
    for file in sources {
        if file.ends_with("model/src/properties.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let found = clause_literals(&text);
        assert!(
            found.is_empty(),
            "{} spells clause names {found:?}: use kvcc_model::properties",
            file.display()
        );
        scanned += 1;
    }
    assert!(scanned > 40, "{scanned} files");
    // The twin: a spelled-out clause name in code is found, one in a comment is not.
    assert_eq!(
        clause_literals("let c = \"emitted-twice\";"),
        vec!["emitted-twice"]
    );
    assert!(clause_literals("// \"emitted-twice\"").is_empty());
}
