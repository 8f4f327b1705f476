//! Cluster-key assertions: how one instance forwards a caller whose
//! credential it cannot pass on. A client certificate stays with the TLS
//! connection it was shown on, and the operator's session token is each
//! instance's own; when such a caller's request belongs to another
//! instance, the forwarding one vouches for the grant it authenticated, in
//! a short-lived statement MACed with a key every instance of the cluster
//! holds (`serve --cluster-key`). The owner verifies it and takes the
//! grant as if the caller had shown its credential there.
//!
//! The statement is bound to what it forwards — the request's path and
//! query and the SHA-256 of its body — so one seen in passing cannot carry
//! another request, and it lapses within seconds (and never after the
//! credential it stands for). Format: `v1.` base64url(JSON claims) `.`
//! base64url(HMAC-SHA256 of the key over a label and the encoded claims).
//!
//! Pure: the time is passed in.

use super::principal::{Grant, Principal, Unauthenticated};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The header an assertion travels in.
pub const HEADER: &str = "x-agentledger-assertion";

/// How long an assertion is good for after it is made: a forward is sent
/// at once, and the owner checks it when the request arrives.
pub const LIFETIME_MS: u64 = 30_000;

/// Clocks of the instances may differ by this much.
const SKEW_MS: u64 = 5_000;

/// Shortest key accepted: 256 bits.
const MIN_KEY_BYTES: usize = 32;

/// Longest key file read.
const MAX_KEY_BYTES: usize = 4096;

/// What the MAC covers besides the claims: keeps a MAC made with the same
/// key for anything else from passing for an assertion.
const LABEL: &[u8] = b"agentledger cluster assertion v1\n";

/// The secret every instance of a cluster shares.
#[derive(Clone)]
pub struct ClusterKey(Vec<u8>);

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

/// Why a cluster key file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BadClusterKey {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} holds {len} bytes; a cluster key is {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes (make one with `openssl rand -hex 32`)")]
    Size { path: String, len: usize },
}

impl ClusterKey {
    /// The key in `path`: its bytes, surrounding whitespace removed (so a
    /// hex line from `openssl rand -hex 32` is used as written).
    pub fn load(path: &Path) -> Result<ClusterKey, BadClusterKey> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| BadClusterKey::Read {
            path: shown.clone(),
            source,
        })?;
        ClusterKey::from_bytes(bytes.trim_ascii())
            .map_err(|len| BadClusterKey::Size { path: shown, len })
    }

    /// A key of these bytes; `Err(len)` when too short or too long.
    pub fn from_bytes(bytes: &[u8]) -> Result<ClusterKey, usize> {
        if (MIN_KEY_BYTES..=MAX_KEY_BYTES).contains(&bytes.len()) {
            Ok(ClusterKey(bytes.to_vec()))
        } else {
            Err(bytes.len())
        }
    }

    fn mac(&self, encoded_claims: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any size");
        mac.update(LABEL);
        mac.update(encoded_claims);
        mac
    }
}

/// What an assertion says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Claims {
    /// The instance that authenticated the caller.
    by: String,
    principal: String,
    #[serde(default)]
    scopes: Vec<String>,
    /// When the caller's credential lapses (ms since the epoch), if it does.
    #[serde(default)]
    lapses: Option<u64>,
    /// When the assertion lapses (ms since the epoch).
    exp: u64,
    /// The path and query forwarded.
    target: String,
    /// SHA-256 of the body forwarded, hex (of nothing for a GET).
    body: String,
}

/// A caller another instance authenticated, as its assertion names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asserted {
    /// The instance that vouched for it.
    pub by: String,
    pub grant: Grant,
    /// When the caller's credential lapses, if it does.
    pub lapses: Option<u64>,
    /// SHA-256 of the body the assertion was made for.
    pub body: [u8; 32],
}

/// The SHA-256 an assertion binds a body by.
pub fn body_digest(body: &[u8]) -> [u8; 32] {
    Sha256::digest(body).into()
}

/// An assertion by instance `by` that it authenticated `grant` (whose
/// credential lapses at `lapses`), for the request to `target` with a body
/// of digest `body`, made at `now_ms`.
pub fn make(
    key: &ClusterKey,
    by: &str,
    grant: &Grant,
    lapses: Option<u64>,
    target: &str,
    body: &[u8; 32],
    now_ms: u64,
) -> String {
    let exp = lapses.map_or(now_ms + LIFETIME_MS, |l| l.min(now_ms + LIFETIME_MS));
    let claims = Claims {
        by: by.to_string(),
        principal: grant.principal.to_string(),
        scopes: grant.scopes.clone(),
        lapses,
        exp,
        target: target.to_string(),
        body: hex::encode(body),
    };
    let encoded = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).expect("claims serialise"));
    let tag = key.mac(encoded.as_bytes()).finalize().into_bytes();
    format!("v1.{encoded}.{}", URL_SAFE_NO_PAD.encode(tag))
}

/// The caller `value` asserts for a request to `target`, checked against
/// `key` at `now_ms`: refused naming what is wrong when it is malformed,
/// not made with this key, made for another request or lapsed. The body
/// is checked by the caller of this, once it is read ([`Asserted::body`]).
pub fn verify(
    key: &ClusterKey,
    value: &str,
    target: &str,
    now_ms: u64,
) -> Result<Asserted, Unauthenticated> {
    let bad = |why: &str| Unauthenticated(format!("the cluster assertion {why}"));
    let mut parts = value.trim().split('.');
    let (Some("v1"), Some(encoded), Some(tag), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("is not v1.CLAIMS.MAC"));
    };
    let tag = URL_SAFE_NO_PAD
        .decode(tag)
        .map_err(|_| bad("has a MAC that is not base64url"))?;
    key.mac(encoded.as_bytes())
        .verify_slice(&tag)
        .map_err(|_| bad("was not made with this instance's --cluster-key"))?;
    let claims: Claims = URL_SAFE_NO_PAD
        .decode(encoded)
        .ok()
        .and_then(|j| serde_json::from_slice(&j).ok())
        .ok_or_else(|| bad("has claims that are not JSON of the expected shape"))?;
    if claims.target != target {
        return Err(bad(&format!(
            "was made for {:?}, not {target:?}",
            claims.target
        )));
    }
    if now_ms > claims.exp.saturating_add(SKEW_MS) {
        return Err(bad("has lapsed"));
    }
    if claims.exp > now_ms.saturating_add(LIFETIME_MS + SKEW_MS) {
        return Err(bad(
            "lapses later than an assertion may (are the clocks apart?)",
        ));
    }
    let principal: Principal = claims
        .principal
        .parse()
        .map_err(|e| bad(&format!("names no principal: {e}")))?;
    let grant = if principal == Principal::Operator {
        Grant::operator()
    } else {
        Grant::new(principal, claims.scopes).map_err(|e| bad(&format!("names no grant: {e}")))?
    };
    let mut body = [0u8; 32];
    hex::decode_to_slice(&claims.body, &mut body)
        .map_err(|_| bad("has a body digest that is not 64 hex digits"))?;
    Ok(Asserted {
        by: claims.by,
        grant,
        lapses: claims.lapses,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    fn key(b: u8) -> ClusterKey {
        ClusterKey::from_bytes(&[b; 32]).unwrap()
    }

    fn hotel() -> Grant {
        Grant::new(Principal::Agent("hotel".into()), Vec::new()).unwrap()
    }

    fn made(grant: &Grant, lapses: Option<u64>) -> String {
        make(
            &key(1),
            "a",
            grant,
            lapses,
            "/v1/ops",
            &body_digest(b"{}"),
            NOW,
        )
    }

    #[test]
    fn an_assertion_made_with_the_key_names_the_grant_and_the_body() {
        let platform = Grant::new(
            Principal::Platform("acme".into()),
            vec!["acme/travel".into()],
        )
        .unwrap();
        let a = verify(&key(1), &made(&platform, None), "/v1/ops", NOW + 1).unwrap();
        assert_eq!(a.grant, platform);
        assert_eq!(a.by, "a");
        assert_eq!(a.body, body_digest(b"{}"));
        let op = verify(&key(1), &made(&Grant::operator(), None), "/v1/ops", NOW).unwrap();
        assert_eq!(op.grant, Grant::operator());
    }

    #[test]
    fn another_key_another_target_or_a_changed_claim_is_refused() {
        let a = made(&hotel(), None);
        let e = verify(&key(2), &a, "/v1/ops", NOW).unwrap_err();
        assert!(e.0.contains("--cluster-key"), "{e}");
        let e = verify(&key(1), &a, "/v1/runs/r/trail", NOW).unwrap_err();
        assert!(e.0.contains("was made for \"/v1/ops\""), "{e}");
        // Claims swapped for others (a principal of one's choosing) under
        // the same MAC.
        let (_, rest) = a.split_once('.').unwrap();
        let (_, tag) = rest.split_once('.').unwrap();
        let forged = Claims {
            by: "a".into(),
            principal: "operator".into(),
            scopes: vec![],
            lapses: None,
            exp: NOW + 1000,
            target: "/v1/ops".into(),
            body: hex::encode(body_digest(b"{}")),
        };
        let forged = format!(
            "v1.{}.{tag}",
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap())
        );
        assert!(verify(&key(1), &forged, "/v1/ops", NOW).is_err());
    }

    #[test]
    fn a_lapsed_or_overlong_assertion_is_refused_and_none_outlives_its_credential() {
        let a = made(&hotel(), None);
        assert!(verify(&key(1), &a, "/v1/ops", NOW + LIFETIME_MS).is_ok());
        let e = verify(&key(1), &a, "/v1/ops", NOW + LIFETIME_MS + SKEW_MS + 1).unwrap_err();
        assert!(e.0.contains("lapsed"), "{e}");
        // Made by a clock far ahead.
        let e = verify(&key(1), &a, "/v1/ops", NOW - 60_000).unwrap_err();
        assert!(e.0.contains("later than"), "{e}");
        // A certificate lapsing in 2 s: so does the assertion.
        let short = made(&hotel(), Some(NOW + 2000));
        let v = verify(&key(1), &short, "/v1/ops", NOW).unwrap();
        assert_eq!(v.lapses, Some(NOW + 2000));
        assert!(verify(&key(1), &short, "/v1/ops", NOW + 2000 + SKEW_MS + 1).is_err());
    }

    #[test]
    fn garbage_is_refused_saying_what_is_wrong() {
        for (value, says) in [
            ("", "is not v1"),
            ("v2.a.b", "is not v1"),
            ("v1.a.b.c", "is not v1"),
            ("v1.e30.!!", "not base64url"),
            ("v1.e30.AAAA", "--cluster-key"),
        ] {
            let e = verify(&key(1), value, "/v1/ops", NOW).unwrap_err();
            assert!(e.0.contains(says), "{value:?}: {e}");
        }
        // Well MACed, but not claims.
        let encoded = URL_SAFE_NO_PAD.encode(b"[1,2]");
        let tag = URL_SAFE_NO_PAD.encode(key(1).mac(encoded.as_bytes()).finalize().into_bytes());
        let e = verify(&key(1), &format!("v1.{encoded}.{tag}"), "/v1/ops", NOW).unwrap_err();
        assert!(e.0.contains("not JSON of the expected shape"), "{e}");
    }

    #[test]
    fn a_key_file_is_trimmed_and_held_to_its_size() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("k");
        std::fs::write(&p, format!("{}\n", "ab".repeat(32))).unwrap();
        assert_eq!(ClusterKey::load(&p).unwrap().0.len(), 64);
        std::fs::write(&p, "short\n").unwrap();
        let e = ClusterKey::load(&p).unwrap_err().to_string();
        assert!(
            e.contains("holds 5 bytes") && e.contains("openssl rand"),
            "{e}"
        );
        let e = ClusterKey::load(&d.path().join("none"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("reading"), "{e}");
        assert_eq!(format!("{:?}", key(7)), "ClusterKey(..)");
    }
}
