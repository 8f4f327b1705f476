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

/// Whether a ContextURI cited as evidence or trace resolves: `None` when it
/// does (the content was put in the task, is live, and its bytes match the
/// digest), else why not. The engine answers it from the ledger and the
/// content store.
pub type Resolve<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The ContextURIs (`cas://…`) among a result's EvidenceRefs and TraceRefs,
/// in order, each once. Other refs (free text, other schemes) are not
/// ContextURIs and are not checked.
pub fn cited_context_uris(result: &super::types::EvaluationResult) -> Vec<&str> {
    let mut seen = BTreeSet::new();
    result
        .criterion_results
        .iter()
        .flat_map(|c| {
            c.evidence_refs
                .iter()
                .flatten()
                .chain(c.trace_refs.iter().flatten())
        })
        .map(String::as_str)
        .filter(|r| r.starts_with("cas://"))
        .filter(|r| seen.insert(*r))
        .collect()
}

/// Compute layer one: every sent todo item has ItemStateUpdates state 1 and,
/// once completed, a KeyInformation entry with an output abstract; the
/// EvaluationResult's own Status is a pass
/// ([`super::types::is_passing_status`]) and it gives no FailureReason;
/// every Required criterion has a passing CriterionResults entry;
/// `Confidence >= ConfidenceThreshold`; every ContextURI cited as evidence
/// or trace resolves (`resolve`); and the compression rules (R14) were kept.
pub fn layer_one(sent: &AgentContext, returned: &AgentContext, resolve: Resolve<'_>) -> Layer1 {
    let mut reasons = Vec::new();
    let key_info = returned.key_information.as_deref().unwrap_or(&[]);

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
        } else if !key_info
            .iter()
            .any(|k| k.item_id == todo.item_id && !k.outputabstract.trim().is_empty())
        {
            // The master validates a completed item by its abstract.
            reasons.push(format!(
                "todo item {:?} is completed but has no KeyInformation output abstract",
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
            if !super::types::is_passing_status(&result.status) {
                reasons.push(format!(
                    "the EvaluationResult's Status is {:?}, not a pass",
                    result.status
                ));
            }
            if let Some(why) = result.failure_reason.as_deref().filter(|r| !r.trim().is_empty())
            {
                let why: String = why.chars().take(300).collect();
                reasons.push(format!("the EvaluationResult gives a FailureReason: {why:?}"));
            }
            for uri in cited_context_uris(result) {
                if let Some(why) = resolve(uri) {
                    reasons.push(format!("cited {uri} does not resolve: {why}"));
                }
            }
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
