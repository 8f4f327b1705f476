//! ChaCha20-Poly1305 with a task's key. The associated data binds a sealed
//! body to where it stands (task, master run, kind of record), so a sealed
//! body moved to another record does not open.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use std::fmt;

/// A task's 256-bit key. Never logged, never in the log or the views.
#[derive(Clone, PartialEq, Eq)]
pub struct TaskKey(pub(crate) [u8; 32]);

impl fmt::Debug for TaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TaskKey(***)")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("no randomness for a key or nonce")]
    Random,
    #[error("the sealed bytes do not open with the task's key (damaged, moved, or another key)")]
    Opens,
}

impl TaskKey {
    /// A new key from the system's randomness.
    pub fn generate() -> Result<Self, SealError> {
        let mut k = [0u8; 32];
        getrandom::fill(&mut k).map_err(|_| SealError::Random)?;
        Ok(TaskKey(k))
    }

    /// A key as a file holds it: 64 hex digits (the fleet's seal key,
    /// `<data>/seal.key`).
    pub fn from_text(text: &str) -> Option<Self> {
        let bytes: [u8; 32] = hex::decode(text.trim()).ok()?.try_into().ok()?;
        Some(TaskKey(bytes))
    }

    /// The key as [`Self::from_text`] reads it.
    pub fn to_text(&self) -> String {
        hex::encode(self.0)
    }

    /// A short name for the key that gives nothing of it away, so operators
    /// can see that every instance holds the same one.
    pub fn fingerprint(&self) -> String {
        let d = <sha2::Sha256 as sha2::Digest>::digest(
            [b"agentledger seal key ".as_slice(), &self.0].concat(),
        );
        hex::encode(&d[..8])
    }

    fn aead(&self) -> Result<LessSafeKey, SealError> {
        let key = UnboundKey::new(&CHACHA20_POLY1305, &self.0).map_err(|_| SealError::Opens)?;
        Ok(LessSafeKey::new(key))
    }

    /// `nonce ‖ ciphertext ‖ tag` of `plain`, bound to `aad`. Nonces are
    /// random: 96 bits leave collisions out of reach for the records one
    /// task makes.
    pub fn seal(&self, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|_| SealError::Random)?;
        self.seal_with(nonce, aad, plain)
    }

    /// Like [`Self::seal`], with the nonce derived from the key, `aad` and
    /// `plain` (HMAC-SHA-256, as SIV modes do): the same state seals to the
    /// same bytes, so views rebuilt from the log compare equal, and a nonce
    /// repeats only with its plaintext.
    pub fn seal_deterministic(&self, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>, SealError> {
        let mac = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &self.0);
        let mut ctx = ring::hmac::Context::with_key(&mac);
        ctx.update(&(aad.len() as u64).to_be_bytes());
        ctx.update(aad);
        ctx.update(plain);
        let tag = ctx.sign();
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&tag.as_ref()[..NONCE_LEN]);
        self.seal_with(nonce, aad, plain)
    }

    fn seal_with(
        &self,
        nonce: [u8; NONCE_LEN],
        aad: &[u8],
        plain: &[u8],
    ) -> Result<Vec<u8>, SealError> {
        let mut out = Vec::with_capacity(NONCE_LEN + plain.len() + 16);
        out.extend_from_slice(&nonce);
        let mut body = plain.to_vec();
        self.aead()?
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut body,
            )
            .map_err(|_| SealError::Opens)?;
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// The plain bytes of `sealed` (from [`Self::seal`] with the same `aad`).
    pub fn open(&self, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        if sealed.len() < NONCE_LEN + 16 {
            return Err(SealError::Opens);
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Opens)?;
        let mut body = body.to_vec();
        let plain = self
            .aead()?
            .open_in_place(nonce, Aad::from(aad), &mut body)
            .map_err(|_| SealError::Opens)?;
        Ok(plain.to_vec())
    }
}

/// The associated data of a task's sealed bytes of one kind.
pub fn aad(what: &str, task: &str, master_run: &str) -> Vec<u8> {
    let mut a = b"agentledger/sealed/v1\0".to_vec();
    for part in [what, task, master_run] {
        a.extend_from_slice(&(part.len() as u32).to_be_bytes());
        a.extend_from_slice(part.as_bytes());
    }
    a
}

/// A task's context record sealed with its key.
pub fn seal_record(
    key: &TaskKey,
    record: &crate::model::ContextRecord,
) -> Result<crate::model::SealedContext, SealError> {
    let task = record.event.task();
    let kind = record.event.kind();
    let plain = crate::codec::to_bytes(record).map_err(|_| SealError::Opens)?;
    let hold = match &record.event {
        crate::context::ContextEvent::BlobPut {
            uri, expires_at, ..
        } => Some((uri.clone(), *expires_at)),
        _ => None,
    };
    Ok(crate::model::SealedContext {
        master_run: record.master_run.clone(),
        task: task.to_owned(),
        kind: kind.to_owned(),
        hold,
        sealed: key.seal(&aad(kind, task, &record.master_run), &plain)?,
    })
}

/// The record sealed in `s`, if `key` opens it and it is what its clear
/// fields say.
pub fn open_record(
    key: &TaskKey,
    s: &crate::model::SealedContext,
) -> Option<crate::model::ContextRecord> {
    let plain = key
        .open(&aad(&s.kind, &s.task, &s.master_run), &s.sealed)
        .ok()?;
    let record: crate::model::ContextRecord = crate::codec::from_bytes(&plain).ok()?;
    (record.master_run == s.master_run
        && record.event.task() == s.task
        && record.event.kind() == s.kind)
        .then_some(record)
}

/// Where the keys of tasks are looked up (the projector and the trail
/// open sealed records with them).
pub trait TaskKeys: Sync {
    /// The task's key, if it has not been erased.
    fn key(&self, task: &str) -> Option<TaskKey>;

    /// Whether the task's key is here, gone, or here but unreadable: what
    /// tells a record that was erased from one that is damaged.
    fn status(&self, task: &str) -> KeyStatus {
        match self.key(task) {
            Some(_) => KeyStatus::Held,
            None => KeyStatus::Missing,
        }
    }
}

/// Where a task's key stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyStatus {
    Held,
    Missing,
    /// Its file is there but cannot be read as this task's key.
    Damaged,
}

/// No keys at all: everything sealed reads as erased.
pub struct NoKeys;

impl TaskKeys for NoKeys {
    fn key(&self, _task: &str) -> Option<TaskKey> {
        None
    }
}

/// `event` with a sealed context record opened where its key is held
/// (left sealed where it is not: erased).
pub fn open_event(
    keys: &dyn TaskKeys,
    event: crate::model::LedgerEvent,
) -> crate::model::LedgerEvent {
    use crate::model::LedgerEvent;
    match event {
        LedgerEvent::SealedContext(s) => {
            match keys.key(&s.task).and_then(|k| open_record(&k, &s)) {
                Some(record) => LedgerEvent::Context(Box::new(record)),
                None => LedgerEvent::SealedContext(s),
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_bytes_open_only_with_their_key_and_place() {
        let k = TaskKey::generate().unwrap();
        let a = aad("task_opened", "t1", "m1");
        let s = k.seal(&a, b"UserQuery: book me a flight").unwrap();
        assert!(!s.windows(9).any(|w| w == b"UserQuery"));
        assert_eq!(k.open(&a, &s).unwrap(), b"UserQuery: book me a flight");
        // Two seals of the same bytes differ (fresh nonce).
        assert_ne!(k.seal(&a, b"x").unwrap(), k.seal(&a, b"x").unwrap());
        let other = TaskKey::generate().unwrap();
        assert_eq!(other.open(&a, &s), Err(SealError::Opens));
        assert_eq!(
            k.open(&aad("task_opened", "t2", "m1"), &s),
            Err(SealError::Opens)
        );
        let mut bad = s.clone();
        bad[20] ^= 1;
        assert_eq!(k.open(&a, &bad), Err(SealError::Opens));
        assert_eq!(k.open(&a, &s[..10]), Err(SealError::Opens));
        assert_eq!(format!("{k:?}"), "TaskKey(***)");
        // Deterministic sealing: same bytes for the same state, and it opens.
        let d1 = k.seal_deterministic(&a, b"state").unwrap();
        assert_eq!(d1, k.seal_deterministic(&a, b"state").unwrap());
        assert_ne!(d1, k.seal_deterministic(&a, b"state2").unwrap());
        assert_ne!(d1, other.seal_deterministic(&a, b"state").unwrap());
        assert_eq!(k.open(&a, &d1).unwrap(), b"state");
    }
}
