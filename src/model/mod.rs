//! The ledger's vocabulary: scopes, ids, and the events that make up the log.

pub mod cas;
pub mod event;
pub mod ids;
pub mod limits;
pub mod run;
pub mod scope;
pub mod time;
pub mod topic;

pub use event::*;
pub use run::{label_union, PublishedEvent, Run};
pub use topic::Topic;
