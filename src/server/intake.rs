//! What a connection may cost the server before a handler runs. Without
//! these bounds one client holding a socket open could keep `serve` from
//! stopping, and enough idle sockets could take every file descriptor the
//! content store needs: request headers must arrive within
//! [`HEADER_TIMEOUT`], a request body within the request timeout, a body
//! declared over the limit is refused before it is read, connections are
//! capped below the process's descriptor limit (the one past the cap is
//! answered 503 at once), and on shutdown connections get the shutdown
//! timeout ([`SHUTDOWN_GRACE`] unless told) to finish before the server
//! stops regardless.

use super::access::{vouch, Asked};
use super::answer::failure_response;
use super::state::AppState;
use super::tls::ClientIdentity;
use crate::codes::Code;
use crate::protocol::answer::Failure;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// Longest wait for a request's headers, on a new connection or between
/// requests on a kept-alive one.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the server may take to stop, connections finishing included,
/// unless `--shutdown-timeout` says otherwise.
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

/// Most header fields a request may carry.
pub const MAX_HEADERS: usize = 100;

/// Most bytes of header names and values a request may carry.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// What the HTTP parser takes before refusing a request on its own (with
/// an empty 431 it writes itself): past [`MAX_HEADERS`], so that a request
/// a little over the limit reaches [`header_limits`] and is told why.
/// Requests with more fields than this, or header blocks over the parser's
/// buffer (about 400 KiB), get the parser's bare 431. Not more: hyper
/// makes room for this many fields in every request it parses, and at
/// 8,192 that was a tenth of the server's CPU at 64 clients.
const PARSER_MAX_HEADERS: usize = 256;

/// A request with too many header fields, or too many bytes of them, is
/// refused 431 with the answer object saying which limit it met.
pub async fn header_limits(req: Request, next: Next) -> Response {
    let h = req.headers();
    let bytes: usize = h.iter().map(|(k, v)| k.as_str().len() + v.len()).sum();
    let over = if h.len() > MAX_HEADERS {
        Some(format!(
            "the request has {} header fields; the limit is {MAX_HEADERS}",
            h.len()
        ))
    } else if bytes > MAX_HEADER_BYTES {
        Some(format!(
            "the request's header fields hold {bytes} bytes; the limit is {MAX_HEADER_BYTES}"
        ))
    } else {
        None
    };
    match over {
        Some(why) => {
            let mut r = failure_response(Failure::new(Code::LimitExceeded, why));
            *r.status_mut() = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
            r
        }
        None => next.run(req).await,
    }
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
        (true, StatusCode::NOT_FOUND) => {
            "no such route (see the table of routes in docs/api.md)".into()
        }
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

/// Connections past the cap being told so at once; past these, a
/// connection is closed unanswered (telling costs a task, and over TLS a
/// handshake).
const REFUSING_AT_ONCE: usize = 64;

/// Serve `app` on `listener` until `stop` resolves, within the bounds
/// above: HTTP/1.1, or with `tls` HTTPS (HTTP/1.1 and HTTP/2 by ALPN, the
/// handshake held to [`HEADER_TIMEOUT`], a client certificate's principal
/// given to every request of its connection). Both go through the same
/// connection cap.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    stop: impl Future<Output = ()>,
    max_conns: usize,
    tls: Option<Arc<rustls::ServerConfig>>,
    grace: Duration,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(max_conns));
    let refusing = Arc::new(Semaphore::new(REFUSING_AT_ONCE));
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
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
            if let Ok(telling) = refusing.clone().try_acquire_owned() {
                let tls = tls.clone();
                tokio::spawn(async move {
                    let _telling = telling;
                    let told = refuse_busy(stream, max_conns, tls);
                    let _ = tokio::time::timeout(Duration::from_secs(2), told).await;
                });
            }
            continue;
        };
        let app = app.clone();
        let tls = tls.clone();
        let stopping = stopping_rx.clone();
        tokio::spawn(async move {
            let place = ConnectionSlot(Arc::new(slot));
            match tls {
                None => serve_http1(stream, app, place, stopping).await,
                Some(acceptor) => {
                    let handshake = acceptor.accept(stream);
                    let Ok(Ok(stream)) = tokio::time::timeout(HEADER_TIMEOUT, handshake).await
                    else {
                        return;
                    };
                    let identity = super::tls::client_identity(stream.get_ref().1);
                    serve_tls(stream, app, identity, place, stopping).await
                }
            }
        });
    }
    let _ = stopping_tx.send(true);
    // Every slot back means every connection is done.
    let all = slots.acquire_many(max_conns as u32);
    if tokio::time::timeout(grace, all).await.is_err() {
        tracing::warn!(
            "connections still open {} ms after stopping (--shutdown-timeout); closing them",
            grace.as_millis()
        );
    }
    Ok(())
}

/// A connection's place under the cap, in each of its requests: a
/// WebSocket upgraded from one holds it while the socket lives.
#[derive(Clone)]
pub struct ConnectionSlot(#[allow(dead_code)] Arc<OwnedSemaphorePermit>);

/// `app` as a hyper service, each request carrying its connection's
/// place and `identity` (the client certificate's principal, over TLS).
fn service(
    app: Router,
    identity: Option<ClientIdentity>,
    place: ConnectionSlot,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = Response,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<Response, std::convert::Infallible>> + Send,
> + Clone {
    hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let mut app = app.clone();
        let mut req = req.map(Body::new);
        req.extensions_mut().insert(place.clone());
        if identity.is_some() {
            req.extensions_mut().insert(identity.clone());
        }
        tower_service::Service::call(&mut app, req)
    })
}

async fn serve_http1(
    stream: TcpStream,
    app: Router,
    place: ConnectionSlot,
    mut stopping: watch::Receiver<bool>,
) {
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_headers(PARSER_MAX_HEADERS)
        .serve_connection(TokioIo::new(stream), service(app, None, place))
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        () = until_true(&mut stopping) => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

async fn serve_tls(
    stream: tokio_rustls::server::TlsStream<TcpStream>,
    app: Router,
    identity: Option<ClientIdentity>,
    place: ConnectionSlot,
    mut stopping: watch::Receiver<bool>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_headers(PARSER_MAX_HEADERS);
    let conn =
        builder.serve_connection_with_upgrades(TokioIo::new(stream), service(app, identity, place));
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        () = until_true(&mut stopping) => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

async fn until_true(rx: &mut watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// The connection past the cap: told so and closed, rather than left to
/// wait unanswered in the listen queue (over TLS, after the handshake, in
/// whichever HTTP version the client chose).
async fn refuse_busy(mut stream: TcpStream, max: usize, tls: Option<tokio_rustls::TlsAcceptor>) {
    let failure = Failure::new(
        Code::Overloaded,
        format!("the server has {max} connections open already; retry shortly"),
    );
    let Some(acceptor) = tls else {
        let body = serde_json::to_string(&failure).expect("failures serialise");
        let head = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(body.as_bytes()).await;
        let _ = stream.shutdown().await;
        return;
    };
    let Ok(stream) = acceptor.accept(stream).await else {
        return;
    };
    let refuse = hyper::service::service_fn(move |_req: hyper::Request<hyper::body::Incoming>| {
        let mut r = failure_response(failure.clone());
        r.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
        std::future::ready(Ok::<_, std::convert::Infallible>(r))
    });
    let _ = auto::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(stream), refuse)
        .await;
}
