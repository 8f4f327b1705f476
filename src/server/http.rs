//! The routes: `POST /v1/ops` (one op as JSON, or many as ndjson; one SSE
//! event when the caller prefers `text/event-stream`), `GET /v1/ws`, `GET
//! /v1/events` (SSE), the read-only questions, `/metrics`, `/healthz` and
//! `/readyz`. Every route answers in the protocol's envelope; limits and
//! faults have their own status codes.

use super::events::{self, Cursor, Filter};
use super::ledger::{grant_of, Caller, Gone, LedgerHandle, Line};
use super::shares::{Full, Shares, Slot};
use super::tls::ClientIdentity;
use super::ws_upgrade::{self, Stalled};
use crate::apply::parse_line;
use crate::auth::{authorize, jwt, tokens, Action, Facts, Subject};
use crate::codes::Code;
use crate::protocol::{Failure, Reply};
use crate::queries::{self, PictureFormat, Query};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query as QueryParams, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

/// Limits of the network face.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Largest request body (and WebSocket message): the line limit.
    pub max_body: usize,
    /// Longest wait for an answer before `504 timeout`.
    pub timeout: Duration,
    /// Requests answered at once; past it `503 overloaded` with
    /// `Retry-After`.
    pub max_in_flight: usize,
    /// Of those, what one caller may have answered at once.
    pub max_in_flight_per_caller: usize,
    /// Event streams (SSE, subscribed sockets) followed at once; past it
    /// `503 overloaded`.
    pub max_streams: usize,
    /// Of those, what one caller may follow at once.
    pub max_streams_per_caller: usize,
    /// Serve HTTPS with this certificate and key.
    pub tls: Option<super::TlsFiles>,
    /// Accept JWTs from this identity provider besides the ledger's own
    /// tokens.
    pub jwt: Option<Arc<jwt::JwtConfig>>,
    /// Bytes all request bodies in flight (and WebSocket messages being
    /// assembled) may hold together; past it `503 overloaded`. At least
    /// `max_body`.
    pub body_budget: usize,
    /// Once the server stops, how long a request may still wait for the
    /// ledger's answer before it is answered 503 `shutting_down` (set
    /// from `--shutdown-timeout`, within the time connections get).
    pub stop_answering_after: Duration,
    /// Keep cosignatures only of these witnesses (each verified); none
    /// given: any well-formed line, within a bound per checkpoint.
    pub witnesses: Vec<crate::audit::note::VerifierKey>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            max_body: crate::limits::MAX_LINE_BYTES,
            timeout: Duration::from_secs(30),
            max_in_flight: 256,
            max_in_flight_per_caller: 128,
            max_streams: crate::limits::MAX_STREAMS,
            max_streams_per_caller: crate::limits::MAX_STREAMS / 2,
            body_budget: crate::limits::BODY_BUDGET_BYTES,
            stop_answering_after: Duration::from_secs(3),
            tls: None,
            jwt: None,
            witnesses: Vec::new(),
        }
    }
}

#[derive(Clone)]
pub struct AppState {
    pub(super) ledger: LedgerHandle,
    /// SHA-256 of this server's session token: whoever shows it is the
    /// operator (it is written into the data dir, readable only by the
    /// data dir's owner).
    session: [u8; 32],
    /// Requests being answered (`--max-in-flight`), shared by caller.
    slots: Shares,
    /// One permit a byte of `body_budget`: held by each body being read.
    pub(super) bodies: Arc<Semaphore>,
    /// Ledger tokens the ledger thread vouched for lately: a body is read
    /// only for a caller known to be one, and asking the ledger thread
    /// before every body would double its work.
    vouched: Arc<std::sync::Mutex<std::collections::HashMap<[u8; 32], std::time::Instant>>>,
    pub(super) opts: Arc<HttpOptions>,
    /// Set when the server shuts down: streams end, sockets close.
    stopping: Arc<AtomicBool>,
    /// Event streams followed at once, shared by caller.
    streams: Shares,
}

impl AppState {
    /// `session_token` authenticates as the operator (see
    /// [`crate::server::token_file`]); every other bearer token is looked
    /// up in the views.
    pub fn new(
        ledger: LedgerHandle,
        opts: HttpOptions,
        stopping: Arc<AtomicBool>,
        session_token: &str,
    ) -> Self {
        AppState {
            ledger,
            session: tokens::hash(session_token),
            slots: Shares::new(opts.max_in_flight, opts.max_in_flight_per_caller),
            streams: Shares::new(opts.max_streams, opts.max_streams_per_caller),
            bodies: Arc::new(Semaphore::new(opts.body_budget.max(opts.max_body))),
            vouched: Arc::default(),
            opts: Arc::new(opts),
            stopping,
        }
    }
}

impl AppState {
    /// `call` within the request timeout (else `Err`, answered `timeout`)
    /// and, once the server stops, within the time kept for answers (else
    /// `Gone`, answered 503 `shutting_down`): a ledger that cannot finish
    /// (Kafka gone) does not leave requests to be cut off unanswered.
    pub(super) async fn in_time<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, Gone>>,
    ) -> Result<Result<T, Gone>, tokio::time::error::Elapsed> {
        let cut = async {
            until_set(&self.stopping).await;
            tokio::time::sleep(self.opts.stop_answering_after).await;
        };
        tokio::select! {
            r = tokio::time::timeout(self.opts.timeout, call) => r,
            () = cut => Ok(Err(Gone)),
        }
    }
}

pub fn router(state: AppState) -> Router {
    let max_body = state.opts.max_body;
    Router::new()
        .route("/v1/ops", post(ops))
        .route("/v1/ws", get(ws))
        .route("/v1/events", get(sse_events))
        .route("/v1/runs/{run}/trail", get(trail))
        .route("/v1/runs/{run}/chain", get(chain))
        .route("/v1/runs/{run}/trace", get(trace))
        .route("/v1/agents/{name}", get(agent))
        .route("/v1/tasks/{task}/stats", get(stats))
        .route("/v1/status", get(status))
        .route("/v1/tokens", get(tokens_list))
        .route("/v1/export", get(export))
        .route("/v1/verify", get(verify))
        .route("/v1/rebuild", get(rebuild_status).post(rebuild_start))
        .route("/v1/log", get(super::tlog::logs))
        .route(
            "/v1/log/{topic}/{partition}/checkpoint",
            get(super::tlog::checkpoint),
        )
        .route(
            "/v1/log/{topic}/{partition}/witnessed",
            get(super::tlog::witnessed),
        )
        .route(
            "/v1/log/{topic}/{partition}/cosignatures",
            post(super::tlog::cosignatures),
        )
        .route(
            "/v1/log/{topic}/{partition}/tile/{*path}",
            get(super::tlog::tile),
        )
        .route("/checkpoint", get(super::tlog::first_checkpoint))
        .route("/tile/{*path}", get(super::tlog::first_tile))
        .route("/", get(super::pages::index))
        .route("/chains/{root}", get(super::pages::chain))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .fallback(|| async { StatusCode::NOT_FOUND })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn(super::intake::json_errors))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            super::intake::bounded_body,
        ))
        .layer(axum::middleware::from_fn(super::intake::header_limits))
        .with_state(state)
}

/// The HTTP status of a failure: 400 for requests that are not well
/// formed, 401 without a valid credential, 403 when the caller may not,
/// 409 when the ledger already holds what the request would create, 422
/// for other refusals, 413 over a size limit, 503 when the
/// log cannot be used (or the server is overloaded), 504 on timeout, 500
/// for damage.
pub fn status_of(code: Code) -> StatusCode {
    use Code::*;
    match code {
        MalformedJson | InvalidRequest | UnknownOp | InvalidName | InvalidScope | InvalidLabel => {
            StatusCode::BAD_REQUEST
        }
        LineTooLong | TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        RunExists | RunClosed | TaskExists | DuplicateSubtask | AlreadyReturned
        | AlreadyEvaluated | Conflict => StatusCode::CONFLICT,
        LogError | IoError | DataDirInUse | Overloaded | ShuttingDown => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        Timeout => StatusCode::GATEWAY_TIMEOUT,
        Unauthenticated => StatusCode::UNAUTHORIZED,
        Forbidden => StatusCode::FORBIDDEN,
        NotFound => StatusCode::NOT_FOUND,
        CorruptRecord | ViewError | ContentStoreError | InternalError | SchemaUnavailable => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

fn json_response(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

pub(super) fn failure_response(f: Failure) -> Response {
    let status = status_of(f.error.code);
    let retry = matches!(f.error.code, Code::Overloaded | Code::ShuttingDown);
    let challenge = f.error.code == Code::Unauthenticated;
    let mut r = json_response(
        status,
        serde_json::to_string(&f).expect("failures serialise"),
    );
    if retry {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if challenge {
        // RFC 6750: say which scheme would be accepted.
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"agentledger\""),
        );
    }
    r
}

/// Who a request comes from, by its `Authorization: Bearer` header: the
/// operator when it shows the session token, else a token the ledger
/// thread looks up. No header, or not a bearer one: 401.
pub(super) fn caller(s: &AppState, asked: &Asked) -> Result<Caller, Failure> {
    let value = asked
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or(""));
    let unauthenticated =
        |u: crate::auth::Unauthenticated| Failure::new(Code::Unauthenticated, u.0);
    // A bearer token speaks for this request; a client certificate for
    // every request of its connection that shows none.
    if let (None, Some(ClientIdentity(identity))) = (value, &asked.client) {
        return identity
            .clone()
            .map(|(grant, lapses)| Caller::Granted(grant, lapses))
            .map_err(unauthenticated);
    }
    let token = tokens::bearer_token(value).map_err(unauthenticated)?;
    if let Some(jwt) = s.opts.jwt.as_ref().filter(|_| jwt::looks_like_jwt(token)) {
        let (grant, lapses) = jwt.verify_until(token).map_err(unauthenticated)?;
        return Ok(Caller::Granted(Arc::new(grant), Some(lapses)));
    }
    match tokens::hash(token) {
        sha if same_secret(&sha, &s.session) => Ok(Caller::Operator),
        sha => Ok(Caller::Token(sha)),
    }
}

/// How long the ledger thread's word that a token is valid is taken at
/// the edge before a body is read (the operation is authenticated on the
/// ledger thread again whatever this says).
const VOUCHED_FOR: Duration = Duration::from_secs(1);

/// Ledger tokens remembered as vouched for, at most.
const VOUCHED_MAX: usize = 4096;

/// Who sends a request, from its headers alone: refused `unauthenticated`
/// before its body is read unless its credential is one the ledger
/// accepts (a JWT or client certificate that verified, the session token,
/// or a ledger token the ledger thread knows and has not revoked).
pub(super) async fn vouch(s: &AppState, asked: &Asked) -> Result<(), Failure> {
    let sha = match caller(s, asked)? {
        Caller::Operator | Caller::Granted(..) => return Ok(()),
        Caller::Token(sha) => sha,
    };
    let fresh = |at: &std::time::Instant| at.elapsed() < VOUCHED_FOR;
    if s.vouched
        .lock()
        .map(|m| m.get(&sha).is_some_and(fresh))
        .unwrap_or(false)
    {
        return Ok(());
    }
    match ask_grant(s, Caller::Token(sha)).await {
        Ok(Ok(())) => {
            if let Ok(mut m) = s.vouched.lock() {
                if m.len() >= VOUCHED_MAX {
                    m.retain(|_, at| fresh(at));
                }
                if m.len() < VOUCHED_MAX {
                    m.insert(sha, std::time::Instant::now());
                }
            }
            Ok(())
        }
        Ok(Err(f)) => Err(f),
        Err(unanswered) => Err(unanswered),
    }
}

/// Whether the ledger thread grants `caller` anything, within the
/// request timeout: the outer error says it did not answer (shutting
/// down, or too slow).
async fn ask_grant(s: &AppState, caller: Caller) -> Result<Result<(), Failure>, Failure> {
    let call = s
        .ledger
        .call(move |engine| grant_of(engine, &caller).map(|_| ()));
    match s.in_time(call).await {
        Ok(Ok(granted)) => Ok(granted),
        Ok(Err(Gone)) => Err(Failure::new(Code::ShuttingDown, Gone.to_string())),
        Err(_) => Err(Failure::new(
            Code::Timeout,
            format!("no answer within {} ms", s.opts.timeout.as_millis()),
        )),
    }
}

/// Compare two hashes in time that does not depend on where they differ.
fn same_secret(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// A request's headers and the principal its connection's client
/// certificate names (mTLS), if it showed one: what `caller` needs.
pub struct Asked {
    headers: HeaderMap,
    client: Option<ClientIdentity>,
}

impl Asked {
    /// The request with HTTP Basic credentials read as a bearer token (the
    /// password; the user name is ignored): how a browser, challenged
    /// with Basic, shows the token.
    pub(super) fn basic_as_bearer(mut self) -> Asked {
        use base64::Engine as _;
        let token = self
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, rest) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("basic").then_some(rest.trim())
            })
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|up| up.split_once(':').map(|(_, p)| p.to_string()));
        if let Some(t) = token.and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok()) {
            self.headers.insert(header::AUTHORIZATION, t);
        }
        self
    }
}

impl std::ops::Deref for Asked {
    type Target = HeaderMap;

    fn deref(&self) -> &HeaderMap {
        &self.headers
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Asked {
    type Rejection = Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Infallible> {
        Ok(Asked::of(parts))
    }
}

impl Asked {
    /// What `caller` needs of a request, from its head.
    pub(super) fn of(parts: &axum::http::request::Parts) -> Asked {
        Asked {
            headers: parts.headers.clone(),
            client: parts
                .extensions
                .get::<Option<ClientIdentity>>()
                .cloned()
                .flatten(),
        }
    }
}

/// What a caller asks for beyond operations.
#[derive(Debug, Clone)]
enum Permit {
    /// The read routes, `/metrics` and `/v1/verify`.
    Read,
    /// The published events, limited to a scope when given.
    Events(Option<String>),
}

/// Check on the ledger thread (where the tokens' views are) that `caller`
/// may do `what`: 401 for a token unknown, revoked or expired, 403 when
/// its principal may not.
async fn permit(s: &AppState, caller: Caller, what: Permit) -> Result<(), Failure> {
    let call = s.ledger.call(move |engine| -> Result<(), Failure> {
        let grant = grant_of(engine, &caller)?;
        let action = match &what {
            Permit::Read => Action::Read(&Subject::Whole),
            Permit::Events(scope) => Action::Events {
                scope: scope.as_deref(),
            },
        };
        authorize(&grant, action, &Facts::default())
            .map_err(|f| Failure::new(Code::Forbidden, f.to_string()))
    });
    match s.in_time(call).await {
        Ok(Ok(result)) => result,
        Ok(Err(Gone)) => Err(Failure::new(Code::ShuttingDown, Gone.to_string())),
        Err(_) => Err(timeout_failure(s.opts.timeout)),
    }
}

/// `caller` and `permit` in one: the response to send instead when the
/// request may not go on.
async fn admitted(s: &AppState, headers: &Asked, what: Permit) -> Result<Caller, Response> {
    let c = caller(s, headers).map_err(failure_response)?;
    permit(s, c.clone(), what).await.map_err(failure_response)?;
    Ok(c)
}

fn with_status(status: StatusCode, f: Failure) -> Response {
    let mut r = failure_response(f);
    *r.status_mut() = status;
    r
}

/// A slot for answering one request of `caller`, or the 503 that says
/// which bound it met.
fn request_slot(s: &AppState, caller: &Caller) -> Result<Slot, Failure> {
    s.slots.take(caller.share().as_deref()).map_err(|full| {
        Failure::new(
            Code::Overloaded,
            match full {
                Full::All(max) => {
                    format!("the server is answering {max} requests already; retry shortly")
                }
                Full::Share(per) => format!(
                    "this caller has {per} requests being answered already (--max-in-flight-per-caller); retry shortly"
                ),
            },
        )
    })
}

fn gone() -> Response {
    failure_response(Failure::new(Code::ShuttingDown, Gone.to_string()))
}

fn timeout_failure(after: Duration) -> Failure {
    Failure::new(
        Code::Timeout,
        format!(
            "no answer within {} ms; the operation may still be carried out — read the trail before retrying",
            after.as_millis()
        ),
    )
}

fn timed_out(after: Duration) -> Response {
    failure_response(timeout_failure(after))
}

/// Whether the caller prefers one SSE event to a JSON body.
fn prefers_event_stream(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // RFC 9110 §12.5.1: the highest q wins; on a tie, the one listed first.
    let mut best: Option<(f32, bool)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .or_else(|| p.trim().strip_prefix("Q="))
            })
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        let sse = match media.as_str() {
            "text/event-stream" => true,
            "application/json" => false,
            _ => continue,
        };
        if q > 0.0 && best.is_none_or(|(b, _)| q > b) {
            best = Some((q, sse));
        }
    }
    best.is_some_and(|(_, sse)| sse)
}

fn is_ndjson(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| {
            t.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/x-ndjson")
        })
}

/// Split an ndjson body into request lines (blank lines are skipped, as
/// `apply` skips them).
fn ndjson_lines(body: &[u8]) -> Vec<Line> {
    body.split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .map(parse_line)
        .collect()
}

fn reply_text(r: &Reply) -> String {
    serde_json::to_string(r).expect("replies serialise")
}

async fn ops(
    State(s): State<AppState>,
    headers: Asked,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let response = match caller(&s, &headers) {
        Ok(c) => ops_inner(&s, c, &headers, body).await,
        Err(f) => failure_response(f),
    };
    s.ledger.metrics.http("/v1/ops", response.status().as_u16());
    response
}

async fn ops_inner(
    s: &AppState,
    caller: Caller,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let _slot = match request_slot(s, &caller) {
        Ok(slot) => slot,
        Err(f) => return failure_response(f),
    };
    let body = match body {
        Ok(b) => b,
        Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return failure_response(Failure::new(
                Code::LineTooLong,
                format!(
                    "request body exceeds the limit of {} bytes",
                    s.opts.max_body
                ),
            ))
        }
        Err(r) => return failure_response(Failure::new(Code::InvalidRequest, r.body_text())),
    };
    let ndjson = is_ndjson(headers);
    let lines = if ndjson {
        ndjson_lines(&body)
    } else {
        vec![parse_line(&body)]
    };
    if lines.len() > crate::limits::MAX_OPS_PER_BODY {
        // A request too large in operations rather than bytes: 413 all the same.
        return with_status(StatusCode::PAYLOAD_TOO_LARGE, Failure::new(
            Code::LimitExceeded,
            format!(
                "the body holds {} operations; at most {} are answered per request (nothing was applied)",
                lines.len(),
                crate::limits::MAX_OPS_PER_BODY
            ),
        ));
    }
    let replies = match s.in_time(s.ledger.ops(caller, lines)).await {
        Ok(Ok(Ok(r))) => r,
        Ok(Ok(Err(f))) => return failure_response(f),
        Ok(Err(Gone)) => return gone(),
        Err(_) => return timed_out(s.opts.timeout),
    };
    if ndjson {
        let mut text = String::new();
        for r in &replies {
            text.push_str(&reply_text(r));
            text.push('\n');
        }
        let mut r = (StatusCode::OK, text).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        );
        return r;
    }
    let Some(reply) = replies.into_iter().next() else {
        return gone();
    };
    let status = match &reply {
        Reply::Done(_) => StatusCode::OK,
        Reply::Failed(f) => status_of(f.error.code),
    };
    if prefers_event_stream(headers) {
        let mut r = (
            status,
            format!("event: message\ndata: {}\n\n", reply_text(&reply)),
        )
            .into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        return r;
    }
    json_response(status, reply_text(&reply))
}

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

/// The header that carries the CLI's exit code for an answer.
pub const EXIT_HEADER: &str = "x-agentledger-exit";

async fn ask(
    s: &AppState,
    headers: &Asked,
    q: Query,
    params: &ReadParams,
    route: &'static str,
) -> Response {
    let response = match caller(s, headers) {
        Ok(c) => ask_inner(s, c, q, params).await,
        Err(f) => failure_response(f),
    };
    s.ledger.metrics.http(route, response.status().as_u16());
    response
}

/// What a read route's query must be before it is asked: `as_of` and
/// `chain` only where they mean something (names are the query's own
/// check, the same through the CLI).
fn read_shape(q: &Query, params: &ReadParams) -> Result<(), Failure> {
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
async fn ask_inner(s: &AppState, caller: Caller, q: Query, params: &ReadParams) -> Response {
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
    let said = read_job_about(s, caller, subject_of(&q), move |engine| {
        // Who may not ask learns nothing, not even that the format is wrong.
        let json = json?;
        shape?;
        queries::answer(engine, &q, json).map_err(|e| Failure::new(e.code(), e.to_string()))
    })
    .await;
    let said = match said {
        Ok(said) => said,
        Err(r) => return r,
    };
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

/// Run `f` for a reader of the whole ledger in one job of the ledger
/// thread: the caller's token checked and its grant held to the policy
/// first, within a slot and the timeout.
pub(super) async fn read_job<T: Send + 'static>(
    s: &AppState,
    caller: Caller,
    f: impl FnOnce(&mut crate::engine::Engine) -> Result<T, Failure> + Send + 'static,
) -> Result<T, Response> {
    read_job_about(s, caller, |_| Ok(Subject::Whole), f).await
}

/// [`read_job`] for a read about what `subject` says (the scopes of the
/// runs, chain, agent or task it names), found on the ledger thread
/// before the policy decides.
pub(super) async fn read_job_about<T: Send + 'static>(
    s: &AppState,
    caller: Caller,
    subject: impl FnOnce(&crate::engine::Engine) -> Result<Subject, Failure> + Send + 'static,
    f: impl FnOnce(&mut crate::engine::Engine) -> Result<T, Failure> + Send + 'static,
) -> Result<T, Response> {
    let _slot = request_slot(s, &caller).map_err(failure_response)?;
    let call = s.ledger.call(move |engine| -> Result<T, Failure> {
        let grant = grant_of(engine, &caller)?;
        let subject = subject(engine)?;
        authorize(&grant, Action::Read(&subject), &Facts::default())
            .map_err(|f| Failure::new(Code::Forbidden, f.to_string()))?;
        f(engine)
    });
    match s.in_time(call).await {
        Ok(Ok(Ok(t))) => Ok(t),
        Ok(Ok(Err(f))) => Err(failure_response(f)),
        Ok(Err(Gone)) => Err(gone()),
        Err(_) => Err(timed_out(s.opts.timeout)),
    }
}

/// The subject of a question, for [`read_job_about`].
pub(super) fn subject_of(
    q: &Query,
) -> impl FnOnce(&crate::engine::Engine) -> Result<Subject, Failure> + Send + 'static {
    let q = q.clone();
    move |engine| queries::subject(engine, &q).map_err(|e| Failure::new(e.code(), e.to_string()))
}

async fn trail(
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

async fn chain(
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
async fn trace(
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

async fn agent(
    State(s): State<AppState>,
    headers: Asked,
    Path(name): Path<String>,
    QueryParams(p): QueryParams<ReadParams>,
) -> Response {
    ask(&s, &headers, Query::Agent { name }, &p, "/v1/agents/{name}").await
}

async fn stats(
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

async fn status(
    State(s): State<AppState>,
    headers: Asked,
    QueryParams(p): QueryParams<ReadParams>,
) -> Response {
    ask(&s, &headers, Query::Status, &p, "/v1/status").await
}

async fn tokens_list(
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

async fn export(
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
}

/// The keys a verify request trusts.
fn trust_of(p: &VerifyParams) -> Result<Option<crate::audit::signed::Trust>, Failure> {
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
        .map_err(|why| Failure::new(Code::InvalidRequest, why))
}

/// `verify` of the log, read beside the writer (it never blocks the ledger
/// thread); as long as it takes, without the request timeout.
async fn verify(
    State(s): State<AppState>,
    headers: Asked,
    QueryParams(p): QueryParams<VerifyParams>,
) -> Response {
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
    let log = s.ledger.log.clone();
    let said = tokio::task::spawn_blocking(move || {
        queries::verify(
            log.as_ref(),
            json,
            &|_| {},
            trust.as_ref(),
            None,
            p_published,
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

/// Where the rebuild of the views stands (`{"rebuild":null}` when none
/// ran in this process).
async fn rebuild_status(State(s): State<AppState>, headers: Asked) -> Response {
    let c = match caller(&s, &headers) {
        Ok(c) => c,
        Err(f) => return failure_response(f),
    };
    let response = match read_job(&s, c, |engine| Ok(engine.rebuild_status())).await {
        Ok(status) => axum::Json(serde_json::json!({ "rebuild": status })).into_response(),
        Err(r) => r,
    };
    s.ledger
        .metrics
        .http("/v1/rebuild", response.status().as_u16());
    response
}

/// Start rebuilding the views beside the live ones (the operator only):
/// answered at once with where it stands; `GET` follows it, and the serve
/// loop swaps the fresh views in when they are built.
async fn rebuild_start(State(s): State<AppState>, headers: Asked) -> Response {
    let c = match caller(&s, &headers) {
        Ok(c) => c,
        Err(f) => return failure_response(f),
    };
    let call = s.ledger.call(move |engine| {
        let grant = grant_of(engine, &c)?;
        if grant.principal != crate::auth::Principal::Operator {
            return Err(Failure::new(
                Code::Forbidden,
                format!(
                    "{} may not rebuild the views: only the operator may",
                    grant.principal
                ),
            ));
        }
        engine
            .start_rebuild()
            .map_err(|e| Failure::new(e.code(), e.to_string()))
    });
    let response = match s.in_time(call).await {
        Ok(Ok(Ok(status))) => axum::Json(serde_json::json!({ "rebuild": status })).into_response(),
        Ok(Ok(Err(f))) => failure_response(f),
        Ok(Err(Gone)) => gone(),
        Err(_) => timed_out(s.opts.timeout),
    };
    s.ledger
        .metrics
        .http("/v1/rebuild", response.status().as_u16());
    response
}

async fn metrics(State(s): State<AppState>, headers: Asked) -> Response {
    if let Err(r) = admitted(&s, &headers, Permit::Read).await {
        return r;
    }
    let metrics = s.ledger.metrics.clone();
    // Lags are read on the ledger thread; a busy ledger still gets its
    // counters scraped.
    let observe = s.ledger.call(move |engine| metrics.observe_lags(engine));
    let _ = tokio::time::timeout(Duration::from_secs(2), observe).await;
    let mut r = (StatusCode::OK, s.ledger.metrics.render()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

async fn ready(State(s): State<AppState>) -> Response {
    if s.ledger.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "catching up with the log\n",
        )
            .into_response()
    }
}

/// Query parameters of `/v1/events`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventParams {
    /// A cursor (an event id), `beginning` or `end` (the default).
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    event: Option<String>,
}

/// Where a reader starts: `Last-Event-ID` (a reconnect) wins over `from`.
fn start_cursor(
    s: &AppState,
    last_event_id: Option<&str>,
    from: Option<&str>,
) -> Result<Cursor, Failure> {
    let log = s.ledger.log.as_ref();
    let cursor = match last_event_id.or(from) {
        Some(text) => Cursor::parse(text, log),
        None => Cursor::end(log),
    };
    cursor.map_err(|e| Failure::new(Code::InvalidRequest, e))
}

/// Follow published events from `cursor` until the server stops or the
/// receiver is dropped; `None` when the server follows as many streams as
/// it will.
fn follow(
    s: &AppState,
    slot: StreamSlot,
    caller: Caller,
    mut cursor: Cursor,
    filter: Filter,
) -> tokio::sync::mpsc::Receiver<events::Published> {
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    let log = s.ledger.log.clone();
    let stopping = s.stopping.clone();
    let state = s.clone();
    tokio::spawn(async move {
        let _slot = slot;
        let mut checked = std::time::Instant::now();
        while !stopping.load(Ordering::SeqCst) && !tx.is_closed() {
            // A stream lasts as long as its credential: a token revoked
            // or expired (or a grant narrowed) ends it within a recheck.
            if checked.elapsed() >= STREAM_RECHECK {
                checked = std::time::Instant::now();
                let still =
                    permit(&state, caller.clone(), Permit::Events(filter.scope.clone())).await;
                if let Err(f) = still {
                    if matches!(f.error.code, Code::Unauthenticated | Code::Forbidden) {
                        tracing::info!("an event stream ended: {}", f.error.message);
                        return;
                    }
                }
            }
            let (l, f, mut c) = (log.clone(), filter.clone(), cursor.clone());
            let read = tokio::task::spawn_blocking(move || {
                let got = events::next_batch(l.as_ref(), &mut c, &f, Duration::from_millis(200));
                (got, c)
            })
            .await;
            let Ok((got, c)) = read else { break };
            cursor = c;
            match got {
                Ok(batch) => {
                    for e in batch {
                        if tx.send(e).await.is_err() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!("following the published topic: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    });
    rx
}

/// One of the `--max-streams` slots, shared by every stream one holder
/// follows in turn (a socket that subscribes again keeps its slot).
type StreamSlot = Arc<Slot>;

fn stream_slot(s: &AppState, caller: &Caller) -> Result<StreamSlot, Failure> {
    s.streams
        .take(caller.share().as_deref())
        .map(Arc::new)
        .map_err(too_many_streams)
}

/// How often a followed stream's credential is checked again.
const STREAM_RECHECK: Duration = Duration::from_secs(2);

fn too_many_streams(full: Full) -> Failure {
    Failure::new(
        Code::Overloaded,
        match full {
            Full::All(max) => format!("the server follows {max} event streams already; retry shortly"),
            Full::Share(per) => format!(
                "this caller follows {per} event streams already (--max-streams-per-caller); retry shortly"
            ),
        },
    )
}

async fn sse_events(
    State(s): State<AppState>,
    headers: Asked,
    params: Result<QueryParams<EventParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(QueryParams(p)) = params else {
        return failure_response(Failure::new(
            Code::InvalidRequest,
            "query parameters are from, scope and event".to_string(),
        ));
    };
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let who = match caller(&s, &headers) {
        Ok(c) => c,
        Err(f) => {
            let r = failure_response(f);
            s.ledger.metrics.http("/v1/events", r.status().as_u16());
            return r;
        }
    };
    if let Err(f) = permit(&s, who.clone(), Permit::Events(p.scope.clone())).await {
        let r = failure_response(f);
        s.ledger.metrics.http("/v1/events", r.status().as_u16());
        return r;
    }
    let wanted = Filter {
        scope: p.scope.clone(),
        event: p.event.clone(),
    };
    if let Err((code, why)) = wanted.check() {
        let r = failure_response(Failure::new(code, why));
        s.ledger.metrics.http("/v1/events", r.status().as_u16());
        return r;
    }
    let cursor = match start_cursor(&s, last.as_deref(), p.from.as_deref()) {
        Ok(c) => c,
        Err(f) => return failure_response(f),
    };
    let filter = Filter {
        scope: p.scope,
        event: p.event,
    };
    s.ledger.metrics.http("/v1/events", 200);
    let slot = match stream_slot(&s, &who) {
        Ok(slot) => slot,
        Err(f) => return failure_response(f),
    };
    let rx = follow(&s, slot, who, cursor, filter);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        let e = rx.recv().await?;
        let event = Event::default().id(e.id).event("published").data(e.json);
        Some((Ok::<_, Infallible>(event), rx))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn ws(State(s): State<AppState>, headers: Asked, req: axum::extract::Request) -> Response {
    // Who is asking comes first: a caller without a credential learns
    // nothing, not even how to upgrade.
    let caller = match caller(&s, &headers) {
        Ok(c) => c,
        Err(f) => {
            let r = failure_response(f);
            s.ledger.metrics.http("/v1/ws", r.status().as_u16());
            return r;
        }
    };
    let (mut parts, _) = req.into_parts();
    let (on_upgrade, switching) =
        match ws_upgrade::accept(&parts.method, &parts.headers, &mut parts.extensions) {
            Ok(u) => u,
            Err((status, why)) => {
                return with_status(status, Failure::new(Code::InvalidRequest, why));
            }
        };
    s.ledger.metrics.http("/v1/ws", 101);
    // The upgraded socket outlives the HTTP connection it came on: it
    // keeps that connection's place under the cap until it closes.
    let place = parts.extensions.remove::<super::intake::ConnectionSlot>();
    // Read messages up to twice the limit, so one over it is answered
    // `line_too_long` and the socket goes on; past that it is closed 1009.
    let max = s.opts.max_body.saturating_mul(2);
    let watch = Arc::new(std::sync::Mutex::new(ws_upgrade::Watch::new(
        s.bodies.clone(),
        max,
    )));
    tokio::spawn(async move {
        let _place = place;
        if let Some(socket) = ws_upgrade::open(on_upgrade, max, watch.clone()).await {
            ws_session(s, caller, socket, watch).await;
        }
    });
    switching
}

/// `{"op":"subscribe", "from": …, "scope": …, "event": …}` on a socket.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Subscribe {
    #[allow(dead_code)]
    op: String,
    #[serde(default)]
    from: Option<String>,
    #[serde(flatten)]
    filter: Filter,
}

/// Where a socket's subscription starts, once its caller may follow the
/// events it asks for.
async fn subscribe_start(s: &AppState, caller: Caller, sub: &Subscribe) -> Result<Cursor, Failure> {
    permit(s, caller, Permit::Events(sub.filter.scope.clone())).await?;
    sub.filter
        .check()
        .map_err(|(code, why)| Failure::new(code, why))?;
    start_cursor(s, None, sub.from.as_deref())
}

/// Whether `caller`'s credential still holds: a token not revoked or
/// expired, a JWT or client certificate not past its lapse.
async fn credential_holds(s: &AppState, caller: &Caller) -> Result<(), Failure> {
    // Shutting down or slow: the socket ends for its own reasons.
    ask_grant(s, caller.clone()).await.unwrap_or(Ok(()))
}

/// The close frame of a socket whose credential lapsed (1008, policy).
fn lapsed_close(f: &Failure) -> Message {
    let reason: String = f.error.message.chars().take(120).collect();
    Message::Close(Some(CloseFrame {
        code: CloseCode::Policy,
        reason: reason.into(),
    }))
}

/// The close frame of a socket whose unfinished message ended it: 1008
/// past the time a body may take, 1013 (try again later) past the budget.
fn stalled_close(stalled: Stalled, opts: &HttpOptions) -> Message {
    let (code, reason) = match stalled {
        Stalled::TooSlow => (
            CloseCode::Policy,
            format!(
                "a message was not finished within {} ms (--request-timeout-ms)",
                opts.timeout.as_millis()
            ),
        ),
        Stalled::OverBudget => (
            CloseCode::Again,
            format!(
                "messages being assembled hold the server's budget of {} bytes (--body-budget-bytes); retry shortly",
                opts.body_budget.max(opts.max_body)
            ),
        ),
    };
    Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }))
}

/// The close frame of a socket the server ends as it stops: 1001.
fn going_away() -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::Away,
        reason: "the server is shutting down; connect again shortly".into(),
    }))
}

/// Resolves once `flag` is set (looked at every 50 ms).
async fn until_set(flag: &AtomicBool) {
    while !flag.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One socket: each text message one operation, each answer one message,
/// in order; after a `subscribe`, published events arrive on it too, as
/// `{"published": {…}, "id": "<cursor>"}`.
async fn ws_session(
    s: AppState,
    caller: Caller,
    socket: ws_upgrade::Socket,
    watch: Arc<std::sync::Mutex<ws_upgrade::Watch>>,
) {
    let (mut sink, mut incoming) = socket.split();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Message>(256);
    let writer = tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if sink.send(m).await.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    });
    let mut subscription: Option<tokio::task::JoinHandle<()>> = None;
    let mut socket_slot: Option<StreamSlot> = None;
    let text = |r: &Reply| Message::Text(reply_text(r).into());
    // The socket lasts as long as its credential: checked with each
    // message (every operation is) and on a timer while it is quiet.
    let mut recheck = tokio::time::interval(STREAM_RECHECK);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    recheck.tick().await;
    loop {
        let msg = tokio::select! {
            m = incoming.next() => match m {
                Some(m) => m,
                None => break,
            },
            () = until_set(&s.stopping) => {
                let _ = tx.send(going_away()).await;
                break;
            }
            _ = recheck.tick() => {
                if let Err(f) = credential_holds(&s, &caller).await {
                    let _ = tx.send(lapsed_close(&f)).await;
                    break;
                }
                // A message being assembled is held to the time a body
                // may take, and its bytes to the body budget.
                let stalled = watch.lock().ok().and_then(|w| w.stalled(s.opts.timeout));
                if let Some(stalled) = stalled {
                    let _ = tx.send(stalled_close(stalled, &s.opts)).await;
                    break;
                }
                continue;
            }
        };
        let msg = match msg {
            Ok(m) => m,
            Err(e) => {
                // Say why before closing: a client sees a code and a reason
                // instead of a bare close.
                let why = e.to_string();
                let code = if why.contains("too long") || why.contains("limit") {
                    CloseCode::Size
                } else if why.contains("UTF-8") || why.contains("utf-8") {
                    CloseCode::Invalid
                } else {
                    CloseCode::Protocol
                };
                let reason: String = why.chars().take(120).collect();
                let _ = tx
                    .send(Message::Close(Some(CloseFrame {
                        code,
                        reason: reason.into(),
                    })))
                    .await;
                break;
            }
        };
        if s.stopping.load(Ordering::SeqCst) {
            let _ = tx.send(going_away()).await;
            break;
        }
        let bytes = match &msg {
            Message::Text(t) if t.len() > s.opts.max_body => {
                let f = Failure::new(
                    Code::LineTooLong,
                    format!(
                        "a message of {} bytes is over the limit of {} bytes (--max-body-bytes)",
                        t.len(),
                        s.opts.max_body
                    ),
                );
                if tx.send(text(&Reply::Failed(f))).await.is_err() {
                    break;
                }
                continue;
            }
            Message::Text(t) => t.as_bytes().to_vec(),
            Message::Binary(_) => {
                let f = Failure::new(
                    Code::InvalidRequest,
                    "send operations as text messages, one JSON object each",
                );
                if tx.send(text(&Reply::Failed(f))).await.is_err() {
                    break;
                }
                continue;
            }
            Message::Close(_) => break,
            _ => continue,
        };
        let line = parse_line(&bytes);
        let reply = match line {
            Ok(v) if v["op"] == "subscribe" => match serde_json::from_value::<Subscribe>(v) {
                Err(e) => Reply::Failed(Failure::new(
                    Code::InvalidRequest,
                    format!("subscribe: {e}"),
                )),
                Ok(sub) => match subscribe_start(&s, caller.clone(), &sub).await {
                    Err(f) => Reply::Failed(f),
                    Ok(cursor) => {
                        if let Some(old) = subscription.take() {
                            old.abort();
                        }
                        let from = cursor.id();
                        // The socket's slot, taken at its first subscribe
                        // and kept for the ones after.
                        let slot = match socket_slot.clone() {
                            Some(slot) => slot,
                            None => match stream_slot(&s, &caller) {
                                Ok(slot) => {
                                    socket_slot = Some(slot.clone());
                                    slot
                                }
                                Err(f) => {
                                    if tx.send(text(&Reply::Failed(f))).await.is_err() {
                                        break;
                                    }
                                    continue;
                                }
                            },
                        };
                        let mut events = follow(&s, slot, caller.clone(), cursor, sub.filter);
                        let ack = serde_json::json!({"ok": true, "subscribed": true, "from": from});
                        if tx
                            .send(Message::Text(ack.to_string().into()))
                            .await
                            .is_err()
                        {
                            break;
                        }
                        let out = tx.clone();
                        subscription = Some(tokio::spawn(async move {
                            while let Some(e) = events.recv().await {
                                let m = format!("{{\"published\":{},\"id\":\"{}\"}}", e.json, e.id);
                                if out.send(Message::Text(m.into())).await.is_err() {
                                    break;
                                }
                            }
                        }));
                        continue;
                    }
                },
            },
            line => match s.in_time(s.ledger.ops(caller.clone(), vec![line])).await {
                Ok(Ok(Ok(mut r))) => r.pop().unwrap_or_else(|| {
                    Reply::Failed(Failure::new(Code::ShuttingDown, Gone.to_string()))
                }),
                Ok(Ok(Err(f))) => Reply::Failed(f),
                Ok(Err(Gone)) => Reply::Failed(Failure::new(Code::ShuttingDown, Gone.to_string())),
                Err(_) => Reply::Failed(Failure::new(
                    Code::Timeout,
                    format!("no answer within {} ms", s.opts.timeout.as_millis()),
                )),
            },
        };
        if tx.send(text(&reply)).await.is_err() {
            break;
        }
        if let Reply::Failed(f) = &reply {
            if f.error.code == Code::Unauthenticated {
                let _ = tx.send(lapsed_close(f)).await;
                break;
            }
        }
    }
    if let Some(sub) = subscription {
        sub.abort();
    }
    drop(tx);
    let _ = writer.await;
}

#[cfg(test)]
mod accept_tests {
    use super::*;

    fn prefers(accept: &str) -> bool {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
        prefers_event_stream(&h)
    }

    #[test]
    fn the_highest_q_wins_and_a_tie_goes_to_the_first() {
        assert!(prefers("text/event-stream"));
        assert!(!prefers("application/json"));
        assert!(prefers("application/json;q=0.1, text/event-stream;q=0.9"));
        assert!(!prefers("text/event-stream;q=0.5, application/json"));
        assert!(prefers("text/event-stream, application/json"));
        assert!(!prefers("application/json, text/event-stream"));
        assert!(!prefers("text/event-stream;q=0"));
        assert!(prefers("Text/Event-Stream"));
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("Application/X-NDJSON"),
        );
        assert!(is_ndjson(&h));
    }
}
