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

mod render;
#[cfg(test)]
mod tests;

use super::access::{caller, read_job_about, subject_of, Asked};
use super::forward;
use super::state::AppState;
use crate::auth::Subject;
use crate::context::TaskState;
use crate::encode::xml as escape;
use crate::engine::{Engine, Whose};
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
use render::{page, render_chain, render_index};
use std::collections::{BTreeMap, BTreeSet};

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
    pub verdict: Option<Verdict>,
}

/// What verifying the chain's export found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every record of the chain verified: how, in a line.
    Verified(String),
    /// What did not verify, or why the export could not be checked.
    Broken(String),
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
        Some(f) => Verdict::Broken(format!("the chain cannot be exported: {}", f.error.message)),
        None => {
            let key = engine.signer().map(|s| s.verifier());
            match crate::audit::verify::verify_export(&said.out, key.as_ref()) {
                Err(e) => Verdict::Broken(format!("its export does not read: {e}")),
                Ok(r) if !r.mismatches.is_empty() => Verdict::Broken(
                    r.mismatches
                        .iter()
                        .map(|m| m.to_string())
                        .collect::<Vec<_>>()
                        .join("; "),
                ),
                Ok(r) => Verdict::Verified(format!(
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

/// A page: the caller authenticated and allowed to read `subject`, what
/// it shows gathered on the ledger thread, rendered here. A page of one
/// chain (`chain`: its root run) whose partition another instance decides
/// is that instance's page, relayed (its views hold every step it decided).
async fn serve_page<T: Send + 'static>(
    s: &AppState,
    asked: Asked,
    route: &'static str,
    chain: Option<String>,
    subject: impl FnOnce(&Engine) -> Result<Subject, Failure> + Send + 'static,
    gather: impl FnOnce(&mut Engine) -> Result<T, LedgerError> + Send + 'static,
    render: impl FnOnce(&T) -> String,
) -> Response {
    let asked = asked.basic_as_bearer();
    let response = match caller(s, &asked) {
        Err(f) => failure_page(super::answer::failure_response(f.clone()), Some(&f)),
        Ok(c) => {
            let refer = chain.is_some() && forward::refers(s, &c, &asked);
            let forwarding = refer.then(|| c.clone());
            let failed = |e: LedgerError| Failure::new(e.code(), e.to_string());
            match read_job_about(s, c, subject, move |engine| {
                let root = chain.as_deref().map(Whose::Run);
                if let Some(to) = root
                    .map(|w| engine.referral_asked(refer, w))
                    .transpose()
                    .map_err(failed)?
                    .flatten()
                {
                    return Ok(Err(to));
                }
                gather(engine).map(Ok).map_err(failed)
            })
            .await
            {
                Ok(Ok(t)) => html(StatusCode::OK, render(&t)),
                Ok(Err(to)) => match forwarding.filter(|_| !forward::is_forwarded(&asked)) {
                    Some(c) => forward::whole(s, &c, &to, asked.target(), &asked, None).await,
                    None => {
                        let f = forward::not_owner(&to);
                        failure_page(super::answer::failure_response(f.clone()), Some(&f))
                    }
                },
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
        None,
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
        Some(root.clone()),
        subject_of(&Query::Chain { run: root.clone() }),
        move |e| gather_chain(e, &root),
        render_chain,
    )
    .await
}
