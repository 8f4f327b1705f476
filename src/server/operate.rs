//! What an operator watches and starts: `/metrics`, `/readyz`, who serves
//! the ledger (`/v1/cluster`) and the rebuild of the views beside the
//! live ones.

use super::access::{admitted, caller, read_job, Asked, Permit};
use super::answer::{failure_response, gone, timed_out};
use super::ledger::{grant_of, Gone};
use super::state::AppState;
use crate::codes::Code;
use crate::protocol::Failure;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Where the rebuild of the views stands (`{"rebuild":null}` when none
/// ran in this process).
pub(super) async fn rebuild_status(State(s): State<AppState>, headers: Asked) -> Response {
    let c = match caller(&s, &headers) {
        Ok(c) => c,
        Err(f) => return failure_response(f),
    };
    let response = match read_job(&s, c, |engine| Ok(engine.rebuild_status())).await {
        Ok(status) => axum::Json(serde_json::json!({ "rebuild": status })).into_response(),
        Err(r) => r,
    };
    s.ledger
        .metrics
        .http("/v1/rebuild", response.status().as_u16());
    response
}

/// Start rebuilding the views beside the live ones (the operator only):
/// answered at once with where it stands; `GET` follows it, and the serve
/// loop swaps the fresh views in when they are built.
pub(super) async fn rebuild_start(State(s): State<AppState>, headers: Asked) -> Response {
    let c = match caller(&s, &headers) {
        Ok(c) => c,
        Err(f) => return failure_response(f),
    };
    let call = s.ledger.call(move |engine| {
        let grant = grant_of(engine, &c)?;
        if grant.principal != crate::auth::Principal::Operator {
            return Err(Failure::new(
                Code::Forbidden,
                format!(
                    "{} may not rebuild the views: only the operator may",
                    grant.principal
                ),
            ));
        }
        engine
            .start_rebuild()
            .map_err(|e| Failure::new(e.code(), e.to_string()))
    });
    let response = match s.in_time(call).await {
        Ok(Ok(Ok(status))) => axum::Json(serde_json::json!({ "rebuild": status })).into_response(),
        Ok(Ok(Err(f))) => failure_response(f),
        Ok(Err(Gone)) => gone(),
        Err(_) => timed_out(s.opts.timeout),
    };
    s.ledger
        .metrics
        .http("/v1/rebuild", response.status().as_u16());
    response
}

pub(super) async fn metrics(State(s): State<AppState>, headers: Asked) -> Response {
    if let Err(r) = admitted(&s, &headers, Permit::Read).await {
        return r;
    }
    let metrics = s.ledger.metrics.clone();
    // Lags are read on the ledger thread; a busy ledger still gets its
    // counters scraped.
    let observe = s.ledger.call(move |engine| metrics.observe_lags(engine));
    let _ = tokio::time::timeout(Duration::from_secs(2), observe).await;
    let mut r = (StatusCode::OK, s.ledger.metrics.render()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

pub(super) async fn ready(State(s): State<AppState>) -> Response {
    if s.ledger.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "catching up with the log\n",
        )
            .into_response()
    }
}

/// `GET /v1/cluster`: the members of the group serving this ledger, where
/// each answers and what each owns (any authenticated reader).
pub(super) async fn cluster(State(s): State<AppState>, headers: Asked) -> Response {
    let response = match admitted(&s, &headers, Permit::Read).await {
        Ok(_) => {
            let view = s.ledger.cluster_view();
            // Each partition's lag, as this instance's views stand now.
            let owners = view.owner_of_each();
            let partitions = s
                .ledger
                .call(move |engine| super::cluster::partitions(engine, &owners));
            match s.in_time(partitions).await {
                Ok(Ok(Ok(partitions))) => {
                    let mut v = serde_json::to_value(view).unwrap_or_default();
                    v["partitions"] = serde_json::to_value(partitions).unwrap_or_default();
                    axum::Json(v).into_response()
                }
                Ok(Ok(Err(e))) => failure_response(Failure::new(e.code(), e.to_string())),
                Ok(Err(Gone)) => gone(),
                Err(_) => timed_out(s.opts.timeout),
            }
        }
        Err(r) => r,
    };
    s.ledger
        .metrics
        .http("/v1/cluster", response.status().as_u16());
    response
}
