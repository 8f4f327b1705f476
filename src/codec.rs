//! The wire format of ledger records: a small versioned envelope around a
//! bincode body. bincode is behind this one module (it is unmaintained,
//! RUSTSEC-2025-0141), and golden-byte tests pin the format so a
//! wire-compatible replacement can be dropped in without migrating data.
//!
//! Layout: `u16 LE schema version` then the bincode (standard config)
//! encoding of the envelope, whose `body` is the bincode encoding of a
//! [`LedgerEvent`] and `body_digest` its sha256. Version 2 ([`Envelope`])
//! adds the principal that caused the record; version 1 ([`EnvelopeV1`],
//! written before callers had identities) still reads, as the operator's.
//! Version 3 ([`EnvelopeV3`]) adds the span of the request that caused the
//! record (an MCP tool call whose span the server exported live), and is
//! written only for such records: every other record stays version 2, so
//! a build that reads version 2 reads all of them.

use crate::model::LedgerEvent;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The newest version this build writes (version 2 where a record has no
/// span, see the module comment).
pub const SCHEMA_VERSION: u16 = 3;

/// Who caused a version 1 record: before identities, whoever ran the
/// binary on the data dir.
pub const V1_PRINCIPAL: &str = "operator";

/// Records larger than this are refused before they reach the log.
pub const MAX_RECORD_BYTES: usize = 8 * 1024 * 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("record is {0} bytes, too short for an envelope")]
    TooShort(usize),
    #[error("record has schema version {found}; this build reads versions 1 to {SCHEMA_VERSION}")]
    UnknownSchemaVersion { found: u16 },
    #[error("record envelope does not decode: {0}")]
    BadEnvelope(String),
    #[error("record body digest mismatch: envelope says {expected}, body hashes to {found}")]
    DigestMismatch { expected: String, found: String },
    #[error("record body does not decode: {0}")]
    BadBody(String),
    #[error("record of {0} bytes exceeds the limit of {MAX_RECORD_BYTES} bytes")]
    TooLarge(usize),
}

/// Envelope of a version 1 record (no principal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeV1 {
    pub event_id: String,
    /// The record's key in the log: the chain root for ledger records.
    pub chain_key: String,
    /// Milliseconds since the Unix epoch, from the deciding engine's clock.
    pub time_ms: u64,
    /// Which engine instance wrote it.
    pub writer: String,
    /// Position of this record in its run's trail (0 for registry records).
    pub step: u32,
    pub body_digest: [u8; 32],
    pub body: Vec<u8>,
}

/// Envelope metadata of one record, as version 2 writes it (and, with
/// its span, version 3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    pub event_id: String,
    pub chain_key: String,
    pub time_ms: u64,
    pub writer: String,
    pub step: u32,
    /// The principal whose request caused the record (`agent:hotel`).
    pub principal: String,
    pub body_digest: [u8; 32],
    pub body: Vec<u8>,
    /// The span of the request that caused the record (version 3 only;
    /// not part of version 2's layout).
    #[serde(skip)]
    pub span: Option<SpanRef>,
}

/// A W3C trace context's ids: the trace, and the span in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SpanRef {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
}

/// Envelope of a version 3 record: version 2's with the span of the
/// request that caused it, before the body digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeV3 {
    pub event_id: String,
    pub chain_key: String,
    pub time_ms: u64,
    pub writer: String,
    pub step: u32,
    pub principal: String,
    pub span: SpanRef,
    pub body_digest: [u8; 32],
    pub body: Vec<u8>,
}

impl From<EnvelopeV3> for Envelope {
    fn from(v: EnvelopeV3) -> Self {
        Envelope {
            event_id: v.event_id,
            chain_key: v.chain_key,
            time_ms: v.time_ms,
            writer: v.writer,
            step: v.step,
            principal: v.principal,
            body_digest: v.body_digest,
            body: v.body,
            span: Some(v.span),
        }
    }
}

/// Who caused a record: the principal, and the span of its request when
/// the record is to name one.
#[derive(Debug, Clone, Copy)]
pub struct Cause<'a> {
    pub principal: &'a str,
    pub span: Option<SpanRef>,
}

impl From<EnvelopeV1> for Envelope {
    fn from(v: EnvelopeV1) -> Self {
        Envelope {
            event_id: v.event_id,
            chain_key: v.chain_key,
            time_ms: v.time_ms,
            writer: v.writer,
            step: v.step,
            principal: V1_PRINCIPAL.to_string(),
            body_digest: v.body_digest,
            body: v.body,
            span: None,
        }
    }
}

/// A decoded record: envelope metadata plus the event.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub event_id: String,
    pub chain_key: String,
    pub time_ms: u64,
    pub writer: String,
    pub step: u32,
    pub principal: String,
    /// The span of the request that caused it (version 3 records).
    pub span: Option<SpanRef>,
    pub body_digest: [u8; 32],
    pub event: LedgerEvent,
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Most bytes decoding one record may claim. bincode allocates what a
/// length prefix says before it reads the bytes, so a damaged or hostile
/// prefix would otherwise ask for terabytes and abort the process; a record
/// is at most [`MAX_RECORD_BYTES`], and what decoding it claims stays within
/// a small multiple of that.
const RECORD_DECODE_LIMIT: usize = 4 * MAX_RECORD_BYTES;

/// Most bytes decoding one view value may claim: views hold whole task
/// states, which grow with their contexts, so the bound is generous — it
/// only keeps a damaged length from aborting the process.
const VIEW_DECODE_LIMIT: usize = 1 << 30;

fn record_config() -> impl bincode::config::Config {
    config().with_limit::<RECORD_DECODE_LIMIT>()
}

pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Encode any view or record value with the same bincode configuration.
pub fn to_bytes<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    bincode::serde::encode_to_vec(value, config()).map_err(|e| CodecError::BadBody(e.to_string()))
}

/// Decode a value written by [`to_bytes`].
pub fn from_bytes<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (v, _) =
        bincode::serde::decode_from_slice(bytes, config().with_limit::<VIEW_DECODE_LIMIT>())
            .map_err(|e| CodecError::BadBody(e.to_string()))?;
    Ok(v)
}

/// Encode the event alone (the record body).
pub fn encode_body(event: &LedgerEvent) -> Result<Vec<u8>, CodecError> {
    bincode::serde::encode_to_vec(event, config()).map_err(|e| CodecError::BadBody(e.to_string()))
}

pub fn decode_body(bytes: &[u8]) -> Result<LedgerEvent, CodecError> {
    let (ev, used) = bincode::serde::decode_from_slice(bytes, record_config())
        .map_err(|e| CodecError::BadBody(e.to_string()))?;
    if used != bytes.len() {
        return Err(CodecError::BadBody(format!(
            "{} trailing bytes after the event",
            bytes.len() - used
        )));
    }
    Ok(ev)
}

/// Encode a full record caused by the operator.
pub fn encode(
    event: &LedgerEvent,
    event_id: &str,
    chain_key: &str,
    time_ms: u64,
    writer: &str,
    step: u32,
) -> Result<Vec<u8>, CodecError> {
    encode_by(
        event,
        event_id,
        chain_key,
        time_ms,
        writer,
        step,
        Cause {
            principal: V1_PRINCIPAL,
            span: None,
        },
    )
}

/// Encode a full record caused by `by`: version 3 when it names a span,
/// else version 2.
pub fn encode_by(
    event: &LedgerEvent,
    event_id: &str,
    chain_key: &str,
    time_ms: u64,
    writer: &str,
    step: u32,
    by: Cause<'_>,
) -> Result<Vec<u8>, CodecError> {
    let body = encode_body(event)?;
    let env = Envelope {
        event_id: event_id.to_string(),
        chain_key: chain_key.to_string(),
        time_ms,
        writer: writer.to_string(),
        step,
        principal: by.principal.to_string(),
        body_digest: sha256(&body),
        body,
        span: None,
    };
    let bad = |e: bincode::error::EncodeError| CodecError::BadEnvelope(e.to_string());
    let mut out;
    match by.span {
        None => {
            out = 2u16.to_le_bytes().to_vec();
            bincode::serde::encode_into_std_write(&env, &mut out, config()).map_err(bad)?;
        }
        Some(span) => {
            let v3 = EnvelopeV3 {
                event_id: env.event_id,
                chain_key: env.chain_key,
                time_ms,
                writer: env.writer,
                step,
                principal: env.principal,
                span,
                body_digest: env.body_digest,
                body: env.body,
            };
            out = 3u16.to_le_bytes().to_vec();
            bincode::serde::encode_into_std_write(&v3, &mut out, config()).map_err(bad)?;
        }
    }
    if out.len() > MAX_RECORD_BYTES {
        return Err(CodecError::TooLarge(out.len()));
    }
    Ok(out)
}

/// The schema version of a record, when this build reads it.
fn version_of(bytes: &[u8]) -> Result<u16, CodecError> {
    if bytes.len() < 2 {
        return Err(CodecError::TooShort(bytes.len()));
    }
    match u16::from_le_bytes([bytes[0], bytes[1]]) {
        v @ 1..=3 => Ok(v),
        found => Err(CodecError::UnknownSchemaVersion { found }),
    }
}

/// Decode the envelope only, checking the schema version but not the body.
pub fn decode_envelope(bytes: &[u8]) -> Result<Envelope, CodecError> {
    let bad = |e: bincode::error::DecodeError| CodecError::BadEnvelope(e.to_string());
    let (env, used): (Envelope, usize) = match version_of(bytes)? {
        1 => {
            let (v1, used): (EnvelopeV1, usize) =
                bincode::serde::decode_from_slice(&bytes[2..], record_config()).map_err(bad)?;
            (v1.into(), used)
        }
        2 => bincode::serde::decode_from_slice(&bytes[2..], record_config()).map_err(bad)?,
        _ => {
            let (v3, used): (EnvelopeV3, usize) =
                bincode::serde::decode_from_slice(&bytes[2..], record_config()).map_err(bad)?;
            (v3.into(), used)
        }
    };
    if used != bytes.len() - 2 {
        return Err(CodecError::BadEnvelope(format!(
            "{} trailing bytes after the envelope",
            bytes.len() - 2 - used
        )));
    }
    Ok(env)
}

/// The envelope borrowed from the record bytes: what `envelope_body` must
/// agree with.
#[cfg(test)]
#[derive(Deserialize)]
struct EnvelopeRefV1<'a> {
    #[serde(borrow)]
    _event_id: &'a str,
    #[serde(borrow)]
    _chain_key: &'a str,
    _time_ms: u64,
    #[serde(borrow)]
    _writer: &'a str,
    _step: u32,
    body_digest: [u8; 32],
    #[serde(borrow, with = "serde_bytes_ref")]
    body: &'a [u8],
}

#[cfg(test)]
#[derive(Deserialize)]
struct EnvelopeRefV2<'a> {
    #[serde(borrow)]
    _event_id: &'a str,
    #[serde(borrow)]
    _chain_key: &'a str,
    _time_ms: u64,
    #[serde(borrow)]
    _writer: &'a str,
    _step: u32,
    #[serde(borrow)]
    _principal: &'a str,
    body_digest: [u8; 32],
    #[serde(borrow, with = "serde_bytes_ref")]
    body: &'a [u8],
}

#[cfg(test)]
#[derive(Deserialize)]
struct EnvelopeRefV3<'a> {
    #[serde(borrow)]
    _event_id: &'a str,
    #[serde(borrow)]
    _chain_key: &'a str,
    _time_ms: u64,
    #[serde(borrow)]
    _writer: &'a str,
    _step: u32,
    #[serde(borrow)]
    _principal: &'a str,
    _span: SpanRef,
    body_digest: [u8; 32],
    #[serde(borrow, with = "serde_bytes_ref")]
    body: &'a [u8],
}

// bincode writes a Vec<u8> as a length and the bytes; read it back borrowed.
#[cfg(test)]
mod serde_bytes_ref {
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<&'de [u8], D::Error> {
        <&'de [u8] as serde::Deserialize>::deserialize(d)
    }
}

/// Check a record's schema version and body digest without decoding the
/// body: what `verify` needs of every record, at hashing speed. Returns the
/// body's length (the body is the record's last field).
pub fn check_digest(bytes: &[u8]) -> Result<usize, CodecError> {
    let version = version_of(bytes)?;
    let (body_digest, body) = envelope_body(&bytes[2..], version)?;
    let found = sha256(body);
    if found != body_digest {
        return Err(CodecError::DigestMismatch {
            expected: hex::encode(body_digest),
            found: hex::encode(found),
        });
    }
    Ok(body.len())
}

/// The body digest and body of an envelope, found by walking its fields
/// rather than decoding them: `verify` needs only these two of every
/// record, and the digest over the header bytes covers the rest. Follows
/// bincode's standard configuration (little-endian varints: a byte below
/// 251, or 251/252/253 followed by a u16/u32/u64), pinned by
/// `envelope_walk_agrees_with_bincode`.
fn envelope_body(bytes: &[u8], version: u16) -> Result<([u8; 32], &[u8]), CodecError> {
    let bad = |what: &str| CodecError::BadEnvelope(format!("{what} is cut short or malformed"));
    let mut at = 0usize;
    let varint = |at: &mut usize, what: &str| -> Result<u64, CodecError> {
        let first = *bytes.get(*at).ok_or_else(|| bad(what))?;
        let width = match first {
            0..=250 => {
                *at += 1;
                return Ok(first as u64);
            }
            251 => 2,
            252 => 4,
            253 => 8,
            _ => return Err(bad(what)),
        };
        let raw = bytes
            .get(*at + 1..*at + 1 + width)
            .ok_or_else(|| bad(what))?;
        let mut le = [0u8; 8];
        le[..width].copy_from_slice(raw);
        *at += 1 + width;
        Ok(u64::from_le_bytes(le))
    };
    let skip_bytes = |at: &mut usize, what: &str| -> Result<(), CodecError> {
        let len = varint(at, what)? as usize;
        if bytes.len().saturating_sub(*at) < len {
            return Err(bad(what));
        }
        *at += len;
        Ok(())
    };
    skip_bytes(&mut at, "event_id")?;
    skip_bytes(&mut at, "chain_key")?;
    varint(&mut at, "time_ms")?;
    skip_bytes(&mut at, "writer")?;
    varint(&mut at, "step")?;
    if version >= 2 {
        skip_bytes(&mut at, "principal")?;
    }
    if version >= 3 {
        // The span: 16 + 8 bytes as they are.
        if bytes.len() - at < 24 {
            return Err(bad("span"));
        }
        at += 24;
    }
    let digest: [u8; 32] = bytes
        .get(at..at + 32)
        .and_then(|d| d.try_into().ok())
        .ok_or_else(|| bad("body_digest"))?;
    at += 32;
    let body_len = varint(&mut at, "body")? as usize;
    let rest = bytes.len() - at;
    if rest < body_len {
        return Err(bad("body"));
    }
    if rest > body_len {
        return Err(CodecError::BadEnvelope(format!(
            "{} trailing bytes after the envelope",
            rest - body_len
        )));
    }
    Ok((digest, &bytes[at..]))
}

/// Decode a record without recomputing its body digest. For the projector's
/// hot path only: the log's own checksums (frame crc32 on the embedded log,
/// record CRCs on Kafka) already catch damage in storage and transport, and
/// tampering is `verify`'s to find (R16). Everything else reads with
/// [`decode`].
pub fn decode_for_projection(bytes: &[u8]) -> Result<Record, CodecError> {
    let env = decode_envelope(bytes)?;
    let event = decode_body(&env.body)?;
    Ok(Record {
        event_id: env.event_id,
        chain_key: env.chain_key,
        time_ms: env.time_ms,
        writer: env.writer,
        step: env.step,
        principal: env.principal,
        span: env.span,
        body_digest: env.body_digest,
        event,
    })
}

/// The body digest a record's envelope carries, found by walking the
/// envelope (nothing decoded, nothing checked against the body).
pub fn body_digest(bytes: &[u8]) -> Result<[u8; 32], CodecError> {
    let version = version_of(bytes)?;
    Ok(envelope_body(&bytes[2..], version)?.0)
}

/// Decode and verify a full record: schema version, body digest, body.
pub fn decode(bytes: &[u8]) -> Result<Record, CodecError> {
    check_digest(bytes)?;
    decode_for_projection(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;

    fn sample() -> LedgerEvent {
        LedgerEvent::RunOpened(RunOpened {
            run: "r1".into(),
            agent: "developer".into(),
            version: 1,
            scope: "acme/platform".into(),
            root: Some("r1".into()),
            hop: Some(0),
            trigger: None,
            legacy_trigger: None,
            labels: vec!["area:acme/platform".into()],
        })
    }

    /// One record body of every kind the log holds, with every optional
    /// field set where it has one.
    fn every_variant() -> Vec<(&'static str, LedgerEvent)> {
        use crate::context::{ContextEvent, Decision, Layer1, Mode, Outcome};
        let art = ArtifactRef {
            name: "patch".into(),
            sha256: [0xab; 32],
            size: 42,
            source_run: "r1".into(),
            labels: vec!["area:acme/platform".into(), "untrusted".into()],
        };
        let agent_context: crate::context::AgentContext = serde_json::from_value(serde_json::json!({
            "AgentID": "id-hotel", "AgentName": "hotel", "SubTaskID": "h1", "SubTaskName": "book",
            "Dependencies": [], "ContextItems": [], "todoItems": [{"itemID": "i1", "description": "d"}],
            "EvaluationPolicy": {"SuccessCriteria": [], "ConfidenceThreshold": 0.5}
        }))
        .unwrap();
        let task_context: crate::context::TaskContext = serde_json::from_value(serde_json::json!({
            "TaskID": "T1", "UserQuery": "q", "TaskName": "n", "TaskDescription": "d",
            "GoalStatus": [{"Goal": "g", "Status": "open"}], "OverallStatus": "open"
        }))
        .unwrap();
        let context = |event| {
            LedgerEvent::Context(Box::new(ContextRecord {
                master_run: "m1".into(),
                event,
            }))
        };
        vec![
            (
                "agent_published",
                LedgerEvent::AgentPublished(AgentVersion {
                    agent: "reviewer".into(),
                    version: 2,
                    scope: "acme/platform".into(),
                    listens: vec!["code.ready".into()],
                    emits: vec![EmitDecl {
                        event: "review.done".into(),
                        context: "change".into(),
                        artifacts: vec!["review".into()],
                    }],
                    access: vec!["acme".into()],
                    tool_budget: Some(3),
                    loop_check: LoopCheck {
                        warnings: vec![LoopWarning {
                            loop_agents: vec![
                                "reviewer".into(),
                                "developer".into(),
                                "reviewer".into(),
                            ],
                            text: "reviewer → developer → reviewer".into(),
                            note: Some("n".into()),
                        }],
                        may_be_more: true,
                        checked_in_full: true,
                        text: Some("t".into()),
                    },
                }),
            ),
            (
                "run_opened_by_an_event",
                LedgerEvent::RunOpened(RunOpened {
                    run: "run-1".into(),
                    agent: "reviewer".into(),
                    version: 2,
                    scope: "acme/platform".into(),
                    root: Some("r1".into()),
                    hop: Some(1),
                    trigger: Some(Trigger {
                        event_id: "ae-1".into(),
                        event: "code.ready".into(),
                        context: "change".into(),
                        source_run: "r1".into(),
                        artifacts: vec![art.clone()],
                    }),
                    legacy_trigger: Some("legacy".into()),
                    labels: vec!["area:acme/platform".into()],
                }),
            ),
            (
                "artifact_read",
                LedgerEvent::ArtifactRead(ArtifactRead {
                    run: "run-1".into(),
                    artifact: art.clone(),
                    labels_after: vec!["untrusted".into()],
                }),
            ),
            (
                "forbidden",
                LedgerEvent::Forbidden(Forbidden {
                    run: "run-1".into(),
                    op: "close_run".into(),
                    message: "m".into(),
                }),
            ),
            (
                "token_issued",
                LedgerEvent::TokenIssued(TokenIssued {
                    id: "tok_0102".into(),
                    sha256: [0x5a; 32],
                    principal: "platform:acme".into(),
                    scopes: vec!["acme".into()],
                    expires_at_ms: Some(1_700_000_000_000),
                }),
            ),
            (
                "token_revoked",
                LedgerEvent::TokenRevoked(TokenRevoked {
                    id: "tok_0102".into(),
                }),
            ),
            (
                "read_refused",
                LedgerEvent::ReadRefused(ReadRefused {
                    run: "run-1".into(),
                    requested: "secret".into(),
                    code: "not_in_contract".into(),
                    message: "m".into(),
                }),
            ),
            (
                "run_closed",
                LedgerEvent::RunClosed(RunClosed {
                    run: "r1".into(),
                    status: RunStatus::Succeeded,
                    summary: "s".into(),
                    artifacts: vec![art.clone()],
                    labels: vec!["area:acme/platform".into()],
                    published: vec![AgentEventOut {
                        event_id: "ae-1".into(),
                        event: "code.ready".into(),
                        context: "change".into(),
                        artifacts: vec![art.clone()],
                    }],
                    withheld: Some(Withheld {
                        reason: WithheldReason::HopLimit {
                            root: "r0".into(),
                            limit: 8,
                        },
                        events: vec!["code.ready".into()],
                    }),
                }),
            ),
            (
                "run_closed_failed",
                LedgerEvent::RunClosed(RunClosed {
                    run: "r2".into(),
                    status: RunStatus::Failed,
                    summary: String::new(),
                    artifacts: vec![],
                    labels: vec![],
                    published: vec![],
                    withheld: Some(Withheld {
                        reason: WithheldReason::NotSucceeded {
                            status: RunStatus::Cancelled,
                        },
                        events: vec![],
                    }),
                }),
            ),
            (
                "listener_refused",
                LedgerEvent::ListenerRefused(ListenerRefused {
                    source_run: "r1".into(),
                    event_id: "ae-1".into(),
                    event: "code.ready".into(),
                    agent: "billing".into(),
                    reason: RefusalReason::ScopeBarrier {
                        listener_scope: "acme/finance".into(),
                        areas: vec!["acme/platform".into()],
                    },
                }),
            ),
            (
                "run_dispatched",
                LedgerEvent::RunDispatched(RunDispatched {
                    run: "r1".into(),
                    closed_partition: 3,
                    closed_offset: 70_000,
                    opened: vec!["run-1".into()],
                }),
            ),
            (
                "task_opened",
                context(ContextEvent::TaskOpened {
                    task: "t1".into(),
                    master_run: "m1".into(),
                    task_context: task_context.clone(),
                    at: 7,
                }),
            ),
            (
                "context_sent",
                context(ContextEvent::ContextSent {
                    task: "t1".into(),
                    subtask: "s1".into(),
                    agent: "hotel".into(),
                    mode: Mode::Async,
                    context: agent_context.clone(),
                    at: 8,
                }),
            ),
            (
                "context_returned",
                context(ContextEvent::ContextReturned {
                    task: "t1".into(),
                    subtask: "s1".into(),
                    agent: "hotel".into(),
                    context: agent_context,
                    layer1: Layer1 {
                        passed: false,
                        reasons: vec!["r".into()],
                    },
                    at: 9,
                }),
            ),
            (
                "context_evaluated",
                context(ContextEvent::Evaluated {
                    task: "t1".into(),
                    subtask: "s1".into(),
                    decision: Decision {
                        outcome: Outcome::Rejected,
                        reason: "no".into(),
                    },
                    at: 10,
                }),
            ),
            (
                "task_updated",
                context(ContextEvent::TaskUpdated {
                    task: "t1".into(),
                    run: "m1".into(),
                    task_context,
                    at: 11,
                }),
            ),
            (
                "blob_put",
                context(ContextEvent::BlobPut {
                    task: "t1".into(),
                    uri: "cas://sha256/ab".into(),
                    digest: "sha256:ab".into(),
                    size: 5,
                    media_type: "text/plain".into(),
                    expires_at: 12,
                    at: 13,
                }),
            ),
            (
                "blob_read",
                context(ContextEvent::BlobRead {
                    task: "t1".into(),
                    reader: "hotel".into(),
                    uri: "cas://sha256/ab".into(),
                    digest: "sha256:ab".into(),
                    at: 14,
                }),
            ),
            (
                "context_refused",
                context(ContextEvent::Refused {
                    task: "t1".into(),
                    op: "get_blob".into(),
                    code: "not_granted".into(),
                    message: "m".into(),
                    agent: Some("weather".into()),
                    at: 15,
                }),
            ),
            (
                "sealed_context",
                LedgerEvent::SealedContext(crate::model::SealedContext {
                    master_run: "m1".into(),
                    task: "t1".into(),
                    kind: "blob_put".into(),
                    hold: Some(("cas://sha256/ab".into(), 12)),
                    sealed: vec![0xde, 0xad, 0xbe, 0xef],
                }),
            ),
            (
                "context_erased",
                LedgerEvent::ContextErased(crate::model::ContextErased {
                    task: "t1".into(),
                    master_run: "m1".into(),
                    at: 16,
                    expired: true,
                }),
            ),
        ]
    }

    /// Pins the body of every kind of record: a change here means logs
    /// already written no longer decode (bincode numbers variants and
    /// fields by position).
    #[test]
    fn golden_bytes_of_every_event_variant() {
        let variants = every_variant();
        assert_eq!(variants.len(), GOLDEN_BODIES.len());
        for ((name, ev), (gname, ghex)) in variants.into_iter().zip(GOLDEN_BODIES) {
            assert_eq!(name, *gname);
            assert_eq!(hex::encode(encode_body(&ev).unwrap()), *ghex, "{name}");
            assert_eq!(
                decode_body(&hex::decode(ghex).unwrap()).unwrap(),
                ev,
                "{name}"
            );
        }
        // Every kind of record is among them.
        let kinds: std::collections::BTreeSet<&str> = every_variant()
            .iter()
            .map(|(_, e)| match e {
                LedgerEvent::Context(_) => "context",
                LedgerEvent::SealedContext(_) => "sealed_context",
                e => e.kind(),
            })
            .collect();
        assert_eq!(kinds.len(), 13, "{kinds:?}");
    }

    /// The bodies of [`every_variant`] as this wire format writes them,
    /// checked against the format of the previous release when pinned.
    const GOLDEN_BODIES: &[(&str, &str)] = &[
        (
            "agent_published",
            "00087265766965776572020d61636d652f706c6174666f726d010a636f64652e7265616479010b7265766965772e646f6e65066368616e67650106726576696577010461636d650103010308726576696577657209646576656c6f70657208726576696577657223726576696577657220e2869220646576656c6f70657220e2869220726576696577657201016e0101010174",
        ),
        (
            "run_opened_by_an_event",
            "010572756e2d31087265766965776572020d61636d652f706c6174666f726d010272310101010461652d310a636f64652e7265616479066368616e676502723101057061746368abababababababababababababababababababababababababababababababab2a0272310212617265613a61636d652f706c6174666f726d09756e7472757374656401066c65676163790112617265613a61636d652f706c6174666f726d",
        ),
        (
            "artifact_read",
            "020572756e2d31057061746368abababababababababababababababababababababababababababababababab2a0272310212617265613a61636d652f706c6174666f726d09756e747275737465640109756e74727573746564",
        ),
        (
            "forbidden",
            "080572756e2d3109636c6f73655f72756e016d",
        ),
        ("token_issued", "0908746f6b5f303130325a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a0d706c6174666f726d3a61636d65010461636d6501fd0068e5cf8b010000"),
        ("token_revoked", "0a08746f6b5f30313032"),
        (
            "read_refused",
            "030572756e2d31067365637265740f6e6f745f696e5f636f6e7472616374016d",
        ),
        (
            "run_closed",
            "0402723100017301057061746368abababababababababababababababababababababababababababababababab2a0272310212617265613a61636d652f706c6174666f726d09756e747275737465640112617265613a61636d652f706c6174666f726d010461652d310a636f64652e7265616479066368616e676501057061746368abababababababababababababababababababababababababababababababab2a0272310212617265613a61636d652f706c6174666f726d09756e74727573746564010002723008010a636f64652e7265616479",
        ),
        (
            "run_closed_failed",
            "04027232010000000001020200",
        ),
        (
            "listener_refused",
            "050272310461652d310a636f64652e72656164790762696c6c696e67010c61636d652f66696e616e6365010d61636d652f706c6174666f726d",
        ),
        (
            "run_dispatched",
            "0602723103fc70110100010572756e2d31",
        ),
        (
            "task_opened",
            "07026d3100027431026d31877b225461736b4944223a225431222c22557365725175657279223a2271222c225461736b4e616d65223a226e222c225461736b4465736372697074696f6e223a2264222c22476f616c537461747573223a5b7b22476f616c223a2267222c22537461747573223a226f70656e227d5d2c224f766572616c6c537461747573223a226f70656e227d07",
        ),
        (
            "context_sent",
            "07026d310102743102733105686f74656c01e87b224167656e744944223a2269642d686f74656c222c224167656e744e616d65223a22686f74656c222c225375625461736b4944223a226831222c225375625461736b4e616d65223a22626f6f6b222c22446570656e64656e63696573223a5b5d2c22436f6e746578744974656d73223a5b5d2c22746f646f4974656d73223a5b7b226974656d4944223a226931222c226465736372697074696f6e223a2264227d5d2c224576616c756174696f6e506f6c696379223a7b22537563636573734372697465726961223a5b5d2c22436f6e666964656e63655468726573686f6c64223a302e357d7d08",
        ),
        (
            "context_returned",
            "07026d310202743102733105686f74656ce87b224167656e744944223a2269642d686f74656c222c224167656e744e616d65223a22686f74656c222c225375625461736b4944223a226831222c225375625461736b4e616d65223a22626f6f6b222c22446570656e64656e63696573223a5b5d2c22436f6e746578744974656d73223a5b5d2c22746f646f4974656d73223a5b7b226974656d4944223a226931222c226465736372697074696f6e223a2264227d5d2c224576616c756174696f6e506f6c696379223a7b22537563636573734372697465726961223a5b5d2c22436f6e666964656e63655468726573686f6c64223a302e357d7d0001017209",
        ),
        (
            "context_evaluated",
            "07026d310302743102733101026e6f0a",
        ),
        (
            "task_updated",
            "07026d3104027431026d31877b225461736b4944223a225431222c22557365725175657279223a2271222c225461736b4e616d65223a226e222c225461736b4465736372697074696f6e223a2264222c22476f616c537461747573223a5b7b22476f616c223a2267222c22537461747573223a226f70656e227d5d2c224f766572616c6c537461747573223a226f70656e227d0b",
        ),
        (
            "blob_put",
            "07026d31050274310f6361733a2f2f7368613235362f6162097368613235363a6162050a746578742f706c61696e0c0d",
        ),
        (
            "blob_read",
            "07026d310602743105686f74656c0f6361733a2f2f7368613235362f6162097368613235363a61620e",
        ),
        (
            "context_refused",
            "07026d3107027431086765745f626c6f620b6e6f745f6772616e746564016d0107776561746865720f",
        ),
        ("sealed_context", "0b026d3102743108626c6f625f707574010f6361733a2f2f7368613235362f61620c04deadbeef"),
        ("context_erased", "0c027431026d311001"),
];

    fn sample_record() -> Vec<u8> {
        encode(&sample(), "ev-1", "r1", 1_700_000_000_000, "w1", 0).unwrap()
    }

    /// The hand walk finds the digest and body bincode decoded (with the
    /// bytes it used), and every cut of the bytes is an error, never a
    /// panic or a wrong body.
    fn walk_agrees(
        bytes: &[u8],
        version: u16,
        (digest, body, used): ([u8; 32], &[u8], usize),
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        let (walked_digest, walked_body) = envelope_body(bytes, version).unwrap();
        proptest::prop_assert_eq!(used, bytes.len());
        proptest::prop_assert_eq!(walked_digest, digest);
        proptest::prop_assert_eq!(walked_body, body);
        for cut in [0, 1, bytes.len() / 2, bytes.len() - 1] {
            proptest::prop_assert!(envelope_body(&bytes[..cut], version).is_err());
        }
        Ok(())
    }

    proptest::proptest! {
        /// The hand walk of the envelope finds the same body and digest as
        /// bincode, across the varint widths (strings over 250 bytes, times
        /// and steps over 2^16 and 2^32, bodies over 64 KiB).
        #[test]
        fn envelope_walk_agrees_with_bincode(
            event_id in ".{0,300}",
            chain_key in ".{0,40}",
            time_ms in proptest::prelude::any::<u64>(),
            writer in ".{0,260}",
            step in proptest::prelude::any::<u32>(),
            principal in ".{0,300}",
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..70_000),
        ) {
            let v1 = EnvelopeV1 {
                event_id,
                chain_key,
                time_ms,
                writer,
                step,
                body_digest: sha256(&body),
                body,
            };
            let bytes = bincode::serde::encode_to_vec(&v1, config()).unwrap();
            let (d, used): (EnvelopeRefV1<'_>, usize) =
                bincode::serde::borrow_decode_from_slice(&bytes, config()).unwrap();
            walk_agrees(&bytes, 1, (d.body_digest, d.body, used))?;
            let v2 = Envelope { principal, ..Envelope::from(v1) };
            let bytes = bincode::serde::encode_to_vec(&v2, config()).unwrap();
            let (d, used): (EnvelopeRefV2<'_>, usize) =
                bincode::serde::borrow_decode_from_slice(&bytes, config()).unwrap();
            walk_agrees(&bytes, 2, (d.body_digest, d.body, used))?;
            let v3 = EnvelopeV3 {
                event_id: v2.event_id,
                chain_key: v2.chain_key,
                time_ms,
                writer: v2.writer,
                step,
                principal: v2.principal,
                span: SpanRef { trace_id: [0xfd; 16], span_id: [0xfb; 8] },
                body_digest: v2.body_digest,
                body: v2.body,
            };
            let bytes = bincode::serde::encode_to_vec(&v3, config()).unwrap();
            let (d, used): (EnvelopeRefV3<'_>, usize) =
                bincode::serde::borrow_decode_from_slice(&bytes, config()).unwrap();
            walk_agrees(&bytes, 3, (d.body_digest, d.body, used))?;
        }

        #[test]
        fn envelope_walk_never_panics_on_garbage(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
        ) {
            let _ = envelope_body(&bytes, 1);
            let _ = envelope_body(&bytes, 2);
            let _ = envelope_body(&bytes, 3);
            let _ = check_digest(&bytes);
        }
    }

    /// What the engine projects its own records from — the event and the
    /// metadata it encoded, with the digest walked from the bytes — is
    /// exactly what decoding the bytes gives, for every kind of record.
    #[test]
    fn a_record_is_what_encoded_it() {
        for (name, ev) in every_variant() {
            for span in [None, Some(sample_span())] {
                let by = Cause {
                    principal: "agent:a",
                    span,
                };
                let bytes = encode_by(&ev, "ev-9", "root", 77, "w", 5, by).unwrap();
                let built = Record {
                    event_id: "ev-9".into(),
                    chain_key: "root".into(),
                    time_ms: 77,
                    writer: "w".into(),
                    step: 5,
                    principal: "agent:a".into(),
                    span,
                    body_digest: body_digest(&bytes).unwrap(),
                    event: ev.clone(),
                };
                assert_eq!(decode(&bytes).unwrap(), built, "{name}");
            }
        }
    }

    #[test]
    fn trailing_bytes_after_the_envelope_are_an_error() {
        let mut bytes = sample_record();
        bytes.push(0);
        let err = check_digest(&bytes).unwrap_err().to_string();
        assert!(err.contains("1 trailing bytes"), "{err}");
    }

    /// Pins the wire format: if this changes, logs already written no
    /// longer decode.
    #[test]
    fn golden_bytes_run_opened() {
        let bytes = encode_by(
            &sample(),
            "ev-1",
            "r1",
            1_700_000_000_000,
            "w1",
            0,
            Cause {
                principal: "agent:hotel",
                span: None,
            },
        )
        .unwrap();
        assert_eq!(hex::encode(&bytes), GOLDEN_RUN_OPENED_V2);
        let rec = decode(&bytes).unwrap();
        assert_eq!(rec.event, sample());
        assert_eq!(rec.principal, "agent:hotel");
        assert_eq!(rec.span, None);
    }

    fn sample_span() -> SpanRef {
        SpanRef {
            trace_id: hex::decode("0af7651916cd43dd8448eb211c80319c")
                .unwrap()
                .try_into()
                .unwrap(),
            span_id: hex::decode("b7ad6b7169203331").unwrap().try_into().unwrap(),
        }
    }

    /// A record that names its request's span is version 3: version 2's
    /// fields, then the span's 24 bytes as they are, then the body.
    #[test]
    fn golden_bytes_run_opened_in_a_span() {
        let bytes = encode_by(
            &sample(),
            "ev-1",
            "r1",
            1_700_000_000_000,
            "w1",
            0,
            Cause {
                principal: "agent:hotel",
                span: Some(sample_span()),
            },
        )
        .unwrap();
        assert_eq!(hex::encode(&bytes), GOLDEN_RUN_OPENED_V3);
        let rec = decode(&bytes).unwrap();
        assert_eq!(rec.event, sample());
        assert_eq!(rec.principal, "agent:hotel");
        assert_eq!(rec.span, Some(sample_span()));
        assert_eq!(decode_envelope(&bytes).unwrap().span, Some(sample_span()));
        // The same record without the span is the version 2 record.
        let v2 = decode(&hex::decode(GOLDEN_RUN_OPENED_V2).unwrap()).unwrap();
        assert_eq!(
            Record {
                span: rec.span,
                ..v2
            },
            rec
        );
    }

    /// Records written before identities (version 1) still read, as the
    /// operator's.
    #[test]
    fn golden_bytes_decode_from_pinned_hex() {
        for (hex, principal) in [
            (GOLDEN_RUN_OPENED, "operator"),
            (GOLDEN_RUN_OPENED_V2, "agent:hotel"),
            (GOLDEN_RUN_OPENED_V3, "agent:hotel"),
        ] {
            let bytes = hex::decode(hex).unwrap();
            let rec = decode(&bytes).unwrap();
            assert_eq!(rec.event_id, "ev-1");
            assert_eq!(rec.chain_key, "r1");
            assert_eq!(rec.time_ms, 1_700_000_000_000);
            assert_eq!(rec.principal, principal);
            assert_eq!(rec.event, sample());
            assert_eq!(decode_envelope(&bytes).unwrap().principal, principal);
        }
    }

    #[test]
    fn check_digest_agrees_with_decode() {
        let good = sample_record();
        assert!(check_digest(&good).is_ok());
        let mut bad = good.clone();
        let n = bad.len();
        bad[n - 3] ^= 0x01;
        assert!(matches!(
            check_digest(&bad),
            Err(CodecError::DigestMismatch { .. })
        ));
        assert!(check_digest(&good[..good.len() - 1]).is_err());
    }

    #[test]
    fn unknown_schema_version_is_a_clear_error() {
        let mut bytes = sample_record();
        bytes[0] = 9;
        assert_eq!(
            decode(&bytes).unwrap_err(),
            CodecError::UnknownSchemaVersion { found: 9 }
        );
    }

    #[test]
    fn flipped_body_byte_is_a_digest_mismatch() {
        let mut bytes = sample_record();
        let n = bytes.len();
        bytes[n - 3] ^= 0x01;
        assert!(matches!(
            decode(&bytes).unwrap_err(),
            CodecError::DigestMismatch { .. }
        ));
    }

    /// Bytes that pass the version check reach the envelope and body
    /// decoders; every one-byte change of a real record of each kind is a
    /// value or an error, never a panic (`tests/decoders.rs` goes further).
    #[test]
    fn garbage_past_the_version_check_never_panics() {
        let records = every_variant().into_iter().flat_map(|(_, ev)| {
            let spanned = Cause {
                principal: "agent:a",
                span: Some(sample_span()),
            };
            [
                encode(&ev, "ev-1", "r1", 1, "w", 3).unwrap(),
                encode_by(&ev, "ev-1", "r1", 1, "w", 3, spanned).unwrap(),
            ]
        });
        for good in records {
            for i in 0..good.len() {
                for flip in [0x01u8, 0x80, 0xff] {
                    let mut bad = good.clone();
                    bad[i] ^= flip;
                    if decode(&bad).is_ok() {
                        // Only the envelope's own fields may change unnoticed
                        // by the body digest; the body never.
                        assert!(check_digest(&bad).is_ok());
                    }
                }
            }
            for cut in 0..good.len() {
                assert!(
                    decode(&good[..cut]).is_err(),
                    "a record cut at {cut} decoded"
                );
            }
        }
    }

    const GOLDEN_RUN_OPENED_V2: &str = "02000465762d31027231fd0068e5cf8b010000027731000b6167656e743a686f74656c842bc48d019ad99dcf38ef59c9555de0452a4d7478f1a3214c15b4bed1d72e09390102723109646576656c6f706572010d61636d652f706c6174666f726d01027231010000000112617265613a61636d652f706c6174666f726d";

    /// Version 2's record with the span 0af76519…/b7ad6b71… after the principal.
    const GOLDEN_RUN_OPENED_V3: &str = "03000465762d31027231fd0068e5cf8b010000027731000b6167656e743a686f74656c0af7651916cd43dd8448eb211c80319cb7ad6b7169203331842bc48d019ad99dcf38ef59c9555de0452a4d7478f1a3214c15b4bed1d72e09390102723109646576656c6f706572010d61636d652f706c6174666f726d01027231010000000112617265613a61636d652f706c6174666f726d";

    /// A version 1 record, as the first release wrote it.
    const GOLDEN_RUN_OPENED: &str = "01000465762d31027231fd0068e5cf8b01000002773100842bc48d019ad99dcf38ef59c9555de0452a4d7478f1a3214c15b4bed1d72e09390102723109646576656c6f706572010d61636d652f706c6174666f726d01027231010000000112617265613a61636d652f706c6174666f726d";
}
