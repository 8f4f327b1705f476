//! Tests of the embedded log: tears, damage, rolls, reopen and concurrency.

use super::*;
use crate::log::embedded::frame::encode_frame;
use std::fs::OpenOptions;
use std::io::Write;

fn open(dir: &Path) -> EmbeddedLog {
    EmbeddedLog::open(dir, &EmbeddedConfig::default()).unwrap()
}

fn open_err(r: Result<EmbeddedLog, LogError>) -> String {
    match r {
        Err(e) => e.to_string(),
        Ok(_) => panic!("opened"),
    }
}

#[test]
fn a_group_syncs_every_topic_premises_first() {
    let at = |t: Topic| SYNC_ORDER.iter().position(|x| *x == t).unwrap();
    for t in Topic::ALL {
        assert!(SYNC_ORDER.contains(&t), "{t:?} is never synced");
    }
    assert!(at(Topic::Registry) < at(Topic::Ledger));
    assert!(at(Topic::Published) < at(Topic::Ledger));
    assert!(at(Topic::Ledger) < at(Topic::Checkpoints));
}

fn seg0(dir: &Path) -> PathBuf {
    dir.join("registry/0").join(format!("{:020}.seg", 0))
}

#[test]
fn append_read_reopen() {
    let d = tempfile::tempdir().unwrap();
    let log = open(d.path());
    let recs: Vec<_> = (0..10)
        .map(|i| (b"k".to_vec(), format!("v{i}").into_bytes()))
        .collect();
    let pos = log.append(Topic::Registry, &recs).unwrap();
    assert_eq!(pos.last(), Some(&(0, 9)));
    drop(log);
    let log = open(d.path());
    let got = log.read(Topic::Registry, 0, 3, 100).unwrap();
    assert_eq!(got.len(), 7);
    assert_eq!(got[0].offset, 3);
    assert_eq!(got[0].payload, b"v3");
    assert_eq!(log.end_offset(Topic::Registry, 0).unwrap(), 10);
}

#[test]
fn torn_tail_is_cut_and_never_served() {
    let d = tempfile::tempdir().unwrap();
    let log = open(d.path());
    log.append(Topic::Registry, &[(b"k".to_vec(), b"one".to_vec())])
        .unwrap();
    log.append(Topic::Registry, &[(b"k".to_vec(), b"two".to_vec())])
        .unwrap();
    drop(log);
    // Simulate a crash mid-write: half of a third frame.
    let mut frame = Vec::new();
    encode_frame(b"k", b"three-three-three", &mut frame);
    let mut f = OpenOptions::new()
        .append(true)
        .open(seg0(d.path()))
        .unwrap();
    f.write_all(&frame[..frame.len() / 2]).unwrap();
    drop(f);
    let log = open(d.path());
    assert_eq!(log.end_offset(Topic::Registry, 0).unwrap(), 2);
    let got = log.read(Topic::Registry, 0, 0, 10).unwrap();
    assert_eq!(got.len(), 2);
    // The log keeps working after the cut.
    log.append(Topic::Registry, &[(b"k".to_vec(), b"three".to_vec())])
        .unwrap();
    drop(log);
    let log = open(d.path());
    let got = log.read(Topic::Registry, 0, 0, 10).unwrap();
    assert_eq!(got[2].payload, b"three");
}

/// Three registry records, a checkpoint attesting the first
/// `attested`, and the last frame then cut short as a tear would cut
/// it; the segment and its length after the cut.
fn torn_after_checkpoint(dir: &Path, attested: u64) -> (PathBuf, u64) {
    let log = open(dir);
    for i in 0..3 {
        log.append(
            Topic::Registry,
            &[(b"k".to_vec(), format!("rec{i}").into_bytes())],
        )
        .unwrap();
    }
    let cp = serde_json::json!({"topic":"registry","partition":0,"from":0,"to":attested});
    log.append(
        Topic::Checkpoints,
        &[(b"registry/0".to_vec(), cp.to_string().into_bytes())],
    )
    .unwrap();
    drop(log);
    let seg = seg0(dir);
    let len = std::fs::metadata(&seg).unwrap().len() - 3;
    OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len)
        .unwrap();
    (seg, len)
}

#[test]
fn a_tail_a_checkpoint_attests_is_damage_not_a_tear() {
    let d = tempfile::tempdir().unwrap();
    let (seg, len) = torn_after_checkpoint(d.path(), 3);
    let m = open_err(EmbeddedLog::open(d.path(), &EmbeddedConfig::default()));
    assert!(
        m.contains("a checkpoint attests registry/0 up to offset 2"),
        "{m}"
    );
    assert!(m.contains("record offset 2"), "{m}");
    assert_eq!(
        std::fs::metadata(&seg).unwrap().len(),
        len,
        "nothing was cut"
    );
    // Read-only, the intact records are still there to read.
    let ro = EmbeddedLog::open_read_only(d.path(), &EmbeddedConfig::default()).unwrap();
    assert_eq!(ro.end_offset(Topic::Registry, 0).unwrap(), 2);
    // A tear past what the checkpoints attest is cut as before.
    let d2 = tempfile::tempdir().unwrap();
    torn_after_checkpoint(d2.path(), 2);
    assert_eq!(open(d2.path()).end_offset(Topic::Registry, 0).unwrap(), 2);
}

#[test]
fn a_partition_directory_added_or_lost_is_named_not_counted() {
    let d = tempfile::tempdir().unwrap();
    let config = EmbeddedConfig::default();
    let log = open(d.path());
    let n = log.partitions(Topic::Ledger);
    log.append(Topic::Ledger, &[(b"chain-a".to_vec(), b"r".to_vec())])
        .unwrap();
    drop(log);
    assert_eq!(
        std::fs::read_to_string(d.path().join("ledger/partitions")).unwrap(),
        format!("{n}\n")
    );
    // A stray directory: not a fifth partition.
    let stray = d.path().join(format!("ledger/{n}"));
    std::fs::create_dir(&stray).unwrap();
    let m = open_err(EmbeddedLog::open(d.path(), &config));
    assert!(
        m.contains(&format!("directories [{n}] are not its partitions")),
        "{m}"
    );
    let m = open_err(EmbeddedLog::open_read_only(d.path(), &config));
    assert!(m.contains("are not its partitions"), "{m}");
    std::fs::remove_dir(&stray).unwrap();
    // A lost one: not one partition fewer.
    let last = d.path().join(format!("ledger/{}", n - 1));
    let moved = d.path().join("moved");
    std::fs::rename(&last, &moved).unwrap();
    let m = open_err(EmbeddedLog::open(d.path(), &config));
    assert!(
        m.contains(&format!("partition directories [{}] are missing", n - 1)),
        "{m}"
    );
    std::fs::rename(&moved, &last).unwrap();
    assert_eq!(open(d.path()).partitions(Topic::Ledger), n);
    // A log from before the count was kept: counted once, then kept.
    std::fs::remove_file(d.path().join("ledger/partitions")).unwrap();
    assert_eq!(open(d.path()).partitions(Topic::Ledger), n);
    assert!(d.path().join("ledger/partitions").exists());
}

#[test]
fn damage_in_the_middle_is_an_error_not_a_cut() {
    let d = tempfile::tempdir().unwrap();
    let log = open(d.path());
    for i in 0..3 {
        log.append(
            Topic::Registry,
            &[(b"k".to_vec(), format!("rec{i}").into_bytes())],
        )
        .unwrap();
    }
    drop(log);
    let path = seg0(d.path());
    let mut bytes = fs::read(&path).unwrap();
    let len_before = bytes.len();
    bytes[HEADER + 6] ^= 0xff; // inside the first frame's body
    fs::write(&path, &bytes).unwrap();
    let err = EmbeddedLog::open(d.path(), &EmbeddedConfig::default())
        .err()
        .expect("corruption must fail the open");
    let msg = err.to_string();
    assert!(msg.contains("record offset 0"), "{msg}");
    assert_eq!(fs::read(&path).unwrap().len(), len_before, "nothing cut");
}

#[test]
fn damaged_last_record_is_not_mistaken_for_a_tear() {
    let d = tempfile::tempdir().unwrap();
    let log = open(d.path());
    log.append(Topic::Registry, &[(b"k".to_vec(), b"only-record".to_vec())])
        .unwrap();
    drop(log);
    let path = seg0(d.path());
    let mut bytes = fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n - 2] ^= 0x01;
    fs::write(&path, &bytes).unwrap();
    assert!(EmbeddedLog::open(d.path(), &EmbeddedConfig::default()).is_err());
    assert_eq!(fs::read(&path).unwrap().len(), n);
}

#[test]
fn zero_filled_tail_is_a_tear() {
    let d = tempfile::tempdir().unwrap();
    let log = open(d.path());
    log.append(Topic::Registry, &[(b"k".to_vec(), b"kept".to_vec())])
        .unwrap();
    drop(log);
    let path = seg0(d.path());
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(&[0u8; 4096]).unwrap();
    drop(f);
    let log = open(d.path());
    assert_eq!(log.end_offset(Topic::Registry, 0).unwrap(), 1);
}

#[test]
fn segments_roll_and_read_across() {
    let d = tempfile::tempdir().unwrap();
    let cfg = EmbeddedConfig {
        segment_roll_bytes: 200,
        ..Default::default()
    };
    let log = EmbeddedLog::open(d.path(), &cfg).unwrap();
    for i in 0..50 {
        log.append(
            Topic::Registry,
            &[(b"k".to_vec(), format!("value-{i:04}").into_bytes())],
        )
        .unwrap();
    }
    drop(log);
    let log = EmbeddedLog::open(d.path(), &cfg).unwrap();
    let got = log.read(Topic::Registry, 0, 0, 1000).unwrap();
    assert_eq!(got.len(), 50);
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.offset, i as u64);
        assert_eq!(r.payload, format!("value-{i:04}").into_bytes());
    }
    assert!(fs::read_dir(d.path().join("registry/0")).unwrap().count() > 2);
}

#[test]
fn same_key_same_partition_in_order() {
    let d = tempfile::tempdir().unwrap();
    let log = open(d.path());
    let recs: Vec<_> = (0..20)
        .map(|i| (format!("chain-{}", i % 3).into_bytes(), vec![i as u8]))
        .collect();
    let pos = log.append(Topic::Ledger, &recs).unwrap();
    // FNV-1a of the key, pinned: placement must not change between
    // builds, or a chain would be split across partitions.
    let expected = [3u32, 0, 1];
    for (i, (p, _)) in pos.iter().enumerate() {
        assert_eq!(*p, expected[i % 3], "chain-{}", i % 3);
    }
    for (chain, &p) in expected.iter().enumerate() {
        let got: Vec<u8> = log
            .read(Topic::Ledger, p, 0, 100)
            .unwrap()
            .into_iter()
            .filter(|r| r.key == format!("chain-{chain}").into_bytes())
            .map(|r| r.payload[0])
            .collect();
        let want: Vec<u8> = (0..20u8).filter(|i| *i as usize % 3 == chain).collect();
        assert_eq!(got, want, "chain-{chain} in append order");
    }
}

#[test]
fn concurrent_appends_all_land() {
    let d = tempfile::tempdir().unwrap();
    let log = Arc::new(open(d.path()));
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    log.append(Topic::Registry, &[(b"k".to_vec(), vec![t, i])])
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(log.end_offset(Topic::Registry, 0).unwrap(), 200);
    assert_eq!(log.read(Topic::Registry, 0, 0, 1000).unwrap().len(), 200);
}

/// Bytes in the segment files of one topic's partitions.
fn topic_bytes(dir: &Path, topic: Topic) -> u64 {
    let mut n = 0;
    for p in std::fs::read_dir(dir.join(topic.name())).unwrap() {
        let p = p.unwrap().path();
        if p.is_dir() {
            for f in std::fs::read_dir(&p).unwrap() {
                n += f.unwrap().metadata().unwrap().len();
            }
        }
    }
    n
}

#[test]
fn a_group_is_written_when_sealed_and_visible_when_its_sync_ends() {
    let d = tempfile::tempdir().unwrap();
    let log = Arc::new(open(d.path()));
    let recs = |from: usize, n: usize| -> Vec<(Vec<u8>, Vec<u8>)> {
        (from..from + n)
            .map(|i| (b"k".to_vec(), format!("v{i}").into_bytes()))
            .collect()
    };
    let p = log.partition_of(Topic::Registry, b"k");
    let end = || log.end_offset(Topic::Registry, p).unwrap();

    log.begin_group();
    let first = log.append(Topic::Registry, &recs(0, 3)).unwrap();
    assert_eq!(first, vec![(p, 0), (p, 1), (p, 2)], "offsets given at once");
    assert_eq!(
        topic_bytes(d.path(), Topic::Registry),
        0,
        "nothing written yet"
    );
    let sync = log.seal_group().unwrap();
    let written = topic_bytes(d.path(), Topic::Registry);
    assert!(written > 0, "sealed: written");
    assert_eq!(end(), 0, "not visible before its sync");

    // The next group is decided while the first syncs, on another thread:
    // its records get the offsets after the first's, and that sync makes
    // none of them visible, nor are they in the file to be synced.
    log.begin_group();
    let syncing = std::thread::spawn(move || sync.wait());
    let second = log.append(Topic::Registry, &recs(3, 2)).unwrap();
    assert_eq!(second, vec![(p, 3), (p, 4)]);
    syncing.join().unwrap().unwrap();
    assert_eq!(end(), 3);
    assert_eq!(topic_bytes(d.path(), Topic::Registry), written);
    assert_eq!(log.read(Topic::Registry, p, 0, 100).unwrap().len(), 3);

    log.seal_group().unwrap().wait().unwrap();
    assert_eq!(end(), 5);
    // An append outside a group after one: written behind it, synced.
    assert_eq!(
        log.append(Topic::Registry, &recs(5, 1)).unwrap(),
        vec![(p, 5)]
    );
    drop(log);
    let log = open(d.path());
    let got = log.read(Topic::Registry, p, 0, 100).unwrap();
    let payloads: Vec<String> = got
        .iter()
        .map(|r| String::from_utf8(r.payload.clone()).unwrap())
        .collect();
    assert_eq!(payloads, ["v0", "v1", "v2", "v3", "v4", "v5"]);
}

#[test]
fn an_oversized_record_in_a_group_is_refused_at_once_and_the_rest_stands() {
    let d = tempfile::tempdir().unwrap();
    let log = open(d.path());
    log.begin_group();
    log.append(Topic::Registry, &[(b"k".to_vec(), b"a".to_vec())])
        .unwrap();
    let big = vec![0u8; MAX_FRAME_BYTES + 1];
    let err = log
        .append(Topic::Registry, &[(b"k".to_vec(), big)])
        .unwrap_err();
    assert!(matches!(err, LogError::TooLarge { .. }), "{err}");
    log.append(Topic::Registry, &[(b"k".to_vec(), b"b".to_vec())])
        .unwrap();
    log.end_group().unwrap();
    let p = log.partition_of(Topic::Registry, b"k");
    let got = log.read(Topic::Registry, p, 0, 10).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].offset, got[1].offset), (0, 1), "no offset skipped");
}

/// Threads of this process with this name.
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter(|t| {
            let comm = t.as_ref().unwrap().path().join("comm");
            std::fs::read_to_string(comm).is_ok_and(|c| c.trim() == name)
        })
        .count()
}

#[test]
fn a_groups_partitions_of_one_topic_sync_together_on_helpers_kept_for_the_next() {
    let d = tempfile::tempdir().unwrap();
    let log = open(d.path());
    let parts = log.partitions(Topic::Ledger);
    assert!(parts >= 4);
    // One key per ledger partition.
    let keys: Vec<Vec<u8>> = (0..parts)
        .map(|p| {
            (0u32..)
                .map(|i| format!("run-{i}").into_bytes())
                .find(|k| log.partition_of(Topic::Ledger, k) == p)
                .unwrap()
        })
        .collect();
    for round in 0..3u64 {
        let syncs = log.syncs();
        log.begin_group();
        log.append(Topic::Registry, &[(b"agent".to_vec(), b"v".to_vec())])
            .unwrap();
        for k in &keys {
            log.append(Topic::Ledger, &[(k.clone(), b"e".to_vec())])
                .unwrap();
        }
        log.seal_group().unwrap().wait().unwrap();
        assert_eq!(
            log.syncs() - syncs,
            1 + parts as u64,
            "one sync per partition"
        );
        for p in 0..parts {
            assert_eq!(log.end_offset(Topic::Ledger, p).unwrap(), round + 1);
        }
        assert_eq!(log.end_offset(Topic::Registry, 0).unwrap(), round + 1);
    }
    // Helpers for the partitions beyond the first, kept between groups
    // (tests run in parallel in this process: at most the ones of the
    // other tests' logs besides).
    let helpers = threads_named("agentledger-fsy");
    assert!(helpers >= parts as usize - 1, "{helpers} helper threads");
}

/// One record to append.
fn one(key: &str, payload: &str) -> [(Vec<u8>, Vec<u8>); 1] {
    [(key.as_bytes().to_vec(), payload.as_bytes().to_vec())]
}

fn payloads(log: &EmbeddedLog, topic: Topic, p: u32) -> Vec<String> {
    log.read(topic, p, 0, 100)
        .unwrap()
        .iter()
        .map(|r| String::from_utf8(r.payload.clone()).unwrap())
        .collect()
}

#[test]
fn a_close_and_the_events_it_lets_out_in_one_group_become_durable_in_that_order() {
    let d = tempfile::tempdir().unwrap();
    let log = open(d.path());
    let rec = |v: &str| one("run-1", v);
    let lp = log.partition_of(Topic::Ledger, b"run-1");
    let pp = log.partition_of(Topic::Published, b"run-1");

    log.begin_group();
    log.append(Topic::Ledger, &rec("close")).unwrap();
    // The run's event stands on its close; the dispatch note on the event.
    log.append(Topic::Published, &rec("event")).unwrap();
    log.append(Topic::Ledger, &rec("dispatched")).unwrap();
    let sync = log.seal_group().unwrap();
    assert!(
        topic_bytes(d.path(), Topic::Ledger) > 0,
        "the close written"
    );
    assert_eq!(
        topic_bytes(d.path(), Topic::Published),
        0,
        "the event must not reach its file before the close is durable"
    );
    // The next group, decided meanwhile, numbers after the held records.
    log.begin_group();
    assert_eq!(log.append(Topic::Ledger, &rec("next")).unwrap(), [(lp, 2)]);
    sync.wait().unwrap();
    let journal = log.journal.lock().unwrap().clone();
    assert_eq!(
        journal,
        [
            (format!("ledger/{lp}"), 1),
            (format!("published/{pp}"), 1),
            (format!("ledger/{lp}"), 2),
        ],
        "close, then event, then the note"
    );
    log.end_group().unwrap();
    drop(log);
    let log = open(d.path());
    assert_eq!(
        payloads(&log, Topic::Ledger, lp),
        ["close", "dispatched", "next"]
    );
    assert_eq!(payloads(&log, Topic::Published, pp), ["event"]);
}

#[test]
fn records_held_for_a_later_phase_are_never_overtaken() {
    let d = tempfile::tempdir().unwrap();
    let log = open(d.path());
    let rec = |v: &str| one("run-1", v);
    log.begin_group();
    log.append(Topic::Ledger, &rec("close")).unwrap();
    log.append(Topic::Published, &rec("event")).unwrap();
    let sync = log.seal_group().unwrap();
    // Outside a group, an append would take the held event's offset.
    let err = log.append(Topic::Published, &rec("other")).unwrap_err();
    assert!(
        err.to_string().contains("sealed group's records wait"),
        "{err}"
    );
    // A sealed group dropped unwaited never wrote what it held: the log
    // refuses to seal past it rather than shift offsets already given.
    drop(sync);
    log.begin_group();
    log.append(Topic::Published, &rec("later")).unwrap();
    let err = match log.seal_group() {
        Err(e) => e.to_string(),
        Ok(_) => panic!("sealed past a lost group"),
    };
    assert!(err.contains("never written"), "{err}");
    let pp = log.partition_of(Topic::Published, b"run-1");
    assert_eq!(log.end_offset(Topic::Published, pp).unwrap(), 0);
}

#[test]
fn appends_in_sync_order_stay_one_phase() {
    let d = tempfile::tempdir().unwrap();
    let log = open(d.path());
    let rec = |v: &str| one("k", v);
    log.begin_group();
    for t in [
        Topic::Registry,
        Topic::Published,
        Topic::Ledger,
        Topic::Ledger,
    ] {
        log.append(t, &rec("x")).unwrap();
    }
    let syncs = log.syncs();
    log.seal_group().unwrap().wait().unwrap();
    assert_eq!(log.syncs() - syncs, 3, "one sync per partition, one phase");
    // A registry record after a ledger one may stand on it: a new phase.
    log.begin_group();
    log.append(Topic::Ledger, &rec("y")).unwrap();
    log.append(Topic::Registry, &rec("y")).unwrap();
    log.seal_group().unwrap().wait().unwrap();
    let journal = log.journal.lock().unwrap().clone();
    let lp = log.partition_of(Topic::Ledger, b"k");
    assert_eq!(
        journal[journal.len() - 2..],
        [(format!("ledger/{lp}"), 3), ("registry/0".to_string(), 2)]
    );
}
