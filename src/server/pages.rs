//! The auditor's pages: `/` lists the chains the log's tail touched,
//! `/chains/{root}` shows one chain's picture beside its trail (a run's
//! node links to its steps), the tasks its runs mastered (subtasks with
//! their layer one and layer two outcomes, bytes sent inline and left
//! behind references as a chart), and the latest checkpoint of its
//! partition with what verifying the chain's export against it found.
//!
//! Server-rendered HTML with inline SVG and CSS: no script, no build step,
//! nothing fetched from anywhere. A browser authenticates with the same
//! token as any client, as the password of HTTP Basic (the browser asks
//! for it), or with its client certificate.
//!
//! Gathering (`gather_*`, in the ledger thread) is kept apart from
//! rendering (`render_*`, pure), so what a page shows is tested without a
//! browser and drawn the same way every time.

use super::access::{caller, read_job_about, subject_of, Asked};
use super::state::AppState;
use crate::auth::Subject;
use crate::context::{self, Outcome, Subtask, TaskState};
use crate::encode::{path_segment, xml as escape};
use crate::engine::Engine;
use crate::error::LedgerError;
use crate::model::Topic;
use crate::model::{ids, LedgerEvent};
use crate::picture::ChainPicture;
use crate::protocol::Failure;
use crate::queries::report;
use crate::queries::Query;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// How many of each ledger partition's last records `/` looks at.
const TAIL_RECORDS: u64 = 4096;
/// Most chains `/` lists.
const LISTED_CHAINS: usize = 100;

/// A chain as `/` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainRow {
    pub root: String,
    pub runs: usize,
    pub max_hop: u32,
    pub withheld: bool,
    pub last_ms: u64,
}

/// A task a chain's run mastered, as its page shows it.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskView {
    Known(Box<TaskState>),
    /// Its content was erased, or cannot be read: why.
    Unreadable(String),
}

/// The latest checkpoint of the chain's partition and the verdict on the
/// chain's export.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attestation {
    pub note: Option<String>,
    pub witnessed: Option<String>,
    /// `Ok(summary)` when every record of the chain verified, else what
    /// did not.
    pub verdict: Option<Result<String, String>>,
}

/// Everything `/chains/{root}` shows.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainPage {
    pub picture: ChainPicture,
    /// Each run's step lines, by the run's index in the picture.
    pub steps: Vec<Vec<String>>,
    pub tasks: Vec<(String, TaskView)>,
    pub partition: u32,
    pub attestation: Attestation,
}

/// The chains the tail of each ledger partition touched, latest first.
pub fn gather_recent(engine: &Engine) -> Result<Vec<ChainRow>, LedgerError> {
    let log = engine.log();
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for p in 0..log.partitions(Topic::Ledger) {
        let end = log.end_offset(Topic::Ledger, p).map_err(LedgerError::Log)?;
        let mut next = end.saturating_sub(TAIL_RECORDS);
        while next < end {
            let batch = log
                .read(Topic::Ledger, p, next, 512)
                .map_err(LedgerError::Log)?;
            let Some(r) = batch.last() else { break };
            next = r.offset + 1;
            for r in &batch {
                // A record that does not decode is `verify`'s business.
                if let Ok(e) = crate::codec::decode_envelope(&r.payload) {
                    let t = last.entry(e.chain_key).or_default();
                    *t = (*t).max(e.time_ms);
                }
            }
        }
    }
    let mut rows = Vec::new();
    for (key, last_ms) in last {
        let Some(root) = engine.views().run(&key)? else {
            continue;
        };
        if root.root.as_deref() != Some(key.as_str()) {
            continue;
        }
        let (runs, max_hop) = match engine.views().chain(&key)? {
            Some(c) => (c.runs, c.max_hop),
            None => (vec![key.clone()], root.hop.unwrap_or(0)),
        };
        let mut withheld = false;
        for r in &runs {
            withheld |= engine.views().run(r)?.is_some_and(|s| s.withheld.is_some());
        }
        rows.push(ChainRow {
            root: key,
            runs: runs.len(),
            max_hop,
            withheld,
            last_ms,
        });
    }
    rows.sort_by(|a, b| b.last_ms.cmp(&a.last_ms).then(a.root.cmp(&b.root)));
    rows.truncate(LISTED_CHAINS);
    Ok(rows)
}

/// What `/chains/{root}` shows of the chain `root` names.
pub fn gather_chain(engine: &mut Engine, root: &str) -> Result<ChainPage, LedgerError> {
    // As the API answers a run that cannot be a name (`..` among them).
    if !ids::valid_name(root) {
        return Err(crate::codes::Refusal::new(
            crate::codes::Code::InvalidName,
            format!(
                "run {:?} is not a name (1–128 of letters, digits, -_.:, never . or ..)",
                root.chars().take(100).collect::<String>()
            ),
        )
        .into());
    }
    let picture = crate::queries::chain_picture(engine, root)?;
    let trail =
        crate::engine::trail::collect_trail(engine.views(), engine.log().as_ref(), root, true)?;
    let erased = report::erasures(&trail, engine.views())?;
    let mut steps = vec![Vec::new(); picture.runs.len()];
    let mut task_ids = BTreeSet::new();
    for (run, s) in &trail {
        if let Some(i) = picture.runs.iter().position(|n| &n.run == run) {
            steps[i].push(report::step_line_with(run, s, &erased));
        }
        match &s.event {
            LedgerEvent::Context(c) => {
                task_ids.insert(c.event.task().to_string());
            }
            LedgerEvent::SealedContext(c) => {
                task_ids.insert(c.task.clone());
            }
            _ => {}
        }
    }
    let mut tasks = Vec::new();
    for t in task_ids {
        let view = match engine.task(&t) {
            Ok(state) => TaskView::Known(Box::new(state)),
            Err(e) if e.is_refusal() => TaskView::Unreadable(e.to_string()),
            Err(e) => return Err(e),
        };
        tasks.push((t, view));
    }
    let partition = engine
        .log()
        .partition_of(Topic::Ledger, ids::chain_key(Some(root), root).as_bytes());
    let attestation = attest(engine, root, partition)?;
    Ok(ChainPage {
        picture,
        steps,
        tasks,
        partition,
        attestation,
    })
}

/// The chain's export (checkpointing its tail first, as `export` does),
/// verified against the ledger's own key when it signs.
fn attest(engine: &mut Engine, root: &str, partition: u32) -> Result<Attestation, LedgerError> {
    let said = crate::queries::answer(
        engine,
        &crate::queries::Query::Export {
            run: None,
            chain: Some(root.to_string()),
            as_of: None,
        },
        true,
    )?;
    let verdict = match &said.failure {
        Some(f) => Err(format!("the chain cannot be exported: {}", f.error.message)),
        None => {
            let key = engine.signer().map(|s| s.verifier());
            match crate::audit::verify::verify_export(&said.out, key.as_ref()) {
                Err(e) => Err(format!("its export does not read: {e}")),
                Ok(r) if !r.mismatches.is_empty() => Err(r
                    .mismatches
                    .iter()
                    .map(|m| m.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")),
                Ok(r) => Ok(format!(
                    "{} records of this chain verified against {} checkpoint{}{}",
                    r.records,
                    r.checkpoints,
                    if r.checkpoints == 1 { "" } else { "s" },
                    match &key {
                        Some(k) => format!(
                            ", every inclusion proof against a root signed by {}",
                            k.name()
                        ),
                        None => " (no signing key: hash chain and digests only)".to_string(),
                    }
                )),
            }
        }
    };
    let views = engine.views();
    Ok(Attestation {
        note: views.checkpoint_note(Topic::Ledger, partition)?,
        witnessed: views
            .witnessed_note(Topic::Ledger, partition)?
            .map(|(_, n)| n),
        verdict: Some(verdict),
    })
}

const STYLE: &str = r#"
body { font-family: sans-serif; margin: 1.5em; color: #222; }
header { border-bottom: 1px solid #ccc; margin-bottom: 1em; padding-bottom: .4em; }
header a { color: #222; text-decoration: none; font-weight: bold; }
table { border-collapse: collapse; }
td, th { border: 1px solid #ddd; padding: .25em .6em; text-align: left; }
th { background: #f4f4f4; }
.layout { display: flex; gap: 1.5em; align-items: flex-start; }
.picture { flex: 0 1 58%; min-width: 20em; overflow-x: auto; border: 1px solid #ddd; }
.trail { flex: 1 1 42%; min-width: 24em; max-height: 85vh; overflow-y: auto; }
.run-steps { border-left: 4px solid #ddd; padding: .2em .8em; margin: .6em 0; }
.run-steps:target { border-left-color: #1c7ed6; background: #e7f5ff; }
.run-steps ol { font-family: monospace; font-size: 12px; margin: .3em 0; padding-left: 2.2em; }
.ok { color: #2b8a3e; font-weight: bold; }
.bad { color: #b02a37; font-weight: bold; }
pre { background: #f8f8f8; padding: .6em; overflow-x: auto; }
svg a:hover rect { stroke: #1c7ed6; stroke-width: 3; }
"#;

fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><style>{STYLE}</style></head>\n\
         <body><header><a href=\"/\">agentledger</a> · {t}</header>\n{body}</body></html>\n",
        t = escape(title)
    )
}

pub fn render_index(rows: &[ChainRow]) -> String {
    let mut b = String::from("<h1>Recent chains</h1>\n");
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

fn layer1_text(s: &Subtask) -> (&'static str, String) {
    match &s.layer1 {
        None => ("", "not returned".into()),
        Some(l) if l.passed => ("ok", "passed".into()),
        Some(l) => ("bad", format!("failed: {}", l.reasons.join("; "))),
    }
}

fn render_task(b: &mut String, id: &str, t: &TaskView) {
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
            "<tr class=\"subtask\"><td>{}</td><td>{}</td><td>{:?}</td><td class=\"{class}\">{}</td>{l2}<td>{}</td><td>{}</td></tr>",
            escape(&s.id),
            escape(&s.agent),
            s.mode,
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

fn render_attestation(b: &mut String, partition: u32, a: &Attestation) {
    let _ = writeln!(
        b,
        "<section class=\"checkpoint\"><h2>Latest checkpoint of ledger/{partition}</h2>"
    );
    match &a.verdict {
        Some(Ok(text)) => {
            let _ = writeln!(
                b,
                "<p class=\"verify ok\" data-verified=\"true\">✓ {}</p>",
                escape(text)
            );
        }
        Some(Err(text)) => {
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

fn html(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r
}

/// A failure as a page, keeping the status and headers (the challenge of
/// a 401, `Retry-After`) of the protocol's answer.
fn failure_page(r: Response, f: Option<&Failure>) -> Response {
    // A page of a chain that is not there is not found, whatever the API
    // calls the refusal.
    let status = match f.map(|f| f.error.code) {
        Some(crate::codes::Code::UnknownRun) => StatusCode::NOT_FOUND,
        _ => r.status(),
    };
    let mut headers = r.headers().clone();
    let text = f.map_or_else(
        || status.canonical_reason().unwrap_or("error").to_string(),
        |f| format!("{}: {}", f.error.code, f.error.message),
    );
    if status == StatusCode::UNAUTHORIZED {
        // A browser asks for the token when challenged with Basic.
        headers.insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"agentledger\", charset=\"UTF-8\""),
        );
    }
    let mut page = html(
        status,
        page(
            "error",
            &format!("<p class=\"bad error\">{}</p>", escape(&text)),
        ),
    );
    headers.remove(header::CONTENT_TYPE);
    headers.remove(header::CONTENT_LENGTH);
    page.headers_mut().extend(headers);
    page
}

async fn serve_page<T: Send + 'static>(
    s: &AppState,
    asked: Asked,
    route: &'static str,
    subject: impl FnOnce(&Engine) -> Result<Subject, Failure> + Send + 'static,
    gather: impl FnOnce(&mut Engine) -> Result<T, LedgerError> + Send + 'static,
    render: impl FnOnce(&T) -> String,
) -> Response {
    let asked = asked.basic_as_bearer();
    let response = match caller(s, &asked) {
        Err(f) => failure_page(super::answer::failure_response(f.clone()), Some(&f)),
        Ok(c) => {
            match read_job_about(s, c, subject, move |engine| {
                gather(engine).map_err(|e| Failure::new(e.code(), e.to_string()))
            })
            .await
            {
                Ok(t) => html(StatusCode::OK, render(&t)),
                Err(r) => {
                    let status = r.status();
                    let body = axum::body::to_bytes(r.into_body(), 1 << 20)
                        .await
                        .unwrap_or_default();
                    let f: Option<Failure> = serde_json::from_slice(&body).ok();
                    let mut r = html(status, String::new());
                    *r.status_mut() = status;
                    failure_page(r, f.as_ref())
                }
            }
        }
    };
    s.ledger.metrics.http(route, response.status().as_u16());
    response
}

pub(super) async fn index(State(s): State<AppState>, asked: Asked) -> Response {
    serve_page(
        &s,
        asked,
        "/",
        |_| Ok(Subject::Whole),
        |e| gather_recent(e),
        |rows| render_index(rows),
    )
    .await
}

pub(super) async fn chain(
    State(s): State<AppState>,
    asked: Asked,
    Path(root): Path<String>,
) -> Response {
    serve_page(
        &s,
        asked,
        "/chains/{root}",
        subject_of(&Query::Chain { run: root.clone() }),
        move |e| gather_chain(e, &root),
        render_chain,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::picture::tests::eight_hops;

    fn sample() -> ChainPage {
        let (runs, refusals) = eight_hops();
        let picture = ChainPicture::of("r0", &runs, &refusals);
        let steps = (0..9).map(|i| vec![format!("step of r{i} <b>")]).collect();
        ChainPage {
            picture,
            steps,
            tasks: vec![("t-gone".into(), TaskView::Unreadable("erased at X".into()))],
            partition: 0,
            attestation: Attestation {
                note: Some("agentledger/x/ledger/0\n3\nabc=\n\n— k sig\n".into()),
                witnessed: None,
                verdict: Some(Ok("37 records verified".into())),
            },
        }
    }

    #[test]
    fn a_chain_page_has_its_picture_trail_tasks_and_checkpoint() {
        let html = render_chain(&sample());
        assert!(html.starts_with("<!doctype html>"));
        assert_eq!(html.matches("<g class=\"run ").count(), 9);
        assert_eq!(html.matches("class=\"run-steps\"").count(), 9);
        assert!(html.contains("href=\"#run-8\"") && html.contains("id=\"run-8\""));
        assert!(html.contains("<g class=\"withheld\""));
        assert!(
            html.contains("step of r3 &lt;b&gt;"),
            "step text is escaped"
        );
        assert!(html.contains("data-task=\"t-gone\"") && html.contains("erased at X"));
        assert!(html.contains("data-verified=\"true\""));
        assert!(html.contains("agentledger/x/ledger/0"));
        assert!(!html.contains("<script"), "no script on the page");
        assert!(
            !html.contains("http://") || !html.contains("src=\"http"),
            "nothing fetched"
        );
    }

    #[test]
    fn the_bytes_chart_scales_bars_to_the_largest() {
        let svg = bytes_chart(&[("s1".into(), 100, 300), ("s2".into(), 50, 0)]);
        assert_eq!(svg.matches("<g class=\"bar\"").count(), 3);
        assert!(svg.contains("data-subtask=\"all\" data-inline=\"150\" data-referenced=\"300\""));
        // The largest bar (all: 300 referenced) is the full width.
        assert!(svg.contains("width=\"320\" height=\"12\" fill=\"#adb5bd\""));
    }

    #[test]
    fn the_index_links_each_chain_escaped() {
        let html = render_index(&[ChainRow {
            root: "a b/<c>".into(),
            runs: 3,
            max_hop: 2,
            withheld: true,
            last_ms: 0,
        }]);
        assert!(html.contains("href=\"/chains/a%20b%2F%3Cc%3E\""));
        assert!(html.contains(">a b/&lt;c&gt;</a>"));
        assert_eq!(render_index(&[]).matches("No chain").count(), 1);
    }
}
