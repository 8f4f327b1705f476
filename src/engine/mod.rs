//! The engine: the imperative shell around the rules, one operation at a
//! time. Each reads what its decision needs from the views, asks the pure
//! rule (`rules::decide`, `context::rules`), and commits what it decided:
//! encode → append durably → project its own records (`commit`). Refusals
//! the trail must show are recorded before they are answered. Beside it:
//! the data dir and views it can trust (`open`), options (`options`), the
//! dispatcher (R7, `dispatcher`), and one file per family of operations
//! (`runs`, `registry`, `context`).

mod commit;
mod context;
mod dispatcher;
mod open;
mod options;
mod pipeline;
mod placement;
pub mod published;
mod rebuilding;
mod refusals;
mod registry;
mod runs;
mod sealing;
pub mod synthetic;
mod tokens;
pub mod trail;

pub use commit::GroupEnd;
pub use context::{SendAnswer, TaskStats};
pub use dispatcher::{DispatchAnswer, OpenedListener, RefusedListener, WithheldRun};
pub(crate) use open::guarded;
pub use open::DataDir;
pub use options::{system_clock, Clock, EngineOptions, DEFAULT_CONTEXT_TTL_MS};
pub use placement::{whose, Owner, Placement, Referral, Whose};
pub use registry::{PublishAgent, PublishAnswer};
pub use runs::{CloseAnswer, CloseRun, OpenAnswer, ReadAnswer};

use crate::audit::checkpoint::CHAINED_TOPICS;
use crate::content::store::ContentStore;
use crate::error::Result;
use crate::log::embedded::EmbeddedLog;
use crate::log::Log;
use crate::loops::AgentIndex;
use crate::model::Topic;
use crate::views::Views;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use crate::rules::decide::Decided;

pub struct Engine {
    log: Arc<dyn Log>,
    views: Views,
    store: ContentStore,
    opts: EngineOptions,
    /// The data dir's task keys (none for an engine assembled from parts:
    /// it seals nothing).
    keys: Option<Arc<crate::erasure::KeyStore>>,
    /// In-memory index of current agent versions for the loop search, and
    /// the registry offset it is up to date with; built from the views on
    /// first use (see `registry::agent_index`).
    agent_index: Option<(AgentIndex, u64)>,
    /// When the views last caught up with the whole log.
    caught_up_at: Option<std::time::Instant>,
    /// When erasures of shared task keys were last looked for.
    keys_synced_at: Option<std::time::Instant>,
    /// Checkpointing state: digests of our own records, marks read.
    attestation: crate::audit::attest::Attestation,
    /// Follow-ups of durable operations that failed (see `commit`).
    follow_ups: Vec<String>,
    /// Inside a commit group (see `Engine::begin_group`).
    grouping: bool,
    /// The group's appends in flight, on a log that pipelines groups.
    pipeline: Option<pipeline::Pipeline>,
    /// A sealed group whose sync has not been waited for (see `sealing`).
    sealed: Option<sealing::Sealed>,
    /// The thread that syncs groups sealed in the background.
    syncer: Option<sealing::Syncer>,
    /// Whose requests the engine is carrying out: recorded on every record
    /// it writes (`operator` unless told otherwise).
    principal: String,
    /// The span of the request being carried out, when its records are to
    /// name it (see [`Engine::within_span`]).
    span: Option<crate::codec::SpanRef>,
    /// Runs this engine has closed: a serve loop dispatches at once when
    /// it grows, instead of at its next poll.
    closed: u64,
    /// The data dir, when the engine opened one (a rebuild beside the
    /// live views needs it).
    data: Option<DataDir>,
    /// Fresh views being built beside the live ones, and how the last
    /// rebuild ended (see `rebuilding`).
    rebuild: rebuilding::Rebuilds,
    /// Refusals of principals that write nothing, kept at most once a
    /// minute each (see `refusals`).
    refusals: refusals::RefusalLimit,
    /// Who decides which ledger partition, in a cluster (see `placement`).
    placement: Option<Placement>,
    /// Whether requests another instance decides are referred there.
    referring: bool,
    /// The ledger partitions projected into the views (`None`: every one;
    /// see [`EngineOptions::scoped`]).
    scope: Option<std::collections::BTreeSet<u32>>,
    /// Where runs and tasks this instance does not project were found
    /// (see `placement`): bounded, a run's partition never changes.
    located: std::collections::HashMap<String, u32>,
    /// Since when each ledger partition whose views are held here has not
    /// been owned (see `placement`), and when that was last looked at.
    unowned_since: std::collections::BTreeMap<u32, std::time::Instant>,
    unowned_checked: Option<std::time::Instant>,
    _lock: Option<File>,
}

impl Engine {
    /// Open the engine on the embedded log in `data`, projecting whatever
    /// the views have not seen yet.
    pub fn open_embedded(data: impl AsRef<Path>, opts: EngineOptions) -> Result<Self> {
        let dd = DataDir::new(data);
        let lock = dd.lock()?;
        let log = Arc::new(EmbeddedLog::open(dd.log(), &opts.embedded)?);
        Self::open_on(dd, lock, log, opts)
    }

    /// Open the engine on an existing embedded log for commands that only
    /// read the ledger (auditors, status): the log is opened read-only, so
    /// a torn tail is reported and left in place, and any operation that
    /// would append is refused by the log. The views may still be projected.
    pub fn open_embedded_read_only(data: impl AsRef<Path>, opts: EngineOptions) -> Result<Self> {
        let dd = DataDir::new(data);
        let log = Arc::new(EmbeddedLog::open_read_only(dd.log(), &opts.embedded)?);
        let lock = dd.lock()?;
        Self::open_on(dd, lock, log, opts)
    }

    /// The data dir's views and content store around a log, caught up.
    fn open_on(dd: DataDir, lock: File, log: Arc<dyn Log>, opts: EngineOptions) -> Result<Self> {
        let shared_keys = opts.seal_key.as_ref().and_then(|k| {
            crate::erasure::shared::SharedKeys::over(log.clone(), k.as_ref().clone())
        });
        let keys = Arc::new(
            crate::erasure::KeyStore::open(dd.keys())
                .map_err(crate::error::LedgerError::from)?
                .with_shared(shared_keys),
        );
        // Copies of keys erased elsewhere go before anything is opened.
        if keys.is_shared() {
            keys.sync_erasures()?;
        }
        let scope = opts.scoped.then(Default::default);
        let views = open::open_views(&dd, log.as_ref(), &keys, scope.as_ref())?;
        let share = crate::content::share::SharedContent::over(log.clone()).map(Arc::new);
        let store = ContentStore::open(dd.blobs())?.with_share(share);
        let mut engine = Self::with_parts(log, views, store, opts);
        engine.keys = Some(keys);
        engine.data = Some(dd);
        engine._lock = Some(lock);
        engine.caught_up_at = Some(std::time::Instant::now());
        Ok(engine)
    }

    /// Open the engine on Kafka: the log is the cluster's topics; the views
    /// and the content store live in `data` on this machine.
    pub fn open_kafka(
        data: impl AsRef<Path>,
        kafka: &crate::log::kafka::KafkaConfig,
        opts: EngineOptions,
    ) -> Result<Self> {
        let dd = DataDir::new(data);
        let lock = dd.lock()?;
        let log = Arc::new(crate::log::kafka::KafkaLog::connect(kafka)?);
        Self::open_on(dd, lock, log, opts)
    }

    /// Assemble an engine from parts (any log backend).
    pub fn with_parts(
        log: Arc<dyn Log>,
        views: Views,
        store: ContentStore,
        opts: EngineOptions,
    ) -> Self {
        let scope = opts.scoped.then(Default::default);
        Self {
            log,
            views,
            store,
            opts,
            keys: None,
            agent_index: None,
            caught_up_at: None,
            keys_synced_at: None,
            attestation: Default::default(),
            follow_ups: Vec::new(),
            closed: 0,
            grouping: false,
            pipeline: None,
            sealed: None,
            syncer: None,
            principal: crate::codec::V1_PRINCIPAL.to_string(),
            span: None,
            data: None,
            rebuild: Default::default(),
            refusals: Default::default(),
            placement: None,
            referring: false,
            scope,
            located: Default::default(),
            unowned_since: Default::default(),
            unowned_checked: None,
            _lock: None,
        }
    }

    pub fn views(&self) -> &Views {
        &self.views
    }

    /// The key checkpoints are signed with, if any.
    /// The ledger's name in what it publishes and exports.
    pub fn ledger_name(&self) -> &str {
        self.opts.ledger_name()
    }

    /// How many runs this engine has closed (records committed).
    pub fn closed_runs(&self) -> u64 {
        self.closed
    }

    /// This instance's name on the records it writes.
    pub fn writer(&self) -> &str {
        &self.opts.writer
    }

    pub fn signer(&self) -> Option<&crate::audit::note::SignerKey> {
        self.opts.signer.as_deref()
    }

    pub fn log(&self) -> &Arc<dyn Log> {
        &self.log
    }

    pub fn store(&self) -> &ContentStore {
        &self.store
    }

    pub fn now_ms(&self) -> u64 {
        (self.opts.clock)()
    }

    /// A run's trail (or its chain's), records read back from the log.
    pub fn trail(&self, run: &str, whole_chain: bool) -> Result<Vec<crate::views::TrailStep>> {
        Ok(
            trail::collect_trail(&self.views, self.log.as_ref(), run, whole_chain)?
                .into_iter()
                .map(|(_, s)| s)
                .collect(),
        )
    }

    /// Carry out the following operations for `principal`: every record
    /// they write names it.
    pub fn act_as(&mut self, principal: &crate::auth::Principal) {
        self.principal = principal.to_string();
    }

    /// Carry out the following operations within `span` (the span a
    /// server exported for their request): every record they write names
    /// it, so a chain's trace can link to it. `None` ends it.
    pub fn within_span(&mut self, span: Option<crate::codec::SpanRef>) {
        self.span = span;
    }

    /// Whose requests the engine is carrying out.
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// Remove from the content store the bytes that no live reference in
    /// the ledger holds (every artifact is live; a task's blob grant until
    /// its TTL passes), once they are older than `grace`. Catches up first,
    /// so references another writer recorded count.
    pub fn sweep_content(&mut self, grace: Duration) -> Result<crate::content::store::SweepReport> {
        self.catch_up(&|_| {})?;
        // Context past its time to live goes with its key (see `erasure`).
        let erased = self.erase_expired_tasks()?;
        if erased > 0 {
            tracing::info!(
                erased,
                "erased the context of tasks past their time to live"
            );
        }
        let now = self.now_ms();
        let views = &self.views;
        self.store.sweep(
            &mut |sha| Ok(views.content_deadline(sha)?.is_some_and(|d| d > now)),
            grace,
        )
    }

    /// Make sure view writes reach disk (the CLI calls it before exiting).
    pub fn flush(&self) -> Result<()> {
        self.views.flush()?;
        Ok(())
    }

    /// Write checkpoints (R16): every full interval of records not yet
    /// covered, and with `force` also the partial tail, so that everything
    /// in the log is attested. Returns what was written.
    pub fn checkpoint(&mut self, force: bool) -> Result<Vec<crate::audit::Checkpoint>> {
        // Ledger partitions projected here only: the others' views, and
        // so their checkpoints, are their owners'.
        let scope = self.scope.as_ref();
        let all: Vec<(Topic, u32)> = CHAINED_TOPICS
            .into_iter()
            .flat_map(|t| (0..self.log.partitions(t)).map(move |p| (t, p)))
            .filter(|(t, p)| *t != Topic::Ledger || scope.is_none_or(|s| s.contains(p)))
            .collect();
        self.checkpoint_partitions(force, &all)
    }

    /// The checkpoints due on `partitions` (see [`Attestation::checkpoint`]).
    fn checkpoint_partitions(
        &mut self,
        force: bool,
        partitions: &[(Topic, u32)],
    ) -> Result<Vec<crate::audit::Checkpoint>> {
        let now = self.now_ms();
        self.attestation.checkpoint(
            self.log.as_ref(),
            &self.views,
            partitions,
            force,
            &crate::audit::attest::Author {
                now_ms: now,
                writer: &self.opts.writer,
                signer: self.opts.signer.as_deref(),
            },
        )
    }

    /// Project every record the views have not applied yet. Registry first,
    /// so a run's version is always known by the time its records arrive.
    pub fn catch_up(&mut self, progress: &dyn Fn(u64)) -> Result<u64> {
        self.catch_up_since(progress, false)
    }

    /// [`Engine::catch_up`] even inside a pipelined group that caught up
    /// since it began: for a run or task not found, which another writer
    /// may have recorded since (what is in flight is settled first).
    pub(crate) fn catch_up_now(&mut self) -> Result<u64> {
        self.catch_up_since(&|_| {}, true)
    }

    fn catch_up_since(&mut self, progress: &dyn Fn(u64), now: bool) -> Result<u64> {
        // Inside a pipelined group the views hold records not yet
        // acknowledged: caught up since the group began is caught up
        // enough; otherwise settle what is in flight first, so the log is
        // read only where the views are known to agree with it.
        let pipelined = match self.caught_up_in_pipeline() {
            Some(true) if !now => return Ok(0),
            Some(_) => {
                self.settle_in_flight();
                self.views.release_held();
                true
            }
            None => false,
        };
        let started = std::time::Instant::now();
        let applied = crate::projector::project_all(
            self.log.as_ref(),
            &self.views,
            self.scope.as_ref(),
            progress,
        );
        if pipelined {
            self.views.hold();
        }
        let applied = applied?;
        self.caught_up_at = Some(started);
        self.sync_erased_keys();
        Ok(applied)
    }

    /// Drop this instance's copies of task keys another instance erased
    /// (keys shared on Kafka): at most once a second, as part of catching
    /// up, so an erasure anywhere takes effect everywhere within about a
    /// second of any activity.
    fn sync_erased_keys(&mut self) {
        let Some(keys) = self.keys.as_ref().filter(|k| k.is_shared()) else {
            return;
        };
        if self
            .keys_synced_at
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.keys_synced_at = Some(std::time::Instant::now());
        match keys.sync_erasures() {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                dropped = n,
                "dropped the copies of task keys erased elsewhere"
            ),
            Err(e) => tracing::warn!("following the erasures of shared task keys: {e}"),
        }
    }

    /// Catch up unless the views are younger than `max_staleness`; says
    /// whether it did.
    pub fn refresh(&mut self) -> Result<bool> {
        let young = self
            .caught_up_at
            .is_some_and(|t| t.elapsed() < self.opts.max_staleness);
        if young {
            return Ok(false);
        }
        self.catch_up(&|_| {})?;
        Ok(true)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // sled batches become durable on flush; a crash before it only makes
        // the projector redo them from the offsets written with them.
        if let Err(e) = self.views.flush() {
            tracing::warn!("flushing views on close: {e}");
        }
    }
}
