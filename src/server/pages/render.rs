//! The HTML of the auditor's pages, from what was gathered: the recent
//! chains, a chain's picture and steps, its tasks, its attestation. No IO:
//! every value from the ledger is escaped here.

use super::{Attestation, ChainPage, ChainRow, TaskView, Verdict};
use crate::context::{self, Outcome, Subtask};
use crate::encode::{path_segment, xml as escape};
use std::fmt::Write as _;

pub(super) const STYLE: &str = r#"
body { font-family: sans-serif; margin: 1.5em; color: #222; }
header { border-bottom: 1px solid #ccc; margin-bottom: 1em; padding-bottom: .4em; }
header a { color: #222; text-decoration: none; font-weight: bold; }
table { border-collapse: collapse; }
td, th { border: 1px solid #ddd; padding: .25em .6em; text-align: left; }
th { background: #f4f4f4; }
.layout { display: flex; gap: 1.5em; align-items: flex-start; }
.picture { flex: 0 1 58%; min-width: 20em; overflow-x: auto; border: 1px solid #ddd; }
.picture svg { max-width: 100%; height: auto; }
.trail { flex: 1 1 42%; min-width: 24em; max-height: 85vh; overflow-y: auto; }
.run-steps { border-left: 4px solid #ddd; padding: .2em .8em; margin: .6em 0; }
.run-steps:target { border-left-color: #1c7ed6; background: #e7f5ff; }
.run-steps ol { font-family: monospace; font-size: 12px; margin: .3em 0; padding-left: 2.2em; }
.ok { color: #2b8a3e; font-weight: bold; }
.bad { color: #b02a37; font-weight: bold; }
pre { background: #f8f8f8; padding: .6em; overflow-x: auto; }
svg a:hover rect { stroke: #1c7ed6; stroke-width: 3; }
"#;

pub(super) fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><style>{STYLE}</style></head>\n\
         <body><header><a href=\"/\">agentledger</a> · {t}</header>\n{body}</body></html>\n",
        t = escape(title)
    )
}

/// What the index's columns mean, and where the checks are.
const INDEX_HELP: &str = "<p class=\"help\">Each row is a chain of runs started by one root run: how many runs it has, the deepest hop it reached (the limit is 8), whether a run's events were withheld (at the limit, or from a run that did not succeed), and when its last record was written. Check the whole ledger at <a href=\"/v1/verify?format=text\">verify</a>; see the logs and the views at <a href=\"/v1/status?format=text\">status</a>.</p>\n";

pub fn render_index(rows: &[ChainRow]) -> String {
    let mut b = String::from("<h1>Recent chains</h1>\n");
    b.push_str(INDEX_HELP);
    if rows.is_empty() {
        b.push_str("<p class=\"empty\">No chain in the log's tail yet.</p>\n");
        return page("recent chains", &b);
    }
    b.push_str("<table class=\"chains\"><tr><th>chain (root run)</th><th>runs</th><th>deepest hop</th><th>withheld</th><th>last record</th></tr>\n");
    for r in rows {
        let _ = writeln!(
            b,
            "<tr class=\"chain-row\"><td><a href=\"/chains/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            path_segment(&r.root),
            escape(&r.root),
            r.runs,
            r.max_hop,
            if r.withheld { "<span class=\"bad\">yes</span>" } else { "no" },
            crate::model::time::rfc3339_ms(r.last_ms)
        );
    }
    b.push_str("</table>\n");
    page("recent chains", &b)
}

pub fn render_chain(c: &ChainPage) -> String {
    let p = &c.picture;
    let mut b = String::new();
    let _ = writeln!(
        b,
        "<h1>Chain of {}</h1>\n<p>{} runs, deepest hop {} of {}; ledger partition {}. Click a run to see its steps.</p>",
        escape(&p.root),
        p.runs.len(),
        p.max_hop(),
        p.hop_limit,
        c.partition
    );
    b.push_str("<div class=\"layout\">\n<section class=\"picture\">\n");
    b.push_str(&crate::picture::svg::render(
        p,
        Some(&|i| format!("#run-{i}")),
    ));
    b.push_str("</section>\n<section class=\"trail\"><h2>Trail</h2>\n");
    for (i, n) in p.runs.iter().enumerate() {
        let _ = writeln!(
            b,
            "<div class=\"run-steps\" id=\"run-{i}\" data-run=\"{}\"><h3>{} v{} — {} (hop {}, {}{})</h3><ol start=\"0\">",
            escape(&n.run),
            escape(&n.agent),
            n.version,
            escape(&n.run),
            n.hop.map_or("?".to_string(), |h| h.to_string()),
            n.status.as_str(),
            if n.untrusted { ", untrusted" } else { "" }
        );
        for line in c.steps.get(i).into_iter().flatten() {
            let _ = writeln!(b, "<li>{}</li>", escape(line));
        }
        b.push_str("</ol></div>\n");
    }
    b.push_str("</section>\n</div>\n");
    if !c.tasks.is_empty() {
        b.push_str("<section class=\"tasks\"><h2>Tasks</h2>\n");
        for (id, t) in &c.tasks {
            render_task(&mut b, id, t);
        }
        b.push_str("</section>\n");
    }
    render_attestation(&mut b, c.partition, &c.attestation);
    page(&format!("chain {}", p.root), &b)
}

pub(super) fn layer1_text(s: &Subtask) -> (&'static str, String) {
    match &s.layer1 {
        None => ("", "not returned".into()),
        Some(l) if l.passed => ("ok", "passed".into()),
        Some(l) => ("bad", format!("failed: {}", l.reasons.join("; "))),
    }
}

pub(super) fn render_task(b: &mut String, id: &str, t: &TaskView) {
    let state = match t {
        TaskView::Unreadable(why) => {
            let _ = writeln!(
                b,
                "<div class=\"task\" data-task=\"{0}\"><h3>task {0}</h3><p class=\"bad\">{1}</p></div>",
                escape(id),
                escape(why)
            );
            return;
        }
        TaskView::Known(s) => s,
    };
    let _ = writeln!(
        b,
        "<div class=\"task\" data-task=\"{}\"><h3>task {} (master run {})</h3>",
        escape(id),
        escape(id),
        escape(&state.master_run)
    );
    b.push_str("<table class=\"subtasks\"><tr><th>subtask</th><th>agent</th><th>mode</th><th>layer one</th><th>layer two</th><th>inline bytes</th><th>by reference</th></tr>\n");
    let mut bars = Vec::new();
    for s in &state.subtasks {
        let a = context::account(&s.sent, |uri| state.blob_size(uri));
        let (class, l1) = layer1_text(s);
        let l2 = match &s.decision {
            None => "<td>undecided</td>".to_string(),
            Some(d) => format!(
                "<td class=\"{}\">{}: {}</td>",
                if d.outcome == Outcome::Accepted {
                    "ok"
                } else {
                    "bad"
                },
                match d.outcome {
                    Outcome::Accepted => "accepted",
                    Outcome::Rejected => "rejected",
                },
                escape(&d.reason)
            ),
        };
        let _ = writeln!(
            b,
            "<tr class=\"subtask\"><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{}</td>{l2}<td>{}</td><td>{}</td></tr>",
            escape(&s.id),
            escape(&s.agent),
            s.mode.as_str(),
            escape(&l1),
            a.inline_bytes,
            a.referenced_bytes
        );
        bars.push((s.id.clone(), a.inline_bytes, a.referenced_bytes));
    }
    b.push_str("</table>\n");
    b.push_str(&bytes_chart(&bars));
    b.push_str("</div>\n");
}

/// Bytes sent inline against bytes left behind references, one pair of
/// bars per subtask and one for the task, on one scale.
pub fn bytes_chart(bars: &[(String, u64, u64)]) -> String {
    let total = (
        "all".to_string(),
        bars.iter().map(|b| b.1).sum::<u64>(),
        bars.iter().map(|b| b.2).sum::<u64>(),
    );
    let rows: Vec<&(String, u64, u64)> = bars.iter().chain(std::iter::once(&total)).collect();
    let max = rows.iter().map(|r| r.1.max(r.2)).max().unwrap_or(0).max(1);
    let (label_w, bar_w, row_h) = (70u64, 320u64, 34u64);
    let height = 30 + rows.len() as u64 * row_h;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"bytes-chart\" width=\"{w}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">\
         <title>bytes sent inline vs left behind references</title>\
         <rect x=\"{label_w}\" y=\"6\" width=\"10\" height=\"10\" fill=\"#4263eb\"/><text x=\"{}\" y=\"15\">sent inline</text>\
         <rect x=\"{}\" y=\"6\" width=\"10\" height=\"10\" fill=\"#adb5bd\"/><text x=\"{}\" y=\"15\">left behind references</text>\n",
        label_w + 14,
        label_w + 110,
        label_w + 124,
        w = label_w + bar_w + 120,
    );
    for (i, (name, inline, referenced)) in rows.iter().enumerate() {
        let y = 26 + i as u64 * row_h;
        let wi = inline * bar_w / max;
        let wr = referenced * bar_w / max;
        let _ = writeln!(
            s,
            "<g class=\"bar\" data-subtask=\"{n}\" data-inline=\"{inline}\" data-referenced=\"{referenced}\">\
             <text x=\"0\" y=\"{ty}\">{n}</text>\
             <rect class=\"inline\" x=\"{label_w}\" y=\"{y}\" width=\"{wi}\" height=\"12\" fill=\"#4263eb\"/>\
             <text x=\"{}\" y=\"{ti}\">{inline} B</text>\
             <rect class=\"referenced\" x=\"{label_w}\" y=\"{y2}\" width=\"{wr}\" height=\"12\" fill=\"#adb5bd\"/>\
             <text x=\"{}\" y=\"{tr}\">{referenced} B</text></g>",
            label_w + wi + 4,
            label_w + wr + 4,
            n = escape(name),
            ty = y + 16,
            ti = y + 10,
            y2 = y + 14,
            tr = y + 24,
        );
    }
    s.push_str("</svg>\n");
    s
}

pub(super) fn render_attestation(b: &mut String, partition: u32, a: &Attestation) {
    let _ = writeln!(
        b,
        "<section class=\"checkpoint\"><h2>Latest checkpoint of ledger/{partition}</h2>"
    );
    match &a.verdict {
        Some(Verdict::Verified(text)) => {
            let _ = writeln!(
                b,
                "<p class=\"verify ok\" data-verified=\"true\">✓ {}</p>",
                escape(text)
            );
        }
        Some(Verdict::Broken(text)) => {
            let _ = writeln!(
                b,
                "<p class=\"verify bad\" data-verified=\"false\">✗ {}</p>",
                escape(text)
            );
        }
        None => {}
    }
    match (&a.witnessed, &a.note) {
        (Some(w), _) => {
            let _ = writeln!(
                b,
                "<p>Cosigned by witnesses:</p><pre class=\"note\">{}</pre>",
                escape(w)
            );
        }
        (None, Some(n)) => {
            let _ = writeln!(b, "<pre class=\"note\">{}</pre>", escape(n));
        }
        (None, None) => {
            b.push_str("<p>No signed checkpoint yet (the ledger has no signing key, or has signed nothing).</p>\n");
        }
    }
    b.push_str("</section>\n");
}
