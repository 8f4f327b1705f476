//! Serde types for the draft's TaskContext (Figure 3) and AgentContext
//! (Figure 4), with the draft's exact member names and casing.
//!
//! These types are only ever built from JSON that has passed the schemas in
//! `schemas/` (see [`super::schema`]); they do not re-check structure. Absent
//! optional members stay absent when serialized again (`skip_serializing_if`)
//! so that a context round-trips to the same JSON the agent sent — which keeps
//! the compression comparison (R14) and the byte accounting honest.
//!
//! Because `skip_serializing_if` is unsafe for non-self-describing formats
//! such as bincode, events and state that embed these types go through
//! `serde_bin` (JSON text inside binary formats).

use serde::{Deserialize, Serialize};

/// Task-level state object maintained exclusively by the Master Agent
/// (draft section 5.1, Figure 3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskContext {
    #[serde(rename = "TaskID")]
    pub task_id: String,
    #[serde(rename = "UserQuery")]
    pub user_query: String,
    #[serde(rename = "TaskName")]
    pub task_name: String,
    #[serde(rename = "TaskDescription")]
    pub task_description: String,
    #[serde(rename = "GoalStatus")]
    pub goal_status: Vec<GoalStatus>,
    #[serde(rename = "OverallStatus")]
    pub overall_status: String,
    /// Optional in the draft; free text (the draft fixes no time format).
    #[serde(rename = "StartTime", default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// Optional in the draft; free text (the draft fixes no time format).
    #[serde(rename = "EndTime", default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    /// The draft's informative list of optional members.
    #[serde(rename = "Optional", default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<Vec<String>>,
}

/// One `{Goal, Status}` tuple of `GoalStatus`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoalStatus {
    #[serde(rename = "Goal")]
    pub goal: String,
    #[serde(rename = "Status")]
    pub status: String,
}

/// Execution state of one invoked agent for one subtask (draft section 5.2,
/// Figure 4).
///
/// `ItemStateUpdates`, `KeyInformation` and `EvaluationResult` are results the
/// invoked agent fills in after execution, so they are optional here and in
/// the schema; a returned context without them fails layer one (R13).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentContext {
    #[serde(rename = "AgentID")]
    pub agent_id: String,
    /// agentledger binds a subtask to this name (the CLI's `agent`).
    #[serde(rename = "AgentName")]
    pub agent_name: String,
    #[serde(rename = "SubTaskID")]
    pub sub_task_id: String,
    #[serde(rename = "SubTaskName")]
    pub sub_task_name: String,
    /// SubTaskIDs of prerequisite subtasks (agent names as a fallback).
    #[serde(rename = "Dependencies")]
    pub dependencies: Vec<String>,
    #[serde(rename = "ContextItems")]
    pub context_items: Vec<ContextItem>,
    #[serde(
        rename = "CompressionPolicy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub compression_policy: Option<CompressionPolicy>,
    #[serde(rename = "todoItems")]
    pub todo_items: Vec<TodoItem>,
    #[serde(
        rename = "ItemStateUpdates",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub item_state_updates: Option<Vec<ItemStateUpdate>>,
    #[serde(
        rename = "KeyInformation",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub key_information: Option<Vec<KeyInformation>>,
    #[serde(rename = "EvaluationPolicy")]
    pub evaluation_policy: EvaluationPolicy,
    #[serde(
        rename = "EvaluationResult",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub evaluation_result: Option<EvaluationResult>,
    #[serde(
        rename = "LastUpdated",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_updated: Option<String>,
    /// The draft's informative list of optional members.
    #[serde(rename = "Optional", default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<Vec<String>>,
}

/// One independently described piece of context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextItem {
    #[serde(rename = "ContextID")]
    pub context_id: String,
    #[serde(rename = "ContextType")]
    pub context_type: ContextType,
    #[serde(rename = "MediaType")]
    pub media_type: String,
    #[serde(rename = "ContextURI")]
    pub context_uri: String,
    #[serde(rename = "Description")]
    pub description: String,
    #[serde(rename = "Priority")]
    pub priority: Priority,
}

/// Semantic classification of a context item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContextType {
    Document,
    Graph,
    Video,
    Image,
    Audio,
    Code,
    Table,
    Dataset,
    Text,
    Other,
}

/// How far the receiving agent may reduce an item when it compresses its
/// context locally.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Retained without semantic compression: must come back unchanged.
    MustPreserve,
    /// Semantic reduction allowed: the item stays, its content (URI) and
    /// Description may change.
    Compressible,
    /// Content may be omitted; ContextURI and Description must stay.
    ReferenceOnly,
    /// May be removed.
    Discardable,
}

impl Priority {
    /// The draft's spelling, for readable reasons.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::MustPreserve => "must_preserve",
            Priority::Compressible => "compressible",
            Priority::ReferenceOnly => "reference_only",
            Priority::Discardable => "discardable",
        }
    }
}

/// Overall compression objective for the receiving agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompressionPolicy {
    #[serde(rename = "Strategy")]
    pub strategy: String,
    /// A target, not a requirement (the draft lets preservation win), so it is
    /// never enforced.
    #[serde(rename = "TargetRatio")]
    pub target_ratio: f64,
    #[serde(rename = "LossTolerance")]
    pub loss_tolerance: String,
    /// Field paths such as `KeyInformation` or `ContextItems[].Description`.
    #[serde(rename = "MustPreserveFields")]
    pub must_preserve_fields: Vec<String>,
}

/// One actionable step assigned to the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoItem {
    #[serde(rename = "itemID")]
    pub item_id: String,
    pub description: String,
}

/// Completion state of one todo item: 0 not completed, 1 completed (the
/// schema admits only these two values).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemStateUpdate {
    #[serde(rename = "itemID")]
    pub item_id: String,
    #[serde(deserialize_with = "state_from_number")]
    pub state: u8,
}

/// JSON Schema counts `1.0` as the integer 1, so accept it here too rather
/// than refusing a value the schema let through.
fn state_from_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    let n = f64::deserialize(d)?;
    if n == 0.0 {
        Ok(0)
    } else if n == 1.0 {
        Ok(1)
    } else {
        Err(serde::de::Error::custom(format!(
            "state must be 0 or 1, not {n}"
        )))
    }
}

/// The agent's concise output for one item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyInformation {
    #[serde(rename = "itemID")]
    pub item_id: String,
    pub outputabstract: String,
}

/// Conditions under which the subtask result is acceptable, delivered before
/// execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluationPolicy {
    #[serde(rename = "SuccessCriteria")]
    pub success_criteria: Vec<SuccessCriterion>,
    #[serde(rename = "ConfidenceThreshold")]
    pub confidence_threshold: f64,
}

/// One success criterion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuccessCriterion {
    #[serde(rename = "CriterionID")]
    pub criterion_id: String,
    #[serde(rename = "Description")]
    pub description: String,
    #[serde(rename = "Required")]
    pub required: bool,
}

/// The agent's structured evaluation, returned after execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluationResult {
    #[serde(rename = "Status")]
    pub status: String,
    #[serde(rename = "Confidence")]
    pub confidence: f64,
    #[serde(rename = "CriterionResults")]
    pub criterion_results: Vec<CriterionResult>,
    #[serde(
        rename = "FailureReason",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub failure_reason: Option<String>,
}

/// Criterion-level evaluation result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriterionResult {
    #[serde(rename = "CriterionID")]
    pub criterion_id: String,
    #[serde(rename = "Status")]
    pub status: String,
    #[serde(
        rename = "EvidenceRefs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub evidence_refs: Option<Vec<String>>,
    #[serde(rename = "TraceRefs", default, skip_serializing_if = "Option::is_none")]
    pub trace_refs: Option<Vec<String>>,
}

impl CriterionResult {
    /// Whether `Status` reports a pass. The draft leaves the vocabulary open;
    /// agentledger reads "passed", "pass", "success", "succeeded" and
    /// "completed" (any case, surrounding blanks ignored) as passing and
    /// anything else ("failed", "", …) as not.
    pub fn passed(&self) -> bool {
        is_passing_status(&self.status)
    }
}

/// See [`CriterionResult::passed`]; an EvaluationResult's overall Status
/// may also say "completed".
pub fn is_passing_status(status: &str) -> bool {
    let s = status.trim();
    ["passed", "pass", "success", "succeeded", "completed"]
        .iter()
        .any(|p| s.eq_ignore_ascii_case(p))
}
