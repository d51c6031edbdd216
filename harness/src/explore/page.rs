//! kvcc's explorer page, rendered on the server: the spec and its point; the clauses by
//! kind, each violated one linking to the counterexample `kvcc check` prints for it; the
//! current path as numbered steps and as the trace's sequence diagram; the state at its
//! end as the trace's facts, what the last step changed marked; and the ways on. Every
//! word of a step is the trace's own ([`crate::trace::Step`], [`markdown::sequence`]).
//! Its stylesheet and script are compiled in: the page fetches nothing else.

use super::path::{self, Walk};
use super::verdict::{Found, Verdict};
use super::{sequence, Site};
use crate::trace::markdown;
use kvcc_model::properties::{Kind, CLAUSES};
use std::fmt::Write;

const CSS: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");

/// An answer to one request: status, content type, body.
pub struct Answer {
    pub status: &'static str,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Answer {
    fn ok(content_type: &'static str, body: impl Into<Vec<u8>>) -> Answer {
        Answer {
            status: "200 OK",
            content_type,
            body: body.into(),
        }
    }
}

const HTML: &str = "text/html; charset=utf-8";

/// The page's answer to `GET path`; None for what the page does not serve (stateright's
/// endpoints, which the gate forwards).
pub fn answer(site: &Site, path: &str) -> Option<Answer> {
    let indices = match path {
        "/" => Some(site.start.indices.clone()),
        "/kvcc.css" => return Some(Answer::ok("text/css; charset=utf-8", CSS)),
        "/kvcc.js" => return Some(Answer::ok("text/javascript; charset=utf-8", SCRIPT)),
        "/.kvcc/verdict" => return Some(Answer::ok("application/json", verdict_json(site))),
        _ => path.strip_prefix("/at").and_then(path::parse),
    };
    let indices = match indices {
        Some(indices) => indices,
        None if path.starts_with("/at") => {
            return Some(not_found(&format!("not a path: {path}")));
        }
        None => return None,
    };
    Some(match path::walk(&site.model, &indices) {
        Ok(walk) => Answer::ok(HTML, render(site, &walk)),
        Err(why) => not_found(&why),
    })
}

fn not_found(why: &str) -> Answer {
    Answer {
        status: "404 Not Found",
        content_type: HTML,
        body: format!(
            "<!DOCTYPE html><html><head><title>kvcc explore</title><link rel=\"stylesheet\" href=\"/kvcc.css\"></head><body><p class=\"error\">{}</p><p><a href=\"/\">back to the start</a></p></body></html>",
            escape(why)
        )
        .into_bytes(),
    }
}

/// `&`, `<`, `>` and quotes as HTML entities.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out += "&amp;",
            '<' => out += "&lt;",
            '>' => out += "&gt;",
            '"' => out += "&quot;",
            '\'' => out += "&#39;",
            c => out.push(c),
        }
    }
    out
}

/// The whole page at the end of `walk`.
fn render(site: &Site, walk: &Walk) -> String {
    let verdict = site.verdict.lock().unwrap_or_else(|e| e.into_inner());
    let verdict = verdict.as_ref();
    let concluded = verdict.and_then(|v| v.as_ref().ok());
    let state = match verdict {
        None => "checking",
        Some(Ok(_)) => "done",
        Some(Err(_)) => "failed",
    };
    let title = escape(&site.title());
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>kvcc explore: {title}</title><link rel=\"stylesheet\" href=\"/kvcc.css\"><script src=\"/kvcc.js\" defer></script></head>\n<body data-verdict=\"{state}\">\n"
    );
    header(&mut out, site);
    out.push_str("<main>\n<div class=\"column\">\n");
    steps(&mut out, site, walk, concluded);
    clauses(&mut out, site, verdict, walk);
    out.push_str("</div>\n<div class=\"column\">\n");
    facts(&mut out, walk);
    next(&mut out, site, walk);
    diagram(&mut out, site, walk, concluded);
    out.push_str("</div>\n</main>\n");
    out.push_str("</body></html>\n");
    out
}

fn header(out: &mut String, site: &Site) {
    let _ = write!(
        out,
        "<header><h1>kvcc explore: <span id=\"spec\">{}</span></h1>\n<p class=\"about\"><span id=\"spec-file\">{}</span>",
        escape(&site.spec_name),
        escape(&site.spec_file)
    );
    if let Some(description) = &site.description {
        let _ = write!(out, " — {}", escape(description));
    }
    out.push_str("</p>\n<p>matrix point: <span id=\"point\">");
    if site.point.is_empty() {
        out.push_str("none (the spec has no matrix)");
    } else {
        out.push_str(&escape(&site.point.to_string()));
    }
    out.push_str("</span></p></header>\n");
}

/// Every clause, by kind, with what the search concluded about it.
fn clauses(out: &mut String, site: &Site, verdict: Option<&Result<Verdict, String>>, walk: &Walk) {
    out.push_str("<section id=\"clauses\"><h2>Clauses</h2>\n<p id=\"verdict\">");
    match verdict {
        None => out.push_str("kvcc check: checking… (this page reloads when it is done)"),
        Some(Err(why)) => {
            let _ = write!(out, "<span class=\"error\">{}</span>", escape(why));
        }
        Some(Ok(v)) => {
            let names: Vec<String> = v.found.iter().map(|f| f.trace.clause_name()).collect();
            let said = match (&v.cut, names.is_empty()) {
                (None, true) => "holds".to_string(),
                (None, false) => format!("violated ({})", names.join(", ")),
                (Some(cut), true) => format!("inconclusive ({cut})"),
                (Some(cut), false) => format!("violated ({}); cut: {cut}", names.join(", ")),
            };
            let _ = write!(
                out,
                "kvcc check: {} — {} states",
                escape(&said),
                v.unique_states
            );
        }
    }
    out.push_str("</p>\n");
    let broken: Vec<usize> = (0..CLAUSES.len())
        .filter(|&c| {
            CLAUSES[c].kind == Kind::Safety && !(CLAUSES[c].holds)(&site.model.config, &walk.last)
        })
        .collect();
    for (kind, id, heading) in [
        (
            Kind::Safety,
            "safety",
            "Safety — must hold in every reachable state",
        ),
        (
            Kind::Liveness,
            "liveness",
            "Liveness — must hold wherever a run may end (no step fairness forces is left)",
        ),
    ] {
        let _ = writeln!(out, "<section id=\"{id}\"><h3>{heading}</h3><ul>");
        for (c, clause) in CLAUSES.iter().enumerate().filter(|(_, c)| c.kind == kind) {
            let name = format!("{}: {}", clause.property, clause.clause);
            let (status, words) = status(verdict, c);
            let _ = write!(
                out,
                "<li class=\"clause {status}\" data-clause=\"{}\" data-status=\"{status}\" title=\"{}\"><span class=\"name\">{}</span> {words}",
                escape(&name),
                escape(clause.meaning),
                escape(&name),
            );
            if broken.contains(&c) {
                out.push_str(" <span class=\"broken-here\">broken in this state</span>");
            }
            out.push_str("</li>\n");
        }
        out.push_str("</ul></section>\n");
    }
    out.push_str("</section>\n");
}

/// A clause's status word and what the page says of it.
fn status(verdict: Option<&Result<Verdict, String>>, clause: usize) -> (&'static str, String) {
    let Some(Ok(v)) = verdict else {
        return ("checking", "<span class=\"status\">…</span>".into());
    };
    if let Some(found) = v.found.iter().find(|f| f.clause == clause) {
        return (
            "violated",
            format!(
                "<a class=\"counterexample\" href=\"{}\">violated: kvcc's counterexample, {}</a>",
                path::href(&found.indices),
                escape(&found.trace.cost.to_string())
            ),
        );
    }
    // A run ends where a safety clause breaks (unless the spec explores past it): only
    // then may a clause lie unseen beyond it.
    let safety_broke = v
        .found
        .iter()
        .any(|f| CLAUSES[f.clause].kind == Kind::Safety);
    match (&v.cut, !safety_broke) {
        (Some(_), _) => (
            "undecided",
            "<span class=\"status\">not found violated before the search was cut</span>".into(),
        ),
        (None, true) => ("holds", "<span class=\"status\">holds</span>".into()),
        (None, false) => (
            "not-violated",
            "<span class=\"status\">not violated before the runs that broke a safety clause ended</span>".into(),
        ),
    }
}

/// The counterexample whose path this is, if any.
fn counterexample<'a>(verdict: Option<&'a Verdict>, walk: &Walk) -> Option<&'a Found> {
    verdict?.found.iter().find(|f| f.indices == walk.indices)
}

/// The path: what it is, then its steps, each a link to the page at that step.
fn steps(out: &mut String, site: &Site, walk: &Walk, verdict: Option<&Verdict>) {
    out.push_str("<section id=\"path\"><h2>Path</h2>\n");
    if let Some(found) = counterexample(verdict, walk) {
        let trace = &found.trace;
        let _ = writeln!(
            out,
            "<p id=\"path-is\" class=\"violated\">kvcc's counterexample to <b>{}</b> ({}): {}. {}; {}.</p>",
            escape(&trace.clause_name()),
            format!("{:?}", trace.kind).to_lowercase(),
            escape(&trace.meaning),
            escape(&trace.cost_line()),
            escape(trace.ending()),
        );
    }
    if let Some(file) = &site.start.trace_file {
        if walk.indices == site.start.indices {
            let _ = writeln!(
                out,
                "<p id=\"opened-from\">opened at the path of the trace <code>{}</code></p>",
                escape(file)
            );
        }
    }
    out.push_str("<ol id=\"steps\">\n");
    let current = walk.steps.len();
    let mark = |n: usize| {
        if n == current {
            " class=\"current\""
        } else {
            ""
        }
    };
    let _ = writeln!(
        out,
        "<li data-step=\"0\"{}><a href=\"{}\"><span class=\"n\">0.</span> <span class=\"description\">initial state</span></a></li>",
        mark(0),
        path::href(&[])
    );
    for (i, step) in walk.steps.iter().enumerate() {
        // The name an ITF trace gives the step (its `action` tag, `mbt::actionTaken`).
        let name = kvcc_model::describe::action_name(&step.action);
        let _ = writeln!(
            out,
            "<li data-step=\"{}\" data-action=\"{}\"{}><a href=\"{}\"><span class=\"n\">{}.</span> <span class=\"description\">{}</span></a></li>",
            i + 1,
            escape(name),
            mark(i + 1),
            path::href(&walk.indices[..=i]),
            i + 1,
            escape(&step.description)
        );
    }
    out.push_str("</ol></section>\n");
}

/// The state at the end of the path: every fact, those the last step changed marked with
/// what they were.
fn facts(out: &mut String, walk: &Walk) {
    let (heading, facts, changes) = match walk.steps.last() {
        None => ("the initial state".to_string(), &walk.initial, &[][..]),
        Some(step) => (
            format!("after step {}", walk.steps.len()),
            &step.facts,
            &step.changes[..],
        ),
    };
    let _ = writeln!(
        out,
        "<section id=\"state\"><h2>State {heading}</h2>\n<p class=\"hint\">{} of {} facts changed by the last step are marked.</p>\n<table id=\"facts\">",
        changes.len(),
        facts.len()
    );
    for (name, value) in facts {
        let was = changes.iter().find(|(n, _, _)| n == name);
        match was {
            Some((_, before, _)) => {
                let _ = writeln!(
                    out,
                    "<tr class=\"changed\" data-fact=\"{}\"><th>{}</th><td>{}<span class=\"was\">was: {}</span></td></tr>",
                    escape(name),
                    escape(name),
                    escape(value),
                    escape(if before.is_empty() { "(absent)" } else { before }),
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "<tr data-fact=\"{}\"><th>{}</th><td>{}</td></tr>",
                    escape(name),
                    escape(name),
                    escape(value)
                );
            }
        }
    }
    out.push_str("</table></section>\n");
}

/// The ways on from the path's end, each a link to the path one step longer.
fn next(out: &mut String, site: &Site, walk: &Walk) {
    let (listed, total) = path::next(&site.model, &walk.last, site.successors_max);
    let _ = writeln!(out, "<section id=\"next\"><h2>Next steps ({total})</h2>");
    if total == 0 {
        out.push_str(
            "<p class=\"hint\">None: a run may end here (or it stopped at a safety violation).</p>",
        );
    }
    out.push_str("<ol>\n");
    let mut indices = walk.indices.clone();
    for step in &listed {
        indices.push(step.index);
        let _ = writeln!(
            out,
            "<li><a href=\"{}\">{}</a></li>",
            path::href(&indices),
            escape(&step.description)
        );
        indices.pop();
    }
    out.push_str("</ol>\n");
    if total > listed.len() {
        let _ = writeln!(
            out,
            "<p class=\"hint\">… {} more not listed: the explorer lists a state's first {} (kvcc explore --successors-max N lists more)</p>",
            total - listed.len(),
            site.successors_max
        );
    }
    out.push_str("</section>\n");
}

/// The path as the trace's sequence diagram: a counterexample's own (`NAME.md`'s), or the
/// same drawing of any other path, and its Mermaid text to copy.
fn diagram(out: &mut String, site: &Site, walk: &Walk, verdict: Option<&Verdict>) {
    let mermaid = match counterexample(verdict, walk) {
        Some(found) => markdown::diagram(&found.trace),
        None => markdown::sequence(
            (
                site.model.topology.prefill_world,
                site.model.topology.decode_world,
            ),
            &walk.steps,
            None,
            None,
        ),
    };
    let _ = writeln!(
        out,
        "<section id=\"diagram\"><h2>Sequence diagram</h2>\n<div class=\"scroll\">{}</div>\n<details><summary>Mermaid text (as in the trace's .md)</summary><pre>{}</pre></details></section>",
        sequence::svg(&mermaid, (!walk.steps.is_empty()).then_some(walk.steps.len())),
        escape(&mermaid)
    );
}

/// The verdict for the page's script and for tests: `{"state": "checking"}`, or the
/// violated clauses and their paths.
fn verdict_json(site: &Site) -> String {
    let verdict = site.verdict.lock().unwrap_or_else(|e| e.into_inner());
    let json = match verdict.as_ref() {
        None => serde_json::json!({ "state": "checking" }),
        Some(Err(why)) => serde_json::json!({ "state": "failed", "error": why }),
        Some(Ok(v)) => serde_json::json!({
            "state": "done",
            "cut": v.cut,
            "unique_states": v.unique_states,
            "violated": v.found.iter().map(|f| serde_json::json!({
                "clause": f.trace.clause_name(),
                "href": path::href(&f.indices),
                "steps": f.trace.steps.len(),
            })).collect::<Vec<_>>(),
        }),
    };
    json.to_string()
}
