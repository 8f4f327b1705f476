//! Each chained partition's Merkle tree kept as C2SP tlog-tiles of height
//! 8: tile `(L, N)` holds the hashes of tree level `8·L`, indices
//! `[256·N, 256·N + W)`, W ≤ 256 (W < 256 only for the right edge). Any
//! complete subtree's hash is one tile read and at most 255 hashings, so a
//! proof in a tree of 10M leaves reads a handful of tiles whatever its
//! size — where building the tree from the log is O(n).
//!
//! Tiles are derived data, like the views: rebuilt from the log (`sync`)
//! and never trusted by `verify`, which recomputes from the records. A
//! proof computed from a damaged tile does not check against the signed
//! root, so serving one harms no one who checks.
//!
//! Stored in their own sled tree: key `T ‖ topic ‖ partition ‖ L ‖ N`
//! (big-endian) → the tile's hashes concatenated; key `S ‖ topic ‖
//! partition` → leaves held. A batch of leaves and the new size land in
//! one atomic sled batch, so a crash leaves the tiles at some earlier size,
//! from which `sync` continues.

use super::merkle::{node_hash, Hash, Nodes};
use crate::model::Topic;
use std::cell::RefCell;
use std::collections::HashMap;

/// Levels of the tree per tile.
pub const TILE_HEIGHT: u8 = 8;
/// Hashes per full tile.
pub const TILE_WIDTH: u64 = 1 << TILE_HEIGHT;
const HASH: usize = 32;
/// Leaves read from the log per batch when catching up (bounds memory).
pub const SYNC_BATCH: u64 = 1 << 16;

#[derive(Debug, thiserror::Error)]
pub enum TileError {
    #[error("tile store: {0}")]
    Sled(#[from] sled::Error),
    /// A tile could not be fetched from where the tree is served.
    #[error("fetching tile {level}/{index}: {why}")]
    Fetch { level: u8, index: u64, why: String },
    #[error("tile {level}/{index} of {topic}/{partition} holds {held} hashes, fewer than the tree needs ({needed}); rebuild the views")]
    Short {
        topic: Topic,
        partition: u32,
        level: u8,
        index: u64,
        held: usize,
        needed: usize,
    },
}

/// The tiles of every chained partition.
#[derive(Clone)]
pub struct TileStore {
    tree: sled::Tree,
}

fn partition_key(tag: u8, topic: Topic, partition: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(16);
    k.push(tag);
    k.push(topic.index());
    k.extend_from_slice(&partition.to_be_bytes());
    k
}

fn tile_key(topic: Topic, partition: u32, level: u8, index: u64) -> Vec<u8> {
    let mut k = partition_key(b'T', topic, partition);
    k.push(level);
    k.extend_from_slice(&index.to_be_bytes());
    k
}

impl TileStore {
    pub fn new(tree: sled::Tree) -> Self {
        Self { tree }
    }

    /// Leaves of the partition's tree held in tiles.
    pub fn size(&self, topic: Topic, partition: u32) -> Result<u64, TileError> {
        Ok(self
            .tree
            .get(partition_key(b'S', topic, partition))?
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
            .map_or(0, u64::from_be_bytes))
    }

    /// The stored hashes of tile `(level, index)`, however many there are.
    pub fn tile(
        &self,
        topic: Topic,
        partition: u32,
        level: u8,
        index: u64,
    ) -> Result<Option<sled::IVec>, TileError> {
        Ok(self.tree.get(tile_key(topic, partition, level, index))?)
    }

    /// Tile `(level, index)` as C2SP tlog-tiles serves it: `width` hashes
    /// (256 for a full tile), or `None` while fewer are held.
    pub fn tile_bytes(
        &self,
        topic: Topic,
        partition: u32,
        level: u8,
        index: u64,
        width: u64,
    ) -> Result<Option<Vec<u8>>, TileError> {
        if width == 0 || width > TILE_WIDTH {
            return Ok(None);
        }
        let want = width as usize * HASH;
        Ok(self
            .tile(topic, partition, level, index)?
            .filter(|t| t.len() >= want)
            .map(|t| t[..want].to_vec()))
    }

    /// Append leaf hashes to the partition's tree (they are leaves
    /// `size..size + leaves.len()`), in one atomic batch.
    pub fn extend(&self, topic: Topic, partition: u32, leaves: &[Hash]) -> Result<(), TileError> {
        let mut size = self.size(topic, partition)?;
        let mut touched: HashMap<(u8, u64), Vec<u8>> = HashMap::new();
        for leaf in leaves {
            // Push the leaf, and each tile it completes one level up.
            let mut level = 0u8;
            let mut at = size;
            let mut hash = *leaf;
            loop {
                let n = at >> TILE_HEIGHT;
                let tile = match touched.entry((level, n)) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        let held = self.tile(topic, partition, level, n)?;
                        e.insert(held.map(|t| t.to_vec()).unwrap_or_default())
                    }
                };
                let slot = (at % TILE_WIDTH) as usize;
                if tile.len() != slot * HASH {
                    return Err(TileError::Short {
                        topic,
                        partition,
                        level,
                        index: n,
                        held: tile.len() / HASH,
                        needed: slot,
                    });
                }
                tile.extend_from_slice(&hash);
                if slot as u64 != TILE_WIDTH - 1 {
                    break;
                }
                hash = tile_root(tile, 0, TILE_WIDTH as usize);
                level += 1;
                at = n;
            }
            size += 1;
        }
        let mut batch = sled::Batch::default();
        for ((level, n), bytes) in touched {
            batch.insert(tile_key(topic, partition, level, n), bytes);
        }
        batch.insert(
            partition_key(b'S', topic, partition),
            &size.to_be_bytes()[..],
        );
        self.tree.apply_batch(batch)?;
        Ok(())
    }

    /// The partition's tree, for roots and proofs (as far as the tiles go).
    pub fn nodes(&self, topic: Topic, partition: u32) -> TileNodes<PartitionTiles<'_>> {
        TileNodes::new(PartitionTiles {
            store: self,
            topic,
            partition,
        })
    }

    /// Forget every partition's tiles (they are rebuilt by `sync`).
    pub fn clear(&self) -> Result<(), TileError> {
        Ok(self.tree.clear()?)
    }
}

/// The root of the `count` hashes of `tile` from slot `from` (a power of
/// two, aligned).
fn tile_root(tile: &[u8], from: usize, count: usize) -> Hash {
    let mut row: Vec<Hash> = tile[from * HASH..(from + count) * HASH]
        .chunks_exact(HASH)
        .map(|c| c.try_into().unwrap_or([0; 32]))
        .collect();
    while row.len() > 1 {
        row = row
            .chunks_exact(2)
            .map(|p| node_hash(&p[0], &p[1]))
            .collect();
    }
    row[0]
}

/// Where a tree's tiles come from: this store, or a server (a witness).
pub trait TileSource {
    /// Tile `(level, index)` with at least `width` hashes, or what is held.
    fn tile(&self, level: u8, index: u64, width: u64) -> Result<Option<Vec<u8>>, TileError>;
    /// Names the log in errors.
    fn log_name(&self) -> (Topic, u32);
}

/// One partition's tiles in this store.
pub struct PartitionTiles<'a> {
    store: &'a TileStore,
    topic: Topic,
    partition: u32,
}

impl TileSource for PartitionTiles<'_> {
    fn tile(&self, level: u8, index: u64, _width: u64) -> Result<Option<Vec<u8>>, TileError> {
        Ok(self
            .store
            .tile(self.topic, self.partition, level, index)?
            .map(|t| t.to_vec()))
    }
    fn log_name(&self) -> (Topic, u32) {
        (self.topic, self.partition)
    }
}

/// A tree read from its tiles, with the tiles one proof reads kept for
/// its duration.
pub struct TileNodes<S> {
    source: S,
    cache: RefCell<HashMap<(u8, u64), Vec<u8>>>,
}

impl<S: TileSource> TileNodes<S> {
    pub fn new(source: S) -> Self {
        Self {
            source,
            cache: RefCell::new(HashMap::new()),
        }
    }
}

impl<S: TileSource> Nodes for TileNodes<S> {
    type Error = TileError;

    fn node(&self, level: u8, index: u64) -> Result<Hash, TileError> {
        let tile_level = level / TILE_HEIGHT;
        let within = level % TILE_HEIGHT;
        let first = index << within;
        let n = first >> TILE_HEIGHT;
        let slot = (first % TILE_WIDTH) as usize;
        let count = 1usize << within;
        let mut cache = self.cache.borrow_mut();
        let held = cache.get(&(tile_level, n)).map_or(0, |t| t.len() / HASH);
        if held < slot + count {
            // Ask for as much as this node needs; a source may give more.
            let t = self
                .source
                .tile(tile_level, n, (slot + count) as u64)?
                .unwrap_or_default();
            cache.insert((tile_level, n), t);
        }
        let tile = &cache[&(tile_level, n)];
        if tile.len() < (slot + count) * HASH {
            let (topic, partition) = self.source.log_name();
            return Err(TileError::Short {
                topic,
                partition,
                level: tile_level,
                index: n,
                held: tile.len() / HASH,
                needed: slot + count,
            });
        }
        Ok(tile_root(tile, slot, count))
    }
}

/// C2SP tlog-tiles path of tile index `n`: 3-digit groups, all but the last
/// prefixed `x` (`1234067` → `x001/x234/067`).
pub fn index_path(n: u64) -> String {
    let mut groups = vec![format!("{:03}", n % 1000)];
    let mut rest = n / 1000;
    while rest > 0 {
        groups.push(format!("x{:03}", rest % 1000));
        rest /= 1000;
    }
    groups.reverse();
    groups.join("/")
}

/// The tile a C2SP tlog-tiles path names (`<L>/<N>[.p/<W>]`, after
/// `tile/`): level, index and width (256 when full). Data tiles
/// (`entries/…`) and malformed paths are `None`.
pub fn parse_tile_path(path: &str) -> Option<(u8, u64, u64)> {
    let (level, rest) = path.split_once('/')?;
    if level.len() > 2 || !level.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let level: u8 = level.parse().ok().filter(|l| *l < 64 / TILE_HEIGHT)?;
    let (index, width) = match rest.split_once(".p/") {
        Some((index, w)) => {
            if w.is_empty() || w.len() > 3 || !w.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let w: u64 = w.parse().ok().filter(|w| (1..TILE_WIDTH).contains(w))?;
            (index, w)
        }
        None => (rest, TILE_WIDTH),
    };
    let groups: Vec<&str> = index.split('/').collect();
    let mut n: u64 = 0;
    for (i, g) in groups.iter().enumerate() {
        let last = i + 1 == groups.len();
        let digits = if last { *g } else { g.strip_prefix('x')? };
        if digits.len() != 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        n = n.checked_mul(1000)?.checked_add(digits.parse().ok()?)?;
    }
    // One spelling per tile: no leading zero groups.
    (index_path(n) == index).then_some((level, n, width))
}

#[cfg(test)]
mod tests {
    use super::super::merkle::{
        consistency_proof, inclusion_proof, leaf_hash, root, verify_consistency, verify_inclusion,
        MemoryTree,
    };
    use super::*;

    fn store() -> (tempfile::TempDir, TileStore) {
        let d = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(d.path()).open().unwrap();
        let t = TileStore::new(db.open_tree("tiles").unwrap());
        (d, t)
    }

    #[test]
    fn tiles_give_the_roots_and_proofs_of_the_tree_in_memory() {
        let (_d, tiles) = store();
        let mut mem = MemoryTree::new();
        // Uneven batches across the tile boundaries of two levels.
        let mut i = 0u64;
        for batch in [1u64, 254, 1, 1, 300, 65_000, 700, 3] {
            let leaves: Vec<Hash> = (i..i + batch)
                .map(|k| leaf_hash(&k.to_be_bytes()))
                .collect();
            tiles.extend(Topic::Ledger, 3, &leaves).unwrap();
            leaves.iter().for_each(|l| mem.push(*l));
            i += batch;
            let size = tiles.size(Topic::Ledger, 3).unwrap();
            assert_eq!(size, i);
            let nodes = tiles.nodes(Topic::Ledger, 3);
            assert_eq!(root(&nodes, size).unwrap(), mem.root_at(size));
            for s in [1, size / 3, size - 1, size] {
                let s = s.max(1);
                assert_eq!(root(&nodes, s).unwrap(), mem.root_at(s), "root at {s}");
                for idx in [0, s / 2, s - 1] {
                    let p = inclusion_proof(&nodes, idx, s).unwrap().unwrap();
                    assert_eq!(Some(p.clone()), mem.inclusion(idx, s));
                    let leaf = leaf_hash(&idx.to_be_bytes());
                    assert_eq!(verify_inclusion(&leaf, idx, s, &p, &mem.root_at(s)), Ok(()));
                }
                let c = consistency_proof(&nodes, s / 2 + 1, size).unwrap().unwrap();
                assert_eq!(Some(c.clone()), mem.consistency(s / 2 + 1, size));
                verify_consistency(
                    s / 2 + 1,
                    size,
                    &mem.root_at(s / 2 + 1),
                    &mem.root_at(size),
                    &c,
                )
                .unwrap();
            }
        }
        // Level-1 tiles hold the roots of the full level-0 tiles.
        let t1 = tiles.tile(Topic::Ledger, 3, 1, 0).unwrap().unwrap();
        assert_eq!(t1.len() / HASH, 256);
        assert_eq!(&t1[..32], &mem.root_at(256)[..]);
        let t1 = tiles.tile(Topic::Ledger, 3, 1, 1).unwrap().unwrap();
        assert_eq!(t1.len() / HASH, (i / 256 - 256) as usize);
        // Other partitions are untouched.
        assert_eq!(tiles.size(Topic::Ledger, 2).unwrap(), 0);
        assert_eq!(tiles.size(Topic::Registry, 3).unwrap(), 0);
    }

    #[test]
    fn a_short_tile_is_an_error_naming_it_not_a_wrong_hash() {
        let (_d, tiles) = store();
        let leaves: Vec<Hash> = (0..600u64).map(|k| leaf_hash(&k.to_be_bytes())).collect();
        tiles.extend(Topic::Ledger, 0, &leaves).unwrap();
        // Damage: the partial tile 0/2 cut short.
        let key = tile_key(Topic::Ledger, 0, 0, 2);
        tiles.tree.insert(&key, &[7u8; 64][..]).unwrap();
        let err = root(&tiles.nodes(Topic::Ledger, 0), 600).unwrap_err();
        assert!(err.to_string().contains("tile 0/2 of ledger/0"), "{err}");
        let err = tiles.extend(Topic::Ledger, 0, &leaves[..1]).unwrap_err();
        assert!(err.to_string().contains("tile 0/2"), "{err}");
    }

    #[test]
    fn tile_paths_round_trip_in_one_spelling() {
        for (n, p) in [
            (0u64, "000"),
            (7, "007"),
            (999, "999"),
            (1000, "x001/000"),
            (1_234_067, "x001/x234/067"),
        ] {
            assert_eq!(index_path(n), p);
            assert_eq!(parse_tile_path(&format!("0/{p}")), Some((0, n, 256)));
            assert_eq!(parse_tile_path(&format!("2/{p}.p/17")), Some((2, n, 17)));
        }
        for bad in [
            "0/7",
            "0/0007",
            "0/x000/007",
            "0/001/002",
            "a/000",
            "0/000.p/0",
            "0/000.p/256",
            "0/000.p/",
            "entries/000",
            "9/000",
            "0/x001",
            "0/-01",
        ] {
            assert_eq!(parse_tile_path(bad), None, "{bad}");
        }
    }
}
