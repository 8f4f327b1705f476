//! Who a caller is once authenticated: a kind, a name where the kind has
//! one, and the scopes it was granted.

use crate::model::ids::valid_name;
use crate::model::scope::{scope_within, valid_scope};
use std::fmt;

/// The kinds of caller the ledger knows.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Principal {
    /// The local CLI on the data dir, or a token issued for it: everything.
    Operator,
    /// An agent platform: publishes agents in its scopes, opens and closes
    /// their runs, dispatches.
    Platform(String),
    /// One agent: acts only as that agent.
    Agent(String),
    /// Reads trails, chains, exports, status and verify; writes nothing.
    /// With scopes, only the runs, chains, agents and tasks within them.
    Auditor,
    /// Follows the published events, optionally limited to scopes.
    Consumer,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("principal {0:?} is not one of operator, platform:NAME, agent:NAME, auditor, consumer")]
pub struct BadPrincipal(pub String);

impl std::str::FromStr for Principal {
    type Err = BadPrincipal;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let named = |name: &str, make: fn(String) -> Principal| {
            if valid_name(name) {
                Ok(make(name.to_string()))
            } else {
                Err(BadPrincipal(s.to_string()))
            }
        };
        match s.split_once(':') {
            None => match s {
                "operator" => Ok(Principal::Operator),
                "auditor" => Ok(Principal::Auditor),
                "consumer" => Ok(Principal::Consumer),
                _ => Err(BadPrincipal(s.to_string())),
            },
            Some(("platform", name)) => named(name, Principal::Platform),
            Some(("agent", name)) => named(name, Principal::Agent),
            Some(_) => Err(BadPrincipal(s.to_string())),
        }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Operator => f.write_str("operator"),
            Principal::Platform(n) => write!(f, "platform:{n}"),
            Principal::Agent(n) => write!(f, "agent:{n}"),
            Principal::Auditor => f.write_str("auditor"),
            Principal::Consumer => f.write_str("consumer"),
        }
    }
}

/// A principal with the scopes it was granted (platforms, auditors and
/// consumers; empty for an auditor or consumer means every scope).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub principal: Principal,
    pub scopes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadGrant {
    #[error(transparent)]
    Principal(#[from] BadPrincipal),
    #[error("scope {0:?} is not a valid scope")]
    Scope(String),
    #[error("a platform needs at least one scope (--scope)")]
    PlatformWithoutScope,
    #[error("{0} takes no scopes")]
    ScopesNotTaken(String),
}

impl Grant {
    pub fn new(principal: Principal, scopes: Vec<String>) -> Result<Self, BadGrant> {
        if let Some(bad) = scopes.iter().find(|s| !valid_scope(s)) {
            return Err(BadGrant::Scope(bad.clone()));
        }
        match (&principal, scopes.is_empty()) {
            (Principal::Platform(_), true) => return Err(BadGrant::PlatformWithoutScope),
            (Principal::Operator | Principal::Agent(_), false) => {
                return Err(BadGrant::ScopesNotTaken(principal.to_string()))
            }
            _ => {}
        }
        Ok(Grant { principal, scopes })
    }

    pub fn operator() -> Self {
        Grant {
            principal: Principal::Operator,
            scopes: Vec::new(),
        }
    }

    /// Whether `scope` lies within one of the granted scopes.
    pub fn covers(&self, scope: &str) -> bool {
        self.scopes.iter().any(|g| scope_within(scope, g))
    }
}

/// Why a request is not authenticated (HTTP 401). Never names the
/// credential presented.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unauthenticated(pub String);

impl From<Unauthenticated> for crate::codes::Refusal {
    fn from(u: Unauthenticated) -> Self {
        crate::codes::Refusal::new(crate::codes::Code::Unauthenticated, u.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_read_back_as_written() {
        for s in [
            "operator",
            "platform:acme",
            "agent:hotel",
            "auditor",
            "consumer",
        ] {
            assert_eq!(s.parse::<Principal>().unwrap().to_string(), s);
        }
        for bad in ["", "root", "agent:", "agent:a b", "platform", "user:x"] {
            assert!(bad.parse::<Principal>().is_err(), "{bad}");
        }
    }

    #[test]
    fn grants_take_scopes_only_where_they_mean_something() {
        let p = |s: &str| s.parse::<Principal>().unwrap();
        assert!(Grant::new(p("platform:acme"), vec!["acme/travel".into()]).is_ok());
        assert_eq!(
            Grant::new(p("platform:acme"), vec![]),
            Err(BadGrant::PlatformWithoutScope)
        );
        assert!(matches!(
            Grant::new(p("agent:hotel"), vec!["acme".into()]),
            Err(BadGrant::ScopesNotTaken(_))
        ));
        assert!(matches!(
            Grant::new(p("consumer"), vec!["../x".into()]),
            Err(BadGrant::Scope(_))
        ));
        let g = Grant::new(p("platform:acme"), vec!["acme/travel".into()]).unwrap();
        assert!(g.covers("acme/travel/hotels"));
        assert!(!g.covers("acme/travelx"));
        assert!(!g.covers("acme"));
    }
}
