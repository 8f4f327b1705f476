//! Proof generation from the tiles: fills a tile store with N leaves (10M
//! by default) as the ledger does at checkpoint time, then times inclusion
//! and consistency proofs at random indices and sizes, one by one, each
//! from a cold `TileNodes` (no tile cached between proofs). Prints the
//! distribution (p50, p99, max), the cost of keeping the tiles per leaf,
//! and, as the baseline measured in the same run, what one proof costs
//! without tiles: a pass over the leaves (O(n) hashing, the way the ledger
//! proved before tiles; records are not even read here, so the baseline
//! is flattering). Every proof is checked against the root.
//! Run through `tools/bench-proofs [LEAVES] [PROOFS]`.

use agentledger::audit::merkle::{
    consistency_proof, inclusion_proof, leaf_hash, root, verify_consistency, verify_inclusion,
    Gathering, Hash, Wanted,
};
use agentledger::audit::tiles::TileStore;
use agentledger::model::Topic;
use rand::{Rng, SeedableRng};
use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn leaf(i: u64) -> Hash {
    leaf_hash(&i.to_le_bytes())
}

fn quantiles(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    (at(0.5), at(0.99), v[v.len() - 1])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let proofs: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    // On disk beside the build, as the views are (not a tmpfs).
    let dir = tempfile::tempdir_in("target")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let db = sled::Config::new()
        .path(dir.path())
        .cache_capacity(256 * 1024 * 1024)
        .open()
        .unwrap();
    let tiles = TileStore::new(db.open_tree("tiles").unwrap());
    let (topic, p) = (Topic::Ledger, 0);

    // Filling, in the checkpoint interval's batches (1024 leaves).
    let t = Instant::now();
    let mut hashing = 0.0;
    let mut batch = Vec::with_capacity(1024);
    let mut at = 0;
    while at < n {
        let h = Instant::now();
        batch.clear();
        batch.extend((at..n.min(at + 1024)).map(leaf));
        hashing += h.elapsed().as_secs_f64();
        tiles.extend(topic, p, &batch).unwrap();
        at += batch.len() as u64;
    }
    db.flush().unwrap();
    let fill = t.elapsed().as_secs_f64();
    println!(
        "tiles of {n} leaves: {:.1} s, {:.2} µs per leaf kept beyond hashing it ({:.2} µs)",
        fill,
        (fill - hashing) * 1e6 / n as f64,
        hashing * 1e6 / n as f64
    );

    let mut rng = rand::rngs::StdRng::seed_from_u64(9162);
    let full_root = root(&tiles.nodes(topic, p), n).unwrap();
    let mut inc = Vec::with_capacity(proofs);
    let mut cons = Vec::with_capacity(proofs);
    for k in 0..proofs {
        // Half at the full size, half at a random earlier one.
        let size = if k % 2 == 0 { n } else { rng.gen_range(1..=n) };
        let index = rng.gen_range(0..size);
        let t = Instant::now();
        let nodes = tiles.nodes(topic, p);
        let proof = inclusion_proof(&nodes, index, size).unwrap().unwrap();
        inc.push(t.elapsed().as_secs_f64() * 1e3);
        let r = if size == n {
            full_root
        } else {
            root(&tiles.nodes(topic, p), size).unwrap()
        };
        verify_inclusion(&leaf(index), index, size, &proof, &r).unwrap();

        let old = rng.gen_range(1..=size);
        let t = Instant::now();
        let nodes = tiles.nodes(topic, p);
        let proof = consistency_proof(&nodes, old, size).unwrap().unwrap();
        cons.push(t.elapsed().as_secs_f64() * 1e3);
        let o = root(&tiles.nodes(topic, p), old).unwrap();
        verify_consistency(old, size, &o, &r, &proof).unwrap();
    }
    let (p50, p99, max) = quantiles(inc);
    println!(
        "inclusion proofs ({proofs}, cold tiles): p50 {p50:.3} ms, p99 {p99:.3} ms, max {max:.3} ms"
    );
    let (c50, c99, cmax) = quantiles(cons);
    println!("consistency proofs ({proofs}, cold tiles): p50 {c50:.3} ms, p99 {c99:.3} ms, max {cmax:.3} ms");

    // The baseline: one proof by a pass over the leaves.
    let index = n / 3;
    let t = Instant::now();
    let mut g = Gathering::new(&[Wanted::Inclusion { index, size: n }]);
    for i in 0..n {
        g.push(leaf(i));
    }
    let proof = g.inclusion(index, n).unwrap();
    let pass = t.elapsed().as_secs_f64() * 1e3;
    verify_inclusion(&leaf(index), index, n, &proof, &full_root).unwrap();
    println!(
        "baseline, one inclusion proof by a pass over the leaves: {pass:.0} ms; tiles p99 is {:.0}x faster",
        pass / p99
    );
    println!(
        "goal: p99 < 1 ms at {n} leaves: {}",
        if p99 < 1.0 && c99 < 1.0 {
            "met"
        } else {
            "NOT met"
        }
    );
}
