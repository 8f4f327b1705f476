//! Tests of `verify`'s pass over the log: schedules, budgets and old checkpoints.

use super::*;
use crate::audit::hashchain::from_hex32;
use crate::audit::hashchain::record_digest;
use crate::audit::Checkpoint;
use crate::audit::GENESIS;
use crate::log::embedded::{EmbeddedConfig, EmbeddedLog};

fn log_with_a_broken_record(dir: &std::path::Path) -> (EmbeddedLog, u32, u64) {
    let log = EmbeddedLog::open(dir, &EmbeddedConfig::default()).unwrap();
    crate::engine::synthetic::write_synthetic_log(&log, 6000).unwrap();
    // A copy of a real record with its last body byte flipped.
    let mut rec = log.read(Topic::Ledger, 0, 0, 1).unwrap().remove(0);
    let n = rec.payload.len();
    rec.payload[n - 1] ^= 1;
    let at = log
        .append(Topic::Ledger, &[(rec.key, rec.payload)])
        .unwrap();
    (log, at[0].0, at[0].1)
}

/// Run a pass by hand: every job in the order `order` picks among
/// those claimed so far (claims taken until the pass is done).
fn run_by_hand(pass: &Pass<'_>, order: impl Fn(usize) -> usize) {
    let mut claimed = Vec::new();
    loop {
        match pass.claim().unwrap() {
            Job::Done => break,
            Job::Wait => break,
            j => claimed.push(j),
        }
    }
    while !claimed.is_empty() {
        let j = claimed.remove(order(claimed.len()) % claimed.len());
        match j {
            Job::Headers => pass.read_headers().unwrap(),
            Job::Chunk(i, from, to) => {
                let c = pass.digest(i, from, to).unwrap();
                pass.submit(i, c).unwrap();
            }
            Job::Whole(i) => pass.whole(i).unwrap(),
            Job::Wait | Job::Done => unreachable!(),
        }
        if claimed.is_empty() {
            loop {
                match pass.claim().unwrap() {
                    Job::Done | Job::Wait => break,
                    j => claimed.push(j),
                }
            }
        }
    }
    pass.drain_all().unwrap();
}

#[test]
fn a_broken_record_digested_before_the_checkpoints_are_read_is_named() {
    let d = tempfile::tempdir().unwrap();
    let (log, p, off) = log_with_a_broken_record(d.path());
    let pass = Pass::new(&log, &|_| {}, false, 1000, DIGEST_AHEAD).unwrap();
    assert_eq!(pass.claim().unwrap(), Job::Headers);
    // Every chunk digested and handed over before the checkpoints are
    // read: leaf digests do not look inside, so the body is checked
    // once it is known that no checkpoint covers the record.
    let mut jobs = Vec::new();
    loop {
        match pass.claim().unwrap() {
            Job::Chunk(i, from, to) => jobs.push((i, from, to)),
            Job::Done => break,
            j => panic!("unexpected {j:?}"),
        }
    }
    for (i, from, to) in jobs {
        let c = pass.digest(i, from, to).unwrap();
        assert!(c.broken.is_none());
        pass.submit(i, c).unwrap();
    }
    pass.read_headers().unwrap();
    let (report, _, _) = pass.report().unwrap();
    let m = report.first().expect("a mismatch");
    assert_eq!((m.partition, m.offset), (p, off));
    assert!(m.what.contains("body does not match"), "{m}");
}

#[test]
fn a_broken_record_digested_after_the_checkpoints_are_read_is_named_in_the_chunk() {
    let d = tempfile::tempdir().unwrap();
    let (log, p, off) = log_with_a_broken_record(d.path());
    let pass = Pass::new(&log, &|_| {}, false, 1000, DIGEST_AHEAD).unwrap();
    assert_eq!(pass.claim().unwrap(), Job::Headers);
    pass.read_headers().unwrap();
    let i = pass
        .parts
        .iter()
        .position(|x| x.topic == Topic::Ledger && x.p == p)
        .unwrap();
    let c = pass.digest(i, off - off % 1000, None).unwrap();
    let m = c.broken.as_ref().expect("named while digesting");
    assert_eq!(m.offset, off);
    assert_eq!(c.recs.last().map(|r| r.offset + 1), Some(off));
}

#[test]
fn digesting_ahead_stops_at_the_budget_and_the_rest_is_digested_after() {
    let d = tempfile::tempdir().unwrap();
    let log = EmbeddedLog::open(d.path(), &EmbeddedConfig::default()).unwrap();
    crate::engine::synthetic::write_synthetic_log(&log, 20_000).unwrap();
    let records: u64 = CHAINED_TOPICS
        .into_iter()
        .flat_map(|t| (0..log.partitions(t)).map(move |p| (t, p)))
        .map(|(t, p)| log.end_offset(t, p).unwrap())
        .sum();
    let pass = Pass::new(&log, &|_| {}, false, 1000, 3000).unwrap();
    assert_eq!(pass.claim().unwrap(), Job::Headers);
    for _ in 0..3 {
        assert!(matches!(pass.claim().unwrap(), Job::Chunk(..)));
    }
    // The budget is spent: nothing more until the checkpoints are read.
    assert_eq!(pass.claim().unwrap(), Job::Wait);
    pass.read_headers().unwrap();
    assert!(matches!(pass.claim().unwrap(), Job::Chunk(..)));
    // The three chunks claimed above are never digested: the pass can
    // not be done, and says so rather than report a short log.
    run_by_hand(&pass, |_| 0);
    assert!(pass.report().is_err());
    // Run properly, every record is counted.
    let pass = Pass::new(&log, &|_| {}, false, 1000, 3000).unwrap();
    run_by_hand(&pass, |_| 0);
    let (report, _, _) = pass.report().unwrap();
    assert!(report.clean(), "{:?}", report.first());
    assert_eq!(report.records, records);
}

#[test]
fn chunks_checked_in_any_order_give_the_same_report() {
    let d = tempfile::tempdir().unwrap();
    let log = EmbeddedLog::open(d.path(), &EmbeddedConfig::default()).unwrap();
    crate::engine::synthetic::write_synthetic_log(&log, 20_000).unwrap();
    // Checkpoints over part of each partition, the rest uncovered.
    let mut cps = Vec::new();
    for topic in CHAINED_TOPICS {
        for p in 0..log.partitions(topic) {
            let end = log.end_offset(topic, p).unwrap();
            let (mut from, mut head) = (0, GENESIS);
            while from + 700 <= end.saturating_sub(300) {
                let span = checkpoint::Span {
                    topic,
                    partition: p,
                    from,
                    to: from + 700,
                    prev_head: head,
                };
                let cp = checkpoint::build(&log, span, 0, "w").unwrap();
                head = from_hex32(&cp.head).unwrap();
                from += 700;
                cps.push(cp);
            }
        }
    }
    checkpoint::append(&log, &cps).unwrap();
    let (want, want_roots) = verify_log_with_roots(&log, &|_| {}).unwrap();
    assert!(want.clean(), "{:?}", want.first());
    assert!(want.covered > 0 && want.covered < want.records);
    // The roots, leaf by leaf, as the definition has them.
    let mut direct = Roots::new();
    for c in &cps {
        let topic = c.topic().unwrap();
        let mut f = crate::audit::merkle::Frontier::new();
        checkpoint::leaf_hashes(&log, topic, c.partition, 0, c.to, &mut |h| f.push(h)).unwrap();
        direct
            .entry((topic, c.partition))
            .or_default()
            .insert(c.to, f.root());
    }
    assert_eq!(want_roots, direct);
    // Chunks of a power-of-two size join their own frontiers to the
    // tree (those digested before the checkpoints were read grow it
    // leaf by leaf); others always grow it leaf by leaf.
    for chunk in [333, 256, 64] {
        for order in [0usize, 1, 7, 1000] {
            let pass = Pass::new(&log, &|_| {}, true, chunk, 2000).unwrap();
            run_by_hand(&pass, |n| (n * order + order / 3) % n.max(1));
            let (got, roots, _) = pass.report().unwrap();
            assert_eq!(got, want, "chunk {chunk} order {order}");
            assert_eq!(roots, direct, "chunk {chunk} order {order}");
        }
    }
}

#[test]
fn verify_log_finds_the_broken_record_whatever_the_schedule() {
    let d = tempfile::tempdir().unwrap();
    let (log, p, off) = log_with_a_broken_record(d.path());
    let report = verify_log(&log, &|_| {}).unwrap();
    let m = report.first().expect("a mismatch");
    assert_eq!(
        (m.topic.as_str(), m.partition, m.offset),
        ("ledger", p, off)
    );
    assert_eq!(report.mismatches.len(), 1);
}

/// A checkpoint of `[from, to)` as ledgers before v2 wrote them:
/// envelope digests, schema v1.
fn v1_checkpoint(
    log: &dyn Log,
    topic: Topic,
    p: u32,
    from: u64,
    to: u64,
    prev: [u8; 32],
) -> Checkpoint {
    let digests: Vec<super::super::hashchain::HexDigest> = log
        .read(topic, p, from, (to - from) as usize)
        .unwrap()
        .iter()
        .map(|r| super::super::hashchain::HexDigest(record_digest(&r.payload).unwrap()))
        .collect();
    let mut cp = checkpoint::assemble(
        checkpoint::Span {
            topic,
            partition: p,
            from,
            to,
            prev_head: prev,
        },
        digests,
        0,
        "old-writer",
    );
    cp.schema = checkpoint::SCHEMA_V1.into();
    cp
}

#[test]
fn ledgers_checkpointed_before_v2_and_after_verify_each_by_its_own_digests() {
    let d = tempfile::tempdir().unwrap();
    let log = EmbeddedLog::open(d.path(), &EmbeddedConfig::default()).unwrap();
    crate::engine::synthetic::write_synthetic_log(&log, 3000).unwrap();
    let mut cps = Vec::new();
    let mut wrong = None;
    for topic in CHAINED_TOPICS {
        for p in 0..log.partitions(topic) {
            let end = log.end_offset(topic, p).unwrap();
            if end < 2 {
                continue;
            }
            // The older half under a v1 checkpoint, the rest under v2
            // continuing its chain.
            let half = end / 2;
            let old = v1_checkpoint(&log, topic, p, 0, half, GENESIS);
            let prev = from_hex32(&old.head).unwrap();
            let new = checkpoint::build(
                &log,
                checkpoint::Span {
                    topic,
                    partition: p,
                    from: half,
                    to: end,
                    prev_head: prev,
                },
                0,
                "new-writer",
            )
            .unwrap();
            assert_eq!(new.schema, checkpoint::SCHEMA);
            assert_eq!(new.kind(), DigestKind::Leaf);
            assert_ne!(old.digests[0], new.digests[0], "the kinds differ");
            if wrong.is_none() && topic == Topic::Ledger {
                wrong = Some((p, old.clone()));
            }
            cps.push(old);
            cps.push(new);
        }
    }
    checkpoint::append(&log, &cps).unwrap();
    let report = verify_log(&log, &|_| {}).unwrap();
    assert!(report.clean(), "{:?}", report.first());
    assert_eq!(report.covered, report.records);

    // A v1 checkpoint listing a leaf digest (what v2 would list) for
    // one of its records is not satisfied by it: each kind is checked
    // as its schema says.
    let d2 = tempfile::tempdir().unwrap();
    let log2 = EmbeddedLog::open(d2.path(), &EmbeddedConfig::default()).unwrap();
    crate::engine::synthetic::write_synthetic_log(&log2, 3000).unwrap();
    let (p, _) = wrong.unwrap();
    let end = log2.end_offset(Topic::Ledger, p).unwrap();
    let old = v1_checkpoint(&log2, Topic::Ledger, p, 0, end, GENESIS);
    let r = log2.read(Topic::Ledger, p, 3, 1).unwrap().remove(0);
    let mut digests = old.digests.clone();
    digests[3] = super::super::hashchain::HexDigest(super::super::merkle::leaf_hash(&r.payload));
    // Consistent in itself (its head folds its list), wrong for the log.
    let mut old = checkpoint::assemble(
        checkpoint::Span {
            topic: Topic::Ledger,
            partition: p,
            from: 0,
            to: end,
            prev_head: GENESIS,
        },
        digests,
        0,
        "old-writer",
    );
    old.schema = checkpoint::SCHEMA_V1.into();
    checkpoint::append(&log2, &[old]).unwrap();
    let report = verify_log(&log2, &|_| {}).unwrap();
    let m = report.first().expect("a mismatch");
    assert_eq!(
        (m.topic.as_str(), m.partition, m.offset),
        ("ledger", p, 3),
        "{m}"
    );
    assert!(m.what.contains("differs from checkpoint"), "{m}");
}

#[test]
fn the_roots_verify_builds_on_its_way_are_the_trees_of_the_log() {
    let d = tempfile::tempdir().unwrap();
    let log = EmbeddedLog::open(d.path(), &EmbeddedConfig::default()).unwrap();
    crate::engine::synthetic::write_synthetic_log(&log, 5000).unwrap();
    let mut cps = Vec::new();
    for topic in CHAINED_TOPICS {
        for p in 0..log.partitions(topic) {
            let end = log.end_offset(topic, p).unwrap();
            let (mut from, mut head) = (0, GENESIS);
            while from < end {
                let to = (from + 700).min(end);
                let span = checkpoint::Span {
                    topic,
                    partition: p,
                    from,
                    to,
                    prev_head: head,
                };
                let cp = checkpoint::build(&log, span, 0, "w").unwrap();
                head = from_hex32(&cp.head).unwrap();
                cps.push(cp);
                from = to;
            }
        }
    }
    checkpoint::append(&log, &cps).unwrap();
    let (report, roots) = verify_log_with_roots(&log, &|_| {}).unwrap();
    assert!(report.clean(), "{:?}", report.first());
    let mut compared = 0;
    for cp in &cps {
        let topic = cp.topic().unwrap();
        let mut f = super::super::merkle::Frontier::new();
        checkpoint::leaf_hashes(&log, topic, cp.partition, 0, cp.to, &mut |h| f.push(h)).unwrap();
        assert_eq!(
            roots[&(topic, cp.partition)][&cp.to],
            f.root(),
            "{topic}/{} at {}",
            cp.partition,
            cp.to
        );
        compared += 1;
    }
    assert!(compared > 8);
}

#[test]
fn a_checkpoint_listing_the_wrong_number_or_shape_of_digests_is_named() {
    let d = tempfile::tempdir().unwrap();
    let log = EmbeddedLog::open(d.path(), &EmbeddedConfig::default()).unwrap();
    crate::engine::synthetic::write_synthetic_log(&log, 2000).unwrap();
    let p = 0;
    let end = log.end_offset(Topic::Ledger, p).unwrap();
    assert!(end > 4, "partition too small: {end}");
    let span = checkpoint::Span {
        topic: Topic::Ledger,
        partition: p,
        from: 0,
        to: end,
        prev_head: GENESIS,
    };
    let good = checkpoint::build(&log, span, 0, "w").unwrap();
    // One digest short: the head still folds from the records, the
    // count does not match the span.
    let mut short = serde_json::to_value(&good).unwrap();
    short["digests"].as_array_mut().unwrap().pop();
    // A digest that is not 64 hex digits' worth: not readable.
    let mut stubby = serde_json::to_value(&good).unwrap();
    stubby["digests"][1] = serde_json::json!("abc");
    let recs: Vec<(Vec<u8>, Vec<u8>)> = [short, stubby]
        .iter()
        .map(|v| (b"ledger/0".to_vec(), serde_json::to_vec(v).unwrap()))
        .collect();
    log.append(Topic::Checkpoints, &recs).unwrap();
    let report = verify_log(&log, &|_| {}).unwrap();
    let whats: Vec<&str> = report.mismatches.iter().map(|m| m.what.as_str()).collect();
    assert!(whats.contains(&"checkpoint is inconsistent"), "{whats:?}");
    assert!(whats.contains(&"checkpoint is not readable"), "{whats:?}");
}
