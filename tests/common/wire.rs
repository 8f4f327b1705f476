//! The real network face (axum router, HTTP and WebSocket) in front of a
//! test's own engine: each operation goes out over a socket, and the test
//! thread answers the jobs it makes while it waits, exactly as the server's
//! ledger thread does. The engine stays in the test's hands, so the rule
//! suite looks into it between operations whatever the transport.

use agentledger::engine::Engine;
use agentledger::server::ledger::{channel, Jobs};
use agentledger::server::metrics::Metrics;
use agentledger::server::{router, AppState, HttpOptions};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// How a test's operations reach its engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// A call into the engine (`apply`'s path).
    Engine,
    /// `POST /v1/ops`, one JSON operation per request.
    Http,
    /// One WebSocket, one text message per operation.
    WebSocket,
}

type Answer = (Option<u16>, String);
type Outgoing = (String, mpsc::Sender<Answer>);

pub struct Wire {
    runtime: tokio::runtime::Runtime,
    pub url: String,
    /// The session token: the operator's credential on this server.
    pub token: String,
    jobs: Jobs,
    socket: Option<tokio::sync::mpsc::UnboundedSender<Outgoing>>,
    stopping: tokio::sync::watch::Sender<bool>,
}

impl Wire {
    /// Serve the router on 127.0.0.1:0 for `engine`'s log; with
    /// `via == WebSocket` also open the one socket the test talks through.
    pub fn start(engine: &Engine, via: Via) -> Self {
        Self::start_with(engine, via, HttpOptions::default())
    }

    /// [`Wire::start`] with these options (JWTs accepted, limits).
    pub fn start_with(engine: &Engine, via: Via, opts: HttpOptions) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (handle, jobs) = channel(engine.log().clone(), Arc::new(Metrics::new()));
        let (stopping, stopping_rx) = tokio::sync::watch::channel(false);
        let token = agentledger::auth::tokens::generate().unwrap();
        let app = router(AppState::new(handle, opts, stopping_rx, &token));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        runtime.spawn(async move { axum::serve(listener, app).await });
        let socket = (via == Via::WebSocket).then(|| {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Outgoing>();
            let ws_url = format!("{}/v1/ws", url.replacen("http", "ws", 1));
            let bearer = format!("Bearer {token}");
            runtime.spawn(async move {
                use tokio_tungstenite::tungstenite::client::IntoClientRequest;
                let mut request = ws_url.into_client_request().unwrap();
                request
                    .headers_mut()
                    .insert("authorization", bearer.parse().unwrap());
                let (mut ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
                while let Some((text, reply)) = rx.recv().await {
                    ws.send(Message::text(text)).await.unwrap();
                    let answer = loop {
                        match ws.next().await {
                            Some(Ok(Message::Text(t))) => break t.to_string(),
                            Some(Ok(_)) => continue,
                            other => panic!("the socket ended: {other:?}"),
                        }
                    };
                    let _ = reply.send((None, answer));
                }
            });
            tx
        });
        Wire {
            runtime,
            url,
            token,
            jobs,
            socket,
            stopping,
        }
    }

    /// Send one operation and answer the jobs it makes until its answer
    /// comes back: the HTTP status (none on a socket) and the answer.
    pub fn send(&self, engine: &mut Engine, op: &Value) -> (Option<u16>, Value) {
        self.send_with(engine, op, Some(&self.token.clone()))
    }

    /// [`Wire::send`] with this bearer token (none: no `Authorization`
    /// header); over HTTP whatever the wire's transport.
    pub fn send_with(
        &self,
        engine: &mut Engine,
        op: &Value,
        bearer: Option<&str>,
    ) -> (Option<u16>, Value) {
        let (tx, rx) = mpsc::channel();
        match &self.socket {
            Some(socket) if bearer == Some(self.token.as_str()) => {
                socket.send((op.to_string(), tx)).unwrap()
            }
            _ => {
                let url = format!("{}/v1/ops", self.url);
                let body = op.to_string();
                let bearer = bearer.map(|t| format!("Bearer {t}"));
                self.runtime.spawn(async move {
                    let mut request = reqwest::Client::new()
                        .post(url)
                        .header("content-type", "application/json");
                    if let Some(b) = bearer {
                        request = request.header("authorization", b);
                    }
                    let r = request.body(body).send().await.unwrap();
                    let status = r.status().as_u16();
                    let _ = tx.send((Some(status), r.text().await.unwrap()));
                });
            }
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.jobs
                .answer_waiting(engine, Duration::from_millis(1))
                .unwrap();
            match rx.try_recv() {
                Ok((status, text)) => {
                    let answer = serde_json::from_str(&text)
                        .unwrap_or_else(|e| panic!("answer to {op} is not JSON ({e}): {text}"));
                    return (status, answer);
                }
                Err(mpsc::TryRecvError::Empty) => {
                    assert!(Instant::now() < deadline, "no answer to {op}")
                }
                Err(mpsc::TryRecvError::Disconnected) => panic!("no answer to {op}"),
            }
        }
    }
}

impl Wire {
    /// One HTTP request to `path` with this bearer token (none: no
    /// `Authorization` header), answering the jobs it makes until it is
    /// answered: the status, and the body unless `stream` (an event
    /// stream is only opened, then dropped).
    pub fn request(
        &self,
        engine: &mut Engine,
        method: &str,
        path: &str,
        body: Option<String>,
        bearer: Option<&str>,
        stream: bool,
    ) -> (u16, String) {
        let (tx, rx) = mpsc::channel();
        let url = format!("{}{path}", self.url);
        let method: reqwest::Method = method.parse().unwrap();
        let bearer = bearer.map(|t| format!("Bearer {t}"));
        self.runtime.spawn(async move {
            let mut request = reqwest::Client::new().request(method, url);
            if let Some(b) = bearer {
                request = request.header("authorization", b);
            }
            if let Some(body) = body {
                request = request
                    .header("content-type", "application/json")
                    .body(body);
            }
            let r = request.send().await.unwrap();
            let status = r.status().as_u16();
            let text = if stream {
                String::new()
            } else {
                r.text().await.unwrap()
            };
            let _ = tx.send((status, text));
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.jobs
                .answer_waiting(engine, Duration::from_millis(1))
                .unwrap();
            if let Ok(answer) = rx.try_recv() {
                return answer;
            }
            assert!(Instant::now() < deadline, "no answer from {path}");
        }
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        self.stopping.send_replace(true);
    }
}
