//! The ledger's vocabulary: scopes, ids, and the events that make up the log.

pub mod cas;
pub mod event;
pub mod ids;
pub mod run;
pub mod scope;

pub use event::*;
pub use run::{label_union, PublishedEvent, Run};
