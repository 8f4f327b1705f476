//! R16 tamper tests: a byte flipped in a body, a record dropped, two records
//! swapped, the log cut after a checkpoint — each found by `verify` at the
//! right record; and a tampered export found by `verify --export`. The
//! tampering rewrites frames with fresh checksums, as a deliberate forger
//! would, so only the digests and the hash chain can catch it.

mod common;

use common::frames::{read_frames, write_frames};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agentledger"))
}

/// A ledger whose chain r0 spans several records of one partition, all of
/// them attested by checkpoints.
fn ledger() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    {
        let mut l = common::Ledger::open(d.path());
        l.drive_loop("r0");
        l.engine.checkpoint(true).unwrap();
    }
    let seg = segment_of(d.path(), "r0");
    (d, seg)
}

/// The ledger segment holding the chain `root`.
fn segment_of(dir: &Path, root: &str) -> PathBuf {
    for p in 0..4 {
        let seg = dir.join(format!("log/ledger/{p}/{:020}.seg", 0));
        let frames = read_frames(&seg);
        if frames.iter().any(|(k, _)| k == root.as_bytes()) {
            return seg;
        }
    }
    panic!("no segment holds {root}");
}

fn verify(dir: &Path) -> (i32, Value) {
    common::verify_json(dir, &[])
}

fn partition_of(seg: &Path) -> u64 {
    seg.parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .parse()
        .unwrap()
}

#[test]
fn r16_clean_log_verifies() {
    let (d, _) = ledger();
    let (code, v) = verify(d.path());
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["records"], v["covered"]);
}

#[test]
fn r16_flipped_body_byte_is_named() {
    let (d, seg) = ledger();
    let mut frames = read_frames(&seg);
    let n = frames[3].1.len();
    frames[3].1[n - 5] ^= 0x01;
    write_frames(&seg, &frames);
    let (code, v) = verify(d.path());
    assert_eq!(code, 1, "{v}");
    let m = &v["first_mismatch"];
    assert_eq!(
        (
            m["topic"].as_str(),
            m["partition"].as_u64(),
            m["offset"].as_u64()
        ),
        (Some("ledger"), Some(partition_of(&seg)), Some(3)),
        "{v}"
    );
}

#[test]
fn r16_dropped_record_is_named() {
    let (d, seg) = ledger();
    let mut frames = read_frames(&seg);
    frames.remove(4);
    write_frames(&seg, &frames);
    let (code, v) = verify(d.path());
    assert_eq!(code, 1);
    assert_eq!(v["first_mismatch"]["offset"], 4, "{v}");
}

/// Records removed from the front of a partition (the segment renamed to
/// start past them) are named as missing, not as a head that differs
/// from itself.
#[test]
fn r16_records_removed_from_the_front_are_named_missing() {
    let (d, seg) = ledger();
    let mut frames = read_frames(&seg);
    frames.drain(..2);
    std::fs::remove_file(&seg).unwrap();
    let moved = seg.with_file_name(format!("{:020}.seg", 2));
    write_frames(&moved, &frames);
    let (code, v) = verify(d.path());
    assert_eq!(code, 1, "{v}");
    let m = &v["first_mismatch"];
    assert_eq!(m["offset"], 2, "{v}");
    assert!(
        m["what"].as_str().unwrap().contains("missing from the log")
            && m["found"]
                .as_str()
                .unwrap()
                .contains("records [0, 2) missing"),
        "{v}"
    );
}

#[test]
fn r16_swapped_records_are_named() {
    let (d, seg) = ledger();
    let mut frames = read_frames(&seg);
    frames.swap(5, 6);
    write_frames(&seg, &frames);
    let (code, v) = verify(d.path());
    assert_eq!(code, 1);
    assert_eq!(v["first_mismatch"]["offset"], 5, "{v}");
}

#[test]
fn r16_truncation_after_a_checkpoint_is_named() {
    let (d, seg) = ledger();
    let mut frames = read_frames(&seg);
    let keep = frames.len() - 3;
    frames.truncate(keep);
    write_frames(&seg, &frames);
    let (code, v) = verify(d.path());
    assert_eq!(code, 1);
    assert_eq!(v["first_mismatch"]["offset"], keep as u64, "{v}");
    assert!(
        v["first_mismatch"]["found"]
            .as_str()
            .unwrap()
            .contains("log ends"),
        "{v}"
    );
}

#[test]
fn r16_unreadable_log_exits_two() {
    let (d, seg) = ledger();
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[20] ^= 0xff; // breaks a frame checksum in the middle
    std::fs::write(&seg, bytes).unwrap();
    let (code, _) = verify(d.path());
    assert_eq!(code, 2);
}

#[test]
fn r16_export_verifies_alone_and_tampering_is_named() {
    let (d, _) = ledger();
    let file = d.path().join("chain.jsonl");
    let out = bin()
        .arg("--data")
        .arg(d.path())
        .args(["export", "--chain", "r0", "-o"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Offline: no data dir at all.
    let alone = tempfile::tempdir().unwrap();
    let copy = alone.path().join("x.jsonl");
    std::fs::copy(&file, &copy).unwrap();
    drop(d);
    let run = |f: &Path| {
        let o = bin()
            .args([
                "--data",
                "/nonexistent/agentledger",
                "--json",
                "verify",
                "--export",
            ])
            .arg(f)
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            serde_json::from_slice::<Value>(&o.stdout).unwrap_or(Value::Null),
        )
    };
    let (code, v) = run(&copy);
    assert_eq!(code, 0, "{v}");
    assert!(v["records"].as_u64().unwrap() >= 18);
    // Tamper with the 6th record's bytes.
    let text = std::fs::read_to_string(&copy).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut rec: Value = serde_json::from_str(&lines[6]).unwrap();
    let offset = rec["offset"].as_u64().unwrap();
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut bytes = b64.decode(rec["record_b64"].as_str().unwrap()).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    rec["record_b64"] = json!(b64.encode(bytes));
    lines[6] = rec.to_string();
    std::fs::write(&copy, lines.join("\n")).unwrap();
    let (code, v) = run(&copy);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["first_mismatch"]["offset"], offset, "{v}");
}

#[test]
fn r16_trail_as_of_shows_history() {
    let d = tempfile::tempdir().unwrap();
    {
        let mut l = common::Ledger::open(d.path());
        l.drive_loop("r0");
    }
    let full = bin()
        .arg("--data")
        .arg(d.path())
        .args(["--json", "trail", "r0", "--chain"])
        .output()
        .unwrap();
    let steps: Vec<Value> = String::from_utf8_lossy(&full.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let cut = steps[5]["offset"].as_u64().unwrap();
    let past = bin()
        .arg("--data")
        .arg(d.path())
        .args([
            "--json",
            "trail",
            "r0",
            "--chain",
            "--as-of",
            &cut.to_string(),
        ])
        .output()
        .unwrap();
    let then: Vec<Value> = String::from_utf8_lossy(&past.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(then.len(), 6);
    assert_eq!(then[..], steps[..6]);
}

/// The checkpoints segment and, for the partition of `seg`, the index of
/// its checkpoint frame and that checkpoint.
fn checkpoint_of(dir: &Path, seg: &Path) -> (PathBuf, usize, Value) {
    let cps = dir.join(format!("log/checkpoints/0/{:020}.seg", 0));
    let frames = read_frames(&cps);
    let p = partition_of(seg);
    let i = frames
        .iter()
        .position(|(_, body)| {
            let v: Value = serde_json::from_slice(body).unwrap();
            v["topic"] == "ledger" && v["partition"] == p
        })
        .expect("a checkpoint of the partition");
    let cp = serde_json::from_slice(&frames[i].1).unwrap();
    (cps, i, cp)
}

fn rewrite_checkpoint(cps: &Path, i: usize, cp: &Value) {
    let mut frames = read_frames(cps);
    frames[i].1 = serde_json::to_vec(cp).unwrap();
    write_frames(cps, &frames);
}

#[test]
fn r16_forged_checkpoint_head_is_named_at_its_last_record() {
    let (d, seg) = ledger();
    let (cps, i, mut cp) = checkpoint_of(d.path(), &seg);
    cp["head"] = json!("ab".repeat(32));
    rewrite_checkpoint(&cps, i, &cp);
    let (code, v) = verify(d.path());
    assert_eq!(code, 1, "{v}");
    let m = &v["first_mismatch"];
    assert_eq!(m["offset"], cp["to"].as_u64().unwrap() - 1, "{v}");
    assert!(
        m["what"].as_str().unwrap().contains("after this record"),
        "{v}"
    );
}

#[test]
fn r16_checkpoint_not_chained_to_what_came_before_is_named() {
    // A forger replaces the checkpoint's starting head and makes it
    // consistent with itself: the link no longer starts where the chain is.
    let (d, seg) = ledger();
    let (cps, i, mut cp) = checkpoint_of(d.path(), &seg);
    let forged_prev = [7u8; 32];
    let digests: Vec<[u8; 32]> = cp["digests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            hex::decode(h.as_str().unwrap())
                .unwrap()
                .try_into()
                .unwrap()
        })
        .collect();
    let from = cp["from"].as_u64().unwrap();
    cp["prev_head"] = json!(hex::encode(forged_prev));
    cp["head"] = json!(hex::encode(agentledger::audit::link_head(
        &forged_prev,
        from,
        digests.iter()
    )));
    rewrite_checkpoint(&cps, i, &cp);
    let (code, v) = verify(d.path());
    assert_eq!(code, 1, "{v}");
    let m = &v["first_mismatch"];
    assert_eq!(m["offset"], from, "{v}");
    assert!(
        m["what"].as_str().unwrap().contains("before this record"),
        "{v}"
    );
}

/// Automatic checkpoints are built from the digests of the records the
/// engine just wrote when it holds them all, and from the log otherwise
/// (after a restart): either way each is exactly what reading its span
/// back from the log gives, and the whole log verifies.
#[test]
fn r16_automatic_checkpoints_attest_exactly_what_the_log_holds() {
    use agentledger::audit::checkpoint;
    use agentledger::model::Topic;
    use sha2::{Digest, Sha256};
    let d = tempfile::tempdir().unwrap();
    // Four ledger partitions: ~300 records each before the restart, so the
    // first span of each is read back from the log; ~2,250 more after it,
    // so the second span is wholly the restarted engine's own.
    for (half, runs) in [(0, 1200), (1, 9000)] {
        let mut l = common::Ledger::open(d.path());
        if half == 0 {
            l.publish("a", "acme/x", &[], &[]);
        }
        for i in 0..runs {
            l.open_run(&format!("h{half}-{i}"), "a");
        }
    }
    let log = common::Backend::Embedded.log(d.path());
    let cps = checkpoint::read_all(log.as_ref()).unwrap();
    assert_eq!(cps.len(), 8, "two automatic checkpoints per partition");
    for (offset, cp) in cps {
        let cp = cp.unwrap();
        let topic = cp.topic().unwrap();
        assert_eq!(topic, Topic::Ledger);
        assert_eq!(cp.to - cp.from, agentledger::audit::CHECKPOINT_INTERVAL);
        // Worked out here from the records' bytes, as the chain is defined
        // (docs/decisions.md), not by the code that built the checkpoint:
        // a record's digest (checkpoints v2) is the sha256 of 0x00 and its
        // stored bytes (its RFC 9162 leaf hash), a head the sha256 of
        // prev_head ‖ from ‖ to ‖ each digest.
        assert_eq!(cp.schema, "agentledger.checkpoint.v2");
        let recs = log
            .read(topic, cp.partition, cp.from, (cp.to - cp.from) as usize)
            .unwrap();
        assert_eq!(recs.len() as u64, cp.to - cp.from);
        let mut head = Sha256::new();
        head.update(hex::decode(&cp.prev_head).unwrap());
        head.update(cp.from.to_be_bytes());
        head.update(cp.to.to_be_bytes());
        for (r, listed) in recs.iter().zip(&cp.digests) {
            let digest = Sha256::digest([&[0u8][..], &r.payload].concat());
            assert_eq!(digest.as_slice(), listed.0, "record {}", r.offset);
            head.update(digest);
        }
        assert_eq!(
            hex::encode(head.finalize()),
            cp.head,
            "checkpoint at offset {offset}"
        );
    }
    // Each partition's two checkpoints chain: the second starts where the
    // first ends, from its head.
    let cps: Vec<_> = checkpoint::read_all(log.as_ref())
        .unwrap()
        .into_iter()
        .map(|(_, c)| c.unwrap())
        .collect();
    for p in 0..4 {
        let mine: Vec<_> = cps.iter().filter(|c| c.partition == p).collect();
        assert_eq!(mine.len(), 2, "partition {p}");
        assert_eq!(mine[0].prev_head, hex::encode([0u8; 32]));
        assert_eq!(
            (mine[0].to, &mine[0].head),
            (mine[1].from, &mine[1].prev_head)
        );
    }
    drop(log);
    let (code, v) = verify(d.path());
    assert_eq!(code, 0, "{v}");
}

/// The `published` topic is derived: `verify --published` holds each event
/// against the ledger's records. An event's labels edited, an event made
/// up, and an event of a dispatched run taken away are each named; the
/// untouched topic is clean.
#[test]
fn published_events_edited_made_up_or_removed_are_named_by_verify_published() {
    let (d, _) = ledger();
    let (code, v) = common::verify_json(d.path(), &["--published"]);
    assert_eq!(code, 0, "{v}");
    assert!(v["published"].as_u64().unwrap() >= 1, "{v}");
    let seg = (0..4)
        .map(|p| d.path().join(format!("log/published/{p}/{:020}.seg", 0)))
        .find(|s| s.exists() && !read_frames(s).is_empty())
        .unwrap();
    let frames = read_frames(&seg);
    let said = |v: &Value| v["mismatches"].to_string();
    type Frames = Vec<(Vec<u8>, Vec<u8>)>;
    let with = |edit: &dyn Fn(&mut Frames)| {
        let mut f = frames.clone();
        edit(&mut f);
        write_frames(&seg, &f);
        let out = common::verify_json(d.path(), &["--published"]);
        write_frames(&seg, &frames);
        out
    };
    let (code, v) = with(&|f| {
        let mut e: Value = serde_json::from_slice(&f[0].1).unwrap();
        e["data"]["context"] = json!("edited");
        f[0].1 = serde_json::to_vec(&e).unwrap();
    });
    assert_eq!(code, 1, "{v}");
    assert!(
        said(&v).contains("/data/context is not what the ledger published"),
        "{v}"
    );
    let (code, v) = with(&|f| {
        let mut e: Value = serde_json::from_slice(&f[0].1).unwrap();
        e["id"] = json!("ae-made-up");
        e["data"]["event_id"] = json!("ae-made-up");
        f.push((f[0].0.clone(), serde_json::to_vec(&e).unwrap()));
    });
    assert_eq!(code, 1, "{v}");
    assert!(said(&v).contains("ae-made-up of run"), "{v}");
    assert!(said(&v).contains("was not published by its close"), "{v}");
    let (code, v) = with(&|f| {
        let mut e: Value = serde_json::from_slice(&f[0].1).unwrap();
        let t = e["data"]["time_ms"].as_u64().unwrap() - 365 * 86_400_000;
        e["data"]["time_ms"] = json!(t);
        e["time"] = json!("2025-01-01T00:00:00.000Z");
        f[0].1 = serde_json::to_vec(&e).unwrap();
    });
    assert_eq!(code, 1, "{v}");
    assert!(said(&v).contains("is dated before the run closed"), "{v}");
    let (code, v) = with(&|f| {
        f.remove(0);
    });
    assert_eq!(code, 1, "{v}");
    assert!(
        said(&v).contains("dispatched, is not on the published topic"),
        "{v}"
    );
    // Without --published the derived topic is not read.
    let (code, _) = common::verify_json(d.path(), &[]);
    assert_eq!(code, 0);
}
