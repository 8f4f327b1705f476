//! JWTs from an existing identity provider (`serve --jwt-jwks FILE
//! --jwt-issuer ISS --jwt-audience AUD`): the signature is checked against
//! the provider's published keys (EdDSA, ES256 or RS256; nothing else, so
//! neither `none` nor a shared-secret HMAC is ever accepted), then issuer,
//! audience, expiry and not-before; the principal is read from a
//! configured claim (`sub` by default) and the scopes of a platform,
//! auditor or consumer from `scope` (space-separated, as OAuth writes
//! them) or `scopes` (an array): every one of them, so an auditor's JWT
//! that carries any is a scoped auditor's.
//! Checked at the network edge, with no state: nothing here logs or
//! returns the token.

use super::principal::Unauthenticated;
use super::principal::{Grant, Principal};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use std::path::{Path, PathBuf};

/// Seconds of clock difference tolerated on `exp` and `nbf`.
pub const LEEWAY_S: u64 = 30;

/// The algorithms a token may be signed with.
pub const ALGORITHMS: [Algorithm; 3] = [Algorithm::EdDSA, Algorithm::ES256, Algorithm::RS256];

#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    #[error("--jwt-jwks {path}: {why}")]
    Jwks { path: PathBuf, why: String },
}

/// What JWTs are accepted, and where their principal is.
#[derive(Clone)]
pub struct JwtConfig {
    keys: Vec<(Option<String>, Algorithm, DecodingKey)>,
    issuer: String,
    audience: String,
    claim: String,
}

impl std::fmt::Debug for JwtConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtConfig")
            .field("keys", &self.keys.len())
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("claim", &self.claim)
            .finish()
    }
}

/// The JSON of a token's `i`th segment (0 the header, 1 the claims), if
/// it decodes.
fn segment_json(token: &str, i: usize) -> Option<serde_json::Value> {
    use base64::Engine as _;
    let seg = token.split('.').nth(i)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(seg.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The algorithm a key of the set is for: its `alg`, else what its type
/// and curve imply.
fn algorithm_of(jwk: &jsonwebtoken::jwk::Jwk) -> Option<Algorithm> {
    use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, KeyAlgorithm};
    match jwk.common.key_algorithm {
        Some(KeyAlgorithm::EdDSA) => return Some(Algorithm::EdDSA),
        Some(KeyAlgorithm::ES256) => return Some(Algorithm::ES256),
        Some(KeyAlgorithm::RS256) => return Some(Algorithm::RS256),
        Some(_) => return None,
        None => {}
    }
    match &jwk.algorithm {
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            Some(Algorithm::EdDSA)
        }
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => {
            Some(Algorithm::ES256)
        }
        AlgorithmParameters::RSA(_) => Some(Algorithm::RS256),
        _ => None,
    }
}

/// Why a key set cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    #[error("not a JWKS document: {0}")]
    NotJwks(serde_json::Error),
    #[error("key {0} is not for EdDSA (Ed25519), ES256 (P-256) or RS256")]
    Algorithm(String),
    #[error("key {index}: {source}")]
    Key {
        index: usize,
        source: jsonwebtoken::errors::Error,
    },
    #[error("the key set holds no keys")]
    Empty,
}

/// Why a verified JWT grants nothing.
#[derive(Debug, thiserror::Error)]
enum ClaimError {
    #[error("it has no string claim {0:?}")]
    Missing(String),
    #[error("claim {0:?} names no principal")]
    NoPrincipal(String),
    #[error(transparent)]
    Grant(#[from] super::principal::BadGrant),
}

impl JwtConfig {
    /// Read the provider's key set (a JWKS document) from `jwks`.
    /// The issuer tokens must name: the authorization server a client
    /// asks for one (named in the protected-resource metadata).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn load(jwks: &Path, issuer: &str, audience: &str, claim: &str) -> Result<Self, JwtError> {
        let bad = |why: String| JwtError::Jwks {
            path: jwks.to_path_buf(),
            why,
        };
        let text = std::fs::read_to_string(jwks).map_err(|e| bad(e.to_string()))?;
        Self::from_jwks(&text, issuer, audience, claim).map_err(|e| bad(e.to_string()))
    }

    /// The same from the JWKS document's text.
    pub fn from_jwks(
        jwks: &str,
        issuer: &str,
        audience: &str,
        claim: &str,
    ) -> Result<Self, JwksError> {
        let set: JwkSet = serde_json::from_str(jwks).map_err(JwksError::NotJwks)?;
        let mut keys = Vec::new();
        for (i, jwk) in set.keys.iter().enumerate() {
            let named = jwk.common.key_id.clone();
            let Some(alg) = algorithm_of(jwk) else {
                return Err(JwksError::Algorithm(named.unwrap_or_else(|| i.to_string())));
            };
            let key =
                DecodingKey::from_jwk(jwk).map_err(|source| JwksError::Key { index: i, source })?;
            keys.push((named, alg, key));
        }
        if keys.is_empty() {
            return Err(JwksError::Empty);
        }
        Ok(JwtConfig {
            keys,
            issuer: issuer.to_string(),
            audience: audience.to_string(),
            claim: claim.to_string(),
        })
    }

    /// The grant a JWT carries, once its signature, issuer, audience and
    /// times check.
    pub fn verify(&self, token: &str) -> Result<Grant, Unauthenticated> {
        self.verify_until(token).map(|(grant, _)| grant)
    }

    /// [`Self::verify`], with the moment the token lapses: its `exp` plus
    /// the leeway, in milliseconds since the epoch. A connection that
    /// outlives it (a WebSocket, an event stream) is refused from then on.
    pub fn verify_until(&self, token: &str) -> Result<(Grant, u64), Unauthenticated> {
        let refuse = |why: &str| Unauthenticated(format!("the JWT is not accepted: {why}"));
        let header = jsonwebtoken::decode_header(token).map_err(|_| refuse("it is malformed"))?;
        // RFC 7515 §4.1.11: extensions marked critical must be understood;
        // this ledger understands none.
        if let Some(crit) = segment_json(token, 0).and_then(|h| h.get("crit").cloned()) {
            return Err(refuse(&format!(
                "its header marks {crit} critical, extensions this ledger does not understand"
            )));
        }
        if !ALGORITHMS.contains(&header.alg) {
            return Err(refuse(&format!(
                "it is signed with {:?}; accepted are EdDSA, ES256 and RS256",
                header.alg
            )));
        }
        let candidates = self.keys.iter().filter(|(kid, alg, _)| {
            *alg == header.alg && (header.kid.is_none() || header.kid == *kid)
        });
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY_S;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let mut last = refuse("no key of the provider's set matches it");
        for (_, _, key) in candidates {
            use jsonwebtoken::errors::ErrorKind as K;
            match jsonwebtoken::decode::<serde_json::Value>(token, key, &validation) {
                Ok(data) => {
                    let grant = self
                        .grant(&data.claims)
                        .map_err(|w| refuse(&w.to_string()))?;
                    // `exp` is required and was read as a NumericDate.
                    let exp = data.claims["exp"].as_u64().unwrap_or(0);
                    let lapses = exp.saturating_add(LEEWAY_S).saturating_mul(1000);
                    return Ok((grant, lapses));
                }
                Err(e) => {
                    let why = match e.kind() {
                        K::InvalidSignature => "its signature does not verify",
                        K::ExpiredSignature => "it has expired",
                        K::ImmatureSignature => "it is not valid yet (nbf)",
                        K::InvalidIssuer => "its issuer is not the one configured",
                        K::InvalidAudience => "its audience is not this ledger",
                        K::MissingRequiredClaim(_) => {
                            let claims = segment_json(token, 1).unwrap_or_default();
                            let unreadable = ["exp", "nbf", "iat"]
                                .into_iter()
                                .find(|c| claims.get(*c).is_some_and(|v| v.as_u64().is_none()));
                            match unreadable {
                                Some(c) => {
                                    return Err(refuse(&format!(
                                        "its {c} is not a NumericDate this ledger can read (whole seconds since 1970)"
                                    )))
                                }
                                None => "it lacks exp, iss or aud",
                            }
                        }
                        _ => "it does not decode",
                    };
                    last = refuse(why);
                    // Another key may still verify it; any other failure
                    // is the token's.
                    if !matches!(e.kind(), K::InvalidSignature) {
                        return Err(last);
                    }
                }
            }
        }
        Err(last)
    }

    fn grant(&self, claims: &serde_json::Value) -> Result<Grant, ClaimError> {
        let Some(name) = claims.get(&self.claim).and_then(|v| v.as_str()) else {
            return Err(ClaimError::Missing(self.claim.clone()));
        };
        let principal: Principal = name
            .parse()
            .map_err(|_| ClaimError::NoPrincipal(self.claim.clone()))?;
        let scopes: Vec<String> = match (claims.get("scope"), claims.get("scopes")) {
            (Some(serde_json::Value::String(s)), _) => {
                s.split_whitespace().map(str::to_string).collect()
            }
            (_, Some(serde_json::Value::Array(a))) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        };
        // Principals that take no scopes ignore OAuth scopes the provider
        // adds for other audiences.
        let scopes = match principal {
            Principal::Platform(_) | Principal::Consumer | Principal::Auditor => scopes,
            Principal::Operator | Principal::Agent(_) => Vec::new(),
        };
        Ok(Grant::new(principal, scopes)?)
    }
}

/// Whether a bearer token has the shape of a JWT (three base64url parts)
/// rather than one of the ledger's own tokens.
pub fn looks_like_jwt(token: &str) -> bool {
    !token.starts_with(super::tokens::TOKEN_PREFIX) && token.split('.').count() == 3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_set_that_cannot_be_used_is_said_so() {
        let load = |text: &str| {
            JwtConfig::from_jwks(text, "iss", "aud", "sub")
                .unwrap_err()
                .to_string()
        };
        assert!(load("not json").contains("not a JWKS document"));
        assert!(load(r#"{"keys":[]}"#).contains("no keys"));
        let hmac = r#"{"keys":[{"kty":"oct","kid":"s","k":"c2VjcmV0","alg":"HS256"}]}"#;
        assert!(load(hmac).contains("is not for EdDSA"), "{}", load(hmac));
        let p384 = r#"{"keys":[{"kty":"EC","crv":"P-384","kid":"p","x":"AA","y":"AA"}]}"#;
        assert!(load(p384).contains("key p is not for"));
        let missing = JwtConfig::load(Path::new("/nonexistent/jwks.json"), "i", "a", "sub");
        assert!(missing
            .unwrap_err()
            .to_string()
            .contains("--jwt-jwks /nonexistent/jwks.json"));
    }

    #[test]
    fn only_three_part_tokens_not_the_ledgers_own_look_like_jwts() {
        assert!(looks_like_jwt("a.b.c"));
        assert!(!looks_like_jwt("alt_a.b.c"));
        assert!(!looks_like_jwt("a.b"));
        assert!(!looks_like_jwt("alt_abc"));
    }
}
