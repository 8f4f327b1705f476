//! mTLS: the principal a client certificate names. The listener verifies
//! the chain against `serve --client-ca`; this module reads who the
//! certificate is for from its subject alternative names.
//!
//! The principal is a URI SAN of the scheme `agentledger:` — the grant as
//! the ledger writes it, scopes as query parameters:
//!
//! ```text
//! agentledger:agent:hotel
//! agentledger:platform:acme?scope=acme/travel&scope=acme/hr
//! agentledger:consumer?scope=acme/travel
//! agentledger:auditor
//! ```
//!
//! A URI SAN, not the subject's CN: SANs are what certificate authorities
//! and service meshes (SPIFFE IDs) already issue per workload, and one name
//! per certificate leaves no doubt which one counts. A certificate with no
//! such SAN, or with two, authenticates no one.

use super::principal::Unauthenticated;
use super::principal::{BadGrant, BadPrincipal, Grant, Principal};
use rustls::pki_types::CertificateDer;

/// The URI scheme of the SAN that names the principal.
pub const SCHEME: &str = "agentledger:";

/// Why a URI SAN names no grant.
#[derive(Debug, thiserror::Error)]
pub enum UriError {
    #[error("{0:?} is not an {scheme} URI", scheme = SCHEME)]
    NotOurs(String),
    #[error("{uri:?}: {source}")]
    Principal { uri: String, source: BadPrincipal },
    #[error("{uri:?}: unknown parameter {pair:?} (only scope=…)")]
    Parameter { uri: String, pair: String },
    #[error("{uri:?}: {source}")]
    Grant { uri: String, source: BadGrant },
}

/// The grant a URI SAN names (`uri` without or with the scheme checked by
/// the caller: it must start with [`SCHEME`]).
pub fn grant_of_uri(uri: &str) -> Result<Grant, UriError> {
    let rest = uri
        .strip_prefix(SCHEME)
        .ok_or_else(|| UriError::NotOurs(uri.to_owned()))?;
    let (principal, query) = rest.split_once('?').unwrap_or((rest, ""));
    let principal: Principal = principal.parse().map_err(|source| UriError::Principal {
        uri: uri.to_owned(),
        source,
    })?;
    let mut scopes = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("scope", scope)) => scopes.push(scope.to_owned()),
            _ => {
                return Err(UriError::Parameter {
                    uri: uri.to_owned(),
                    pair: pair.to_owned(),
                })
            }
        }
    }
    Grant::new(principal, scopes).map_err(|source| UriError::Grant {
        uri: uri.to_owned(),
        source,
    })
}

/// The grant of a verified client certificate (the leaf), or why it
/// names no one.
pub fn grant_of_certificate(leaf: &CertificateDer<'_>) -> Result<Grant, Unauthenticated> {
    let cert = webpki::EndEntityCert::try_from(leaf)
        .map_err(|e| Unauthenticated(format!("the client certificate cannot be read: {e}")))?;
    let named: Vec<&str> = cert
        .valid_uri_names()
        .filter(|u| u.starts_with(SCHEME))
        .collect();
    match named.as_slice() {
        [uri] => grant_of_uri(uri)
            .map_err(|why| Unauthenticated(format!("the client certificate's SAN {why}"))),
        [] => Err(Unauthenticated(format!(
            "the client certificate names no principal: it needs a URI SAN such as {SCHEME}agent:NAME"
        ))),
        _ => Err(Unauthenticated(format!(
            "the client certificate names {} principals ({}); it must name one",
            named.len(),
            named.join(", ")
        ))),
    }
}

/// When a client certificate stops vouching for its principal: its
/// `notAfter`, in milliseconds since the epoch. The handshake checked it
/// then; a connection kept open past it is refused from then on. `None`
/// when the certificate's validity cannot be read (it verified, so it is
/// then held to the handshake alone).
pub fn lapse_of_certificate(leaf: &CertificateDer<'_>) -> Option<u64> {
    use simple_asn1::ASN1Block::{GeneralizedTime, Sequence, UTCTime};
    let blocks = simple_asn1::from_der(leaf.as_ref()).ok()?;
    let Some(Sequence(_, cert)) = blocks.first() else {
        return None;
    };
    let Some(Sequence(_, tbs)) = cert.first() else {
        return None;
    };
    // RFC 5280 §4.1: `validity` is the one sequence of two times.
    tbs.iter().find_map(|b| match b {
        Sequence(_, pair) => match pair.as_slice() {
            [UTCTime(..) | GeneralizedTime(..), UTCTime(_, t) | GeneralizedTime(_, t)] => {
                let s = t.assume_utc().unix_timestamp();
                Some(u64::try_from(s).unwrap_or(0).saturating_mul(1000))
            }
            _ => None,
        },
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_lapses_at_its_not_after() {
        let key = rcgen::KeyPair::generate().unwrap();
        // One UTCTime (before 2050) and one GeneralizedTime.
        for year in [2030, 2052] {
            let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
            params.subject_alt_names.push(rcgen::SanType::URI(
                "agentledger:agent:hotel".try_into().unwrap(),
            ));
            params.not_after = rcgen::date_time_ymd(year, 1, 1);
            let want = params.not_after.unix_timestamp() as u64 * 1000;
            let cert = params.self_signed(&key).unwrap();
            assert_eq!(lapse_of_certificate(cert.der()), Some(want), "{year}");
        }
        assert_eq!(
            lapse_of_certificate(&CertificateDer::from(vec![0x30, 0x00])),
            None
        );
        assert_eq!(
            lapse_of_certificate(&CertificateDer::from(vec![0xff; 9])),
            None
        );
    }

    #[test]
    fn uris_name_grants_as_the_ledger_writes_them() {
        let g = grant_of_uri("agentledger:platform:acme?scope=acme/travel&scope=acme/hr").unwrap();
        assert_eq!(g.principal, Principal::Platform("acme".into()));
        assert_eq!(g.scopes, vec!["acme/travel", "acme/hr"]);
        let g = grant_of_uri("agentledger:agent:hotel").unwrap();
        assert_eq!(g.principal, Principal::Agent("hotel".into()));
        assert!(g.scopes.is_empty());
        assert_eq!(
            grant_of_uri("agentledger:auditor").unwrap().principal,
            Principal::Auditor
        );
    }

    #[test]
    fn uris_that_name_no_valid_grant_are_refused_naming_why() {
        for (uri, says) in [
            ("spiffe://acme/hotel", "not an agentledger: URI"),
            ("agentledger:root", "not one of operator"),
            ("agentledger:platform:acme", "needs at least one scope"),
            ("agentledger:agent:hotel?scope=acme", "takes no scopes"),
            ("agentledger:platform:acme?role=admin", "unknown parameter"),
            ("agentledger:platform:acme?scope=", "not a valid scope"),
        ] {
            let e = grant_of_uri(uri).unwrap_err().to_string();
            assert!(e.contains(says), "{uri}: {e}");
        }
    }
}
