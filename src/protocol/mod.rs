//! The ledger's one protocol, the same on every transport: each operation
//! is a variant of [`Request`] (tagged by `op`), each answer a typed struct
//! inside the [`Reply`] envelope. `apply` (STDIO), `POST /v1/ops` and the
//! WebSocket all parse into these types and print from them;
//! `schemas/ops.json` is generated from them ([`schema::document`]).

pub mod answer;
pub mod execute;
pub mod group;
pub mod request;
pub mod schema;

pub use answer::*;
pub use execute::{answer, execute, parse_request, reply, reply_as, validate, OpError};
pub use group::{decide_group, reply_group, Answered, Decided, Group, Line};
pub use request::*;
