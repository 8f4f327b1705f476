//! `GET /v1/ws`: one socket, each text message one operation, each answer
//! one message in order; after a `subscribe`, published events arrive on
//! it too. Closed with a code that says why (lapsed credential, stalled
//! message, the server stopping).

use super::access::{caller, permit, Asked, Permit};
use super::answer::{failure_response, reply_text, with_status};
use super::events::{Cursor, Filter};
use super::forward;
use super::ledger::{Caller, Gone};
use super::state::{AppState, HttpOptions};
use super::streams::{
    credential_holds, follow, start_cursor, stream_slot, StreamSlot, STREAM_RECHECK,
};
use super::ws_upgrade::{self, Stalled};
use crate::apply::parse_line;
use crate::codes::Code;
use crate::protocol::{Failure, Reply};
use axum::extract::State;
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use std::sync::Arc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

pub(super) async fn ws(
    State(s): State<AppState>,
    headers: Asked,
    req: axum::extract::Request,
) -> Response {
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
    // In a cluster, operations on chains another instance decides go
    // there with the credential the socket showed (see `forward`).
    let forward_as = forward::refers(&s, &caller, &headers).then(|| forward::credential(&headers));
    tokio::spawn(async move {
        let _place = place;
        if let Some(socket) = ws_upgrade::open(on_upgrade, max, watch.clone()).await {
            ws_session(s, caller, forward_as, socket, watch).await;
        }
    });
    switching
}

/// `{"op":"subscribe", "from": …, "scope": …, "event": …}` on a socket.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Subscribe {
    #[allow(dead_code)]
    op: String,
    #[serde(default)]
    from: Option<String>,
    #[serde(flatten)]
    filter: Filter,
}

/// Where a socket's subscription starts, once its caller may follow the
/// events it asks for.
pub(super) async fn subscribe_start(
    s: &AppState,
    caller: Caller,
    sub: &Subscribe,
) -> Result<Cursor, Failure> {
    permit(s, caller, Permit::Events(sub.filter.scope.clone())).await?;
    sub.filter
        .check()
        .map_err(|r| Failure::new(r.code, r.message))?;
    start_cursor(s, None, sub.from.as_deref())
}

/// The close frame of a socket whose credential lapsed (1008, policy).
pub(super) fn lapsed_close(f: &Failure) -> Message {
    let reason: String = f.error.message.chars().take(120).collect();
    Message::Close(Some(CloseFrame {
        code: CloseCode::Policy,
        reason: reason.into(),
    }))
}

/// The close frame of a socket whose unfinished message ended it: 1008
/// past the time a body may take, 1013 (try again later) past the budget.
pub(super) fn stalled_close(stalled: Stalled, opts: &HttpOptions) -> Message {
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
pub(super) fn going_away() -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::Away,
        reason: "the server is shutting down; connect again shortly".into(),
    }))
}

/// One socket: each text message one operation, each answer one message,
/// in order; after a `subscribe`, published events arrive on it too, as
/// `{"published": {…}, "id": "<cursor>"}`.
pub(super) async fn ws_session(
    s: AppState,
    caller: Caller,
    forward_as: Option<axum::http::HeaderMap>,
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
            () = s.stopped() => {
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
        if s.is_stopping() {
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
            line => match s
                .in_time(
                    s.ledger
                        .ops_referring(caller.clone(), vec![line], forward_as.is_some()),
                )
                .await
            {
                Ok(Ok(Ok(r))) => match (r.first().filter(|r| away(r)), &forward_as) {
                    // The message as it came is what the owner is sent.
                    (Some(first), Some(headers)) => {
                        let mut answer = vec![super::answer::reply_text(first)];
                        if first.referral().is_some() {
                            forward::lines(&s, &caller, headers, &[&bytes], &r, &mut answer).await;
                        }
                        // A run or task unknown here and there: where it is.
                        super::locate::lines(&s, &caller, headers, &[&bytes], &r, &mut answer)
                            .await;
                        if tx
                            .send(Message::Text(answer.concat().into()))
                            .await
                            .is_err()
                        {
                            break;
                        }
                        continue;
                    }
                    _ => r.into_iter().next().unwrap_or_else(|| {
                        Reply::Failed(Failure::new(Code::ShuttingDown, Gone.to_string()))
                    }),
                },
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

/// Whether a reply says the operation belongs to another instance (a
/// referral), or names a run or task another instance may hold.
fn away(reply: &Reply) -> bool {
    reply.referral().is_some() || matches!(reply, Reply::Failed(f) if super::locate::unknown(f))
}
