//! agentledger: an event-sourced ledger engine for multi-agent (LLM agent)
//! systems. Every context exchange, artifact publish and read, and run
//! open/close is an append-only record in a log; projections of the log
//! (views, in sled) say where each run stands in its chain, withhold events
//! past the hop limit, and warn about loops when an agent version is
//! published.
//!
//! Layout: [`model`] (vocabulary and events), [`codec`] (wire format),
//! [`log`] (the log trait and its backends), [`views`] and [`projector`]
//! (projections), [`rules`] (the chain rules as pure functions), [`loops`]
//! (publish-time loop search), [`engine`] (the shell that ties them), and
//! [`apply`] (the JSON-lines interface).

pub mod apply;
pub mod audit;
pub mod codec;
pub mod codes;
pub mod content_store;
pub mod context;
pub mod engine;
pub mod error;
pub mod limits;
pub mod log;
pub mod loops;
pub mod model;
pub mod projector;
pub mod rebuild;
pub mod report;
pub mod rules;
pub mod synthetic;
pub mod views;

pub use engine::{Engine, EngineOptions};
pub use error::{LedgerError, Refusal};
