//! R13 — layered evaluation, first layer: what the engine itself concludes
//! from a returned AgentContext, before (and independently of) the master's
//! decision.
//!
//! The bar is always taken from the context that was *sent* — its
//! `todoItems`, `EvaluationPolicy` and `CompressionPolicy` — never from the
//! returned copy, so an invoked agent cannot pass by editing its own policy.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::compression::check_compression;
use super::types::AgentContext;

/// The engine's first-layer verdict on a returned context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layer1 {
    pub passed: bool,
    /// One readable reason per failed condition; empty when passed.
    pub reasons: Vec<String>,
}

/// Compute layer one: every sent todo item has ItemStateUpdates state 1,
/// every Required criterion has a passing CriterionResults entry
/// ([`super::types::is_passing_status`]), `Confidence >= ConfidenceThreshold`,
/// and the compression rules (R14) were kept.
pub fn layer_one(sent: &AgentContext, returned: &AgentContext) -> Layer1 {
    let mut reasons = Vec::new();

    let updates = returned.item_state_updates.as_deref().unwrap_or(&[]);
    let mut seen = BTreeSet::new();
    for todo in &sent.todo_items {
        // Duplicate itemIDs name one item; judge it once.
        if !seen.insert(todo.item_id.as_str()) {
            continue;
        }
        let states: Vec<u8> = updates
            .iter()
            .filter(|u| u.item_id == todo.item_id)
            .map(|u| u.state)
            .collect();
        if states.is_empty() {
            reasons.push(format!(
                "todo item {:?} has no ItemStateUpdates entry",
                todo.item_id
            ));
        } else if states.iter().any(|s| *s != 1) {
            // Contradictory entries (0 and 1) count as not done: the agent
            // did not say unambiguously that it finished.
            reasons.push(format!(
                "todo item {:?} is not completed (state 0)",
                todo.item_id
            ));
        }
    }

    let policy = &sent.evaluation_policy;
    match &returned.evaluation_result {
        None => reasons.push(
            "no EvaluationResult returned: required criteria and the confidence threshold cannot be met"
                .to_owned(),
        ),
        Some(result) => {
            let mut seen = BTreeSet::new();
            for criterion in policy.success_criteria.iter().filter(|c| c.required) {
                if !seen.insert(criterion.criterion_id.as_str()) {
                    continue;
                }
                let results: Vec<_> = result
                    .criterion_results
                    .iter()
                    .filter(|r| r.criterion_id == criterion.criterion_id)
                    .collect();
                if results.is_empty() {
                    reasons.push(format!(
                        "required criterion {:?} has no CriterionResults entry",
                        criterion.criterion_id
                    ));
                } else if let Some(failed) = results.iter().find(|r| !r.passed()) {
                    reasons.push(format!(
                        "required criterion {:?} did not pass (Status {:?})",
                        criterion.criterion_id, failed.status
                    ));
                }
            }
            if result.confidence < policy.confidence_threshold {
                reasons.push(format!(
                    "confidence {} is below the threshold {}",
                    result.confidence, policy.confidence_threshold
                ));
            }
        }
    }

    reasons.extend(check_compression(sent, returned));
    Layer1 {
        passed: reasons.is_empty(),
        reasons,
    }
}
