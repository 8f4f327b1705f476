//! How an engine instance is set up: who it writes as, its clock, the loop
//! search's bounds, the embedded log's layout, and how stale its views may
//! be when it decides.

use crate::log::embedded::EmbeddedConfig;
use crate::loops::LoopBounds;
use std::sync::Arc;
use std::time::Duration;

/// Milliseconds since the Unix epoch.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    })
}

/// Options of an engine instance.
#[derive(Clone)]
pub struct EngineOptions {
    pub writer: String,
    pub clock: Clock,
    pub loop_bounds: LoopBounds,
    pub embedded: EmbeddedConfig,
    /// How old the views may be when an operation is decided. Zero (the
    /// default) catches up with the log before every operation; on Kafka
    /// that is a round trip to the broker, so a small bound saves it on
    /// back-to-back operations. Records another writer appended meanwhile
    /// are never lost: a commit that finds them projects them first, and an
    /// operation that lost a race for the same step is answered `conflict`.
    pub max_staleness: Duration,
    /// Signs each checkpoint's Merkle root (C2SP signed note) when set.
    pub signer: Option<std::sync::Arc<crate::audit::note::SignerKey>>,
    /// Seal each new task's context records with a key of its own (see
    /// `crate::erasure`). Keys live in the data dir of the instance that
    /// opened the task; with [`EngineOptions::seal_key`] on Kafka, every
    /// instance shares them.
    pub seal_context: bool,
    /// The fleet's seal key (`<data>/seal.key`): on a log that keeps a
    /// `keys` topic (Kafka), task keys are shared wrapped with it, so
    /// context sealed by one instance opens on every instance holding it.
    pub seal_key: Option<std::sync::Arc<crate::erasure::TaskKey>>,
    /// How long a task's key (and so its context) lives, in milliseconds.
    pub context_ttl_ms: u64,
    /// The ledger's name in what it publishes (CloudEvents `source`:
    /// `agentledger/<ledger>/<agent>`). `None`: the signing key's name (it
    /// names the ledger in checkpoint origins too), else `local`.
    pub ledger: Option<String>,
    /// Project only the ledger partitions this instance is told it owns
    /// ([`crate::Engine::scope`]; none until told), as a `serve` instance
    /// in a group does: each instance's views hold its share of the chains.
    pub scoped: bool,
    /// How long a scoped engine keeps the views of a ledger partition it
    /// does not own before dropping them (kept meanwhile, should it come
    /// back: a rolling restart hands partitions back within seconds).
    pub drop_views_after: Duration,
}

impl EngineOptions {
    /// The ledger's name (see [`EngineOptions::ledger`]).
    pub fn ledger_name(&self) -> &str {
        match (&self.ledger, &self.signer) {
            (Some(l), _) => l,
            (None, Some(k)) => k.name(),
            (None, None) => "local",
        }
    }
}

/// Default life of a task's context: 30 days.
pub const DEFAULT_CONTEXT_TTL_MS: u64 = 30 * 24 * 3600 * 1000;

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            writer: format!("agentledger-{}", env!("CARGO_PKG_VERSION")),
            clock: system_clock(),
            loop_bounds: LoopBounds::default(),
            embedded: EmbeddedConfig::default(),
            max_staleness: Duration::ZERO,
            signer: None,
            seal_context: true,
            seal_key: None,
            context_ttl_ms: DEFAULT_CONTEXT_TTL_MS,
            ledger: None,
            scoped: false,
            drop_views_after: Duration::from_secs(600),
        }
    }
}
