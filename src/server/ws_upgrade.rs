//! The WebSocket handshake done here rather than by the framework, so
//! that the socket's bytes pass through a [`Watched`] reader on their way
//! to the WebSocket library: it follows the frames ([`super::ws_frames`])
//! and holds an unfinished message's bytes in the server's body budget,
//! and the session ends a message that takes longer than a request body
//! may. The framework's own upgrade hides the connection, and with it
//! every message still being assembled.

use super::ws_frames::Assembly;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;

/// The upgraded connection, behind the reader that watches its frames.
pub type Socket = WebSocketStream<Watched<hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>>>;

/// Why a request cannot be upgraded: the status and what to say.
pub type NotUpgradable = (StatusCode, &'static str);

/// Check a request asks for a WebSocket (RFC 6455 §4.2.1) and take its
/// connection: the upgrade to await, and the `101` to answer with.
pub fn accept(
    method: &Method,
    headers: &HeaderMap,
    extensions: &mut axum::http::Extensions,
) -> Result<(hyper::upgrade::OnUpgrade, Response), NotUpgradable> {
    let has = |name: header::HeaderName, token: &str| {
        headers.get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    if method != Method::GET {
        return Err((
            StatusCode::METHOD_NOT_ALLOWED,
            "a WebSocket is opened with GET",
        ));
    }
    if !has(header::CONNECTION, "upgrade") {
        return Err((
            StatusCode::BAD_REQUEST,
            "Connection header did not include 'upgrade'",
        ));
    }
    if !has(header::UPGRADE, "websocket") {
        return Err((
            StatusCode::BAD_REQUEST,
            "`Upgrade` header did not include 'websocket'",
        ));
    }
    if headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .map(HeaderValue::as_bytes)
        != Some(b"13")
    {
        return Err((
            StatusCode::BAD_REQUEST,
            "`Sec-WebSocket-Version` header did not include '13'",
        ));
    }
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY) else {
        return Err((
            StatusCode::BAD_REQUEST,
            "`Sec-WebSocket-Key` header missing",
        ));
    };
    let Some(on_upgrade) = extensions.remove::<hyper::upgrade::OnUpgrade>() else {
        return Err((
            StatusCode::UPGRADE_REQUIRED,
            "WebSocket request couldn't be upgraded since no upgrade state was present",
        ));
    };
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let mut r = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let h = r.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    Ok((on_upgrade, r))
}

/// The socket once the client has switched: messages up to `max_message`
/// bytes, its frames watched by `watch`.
pub async fn open(
    on_upgrade: hyper::upgrade::OnUpgrade,
    max_message: usize,
    watch: Arc<Mutex<Watch>>,
) -> Option<Socket> {
    let upgraded = on_upgrade.await.ok()?;
    let io = Watched {
        inner: hyper_util::rt::TokioIo::new(upgraded),
        watch,
    };
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message));
    Some(WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await)
}

/// What the reader knows of the message being assembled.
pub struct Watch {
    assembly: Assembly,
    /// When the unfinished message began.
    since: Option<Instant>,
    /// Which message that was ([`Assembly::begun`]).
    begun: u64,
    /// The budget's bytes the unfinished message holds.
    held: Option<OwnedSemaphorePermit>,
    budget: Arc<Semaphore>,
    /// The library's message limit.
    max_message: usize,
    /// The budget could not take the message's bytes: nothing more is
    /// read off the socket, and the session closes it.
    over: bool,
}

/// Why a socket's unfinished message ends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stalled {
    /// It has been assembled for longer than a body may take to arrive.
    TooSlow,
    /// Its bytes would go over the server's body budget.
    OverBudget,
}

impl Watch {
    pub fn new(budget: Arc<Semaphore>, max_message: usize) -> Self {
        Watch {
            assembly: Assembly::default(),
            since: None,
            begun: 0,
            held: None,
            budget,
            max_message,
            over: false,
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        self.assembly.feed(bytes);
        if !self.assembly.open() {
            self.since = None;
            self.held = None;
            return;
        }
        if self.since.is_none() || self.assembly.begun() != self.begun {
            // A new message: the last one's bytes were handed on.
            self.since = Some(Instant::now());
            self.begun = self.assembly.begun();
            self.held = None;
        }
        // Charged for what the library will set aside, not only what came:
        // it makes room for a frame's declared length once it reads the
        // header. A frame over the message limit the library refuses itself.
        let promised = self.assembly.promised().min(self.max_message as u64);
        let have = self.held.as_ref().map_or(0, |p| p.num_permits() as u64);
        let want = promised.saturating_sub(have);
        if want == 0 {
            return;
        }
        let more = u32::try_from(want)
            .ok()
            .and_then(|n| self.budget.clone().try_acquire_many_owned(n).ok());
        match (more, self.held.as_mut()) {
            (Some(more), Some(held)) => held.merge(more),
            (Some(more), None) => self.held = Some(more),
            (None, _) => self.over = true,
        }
    }

    /// Whether the unfinished message, if any, must end the socket.
    pub fn stalled(&self, within: Duration) -> Option<Stalled> {
        if self.over {
            return Some(Stalled::OverBudget);
        }
        self.since
            .is_some_and(|t| t.elapsed() > within)
            .then_some(Stalled::TooSlow)
    }
}

/// Most bytes one read takes off a watched socket.
const READ_AT_ONCE: usize = 16 * 1024;

/// A connection whose incoming bytes are followed by a [`Watch`].
pub struct Watched<I> {
    inner: I,
    watch: Arc<Mutex<Watch>>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.watch.lock().is_ok_and(|w| w.over) {
            // Over the budget: read nothing more; the session closes.
            return Poll::Pending;
        }
        // A read at a time is at most `READ_AT_ONCE`, so what a socket
        // takes past the budget before it stops is small: the library
        // would offer room for a whole frame (up to the message limit).
        let mut at_once = [0u8; READ_AT_ONCE];
        let room = buf.remaining().min(READ_AT_ONCE);
        let mut part = ReadBuf::new(&mut at_once[..room]);
        let read = Pin::new(&mut self.inner).poll_read(cx, &mut part);
        if let Poll::Ready(Ok(())) = read {
            let over = self.watch.lock().map_or(true, |mut w| {
                w.feed(part.filled());
                w.over
            });
            if over {
                // Withheld: the library never sees the frame that would
                // have gone over, so never sets room aside for it.
                return Poll::Pending;
            }
            buf.put_slice(part.filled());
        }
        read
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
