//! The topics of a ledger's log, by role.

use std::fmt;

/// The topics of a ledger. Names on disk / on the broker share a prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Topic {
    /// Ledger events, key = chain root: a chain lives in one partition.
    Ledger,
    /// Agent versions, one partition.
    Registry,
    /// JSON of the agent events actually published, for downstream consumers.
    Published,
    /// Hash-chain checkpoints of the other topics.
    Checkpoints,
    /// Content shared between instances on a distributed backend (see
    /// `crate::content::share`): chunks and manifests keyed by digest, a
    /// compacted topic. Not one of the ledger's topics ([`Topic::ALL`]):
    /// not chained, not checkpointed, not projected; a backend without it
    /// (the embedded log) has no partitions of it.
    Blobs,
    /// Task keys shared between instances, wrapped with the fleet's seal
    /// key (see `crate::erasure::shared`): compacted, one partition, a
    /// tombstone per key erased. Not one of the ledger's topics either.
    Keys,
}

impl Topic {
    pub const ALL: [Topic; 4] = [
        Topic::Ledger,
        Topic::Registry,
        Topic::Published,
        Topic::Checkpoints,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Topic::Ledger => "ledger",
            Topic::Registry => "registry",
            Topic::Published => "published",
            Topic::Checkpoints => "checkpoints",
            Topic::Blobs => "blobs",
            Topic::Keys => "keys",
        }
    }

    pub fn index(self) -> u8 {
        match self {
            Topic::Ledger => 0,
            Topic::Registry => 1,
            Topic::Published => 2,
            Topic::Checkpoints => 3,
            Topic::Blobs => 4,
            Topic::Keys => 5,
        }
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
