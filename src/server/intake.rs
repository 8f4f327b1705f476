//! What a connection may cost the server before a handler runs. Without
//! these bounds one client holding a socket open could keep `serve` from
//! stopping, and enough idle sockets could take every file descriptor the
//! content store needs: request headers must arrive within
//! [`HEADER_TIMEOUT`], a request body within the request timeout, a body
//! declared over the limit is refused before it is read, connections are
//! capped below the process's descriptor limit (the one past the cap is
//! answered 503 at once), and on shutdown connections get
//! [`SHUTDOWN_GRACE`] to finish before the server stops regardless.

use super::http::{failure_response, vouch, AppState, Asked};
use crate::codes::Code;
use crate::protocol::answer::Failure;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// Longest wait for a request's headers, on a new connection or between
/// requests on a kept-alive one.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long connections may take to finish once the server stops.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Descriptors kept free of connections: segments, views, the content
/// store and the key files need their own.
const RESERVED_FDS: u64 = 64;

/// Most connections at once: what the descriptor limit leaves after the
/// reserve, within [16, 4096].
pub fn max_connections() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        1024
    };
    soft.saturating_sub(RESERVED_FDS).clamp(16, 4096) as usize
}

/// Read the request body whole before the handler runs, once its sender
/// is known: a request whose credential the ledger would refuse is
/// answered 401 before a byte of its body is read; a body over the limit
/// is refused, one declared so before it is read; every body being read
/// holds its bytes of the server's body budget, and one that would go
/// over it is answered 503 `overloaded` instead of read; and a body must
/// arrive within the request timeout.
pub async fn bounded_body(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let bodiless = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        && declared.unwrap_or(0) == 0
        && !req.headers().contains_key(header::TRANSFER_ENCODING);
    if bodiless {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    if let Err(f) = vouch(&s, &Asked::of(&parts)).await {
        return failure_response(f);
    }
    let max_body = s.opts.max_body;
    if declared.is_some_and(|n| n > max_body as u64) {
        return too_long(declared, max_body);
    }
    let budget = s.opts.body_budget.max(max_body);
    // A declared length is held whole at once; a chunked body as it comes.
    let mut held = match declared {
        Some(n) => match s.bodies.clone().try_acquire_many_owned(n as u32) {
            Ok(p) => Some(p),
            Err(_) => return over_budget(budget),
        },
        None => None,
    };
    let read = async {
        let mut bytes = Vec::with_capacity(declared.unwrap_or(0) as usize);
        let mut chunks = body.into_data_stream();
        while let Some(chunk) = futures_util::StreamExt::next(&mut chunks).await {
            let chunk = chunk.map_err(Unread::Failed)?;
            if bytes.len() + chunk.len() > max_body {
                return Err(Unread::TooLong);
            }
            if declared.is_none() {
                let more = s
                    .bodies
                    .clone()
                    .try_acquire_many_owned(chunk.len() as u32)
                    .map_err(|_| Unread::OverBudget)?;
                match held.as_mut() {
                    Some(p) => p.merge(more),
                    None => held = Some(more),
                }
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    };
    match tokio::time::timeout(s.opts.timeout, read).await {
        Ok(Ok(bytes)) => {
            let answer = next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await;
            drop(held);
            answer
        }
        Ok(Err(Unread::TooLong)) => too_long(None, max_body),
        Ok(Err(Unread::OverBudget)) => over_budget(budget),
        Ok(Err(Unread::Failed(e))) => failure_response(Failure::new(
            Code::InvalidRequest,
            format!("reading the request body: {e}"),
        )),
        Err(_) => {
            let mut r = failure_response(Failure::new(
                Code::Timeout,
                format!(
                    "the request body did not arrive within {} ms",
                    s.opts.timeout.as_millis()
                ),
            ));
            *r.status_mut() = StatusCode::REQUEST_TIMEOUT;
            r
        }
    }
}

/// Why a body was not read whole.
enum Unread {
    TooLong,
    OverBudget,
    Failed(axum::Error),
}

fn over_budget(budget: usize) -> Response {
    failure_response(Failure::new(
        Code::Overloaded,
        format!(
            "request bodies being read hold the server's budget of {budget} bytes (--body-budget-bytes); retry shortly"
        ),
    ))
}

/// Answers that are not the answer object (axum's own rejections of a
/// path, a query or a method, and routes that do not exist) become one, so
/// every error a client reads is `{"ok":false,"error":{"code","message"}}`.
pub async fn json_errors(req: Request, next: Next) -> Response {
    let r = next.run(req).await;
    let status = r.status();
    let plain = r
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|t| t.starts_with("text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !plain {
        return r;
    }
    let (parts, body) = r.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_string();
    let code = match status {
        StatusCode::NOT_FOUND => Code::NotFound,
        StatusCode::PAYLOAD_TOO_LARGE => Code::LineTooLong,
        s if s.is_server_error() => Code::InternalError,
        _ => Code::InvalidRequest,
    };
    let message = match (text.is_empty(), status) {
        (false, _) => text,
        (true, StatusCode::NOT_FOUND) => "no such route (see the README's table of routes)".into(),
        (true, StatusCode::METHOD_NOT_ALLOWED) => "this route does not take that method".into(),
        (true, s) => s.canonical_reason().unwrap_or("refused").to_string(),
    };
    let mut out = failure_response(Failure::new(code, message));
    *out.status_mut() = status;
    for (k, v) in parts.headers.iter() {
        if k != header::CONTENT_TYPE && k != header::CONTENT_LENGTH {
            out.headers_mut().insert(k.clone(), v.clone());
        }
    }
    out
}

fn too_long(declared: Option<u64>, max: usize) -> Response {
    let size = declared.map_or("a request body".to_string(), |n| {
        format!("a request body of {n} bytes")
    });
    failure_response(Failure::new(
        Code::LineTooLong,
        format!("{size} is over the limit of {max} bytes (--max-body-bytes)"),
    ))
}

/// Serve `app` on `listener` over HTTP/1.1 until `stop` resolves, within
/// the bounds above.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    stop: impl Future<Output = ()>,
    max_conns: usize,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(max_conns));
    let (stopping_tx, stopping_rx) = watch::channel(false);
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut stop => break,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors, or the peer gave up: not fatal.
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(refuse_busy(stream, max_conns));
            continue;
        };
        let app = app.clone();
        let mut stopping = stopping_rx.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let svc =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let mut app = app.clone();
                    tower_service::Service::call(&mut app, req.map(Body::new))
                });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = until_true(&mut stopping) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    let _ = stopping_tx.send(true);
    // Every slot back means every connection is done.
    let all = slots.acquire_many(max_conns as u32);
    if tokio::time::timeout(SHUTDOWN_GRACE, all).await.is_err() {
        tracing::warn!(
            "connections still open {} s after stopping; closing them",
            SHUTDOWN_GRACE.as_secs()
        );
    }
    Ok(())
}

async fn until_true(rx: &mut watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// The connection past the cap: told so and closed, rather than left to
/// wait unanswered in the listen queue.
async fn refuse_busy(mut stream: tokio::net::TcpStream, max: usize) {
    let body = serde_json::to_string(&Failure::new(
        Code::Overloaded,
        format!("the server has {max} connections open already; retry shortly"),
    ))
    .expect("failures serialise");
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), write).await;
}
