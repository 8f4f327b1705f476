//! `/v1/runs/{run}/mcp`: a run's governed tools as a Model Context
//! Protocol server (Streamable HTTP, on `rmcp`), so that an agent framework
//! reaches the ledger through the MCP client it already has. The endpoint
//! is bound to one run and answers only the run's agent (or the operator);
//! the tools themselves are `crate::mcp`'s. Each call is the same protocol
//! operation `/v1/ops` takes, for the same caller, decided by the same
//! engine on the ledger thread: this layer decides nothing. It sits
//! outside the middleware that turns errors into the ledger's answer
//! object, since MCP clients expect JSON-RPC errors and HTTP statuses.

use super::access::{body_asserted, caller, Asked};
use super::ledger::{grant_of, Caller, Gone};
use super::state::{AppState, HttpOptions};
use crate::auth::{authorize, facts, Action};
use crate::codes::Code;
use crate::mcp::{Binding, RunLedger, RunTools};
use crate::protocol::{Failure, ReadArtifactOp, Reply, Request};
use axum::body::Body;
use axum::http::{header, HeaderValue, Request as HttpRequest, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::model::ReadResourceResult;
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::json;
use std::sync::Arc;
use tower_service::Service as _;

mod span;
use span::Seen;

/// Who asks, about which run: found by the gate before the MCP service
/// sees the request, and handed to the tools in the request's extensions.
#[derive(Clone)]
struct Bound {
    binding: Binding,
    /// The root of the run's chain (its spans' trace).
    root: Option<String>,
    /// Set when a tool call's result was an error (for its span).
    tool_error: Arc<std::sync::atomic::AtomicBool>,
    /// The span exported for a tool call, which the records it writes
    /// name (`None` when the server exports no spans).
    span: Option<crate::codec::SpanRef>,
    caller: Caller,
    /// The server the calls go through (per request, so that no session
    /// keeps the ledger alive past the server's end).
    state: AppState,
}

/// The server's ledger, as a run's tools see it: each call goes to the
/// ledger thread as the operation `/v1/ops` would take, for the caller the
/// gate bound to the request.
#[derive(Clone)]
pub(super) struct HttpLedger {
    answered: Arc<crate::mcp::Answered>,
}

/// The MCP service mounted at every run's endpoint, and its sessions
/// (counted, so that their number stays within `--max-streams`).
#[derive(Clone)]
pub(super) struct Endpoint {
    service: StreamableHttpService<RunTools<HttpLedger>, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    /// Who began each session: a session is answered only for its own
    /// caller (another credential naming it is told there is none).
    owners: Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
}

/// Tool results kept for retries, at most (the oldest forgotten first).
const ANSWERS_KEPT: usize = 4096;

/// The service for `state`'s server: sessions in memory (each closed after
/// five idle minutes, rmcp's default), JSON answers where the client
/// accepts them, and the Host header held to loopback names, the bound
/// address and the names the operator allowed.
pub(super) fn endpoint(opts: &HttpOptions) -> Endpoint {
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    hosts.extend(opts.allowed_hosts.iter().cloned());
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_json_response(true);
    let sessions = Arc::new(LocalSessionManager::default());
    let ledger = HttpLedger {
        answered: Arc::new(crate::mcp::Answered::new(ANSWERS_KEPT)),
    };
    Endpoint {
        service: StreamableHttpService::new(
            move || Ok(RunTools(ledger.clone())),
            sessions.clone(),
            config,
        ),
        sessions,
        owners: Arc::default(),
    }
}

impl Endpoint {
    /// Whether session `id` may be used by `who`: it began it, or the
    /// session is not one this endpoint began (rmcp then answers 404).
    fn may_use(&self, id: &str, who: &str) -> bool {
        self.owners
            .lock()
            .map(|o| o.get(id).is_none_or(|owner| owner == who))
            .unwrap_or(false)
    }

    /// Remember that `who` began session `id`, forgetting sessions that
    /// ended once more are remembered than may be held.
    async fn began(&self, id: &str, who: &str, max: usize) {
        // The count first: no lock is held across the await below.
        let held = self.owners.lock().map(|o| o.len()).unwrap_or(0);
        let live: Option<std::collections::HashSet<String>> = match held {
            n if n >= max => Some(
                self.sessions
                    .sessions
                    .read()
                    .await
                    .keys()
                    .map(|k| k.to_string())
                    .collect(),
            ),
            _ => None,
        };
        if let Ok(mut o) = self.owners.lock() {
            if let Some(live) = live {
                o.retain(|k, _| live.contains(k));
            }
            o.insert(id.to_string(), who.to_string());
        }
    }
}

/// Whether `request` would start a session while `max` are held: a POST
/// with no `Mcp-Session-Id` (an `initialize`) once the sessions are full.
async fn no_room(request: &axum::http::request::Parts, e: &Endpoint, max: usize) -> bool {
    request.method == axum::http::Method::POST
        && !request.headers.contains_key("mcp-session-id")
        && e.sessions.sessions.read().await.len() >= max
}

/// Where the protected-resource metadata (RFC 9728) of the endpoint at
/// `path` is, on the server the request named.
fn metadata_url(s: &AppState, host: &str, path: &str) -> String {
    let scheme = if s.opts.tls.is_some() {
        "https"
    } else {
        "http"
    };
    format!("{scheme}://{host}/.well-known/oauth-protected-resource{path}")
}

/// A refusal at the gate: an HTTP status, the ledger's code in a small
/// JSON body, and for 401 where to learn how to authenticate (RFC 9728).
fn refused(status: StatusCode, f: &Failure, metadata: Option<&str>) -> Response {
    let mut r = (
        status,
        axum::Json(json!({"error": {"code": f.error.code, "message": f.error.message}})),
    )
        .into_response();
    if status == StatusCode::UNAUTHORIZED {
        let challenge = match metadata {
            Some(url) => format!("Bearer realm=\"agentledger\", resource_metadata=\"{url}\""),
            None => "Bearer realm=\"agentledger\"".to_string(),
        };
        if let Ok(v) = HeaderValue::from_str(&challenge) {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
    }
    r
}

/// `GET /.well-known/oauth-protected-resource/v1/runs/{run}/mcp`: what a
/// client needs to get a token for a run's endpoint (RFC 9728): the
/// resource, that the token goes in the `Authorization` header, and the
/// JWT issuer the server trusts, if it trusts one (else tokens come from
/// the operator, `agentledger token issue`).
pub(super) async fn protected_resource(
    s: AppState,
    run: String,
    headers: axum::http::HeaderMap,
) -> Response {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let scheme = if s.opts.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let issuers: Vec<&str> = s
        .opts
        .jwt
        .iter()
        .map(|j| j.issuer())
        .filter(|i| !i.is_empty())
        .collect();
    axum::Json(json!({
        "resource": format!("{scheme}://{host}/v1/runs/{}/mcp", crate::encode::path_segment(&run)),
        "authorization_servers": issuers,
        "bearer_methods_supported": ["header"],
        "resource_name": "agentledger: the governed tools of one agent run",
    }))
    .into_response()
}

/// Who may use run `run`'s tools, and which names it may read: asked on
/// the ledger thread, by the same policy `/v1/ops` applies to
/// `read_artifact` of that run.
fn admit(
    engine: &mut crate::engine::Engine,
    caller: &Caller,
    run: &str,
    state: AppState,
    refer: bool,
) -> Result<Bound, Failure> {
    let elsewhere = engine.referral_asked(refer, crate::engine::Whose::Run(run));
    if let Some(to) = elsewhere.map_err(|e| Failure::new(e.code(), e.to_string()))? {
        return Err(super::forward::not_owner(&to));
    }
    let grant = grant_of(engine, caller)?;
    let views = engine.views();
    let damaged = |e: crate::views::ViewError| Failure::new(Code::ViewError, e.to_string());
    let found = views.run(run).map_err(damaged)?.ok_or_else(|| {
        Failure::new(
            Code::UnknownRun,
            format!("run {run:?} is not in the ledger: it has no MCP endpoint"),
        )
    })?;
    let asked = Request::ReadArtifact(ReadArtifactOp {
        run: run.to_string(),
        name: String::new(),
        base64: false,
    });
    let facts = facts::gather(views, &asked).map_err(damaged)?;
    authorize(&grant, Action::Op(&asked), &facts)
        .map_err(|f| Failure::new(Code::Forbidden, f.to_string()))?;
    Ok(Bound {
        binding: Binding {
            run: run.to_string(),
            agent: found.agent.clone(),
            names: crate::mcp::names_of(&found),
            who: caller.share().unwrap_or_else(|| "operator".into()),
            session: None,
        },
        root: found.root.clone(),
        tool_error: Arc::default(),
        span: None,
        caller: caller.clone(),
        state,
    })
}

/// Every method on `/v1/runs/{run}/mcp`: the caller authenticated and held
/// to the run, then the request handed to the MCP service.
pub(super) async fn gate(
    s: AppState,
    run: String,
    request: HttpRequest<Body>,
    endpoint: Endpoint,
) -> Response {
    let (parts, body) = request.into_parts();
    let asked = Asked::of(&parts);
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost")
        .to_string();
    let metadata = metadata_url(&s, &host, parts.uri.path());
    let response = match caller(&s, &asked) {
        Err(f) => refused(StatusCode::UNAUTHORIZED, &f, Some(&metadata)),
        Ok(who) => {
            // A run another instance decides has its endpoint (and its
            // sessions) there: relayed whole.
            let refer = super::forward::refers(&s, &who, &parts.headers);
            let forwarding = refer.then(|| who.clone());
            let (asked_run, state) = (run.clone(), s.clone());
            match s
                .in_time(
                    s.ledger
                        .call(move |e| admit(e, &who, &asked_run, state, refer)),
                )
                .await
            {
                Err(_) => refused(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &Failure::new(Code::Timeout, "the ledger did not answer in time"),
                    None,
                ),
                Ok(Err(Gone)) => refused(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &Failure::new(Code::ShuttingDown, Gone.to_string()),
                    None,
                ),
                Ok(Ok(Err(f))) if f.referral.is_some() => {
                    elsewhere(&s, forwarding.as_ref(), (&run, &f), &parts, body).await
                }
                Ok(Ok(Err(f))) => {
                    // A listener run (its id does not name its chain) may
                    // be held by another instance: asked where, relayed.
                    match super::locate::run_held(&s, forwarding.as_ref(), &run, &parts.headers, &f)
                        .await
                    {
                        Some(f) => {
                            elsewhere(&s, forwarding.as_ref(), (&run, &f), &parts, body).await
                        }
                        // No instance has claimed its partition yet.
                        None if f.error.code == Code::NotOwner => {
                            let mut r = refused(StatusCode::SERVICE_UNAVAILABLE, &f, None);
                            super::answer::ask_again(&mut r);
                            r
                        }
                        None => {
                            let status = match f.error.code {
                                Code::Unauthenticated => StatusCode::UNAUTHORIZED,
                                Code::Forbidden => StatusCode::FORBIDDEN,
                                Code::UnknownRun => StatusCode::NOT_FOUND,
                                _ => StatusCode::INTERNAL_SERVER_ERROR,
                            };
                            refused(status, &f, Some(&metadata))
                        }
                    }
                }
                Ok(Ok(Ok(_))) if no_room(&parts, &endpoint, s.opts.max_streams).await => {
                    let mut r = refused(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &Failure::new(
                            Code::Overloaded,
                            format!(
                                "the server holds {} MCP sessions, its most (--max-streams); end one (DELETE with its Mcp-Session-Id) or retry later",
                                s.opts.max_streams
                            ),
                        ),
                        None,
                    );
                    super::answer::ask_again(&mut r);
                    r
                }
                Ok(Ok(Ok(mut bound))) => {
                    bound.binding.session = parts
                        .headers
                        .get("mcp-session-id")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    let body = if parts.method == axum::http::Method::POST {
                        match screened(body).await {
                            // Forwarded: the body its assertion was made for.
                            Ok((b, m)) => match body_asserted(&s, &asked, &b) {
                                Ok(()) => Ok((Body::from(b), Some(m))),
                                Err(f) => Err(refused(StatusCode::UNAUTHORIZED, &f, None)),
                            },
                            Err(r) => Err(r),
                        }
                    } else {
                        Ok((body, None))
                    };
                    match body {
                        Err(refusal) => refusal,
                        Ok(_)
                            if bound
                                .binding
                                .session
                                .as_deref()
                                .is_some_and(|id| !endpoint.may_use(id, &bound.binding.who)) =>
                        {
                            rpc_error(
                                StatusCode::NOT_FOUND,
                                -32001,
                                "no such session for this caller: initialize a new one".into(),
                            )
                        }
                        Ok((body, message)) => {
                            let who = bound.binding.who.clone();
                            let fresh = bound.binding.session.is_none();
                            // Only a server that exports spans keeps what they need.
                            let seen = message
                                .filter(|_| s.ledger.live_spans.is_some())
                                .map(|m| Seen::of(&m, &parts, &bound));
                            // A tool call's records name its span.
                            bound.span = seen
                                .as_ref()
                                .filter(|s| s.request.method.as_deref() == Some("tools/call"))
                                .map(Seen::span_ref);
                            let mut service = endpoint.service.clone();
                            let mut request = HttpRequest::from_parts(parts, body);
                            request.extensions_mut().insert(bound);
                            let r = match service.call(request).await {
                                Ok(r) => r.map(Body::new),
                                Err(never) => match never {},
                            };
                            let session = r
                                .headers()
                                .get("mcp-session-id")
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_string);
                            if let Some(id) = session.as_deref().filter(|_| fresh) {
                                endpoint.began(id, &who, s.opts.max_streams).await;
                            }
                            match (&s.ledger.live_spans, seen) {
                                (Some(live), Some(seen)) => seen.span_when_answered(
                                    r,
                                    live.clone(),
                                    session,
                                    s.ledger.metrics.clone(),
                                ),
                                _ => r,
                            }
                        }
                    }
                }
            }
        }
    };
    s.ledger
        .metrics
        .http("/v1/runs/{run}/mcp", response.status().as_u16());
    response
}

/// A request for the endpoint of a run whose chain another instance
/// decides: relayed there whole (an event stream as it comes, however
/// long), with the caller's credential or an assertion for it. A request
/// that was itself forwarded, or of a caller that cannot be forwarded, is
/// refused 503 with `Retry-After` (ownership moved meanwhile).
async fn elsewhere(
    s: &AppState,
    caller: Option<&Caller>,
    (run, f): (&str, &Failure),
    parts: &axum::http::request::Parts,
    body: Body,
) -> Response {
    let (Some(caller), Some(to), false) = (
        caller,
        f.referral.as_deref(),
        super::forward::is_forwarded(&parts.headers),
    ) else {
        let mut r = refused(StatusCode::SERVICE_UNAVAILABLE, f, None);
        super::answer::ask_again(&mut r);
        return r;
    };
    let Ok(bytes) = axum::body::to_bytes(body, MAX_MESSAGE_BYTES).await else {
        return rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            -32600,
            format!(
                "the message exceeds {MAX_MESSAGE_BYTES} bytes (or its body could not be read)"
            ),
        );
    };
    let out = |to| super::forward::Outgoing {
        to,
        method: parts.method.clone(),
        target: parts.uri.path_and_query().map_or("/", |p| p.as_str()),
        content_type: None,
        body: (!bytes.is_empty()).then(|| bytes.clone()),
        timed: parts.method != axum::http::Method::GET,
    };
    let answer = super::forward::relay(s, caller, &parts.headers, out(to)).await;
    // The owner guessed (a run not held here taken for a root) does not
    // know it: to the instance the others say holds it.
    if answer.status() == StatusCode::NOT_FOUND {
        let subject = super::locate::Subject::Run(run.to_string());
        let next = super::locate::elsewhere(s, caller, &parts.headers, &subject, Some(&to.owner));
        if let Some(next) = next.await {
            return super::forward::relay(s, caller, &parts.headers, out(&next)).await;
        }
    }
    answer
}

/// The most a JSON-RPC message posted to an endpoint may be.
const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// A JSON-RPC error answered at the gate, before any session sees the
/// message: `code` as JSON-RPC 2.0 numbers them, `id` null (the message
/// could not be read for one).
fn rpc_error(status: StatusCode, code: i64, message: String) -> Response {
    (
        status,
        axum::Json(
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}}),
        ),
    )
        .into_response()
}

/// A POSTed message read whole (within [`MAX_MESSAGE_BYTES`]) and held to
/// what MCP takes: one JSON-RPC object, never a batch (removed from the
/// protocol in 2025-06-18). Anything else is answered here, as JSON-RPC
/// errors do: a parse error, an invalid request, a message too large.
async fn screened(body: Body) -> Result<(axum::body::Bytes, serde_json::Value), Response> {
    let bytes = axum::body::to_bytes(body, MAX_MESSAGE_BYTES)
        .await
        .map_err(|_| {
            rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                -32600,
                format!(
                    "the message exceeds {MAX_MESSAGE_BYTES} bytes (or its body could not be read)"
                ),
            )
        })?;
    match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Err(e) => Err(rpc_error(
            StatusCode::BAD_REQUEST,
            -32700,
            format!("parse error: the message is not JSON ({e})"),
        )),
        Ok(serde_json::Value::Array(_)) => Err(rpc_error(
            StatusCode::BAD_REQUEST,
            -32600,
            "invalid request: a batch (JSON array); MCP takes one JSON-RPC message per POST".into(),
        )),
        Ok(message @ serde_json::Value::Object(_)) => Ok((bytes, message)),
        Ok(_) => Err(rpc_error(
            StatusCode::BAD_REQUEST,
            -32600,
            "invalid request: a JSON-RPC message is a JSON object".into(),
        )),
    }
}

/// The run a request is about, as the gate bound it.
fn bound_of(ctx: &RequestContext<RoleServer>) -> Result<Bound, McpError> {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<Bound>())
        .cloned()
        .ok_or_else(|| McpError::internal_error("the request was not admitted to a run", None))
}

impl RunLedger for HttpLedger {
    fn binding(&self, ctx: &RequestContext<RoleServer>) -> Result<Binding, McpError> {
        bound_of(ctx).map(|b| b.binding)
    }

    async fn decide(&self, ctx: &RequestContext<RoleServer>, op: serde_json::Value) -> Reply {
        let b = match bound_of(ctx) {
            Ok(b) => b,
            Err(e) => return Reply::Failed(Failure::new(Code::IoError, e.message.to_string())),
        };
        let s = &b.state;
        match s
            .in_time(s.ledger.ops_within(b.caller, b.span, vec![Ok(op)]))
            .await
        {
            Ok(Ok(Ok(mut replies))) if !replies.is_empty() => replies.swap_remove(0),
            Ok(Ok(Err(f))) => Reply::Failed(f),
            Ok(Ok(Ok(_))) | Ok(Err(Gone)) => {
                Reply::Failed(Failure::new(Code::ShuttingDown, Gone.to_string()))
            }
            Err(_) => Reply::Failed(Failure::new(
                Code::Timeout,
                "the ledger did not answer in time",
            )),
        }
    }

    async fn read(
        &self,
        ctx: &RequestContext<RoleServer>,
        uri: String,
    ) -> Result<ReadResourceResult, McpError> {
        let b = bound_of(ctx)?;
        let s = &b.state;
        let run = b.binding.run;
        match s
            .in_time(
                s.ledger
                    .call(move |e| crate::mcp::read_resource(e, &run, &uri)),
            )
            .await
        {
            Ok(Ok(read)) => read,
            Ok(Err(Gone)) => Err(McpError::internal_error(Gone.to_string(), None)),
            Err(_) => Err(McpError::internal_error(
                "the ledger did not answer in time",
                None,
            )),
        }
    }

    fn answered(&self) -> &crate::mcp::Answered {
        &self.answered
    }

    fn called(&self, ctx: &RequestContext<RoleServer>, tool_error: bool) {
        if let Ok(b) = bound_of(ctx) {
            b.tool_error
                .store(tool_error, std::sync::atomic::Ordering::SeqCst);
        }
    }
}
