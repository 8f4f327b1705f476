//! Event streams: following the published topic from a cursor, within
//! the `--max-streams` slots, as SSE (`GET /v1/events`); the WebSocket
//! session subscribes through the same follower.

use super::access::{ask_grant, caller, permit, Asked, Permit};
use super::answer::failure_response;
use super::events::{self, Cursor, CursorError, Filter};
use super::ledger::Caller;
use super::shares::{Full, Slot};
use super::state::AppState;
use crate::codes::Code;
use crate::protocol::Failure;
use axum::extract::{Query as QueryParams, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

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
pub(super) fn start_cursor(
    s: &AppState,
    last_event_id: Option<&str>,
    from: Option<&str>,
) -> Result<Cursor, Failure> {
    let log = s.ledger.log.as_ref();
    let cursor = match last_event_id.or(from) {
        Some(text) => Cursor::parse(text, log),
        None => Cursor::end(log).map_err(CursorError::from),
    };
    cursor.map_err(|e| Failure::new(Code::InvalidRequest, e.to_string()))
}

/// Follow published events from `cursor` until the server stops or the
/// receiver is dropped; `None` when the server follows as many streams as
/// it will.
pub(super) fn follow(
    s: &AppState,
    slot: StreamSlot,
    caller: Caller,
    mut cursor: Cursor,
    filter: Filter,
) -> tokio::sync::mpsc::Receiver<events::Published> {
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    let log = s.ledger.log.clone();
    let state = s.clone();
    tokio::spawn(async move {
        let _slot = slot;
        let mut checked = std::time::Instant::now();
        while !state.is_stopping() && !tx.is_closed() {
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
pub(super) type StreamSlot = Arc<Slot>;

pub(super) fn stream_slot(s: &AppState, caller: &Caller) -> Result<StreamSlot, Failure> {
    s.streams
        .take(caller.share().as_deref())
        .map(Arc::new)
        .map_err(too_many_streams)
}

/// How often a followed stream's credential is checked again.
pub(super) const STREAM_RECHECK: Duration = Duration::from_secs(2);

pub(super) fn too_many_streams(full: Full) -> Failure {
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

pub(super) async fn sse_events(
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
    if let Err(refused) = wanted.check() {
        let r = failure_response(Failure::new(refused.code, refused.message));
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

/// Whether `caller`'s credential still holds: a token not revoked or
/// expired, a JWT or client certificate not past its lapse.
pub(super) async fn credential_holds(s: &AppState, caller: &Caller) -> Result<(), Failure> {
    // Shutting down or slow: the socket ends for its own reasons.
    ask_grant(s, caller.clone()).await.unwrap_or(Ok(()))
}
