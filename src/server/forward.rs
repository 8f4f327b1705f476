//! Forwarding to the owner: in a cluster, a request for a chain whose
//! ledger partition another instance owns is answered by that instance.
//! The ledger thread refers such lines (`not_owner` with a referral, see
//! `engine::placement`); this module sends them on with the caller's own
//! credential and relays the owner's answers, so any instance takes any
//! request. The owner authenticates and authorizes the caller itself.
//!
//! A forwarded request says so (`x-agentledger-forwarded-by`) and is never
//! forwarded again: an owner that lost the partition meanwhile answers
//! `not_owner`, which the caller sees as 503 with `Retry-After`. The
//! header grants nothing; a caller that sends it only gives up forwarding.

use super::answer::reply_text;
use super::ledger::Caller;
use super::state::AppState;
use crate::auth::assertion;
use crate::auth::Grant;
use crate::codes::Code;
use crate::engine::Referral;
use crate::protocol::{Failure, Reply};
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};

/// Marks a request one instance forwarded to another; its value is the
/// forwarding instance's id.
pub(super) const FORWARDED_BY: &str = "x-agentledger-forwarded-by";

/// The request headers an owner needs to answer as this instance would:
/// the credential, the body's and the answer's types, the trace context.
const PASSED_ON: &[&str] = &[
    "authorization",
    "content-type",
    "accept",
    "traceparent",
    "tracestate",
    // A run's MCP endpoint: the session, its revision, a stream resumed.
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// The answer headers relayed to the caller besides the body's type.
const RELAYED: &[&str] = &[
    "retry-after",
    "www-authenticate",
    "mcp-session-id",
    super::answer::EXIT_HEADER,
];

/// The headers a connection's operations are forwarded with (a
/// WebSocket's: its upgrade request's credential and trace context).
pub(super) fn credential(headers: &HeaderMap) -> HeaderMap {
    let mut kept = HeaderMap::new();
    for name in PASSED_ON
        .iter()
        .filter(|n| **n != "content-type" && **n != "accept")
    {
        for value in headers.get_all(*name) {
            if let Ok(n) = HeaderName::from_bytes(name.as_bytes()) {
                kept.append(n, value.clone());
            }
        }
    }
    kept
}

/// Whether this request was forwarded here by another instance.
pub(super) fn is_forwarded(headers: &HeaderMap) -> bool {
    headers.contains_key(FORWARDED_BY)
}

/// Whether lines of chains another instance owns are referred there: the
/// caller's credential means the same to every instance (a ledger token,
/// a JWT), or this instance can vouch for the caller with the cluster key
/// (the operator's session token is this instance's own, a client
/// certificate cannot be passed on), or the request was forwarded here
/// and this instance only re-checks that it owns what it is asked.
/// Otherwise the request is decided here, as on a single instance.
pub(super) fn refers(s: &AppState, caller: &Caller, headers: &HeaderMap) -> bool {
    is_forwarded(headers) || passed_on(caller, headers) || s.opts.cluster_key.is_some()
}

/// Whether the caller's own credential is forwarded (else the forwarding
/// instance vouches for it with an assertion).
fn passed_on(caller: &Caller, headers: &HeaderMap) -> bool {
    match caller {
        Caller::Operator => false,
        Caller::Token(_) => true,
        Caller::Granted(..) => headers.contains_key(header::AUTHORIZATION),
    }
}

/// The assertion `caller`'s forward to `target` carries when its own
/// credential is not passed on: the grant this instance authenticated,
/// made with the cluster key for this body.
fn assertion_for(s: &AppState, caller: &Caller, target: &str, body: &[u8]) -> Option<String> {
    let key = s.opts.cluster_key.as_deref()?;
    let operator = Grant::operator();
    let (grant, lapses) = match caller {
        Caller::Operator => (&operator, None),
        Caller::Granted(grant, lapses) => (&**grant, *lapses),
        Caller::Token(_) => return None,
    };
    Some(assertion::make(
        key,
        &me(s),
        grant,
        lapses,
        target,
        &assertion::body_digest(body),
        super::ledger::wall_clock_ms(),
    ))
}

/// This instance's id in the cluster.
fn me(s: &AppState) -> String {
    let view = s.ledger.cluster.lock().unwrap_or_else(|e| e.into_inner());
    view.me.clone()
}

/// What forwarding to `to` failed with, as the caller is told.
fn unreachable(to: &Referral, why: impl std::fmt::Display) -> Failure {
    Failure::new(
        Code::NotOwner,
        format!("{to}, which could not be asked ({why}); ask again in a moment"),
    )
}

/// One request sent on to the owner of its chain.
pub(super) struct Outgoing<'a> {
    pub to: &'a Referral,
    pub method: Method,
    /// The path and query, as asked here.
    pub target: &'a str,
    /// Replaces the caller's `Content-Type` (a body of some of its lines).
    pub content_type: Option<&'static str>,
    pub body: Option<Bytes>,
    /// Answered within the request timeout, read whole before it is
    /// relayed; else relayed as it comes, however long (an MCP session's
    /// event stream).
    pub timed: bool,
}

/// Send `out` to the owner for `caller`, with the caller's headers.
pub(super) async fn send(
    s: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    out: Outgoing<'_>,
) -> Result<reqwest::Response, Failure> {
    let to = out.to;
    let url = format!("{}{}", to.owner.url.trim_end_matches('/'), out.target);
    let vouched = if passed_on(caller, headers) {
        None
    } else {
        // Its credential means nothing there (or cannot travel): vouch.
        let body = out.body.as_deref().unwrap_or_default();
        match assertion_for(s, caller, out.target, body) {
            Some(a) => Some(a),
            None => {
                return Err(Failure::new(
                    Code::NotOwner,
                    format!(
                    "{to}; this instance cannot vouch for the caller there without --cluster-key"
                ),
                ))
            }
        }
    };
    let mut request = s.peers.request(out.method, url);
    if let Some(body) = out.body {
        request = request.body(body);
    }
    if out.timed {
        request = request.timeout(s.opts.timeout);
    }
    for name in PASSED_ON {
        let replaced = out.content_type.is_some() && *name == "content-type";
        if replaced || (vouched.is_some() && *name == "authorization") {
            continue;
        }
        for value in headers.get_all(*name) {
            request = request.header(*name, value.as_bytes());
        }
    }
    if let Some(t) = out.content_type {
        request = request.header(header::CONTENT_TYPE, t);
    }
    if let Some(a) = vouched {
        request = request.header(assertion::HEADER, a);
    }
    request = request.header(FORWARDED_BY, me(s));
    s.ledger.metrics.forwarded();
    request.send().await.map_err(|e| unreachable(to, e))
}

/// Forward a whole request (one operation, or a read) and relay the
/// owner's answer as it is (status, body, the headers that matter).
pub(super) async fn whole(
    s: &AppState,
    caller: &Caller,
    to: &Referral,
    target: &str,
    headers: &HeaderMap,
    body: Option<Bytes>,
) -> Response {
    let method = if body.is_some() {
        Method::POST
    } else {
        Method::GET
    };
    let out = Outgoing {
        to,
        method,
        target,
        content_type: None,
        body,
        timed: true,
    };
    relay(s, caller, headers, out).await
}

/// Send `out` and relay the owner's answer as it is: its status, body and
/// the headers that matter.
pub(super) async fn relay(
    s: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    out: Outgoing<'_>,
) -> Response {
    let (to, timed) = (out.to, out.timed);
    let answer = match send(s, caller, headers, out).await {
        Ok(a) => a,
        Err(f) => return super::answer::failure_response(f),
    };
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut relayed = HeaderMap::new();
    for name in std::iter::once(header::CONTENT_TYPE.as_str()).chain(RELAYED.iter().copied()) {
        if let Some(v) = answer.headers().get(name) {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_bytes(v.as_bytes()),
            ) {
                relayed.insert(n, v);
            }
        }
    }
    let body = if timed {
        match answer.bytes().await {
            Ok(b) => Body::from(b),
            Err(e) => return super::answer::failure_response(unreachable(to, e)),
        }
    } else {
        Body::from_stream(answer.bytes_stream())
    };
    let mut r = (status, body).into_response();
    r.headers_mut().extend(relayed);
    r
}

/// Forward the referred lines of an ndjson request, each owner's in one
/// request of their own in order, and put the owners' answer lines in
/// place of the referrals in `texts` (one answer line per request line).
pub(super) async fn lines(
    s: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    raw: &[&[u8]],
    replies: &[Reply],
    texts: &mut [String],
) {
    let mut todo: Vec<(usize, &Referral)> = replies
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.referral().map(|to| (i, to)))
        .collect();
    while let Some(&(_, to)) = todo.first() {
        let (mine, rest): (Vec<_>, Vec<_>) = todo
            .into_iter()
            .partition(|(_, t)| t.owner.url == to.owner.url);
        todo = rest;
        let mut body = Vec::new();
        for (i, _) in &mine {
            body.extend_from_slice(raw[*i]);
            body.push(b'\n');
        }
        let ndjson = Some("application/x-ndjson");
        let out = Outgoing {
            to,
            method: Method::POST,
            target: "/v1/ops",
            content_type: ndjson,
            body: Some(body.into()),
            timed: true,
        };
        let answered = match send(s, caller, headers, out).await {
            Ok(a) => relayed_lines(to, a, mine.len()).await,
            Err(f) => Err(f),
        };
        match answered {
            Ok(got) => {
                for ((i, _), line) in mine.iter().zip(got) {
                    texts[*i] = line;
                }
            }
            Err(f) => {
                for (i, _) in &mine {
                    texts[*i] = reply_text(&Reply::Failed(f.clone()));
                }
            }
        }
    }
}

/// The owner's answer lines, one per line sent: its failure for every
/// line when it refused the request as a whole.
async fn relayed_lines(
    to: &Referral,
    answer: reqwest::Response,
    sent: usize,
) -> Result<Vec<String>, Failure> {
    let ok = answer.status().is_success();
    let text = answer.text().await.map_err(|e| unreachable(to, e))?;
    if !ok {
        // One failure envelope for the whole request (401, 413, 503 …).
        let f: Failure = serde_json::from_str(text.trim())
            .map_err(|_| unreachable(to, format!("it answered {:?}", cut(&text))))?;
        return Err(f);
    }
    let got: Vec<String> = text.lines().map(str::to_string).collect();
    if got.len() != sent {
        return Err(unreachable(
            to,
            format!("it answered {} lines to {sent}", got.len()),
        ));
    }
    Ok(got)
}

fn cut(text: &str) -> String {
    text.chars().take(200).collect()
}

/// The answer of an instance asked (by forwarding) about a chain it does
/// not own: retry, it moved.
pub(super) fn not_owner(to: &Referral) -> Failure {
    let mut f = Failure::new(
        Code::NotOwner,
        format!("{to}, not this one; ask again in a moment"),
    );
    f.referral = Some(Box::new(to.clone()));
    f
}
