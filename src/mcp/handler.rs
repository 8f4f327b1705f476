//! The MCP server of one run, whichever transport and ledger carry it: a
//! transport finds who asks about which run ([`Binding`]) and hands each
//! operation to its ledger ([`RunLedger`]); what a tool call becomes, how a
//! retry is answered and what a refusal looks like is decided here once.

use super::binding::Binding;
use super::retries::{call_identity, Answered};
use super::tools::{operation, result_of, tools};
use crate::protocol::Reply;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;
use std::future::Future;

/// A ledger a run's tools are answered by: the server's (through its
/// ledger thread) or the one a process opened on a data dir.
pub trait RunLedger: Send + Sync + 'static {
    /// Who the request `ctx` comes from, about which run.
    fn binding(&self, ctx: &RequestContext<RoleServer>) -> Result<Binding, McpError>;

    /// The ledger's reply to operation `op`, asked by the caller of `ctx`;
    /// durable before it is returned.
    fn decide(
        &self,
        ctx: &RequestContext<RoleServer>,
        op: Value,
    ) -> impl Future<Output = Reply> + Send;

    /// Resource `uri` of the run of `ctx`.
    fn read(
        &self,
        ctx: &RequestContext<RoleServer>,
        uri: String,
    ) -> impl Future<Output = Result<ReadResourceResult, McpError>> + Send;

    /// The tool results given lately, for retries.
    fn answered(&self) -> &Answered;

    /// A tool call of `ctx` was answered, its result an error or not (for
    /// the transport's telemetry).
    fn called(&self, _ctx: &RequestContext<RoleServer>, _tool_error: bool) {}
}

/// A run's tools and resources over MCP, answered by `L`.
#[derive(Clone)]
pub struct RunTools<L>(pub L);

impl<L: RunLedger> ServerHandler for RunTools<L> {
    fn get_info(&self) -> ServerConfig {
        super::server_info()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let b = self.0.binding(&ctx)?;
        Ok(ListToolsResult::with_all_items(tools(&b)))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let b = self.0.binding(&ctx)?;
        Ok(ListResourcesResult::with_all_items(super::resources(
            &b.run,
        )))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.0.read(&ctx, request.uri).await.map(Into::into)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let b = self.0.binding(&ctx)?;
        let identity = call_identity(
            &b.who,
            &b.run,
            b.session.as_deref(),
            &ctx.id,
            request.meta.as_ref().or(Some(&ctx.meta)),
        );
        let answered = self.0.answered();
        if let Some(first) = identity.as_deref().and_then(|k| answered.get(k)) {
            self.0.called(&ctx, first.is_error == Some(true));
            return Ok(first.into());
        }
        let args = request.arguments.clone().unwrap_or_default();
        let result = match operation(&b, &request.name, &args) {
            Ok(op) => {
                let reply = self.0.decide(&ctx, op.clone()).await;
                result_of(&b, &request.name, &op, reply)
            }
            Err(f) => result_of(&b, &request.name, &Value::Null, Reply::Failed(f)),
        };
        if let Some(k) = identity {
            answered.put(k, &result);
        }
        self.0.called(&ctx, result.is_error == Some(true));
        Ok(result.into())
    }
}
