//! R15 — ContextURI integrity: content-addressed references, who may resolve
//! them, expiry, and the digest check on read.
//!
//! A reference is `cas://sha256/<64 lowercase hex>`: the address *is* the
//! digest, so a tampered or substituted blob is detected on read without any
//! signature infrastructure (the draft's "signed references" alternative).
//! Only the canonical lowercase spelling is accepted, because grants are
//! compared as strings and two spellings of one blob must not be two grants.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::error::ContextError;
use super::UnixMillis;

/// The draft's ContextURI is a content reference (see [`crate::model::cas`]).
pub use crate::model::cas::{sha256_hex, ContentRef as ContextUri};

/// Parse a ContextURI; anything else is `bad_uri`.
pub fn parse_context_uri(uri: &str) -> Result<ContextUri, ContextError> {
    ContextUri::parse(uri).map_err(|e| ContextError::BadUri {
        uri: e.uri,
        reason: e.reason.to_owned(),
    })
}

/// What the ledger keeps about stored content (never the bytes): it outlives
/// the bytes, so an expired reference can still be audited against it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobMeta {
    /// `sha256:<hex>`.
    pub digest: String,
    pub size: u64,
    pub media_type: String,
    /// The bytes are gone from this instant on (unix milliseconds).
    pub expires_at: UnixMillis,
}

/// Which references each agent (by AgentName) was sent in the ContextItems
/// of its subtasks. Grants are never revoked on return: the TTL bounds how
/// long a reference is resolvable.
pub type Grants = BTreeMap<String, BTreeSet<String>>;

/// Whether `reader` may read `uri` now, and whether the bytes read are the
/// ones referenced. Checks, in order:
///
/// 1. `bad_uri` — not a `cas://sha256/…` reference;
/// 2. `not_granted` — `reader` is not `master_run` and was never sent the
///    reference (checked before anything about the blob, so an agent learns
///    nothing about content it may not see);
/// 3. `unknown_blob` — the ledger has no BlobPut for it (`blob` is `None`);
/// 4. `expired` — `now >= expires_at`, whatever the store still holds;
/// 5. `blob_missing` — live, but the store returned no bytes
///    (`content_digest_actual` is `None`);
/// 6. `digest_mismatch` — the lowercase-hex sha256 of the bytes read (see
///    [`sha256_hex`]) differs from the reference, or the ledger's digest does.
pub fn check_blob_read(
    uri: &str,
    reader: &str,
    master_run: &str,
    grants: &Grants,
    blob: Option<&BlobMeta>,
    now: UnixMillis,
    content_digest_actual: Option<&str>,
) -> Result<ContextUri, ContextError> {
    let parsed = parse_context_uri(uri)?;
    let granted = reader == master_run || grants.get(reader).is_some_and(|uris| uris.contains(uri));
    if !granted {
        return Err(ContextError::NotGranted {
            agent: reader.to_owned(),
            uri: uri.to_owned(),
        });
    }
    let meta = blob.ok_or_else(|| ContextError::UnknownBlob {
        uri: uri.to_owned(),
    })?;
    if now >= meta.expires_at {
        return Err(ContextError::Expired {
            uri: uri.to_owned(),
            expired_at: meta.expires_at,
        });
    }
    let actual = content_digest_actual.ok_or_else(|| ContextError::BlobMissing {
        uri: uri.to_owned(),
    })?;
    if actual != parsed.hex() {
        return Err(ContextError::DigestMismatch {
            uri: uri.to_owned(),
            expected: parsed.hex().to_owned(),
            actual: actual.chars().take(80).collect(),
        });
    }
    // The ledger's record was made from the same reference; if they differ
    // the ledger itself is inconsistent and the bytes cannot be vouched for.
    if meta.digest != parsed.digest() {
        return Err(ContextError::DigestMismatch {
            uri: uri.to_owned(),
            expected: parsed.hex().to_owned(),
            actual: format!(
                "ledger record {}",
                meta.digest.chars().take(80).collect::<String>()
            ),
        });
    }
    Ok(parsed)
}
