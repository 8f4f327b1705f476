//! Signed checkpoints: C2SP signed-note with Ed25519 and C2SP
//! tlog-checkpoint bodies. A checkpoint note reads
//!
//! ```text
//! agentledger/acme-prod/ledger/0
//! 1024
//! <base64 root hash>
//!
//! — acme-prod <base64(key id ‖ signature)>
//! ```
//!
//! The key id is the first four bytes of `SHA-256(name ‖ "\n" ‖ 0x01 ‖
//! public key)`; a verifier key is written `name+hex(key id)+base64(0x01 ‖
//! public key)`, a signer key `PRIVATE+KEY+name+hex(key id)+base64(0x01 ‖
//! seed)` (the forms the Go `note` package and its users read). Whoever
//! holds only the verifier key can check every checkpoint and forge none.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};
use sha2::{Digest, Sha256};
use std::fmt;

/// The signature algorithm byte of Ed25519 in signed-note.
const ALG_ED25519: u8 = 0x01;
/// The signature type of an Ed25519 C2SP tlog-cosignature (cosignature/v1).
const ALG_COSIGNATURE: u8 = 0x04;
const SIGNER_PREFIX: &str = "PRIVATE+KEY+";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    #[error("key name {0:?} is empty or holds '+' or white space")]
    BadName(String),
    #[error("not a signer key (PRIVATE+KEY+name+id+key)")]
    BadSignerKey,
    #[error("not a verifier key (name+id+key)")]
    BadVerifierKey,
    #[error("the key's id does not match its name and key")]
    KeyIdMismatch,
    #[error("the note is not text ending in a newline followed by a blank line and signatures")]
    Malformed,
    #[error("the note carries no signature by {0}")]
    Unsigned(String),
    #[error("the signature by {0} does not verify")]
    BadSignature(String),
    #[error("not a checkpoint: {0}")]
    BadCheckpoint(String),
    #[error("a witness key (cosignature/v1) cannot sign checkpoints, nor a checkpoint key cosign")]
    WrongKind,
}

/// What a key signs: checkpoints (the ledger's key) or cosignatures (a
/// witness's key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Checkpoint,
    Witness,
}

impl KeyKind {
    fn alg(self) -> u8 {
        match self {
            KeyKind::Checkpoint => ALG_ED25519,
            KeyKind::Witness => ALG_COSIGNATURE,
        }
    }
    fn of(alg: u8) -> Option<Self> {
        match alg {
            ALG_ED25519 => Some(KeyKind::Checkpoint),
            ALG_COSIGNATURE => Some(KeyKind::Witness),
            _ => None,
        }
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('+') && !name.chars().any(char::is_whitespace)
}

fn key_id(name: &str, kind: KeyKind, public: &[u8]) -> u32 {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update(b"\n");
    h.update([kind.alg()]);
    h.update(public);
    let d = h.finalize();
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

/// The key that signs checkpoints. Its text form is a secret.
pub struct SignerKey {
    name: String,
    kind: KeyKind,
    id: u32,
    pair: Ed25519KeyPair,
    seed: [u8; 32],
}

impl fmt::Debug for SignerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SignerKey({}+{:08x})", self.name, self.id)
    }
}

impl SignerKey {
    /// A new checkpoint key named `name` from the system's randomness.
    pub fn generate(name: &str) -> Result<Self, NoteError> {
        Self::generate_kind(name, KeyKind::Checkpoint)
    }

    /// A new key of either kind.
    pub fn generate_kind(name: &str, kind: KeyKind) -> Result<Self, NoteError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|_| NoteError::BadSignerKey)?;
        Self::from_seed(name, kind, seed)
    }

    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    fn from_seed(name: &str, kind: KeyKind, seed: [u8; 32]) -> Result<Self, NoteError> {
        if !valid_name(name) {
            return Err(NoteError::BadName(name.to_owned()));
        }
        let pair =
            Ed25519KeyPair::from_seed_unchecked(&seed).map_err(|_| NoteError::BadSignerKey)?;
        let id = key_id(name, kind, pair.public_key().as_ref());
        Ok(SignerKey {
            name: name.to_owned(),
            kind,
            id,
            pair,
            seed,
        })
    }

    /// Read `PRIVATE+KEY+name+id+base64(0x01 ‖ seed)`.
    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let rest = text
            .trim()
            .strip_prefix(SIGNER_PREFIX)
            .ok_or(NoteError::BadSignerKey)?;
        let (name, id, key) = three_parts(rest).ok_or(NoteError::BadSignerKey)?;
        let bytes = B64.decode(key).map_err(|_| NoteError::BadSignerKey)?;
        let [alg, seed @ ..] = bytes.as_slice() else {
            return Err(NoteError::BadSignerKey);
        };
        let kind = KeyKind::of(*alg).ok_or(NoteError::BadSignerKey)?;
        let seed: [u8; 32] = seed.try_into().map_err(|_| NoteError::BadSignerKey)?;
        let key = Self::from_seed(name, kind, seed)?;
        if format!("{:08x}", key.id) != id {
            return Err(NoteError::KeyIdMismatch);
        }
        Ok(key)
    }

    /// The secret text form, for the key file.
    pub fn to_text(&self) -> String {
        let mut b = vec![self.kind.alg()];
        b.extend_from_slice(&self.seed);
        format!(
            "{SIGNER_PREFIX}{}+{:08x}+{}",
            self.name,
            self.id,
            B64.encode(b)
        )
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key that checks this one's signatures.
    pub fn verifier(&self) -> VerifierKey {
        VerifierKey {
            name: self.name.clone(),
            kind: self.kind,
            id: self.id,
            public: self.pair.public_key().as_ref().to_vec(),
        }
    }

    /// `text` (which must end in a newline) as a signed note.
    pub fn sign(&self, text: &str) -> Result<String, NoteError> {
        if !text.ends_with('\n') {
            return Err(NoteError::Malformed);
        }
        if self.kind != KeyKind::Checkpoint {
            return Err(NoteError::WrongKind);
        }
        let sig = self.pair.sign(text.as_bytes());
        let mut b = self.id.to_be_bytes().to_vec();
        b.extend_from_slice(sig.as_ref());
        Ok(format!(
            "{text}\n\u{2014} {} {}\n",
            self.name,
            B64.encode(b)
        ))
    }
}

impl SignerKey {
    /// A C2SP tlog-cosignature (v1) line over a checkpoint's `text`, made
    /// at `time` (seconds since the epoch): `— <name> base64(key id ‖
    /// time ‖ signature)`, the signature over `cosignature/v1\ntime
    /// <time>\n` followed by the text.
    pub fn cosign(&self, text: &str, time: u64) -> Result<String, NoteError> {
        if self.kind != KeyKind::Witness {
            return Err(NoteError::WrongKind);
        }
        if !text.ends_with('\n') || time > i64::MAX as u64 {
            return Err(NoteError::Malformed);
        }
        let sig = self.pair.sign(cosigned_message(text, time).as_bytes());
        let mut b = self.id.to_be_bytes().to_vec();
        b.extend_from_slice(&time.to_be_bytes());
        b.extend_from_slice(sig.as_ref());
        Ok(format!("\u{2014} {} {}\n", self.name, B64.encode(b)))
    }
}

fn cosigned_message(text: &str, time: u64) -> String {
    format!("cosignature/v1\ntime {time}\n{text}")
}

fn three_parts(s: &str) -> Option<(&str, &str, &str)> {
    let mut it = s.splitn(3, '+');
    Some((it.next()?, it.next()?, it.next()?))
}

/// The public half: checks signatures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierKey {
    name: String,
    kind: KeyKind,
    id: u32,
    public: Vec<u8>,
}

impl VerifierKey {
    /// Read `name+id+base64(0x01 ‖ public key)`.
    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let (name, id, key) = three_parts(text.trim()).ok_or(NoteError::BadVerifierKey)?;
        if !valid_name(name) {
            return Err(NoteError::BadName(name.to_owned()));
        }
        let bytes = B64.decode(key).map_err(|_| NoteError::BadVerifierKey)?;
        let [alg, public @ ..] = bytes.as_slice() else {
            return Err(NoteError::BadVerifierKey);
        };
        let kind = KeyKind::of(*alg).ok_or(NoteError::BadVerifierKey)?;
        if public.len() != 32 {
            return Err(NoteError::BadVerifierKey);
        }
        let k = VerifierKey {
            name: name.to_owned(),
            kind,
            id: key_id(name, kind, public),
            public: public.to_vec(),
        };
        if format!("{:08x}", k.id) != id {
            return Err(NoteError::KeyIdMismatch);
        }
        Ok(k)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// The time of this witness key's valid cosignature of `note`'s text,
    /// among its signature lines.
    pub fn cosigned(&self, note: &str) -> Result<u64, NoteError> {
        let public = UnparsedPublicKey::new(&ED25519, &self.public);
        self.signed_by(note, KeyKind::Witness, 8 + 64, |text, sig| {
            let time = u64::from_be_bytes(sig[..8].try_into().ok()?);
            public
                .verify(cosigned_message(text, time).as_bytes(), &sig[8..])
                .is_ok()
                .then_some(time)
        })
        .map(|(_, time)| time)
    }

    /// The text of a note this key signed; its other signatures (a
    /// witness's cosignature) are left alone.
    pub fn open<'a>(&self, note: &'a str) -> Result<&'a str, NoteError> {
        let public = UnparsedPublicKey::new(&ED25519, &self.public);
        self.signed_by(note, KeyKind::Checkpoint, 64, |text, sig| {
            public.verify(text.as_bytes(), sig).is_ok().then_some(())
        })
        .map(|(text, ())| text)
    }

    /// The note's text and what `valid` makes of the first of its
    /// signature lines by this key (its name, its id, `len` bytes after
    /// the id) that `valid` accepts.
    fn signed_by<'a, T>(
        &self,
        note: &'a str,
        kind: KeyKind,
        len: usize,
        valid: impl Fn(&str, &[u8]) -> Option<T>,
    ) -> Result<(&'a str, T), NoteError> {
        if self.kind != kind {
            return Err(NoteError::WrongKind);
        }
        let (text, sigs) = split_note(note)?;
        let mut saw_name = false;
        for (name, sig) in signature_lines(sigs)? {
            if name != self.name {
                continue;
            }
            saw_name = true;
            let Ok(bytes) = B64.decode(sig) else {
                continue;
            };
            if bytes.len() != 4 + len || bytes[..4] != self.id.to_be_bytes() {
                continue;
            }
            if let Some(t) = valid(text, &bytes[4..]) {
                return Ok((text, t));
            }
        }
        if saw_name {
            return Err(NoteError::BadSignature(self.name.clone()));
        }
        Err(NoteError::Unsigned(self.name.clone()))
    }
}

impl fmt::Display for VerifierKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut b = vec![self.kind.alg()];
        b.extend_from_slice(&self.public);
        write!(f, "{}+{:08x}+{}", self.name, self.id, B64.encode(b))
    }
}

/// The text (with its final newline) and the signature lines of a note.
fn split_note(note: &str) -> Result<(&str, &str), NoteError> {
    let at = note.rfind("\n\n").ok_or(NoteError::Malformed)?;
    let (text, sigs) = (&note[..at + 1], &note[at + 2..]);
    if sigs.is_empty() || !sigs.ends_with('\n') {
        return Err(NoteError::Malformed);
    }
    Ok((text, sigs))
}

/// The `(name, base64 signature)` of each signature line.
pub fn signature_lines(sigs: &str) -> Result<Vec<SignatureLine<'_>>, NoteError> {
    sigs.lines()
        .map(|line| {
            line.strip_prefix("\u{2014} ")
                .and_then(|l| l.split_once(' '))
                .filter(|(name, sig)| valid_name(name) && !sig.is_empty() && !sig.contains(' '))
                .ok_or(NoteError::Malformed)
        })
        .collect()
}

/// A signature line's key name and base64 signature.
pub type SignatureLine<'a> = (&'a str, &'a str);

/// A note's text (with its final newline) and its signature lines.
pub fn split(note: &str) -> Result<(&str, Vec<SignatureLine<'_>>), NoteError> {
    let (text, sigs) = split_note(note)?;
    Ok((text, signature_lines(sigs)?))
}

/// The origin line of a partition's checkpoints: the log a note is about.
pub fn origin(key_name: &str, topic: crate::model::Topic, partition: u32) -> String {
    format!("agentledger/{key_name}/{}/{partition}", topic.name())
}

/// The body of a C2SP tlog-checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointBody {
    pub origin: String,
    pub size: u64,
    pub root: [u8; 32],
}

impl CheckpointBody {
    pub fn text(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            B64.encode(self.root)
        )
    }

    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let bad = |why: &str| NoteError::BadCheckpoint(why.to_owned());
        let mut lines = text.split('\n');
        let origin = lines
            .next()
            .filter(|o| !o.is_empty())
            .ok_or_else(|| bad("no origin"))?;
        let size = lines
            .next()
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|_| true)
            .ok_or_else(|| bad("the second line is not a tree size"))?;
        let root: [u8; 32] = lines
            .next()
            .and_then(|r| B64.decode(r).ok())
            .and_then(|r| r.try_into().ok())
            .ok_or_else(|| bad("the third line is not a base64 SHA-256 root"))?;
        Ok(CheckpointBody {
            origin: origin.to_owned(),
            size,
            root,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_back_and_notes_verify_only_unchanged() {
        let k = SignerKey::generate("acme-prod").unwrap();
        let again = SignerKey::parse(&k.to_text()).unwrap();
        assert_eq!(again.verifier(), k.verifier());
        let v = VerifierKey::parse(&k.verifier().to_string()).unwrap();
        assert_eq!(v, k.verifier());
        assert!(!format!("{k:?}").contains(&k.to_text()[12..]));

        let body = CheckpointBody {
            origin: "agentledger/acme-prod/ledger/0".into(),
            size: 1024,
            root: [7; 32],
        };
        let note = k.sign(&body.text()).unwrap();
        assert_eq!(v.open(&note).unwrap(), body.text());
        assert_eq!(CheckpointBody::parse(v.open(&note).unwrap()).unwrap(), body);

        let forged = note.replace("\n1024\n", "\n1025\n");
        assert_eq!(
            v.open(&forged),
            Err(NoteError::BadSignature("acme-prod".into()))
        );
        let other = SignerKey::generate("acme-prod").unwrap();
        let by_other = other.sign(&body.text()).unwrap();
        assert!(v.open(&by_other).is_err());
        let by_stranger = SignerKey::generate("stranger")
            .unwrap()
            .sign(&body.text())
            .unwrap();
        assert_eq!(
            v.open(&by_stranger),
            Err(NoteError::Unsigned("acme-prod".into()))
        );
        assert_eq!(v.open("no signatures\n"), Err(NoteError::Malformed));
    }

    /// The example of the Go `note` package (golang.org/x/mod/sumdb/note):
    /// Ed25519 is deterministic, so the same key must give the same bytes.
    #[test]
    fn the_go_note_example_signs_and_opens_byte_for_byte() {
        let skey = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz";
        let vkey = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
        let text = "If you think cryptography is the answer to your problem,\n\
                    then you don't know what your problem is.\n";
        let want = format!(
            "{text}\n\u{2014} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
        );
        let signer = SignerKey::parse(skey).unwrap();
        assert_eq!(signer.to_text(), skey);
        assert_eq!(signer.verifier().to_string(), vkey);
        assert_eq!(signer.sign(text).unwrap(), want);
        assert_eq!(VerifierKey::parse(vkey).unwrap().open(&want).unwrap(), text);
    }

    #[test]
    fn witness_cosignatures_verify_over_the_checkpoint_and_their_time_only() {
        let ledger = SignerKey::generate("acme-prod").unwrap();
        let w = SignerKey::generate_kind("witness.example/w1", KeyKind::Witness).unwrap();
        let wv = VerifierKey::parse(&w.verifier().to_string()).unwrap();
        assert_eq!(wv.kind(), KeyKind::Witness);
        assert_eq!(
            SignerKey::parse(&w.to_text()).unwrap().kind(),
            KeyKind::Witness
        );
        let body = CheckpointBody {
            origin: "agentledger/acme-prod/ledger/0".into(),
            size: 2048,
            root: [9; 32],
        }
        .text();
        let note = ledger.sign(&body).unwrap();
        let line = w.cosign(&body, 1_679_315_147).unwrap();
        let cosigned = format!("{note}{line}");
        assert_eq!(wv.cosigned(&cosigned), Ok(1_679_315_147));
        // The ledger's own signature still opens; the witness line is left alone.
        assert_eq!(ledger.verifier().open(&cosigned).unwrap(), body);
        // Over another checkpoint, or with its time changed, it fails.
        let moved = cosigned.replace("\n2048\n", "\n2049\n");
        assert_eq!(
            wv.cosigned(&moved),
            Err(NoteError::BadSignature("witness.example/w1".into()))
        );
        let (_, sig) = line.trim_end().rsplit_once(' ').unwrap();
        let mut raw = B64.decode(sig).unwrap();
        raw[11] ^= 1;
        let retimed = format!("{note}\u{2014} witness.example/w1 {}\n", B64.encode(raw));
        assert!(wv.cosigned(&retimed).is_err());
        assert_eq!(
            wv.cosigned(&note),
            Err(NoteError::Unsigned("witness.example/w1".into()))
        );
        // Each kind does only its own job.
        assert_eq!(w.sign(&body), Err(NoteError::WrongKind));
        assert_eq!(ledger.cosign(&body, 1), Err(NoteError::WrongKind));
        assert_eq!(wv.open(&cosigned), Err(NoteError::WrongKind));
        assert_eq!(
            ledger.verifier().cosigned(&cosigned),
            Err(NoteError::WrongKind)
        );
        // Same name and seed, other kind: other key id (the type byte differs).
        assert_ne!(
            w.verifier().to_string().split('+').nth(1),
            SignerKey::from_seed("witness.example/w1", KeyKind::Checkpoint, w.seed)
                .unwrap()
                .verifier()
                .to_string()
                .split('+')
                .nth(1)
        );
    }

    #[test]
    fn key_texts_that_are_wrong_say_so() {
        let k = SignerKey::generate("a").unwrap();
        let v = k.verifier().to_string();
        let bad_id = format!("a+00000000+{}", v.splitn(3, '+').nth(2).unwrap());
        assert_eq!(VerifierKey::parse(&bad_id), Err(NoteError::KeyIdMismatch));
        assert!(VerifierKey::parse("a+b").is_err());
        assert!(SignerKey::parse(&v).is_err());
        assert!(SignerKey::generate("two words").is_err());
        assert!(SignerKey::generate("a+b").is_err());
    }
}
