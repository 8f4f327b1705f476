//! Content: the bytes of artifacts and blobs, which the ledger names by
//! digest and never carries in its records.
//!
//! * [`store`] — sha256-addressed bytes on local disk, written durably;
//! * [`share`] — the same bytes shared between instances through the log's
//!   `blobs` topic, on a backend that has one (Kafka).

pub mod share;
pub mod store;
