//! Every operation a caller can ask for, as one serde enum tagged by `op`.
//! Fields are checked strictly (an unknown field is an error, so a typo is
//! never silently ignored); what serde cannot say — exactly one of two
//! content forms, a status spelled right — is checked when a request
//! becomes the engine's command ([`Request::validate`]).

use crate::context::{Mode, Outcome};
use crate::model::EmitDecl;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// One operation. Its JSON is an object whose `op` names the variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    PublishAgent(PublishAgentOp),
    OpenRun(OpenRunOp),
    ReadArtifact(ReadArtifactOp),
    CloseRun(CloseRunOp),
    Dispatch(DispatchOp),
    OpenTask(OpenTaskOp),
    UpdateTask(UpdateTaskOp),
    PutBlob(PutBlobOp),
    SendContext(SendContextOp),
    GetContext(GetContextOp),
    GetBlob(GetBlobOp),
    ReturnContext(ReturnContextOp),
    Evaluate(EvaluateOp),
    IssueToken(IssueTokenOp),
    RevokeToken(RevokeTokenOp),
    ForgetTask(ForgetTaskOp),
}

/// The `op` of every variant, in declaration order.
pub const OPS: &[&str] = &[
    "publish_agent",
    "open_run",
    "read_artifact",
    "close_run",
    "dispatch",
    "open_task",
    "update_task",
    "put_blob",
    "send_context",
    "get_context",
    "get_blob",
    "return_context",
    "evaluate",
    "issue_token",
    "revoke_token",
    "forget_task",
];

impl Request {
    /// The `op` this request is tagged with.
    pub fn op(&self) -> &'static str {
        match self {
            Request::PublishAgent(_) => "publish_agent",
            Request::OpenRun(_) => "open_run",
            Request::ReadArtifact(_) => "read_artifact",
            Request::CloseRun(_) => "close_run",
            Request::Dispatch(_) => "dispatch",
            Request::OpenTask(_) => "open_task",
            Request::UpdateTask(_) => "update_task",
            Request::PutBlob(_) => "put_blob",
            Request::SendContext(_) => "send_context",
            Request::GetContext(_) => "get_context",
            Request::GetBlob(_) => "get_blob",
            Request::ReturnContext(_) => "return_context",
            Request::Evaluate(_) => "evaluate",
            Request::IssueToken(_) => "issue_token",
            Request::RevokeToken(_) => "revoke_token",
            Request::ForgetTask(_) => "forget_task",
        }
    }

    /// Whether the operation writes to the log (everything but the reads
    /// of a run's artifact, a subtask's context and a blob may).
    pub fn writes(&self) -> bool {
        !matches!(
            self,
            Request::ReadArtifact(_) | Request::GetContext(_) | Request::GetBlob(_)
        )
    }
}

/// Publish a new version of an agent (R5, R10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishAgentOp {
    pub agent: String,
    pub scope: String,
    #[serde(default)]
    pub listens: Vec<String>,
    #[serde(default)]
    pub emits: Vec<Emit>,
    /// Scopes the publisher may see in loop warnings; its own scope when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<Vec<String>>,
    /// Artifact reads a run of this version may make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_budget: Option<u32>,
}

/// Record a bearer token (operator only). The caller made the token and
/// sends only its SHA-256: the token itself never reaches the ledger.
/// `agentledger token issue` does all of this.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IssueTokenOp {
    /// SHA-256 of the token, 64 hex digits.
    pub sha256: String,
    /// operator, platform:NAME, agent:NAME, auditor or consumer.
    pub principal: String,
    /// Scopes granted (a platform needs one; a consumer is limited to them).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Seconds until it stops authenticating; never when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_s: Option<u64>,
}

/// Erase a task's context now (its key deleted): its sealed records stay
/// in the log, verifiable and unreadable (the operator or the task's
/// master).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetTaskOp {
    pub task: String,
}

/// Withdraw a token (operator only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RevokeTokenOp {
    pub id: String,
}

/// An event a version declares it emits, with the artifacts it exposes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Emit {
    pub event: String,
    pub context: String,
    #[serde(default)]
    pub artifacts: Vec<String>,
}

impl From<Emit> for EmitDecl {
    fn from(e: Emit) -> Self {
        EmitDecl {
            event: e.event,
            context: e.context,
            artifacts: e.artifacts,
        }
    }
}

/// Open a root run of an agent's current version (R1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenRunOp {
    pub run: String,
    pub agent: String,
    /// For a run started outside the ledger's chains: it records no chain
    /// position and publishes nothing further (R6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub legacy_trigger: Option<String>,
}

/// Read an artifact a run's trigger exposes, by contract name (R8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArtifactOp {
    pub run: String,
    pub name: String,
    /// Answer `content_b64` even when the bytes are text.
    #[serde(default, skip_serializing_if = "is_false")]
    pub base64: bool,
}

/// Close a run with its artifacts (R2, R5, R9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CloseRunOp {
    pub run: String,
    /// `succeeded`, `failed` or `cancelled`.
    pub status: String,
    #[serde(default)]
    pub summary: String,
    #[serde(default)]
    pub artifacts: BTreeMap<String, Content>,
    #[serde(default)]
    pub labels: Vec<String>,
}

/// Open listener runs for the events finished runs published (R3, R4, R9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DispatchOp {
    /// Never read from a request: the scopes of the platform asking, set
    /// by the server from its grant (a platform dispatches only its own
    /// agents' finished runs). `None`: every run's.
    #[serde(skip)]
    pub within: Option<Vec<String>>,
}

/// Open a task whose master is `run` (R11).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenTaskOp {
    pub task: String,
    pub run: String,
    pub task_context: Value,
}

/// The master changes its task's context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTaskOp {
    pub task: String,
    pub run: String,
    pub task_context: Value,
}

/// Offload bytes into the task's content store; the answer's URI is what
/// a context message carries instead (R14).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PutBlobOp {
    pub task: String,
    /// Text content; or `content_b64` for bytes (exactly one of the two).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_b64: Option<String>,
    /// RFC 6838 `type/subtype[; parameters]`, at most 255 bytes.
    #[serde(default = "default_media_type")]
    pub media_type: String,
    /// Seconds the reference stays readable.
    #[serde(default = "default_ttl")]
    pub ttl_s: u64,
}

fn default_media_type() -> String {
    "text/plain".into()
}

fn default_ttl() -> u64 {
    24 * 3600
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The master invokes an agent with a context message (R12, R14).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendContextOp {
    pub task: String,
    pub mode: Mode,
    pub agent_context: Value,
    /// The master run: only it invokes agents.
    pub run: String,
}

/// An invoked agent fetches its subtask's context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetContextOp {
    pub task: String,
    pub agent: String,
}

/// An invoked agent fetches offloaded content by its ContextURI (R14).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetBlobOp {
    pub task: String,
    pub agent: String,
    pub uri: String,
    /// Answer `content_b64` even when the bytes are text.
    #[serde(default, skip_serializing_if = "is_false")]
    pub base64: bool,
}

/// An invoked agent returns its result; layer one is checked (R13).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReturnContextOp {
    pub task: String,
    pub agent: String,
    pub agent_context: Value,
}

/// The master decides on a returned subtask (layer two of R13).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvaluateOp {
    pub task: String,
    pub subtask: String,
    pub decision: Outcome,
    #[serde(default)]
    pub reason: String,
    /// The master run: only it decides.
    pub run: String,
}

/// Bytes in a request: a string of text, or an object with exactly one of
/// `content` (text) and `content_b64` (base64 bytes: images, audio).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(ContentParts),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContentParts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_b64: Option<String>,
}

impl<'de> Deserialize<'de> for Content {
    // By hand, so that a wrong kind is named (an untagged enum would only
    // say that no variant matched).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match Value::deserialize(d)? {
            Value::String(s) => Ok(Content::Text(s)),
            v @ Value::Object(_) => serde_json::from_value(v).map(Content::Parts).map_err(|e| {
                D::Error::custom(format!(
                    "{e} (expected text, or {{\"content_b64\": \"…\"}})"
                ))
            }),
            other => Err(D::Error::custom(format!(
                "expected text or {{\"content_b64\": \"…\"}}, not {}",
                json_kind(&other)
            ))),
        }
    }
}

/// How a JSON value's kind is named in errors.
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Content given as text or base64: exactly one of the two.
/// Longest media type `put_blob` takes (RFC 6838 names are at most 127
/// characters each side; parameters fit in what is left).
pub const MAX_MEDIA_TYPE_BYTES: usize = 255;

/// A media type as RFC 6838 writes one: `type/subtype` of restricted-name
/// characters, then optional `; name=value` parameters of visible ASCII;
/// at most [`MAX_MEDIA_TYPE_BYTES`]. What the trail shows, so nothing else.
pub fn check_media_type(m: &str) -> Result<(), BadContent> {
    let bad = |why: &str| {
        Err(BadContent::MediaType {
            media_type: m.chars().take(80).collect(),
            why: why.to_owned(),
        })
    };
    if m.len() > MAX_MEDIA_TYPE_BYTES {
        return bad(&format!("is longer than {MAX_MEDIA_TYPE_BYTES} bytes"));
    }
    let (essence, params) = m.split_once(';').unwrap_or((m, ""));
    let restricted = |s: &str| {
        !s.is_empty()
            && s.len() <= 127
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    match essence.trim_end().split_once('/') {
        Some((t, sub)) if restricted(t) && restricted(sub) => {}
        _ => return bad("is not type/subtype (RFC 6838)"),
    }
    if !params
        .bytes()
        .all(|b| b == b' ' || b == b'\t' || b.is_ascii_graphic())
    {
        return bad("has characters a media type cannot hold");
    }
    Ok(())
}

pub fn content_bytes(
    what: &str,
    text: Option<&str>,
    b64: Option<&str>,
) -> Result<Vec<u8>, BadContent> {
    use base64::Engine as _;
    let what = what.to_owned();
    match (text, b64) {
        (Some(t), None) => Ok(t.as_bytes().to_vec()),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b.as_bytes())
            .map_err(|source| BadContent::NotBase64 { what, source }),
        (Some(_), Some(_)) => Err(BadContent::Both { what }),
        (None, None) => Err(BadContent::Missing { what }),
    }
}

/// Why a request's content, or its media type, is not well formed.
#[derive(Debug, thiserror::Error)]
pub enum BadContent {
    #[error("put_blob: media_type {media_type:?} {why}")]
    MediaType { media_type: String, why: String },
    #[error("{what}: content_b64 is not base64: {source}")]
    NotBase64 {
        what: String,
        source: base64::DecodeError,
    },
    #[error("{what}: give content or content_b64, not both")]
    Both { what: String },
    #[error("{what}: missing content (text) or content_b64 (base64 bytes)")]
    Missing { what: String },
}

impl Content {
    /// The bytes, or why the content is not well formed (naming `what`).
    pub fn bytes(&self, what: &str) -> Result<Vec<u8>, BadContent> {
        match self {
            Content::Text(t) => Ok(t.as_bytes().to_vec()),
            Content::Parts(p) => {
                content_bytes(what, p.content.as_deref(), p.content_b64.as_deref())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_are_rfc_6838_names_and_nothing_that_could_forge_a_trail_line() {
        for ok in [
            "text/plain",
            "application/vnd.acme+json",
            "text/plain; charset=utf-8",
            "image/svg+xml",
        ] {
            assert!(check_media_type(ok).is_ok(), "{ok}");
        }
        let long = format!("text/{}", "a".repeat(300));
        for bad in [
            "",
            "text",
            "/plain",
            "text/",
            "text/plain) until 0 ms\nm   #2 closed",
            "text/plain; x=\u{1b}[8m",
            "text/pl\0ain",
            "text/pl ain",
            long.as_str(),
        ] {
            let e = check_media_type(bad).unwrap_err().to_string();
            assert!(e.contains("media_type"), "{e}");
        }
    }
}
