//! `agentledger mcp --run RUN`: a run's governed tools as an MCP server on
//! stdin/stdout (newline-delimited JSON-RPC; logs on stderr only), for agent
//! frameworks that start MCP servers as subprocesses. On the local data
//! dir, with the engine `apply` uses (each call the protocol operation of
//! the same name, decided there and flushed before it is answered); or,
//! where a server owns the ledger (`--server URL`, or the one on the data
//! dir), relayed to the run's endpoint there with the token given
//! (`--token-file`, `AGENTLEDGER_TOKEN`), which decides everything.

use super::args::Cli;
use super::open::open_engine;
use agentledger::engine::Engine;
use agentledger::mcp::{names_of, Answered, Binding, RunLedger, RunTools};
use agentledger::protocol::{self, Failure, Reply};
use anyhow::{bail, Context, Result};
use rmcp::model::ReadResourceResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServiceExt};
use std::sync::{Arc, Mutex};

/// A run's tools on an engine of this process: the process is the
/// session, and its caller the operator of the data dir.
#[derive(Clone)]
struct LocalLedger {
    engine: Arc<Mutex<Engine>>,
    binding: Binding,
    /// The tool results given, for a call retried with the same id.
    answered: Arc<Answered>,
}

const BROKEN: &str = "the engine failed in an earlier call";

impl RunLedger for LocalLedger {
    fn binding(&self, _ctx: &RequestContext<RoleServer>) -> Result<Binding, McpError> {
        Ok(self.binding.clone())
    }

    async fn decide(&self, _ctx: &RequestContext<RoleServer>, op: serde_json::Value) -> Reply {
        let Ok(mut engine) = self.engine.lock() else {
            return Reply::Failed(Failure::new(agentledger::codes::Code::IoError, BROKEN));
        };
        let done = protocol::parse_request(&op).and_then(|r| protocol::answer(&mut engine, &r));
        let reply = match done {
            Ok(done) => Reply::Done(done),
            Err(e) => Reply::Failed(Failure::new(e.code(), e.to_string())),
        };
        match engine.flush() {
            Ok(()) => reply,
            Err(e) => Reply::Failed(Failure::new(e.code(), e.to_string())),
        }
    }

    async fn read(
        &self,
        _ctx: &RequestContext<RoleServer>,
        uri: String,
    ) -> Result<ReadResourceResult, McpError> {
        let Ok(mut engine) = self.engine.lock() else {
            return Err(McpError::internal_error(BROKEN, None));
        };
        agentledger::mcp::read_resource(&mut engine, &self.binding.run, &uri)
    }

    fn answered(&self) -> &Answered {
        &self.answered
    }
}

pub(super) fn serve_stdio(cli: &Cli, run: &str) -> Result<i32> {
    if let Some(server) = super::remote::server_for(cli)? {
        return super::mcp_relay::relay(&server, run);
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
    let tools = RunTools(LocalLedger {
        binding: Binding {
            run: run.to_string(),
            agent: found.agent.clone(),
            names: names_of(&found),
            who: "operator".into(),
            session: Some("stdio".into()),
        },
        engine: Arc::new(Mutex::new(engine)),
        answered: Arc::new(Answered::new(4096)),
    });
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
