//! The read-only questions: trail, chain, trace, agent, stats, status,
//! tokens, export and verify, each answered in the protocol's envelope
//! with the CLI's exit code in a header.

use super::access::{admitted, caller, read_job_about, request_slot, subject_of, Asked, Permit};
use super::answer::failure_response;
use super::forward;
use super::ledger::Caller;
use super::locate;
use super::state::AppState;
use crate::codes::Code;
use crate::protocol::Failure;
use crate::queries::{self, PictureFormat, Query};
use axum::extract::{Path, Query as QueryParams, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

/// Query parameters of the read routes.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// `json` (default) or `text` (what the CLI prints without `--json`).
    #[serde(default)]
    format: Option<String>,
    #[serde(default)]
    chain: Option<bool>,
    #[serde(default)]
    as_of: Option<String>,
}

use super::answer::EXIT_HEADER;

pub(super) async fn ask(
    s: &AppState,
    headers: &Asked,
    q: Query,
    params: &ReadParams,
    route: &'static str,
) -> Response {
    let response = match caller(s, headers) {
        Ok(c) => ask_inner(s, c, headers, q, params).await,
        Err(f) => failure_response(f),
    };
    s.ledger.metrics.http(route, response.status().as_u16());
    response
}

/// What a read route's query must be before it is asked: `as_of` and
/// `chain` only where they mean something (names are the query's own
/// check, the same through the CLI).
pub(super) fn read_shape(q: &Query, params: &ReadParams) -> Result<(), Failure> {
    if params.as_of.is_some() && !matches!(q, Query::Trail { .. }) {
        return Err(Failure::new(
            Code::InvalidRequest,
            "as_of applies to a run's trail (and to /v1/export) only",
        ));
    }
    if params.chain.is_some() && !matches!(q, Query::Trail { .. } | Query::Trace { .. }) {
        return Err(Failure::new(
            Code::InvalidRequest,
            "chain applies to a run's trail and trace only",
        ));
    }
    Ok(())
}

/// A read, in one job of the ledger thread: the caller's token checked
/// and its grant held to the policy, then the question answered.
pub(super) async fn ask_inner(
    s: &AppState,
    caller: Caller,
    headers: &Asked,
    q: Query,
    params: &ReadParams,
) -> Response {
    let picture = match &q {
        Query::Picture { format, .. } => Some(*format),
        _ => None,
    };
    // An OTLP request is one JSON document, not lines.
    let one_document = matches!(q, Query::Trace { .. });
    let json = match params.format.as_deref() {
        None | Some("json") => Ok(true),
        Some("text") => Ok(false),
        Some(_) if picture.is_some() => Ok(false),
        Some(other) => Err(Failure::new(
            Code::InvalidRequest,
            format!("format {other:?} is not json or text"),
        )),
    };
    let shape = read_shape(&q, params);
    let refer = forward::refers(s, &caller, headers);
    let forwarded = forward::is_forwarded(headers);
    let forwarding = refer.then(|| caller.clone()).filter(|_| !forwarded);
    let subject = || locate::Subject::of(queries::whose(&q));
    let started = std::time::Instant::now();
    let said = loop {
        let (json, shape, asked) = (json.clone(), shape.clone(), q.clone());
        let said = read_job_about(s, caller.clone(), subject_of(&q), move |engine| {
            // Who may not ask learns nothing, not even that the format is wrong.
            let json = json?;
            shape?;
            let failed = |e: crate::error::LedgerError| Failure::new(e.code(), e.to_string());
            // A chain another instance decides is read there: its views
            // hold every step it decided, this instance's may lag (or
            // hold none of it).
            match engine.referral_asked(refer, queries::whose(&asked)) {
                Ok(Some(to)) => return Ok(Err(forward::not_owner(&to))),
                Err(e) if e.code() == Code::NotOwner => return Ok(Err(failed(e))),
                Err(e) => return Err(failed(e)),
                Ok(None) => {}
            }
            queries::answer(engine, &asked, json)
                .map(Ok)
                .map_err(failed)
        })
        .await;
        match (said, locate::wait_for_claim(s, started)) {
            (Ok(Err(f)), Some(pause)) if locate::unclaimed(&f) && !forwarded => {
                tokio::time::sleep(pause).await
            }
            (said, _) => break said,
        }
    };
    let said = match said {
        Ok(Ok(said)) => said,
        Ok(Err(away)) => {
            let (Some(caller), Some(to)) = (&forwarding, away.referral.as_deref()) else {
                return failure_response(away);
            };
            let asked = (headers.target(), None);
            return locate::whole(s, caller, to, headers, asked, subject()).await;
        }
        Err(r) => return r,
    };
    if let (Some(caller), Some(failed)) = (&forwarding, &said.failure) {
        let failed = crate::protocol::Reply::Failed(failed.clone());
        if let Some(to) = locate::unknown_here(s, caller, headers, &failed, subject).await {
            return forward::whole(s, caller, &to, headers.target(), headers, None).await;
        }
    }
    let json = picture.is_none() && params.format.as_deref() != Some("text");
    let exit = HeaderValue::from(said.exit_code());
    // A failure is the protocol's JSON in either format: the CLI prints
    // its line from it.
    let mut r = match (&said.failure, json) {
        (Some(f), _) => failure_response(f.clone()),
        (None, true) => {
            let mut r = (StatusCode::OK, said.out).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(if one_document {
                    "application/json"
                } else {
                    "application/x-ndjson"
                }),
            );
            r
        }
        (None, false) => {
            let mut r = (StatusCode::OK, said.out).into_response();
            if let Some(f) = picture {
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(f.content_type()),
                );
            }
            r
        }
    };
    r.headers_mut().insert(EXIT_HEADER, exit);
    r
}

pub(super) async fn trail(
    State(s): State<AppState>,
    headers: Asked,
    Path(run): Path<String>,
    QueryParams(p): QueryParams<ReadParams>,
) -> Response {
    let q = Query::Trail {
        run,
        chain: p.chain.unwrap_or(false),
        as_of: p.as_of.clone(),
    };
    ask(&s, &headers, q, &p, "/v1/runs/{run}/trail").await
}

pub(super) async fn chain(
    State(s): State<AppState>,
    headers: Asked,
    Path(run): Path<String>,
    QueryParams(p): QueryParams<ReadParams>,
) -> Response {
    let q = match p.format.as_deref().and_then(PictureFormat::parse) {
        Some(format) => Query::Picture { run, format },
        None => Query::Chain { run },
    };
    ask(&s, &headers, q, &p, "/v1/runs/{run}/chain").await
}

/// The chain as OTLP/JSON (`?chain=false`: the run alone).
pub(super) async fn trace(
    State(s): State<AppState>,
    headers: Asked,
    Path(run): Path<String>,
    QueryParams(p): QueryParams<ReadParams>,
) -> Response {
    let q = Query::Trace {
        run,
        chain: p.chain.unwrap_or(true),
    };
    ask(&s, &headers, q, &p, "/v1/runs/{run}/trace").await
}

pub(super) async fn agent(
    State(s): State<AppState>,
    headers: Asked,
    Path(name): Path<String>,
    QueryParams(p): QueryParams<ReadParams>,
) -> Response {
    ask(&s, &headers, Query::Agent { name }, &p, "/v1/agents/{name}").await
}

pub(super) async fn stats(
    State(s): State<AppState>,
    headers: Asked,
    Path(task): Path<String>,
    QueryParams(p): QueryParams<ReadParams>,
) -> Response {
    ask(
        &s,
        &headers,
        Query::Stats { task },
        &p,
        "/v1/tasks/{task}/stats",
    )
    .await
}

pub(super) async fn status(
    State(s): State<AppState>,
    headers: Asked,
    QueryParams(p): QueryParams<ReadParams>,
) -> Response {
    // The auditor's pages link here: a browser shows its Basic credentials.
    let headers = headers.basic_as_bearer();
    ask(&s, &headers, Query::Status, &p, "/v1/status").await
}

pub(super) async fn tokens_list(
    State(s): State<AppState>,
    headers: Asked,
    QueryParams(p): QueryParams<ReadParams>,
) -> Response {
    ask(&s, &headers, Query::Tokens, &p, "/v1/tokens").await
}

/// Query parameters of `/v1/export`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportParams {
    #[serde(default)]
    run: Option<String>,
    #[serde(default)]
    chain: Option<String>,
    #[serde(default)]
    as_of: Option<u64>,
    #[serde(default)]
    format: Option<String>,
}

pub(super) async fn export(
    State(s): State<AppState>,
    headers: Asked,
    QueryParams(p): QueryParams<ExportParams>,
) -> Response {
    let q = Query::Export {
        run: p.run,
        chain: p.chain,
        as_of: p.as_of,
    };
    let params = ReadParams {
        format: p.format,
        ..ReadParams::default()
    };
    ask(&s, &headers, q, &params, "/v1/export").await
}

/// Query parameters of `/v1/verify`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyParams {
    #[serde(default)]
    format: Option<String>,
    /// A verifier key whose signed checkpoints are checked too.
    #[serde(default)]
    key: Option<String>,
    /// Witness keys, comma-separated, whose cosignatures are required.
    #[serde(default)]
    witness_keys: Option<String>,
    /// How many of them must have cosigned (default: all).
    #[serde(default)]
    witnesses: Option<usize>,
    /// Records past a log's newest witnessed checkpoint are a mismatch.
    #[serde(default)]
    all_witnessed: bool,
    /// Hold the published topic against the ledger too.
    #[serde(default)]
    published: bool,
    /// Records no checkpoint attests fail the check.
    #[serde(default)]
    require_attested: bool,
}

/// The keys a verify request trusts.
pub(super) fn trust_of(p: &VerifyParams) -> Result<Option<crate::audit::signed::Trust>, Failure> {
    use crate::audit::note::VerifierKey;
    let bad = |what: &str, e: crate::audit::note::NoteError| {
        Failure::new(Code::InvalidRequest, format!("{what}: {e}"))
    };
    let Some(key) = p.key.as_deref() else {
        // What only a signed trail can answer is refused, not ignored.
        let needing = [
            ("witness_keys", p.witness_keys.is_some()),
            ("witnesses", p.witnesses.is_some()),
            ("all_witnessed", p.all_witnessed),
        ];
        return match needing.iter().find(|(_, given)| *given) {
            Some((what, _)) => Err(Failure::new(
                Code::InvalidRequest,
                format!("{what} needs key (the ledger's)"),
            )),
            None => Ok(None),
        };
    };
    let key = VerifierKey::parse(key).map_err(|e| bad("key", e))?;
    let witnesses = p
        .witness_keys
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .filter(|k| !k.trim().is_empty())
        .map(|k| VerifierKey::parse(k).map_err(|e| bad("witness_keys", e)))
        .collect::<Result<Vec<_>, _>>()?;
    crate::audit::signed::Trust::new(key, witnesses, p.witnesses)
        .map(|t| Some(t.requiring_all_witnessed(p.all_witnessed)))
        .map_err(|why| Failure::new(Code::InvalidRequest, why.to_string()))
}

/// `verify` of the log, read beside the writer (it never blocks the ledger
/// thread); as long as it takes, without the request timeout.
pub(super) async fn verify(
    State(s): State<AppState>,
    headers: Asked,
    QueryParams(p): QueryParams<VerifyParams>,
) -> Response {
    // The auditor's pages link here: a browser shows its Basic credentials.
    let headers = headers.basic_as_bearer();
    let who = match admitted(&s, &headers, Permit::Read).await {
        Ok(c) => c,
        Err(r) => {
            s.ledger.metrics.http("/v1/verify", r.status().as_u16());
            return r;
        }
    };
    let trust = match trust_of(&p) {
        Ok(t) => t,
        Err(f) => return failure_response(f),
    };
    let _slot = match request_slot(&s, &who) {
        Ok(slot) => slot,
        Err(f) => return failure_response(f),
    };
    let json = p.format.as_deref() != Some("text");
    let p_published = p.published;
    let p_require_attested = p.require_attested;
    let log = s.ledger.log.clone();
    let said = tokio::task::spawn_blocking(move || {
        queries::verify(
            log.as_ref(),
            json,
            &|_| {},
            trust.as_ref(),
            None,
            p_published,
            p_require_attested,
        )
    })
    .await;
    let response = match said {
        Ok(Ok(said)) => {
            let exit = HeaderValue::from(said.exit_code());
            let mut r = (StatusCode::OK, said.out).into_response();
            r.headers_mut().insert(EXIT_HEADER, exit);
            r
        }
        Ok(Err(e)) => failure_response(Failure::new(e.code(), e.to_string())),
        Err(_) => failure_response(Failure::new(
            Code::InternalError,
            "verify stopped unexpectedly",
        )),
    };
    s.ledger
        .metrics
        .http("/v1/verify", response.status().as_u16());
    response
}
