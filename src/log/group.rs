//! Sharing the work of the ledger among engine instances: each ledger
//! partition (whole chains) is dispatched by exactly one instance at a time.
//! On Kafka the instances form a consumer group and the group coordinator
//! hands the partitions out, moving them when an instance joins, leaves or
//! dies; the embedded log has one process per data directory, which owns
//! everything. Each instance also announces who it is, where it answers
//! and what it owns, so that any of them can say who owns what.

use super::LogError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// One instance of the group, as it last announced itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// The instance's name (its writer name on the records it writes).
    pub id: String,
    /// Where it answers requests (`serve --advertise`), when it does.
    pub url: Option<String>,
    /// The ledger partitions it owns.
    pub owned: BTreeSet<u32>,
    /// How many times its assignment has changed since it started.
    pub epoch: u64,
    /// When it announced this, in ms since the Unix epoch.
    pub at_ms: u64,
}

/// This instance's place in the group serving one log.
pub trait Membership: Send {
    /// Serve the group protocol and say which ledger partitions this
    /// instance owns now. Call it between dispatch sweeps, and often: on
    /// Kafka an instance that stops calling it is taken out of the group
    /// and its partitions go to the others.
    fn owned(&mut self) -> Result<BTreeSet<u32>, LogError>;

    /// Tell the other instances who this one is and what it owns (again
    /// every few seconds: an announcement's age says whether its
    /// instance is still there).
    fn announce(&mut self, me: &Member) -> Result<(), LogError>;

    /// Every instance as last announced, this one included, by id.
    fn members(&mut self) -> Result<Vec<Member>, LogError>;

    /// A short description for status output.
    fn describe(&self) -> String;

    /// Whether other instances may share the partitions (a group on
    /// Kafka), so that each projects only its own.
    fn shared(&self) -> bool {
        false
    }
}

/// The only instance: every partition.
pub struct Alone {
    pub partitions: u32,
    pub me: Option<Member>,
}

impl Membership for Alone {
    fn owned(&mut self) -> Result<BTreeSet<u32>, LogError> {
        Ok((0..self.partitions).collect())
    }

    fn announce(&mut self, me: &Member) -> Result<(), LogError> {
        self.me = Some(me.clone());
        Ok(())
    }

    fn members(&mut self) -> Result<Vec<Member>, LogError> {
        Ok(self.me.iter().cloned().collect())
    }

    fn describe(&self) -> String {
        format!("alone: all {} ledger partitions", self.partitions)
    }
}
