//! Token accounting for context offloading: how many bytes an AgentContext
//! carries inline versus how many it only references, and a rough estimate
//! of the tokens saved by referencing instead of inlining.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::types::AgentContext;

/// Bytes per token assumed by [`ContextAccounting::est_tokens_saved`].
///
/// About four bytes (characters) of English text per token is the common
/// rule of thumb for BPE tokenizers (e.g. OpenAI's own guidance that one
/// token is roughly four characters of English). It is an estimate only: it
/// is lower for code and non-Latin scripts, and does not describe how models
/// tokenize images, audio or video.
pub const BYTES_PER_TOKEN: u64 = 4;

/// Byte accounting of one AgentContext.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextAccounting {
    /// Size of the context itself as compact JSON — what the agent's prompt
    /// actually receives.
    pub inline_bytes: u64,
    /// Sum of the sizes of the distinct referenced blobs whose size is known
    /// — what inlining them would have added.
    pub referenced_bytes: u64,
    /// References whose size the lookup did not know (not counted).
    pub unresolved: Vec<String>,
    /// `referenced_bytes / BYTES_PER_TOKEN`: estimated tokens the references
    /// kept out of the agent's context.
    pub est_tokens_saved: u64,
}

/// Account for `ctx`; `size_of` maps a ContextURI to its blob size (e.g.
/// [`super::state::TaskState::blob_size`]). A blob referenced by several
/// items is counted once, as it would be inlined once.
pub fn account(ctx: &AgentContext, size_of: impl Fn(&str) -> Option<u64>) -> ContextAccounting {
    // Serializing these types cannot fail (no non-string map keys); 0 is a
    // harmless fallback rather than a panic.
    let inline_bytes = serde_json::to_vec(ctx)
        .map(|v| u64::try_from(v.len()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    let uris: BTreeSet<&str> = ctx
        .context_items
        .iter()
        .map(|i| i.context_uri.as_str())
        .collect();
    let mut referenced_bytes = 0u64;
    let mut unresolved = Vec::new();
    for uri in uris {
        match size_of(uri) {
            Some(n) => referenced_bytes = referenced_bytes.saturating_add(n),
            None => unresolved.push(uri.to_owned()),
        }
    }
    ContextAccounting {
        inline_bytes,
        referenced_bytes,
        unresolved,
        est_tokens_saved: referenced_bytes / BYTES_PER_TOKEN,
    }
}
