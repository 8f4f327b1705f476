//! Verify throughput: writes a synthetic ledger of N events, checkpoints
//! every partition, then in the same run measures `verify` against the raw
//! baseline — reading the same records through the same log read path
//! (`Log::scan`) and computing sha256 over each record's bytes once, with
//! the same parallelism as `verify` (a thread per core, partitions largest
//! first). Prints records/s, MB/s and the ratio, for `verify` (digests and
//! hash chains) and for `verify --key` as the CLI runs it (in the same
//! pass, every partition's Merkle tree from the same leaf digests, then
//! the signed checkpoint notes), and what signing costs per record.
//! `verify --key` is also held to a baseline of its own hashing done raw:
//! the RFC 9162 leaf hash of every record and the interior nodes of every
//! partition's tree, in the same aligned chunks taken by the same number
//! of workers, the chunks' trees joined in order.
//! Run through `tools/bench-verify [EVENTS] [REPS]`.

use agentledger::audit::checkpoint::{self, Span, CHAINED_TOPICS};
use agentledger::audit::verify::verify_log;
use agentledger::audit::GENESIS;
use agentledger::engine::synthetic::write_synthetic_log;
use agentledger::log::embedded::{EmbeddedConfig, EmbeddedLog};
use agentledger::log::Log;
use agentledger::model::Topic;
use sha2::{Digest, Sha256};
use std::ops::ControlFlow;
use std::time::Instant;

mod support;
use support::{events_and_reps, median};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// sha256 over every record's bytes, read through the same path, with
/// the same parallelism as `verify`: as many threads as cores (at most one
/// per partition), taking partitions largest first.
fn baseline(log: &dyn Log) -> (u64, u64, f64) {
    let mut parts: Vec<(Topic, u32, u64)> = CHAINED_TOPICS
        .into_iter()
        .flat_map(|t| (0..log.partitions(t)).map(move |p| (t, p)))
        .map(|(t, p)| (t, p, log.end_offset(t, p).unwrap()))
        .collect();
    parts.sort_by_key(|&(_, _, n)| std::cmp::Reverse(n));
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(parts.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let t = Instant::now();
    let totals: Vec<(u64, u64, u8)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let (mut n, mut bytes, mut sink) = (0u64, 0u64, 0u8);
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(topic, p, _)) = parts.get(i) else {
                            return (n, bytes, sink);
                        };
                        let mut at = 0;
                        loop {
                            let after = log
                                .scan(topic, p, at, 4096, &mut |r| {
                                    sink ^= Sha256::digest(r.payload)[0];
                                    bytes += r.payload.len() as u64;
                                    n += 1;
                                    ControlFlow::Continue(())
                                })
                                .unwrap();
                            if after == at {
                                break;
                            }
                            at = after;
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let secs = t.elapsed().as_secs_f64();
    let sink = totals.iter().fold(0u8, |a, t| a ^ t.2);
    std::hint::black_box(sink);
    (
        totals.iter().map(|t| t.0).sum(),
        totals.iter().map(|t| t.1).sum(),
        secs,
    )
}

/// `verify --key`'s hashing, raw: every record's leaf hash and each
/// partition's interior nodes, in aligned chunks of 16,384 records (as
/// `verify` cuts them) that a worker per core takes in turn; each chunk's
/// tree is built by its worker, then joined to its partition's in order.
fn keyed_baseline(log: &dyn Log) -> (u64, f64) {
    use agentledger::audit::merkle::{leaf_hash, Frontier};
    const CHUNK: u64 = 16_384;
    let t = Instant::now();
    let mut chunks: Vec<(usize, Topic, u32, u64, u64)> = Vec::new();
    let mut partitions = 0;
    for topic in CHAINED_TOPICS {
        for p in 0..log.partitions(topic) {
            let end = log.end_offset(topic, p).unwrap();
            let mut from = 0;
            while from < end {
                chunks.push((partitions, topic, p, from, (from + CHUNK).min(end)));
                from += CHUNK;
            }
            partitions += 1;
        }
    }
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(chunks.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let built: Vec<Vec<(usize, Frontier, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(_, topic, p, from, to)) = chunks.get(i) else {
                            return out;
                        };
                        let mut tree = Frontier::new();
                        let mut at = from;
                        while at < to {
                            let after = log
                                .scan(topic, p, at, (to - at) as usize, &mut |r| {
                                    tree.push(leaf_hash(r.payload));
                                    ControlFlow::Continue(())
                                })
                                .unwrap();
                            assert!(after > at, "{topic:?}/{p} ends before {to}");
                            at = after;
                        }
                        out.push((i, tree, to - from));
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut by_chunk: Vec<(usize, Frontier, u64)> = built.into_iter().flatten().collect();
    by_chunk.sort_by_key(|c| c.0);
    let mut trees: Vec<Frontier> = (0..partitions).map(|_| Frontier::new()).collect();
    let mut n = 0;
    for (i, tree, len) in &by_chunk {
        assert!(trees[chunks[*i].0].append(tree), "chunks join in order");
        n += len;
    }
    std::hint::black_box(trees.iter().map(|t| t.root()).collect::<Vec<_>>());
    (n, t.elapsed().as_secs_f64())
}

fn main() {
    let (events, reps) = events_and_reps();
    let tmp = tempfile::tempdir().unwrap();
    let log = EmbeddedLog::open(tmp.path(), &EmbeddedConfig::default()).unwrap();
    write_synthetic_log(&log, events).unwrap();
    let key = agentledger::audit::note::SignerKey::generate("bench").unwrap();
    let sign_started = Instant::now();
    let mut signing = 0.0;
    let mut cps = Vec::new();
    for topic in CHAINED_TOPICS {
        for p in 0..log.partitions(topic) {
            let end = log.end_offset(topic, p).unwrap();
            let mut tree = agentledger::audit::merkle::Frontier::new();
            let (mut from, mut head) = (0, GENESIS);
            while from < end {
                let to = (from + 1024).min(end);
                let cp = checkpoint::build(
                    &log,
                    Span {
                        topic,
                        partition: p,
                        from,
                        to,
                        prev_head: head,
                    },
                    0,
                    "bench",
                )
                .unwrap();
                head = agentledger::audit::hashchain::from_hex32(&cp.head).unwrap();
                let t = Instant::now();
                checkpoint::leaf_hashes(&log, topic, p, from, to, &mut |h| tree.push(h)).unwrap();
                let body = agentledger::audit::note::CheckpointBody {
                    origin: agentledger::audit::note::origin(key.name(), topic, p),
                    size: to,
                    root: tree.root(),
                };
                let mut cp = cp;
                cp.note = Some(key.sign(&body.text()).unwrap());
                signing += t.elapsed().as_secs_f64();
                from = to;
                cps.push(cp);
            }
        }
    }
    checkpoint::append(&log, &cps).unwrap();
    let records: u64 = CHAINED_TOPICS
        .into_iter()
        .flat_map(|t| (0..log.partitions(t)).map(move |p| (t, p)))
        .map(|(t, p)| log.end_offset(t, p).unwrap())
        .sum();
    println!(
        "{events} events, {} checkpoints built in {:.2}s; signing them (leaf hashes, roots, Ed25519) {:.2}s = {:.2} µs per record",
        cps.len(),
        sign_started.elapsed().as_secs_f64(),
        signing,
        signing * 1e6 / records as f64
    );
    let verifier = key.verifier();
    let t = Instant::now();
    let n = checkpoint::read_all(&log).unwrap().len();
    println!(
        "reading and parsing {n} checkpoints: {:.3}s",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let n = checkpoint::read_headers(&log).unwrap().len();
    println!(
        "reading {n} checkpoint headers, as verify does (digest lists counted, not decoded): {:.3}s",
        t.elapsed().as_secs_f64()
    );
    if let Ok(n) = std::env::var("BENCH_BASELINE_ONLY") {
        // For profiling: the baseline alone, to set beside BENCH_VERIFY_ONLY.
        for _ in 0..n.parse::<usize>().unwrap_or(10) {
            std::hint::black_box(baseline(&log));
        }
        return;
    }
    if let Ok(n) = std::env::var("BENCH_VERIFY_ONLY") {
        // For profiling: verify alone, many times, so setup is noise.
        for _ in 0..n.parse::<usize>().unwrap_or(10) {
            assert!(verify_log(&log, &|_| {}).unwrap().clean());
        }
        return;
    }
    let (mut vr, mut br, mut kr, mut kbr) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        let t = Instant::now();
        let report = verify_log(&log, &|_| {}).unwrap();
        let vs = t.elapsed().as_secs_f64();
        assert!(report.clean(), "{:?}", report.first());
        // `verify --key` as the CLI runs it: one pass over the records
        // checks the chains and builds the trees, then the notes.
        let t = Instant::now();
        let (keyed, for_key) =
            agentledger::audit::log_verify::verify_log_for_key(&log, &|_| {}).unwrap();
        assert!(keyed.clean(), "{:?}", keyed.first());
        let chains = t.elapsed().as_secs_f64();
        let (summary, faults) = agentledger::audit::signed::verify_signed_given(
            &log,
            &agentledger::audit::signed::Trust::key_only(verifier.clone()),
            Some(&for_key.roots),
            &for_key.noted,
        )
        .unwrap();
        let ks = t.elapsed().as_secs_f64();
        assert!(faults.is_empty(), "{faults:?}");
        assert_eq!(summary.attested, report.records);
        let (n, bytes, bs) = baseline(&log);
        assert_eq!(n, report.records);
        let (v, b) = (n as f64 / vs, n as f64 / bs);
        println!(
            "rep {rep}: verify {v:>9.0} records/s ({:.0} MB/s)   raw sha256 {b:>9.0} records/s ({:.0} MB/s)   ratio {:.2}",
            bytes as f64 / vs / 1e6,
            bytes as f64 / bs / 1e6,
            v / b
        );
        let k = n as f64 / ks;
        let (kn, kbs) = keyed_baseline(&log);
        assert_eq!(kn, n);
        let kb = n as f64 / kbs;
        println!(
            "       verify --key {k:>9.0} records/s   ratio {:.2}   (chains and trees {chains:.3}s, notes {:.3}s)",
            k / b,
            ks - chains
        );
        println!(
            "       raw leaf hashes + interior nodes {kb:>9.0} records/s   verify --key ratio {:.2}",
            k / kb
        );
        vr.push(v);
        br.push(b);
        kr.push(k);
        kbr.push(kb);
    }
    let (v, b, k, kb) = (median(vr), median(br), median(kr), median(kbr));
    println!("median: verify {v:.0} records/s, verify --key {k:.0} records/s, raw sha256 over the same bytes at the same parallelism {b:.0} records/s; ratios {:.2} and {:.2} (goal >= 0.8)", v / b, k / b);
    println!("median: verify --key against its own hashing done raw (leaf hashes and the trees' interior nodes, same chunks and workers, {kb:.0} records/s): ratio {:.2} (goal >= 0.8)", k / kb);
}
