//! Every answer, typed: one struct per operation, inside the envelope every
//! transport prints — `{"ok": true, …}` with `follow_up_failed` when work
//! after the durable append failed, or `{"ok": false, "error": {code,
//! message}}`. `apply`, HTTP and WebSocket all print these.

use crate::codes::Code;
use crate::context::{Layer1, Outcome};
use crate::engine::{DispatchAnswer, OpenedListener, RefusedListener, WithheldRun};
use crate::model::{ArtifactRef, LoopCheck, LoopWarning, Trigger, Withheld, WithheldReason};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `true` on the wire, and nothing else.
macro_rules! bool_const {
    ($name:ident, $value:literal) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name;
        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bool($value)
            }
        }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                match bool::deserialize(d)? {
                    $value => Ok($name),
                    other => Err(serde::de::Error::custom(format!(
                        "expected {}, not {other}",
                        $value
                    ))),
                }
            }
        }
        impl JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({"const": $value})
            }
        }
    };
}
bool_const!(True, true);
bool_const!(False, false);

/// An operation that was carried out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "Done_{T}")]
pub struct Done<T> {
    pub ok: True,
    #[serde(flatten)]
    pub answer: T,
    /// What failed after the operation's records were durable (it
    /// happened; these are retried by the next operation and by `serve`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub follow_up_failed: Vec<String>,
}

/// An operation that was refused or failed: nothing was recorded unless
/// the rule says a refusal is a step of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Failure {
    pub ok: False,
    pub error: ErrorBody,
    /// Where the request belongs, when this instance does not decide its
    /// ledger partition (`not_owner`): the HTTP face forwards it there.
    /// Never on the wire.
    #[serde(skip)]
    #[schemars(skip)]
    pub referral: Option<Box<crate::engine::Referral>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    pub code: Code,
    pub message: String,
}

impl Failure {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Failure {
            ok: False,
            error: ErrorBody {
                code,
                message: message.into(),
            },
            referral: None,
        }
    }
}

/// One answer line of any operation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Reply {
    Done(Done<Answer>),
    Failed(Failure),
}

impl Reply {
    pub fn is_ok(&self) -> bool {
        matches!(self, Reply::Done(_))
    }

    /// Where the request belongs, when this instance referred it to the
    /// owner of its chain's partition instead of deciding it.
    pub fn referral(&self) -> Option<&crate::engine::Referral> {
        match self {
            Reply::Failed(f) => f.referral.as_deref(),
            Reply::Done(_) => None,
        }
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("answers serialise")
    }
}

impl From<Failure> for Reply {
    fn from(f: Failure) -> Self {
        Reply::Failed(f)
    }
}

/// The answer of each operation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Answer {
    PublishAgent(Published),
    OpenRun(Opened),
    ReadArtifact(ArtifactRead),
    CloseRun(Closed),
    Dispatch(Dispatched),
    OpenTask(TaskOpened),
    UpdateTask(TaskUpdated),
    PutBlob(BlobPut),
    SendContext(ContextSent),
    GetContext(ContextGot),
    GetBlob(BlobGot),
    ReturnContext(ContextReturned),
    Evaluate(Evaluated),
    IssueToken(TokenIssuedOut),
    RevokeToken(TokenRevokedOut),
    ForgetTask(TaskForgotten),
}

impl Answer {
    /// Read the answer of operation `op` back from its JSON (without the
    /// envelope's `ok` and `follow_up_failed`, which are ignored).
    pub fn from_value(op: &str, v: Value) -> Result<Answer, AnswerError> {
        fn de<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, AnswerError> {
            serde_json::from_value(v).map_err(AnswerError::Shape)
        }
        Ok(match op {
            "publish_agent" => Answer::PublishAgent(de(v)?),
            "open_run" => Answer::OpenRun(de(v)?),
            "read_artifact" => Answer::ReadArtifact(de(v)?),
            "close_run" => Answer::CloseRun(de(v)?),
            "dispatch" => Answer::Dispatch(de(v)?),
            "open_task" => Answer::OpenTask(de(v)?),
            "update_task" => Answer::UpdateTask(de(v)?),
            "put_blob" => Answer::PutBlob(de(v)?),
            "send_context" => Answer::SendContext(de(v)?),
            "get_context" => Answer::GetContext(de(v)?),
            "get_blob" => Answer::GetBlob(de(v)?),
            "return_context" => Answer::ReturnContext(de(v)?),
            "evaluate" => Answer::Evaluate(de(v)?),
            "issue_token" => Answer::IssueToken(de(v)?),
            "revoke_token" => Answer::RevokeToken(de(v)?),
            "forget_task" => Answer::ForgetTask(de(v)?),
            other => return Err(AnswerError::NoOperation(other.to_owned())),
        })
    }
}

/// Why an answer's JSON is not the answer of its operation.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("no operation {0:?}")]
    NoOperation(String),
    #[error("{0}")]
    Shape(serde_json::Error),
}

/// `publish_agent`: the version and its loop check (R10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Published {
    pub agent: String,
    pub version: u32,
    pub warnings: Vec<LoopWarningOut>,
    pub may_be_more: bool,
    pub checked_in_full: bool,
    /// A summary line whenever the report is not the whole story.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LoopWarningOut {
    /// The loop, starting and ending with the published agent.
    #[serde(rename = "loop")]
    pub loop_agents: Vec<String>,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl From<&LoopWarning> for LoopWarningOut {
    fn from(w: &LoopWarning) -> Self {
        LoopWarningOut {
            loop_agents: w.loop_agents.clone(),
            text: w.text.clone(),
            note: w.note.clone(),
        }
    }
}

/// A loop check as printed (`publish_agent`'s answer, `agent --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LoopCheckOut {
    pub warnings: Vec<LoopWarningOut>,
    pub may_be_more: bool,
    pub checked_in_full: bool,
}

impl From<&LoopCheck> for LoopCheckOut {
    fn from(c: &LoopCheck) -> Self {
        LoopCheckOut {
            warnings: c.warnings.iter().map(Into::into).collect(),
            may_be_more: c.may_be_more,
            checked_in_full: c.checked_in_full,
        }
    }
}

/// `open_run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Opened {
    pub run: String,
    /// Null for a run without a chain position (R6).
    pub root: Option<String>,
    pub hop: Option<u32>,
    pub version: u32,
}

/// Bytes in an answer: `content` when they are text (unless base64 was
/// asked for), else `content_b64`; never a lossy rendering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContentOut {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_b64: Option<String>,
}

impl ContentOut {
    pub fn new(bytes: Vec<u8>, force_b64: bool) -> Self {
        use base64::Engine as _;
        let b64 = |b: &[u8]| Some(base64::engine::general_purpose::STANDARD.encode(b));
        match String::from_utf8(bytes) {
            Ok(text) if !force_b64 => ContentOut {
                content: Some(text),
                content_b64: None,
            },
            Ok(text) => ContentOut {
                content: None,
                content_b64: b64(text.as_bytes()),
            },
            Err(e) => ContentOut {
                content: None,
                content_b64: b64(e.as_bytes()),
            },
        }
    }
}

/// `read_artifact`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactRead {
    pub digest: String,
    pub labels: Vec<String>,
    pub source_run: String,
    #[serde(flatten)]
    pub content: ContentOut,
}

/// An artifact as answers name it: never its bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactOut {
    pub name: String,
    /// `cas://sha256:…`
    #[serde(rename = "ref")]
    pub reference: String,
    /// `sha256:…`
    pub digest: String,
    pub size: u64,
}

impl From<&ArtifactRef> for ArtifactOut {
    fn from(a: &ArtifactRef) -> Self {
        ArtifactOut {
            name: a.name.clone(),
            reference: a.content_ref(),
            digest: a.digest(),
            size: a.size,
        }
    }
}

/// Why a closing run's events were not published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WithheldOut {
    /// `hop_limit`, `chain_unknown` or `not_succeeded`.
    pub reason: String,
    pub events: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

impl From<&Withheld> for WithheldOut {
    fn from(w: &Withheld) -> Self {
        let mut o = WithheldOut {
            reason: w.reason.code().to_string(),
            events: w.events.clone(),
            root: None,
            limit: None,
            status: None,
        };
        match &w.reason {
            WithheldReason::HopLimit { root, limit } => {
                o.root = Some(root.clone());
                o.limit = Some(*limit);
            }
            WithheldReason::NotSucceeded { status } => o.status = Some(status.as_str().into()),
            WithheldReason::ChainUnknown => {}
        }
        o
    }
}

/// `close_run`: every artifact carries the run's labels, said once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Closed {
    pub run: String,
    pub withheld: Option<WithheldOut>,
    pub labels: Vec<String>,
    pub artifacts: Vec<ArtifactOut>,
}

/// `dispatch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Dispatched {
    pub opened: Vec<ListenerOpened>,
    pub refused: Vec<ListenerRefusedOut>,
    pub withheld: Vec<RunWithheld>,
}

/// A listener run opened by a dispatch, with what to start it with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListenerOpened {
    pub run: String,
    pub agent: String,
    pub root: String,
    pub hop: u32,
    pub event: String,
    pub event_id: String,
    pub source_run: String,
    pub input: ListenerInput,
}

/// What a listener is started with (R8): the event and the artifacts its
/// contract exposes, never their bytes; their labels listed once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListenerInput {
    pub event: String,
    pub event_id: String,
    pub context: String,
    pub source_run: String,
    pub labels: Vec<String>,
    pub artifacts: Vec<ArtifactOut>,
}

impl From<&Trigger> for ListenerInput {
    fn from(t: &Trigger) -> Self {
        let labels = crate::rules::labels::union(
            &t.artifacts
                .iter()
                .map(|a| a.labels.as_slice())
                .collect::<Vec<_>>(),
        );
        ListenerInput {
            event: t.event.clone(),
            event_id: t.event_id.clone(),
            context: t.context.clone(),
            source_run: t.source_run.clone(),
            labels,
            artifacts: t.artifacts.iter().map(Into::into).collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListenerRefusedOut {
    pub agent: String,
    pub event: String,
    pub source_run: String,
    /// `self_listen` or `scope_barrier`.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunWithheld {
    pub run: String,
    pub root: Option<String>,
    pub hop: Option<u32>,
    pub reason: String,
    pub events: Vec<String>,
}

impl From<&DispatchAnswer> for Dispatched {
    fn from(a: &DispatchAnswer) -> Self {
        let opened = |o: &OpenedListener| ListenerOpened {
            run: o.run.clone(),
            agent: o.agent.clone(),
            root: o.root.clone(),
            hop: o.hop,
            event: o.event.clone(),
            event_id: o.event_id.clone(),
            source_run: o.source_run.clone(),
            input: (&o.input).into(),
        };
        let refused = |r: &RefusedListener| ListenerRefusedOut {
            agent: r.agent.clone(),
            event: r.event.clone(),
            source_run: r.source_run.clone(),
            reason: r.reason.code().to_string(),
        };
        let withheld = |w: &WithheldRun| RunWithheld {
            run: w.run.clone(),
            root: w.root.clone(),
            hop: w.hop,
            reason: w.reason.clone(),
            events: w.events.clone(),
        };
        Dispatched {
            opened: a.opened.iter().map(opened).collect(),
            refused: a.refused.iter().map(refused).collect(),
            withheld: a.withheld.iter().map(withheld).collect(),
        }
    }
}

/// `open_task`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskOpened {
    pub task: String,
    pub master_run: String,
}

/// `update_task`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskUpdated {
    pub task: String,
}

/// `put_blob`: the ContextURI to send instead of the bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BlobPut {
    pub uri: String,
    pub digest: String,
    pub size: u64,
}

/// `send_context`: the subtask and the bytes sent inline vs by reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContextSent {
    pub subtask: String,
    pub agent: String,
    pub inline_bytes: u64,
    pub referenced_bytes: u64,
    pub est_tokens_saved: u64,
}

/// `get_context`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContextGot {
    pub subtask: String,
    pub agent_context: Value,
}

/// `get_blob`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BlobGot {
    pub digest: String,
    #[serde(flatten)]
    pub content: ContentOut,
}

/// `return_context`: layer one's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContextReturned {
    pub subtask: String,
    pub layer1: Layer1Out,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Layer1Out {
    pub passed: bool,
    pub reasons: Vec<String>,
}

impl From<&Layer1> for Layer1Out {
    fn from(l: &Layer1) -> Self {
        Layer1Out {
            passed: l.passed,
            reasons: l.reasons.clone(),
        }
    }
}

/// `evaluate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Evaluated {
    pub task: String,
    pub subtask: String,
    pub decision: Outcome,
}

/// `issue_token`: what the token grants (never the token).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TokenIssuedOut {
    pub id: String,
    pub principal: String,
    pub scopes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
}

/// `forget_task`: whether a key was erased now (false: it was already).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskForgotten {
    pub task: String,
    pub erased: bool,
    pub erased_at_ms: u64,
}

/// `revoke_token`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TokenRevokedOut {
    pub id: String,
    pub revoked: bool,
}
