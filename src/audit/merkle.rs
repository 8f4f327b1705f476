//! The Merkle tree of a partition (RFC 9162 §2.1): leaf hash
//! `SHA-256(0x00 ‖ record bytes)`, node hash `SHA-256(0x01 ‖ left ‖ right)`,
//! the leaf index a record's offset. Roots, inclusion proofs and
//! consistency proofs are computed from the hashes of complete, aligned
//! subtrees (`node(level, index)` covers leaves `[index·2^level,
//! (index+1)·2^level)`) — exactly what C2SP tlog-tiles store — so where
//! those hashes come from (memory here, tiles on disk) is the caller's
//! business. Verification follows RFC 9162 §2.1.3.2 and §2.1.4.2 and needs
//! nothing but hashes.

use sha2::digest::{consts::U64, generic_array::GenericArray};
use sha2::{Digest, Sha256};

pub type Hash = [u8; 32];

/// RFC 9162: the hash of a leaf over its bytes.
pub fn leaf_hash(bytes: &[u8]) -> Hash {
    prefixed_hash(0, bytes)
}

/// RFC 9162: the hash of an inner node over its children.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut both = [0u8; 64];
    both[..32].copy_from_slice(left);
    both[32..].copy_from_slice(right);
    prefixed_hash(1, &both)
}

type Block = GenericArray<u8, U64>;

/// SHA-256's initial state (FIPS 180-4 §5.3.3).
const IV: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// Messages of up to this many blocks (padding included) are hashed in
/// one pass from the stack; longer ones stream.
const STACK_BLOCKS: usize = 8;

/// SHA-256(prefix ‖ bytes). Every record's leaf goes through here, so it
/// is not the streaming hasher: that copies the byte-shifted record into
/// its block buffer with stores the compression's loads straddle (store
/// forwarding fails) and compresses in three calls, measured 14% slower
/// than hashing the record alone. Here the padded message is written in
/// 16-byte units exactly where the compression reads them, then
/// compressed in one call: within a few per cent of the record alone.
fn prefixed_hash(prefix: u8, bytes: &[u8]) -> Hash {
    let n = bytes.len() + 1;
    let blocks = (n + 8) / 64 + 1;
    if blocks > STACK_BLOCKS {
        let mut h = Sha256::new();
        h.update([prefix]);
        h.update(bytes);
        return h.finalize().into();
    }
    let mut buf = [Block::default(); STACK_BLOCKS];
    let mut put = |unit: usize, from: &[u8]| {
        buf[unit / 4][(unit % 4) * 16..][..16].copy_from_slice(from);
    };
    // Units wholly inside the message: unit k is message bytes
    // [16k, 16k + 16), that is bytes[16k - 1 .. 16k + 15].
    let whole = n / 16;
    if whole > 0 {
        let mut first = [prefix; 16];
        first[1..].copy_from_slice(&bytes[..15]);
        put(0, &first);
        for k in 1..whole {
            put(k, &bytes[16 * k - 1..16 * k + 15]);
        }
    }
    // The rest: the message's last partial unit, 0x80, zeros, the length
    // in bits (at most 15 + 72 bytes).
    let start = whole * 16;
    let rest = blocks * 64 - start;
    let part = n - start;
    let mut tail = [0u8; 96];
    if whole == 0 {
        tail[0] = prefix;
        tail[1..n].copy_from_slice(bytes);
    } else {
        tail[..part].copy_from_slice(&bytes[start - 1..]);
    }
    tail[part] = 0x80;
    tail[rest - 8..rest].copy_from_slice(&(n as u64 * 8).to_be_bytes());
    for k in 0..rest / 16 {
        put(whole + k, &tail[16 * k..16 * k + 16]);
    }
    let mut state = IV;
    sha2::compress256(&mut state, &buf[..blocks]);
    let mut out = [0u8; 32];
    for (o, w) in out.chunks_exact_mut(4).zip(state) {
        o.copy_from_slice(&w.to_be_bytes());
    }
    out
}

/// The root of the empty tree.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// Hashes of complete aligned subtrees of a tree.
pub trait Nodes {
    type Error;
    /// The hash of the subtree over leaves `[index << level, (index + 1) << level)`;
    /// asked only for subtrees that are complete in the tree being proved.
    fn node(&self, level: u8, index: u64) -> Result<Hash, Self::Error>;
}

/// The largest power of two smaller than `n` (n ≥ 2).
fn split(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1 << (63 - (n - 1).leading_zeros())
}

/// MTH of the leaves `[start, start + size)` (`start` a multiple of the
/// largest power of two ≤ `size`, as every range RFC 9162 recurses on is).
fn range_hash<N: Nodes>(nodes: &N, start: u64, size: u64) -> Result<Hash, N::Error> {
    if size.is_power_of_two() {
        let level = size.trailing_zeros() as u8;
        return nodes.node(level, start >> level);
    }
    let k = split(size);
    let left = range_hash(nodes, start, k)?;
    let right = range_hash(nodes, start + k, size - k)?;
    Ok(node_hash(&left, &right))
}

/// The root of the tree of the first `size` leaves.
pub fn root<N: Nodes>(nodes: &N, size: u64) -> Result<Hash, N::Error> {
    if size == 0 {
        return Ok(empty_root());
    }
    range_hash(nodes, 0, size)
}

/// PATH(index, D[size]) of RFC 9162 §2.1.3.1, leaf side first.
pub fn inclusion_proof<N: Nodes>(
    nodes: &N,
    index: u64,
    size: u64,
) -> Result<Option<Vec<Hash>>, N::Error> {
    if index >= size {
        return Ok(None);
    }
    let mut path = Vec::new();
    path_into(nodes, index, 0, size, &mut path)?;
    Ok(Some(path))
}

fn path_into<N: Nodes>(
    nodes: &N,
    m: u64,
    start: u64,
    n: u64,
    out: &mut Vec<Hash>,
) -> Result<(), N::Error> {
    if n <= 1 {
        return Ok(());
    }
    let k = split(n);
    if m < k {
        path_into(nodes, m, start, k, out)?;
        out.push(range_hash(nodes, start + k, n - k)?);
    } else {
        path_into(nodes, m - k, start + k, n - k, out)?;
        out.push(range_hash(nodes, start, k)?);
    }
    Ok(())
}

/// PROOF(old, D[new]) of RFC 9162 §2.1.4.1; `None` unless
/// `0 < old ≤ new`.
pub fn consistency_proof<N: Nodes>(
    nodes: &N,
    old: u64,
    new: u64,
) -> Result<Option<Vec<Hash>>, N::Error> {
    if old == 0 || old > new {
        return Ok(None);
    }
    let mut proof = Vec::new();
    subproof_into(nodes, old, 0, new, true, &mut proof)?;
    Ok(Some(proof))
}

fn subproof_into<N: Nodes>(
    nodes: &N,
    m: u64,
    start: u64,
    n: u64,
    whole: bool,
    out: &mut Vec<Hash>,
) -> Result<(), N::Error> {
    if m == n {
        if !whole {
            out.push(range_hash(nodes, start, n)?);
        }
        return Ok(());
    }
    let k = split(n);
    if m <= k {
        subproof_into(nodes, m, start, k, whole, out)?;
        out.push(range_hash(nodes, start + k, n - k)?);
    } else {
        subproof_into(nodes, m - k, start + k, n - k, false, out)?;
        out.push(range_hash(nodes, start, k)?);
    }
    Ok(())
}

/// Why a proof does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("leaf index {index} is not below the tree size {size}")]
    IndexBeyondSize { index: u64, size: u64 },
    #[error("the proof has the wrong number of hashes for its sizes")]
    WrongLength,
    #[error("the proof does not lead to the root")]
    RootMismatch,
    #[error("old size {old} and new size {new} are not 0 < old ≤ new")]
    BadSizes { old: u64, new: u64 },
}

/// RFC 9162 §2.1.3.2: `leaf` is at `index` in the tree of `size` leaves
/// whose root is `root`.
pub fn verify_inclusion(
    leaf: &Hash,
    index: u64,
    size: u64,
    path: &[Hash],
    root: &Hash,
) -> Result<(), ProofError> {
    if index >= size {
        return Err(ProofError::IndexBeyondSize { index, size });
    }
    let (mut f, mut s) = (index, size - 1);
    let mut r = *leaf;
    for p in path {
        if s == 0 {
            return Err(ProofError::WrongLength);
        }
        if f & 1 == 1 || f == s {
            r = node_hash(p, &r);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(ProofError::WrongLength);
    }
    if &r != root {
        return Err(ProofError::RootMismatch);
    }
    Ok(())
}

/// RFC 9162 §2.1.4.2: the tree of `new` leaves with root `new_root`
/// extends the tree of `old` leaves with root `old_root`.
pub fn verify_consistency(
    old: u64,
    new: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> Result<(), ProofError> {
    if old == 0 || old > new {
        return Err(ProofError::BadSizes { old, new });
    }
    if old == new {
        return match (proof.is_empty(), old_root == new_root) {
            (false, _) => Err(ProofError::WrongLength),
            (true, false) => Err(ProofError::RootMismatch),
            (true, true) => Ok(()),
        };
    }
    let mut path: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if old.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let Some((first, rest)) = path.split_first() else {
        return Err(ProofError::WrongLength);
    };
    let (mut f, mut s) = (old - 1, new - 1);
    while f & 1 == 1 {
        f >>= 1;
        s >>= 1;
    }
    let (mut fr, mut sr) = (*first, *first);
    for c in rest {
        if s == 0 {
            return Err(ProofError::WrongLength);
        }
        if f & 1 == 1 || f == s {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(ProofError::WrongLength);
    }
    if &fr != old_root || &sr != new_root {
        return Err(ProofError::RootMismatch);
    }
    Ok(())
}

/// The right edge of a growing tree: the hashes of the perfect subtrees
/// that make up `[0, size)`, largest first — O(log size) hashes, enough to
/// append leaves and give the root at any size reached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// (level, hash), levels strictly decreasing.
    edge: Vec<(u8, Hash)>,
}

impl Frontier {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn push(&mut self, leaf: Hash) {
        self.push_seeing(leaf, &mut |_, _, _| {});
    }

    /// Push a leaf, showing `seen` every complete subtree it makes as
    /// `(level, index, hash)`, the leaf itself first.
    pub fn push_seeing(&mut self, leaf: Hash, seen: &mut dyn FnMut(u8, u64, &Hash)) {
        let index = self.size;
        self.size += 1;
        seen(0, index, &leaf);
        self.edge.push((0, leaf));
        while let [.., (l1, left), (l2, right)] = self.edge[..] {
            if l1 != l2 {
                break;
            }
            self.edge.truncate(self.edge.len() - 2);
            let up = node_hash(&left, &right);
            seen(l1 + 1, index >> (l1 + 1), &up);
            self.edge.push((l1 + 1, up));
        }
    }

    /// Append `other`, the frontier of the leaves that follow this one's,
    /// as pushing them one by one would — possible when this size is a
    /// multiple of `other`'s largest subtree (so none of `other`'s
    /// subtrees straddles a boundary of this tree's); false, and nothing
    /// changed, when it is not. Lets workers build the frontiers of
    /// aligned runs of leaves apart and join them in order.
    pub fn append(&mut self, other: &Frontier) -> bool {
        let Some(&(top, _)) = other.edge.first() else {
            return true;
        };
        if top >= 64 || !self.size.is_multiple_of(1u64 << top) {
            return false;
        }
        for &(level, hash) in &other.edge {
            self.edge.push((level, hash));
            while let [.., (l1, left), (l2, right)] = self.edge[..] {
                if l1 != l2 {
                    break;
                }
                self.edge.truncate(self.edge.len() - 2);
                self.edge.push((l1 + 1, node_hash(&left, &right)));
            }
        }
        self.size += other.size;
        true
    }

    /// MTH of the leaves pushed so far.
    pub fn root(&self) -> Hash {
        let mut it = self.edge.iter().rev();
        let Some(&(_, mut r)) = it.next() else {
            return empty_root();
        };
        for (_, left) in it {
            r = node_hash(left, &r);
        }
        r
    }
}

/// The nodes one set of proofs needs, gathered while the leaves stream by:
/// memory for those nodes and the frontier, not for the tree (a proof in
/// a partition of 10M records from its records, without tiles).
pub struct Gathering {
    frontier: Frontier,
    wanted: std::collections::HashMap<(u8, u64), Option<Hash>>,
}

/// Records which nodes a proof asks for (a proof's shape does not depend
/// on the hashes).
#[derive(Default)]
struct Asked(std::cell::RefCell<Vec<(u8, u64)>>);

impl Nodes for Asked {
    type Error = std::convert::Infallible;
    fn node(&self, level: u8, index: u64) -> Result<Hash, Self::Error> {
        self.0.borrow_mut().push((level, index));
        Ok([0; 32])
    }
}

/// What a [`Gathering`] is to prove, in a tree of `size` leaves.
#[derive(Debug, Clone, Copy)]
pub enum Wanted {
    Root { size: u64 },
    Inclusion { index: u64, size: u64 },
    Consistency { old: u64, size: u64 },
}

impl Gathering {
    pub fn new(wants: &[Wanted]) -> Self {
        let asked = Asked::default();
        for w in wants {
            match *w {
                Wanted::Root { size } => {
                    let _ = root(&asked, size);
                }
                Wanted::Inclusion { index, size } => {
                    let _ = inclusion_proof(&asked, index, size);
                }
                Wanted::Consistency { old, size } => {
                    let _ = root(&asked, old);
                    let _ = consistency_proof(&asked, old, size);
                }
            }
            let _ = root(&asked, w.size());
        }
        let wanted = asked
            .0
            .into_inner()
            .into_iter()
            .map(|k| (k, None))
            .collect();
        Self {
            frontier: Frontier::new(),
            wanted,
        }
    }

    pub fn size(&self) -> u64 {
        self.frontier.size()
    }

    pub fn push(&mut self, leaf: Hash) {
        let wanted = &mut self.wanted;
        self.frontier.push_seeing(leaf, &mut |level, index, h| {
            if let Some(slot) = wanted.get_mut(&(level, index)) {
                *slot = Some(*h);
            }
        });
    }

    /// The root of the first `size` leaves (wanted, and pushed).
    pub fn root_at(&self, size: u64) -> Option<Hash> {
        root(self, size).ok()
    }

    /// The inclusion proof (wanted, and its leaves pushed).
    pub fn inclusion(&self, index: u64, size: u64) -> Option<Vec<Hash>> {
        inclusion_proof(self, index, size).ok().flatten()
    }

    /// The consistency proof (wanted, and its leaves pushed).
    pub fn consistency(&self, old: u64, size: u64) -> Option<Vec<Hash>> {
        consistency_proof(self, old, size).ok().flatten()
    }
}

impl Wanted {
    fn size(&self) -> u64 {
        match *self {
            Wanted::Root { size }
            | Wanted::Inclusion { size, .. }
            | Wanted::Consistency { size, .. } => size,
        }
    }
}

/// A node a [`Gathering`] was not set up for, or has not seen yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotGathered;

impl Nodes for Gathering {
    type Error = NotGathered;
    fn node(&self, level: u8, index: u64) -> Result<Hash, NotGathered> {
        self.wanted
            .get(&(level, index))
            .copied()
            .flatten()
            .ok_or(NotGathered)
    }
}

/// A tree held in memory: every complete aligned subtree's hash, level by
/// level. Appending a leaf completes at most one subtree per level.
#[derive(Debug, Clone, Default)]
pub struct MemoryTree {
    levels: Vec<Vec<Hash>>,
}

impl MemoryTree {
    pub fn new() -> Self {
        Self::default()
    }

    /// Leaves so far.
    pub fn size(&self) -> u64 {
        self.levels.first().map_or(0, |l| l.len() as u64)
    }

    pub fn push(&mut self, leaf: Hash) {
        let mut level = 0;
        let mut hash = leaf;
        loop {
            if self.levels.len() == level {
                self.levels.push(Vec::new());
            }
            let row = &mut self.levels[level];
            row.push(hash);
            if row.len() % 2 == 1 {
                break;
            }
            hash = node_hash(&row[row.len() - 2], &row[row.len() - 1]);
            level += 1;
        }
    }

    pub fn root(&self) -> Hash {
        self.root_at(self.size())
    }

    /// The root of the first `size` leaves (`size` ≤ [`Self::size`]).
    pub fn root_at(&self, size: u64) -> Hash {
        root(self, size).unwrap_or_else(|n| match n {})
    }

    /// [`inclusion_proof`] in the tree of the first `size` leaves.
    pub fn inclusion(&self, index: u64, size: u64) -> Option<Vec<Hash>> {
        inclusion_proof(self, index, size).unwrap_or_else(|n| match n {})
    }

    /// [`consistency_proof`] between the trees of `old` and `new` leaves.
    pub fn consistency(&self, old: u64, new: u64) -> Option<Vec<Hash>> {
        consistency_proof(self, old, new).unwrap_or_else(|n| match n {})
    }
}

impl Nodes for MemoryTree {
    type Error = std::convert::Infallible;

    fn node(&self, level: u8, index: u64) -> Result<Hash, Self::Error> {
        // Asked only for complete subtrees, which are all held.
        Ok(self.levels[level as usize][index as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_and_node_hashes_are_sha256_of_the_prefixed_bytes_at_every_length() {
        let bytes: Vec<u8> = (0..STACK_BLOCKS * 64 + 200)
            .map(|i| (i * 131 + 7) as u8)
            .collect();
        for len in 0..bytes.len() {
            let b = &bytes[..len];
            let streamed = |prefix: u8| -> Hash {
                let mut h = Sha256::new();
                h.update([prefix]);
                h.update(b);
                h.finalize().into()
            };
            assert_eq!(leaf_hash(b), streamed(0), "leaf of {len} bytes");
            assert_eq!(prefixed_hash(1, b), streamed(1), "node prefix, {len} bytes");
        }
        let (l, r) = ([3u8; 32], [9u8; 32]);
        let mut h = Sha256::new();
        h.update([1u8]);
        h.update(l);
        h.update(r);
        assert_eq!(node_hash(&l, &r), <Hash>::from(h.finalize()));
    }

    fn tree(n: u64) -> MemoryTree {
        let mut t = MemoryTree::new();
        for i in 0..n {
            t.push(leaf_hash(&i.to_be_bytes()));
        }
        t
    }

    /// MTH written straight from the definition, over leaf hashes.
    fn mth(leaves: &[Hash]) -> Hash {
        match leaves.len() {
            0 => empty_root(),
            1 => leaves[0],
            n => {
                let k = split(n as u64) as usize;
                node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
            }
        }
    }

    #[test]
    fn roots_match_the_definition_at_every_size() {
        let mut t = MemoryTree::new();
        let mut f = Frontier::new();
        let mut leaves = Vec::new();
        for i in 0..70u64 {
            assert_eq!(t.root(), mth(&leaves), "size {i}");
            assert_eq!(f.root(), mth(&leaves), "frontier at size {i}");
            assert!(f.edge.len() <= 7);
            let l = leaf_hash(&i.to_be_bytes());
            leaves.push(l);
            t.push(l);
            f.push(l);
        }
    }

    /// Frontiers of aligned runs of leaves, built apart and appended in
    /// order, give the root of the whole at every size reached; a run not
    /// aligned to its largest subtree is refused.
    #[test]
    fn frontiers_built_apart_append_to_the_tree_of_all_their_leaves() {
        let leaves: Vec<Hash> = (0..100u64).map(|i| leaf_hash(&i.to_be_bytes())).collect();
        for run in [1usize, 2, 4, 8, 16] {
            let mut whole = Frontier::new();
            for (k, part) in leaves.chunks(run).enumerate() {
                let mut f = Frontier::new();
                for (j, l) in part.iter().enumerate() {
                    f.push(*l);
                    // The root at any size inside the run: the whole so
                    // far with the run's frontier so far.
                    let mut at = whole.clone();
                    assert!(at.append(&f));
                    let size = k * run + j + 1;
                    assert_eq!(at.root(), mth(&leaves[..size]), "run {run} size {size}");
                }
                assert!(whole.append(&f), "run {run} part {k}");
            }
            assert_eq!(whole.root(), mth(&leaves), "run {run}");
            assert_eq!(whole.size(), 100);
        }
        // Three leaves after one: the pair's subtree would straddle.
        let mut one = Frontier::new();
        one.push(leaves[0]);
        let mut two = Frontier::new();
        two.push(leaves[1]);
        two.push(leaves[2]);
        let before = one.clone();
        assert!(!one.append(&two));
        assert_eq!(one, before);
    }

    #[test]
    fn every_inclusion_and_consistency_proof_verifies_and_tampering_fails() {
        let t = tree(37);
        for size in 1..=37u64 {
            let r = root(&t, size).unwrap();
            for i in 0..size {
                let leaf = leaf_hash(&i.to_be_bytes());
                let p = inclusion_proof(&t, i, size).unwrap().unwrap();
                assert_eq!(verify_inclusion(&leaf, i, size, &p, &r), Ok(()));
                let other = leaf_hash(b"x");
                assert!(verify_inclusion(&other, i, size, &p, &r).is_err());
                if !p.is_empty() {
                    let mut bad = p.clone();
                    bad[0][0] ^= 1;
                    assert!(verify_inclusion(&leaf, i, size, &bad, &r).is_err());
                    assert!(verify_inclusion(&leaf, i, size, &p[1..], &r).is_err());
                }
            }
            for old in 1..=size {
                let o = root(&t, old).unwrap();
                let p = consistency_proof(&t, old, size).unwrap().unwrap();
                assert_eq!(
                    verify_consistency(old, size, &o, &r, &p),
                    Ok(()),
                    "{old}->{size}"
                );
                if old < size {
                    let mut bad = o;
                    bad[5] ^= 1;
                    assert!(verify_consistency(old, size, &bad, &r, &p).is_err());
                    assert!(verify_consistency(old, size, &o, &r, &p[1..]).is_err());
                }
            }
        }
        assert_eq!(inclusion_proof(&t, 5, 5).unwrap(), None);
        // Gathered while streaming, the same proofs.
        let wants = [
            Wanted::Inclusion {
                index: 20,
                size: 37,
            },
            Wanted::Consistency { old: 13, size: 37 },
            Wanted::Root { size: 29 },
        ];
        let mut g = Gathering::new(&wants);
        for i in 0..37u64 {
            g.push(leaf_hash(&i.to_be_bytes()));
        }
        assert_eq!(g.inclusion(20, 37), t.inclusion(20, 37));
        assert_eq!(g.consistency(13, 37), t.consistency(13, 37));
        assert_eq!(g.root_at(13), Some(t.root_at(13)));
        assert_eq!(g.root_at(29), Some(t.root_at(29)));
        assert_eq!(g.root_at(37), Some(t.root_at(37)));
        assert_eq!(g.inclusion(3, 37), None, "not asked for");
        assert!(g.wanted.len() < 30);
        assert_eq!(consistency_proof(&t, 0, 5).unwrap(), None);
    }
}
