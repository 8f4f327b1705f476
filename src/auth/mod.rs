//! Identity and authorization: who a caller is ([`principal`]) and what it
//! may do ([`policy`], a pure function of the grant, the request and facts
//! from the views). Credentials and their checking live at the network
//! edge; nothing here touches a store.

pub mod policy;
pub mod principal;

pub use policy::{authorize, Action, Facts, Forbidden};
pub use principal::{BadGrant, BadPrincipal, Grant, Principal};
