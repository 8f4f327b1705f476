//! A run's governed tools as MCP tools, whichever transport carries them
//! (the server's `/v1/runs/{run}/mcp`, `agentledger mcp` on STDIO): their
//! schemas, the protocol operation each call stands for, the tool result
//! each reply makes, the run's resources (its input, its trail) and the
//! answers kept for retries. It translates only: a call is decided by the
//! engine like any other operation, and what a resource shows is what the
//! views say.

mod binding;
mod handler;
mod resources;
mod retries;
mod tools;

pub use binding::Binding;
pub use handler::{RunLedger, RunTools};
pub use resources::{input_of, read_resource, resource_uri, resources};
pub use retries::{call_identity, Answered, IDEMPOTENCY_KEY};
pub use tools::{operation, result_of, tools};

use crate::model::Run;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};

/// What a run's MCP server says of itself at `initialize`.
pub fn server_info() -> ServerConfig {
    let mut info = ServerConfig::new(
        // Prompts are declared (there are none) so that a client listing
        // them is answered rather than refused.
        ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_prompts()
            .build(),
    );
    info.server_info = Implementation::new("agentledger", env!("CARGO_PKG_VERSION"));
    info.instructions = Some(
        "The governed tools of one agent run: read the artifacts the run's trigger event exposes by name, then close the run. An agent a task's master invoked gets, reads by reference and returns its own context with the context tools; a master run sends contexts, evaluates what comes back and maintains its task. Every call is recorded in the ledger and may be refused with the ledger's code. The resources are the run's input (what the trigger exposes: names, digests, labels; never bytes) and its trail so far.".into(),
    );
    info
}

/// The names `run`'s trigger event exposes, in its order: all it may read.
pub fn names_of(run: &Run) -> Vec<String> {
    run.trigger
        .as_ref()
        .map(|t| t.artifacts.iter().map(|a| a.name.clone()).collect())
        .unwrap_or_default()
}
