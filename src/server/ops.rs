//! `POST /v1/ops`: one operation as JSON, or many as ndjson; one SSE event
//! when the caller prefers `text/event-stream`.

use super::access::{body_asserted, caller, request_slot, Asked};
use super::answer::{
    failure_response, gone, reply_response, reply_text, status_of, timed_out, with_status,
};
use super::forward;
use super::ledger::{Caller, Gone, Line};
use super::locate;
use super::state::AppState;
use crate::apply::parse_line;
use crate::codes::Code;
use crate::protocol::{Failure, Reply};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// Whether the caller prefers one SSE event to a JSON body.
pub(super) fn prefers_event_stream(headers: &HeaderMap) -> bool {
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

pub(super) fn is_ndjson(headers: &HeaderMap) -> bool {
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
pub(super) fn ndjson_lines(body: &[u8]) -> Vec<Line> {
    ndjson_raw(body).map(parse_line).collect()
}

/// The bytes of each request line of an ndjson body.
fn ndjson_raw(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    body.split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
}

pub(super) async fn ops(
    State(s): State<AppState>,
    headers: Asked,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let bound = |b: &Bytes| body_asserted(&s, &headers, b);
    let response = match caller(&s, &headers).and_then(|c| {
        body.as_ref().map_or(Ok(()), bound)?;
        Ok(c)
    }) {
        Ok(c) => ops_inner(&s, c, &headers, body).await,
        Err(f) => failure_response(f),
    };
    s.ledger.metrics.http("/v1/ops", response.status().as_u16());
    response
}

pub(super) async fn ops_inner(
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
    let parsed = |body: &[u8]| {
        if ndjson {
            ndjson_lines(body)
        } else {
            vec![parse_line(body)]
        }
    };
    let mut lines = Some(parsed(&body));
    let count = lines.as_ref().map_or(0, Vec::len);
    if count > crate::model::limits::MAX_OPS_PER_BODY {
        // A request too large in operations rather than bytes: 413 all the same.
        return with_status(StatusCode::PAYLOAD_TOO_LARGE, Failure::new(
            Code::LimitExceeded,
            format!(
                "the body holds {} operations; at most {} are answered per request (nothing was applied)",
                count,
                crate::model::limits::MAX_OPS_PER_BODY
            ),
        ));
    }
    let refer = forward::refers(s, &caller, headers);
    // Who the owner is asked for, if a line goes there.
    let forwarding = refer.then(|| caller.clone());
    let started = std::time::Instant::now();
    let forwarded = forward::is_forwarded(headers);
    let replies = loop {
        // Parsed again only for a second ask (rare: see below).
        let asking = lines.take().unwrap_or_else(|| parsed(&body));
        let asked = s.ledger.ops_referring(caller.clone(), asking, refer);
        let replies = match s.in_time(asked).await {
            Ok(Ok(Ok(r))) => r,
            Ok(Ok(Err(f))) => return failure_response(f),
            Ok(Err(Gone)) => return gone(),
            Err(_) => return timed_out(s.opts.timeout),
        };
        // Nothing decided, for a partition nobody has claimed yet: wait
        // (bounded) for its new owner rather than refuse at once.
        match locate::wait_for_claim(s, started) {
            Some(pause) if !forwarded && locate::all_unclaimed(&replies) => {
                tokio::time::sleep(pause).await
            }
            _ => break replies,
        }
    };
    // Lines of chains another instance decides go to it (once: a
    // forwarded request's referrals are answered as they are).
    let forwarding = forwarding.as_ref().filter(|_| !forwarded);
    let elsewhere = forwarding.filter(|_| replies.iter().any(|r| r.referral().is_some()));
    if let (Some(caller), false) = (forwarding, ndjson) {
        let subject = || locate::Subject::of_line(&body);
        if let Some(to) = replies.first().and_then(Reply::referral) {
            let asked = ("/v1/ops", Some(body.clone()));
            return locate::whole(s, caller, to, headers, asked, subject()).await;
        }
        if let Some(first) = replies.first() {
            if let Some(to) = locate::unknown_here(s, caller, headers, first, subject).await {
                return forward::whole(s, caller, &to, "/v1/ops", headers, Some(body)).await;
            }
        }
    }
    if ndjson {
        let mut texts: Vec<String> = replies.iter().map(reply_text).collect();
        if let Some(caller) = forwarding {
            let raw: Vec<&[u8]> = ndjson_raw(&body).collect();
            if elsewhere.is_some() {
                forward::lines(s, caller, headers, &raw, &replies, &mut texts).await;
            }
            locate::lines(s, caller, headers, &raw, &replies, &mut texts).await;
        }
        let mut text = String::new();
        for t in &texts {
            text.push_str(t);
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
    if prefers_event_stream(headers) {
        let status = match &reply {
            Reply::Done(_) => StatusCode::OK,
            Reply::Failed(f) => status_of(f.error.code),
        };
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
    reply_response(&reply)
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
