//! Audit (R16): the log is never rewritten, and anyone can check that.
//! Each ledger and registry partition is folded into a sha256 hash chain
//! whose links are its checkpoints: one attests, for a range of offsets,
//! every record's digest and the chain head at the range's end. `verify` recomputes all of it from the log
//! and names the first record that does not match; an export carries its
//! records' bytes and the checkpoints covering them, so it can be verified
//! with nothing but the file.
//!
//! What this proves: the records are the ones the checkpoints attested, in
//! the attested order, none dropped, swapped, altered or cut. Against
//! whoever can rewrite both the log and the checkpoints, a checkpoint key
//! signs each partition's RFC 9162 Merkle tree (`merkle`, `note`,
//! `signed`); the tree is kept as tiles (`tiles`) for fast proofs, and
//! exports carry inclusion proofs (`export`, `export_proof`). The
//! `published` topic is derived, not attested: `published_check` holds it
//! against the ledger's records.

pub mod attest;
pub mod checkpoint;
pub mod digests;
pub mod export;
pub mod export_proof;
pub mod findings;
pub mod hashchain;
pub mod log_verify;
pub mod merkle;
pub mod note;
pub mod published_check;
pub mod recent;
pub mod signed;
pub mod since;
pub mod tiles;
pub mod verify;
pub mod witness;

pub use checkpoint::{Checkpoint, CHECKPOINT_INTERVAL};
pub use findings::{Mismatch, VerifyReport};
pub use hashchain::{digest_by, link_head, record_digest, DigestKind, Link, GENESIS};
