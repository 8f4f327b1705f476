//! Content references: `cas://sha256/<64 lowercase hex>`. The address is
//! the digest, so substituted or damaged bytes are caught on read without
//! signatures. The one place references are parsed and built: the content
//! store, artifacts, the draft's ContextURI and the trail all use it.
//! Only the canonical lowercase spelling is accepted, because grants are
//! compared as strings and two spellings of one blob must not be two grants.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;

const PREFIX: &str = "cas://sha256/";

/// A parsed content reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ContentRef {
    /// Lowercase hex sha256 of the content.
    hex: String,
}

/// A string that is not a content reference, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a content ref {uri:?}: {reason}")]
pub struct BadRef {
    /// The string, cut to 200 characters.
    pub uri: String,
    pub reason: &'static str,
}

impl ContentRef {
    /// The reference of `content`.
    pub fn for_content(content: &[u8]) -> Self {
        Self::for_sha256(&Sha256::digest(content).into())
    }

    /// The reference of content with this sha256.
    pub fn for_sha256(sha256: &[u8; 32]) -> Self {
        ContentRef {
            hex: hex::encode(sha256),
        }
    }

    /// Parse `cas://sha256/<64 lowercase hex>`.
    pub fn parse(uri: &str) -> Result<Self, BadRef> {
        let bad = |reason| BadRef {
            uri: uri.chars().take(200).collect(),
            reason,
        };
        let hex = uri
            .strip_prefix(PREFIX)
            .ok_or_else(|| bad("expected cas://sha256/<64 hex digits>"))?;
        if hex.len() != 64 {
            return Err(bad("the sha256 digest must be 64 hex digits"));
        }
        if !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(bad("the sha256 digest must be lowercase hex"));
        }
        Ok(ContentRef {
            hex: hex.to_owned(),
        })
    }

    /// Lowercase hex sha256 named by the reference.
    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// The sha256 as bytes.
    pub fn sha256(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        // Parsed and built references hold exactly 64 lowercase hex digits.
        let _ = hex::decode_to_slice(&self.hex, &mut out);
        out
    }

    /// The ledger's digest spelling, `sha256:<hex>`.
    pub fn digest(&self) -> String {
        format!("sha256:{}", self.hex)
    }

    /// `cas://sha256/` and the first 12 hex digits: for a trail line.
    pub fn short(&self) -> String {
        format!("{PREFIX}{}…", &self.hex[..12])
    }
}

impl fmt::Display for ContentRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}", self.hex)
    }
}

/// Lowercase hex sha256 of `content`.
pub fn sha256_hex(content: &[u8]) -> String {
    hex::encode(Sha256::digest(content))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_only_in_their_canonical_spelling() {
        let r = ContentRef::for_content(b"abc");
        assert_eq!(ContentRef::parse(&r.to_string()), Ok(r.clone()));
        assert_eq!(ContentRef::for_sha256(&r.sha256()), r);
        assert_eq!(
            r.to_string(),
            "cas://sha256/ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(r.short(), "cas://sha256/ba7816bf8f01…");
        for bad in [
            "",
            "cas://sha256/xyz",
            "http://x",
            "cas://sha256/../../etc/passwd",
            "cas://sha256/BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD",
        ] {
            assert!(ContentRef::parse(bad).is_err(), "{bad}");
        }
    }
}
