//! The baseline `tools/bench-serve` holds `serve` to: a server on the same
//! HTTP stack (axum on hyper, tokio's multi-threaded runtime), taking the
//! same request bodies with the same bearer token, parsing each into the
//! same protocol enum, encoding the operation's record with the ledger's
//! own codec (the close's artifacts hashed as the ledger hashes them),
//! appending it to a file in the embedded log's frame with a group commit
//! (every record waiting when the writer wakes, then one fdatasync, as the
//! ledger thread groups operations) and answering JSON of the same shape
//! and size. Nothing of the ledger's own work: no views, no rules, no
//! content store, no dispatch, no checkpoints. What an operation costs
//! here is what any durable JSON-over-HTTP service on these cores pays.

use agentledger::codec;
use agentledger::model::{ArtifactRef, LedgerEvent, RunClosed, RunOpened, RunStatus};
use agentledger::protocol::{parse_request, Request};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use tokio::sync::oneshot;

/// A record to append, and whom to tell once it is durable.
type Append = (Vec<u8>, oneshot::Sender<()>);

struct Shared {
    bearer: String,
    /// `Sender` is `Sync`: the handlers share it without a lock.
    writer: mpsc::Sender<Append>,
    next: AtomicU64,
}

/// A running baseline: where it listens and the token it takes.
pub struct Baseline {
    pub url: String,
    pub token: String,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Baseline {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Appends each group of waiting records, syncs once, then answers them.
fn writer(file: std::fs::File, rx: mpsc::Receiver<Append>) {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        while group.len() < 1024 {
            match rx.try_recv() {
                Ok(more) => group.push(more),
                Err(_) => break,
            }
        }
        for (bytes, _) in &group {
            // The embedded log's frame: length, crc32, key length, key, payload.
            let key = b"k";
            let mut body = Vec::with_capacity(4 + key.len() + bytes.len());
            body.extend((key.len() as u32).to_le_bytes());
            body.extend(key);
            body.extend(bytes);
            out.write_all(&(body.len() as u32).to_le_bytes()).unwrap();
            out.write_all(&crc32fast::hash(&body).to_le_bytes())
                .unwrap();
            out.write_all(&body).unwrap();
        }
        out.flush().unwrap();
        out.get_ref().sync_data().unwrap();
        for (_, done) in group {
            let _ = done.send(());
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn refused(status: StatusCode, message: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"ok": false, "error": {"code": "invalid_request", "message": message}}).to_string(),
    )
        .into_response()
}

/// The record an operation writes and the answer it gets, as the ledger
/// would give them for a first run of a chain and its close.
fn decide(request: Request, n: u64) -> Result<(LedgerEvent, String, Value), String> {
    let labels = vec!["area:acme/platform".to_string()];
    match request {
        Request::OpenRun(o) => Ok((
            LedgerEvent::RunOpened(RunOpened {
                run: o.run.clone(),
                agent: o.agent,
                version: 1,
                scope: "acme/platform".into(),
                root: Some(o.run.clone()),
                hop: Some(0),
                trigger: None,
                legacy_trigger: o.legacy_trigger,
                labels,
            }),
            o.run.clone(),
            json!({"ok": true, "run": o.run, "root": o.run, "hop": 0, "version": 1}),
        )),
        Request::CloseRun(c) => {
            let mut artifacts = Vec::new();
            let mut answered = Vec::new();
            for (name, content) in &c.artifacts {
                let bytes = content.bytes(name).map_err(|e| e.to_string())?;
                let sha256 = codec::sha256(&bytes);
                answered.push(
                    json!({"name": name, "ref": format!("cas://sha256/{}", hex::encode(sha256)),
                    "digest": format!("sha256:{}", hex::encode(sha256)), "size": bytes.len()}),
                );
                artifacts.push(ArtifactRef {
                    name: name.clone(),
                    sha256,
                    size: bytes.len() as u64,
                    source_run: c.run.clone(),
                    labels: labels.clone(),
                });
            }
            let published = vec![agentledger::model::AgentEventOut {
                event_id: format!("ev-{n}-out"),
                event: "code.ready".into(),
                context: "change".into(),
                artifacts: artifacts.clone(),
            }];
            Ok((
                LedgerEvent::RunClosed(RunClosed {
                    run: c.run.clone(),
                    status: RunStatus::Succeeded,
                    summary: c.summary,
                    artifacts,
                    labels: labels.clone(),
                    published,
                    withheld: None,
                }),
                c.run.clone(),
                json!({"ok": true, "run": c.run, "withheld": null, "labels": labels, "artifacts": answered}),
            ))
        }
        other => Err(format!(
            "the baseline takes open_run and close_run, not {}",
            other.op()
        )),
    }
}

async fn ops(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    if headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        != Some(&s.bearer)
    {
        return refused(StatusCode::UNAUTHORIZED, "who are you".into());
    }
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return refused(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let request = match parse_request(&v) {
        Ok(r) => r,
        Err(e) => return refused(StatusCode::BAD_REQUEST, format!("{e:?}")),
    };
    let n = s.next.fetch_add(1, Ordering::Relaxed);
    let (event, key, answer) = match decide(request, n) {
        Ok(d) => d,
        Err(e) => return refused(StatusCode::BAD_REQUEST, e),
    };
    let bytes = codec::encode(&event, &format!("ev-{n}"), &key, now_ms(), "baseline", 0)
        .expect("a record of a small operation encodes");
    let (done, durable) = oneshot::channel();
    let sent = s.writer.send((bytes, done));
    if sent.is_err() || durable.await.is_err() {
        return refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the writer stopped".into(),
        );
    }
    (
        [(header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
        .into_response()
}

/// Start the baseline on 127.0.0.1, appending to a file in `dir`.
pub fn start(dir: &Path) -> Baseline {
    std::fs::create_dir_all(dir).unwrap();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("baseline.log"))
        .unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || writer(file, rx));
    let token = hex::encode(codec::sha256(
        format!("{:?}", std::time::Instant::now()).as_bytes(),
    ));
    let shared = Arc::new(Shared {
        bearer: format!("Bearer {token}"),
        writer: tx,
        next: AtomicU64::new(0),
    });
    let (stop, stopped) = oneshot::channel::<()>();
    let (said, addr) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let app = axum::Router::new()
                .route("/v1/ops", axum::routing::post(ops))
                .with_state(shared);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            said.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
    });
    let addr = addr.recv().unwrap();
    Baseline {
        url: format!("http://{addr}"),
        token,
        stop: Some(stop),
        thread: Some(thread),
    }
}
