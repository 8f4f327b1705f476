//! Sharing the work of the ledger among engine instances: each ledger
//! partition (whole chains) is dispatched by exactly one instance at a time.
//! On Kafka the instances form a consumer group and the group coordinator
//! hands the partitions out, moving them when an instance joins, leaves or
//! dies; the embedded log has one process per data directory, which owns
//! everything.

use super::LogError;
use std::collections::BTreeSet;

/// This instance's place in the group serving one log.
pub trait Membership: Send {
    /// Serve the group protocol and say which ledger partitions this
    /// instance owns now. Call it between dispatch sweeps, and often: on
    /// Kafka an instance that stops calling it is taken out of the group
    /// and its partitions go to the others.
    fn owned(&mut self) -> Result<BTreeSet<u32>, LogError>;

    /// A short description for status output.
    fn describe(&self) -> String;
}

/// The only instance: every partition.
pub struct Alone {
    pub partitions: u32,
}

impl Membership for Alone {
    fn owned(&mut self) -> Result<BTreeSet<u32>, LogError> {
        Ok((0..self.partitions).collect())
    }

    fn describe(&self) -> String {
        format!("alone: all {} ledger partitions", self.partitions)
    }
}
