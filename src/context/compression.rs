//! R14 — compression rules: what a returned AgentContext must still carry of
//! the one that was sent.
//!
//! Two kinds of constraint, both checked and both binding (a breach of either
//! fails layer one; only the global `TargetRatio` yields to them, as the
//! draft says):
//!
//! * item level, by each sent ContextItem's `Priority`, matched by ContextID:
//!   - `must_preserve`: present and identical in every member;
//!   - `reference_only`: present with the same ContextURI and Description
//!     (the content behind it may be omitted by the agent);
//!   - `compressible`: present (the draft allows *semantic reduction while
//!     preserving task-relevant information*, i.e. the item is reduced, not
//!     dropped); its ContextURI and Description may change, since reduced
//!     content has a new digest;
//!   - `discardable`: may be absent.
//!
//!   Items the agent adds are allowed (offloaded outputs).
//! * field level, by the *sent* `CompressionPolicy.MustPreserveFields` (the
//!   sent one, so an agent cannot escape the policy by deleting it). A path is
//!   `Name` segments joined by `.`, a `[]` suffix meaning "every element"
//!   (elements matched by ContextID / itemID / CriterionID when they carry
//!   one, else by position). Paths into the agent's outputs
//!   (`ItemStateUpdates`, `KeyInformation`, `EvaluationResult`,
//!   `LastUpdated`) must be *present* in the returned context; paths into
//!   anything the master sent (e.g. `Dependencies`,
//!   `ContextItems[].Description`) must come back *unchanged* wherever the
//!   sent context had them. A MustPreserveFields entry therefore can forbid a
//!   reduction that Priority alone would allow (e.g. a compressible item's
//!   Description).

use std::collections::BTreeSet;

use serde_json::Value;

use super::types::{AgentContext, ContextItem, Priority};

/// Top-level members the invoked agent produces; preserving them means
/// returning them, since the sent context may not have had them at all.
const OUTPUT_FIELDS: [&str; 4] = [
    "ItemStateUpdates",
    "KeyInformation",
    "EvaluationResult",
    "LastUpdated",
];

/// Members that identify an array element, so that reordering an array is
/// not mistaken for changing it.
const IDENTITY_KEYS: [&str; 3] = ["ContextID", "itemID", "CriterionID"];

/// One segment of a MustPreserveFields path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathSegment {
    pub name: String,
    /// `Name[]`: apply the rest of the path to every element.
    pub each: bool,
}

/// Why a MustPreserveFields entry is not a field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadFieldPath {
    #[error("empty field path")]
    Empty,
    #[error("{0:?} is not a field path (expected Name, Name[] or Name[].Member)")]
    NotAPath(String),
}

/// Parse a MustPreserveFields entry such as `ContextItems[].Description`.
pub fn parse_field_path(path: &str) -> Result<Vec<PathSegment>, BadFieldPath> {
    if path.is_empty() {
        return Err(BadFieldPath::Empty);
    }
    path.split('.')
        .map(|part| {
            let (name, each) = match part.strip_suffix("[]") {
                Some(name) => (name, true),
                None => (part, false),
            };
            if name.is_empty() || name.contains(['[', ']']) {
                Err(BadFieldPath::NotAPath(path.to_owned()))
            } else {
                Ok(PathSegment {
                    name: name.to_owned(),
                    each,
                })
            }
        })
        .collect()
}

/// All breaches of R14 between `sent` and `returned`, one readable reason
/// each; empty when the compression rules were kept.
pub fn check_compression(sent: &AgentContext, returned: &AgentContext) -> Vec<String> {
    let mut reasons = Vec::new();
    for item in &sent.context_items {
        let back = returned
            .context_items
            .iter()
            .find(|r| r.context_id == item.context_id);
        check_item(item, back, &mut reasons);
    }
    if let Some(policy) = &sent.compression_policy {
        // Values give a uniform walk over any named member; these types hold
        // no maps with non-string keys, so conversion cannot fail in practice
        // and Null (nothing to compare) is a safe fallback.
        let sent_v = serde_json::to_value(sent).unwrap_or(Value::Null);
        let ret_v = serde_json::to_value(returned).unwrap_or(Value::Null);
        for path in &policy.must_preserve_fields {
            match parse_field_path(path) {
                Ok(segs) => {
                    let output = segs
                        .first()
                        .is_some_and(|s| OUTPUT_FIELDS.contains(&s.name.as_str()));
                    if output {
                        require_present(path, &segs, &ret_v, String::new(), &mut reasons);
                    } else {
                        require_unchanged(
                            path,
                            &segs,
                            &sent_v,
                            &ret_v,
                            String::new(),
                            &mut reasons,
                        );
                    }
                }
                // Refused when sent; kept as a reason so a context that
                // reached here some other way is not silently unchecked.
                Err(e) => reasons.push(format!("MustPreserveFields: {e}; it cannot be checked")),
            }
        }
    }
    reasons
}

fn check_item(sent: &ContextItem, back: Option<&ContextItem>, reasons: &mut Vec<String>) {
    let id = &sent.context_id;
    let p = sent.priority.as_str();
    let Some(back) = back else {
        if sent.priority != Priority::Discardable {
            reasons.push(format!(
                "ContextItem {id:?} ({p}) was removed; only discardable items may go"
            ));
        }
        return;
    };
    match sent.priority {
        Priority::MustPreserve => {
            let mut changed = Vec::new();
            if back.context_type != sent.context_type {
                changed.push("ContextType");
            }
            if back.media_type != sent.media_type {
                changed.push("MediaType");
            }
            if back.context_uri != sent.context_uri {
                changed.push("ContextURI");
            }
            if back.description != sent.description {
                changed.push("Description");
            }
            if back.priority != sent.priority {
                changed.push("Priority");
            }
            if !changed.is_empty() {
                reasons.push(format!(
                    "ContextItem {id:?} ({p}) was changed ({}); it must come back unchanged",
                    changed.join(", ")
                ));
            }
        }
        Priority::ReferenceOnly => {
            let mut changed = Vec::new();
            if back.context_uri != sent.context_uri {
                changed.push("ContextURI");
            }
            if back.description != sent.description {
                changed.push("Description");
            }
            if !changed.is_empty() {
                reasons.push(format!(
                    "ContextItem {id:?} ({p}) changed its {}; it must keep its reference and description",
                    changed.join(" and ")
                ));
            }
        }
        Priority::Compressible | Priority::Discardable => {}
    }
}

fn child_location(loc: &str, name: &str) -> String {
    if loc.is_empty() {
        name.to_owned()
    } else {
        format!("{loc}.{name}")
    }
}

fn identity(element: &Value) -> Option<(&'static str, &Value)> {
    IDENTITY_KEYS
        .iter()
        .find_map(|k| element.get(*k).map(|v| (*k, v)))
}

/// Input paths: wherever `sent` has a value on the path, `returned` must have
/// the same value.
fn require_unchanged(
    path: &str,
    segs: &[PathSegment],
    sent: &Value,
    returned: &Value,
    loc: String,
    reasons: &mut Vec<String>,
) {
    let Some((seg, rest)) = segs.split_first() else {
        if sent != returned {
            reasons.push(format!("MustPreserveFields {path:?}: {loc} was changed"));
        }
        return;
    };
    // Nothing was sent there, so there is nothing to preserve.
    let Some(s) = sent.get(&seg.name) else {
        return;
    };
    let loc = child_location(&loc, &seg.name);
    let Some(r) = returned.get(&seg.name) else {
        reasons.push(format!("MustPreserveFields {path:?}: {loc} was removed"));
        return;
    };
    let (Some(sent_elems), Some(ret_elems), true) = (s.as_array(), r.as_array(), seg.each) else {
        require_unchanged(path, rest, s, r, loc, reasons);
        return;
    };
    let mut seen = BTreeSet::new();
    for (i, se) in sent_elems.iter().enumerate() {
        let (label, re) = match identity(se) {
            Some((key, id)) => {
                // With duplicate identities only the first sent element is
                // compared, against the first returned one.
                if !seen.insert(id.to_string()) {
                    continue;
                }
                (
                    format!("{loc}[{id}]"),
                    ret_elems.iter().find(|x| x.get(key) == Some(id)),
                )
            }
            None => (format!("{loc}[{i}]"), ret_elems.get(i)),
        };
        match re {
            Some(re) => require_unchanged(path, rest, se, re, label, reasons),
            // A missing context item is the Priority rule's business (it may
            // have been discardable); report it there, once.
            None if seg.name == "ContextItems" => {}
            None => reasons.push(format!("MustPreserveFields {path:?}: {label} was removed")),
        }
    }
}

/// Output paths: the returned context must carry the path.
fn require_present(
    path: &str,
    segs: &[PathSegment],
    returned: &Value,
    loc: String,
    reasons: &mut Vec<String>,
) {
    let Some((seg, rest)) = segs.split_first() else {
        return;
    };
    let loc = child_location(&loc, &seg.name);
    let Some(r) = returned.get(&seg.name) else {
        reasons.push(format!(
            "MustPreserveFields {path:?}: {loc} is missing from the returned context"
        ));
        return;
    };
    match (seg.each, r.as_array()) {
        (true, Some(elems)) => {
            for (i, e) in elems.iter().enumerate() {
                require_present(path, rest, e, format!("{loc}[{i}]"), reasons);
            }
        }
        _ => require_present(path, rest, r, loc, reasons),
    }
}
