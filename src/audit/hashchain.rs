//! The hash chain of a partition, link by link: each checkpoint covers the
//! records `[from, to)` and its head is
//! `sha256(prev_head ‖ from as u64 BE ‖ to as u64 BE ‖ digest(from) ‖ … ‖ digest(to − 1))`,
//! where `prev_head` is the head of the checkpoint ending at `from` (32 zero
//! bytes at offset 0). A head thus commits to every record before it, in
//! order and at its offset.
//!
//! A record's digest is the sha256 of its stored bytes *without the body*:
//! the envelope (schema version, ids, time, writer, step) and the body's own
//! sha256, which is checked against the body first. It commits to every byte
//! of the record while hashing the body only once; and a link absorbs 32
//! bytes per record instead of finishing a hash per record. Together they
//! keep verifying the log close to the cost of hashing it once.

use sha2::{Digest, Sha256};

pub const GENESIS: [u8; 32] = [0u8; 32];

/// The digest of a stored record, after checking its body against the
/// body digest in its envelope (checkpoints v1).
pub fn record_digest(payload: &[u8]) -> Result<[u8; 32], crate::codec::CodecError> {
    let body_len = crate::codec::check_digest(payload)?;
    Ok(Sha256::digest(&payload[..payload.len() - body_len]).into())
}

/// How a checkpoint digests the records it lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DigestKind {
    /// v1: [`record_digest`] — the envelope with the body's own sha256,
    /// checked against the body first.
    Envelope,
    /// v2: the record's RFC 9162 leaf hash, sha256(0x00 ‖ stored bytes),
    /// the very value the partition's Merkle tree is built from. One pass
    /// over each record's bytes serves the chain and the tree, and verifying
    /// hashes each byte once, where v1 hashed the body twice (its digest
    /// check, then the envelope) and finished two hashes per record.
    Leaf,
}

/// A record's digest of either kind. A leaf digest does not look inside
/// the record: a body that does not match its envelope is found by the
/// checkpoint listing another digest (or, for a record no checkpoint
/// covers yet, by [`check_body`]).
pub fn digest_by(kind: DigestKind, payload: &[u8]) -> Result<[u8; 32], crate::codec::CodecError> {
    match kind {
        DigestKind::Envelope => record_digest(payload),
        DigestKind::Leaf => Ok(super::merkle::leaf_hash(payload)),
    }
}

/// Check a record's body against the body digest in its envelope.
pub fn check_body(payload: &[u8]) -> Result<(), crate::codec::CodecError> {
    crate::codec::check_digest(payload).map(|_| ())
}

/// One link of the chain being computed: fed the digests of `[from, to)`
/// in order, it yields the head of the checkpoint over them. Digests are
/// hashed [`LINK_BATCH`] at a time: one at a time, each 32-byte push paid
/// for a compression call of its own every other record (measured: two
/// thirds of `verify`'s time checking chains).
#[derive(Clone)]
pub struct Link {
    hash: Sha256,
    pending: [[u8; 32]; LINK_BATCH],
    held: usize,
}

/// Digests a [`Link`] holds before hashing them in one update.
const LINK_BATCH: usize = 32;

impl Link {
    pub fn new(prev_head: &[u8; 32], from: u64, to: u64) -> Self {
        let mut hash = Sha256::new();
        hash.update(prev_head);
        hash.update(from.to_be_bytes());
        hash.update(to.to_be_bytes());
        Link {
            hash,
            pending: [[0; 32]; LINK_BATCH],
            held: 0,
        }
    }

    pub fn push(&mut self, digest: &[u8; 32]) {
        self.pending[self.held] = *digest;
        self.held += 1;
        if self.held == LINK_BATCH {
            self.hash.update(self.pending.as_flattened());
            self.held = 0;
        }
    }

    pub fn head(mut self) -> [u8; 32] {
        self.hash
            .update(&self.pending.as_flattened()[..self.held * 32]);
        self.hash.finalize().into()
    }
}

/// The head of a link over `digests` (the records `[from, from + len)`).
pub fn link_head<'a>(
    prev_head: &[u8; 32],
    from: u64,
    digests: impl ExactSizeIterator<Item = &'a [u8; 32]>,
) -> [u8; 32] {
    let mut link = Link::new(prev_head, from, from + digests.len() as u64);
    for d in digests {
        link.push(d);
    }
    link.head()
}

/// 64 hex digits (either case) to 32 bytes. Checkpoints carry one per
/// record and `verify` reads them all, so this is a table lookup per digit
/// rather than a general-purpose decoder.
pub fn from_hex32(s: &str) -> Option<[u8; 32]> {
    const INVALID: u8 = 0xff;
    const TABLE: [u8; 256] = {
        let mut t = [INVALID; 256];
        let mut i = 0;
        while i < 10 {
            t[b'0' as usize + i] = i as u8;
            i += 1;
        }
        let mut i = 0;
        while i < 6 {
            t[b'a' as usize + i] = 10 + i as u8;
            t[b'A' as usize + i] = 10 + i as u8;
            i += 1;
        }
        t
    };
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    let mut bad = 0u8;
    for (i, o) in out.iter_mut().enumerate() {
        let (hi, lo) = (TABLE[b[2 * i] as usize], TABLE[b[2 * i + 1] as usize]);
        // INVALID has the high bit set; any valid digit does not.
        bad |= hi | lo;
        *o = (hi << 4) | (lo & 0x0f);
    }
    (bad & 0x80 == 0).then_some(out)
}

/// A sha256 that travels as 64 hex digits in JSON. Checkpoints list one
/// per record, so they are decoded once, while the checkpoint is parsed,
/// and `verify` compares bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HexDigest(pub [u8; 32]);

impl serde::Serialize for HexDigest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut buf = [0u8; 64];
        // Cannot fail: the buffer is exactly twice the input.
        let _ = hex::encode_to_slice(self.0, &mut buf);
        s.serialize_str(std::str::from_utf8(&buf).unwrap_or_default())
    }
}

impl<'de> serde::Deserialize<'de> for HexDigest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = HexDigest;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sha256 as 64 hex digits")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<HexDigest, E> {
                from_hex32(s)
                    .map(HexDigest)
                    .ok_or_else(|| E::custom(format!("{s:?} is not a sha256 as 64 hex digits")))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_is_sha256_of_the_previous_head_the_span_and_its_digests() {
        let digests: Vec<[u8; 32]> = (0u32..100)
            .map(|i| Sha256::digest(i.to_be_bytes()).into())
            .collect();
        let prev = [7u8; 32];
        for n in 0..digests.len() {
            let mut whole = Vec::new();
            whole.extend_from_slice(&prev);
            whole.extend_from_slice(&5u64.to_be_bytes());
            whole.extend_from_slice(&(5 + n as u64).to_be_bytes());
            for d in &digests[..n] {
                whole.extend_from_slice(d);
            }
            let want: [u8; 32] = Sha256::digest(&whole).into();
            assert_eq!(
                link_head(&prev, 5, digests[..n].iter()),
                want,
                "{n} digests"
            );
        }
    }

    #[test]
    fn chain_depends_on_order_offsets_and_what_came_before() {
        let a: [u8; 32] = Sha256::digest(b"a").into();
        let b: [u8; 32] = Sha256::digest(b"b").into();
        let ab = link_head(&GENESIS, 0, [a, b].iter());
        assert_ne!(ab, link_head(&GENESIS, 0, [b, a].iter()));
        assert_ne!(ab, link_head(&GENESIS, 1, [a, b].iter()));
        assert_ne!(ab, link_head(&GENESIS, 0, [a].iter()));
        let next = link_head(&ab, 2, [a].iter());
        assert_ne!(next, link_head(&GENESIS, 2, [a].iter()));
        // The streaming form and the one-shot form agree.
        let mut link = Link::new(&GENESIS, 0, 2);
        link.push(&a);
        link.push(&b);
        assert_eq!(link.head(), ab);
        assert_eq!(from_hex32(&hex::encode(ab)), Some(ab));
        assert_eq!(from_hex32("00"), None);
        assert_eq!(from_hex32(&hex::encode(ab).to_uppercase()), Some(ab));
        let mut bad = hex::encode(ab);
        bad.replace_range(63..64, "g");
        assert_eq!(from_hex32(&bad), None);
    }

    #[test]
    fn hex_digest_round_trips_as_a_json_string() {
        let d = HexDigest(Sha256::digest(b"x").into());
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, format!("\"{}\"", hex::encode(d.0)));
        assert_eq!(serde_json::from_str::<HexDigest>(&json).unwrap(), d);
        let err = serde_json::from_str::<HexDigest>("\"abc\"").unwrap_err();
        assert!(err.to_string().contains("64 hex digits"), "{err}");
    }
}
