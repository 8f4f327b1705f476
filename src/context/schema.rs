//! Validation of TaskContext and AgentContext JSON against the JSON Schemas
//! in `schemas/` — the single source of structural validation.
//!
//! The schema texts are embedded at build time so that the binary and the
//! published schemas can never disagree, and each is compiled once per
//! process (a compiled validator is reusable and thread-safe). Only after the
//! schema accepts a value is it deserialized into the typed structs.

use std::sync::OnceLock;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::{ContextError, ContextKind, Violation};
use super::types::{AgentContext, TaskContext};

/// The TaskContext schema text, as published in `schemas/task_context.json`.
pub const TASK_CONTEXT_SCHEMA: &str = include_str!("../../schemas/task_context.json");
/// The AgentContext schema text, as published in `schemas/agent_context.json`.
pub const AGENT_CONTEXT_SCHEMA: &str = include_str!("../../schemas/agent_context.json");

/// At most this many violations are reported: a hostile document can have
/// millions, and the first few are enough to fix it.
const MAX_VIOLATIONS: usize = 16;
/// Violation messages quote the offending value; cap them so a huge value
/// cannot blow up an error line or a `Refused` event.
const MAX_MESSAGE_CHARS: usize = 300;

/// A schema that does not compile: a build defect, reported as
/// `schema_unavailable` rather than a panic.
#[derive(Debug, Clone)]
pub(crate) struct SchemaDefect(String);

type Compiled = Result<jsonschema::Validator, SchemaDefect>;

static TASK_VALIDATOR: OnceLock<Compiled> = OnceLock::new();
static AGENT_VALIDATOR: OnceLock<Compiled> = OnceLock::new();

/// Compile a schema text. Failure is a build defect; it is returned as text
/// (rather than a panic) and surfaced as `schema_unavailable`.
pub(crate) fn compile(text: &str) -> Compiled {
    let schema: Value =
        serde_json::from_str(text).map_err(|e| SchemaDefect(format!("schema is not JSON: {e}")))?;
    jsonschema::draft202012::new(&schema)
        .map_err(|e| SchemaDefect(format!("schema does not compile: {e}")))
}

fn validator(kind: ContextKind) -> Result<&'static jsonschema::Validator, ContextError> {
    let compiled = match kind {
        ContextKind::TaskContext => TASK_VALIDATOR.get_or_init(|| compile(TASK_CONTEXT_SCHEMA)),
        ContextKind::AgentContext => AGENT_VALIDATOR.get_or_init(|| compile(AGENT_CONTEXT_SCHEMA)),
    };
    compiled
        .as_ref()
        .map_err(|defect| ContextError::SchemaUnavailable {
            kind,
            detail: defect.0.clone(),
        })
}

fn truncate(mut s: String) -> String {
    if let Some((cut, _)) = s.char_indices().nth(MAX_MESSAGE_CHARS) {
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// Run `validator` over `value` and collect the violations, each naming the
/// JSON Pointer of the value at fault.
pub(crate) fn violations_of(validator: &jsonschema::Validator, value: &Value) -> Vec<Violation> {
    validator
        .iter_errors(value)
        .take(MAX_VIOLATIONS)
        .map(|e| {
            let message = match e.kind() {
                // The library abbreviates long enums ("… or 8 other
                // candidates"); list them all, they are short and the caller
                // needs them to fix the value.
                jsonschema::error::ValidationErrorKind::Enum { options } => {
                    format!("{} is not one of {options}", e.instance())
                }
                _ => e.to_string(),
            };
            Violation {
                path: e.instance_path().as_str().to_owned(),
                message: truncate(message),
                rule: Some(format!("the schema at {}", e.schema_path().as_str())),
            }
        })
        .collect()
}

/// The object itself, also when written as the draft's figures write it:
/// wrapped in a one-member object named after its kind
/// (`{"TaskContext": {…}}`).
fn unwrap_figure(kind: ContextKind, value: &Value) -> &Value {
    match value.as_object() {
        Some(o) if o.len() == 1 => match o.get(&kind.to_string()) {
            Some(inner) if inner.is_object() => inner,
            _ => value,
        },
        _ => value,
    }
}

fn validate_as<T: DeserializeOwned>(kind: ContextKind, value: &Value) -> Result<T, ContextError> {
    let value = unwrap_figure(kind, value);
    let violations = violations_of(validator(kind)?, value);
    if !violations.is_empty() {
        return Err(ContextError::InvalidContext { kind, violations });
    }
    // The schema has accepted the value, so this only fails if the types and
    // the schema drift apart (or for a number like 1.0 where an integer is
    // expected); report it as a violation rather than trusting it.
    T::deserialize(value).map_err(|e| {
        let mut err = ContextError::invalid(kind, "", truncate(e.to_string()));
        if let ContextError::InvalidContext { violations, .. } = &mut err {
            // serde's words quote the value it could not take.
            violations[0].rule = Some(format!("the {kind} types"));
        }
        err
    })
}

/// Validate a TaskContext against `schemas/task_context.json`, then
/// deserialize it.
pub fn validate_task_context(value: &Value) -> Result<TaskContext, ContextError> {
    validate_as(ContextKind::TaskContext, value)
}

/// Validate an AgentContext against `schemas/agent_context.json`, then
/// deserialize it.
pub fn validate_agent_context(value: &Value) -> Result<AgentContext, ContextError> {
    validate_as(ContextKind::AgentContext, value)
}
