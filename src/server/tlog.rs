//! The ledger as transparency logs: each chained partition is a log in
//! the C2SP tlog-tiles sense, under `/v1/log/<topic>/<partition>/` —
//! `checkpoint` (the latest signed note, `text/plain`) and `tile/<L>/<N>`
//! or `tile/<L>/<N>.p/<W>` (hashes, `application/octet-stream`) — so
//! existing tlog clients and witnesses can follow it. `/checkpoint` and
//! `/tile/…` at the root are those of `ledger/0`, the whole ledger when it
//! has one partition (the embedded default). `GET /v1/log` lists the logs.
//!
//! Tiles are immutable once full; a partial tile is the prefix of the full
//! one it becomes, so responses can be cached by anyone. Data tiles
//! (`tile/entries/…`) are not served: a record can exceed the 64 KiB an
//! entry bundle allows; `export` carries records with their proofs.

use super::access::{caller, read_job, Asked};
use super::answer::failure_response;
use super::state::AppState;
use crate::audit::checkpoint::CHAINED_TOPICS;
use crate::audit::tiles::parse_tile_path;
use crate::codes::Code;
use crate::model::Topic;
use crate::protocol::Failure;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

fn not_found(what: String) -> Failure {
    Failure::new(Code::NotFound, what)
}

fn chained(
    topic: &str,
    partition: u32,
    partitions: impl Fn(Topic) -> u32,
) -> Result<Topic, Failure> {
    CHAINED_TOPICS
        .into_iter()
        .find(|t| t.name() == topic && partition < partitions(*t))
        .ok_or_else(|| {
            not_found(format!(
                "no log {topic}/{partition}: logs are the ledger and registry partitions"
            ))
        })
}

/// One response for the route's metrics.
fn counted(s: &AppState, route: &'static str, r: Response) -> Response {
    s.ledger.metrics.http(route, r.status().as_u16());
    r
}

fn with_type(body: Vec<u8>, kind: &'static str) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    r
}

async fn checkpoint_of(
    s: &AppState,
    asked: &Asked,
    topic: String,
    partition: u32,
    witnessed_only: bool,
) -> Response {
    let c = match caller(s, asked) {
        Ok(c) => c,
        Err(f) => return failure_response(f),
    };
    let parts = s.ledger.log.clone();
    let note = read_job(s, c, move |engine| {
        let t = chained(&topic, partition, |t| parts.partitions(t))?;
        let views = engine.views();
        let view_err = |e: crate::views::ViewError| Failure::new(Code::ViewError, e.to_string());
        let witnessed = views.witnessed_note(t, partition).map_err(view_err)?;
        if witnessed_only {
            return witnessed.map(|(_, n)| n).ok_or_else(|| {
                not_found(format!(
                    "no witness has cosigned a checkpoint of {topic}/{partition} yet"
                ))
            });
        }
        let latest = views
            .checkpoint_note(t, partition)
            .map_err(view_err)?
            .ok_or_else(|| {
                not_found(format!(
                    "{topic}/{partition} has no signed checkpoint yet (serve with a checkpoint key)"
                ))
            })?;
        // The latest checkpoint, with its cosignatures once it has some.
        Ok(match witnessed {
            Some((_, cosigned)) if cosigned.starts_with(&latest) => cosigned,
            _ => latest,
        })
    })
    .await;
    match note {
        Ok(note) => with_type(note.into_bytes(), "text/plain; charset=utf-8"),
        Err(r) => r,
    }
}

async fn tile_of(
    s: &AppState,
    asked: &Asked,
    topic: String,
    partition: u32,
    path: String,
) -> Response {
    let c = match caller(s, asked) {
        Ok(c) => c,
        Err(f) => return failure_response(f),
    };
    let parts = s.ledger.log.clone();
    let bytes = read_job(s, c, move |engine| {
        let t = chained(&topic, partition, |t| parts.partitions(t))?;
        let Some((level, index, width)) = parse_tile_path(&path) else {
            return Err(not_found(format!(
                "tile/{path} is not a hash tile path (<L>/<N>[.p/<W>], N in 3-digit groups)"
            )));
        };
        engine
            .views()
            .tiles()
            .tile_bytes(t, partition, level, index, width)
            .map_err(|e| Failure::new(Code::ViewError, e.to_string()))?
            .ok_or_else(|| {
                not_found(format!(
                    "tile/{path} of {topic}/{partition} is not held (yet)"
                ))
            })
    })
    .await;
    match bytes {
        Ok(b) => with_type(b, "application/octet-stream"),
        Err(r) => r,
    }
}

pub async fn checkpoint(
    State(s): State<AppState>,
    asked: Asked,
    Path((topic, partition)): Path<(String, u32)>,
) -> Response {
    let r = checkpoint_of(&s, &asked, topic, partition, false).await;
    counted(&s, "/v1/log/{topic}/{partition}/checkpoint", r)
}

/// `GET …/witnessed`: the largest checkpoint witnesses cosigned, with
/// every cosignature received for it.
pub async fn witnessed(
    State(s): State<AppState>,
    asked: Asked,
    Path((topic, partition)): Path<(String, u32)>,
) -> Response {
    let r = checkpoint_of(&s, &asked, topic, partition, true).await;
    counted(&s, "/v1/log/{topic}/{partition}/witnessed", r)
}

/// `POST …/cosignatures`: a witness hands back the checkpoint note with
/// its cosignature line; kept if the note is this ledger's own checkpoint.
pub async fn cosignatures(
    State(s): State<AppState>,
    asked: Asked,
    Path((topic, partition)): Path<(String, u32)>,
    body: axum::body::Bytes,
) -> Response {
    let c = match caller(&s, &asked) {
        Ok(c) => c,
        Err(f) => {
            return counted(
                &s,
                "/v1/log/{topic}/{partition}/cosignatures",
                failure_response(f),
            )
        }
    };
    let log = s.ledger.log.clone();
    let witnesses = s.opts.witnesses.clone();
    let kept = read_job(&s, c, move |engine| {
        let t = chained(&topic, partition, |t| log.partitions(t))?;
        let Ok(note) = std::str::from_utf8(&body) else {
            return Err(Failure::new(
                Code::MalformedJson,
                "the note is not UTF-8 text",
            ));
        };
        let Some(key) = engine.signer() else {
            return Err(Failure::new(
                Code::InvalidRequest,
                "this ledger signs no checkpoints (serve with a checkpoint key)",
            ));
        };
        crate::audit::witness::accept(
            log.as_ref(),
            engine.views(),
            key,
            &witnesses,
            t,
            partition,
            note,
        )
        .map_err(|e| Failure::new(e.code(), e.to_string()))
    })
    .await;
    let r = match kept {
        Ok(n) => with_type(
            serde_json::json!({"ok": true, "kept": n})
                .to_string()
                .into_bytes(),
            "application/json",
        ),
        Err(r) => r,
    };
    counted(&s, "/v1/log/{topic}/{partition}/cosignatures", r)
}

pub async fn tile(
    State(s): State<AppState>,
    asked: Asked,
    Path((topic, partition, path)): Path<(String, u32, String)>,
) -> Response {
    let r = tile_of(&s, &asked, topic, partition, path).await;
    counted(&s, "/v1/log/{topic}/{partition}/tile", r)
}

pub async fn first_checkpoint(State(s): State<AppState>, asked: Asked) -> Response {
    let r = checkpoint_of(&s, &asked, "ledger".into(), 0, false).await;
    counted(&s, "/checkpoint", r)
}

pub async fn first_tile(
    State(s): State<AppState>,
    asked: Asked,
    Path(path): Path<String>,
) -> Response {
    let r = tile_of(&s, &asked, "ledger".into(), 0, path).await;
    counted(&s, "/tile", r)
}

/// `GET /v1/log`: every chained partition, its latest signed note (if
/// any) and where to follow it.
pub async fn logs(State(s): State<AppState>, asked: Asked) -> Response {
    let c = match caller(&s, &asked) {
        Ok(c) => c,
        Err(f) => return counted(&s, "/v1/log", failure_response(f)),
    };
    let log = s.ledger.log.clone();
    let listed = read_job(&s, c, move |engine| {
        let mut out = Vec::new();
        for t in CHAINED_TOPICS {
            for p in 0..log.partitions(t) {
                let note = engine
                    .views()
                    .checkpoint_note(t, p)
                    .map_err(|e| Failure::new(Code::ViewError, e.to_string()))?;
                let body = note.as_deref().and_then(|n| {
                    let text = &n[..n.find("\n\n").map_or(n.len(), |i| i + 1)];
                    crate::audit::note::CheckpointBody::parse(text).ok()
                });
                out.push(serde_json::json!({
                    "topic": t.name(),
                    "partition": p,
                    "origin": body.as_ref().map(|b| b.origin.clone()),
                    "size": body.as_ref().map(|b| b.size),
                    "prefix": format!("/v1/log/{}/{p}/", t.name()),
                }));
            }
        }
        Ok(serde_json::Value::Array(out).to_string())
    })
    .await;
    let r = match listed {
        Ok(body) => with_type(body.into_bytes(), "application/json"),
        Err(r) => r,
    };
    counted(&s, "/v1/log", r)
}
