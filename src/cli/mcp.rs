//! `agentledger mcp --run RUN`: a run's governed tools as an MCP server on
//! stdin/stdout (newline-delimited JSON-RPC; logs on stderr only), for agent
//! frameworks that start MCP servers as subprocesses. On the local data
//! dir, with the engine `apply` uses: each call is the protocol operation
//! of the same name, decided there and flushed before it is answered.

use super::args::Cli;
use super::open::open_engine;
use agentledger::engine::Engine;
use agentledger::mcp::{
    call_identity, names_of, operation, result_of, server_info, tools, Answered,
};
use agentledger::protocol::{self, Failure, Reply};
use anyhow::{bail, Context, Result};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use std::sync::{Arc, Mutex};

/// The tools of one run, on an engine of this process.
#[derive(Clone)]
struct StdioTools {
    engine: Arc<Mutex<Engine>>,
    run: String,
    names: Vec<String>,
    /// The tool results given, for a call retried with the same id (the
    /// process is the session).
    answered: Arc<Answered>,
}

impl StdioTools {
    /// The reply of the ledger to `op`, durable before it is returned.
    fn decide(&self, op: &serde_json::Value) -> Reply {
        let Ok(mut engine) = self.engine.lock() else {
            return Reply::Failed(Failure::new(
                agentledger::codes::Code::IoError,
                "the engine failed in an earlier call",
            ));
        };
        let done = protocol::parse_request(op).and_then(|r| protocol::answer(&mut engine, &r));
        let reply = match done {
            Ok(done) => Reply::Done(done),
            Err(e) => Reply::Failed(Failure::new(e.code(), e.to_string())),
        };
        match engine.flush() {
            Ok(()) => reply,
            Err(e) => Reply::Failed(Failure::new(e.code(), e.to_string())),
        }
    }
}

impl ServerHandler for StdioTools {
    fn get_info(&self) -> ServerConfig {
        server_info()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools(
            &self.run,
            &self.names,
        )))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(ListResourcesResult::with_all_items(
            agentledger::mcp::resources(&self.run),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let Ok(mut engine) = self.engine.lock() else {
            return Err(McpError::internal_error(
                "the engine failed in an earlier call",
                None,
            ));
        };
        agentledger::mcp::read_resource(&mut engine, &self.run, &request.uri).map(Into::into)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let identity = call_identity(
            "operator",
            &self.run,
            Some("stdio"),
            &ctx.id,
            request.meta.as_ref().or(Some(&ctx.meta)),
        );
        if let Some(first) = identity.as_deref().and_then(|k| self.answered.get(k)) {
            return Ok(first.into());
        }
        let args = request.arguments.clone().unwrap_or_default();
        let reply = match operation(&self.run, &request.name, &args) {
            Ok(op) => self.decide(&op),
            Err(f) => Reply::Failed(f),
        };
        let result = result_of(&request.name, reply);
        if let Some(k) = identity {
            self.answered.put(k, &result);
        }
        Ok(result.into())
    }
}

pub(super) fn serve_stdio(cli: &Cli, run: &str) -> Result<i32> {
    if let Some(server) = super::remote::server_for(cli)? {
        bail!(
            "a server at {} owns {}: point the MCP client at {}/v1/runs/{run}/mcp with the agent's token",
            server.url(),
            cli.data.display(),
            server.url()
        );
    }
    let engine = open_engine(cli)?;
    let found = engine
        .views()
        .run(run)
        .with_context(|| format!("reading run {run}"))?;
    let Some(found) = found else {
        bail!(
            "run {run:?} is not in the ledger at {}: `agentledger trail RUN` names the runs there",
            cli.data.display()
        );
    };
    let tools = StdioTools {
        names: names_of(&found),
        engine: Arc::new(Mutex::new(engine)),
        run: run.to_string(),
        answered: Arc::new(Answered::new(4096)),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let service = match tools.serve(rmcp::transport::stdio()).await {
            Ok(service) => service,
            // The client went away before it began: nothing was asked.
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(0),
            Err(e) => {
                return Err(e).context("starting the MCP session on stdin/stdout");
            }
        };
        service
            .waiting()
            .await
            .context("serving MCP on stdin/stdout")?;
        Ok(0)
    })
}
