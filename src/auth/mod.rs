//! Identity and authorization: who a caller is ([`principal`]) and what it
//! may do ([`policy`], a pure function of the grant, the request and facts
//! from the views, gathered by [`facts`]). Credentials and their checking
//! live at the network edge.

pub mod assertion;
pub mod client_cert;
pub mod facts;
pub mod jwt;
pub mod policy;
pub mod principal;
pub mod tokens;

pub use facts::gather;
pub use policy::{authorize, Action, Facts, Forbidden, Subject};
pub use principal::Unauthenticated;
pub use principal::{BadGrant, BadPrincipal, Grant, Principal};
