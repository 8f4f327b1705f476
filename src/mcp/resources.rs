//! A run's resources: its input (what the trigger exposes: names, digests,
//! labels, never bytes) and its trail so far, as the views say.

use crate::engine::Engine;
use crate::model::Run;
use crate::queries::{self, Query};
use rmcp::model::{ReadResourceResult, Resource, ResourceContents};
use rmcp::ErrorData as McpError;
use serde_json::{json, Value};

/// The URI of run `run`'s resource `what` (`input`, `trail`).
pub fn resource_uri(run: &str, what: &str) -> String {
    format!(
        "agentledger://runs/{}/{what}",
        crate::encode::path_segment(run)
    )
}

/// The resources of run `run`.
pub fn resources(run: &str) -> Vec<Resource> {
    vec![
        Resource::new(resource_uri(run, "input"), "input")
            .with_title(format!("The input of run {run}"))
            .with_description("The event that opened the run and the artifacts it exposes by name: digests, sizes, source run, labels, never bytes (read_artifact reads those); and the reads made of the tool budget")
            .with_mime_type("application/json"),
        Resource::new(resource_uri(run, "trail"), "trail")
            .with_title(format!("The trail of run {run}"))
            .with_description("Every step of the run so far, one JSON object a line, as `agentledger trail --json` prints it")
            .with_mime_type("application/x-ndjson"),
    ]
}

/// What run `r`'s input resource shows: its chain position, what its
/// trigger exposes (never the bytes), and how much of its version's tool
/// budget (`budget`, none when unlimited) its reads have used.
pub fn input_of(r: &Run, budget: Option<u32>) -> Value {
    let artifacts: Vec<Value> = r
        .trigger
        .iter()
        .flat_map(|t| &t.artifacts)
        .map(|a| {
            json!({"name": a.name, "digest": format!("sha256:{}", hex::encode(a.sha256)),
                "size": a.size, "source_run": a.source_run, "labels": a.labels})
        })
        .collect();
    json!({
        "run": r.run,
        "agent": r.agent,
        "version": r.version,
        "root": r.root,
        "hop": r.hop,
        "event": r.trigger.as_ref().map(|t| &t.event),
        "source_run": r.trigger.as_ref().map(|t| &t.source_run),
        "artifacts": artifacts,
        "labels": r.labels,
        "tool_calls": r.tool_calls,
        "tool_budget": budget,
    })
}

/// Read resource `uri` of run `run` on `engine`.
pub fn read_resource(
    engine: &mut Engine,
    run: &str,
    uri: &str,
) -> Result<ReadResourceResult, McpError> {
    let failed = |e: crate::error::LedgerError| McpError::internal_error(e.to_string(), None);
    let damaged = |e: crate::views::ViewError| McpError::internal_error(e.to_string(), None);
    let (text, mime) = if uri == resource_uri(run, "input") {
        let views = engine.views();
        let found = views.run(run).map_err(damaged)?.ok_or_else(|| {
            McpError::resource_not_found(format!("run {run} is not in the ledger"), None)
        })?;
        let budget = views
            .version(&found.agent, found.version)
            .map_err(damaged)?
            .and_then(|v| v.tool_budget);
        (input_of(&found, budget).to_string(), "application/json")
    } else if uri == resource_uri(run, "trail") {
        let q = Query::Trail {
            run: run.to_string(),
            chain: false,
            as_of: None,
        };
        let said = queries::answer(engine, &q, true).map_err(failed)?;
        if let Some(f) = said.failure {
            return Err(McpError::internal_error(f.error.message, None));
        }
        (said.out, "application/x-ndjson")
    } else {
        return Err(McpError::resource_not_found(
            format!(
                "run {run} has no resource {uri:?}: it has {} and {}",
                resource_uri(run, "input"),
                resource_uri(run, "trail")
            ),
            None,
        ));
    };
    Ok(ReadResourceResult::new(vec![
        ResourceContents::TextResourceContents {
            uri: uri.to_string(),
            mime_type: Some(mime.into()),
            text,
            meta: None,
        },
    ]))
}
