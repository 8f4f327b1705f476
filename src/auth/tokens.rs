//! Bearer tokens: made from the operating system's random generator, kept
//! by the ledger only as their SHA-256 (a registry record, so every
//! instance on the same topics knows them), and checked against the views.
//! Deciding an issue or a revocation and checking a presented token are
//! pure functions of the state held for it; nothing here logs or returns a
//! token's text.

use super::principal::Unauthenticated;
use super::principal::{Grant, Principal};
use crate::codes::Code;
use crate::codes::Refusal;
use crate::model::Topic;
use crate::model::{LedgerEvent, TokenIssued, TokenRevoked};
use crate::rules::decide::Decided;
use crate::views::TokenState;
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// What every token starts with, so a secret scanner (or a person) tells
/// one at a glance.
pub const TOKEN_PREFIX: &str = "alt_";

/// Longest validity a token may be issued with: ten years.
pub const MAX_EXPIRES_IN_S: u64 = 10 * 365 * 24 * 3600;

/// A new token: the prefix and 256 random bits, base64url.
pub fn generate() -> Result<String, getrandom::Error> {
    let mut bits = [0u8; 32];
    getrandom::fill(&mut bits)?;
    Ok(format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bits)
    ))
}

/// The SHA-256 the ledger keeps of a token.
pub fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A token's id, derived from its hash: short enough to type into `token
/// revoke`, and saying nothing usable about the token (48 bits of a
/// one-way hash of 256 random bits).
pub fn id_of(sha256: &[u8; 32]) -> String {
    format!("tok_{}", hex::encode(&sha256[..6]))
}

/// The token an `Authorization: Bearer` header value carries.
pub fn bearer_token(header: Option<&str>) -> Result<&str, Unauthenticated> {
    let Some(value) = header else {
        return Err(Unauthenticated(
            "no credential: send the header Authorization: Bearer <token>".into(),
        ));
    };
    let Some((scheme, token)) = value.trim().split_once(' ') else {
        return Err(Unauthenticated(
            "the Authorization header is not \"Bearer <token>\"".into(),
        ));
    };
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(Unauthenticated(
            "the Authorization header is not \"Bearer <token>\"".into(),
        ));
    }
    Ok(token.trim())
}

/// The grant a presented token carries at `now_ms`, given what the views
/// hold for its hash.
pub fn check(held: Option<&TokenState>, now_ms: u64) -> Result<Grant, Unauthenticated> {
    let Some(t) = held else {
        return Err(Unauthenticated(
            "the bearer token is not one this ledger issued".into(),
        ));
    };
    if t.revoked_at_ms.is_some() {
        return Err(Unauthenticated(format!("token {} was revoked", t.id)));
    }
    if let Some(at) = t.expires_at_ms.filter(|at| now_ms >= *at) {
        return Err(Unauthenticated(format!(
            "token {} expired at {}",
            t.id,
            crate::model::time::rfc3339_ms(at)
        )));
    }
    let principal: Principal = t
        .principal
        .parse()
        .map_err(|_| Unauthenticated(format!("token {} names no known principal", t.id)))?;
    Grant::new(principal, t.scopes.clone())
        .map_err(|e| Unauthenticated(format!("token {} carries a bad grant: {e}", t.id)))
}

/// An `issue_token` command: the hash of a token made by the caller (the
/// token itself never reaches the ledger), and what it grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueToken {
    pub sha256: [u8; 32],
    pub principal: String,
    pub scopes: Vec<String>,
    pub expires_in_s: Option<u64>,
}

/// Decide an issue, given what the views hold for its id.
pub fn decide_issue(
    held: Option<&TokenState>,
    cmd: &IssueToken,
    now_ms: u64,
) -> Result<Decided, Refusal> {
    let principal: Principal = cmd
        .principal
        .parse()
        .map_err(|e: super::BadPrincipal| Refusal::new(Code::InvalidRequest, e.to_string()))?;
    let grant = Grant::new(principal, cmd.scopes.clone()).map_err(|e| {
        let code = match e {
            super::BadGrant::Scope(_) => Code::InvalidScope,
            _ => Code::InvalidRequest,
        };
        Refusal::new(code, e.to_string())
    })?;
    crate::model::limits::check_count(
        "scopes of a token",
        grant.scopes.len(),
        crate::model::limits::MAX_ACCESS_SCOPES,
    )?;
    let expires_at_ms = match cmd.expires_in_s {
        Some(0) => {
            return Err(Refusal::new(
                Code::InvalidRequest,
                "expires_in_s must be at least 1",
            ))
        }
        Some(s) if s > MAX_EXPIRES_IN_S => {
            return Err(Refusal::new(
                Code::InvalidRequest,
                format!("expires_in_s may be at most {MAX_EXPIRES_IN_S} (ten years)"),
            ))
        }
        Some(s) => Some(now_ms.saturating_add(s * 1000)),
        None => None,
    };
    let id = id_of(&cmd.sha256);
    if held.is_some() {
        return Err(Refusal::new(
            Code::Conflict,
            format!("token {id} was issued already; make a new token"),
        ));
    }
    Ok(Decided {
        topic: Topic::Registry,
        key: id.clone(),
        event_id: format!("tk-{}", &hex::encode(cmd.sha256)[..24]),
        step: 0,
        event: LedgerEvent::TokenIssued(TokenIssued {
            id,
            sha256: cmd.sha256,
            principal: grant.principal.to_string(),
            scopes: grant.scopes,
            expires_at_ms,
        }),
    })
}

/// Decide a revocation, given what the views hold for the id.
pub fn decide_revoke(held: Option<&TokenState>, id: &str) -> Result<Decided, Refusal> {
    let shown: String = id.chars().take(64).collect();
    match held {
        None => Err(Refusal::new(
            Code::UnknownToken,
            format!("no token {shown:?} was issued"),
        )),
        Some(t) if t.revoked_at_ms.is_some() => Err(Refusal::new(
            Code::Conflict,
            format!("token {shown} was revoked already"),
        )),
        Some(t) => Ok(Decided {
            topic: Topic::Registry,
            key: t.id.clone(),
            event_id: format!("tr-{}", t.id),
            step: 0,
            event: LedgerEvent::TokenRevoked(TokenRevoked { id: t.id.clone() }),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(principal: &str, scopes: &[&str]) -> TokenState {
        TokenState {
            id: "tok_000000000001".into(),
            principal: principal.into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            issued_at_ms: 1_000,
            expires_at_ms: None,
            revoked_at_ms: None,
        }
    }

    #[test]
    fn tokens_are_random_prefixed_and_kept_only_as_a_hash() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX));
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 43);
        let id = id_of(&hash(&a));
        assert!(id.starts_with("tok_") && id.len() == 16);
        assert!(!a.contains(&id[4..]));
    }

    #[test]
    fn only_a_bearer_header_carries_a_token() {
        assert_eq!(bearer_token(Some("Bearer abc")).unwrap(), "abc");
        assert_eq!(bearer_token(Some("bearer  abc ")).unwrap(), "abc");
        for bad in [
            None,
            Some(""),
            Some("Basic abc"),
            Some("Bearer"),
            Some("Bearer  "),
        ] {
            let e = bearer_token(bad).unwrap_err();
            assert!(!e.0.contains("abc"), "{e}");
        }
    }

    #[test]
    fn a_token_authenticates_until_revoked_or_expired() {
        let t = held("platform:acme", &["acme/travel"]);
        let g = check(Some(&t), 5_000).unwrap();
        assert_eq!(g.principal, Principal::Platform("acme".into()));
        assert_eq!(g.scopes, vec!["acme/travel".to_string()]);
        assert!(check(None, 5_000)
            .unwrap_err()
            .0
            .contains("not one this ledger issued"));
        let revoked = TokenState {
            revoked_at_ms: Some(4_000),
            ..t.clone()
        };
        assert!(check(Some(&revoked), 5_000)
            .unwrap_err()
            .0
            .contains("revoked"));
        let expiring = TokenState {
            expires_at_ms: Some(5_000),
            ..t
        };
        assert!(check(Some(&expiring), 4_999).is_ok());
        assert!(check(Some(&expiring), 5_000)
            .unwrap_err()
            .0
            .contains("expired"));
    }

    #[test]
    fn issuing_checks_the_grant_and_the_expiry_and_never_twice() {
        let cmd = |principal: &str, scopes: &[&str], expires: Option<u64>| IssueToken {
            sha256: hash("t"),
            principal: principal.into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            expires_in_s: expires,
        };
        let d = decide_issue(None, &cmd("agent:hotel", &[], Some(60)), 1_000).unwrap();
        assert_eq!(d.topic, Topic::Registry);
        let LedgerEvent::TokenIssued(t) = &d.event else {
            panic!("{d:?}")
        };
        assert_eq!(t.expires_at_ms, Some(61_000));
        assert_eq!(t.id, id_of(&hash("t")));
        let code = |c: &IssueToken| decide_issue(None, c, 0).unwrap_err().code;
        assert_eq!(code(&cmd("root", &[], None)), Code::InvalidRequest);
        assert_eq!(code(&cmd("platform:acme", &[], None)), Code::InvalidRequest);
        assert_eq!(code(&cmd("consumer", &["../x"], None)), Code::InvalidScope);
        assert_eq!(code(&cmd("agent:a", &[], Some(0))), Code::InvalidRequest);
        assert_eq!(
            code(&cmd("agent:a", &[], Some(MAX_EXPIRES_IN_S + 1))),
            Code::InvalidRequest
        );
        let held = held("agent:hotel", &[]);
        assert_eq!(
            decide_issue(Some(&held), &cmd("agent:a", &[], None), 0)
                .unwrap_err()
                .code,
            Code::Conflict
        );
    }

    #[test]
    fn revoking_needs_a_live_token() {
        let t = held("auditor", &[]);
        assert!(decide_revoke(Some(&t), &t.id).is_ok());
        assert_eq!(
            decide_revoke(None, "tok_x").unwrap_err().code,
            Code::UnknownToken
        );
        let gone = TokenState {
            revoked_at_ms: Some(1),
            ..t
        };
        assert_eq!(
            decide_revoke(Some(&gone), &gone.id).unwrap_err().code,
            Code::Conflict
        );
    }
}
