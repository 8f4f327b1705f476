//! The HTTP face: every route of the server, and the layers every request
//! goes through (header and body limits, the JSON error envelope).

use super::operate::{metrics, ready, rebuild_start, rebuild_status};
use super::ops::ops;
use super::reads::{agent, chain, export, stats, status, tokens_list, trace, trail, verify};
use super::socket::ws;
use super::state::AppState;
use super::streams::sse_events;
use axum::extract::DefaultBodyLimit;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{any, get, post};
use axum::Router;

pub fn router(state: AppState) -> Router {
    let max_body = state.opts.max_body;
    // MCP clients expect JSON-RPC errors and MCP's statuses: the endpoint
    // is outside the layer that rewrites errors into the ledger's answer.
    let endpoint = super::mcp::endpoint(&state.opts);
    let mcp = Router::new()
        .route(
            "/v1/runs/{run}/mcp",
            any(
                move |State(s): State<AppState>, Path(run): Path<String>, request: Request| {
                    super::mcp::gate(s, run, request, endpoint.clone())
                },
            ),
        )
        .route(
            "/.well-known/oauth-protected-resource/v1/runs/{run}/mcp",
            get(
                |State(s): State<AppState>, Path(run): Path<String>, headers: HeaderMap| {
                    super::mcp::protected_resource(s, run, headers)
                },
            ),
        )
        .layer(axum::middleware::from_fn(super::intake::header_limits))
        .with_state(state.clone());
    Router::new()
        .route("/v1/ops", post(ops))
        .route("/v1/ws", get(ws))
        .route("/v1/events", get(sse_events))
        .route("/v1/runs/{run}/trail", get(trail))
        .route("/v1/runs/{run}/chain", get(chain))
        .route("/v1/runs/{run}/trace", get(trace))
        .route("/v1/agents/{name}", get(agent))
        .route("/v1/tasks/{task}/stats", get(stats))
        .route("/v1/status", get(status))
        .route("/v1/cluster", get(super::operate::cluster))
        .route("/v1/cluster/locate", get(super::locate::answer))
        .route("/v1/tokens", get(tokens_list))
        .route("/v1/export", get(export))
        .route("/v1/verify", get(verify))
        .route("/v1/rebuild", get(rebuild_status).post(rebuild_start))
        .route("/v1/log", get(super::tlog::logs))
        .route(
            "/v1/log/{topic}/{partition}/checkpoint",
            get(super::tlog::checkpoint),
        )
        .route(
            "/v1/log/{topic}/{partition}/witnessed",
            get(super::tlog::witnessed),
        )
        .route(
            "/v1/log/{topic}/{partition}/cosignatures",
            post(super::tlog::cosignatures),
        )
        .route(
            "/v1/log/{topic}/{partition}/tile/{*path}",
            get(super::tlog::tile),
        )
        .route("/checkpoint", get(super::tlog::first_checkpoint))
        .route("/tile/{*path}", get(super::tlog::first_tile))
        .route("/", get(super::pages::index))
        .route("/chains/{root}", get(super::pages::chain))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .fallback(|| async { StatusCode::NOT_FOUND })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn(super::intake::json_errors))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            super::intake::bounded_body,
        ))
        .layer(axum::middleware::from_fn(super::intake::header_limits))
        .with_state(state)
        .merge(mcp)
}
