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

use super::principal::{Grant, Principal};
use super::tokens::Unauthenticated;
use rustls::pki_types::CertificateDer;

/// The URI scheme of the SAN that names the principal.
pub const SCHEME: &str = "agentledger:";

/// The grant a URI SAN names (`uri` without or with the scheme checked by
/// the caller: it must start with [`SCHEME`]).
pub fn grant_of_uri(uri: &str) -> Result<Grant, String> {
    let rest = uri
        .strip_prefix(SCHEME)
        .ok_or_else(|| format!("{uri:?} is not an {SCHEME} URI"))?;
    let (principal, query) = rest.split_once('?').unwrap_or((rest, ""));
    let principal: Principal = principal.parse().map_err(|e| format!("{uri:?}: {e}"))?;
    let mut scopes = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("scope", scope)) => scopes.push(scope.to_owned()),
            _ => {
                return Err(format!(
                    "{uri:?}: unknown parameter {pair:?} (only scope=…)"
                ))
            }
        }
    }
    Grant::new(principal, scopes).map_err(|e| format!("{uri:?}: {e}"))
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

#[cfg(test)]
mod tests {
    use super::*;

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
            let e = grant_of_uri(uri).unwrap_err();
            assert!(e.contains(says), "{uri}: {e}");
        }
    }
}
