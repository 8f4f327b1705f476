//! Erasure without breaking verification (seed 000 §6: offloaded context
//! SHOULD expire; sensitive context protected at rest). Every context
//! record of a task — its TaskContext, the AgentContexts sent and
//! returned, the reasons given — is sealed (ChaCha20-Poly1305) with a key
//! of that task's own before it reaches the log; the views keep the task's
//! state sealed with the same key. The key lives beside the content store
//! (`<data>/keys`), never in the log or the views, until the task's TTL
//! runs out or `forget_task` deletes it. Then the ciphertext is all that
//! is left anywhere under the data dir: Merkle leaves and checkpoint
//! digests are over the stored (sealed) bytes, so every proof and `verify`
//! still pass, and the trail says "content erased at TIME".
//!
//! * [`seal`] — the AEAD, its associated data, and the sealed record body;
//! * [`keys`] — the task keys on disk, with their expiry;
//! * [`shared`] — the same keys shared between instances on Kafka,
//!   wrapped with the fleet's seal key.

pub mod keys;
pub mod seal;
pub mod shared;

pub use keys::KeyStore;
pub use seal::{KeyStatus, NoKeys, SealError, TaskKey, TaskKeys};
