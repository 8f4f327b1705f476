//! agentledger: an event-sourced ledger engine for multi-agent (LLM agent)
//! systems. Every context exchange, artifact publish and read, and run
//! open/close is an append-only record in a log; projections of the log
//! (views, in sled) say where each run stands in its chain, withhold events
//! past the hop limit, and warn about loops when an agent version is
//! published.
//!
//! Functional core, imperative shell. The core decides and evolves without
//! IO; the shell reads what a decision needs, appends what it decided, and
//! projects the log into views.
//!
//! The core:
//! - [`model`]: the vocabulary — records ([`model::LedgerEvent`]), a run's
//!   domain state ([`model::Run`], folded by `Run::evolve`), ids, scopes,
//!   content refs ([`model::cas`]).
//! - [`rules`]: the decisions over [`rules::decide::LedgerRead`] — opening,
//!   reading, closing, publishing ([`rules::decide`]), chain positions and
//!   what a close publishes ([`rules::chain`]), which listeners an event
//!   opens ([`rules::dispatch`]), reads by contract ([`rules::artifacts`]),
//!   labels ([`rules::labels`]).
//! - [`context`]: the IETF draft's TaskContext/AgentContext and their rules
//!   (R11–R15), decide and evolve.
//! - [`loops`]: the publish-time loop search (R10).
//! - [`codes`]: every refusal and failure code; [`model::limits`]: every limit;
//!   [`error`]: the typed errors.
//!
//! The shell:
//! - [`codec`]: the wire format of records.
//! - [`log`]: the log trait, the embedded log and Kafka.
//! - [`views`] (sled) and [`projector`] (folding the log into views;
//!   [`projector::driver`] reads the log to do it).
//! - [`audit`]: hash chain, checkpoints and their attestation, `verify`,
//!   exports.
//! - [`content`]: content by digest, swept by reference expiry, and the
//!   same content shared through the log (Kafka).
//! - [`engine`]: one operation at a time — decide, commit
//!   ([`engine`]'s `commit`: encode → append → project its own records),
//!   dispatch (R7), the data dir and its trusted views.
//! - [`encode`]: percent-encoded path segments and XML text, shared by
//!   the outputs.
//! - [`apply`]: the JSON-lines interface; [`queries`]: the read-only
//!   questions, and trails for people and machines; [`picture`]: a chain
//!   drawn as DOT or SVG; [`engine::published`]: the CloudEvents downstream
//!   consumers read; [`trace`]: chains as OpenTelemetry GenAI spans;
//!   [`rebuild`]: fresh views from the log; [`engine::synthetic`]:
//!   generated ledgers for benchmarks.

pub mod apply;
pub mod audit;
pub mod auth;
pub mod codec;
pub mod codes;
pub mod content;
pub mod context;
pub mod encode;
pub mod engine;
pub mod erasure;
pub mod error;
pub mod log;
pub mod loops;
pub mod mcp;
pub mod model;
pub mod picture;
pub mod projector;
pub mod protocol;
pub mod queries;
pub mod rebuild;
pub mod rules;
pub mod server;
pub mod trace;
pub mod views;

pub use codes::Refusal;
pub use engine::{Engine, EngineOptions};
pub use error::LedgerError;
