//! Signed checkpoints against a forger who holds the log's files but not
//! the checkpoint key: the insider forgery of the hostile review (a record
//! rewritten with its body digest, its frame checksum and its checkpoint's
//! digest and head all recomputed) satisfies the hash chain, and `verify
//! --key` names it; so it does an emptied checkpoints topic, records past
//! the last signed checkpoint, records cut after one, and checkpoints
//! signed by a key other than the one the auditor holds.

mod common;

use agentledger::audit::note::SignerKey;
use agentledger::codec;
use common::frames::{read_frames, write_frames};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// A ledger signed by a key of its own, chain r0 in one partition, every
/// record checkpointed: (dir, the segment of r0, the verifier key).
fn signed_ledger() -> (tempfile::TempDir, PathBuf, String) {
    let d = tempfile::tempdir().unwrap();
    let key = SignerKey::generate("acme-prod").unwrap();
    let verifier = key.verifier().to_string();
    std::fs::write(d.path().join("checkpoint.key"), key.to_text()).unwrap();
    {
        let opts = agentledger::engine::EngineOptions {
            signer: Some(Arc::new(key)),
            ..common::fixed_clock_options()
        };
        let mut l = common::Ledger::open_with(d.path(), &common::Backend::Embedded, opts);
        l.drive_loop("r0");
        l.engine.checkpoint(true).unwrap();
    }
    let seg = (0..4)
        .map(|p| d.path().join(format!("log/ledger/{p}/{:020}.seg", 0)))
        .find(|s| read_frames(s).iter().any(|(k, _)| k == b"r0"))
        .unwrap();
    (d, seg, verifier)
}

/// The checkpoint key a test ledger keeps in its data dir.
fn signer_of(dir: &Path) -> SignerKey {
    SignerKey::parse(&std::fs::read_to_string(dir.join("checkpoint.key")).unwrap()).unwrap()
}

/// The ledger in `dir`, signing with its own checkpoint key.
fn signing_ledger(dir: &Path) -> common::Ledger {
    let opts = agentledger::engine::EngineOptions {
        signer: Some(Arc::new(signer_of(dir))),
        ..common::fixed_clock_options()
    };
    common::Ledger::open_with(dir, &common::Backend::Embedded, opts)
}

fn verify(dir: &Path, key: Option<&str>) -> (i32, Value) {
    match key {
        Some(k) => common::verify_json(dir, &["--key", k]),
        None => common::verify_json(dir, &[]),
    }
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

fn checkpoints(dir: &Path) -> PathBuf {
    dir.join(format!("log/checkpoints/0/{:020}.seg", 0))
}

/// What the mismatches say, one string.
fn said(v: &Value) -> String {
    v["mismatches"].to_string()
}

/// A record's digest as the checkpoints written now list it.
fn checkpoint_digest(bytes: &[u8]) -> [u8; 32] {
    agentledger::audit::digest_by(agentledger::audit::checkpoint::DIGEST, bytes).unwrap()
}

/// Recompute every checkpoint of the partition of `seg` from `frames` (its
/// records as a forger left them): digests, heads and — when the forger
/// holds the key — the signed notes; without the key the notes stay.
fn rechain(dir: &Path, seg: &Path, frames: &[(Vec<u8>, Vec<u8>)], signer: Option<&SignerKey>) {
    let p = partition_of(seg);
    let cps = checkpoints(dir);
    let mut cp_frames = read_frames(&cps);
    let mut prev = agentledger::audit::GENESIS;
    for (key, body) in cp_frames.iter_mut() {
        if key.starts_with(b"cosignature/") {
            continue; // Witnesses' cosignatures: the forger cannot make those.
        }
        let mut cp: Value = serde_json::from_slice(body).unwrap();
        if cp["topic"] != "ledger" || cp["partition"] != p {
            continue;
        }
        let (from, to) = (cp["from"].as_u64().unwrap(), cp["to"].as_u64().unwrap());
        let digests: Vec<[u8; 32]> = (from..to)
            .map(|o| checkpoint_digest(&frames[o as usize].1))
            .collect();
        let head = agentledger::audit::link_head(&prev, from, digests.iter());
        cp["prev_head"] = json!(hex::encode(prev));
        cp["digests"] = json!(digests.iter().map(hex::encode).collect::<Vec<_>>());
        cp["head"] = json!(hex::encode(head));
        prev = head;
        if let Some(signer) = signer {
            let mut tree = agentledger::audit::merkle::MemoryTree::new();
            for f in &frames[..to as usize] {
                tree.push(agentledger::audit::merkle::leaf_hash(&f.1));
            }
            let text = agentledger::audit::note::CheckpointBody {
                origin: agentledger::audit::note::origin(
                    signer.name(),
                    agentledger::model::Topic::Ledger,
                    p as u32,
                ),
                size: to,
                root: tree.root(),
            }
            .text();
            cp["note"] = json!(signer.sign(&text).unwrap());
        }
        *body = serde_json::to_vec(&cp).unwrap();
    }
    write_frames(&cps, &cp_frames);
}

/// A record's bytes re-encoded as caused by someone else: a valid record,
/// body digest and all.
fn reattributed(bytes: &[u8]) -> Vec<u8> {
    let rec = codec::decode(bytes).unwrap();
    let forged = codec::encode_by(
        &rec.event,
        &rec.event_id,
        &rec.chain_key,
        rec.time_ms,
        &rec.writer,
        rec.step,
        codec::Cause {
            principal: "agent:someone-else",
            span: None,
        },
    )
    .unwrap();
    assert_ne!(forged, bytes);
    forged
}

/// Record `at` of `frames`, reattributed.
fn reattribute(frames: &mut [(Vec<u8>, Vec<u8>)], at: usize) {
    frames[at].1 = reattributed(&frames[at].1);
}

#[test]
fn a_signed_ledger_verifies_with_its_key_and_says_what_the_signatures_attest() {
    let (d, _, key) = signed_ledger();
    let (code, v) = verify(d.path(), Some(&key));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["signed"]["attested"], v["records"], "{v}");
    assert!(
        v["signed"]["signed_checkpoints"].as_u64().unwrap() >= 2,
        "{v}"
    );
    // The key as a file does as well.
    let f = d.path().join("verifier.txt");
    std::fs::write(&f, &key).unwrap();
    assert_eq!(verify(d.path(), Some(f.to_str().unwrap())).0, 0);
    let (code, v) = verify(d.path(), Some("not-a-key"));
    assert_eq!(code, 2, "{v}");
    assert!(v["stderr"].as_str().unwrap().contains("--key"), "{v}");
}

/// The review's forgery: the record's envelope re-encoded (a new principal,
/// its body digest valid), the frame's CRC fresh, the checkpoint's digest
/// and head recomputed. The hash chain cannot tell; the signed root can.
/// A witness cosigns every signed checkpoint of the ledger in `dir` (as
/// `agentledger witness` hands them back); its verifier key.
fn witnessed_by_one(dir: &Path) -> String {
    use agentledger::audit::checkpoint::{append_cosigned, read_all, Cosigned};
    use agentledger::audit::note::KeyKind;
    let w = SignerKey::generate_kind("witness.example/w1", KeyKind::Witness).unwrap();
    let log = agentledger::log::embedded::EmbeddedLog::open(
        dir.join("log"),
        &agentledger::log::embedded::EmbeddedConfig::default(),
    )
    .unwrap();
    for (_, cp) in read_all(&log).unwrap() {
        let cp = cp.unwrap();
        let note = cp.note.unwrap();
        let text = &note[..note.find("\n\n").unwrap() + 1];
        let line = w.cosign(text, 1_764_806_400).unwrap();
        append_cosigned(
            &log,
            &Cosigned {
                topic: cp.topic,
                partition: cp.partition,
                size: cp.to,
                note: format!("{note}{line}"),
            },
        )
        .unwrap();
    }
    w.verifier().to_string()
}

#[test]
fn the_key_holders_rewrite_re_signed_is_caught_by_the_witnesses_cosignatures() {
    let (d, seg, key) = signed_ledger();
    let witness = witnessed_by_one(d.path());
    let with_witness =
        |dir: &Path| common::verify_json(dir, &["--key", &key, "--witness-key", &witness]);
    let (code, v) = with_witness(d.path());
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["signed"]["witnessed"]["witnessed"], v["records"], "{v}");

    // The key holder rewrites a record and re-signs every checkpoint: the
    // signatures alone are satisfied...
    let signer = signer_of(d.path());
    let mut frames = read_frames(&seg);
    reattribute(&mut frames, 3);
    write_frames(&seg, &frames);
    rechain(d.path(), &seg, &frames, Some(&signer));
    let (code, v) = verify(d.path(), Some(&key));
    assert_eq!(
        code, 0,
        "re-signed, the forgery satisfies the key alone: {v}"
    );
    // ...but the witnesses cosigned the history they saw.
    let (code, v) = with_witness(d.path());
    assert_eq!(code, 1, "{v}");
    assert!(said(&v).contains("cosigned by witness.example/w1"), "{v}");
    assert!(said(&v).contains("split view"), "{v}");

    // Dropping the cosignatures leaves the log unwitnessed.
    let cps = checkpoints(d.path());
    let kept: Vec<_> = read_frames(&cps)
        .into_iter()
        .filter(|(k, _)| !k.starts_with(b"cosignature/"))
        .collect();
    write_frames(&cps, &kept);
    let (code, v) = with_witness(d.path());
    assert_eq!(code, 1, "{v}");
    assert!(said(&v).contains("at most 0 cosigned one"), "{v}");
}

/// Records past the newest cosigned checkpoint (as after an insider cut
/// the log back to before newer cosignatures and wrote another history on
/// top) rest on the ledger's key alone: `verify --witness-key` counts and
/// says so, and with `--all-witnessed` refuses them, naming the log.
#[test]
fn records_past_the_newest_witnessed_checkpoint_are_counted_and_refused_on_request() {
    let (d, seg, key) = signed_ledger();
    let witness = witnessed_by_one(d.path());
    // A run landing in r0's partition, so every log stays witnessed up to
    // somewhere.
    let later = (0..)
        .map(|i| format!("r0-later-{i}"))
        .find(|r| {
            u64::from(agentledger::log::partition_for_key(r.as_bytes(), 4)) == partition_of(&seg)
        })
        .unwrap();
    {
        let mut l = signing_ledger(d.path());
        l.open_run(&later, "developer");
        l.engine.checkpoint(true).unwrap();
    }
    let (code, v) = common::verify_json(d.path(), &["--key", &key, "--witness-key", &witness]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["signed"]["witnessed"]["unwitnessed"], 1, "{v}");
    let (code, text, _) = common::cli(
        d.path(),
        &["verify", "--key", &key, "--witness-key", &witness],
    );
    assert_eq!(code, 0);
    assert!(
        text.contains(
            "1 records past the newest cosigned checkpoints rest on the ledger's key alone"
        ),
        "{text}"
    );
    let (code, v) = common::verify_json(
        d.path(),
        &["--key", &key, "--witness-key", &witness, "--all-witnessed"],
    );
    assert_eq!(code, 1, "{v}");
    assert!(
        said(&v).contains("past its newest witnessed checkpoint"),
        "{v}"
    );
}

#[test]
fn the_insiders_forgery_with_every_digest_recomputed_is_caught_by_the_signature() {
    let (d, seg, key) = signed_ledger();
    let mut frames = read_frames(&seg);
    reattribute(&mut frames, 3);
    write_frames(&seg, &frames);
    rechain(d.path(), &seg, &frames, None);
    let p = partition_of(&seg);

    let (code, v) = verify(d.path(), None);
    assert_eq!(
        code, 0,
        "the hash chain alone is satisfied by the forgery: {v}"
    );
    let (code, v) = verify(d.path(), Some(&key));
    assert_eq!(code, 1, "{v}");
    let m = &v["first_mismatch"];
    assert_eq!(
        (m["topic"].as_str(), m["partition"].as_u64()),
        (Some("ledger"), Some(p)),
        "{v}"
    );
    assert!(m["what"].as_str().unwrap().contains("Merkle root"), "{v}");
    assert!(m["what"].as_str().unwrap().contains("was changed"), "{v}");
}

#[test]
fn an_emptied_checkpoints_topic_leaves_every_record_unattested() {
    let (d, seg, key) = signed_ledger();
    std::fs::write(checkpoints(d.path()), b"").unwrap();
    let (code, v) = verify(d.path(), Some(&key));
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["signed"]["signed_checkpoints"], 0, "{v}");
    let m = &v["mismatches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["partition"] == partition_of(&seg) && m["topic"] == "ledger")
        .cloned()
        .unwrap_or_default();
    assert_eq!(m["offset"], 0, "{v}");
    assert!(
        m["what"]
            .as_str()
            .unwrap()
            .contains("under a signed checkpoint"),
        "{v}"
    );
}

#[test]
fn records_past_the_last_signed_checkpoint_and_records_cut_are_named() {
    let (d, seg, key) = signed_ledger();
    // A record changed after the last checkpoint: nothing signed covers it.
    let mut frames = read_frames(&seg);
    let n = frames.len();
    let extra = frames[n - 1].clone();
    frames.push(extra);
    write_frames(&seg, &frames);
    let (code, v) = verify(d.path(), Some(&key));
    assert_eq!(code, 1, "{v}");
    assert!(
        said(&v).contains(&format!("records [{n}, {})", n + 1)),
        "{v}"
    );
    // Cut: fewer records than a signature attests.
    frames.truncate(n - 2);
    write_frames(&seg, &frames);
    let (code, v) = verify(d.path(), Some(&key));
    assert_eq!(code, 1, "{v}");
    assert!(said(&v).contains("records were removed"), "{v}");
}

#[test]
fn checkpoints_signed_by_another_key_attest_nothing_to_the_auditor() {
    let (d, _, key) = signed_ledger();
    // The operator's key as the auditor knows it; the log re-signed by a
    // key of the same name the forger made.
    let forger = SignerKey::generate("acme-prod").unwrap();
    let cps = checkpoints(d.path());
    let mut frames = read_frames(&cps);
    for (_, body) in frames.iter_mut() {
        let mut cp: Value = serde_json::from_slice(body).unwrap();
        let note = cp["note"].as_str().unwrap();
        let text = &note[..note.rfind("\n\n").unwrap() + 1];
        cp["note"] = json!(forger.sign(text).unwrap());
        *body = serde_json::to_vec(&cp).unwrap();
    }
    write_frames(&cps, &frames);
    let (code, v) = verify(d.path(), Some(&key));
    assert_eq!(code, 1, "{v}");
    assert!(said(&v).contains("signature"), "{v}");
    assert_eq!(v["signed"]["signed_checkpoints"], 0, "{v}");
    // The forger's own key is not the ledger's: verifying with it proves
    // only that the forger signed.
    let (code, _) = verify(d.path(), Some(&forger.verifier().to_string()));
    assert_eq!(code, 0);
}

fn export(dir: &Path, file: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_agentledger"))
        .arg("--data")
        .arg(dir)
        .args(["export", "--chain", "r0", "-o"])
        .arg(file)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn verify_export(file: &Path, key: Option<&str>) -> (i32, Value) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agentledger"));
    c.args([
        "--data",
        "/nonexistent/agentledger",
        "--json",
        "verify",
        "--export",
    ])
    .arg(file);
    if let Some(k) = key {
        c.args(["--key", k]);
    }
    let out = c.output().unwrap();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or(json!({"stderr": String::from_utf8_lossy(&out.stderr)}));
    (out.status.code().unwrap_or(-1), v)
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// An export of a signed ledger proves every record to an auditor who has
/// only the file and the verifier key; every way of editing it fails,
/// naming the record: a line left out, a line's run, step or event id
/// changed, two records' bytes swapped, a record rewritten with the
/// checkpoint in the file recomputed to match, the note re-signed by
/// another key.
#[test]
fn a_signed_export_proves_every_record_offline_and_every_edit_fails() {
    use base64::Engine as _;
    let (d, _, key) = signed_ledger();
    let file = d.path().join("r0.jsonl");
    export(d.path(), &file);
    let (code, v) = verify_export(&file, Some(&key));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["signed"]["attested"], v["records"], "{v}");
    assert!(v["records"].as_u64().unwrap() >= 18, "{v}");
    let lines: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let records: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i]["type"] == "record")
        .collect();
    let edited = |name: &str, edit: &dyn Fn(&mut Vec<Value>)| {
        let mut copy = lines.clone();
        edit(&mut copy);
        let f = d.path().join(format!("{name}.jsonl"));
        let text: Vec<String> = copy.iter().map(|v| v.to_string()).collect();
        std::fs::write(&f, text.join("\n")).unwrap();
        f
    };
    let fails = |name: &str, f: &Path, says: &str| {
        let (code, v) = verify_export(f, Some(&key));
        assert_eq!(code, 1, "{name}: {v}");
        assert!(said(&v).contains(says), "{name}: {v}");
    };
    let r = records[4];
    fails(
        "dropped",
        &edited("dropped", &|c| {
            c.remove(r);
        }),
        "a record was left out",
    );
    fails(
        "run",
        &edited("run", &|c| c[r]["run"] = json!("r-other")),
        "run is not the record's",
    );
    fails(
        "step",
        &edited("step", &|c| {
            let s = c[r]["step"].as_u64().unwrap();
            c[r]["step"] = json!(s + 1)
        }),
        "step is not the record's",
    );
    fails(
        "event_id",
        &edited("event_id", &|c| c[r]["event_id"] = json!("ev-made-up")),
        "event_id is not the record's",
    );
    fails(
        "swapped",
        &edited("swapped", &|c| {
            let (a, b) = (records[2], records[3]);
            let tmp = c[a]["record_b64"].clone();
            c[a]["record_b64"] = c[b]["record_b64"].clone();
            c[b]["record_b64"] = tmp;
        }),
        "is not the record's",
    );

    // Cut short: the last three records gone, the rest proving itself.
    fails(
        "cut",
        &edited("cut", &|c| {
            for _ in 0..3 {
                c.remove(*records.last().unwrap() - 2);
            }
        }),
        "different number of records than its header says",
    );
    // Two lines of one run in each other's place: same records, but the
    // run's steps out of order.
    let same_run = records
        .windows(2)
        .find(|w| lines[w[0]]["run"] == lines[w[1]]["run"])
        .unwrap()
        .to_vec();
    fails(
        "reordered",
        &edited("reordered", &|c| c.swap(same_run[0], same_run[1])),
        "comes after step",
    );
    // Only the header: nothing proven is not clean.
    fails(
        "header only",
        &edited("header_only", &|c| c.truncate(1)),
        "export holds no records",
    );
    // Not an export at all: refused, saying why.
    let refused = |name: &str, f: &Path, says: &str| {
        let (code, v) = verify_export(f, Some(&key));
        assert_eq!(code, 2, "{name}: {v}");
        assert!(
            v["stderr"].as_str().unwrap_or_default().contains(says),
            "{name}: {v}"
        );
    };
    refused("empty", &edited("empty", &|c| c.clear()), "no header line");
    refused(
        "headless",
        &edited("headless", &|c| {
            c.remove(0);
        }),
        "no header line",
    );
    refused(
        "format",
        &edited("format", &|c| {
            c[0]["format"] = json!("agentledger.export.v9")
        }),
        "is not one this version reads",
    );
    refused(
        "two headers",
        &edited("two_headers", &|c| {
            let h = c[0].clone();
            c.insert(3, h)
        }),
        "a second header line",
    );

    // The insider's rewrite, carried into the export: the record re-encoded
    // and the checkpoint in the file recomputed. The hash chain in the file
    // agrees; the signed root does not.
    let rewritten = edited("rewritten", &|c| {
        let bytes = b64().decode(c[r]["record_b64"].as_str().unwrap()).unwrap();
        let forged = reattributed(&bytes);
        let digest = agentledger::audit::record_digest(&forged).unwrap();
        c[r]["record_b64"] = json!(b64().encode(&forged));
        c[r]["digest"] = json!(hex::encode(digest));
        let offset = c[r]["offset"].as_u64().unwrap();
        let p = c[r]["partition"].clone();
        for line in c.iter_mut().filter(|l| l["type"] == "checkpoint") {
            let cp = &mut line["checkpoint"];
            let (from, to) = (cp["from"].as_u64().unwrap(), cp["to"].as_u64().unwrap());
            if cp["partition"] != p || offset < from || offset >= to {
                continue;
            }
            cp["digests"][(offset - from) as usize] =
                json!(hex::encode(checkpoint_digest(&forged)));
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
            let prev: [u8; 32] = hex::decode(cp["prev_head"].as_str().unwrap())
                .unwrap()
                .try_into()
                .unwrap();
            cp["head"] = json!(hex::encode(agentledger::audit::link_head(
                &prev,
                from,
                digests.iter()
            )));
        }
    });
    let (code, v) = verify_export(&rewritten, None);
    assert_eq!(
        code, 0,
        "without the key the rewritten export agrees with itself: {v}"
    );
    fails("rewritten", &rewritten, "not in the signed tree");

    // Re-signed by a key of the same name: nothing is signed by the key
    // the auditor holds, so nothing is proven.
    let forger = SignerKey::generate("acme-prod").unwrap();
    let resigned = edited("resigned", &|c| {
        for line in c.iter_mut().filter(|l| l["type"] == "checkpoint") {
            let note = line["checkpoint"]["note"].as_str().unwrap().to_owned();
            let text = &note[..note.rfind("\n\n").unwrap() + 1];
            line["checkpoint"]["note"] = json!(forger.sign(text).unwrap());
        }
    });
    fails("resigned", &resigned, "signature");
    let (_, v) = verify_export(&resigned, Some(&key));
    assert_eq!(v["signed"]["attested"], 0, "{v}");
}

/// The notes of the partition of `seg`, oldest first, as a reader of the
/// checkpoints topic would keep them.
fn notes_of(dir: &Path, seg: &Path) -> Vec<String> {
    let p = partition_of(seg);
    read_frames(&checkpoints(dir))
        .iter()
        .map(|(_, b)| serde_json::from_slice::<Value>(b).unwrap())
        .filter(|cp| cp["topic"] == "ledger" && cp["partition"] == p)
        .map(|cp| cp["note"].as_str().unwrap().to_owned())
        .collect()
}

fn verify_since(dir: &Path, old: &str, key: &str) -> (i32, Value) {
    let f = dir.join("old-note.txt");
    std::fs::write(&f, old).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentledger"))
        .arg("--data")
        .arg(dir)
        .args(["--json", "verify", "--key", key, "--since"])
        .arg(&f)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or(json!({"stderr": String::from_utf8_lossy(&out.stderr)}));
    (out.status.code().unwrap_or(-1), v)
}

/// An auditor who kept an old checkpoint catches what no later signature
/// can hide: the operator, holding the key, rewrites a record below the
/// old size and re-signs every checkpoint. `verify --key` alone is then
/// clean — the log agrees with its new signatures — and `verify --since
/// OLD` is not.
#[test]
fn history_rewritten_and_re_signed_by_the_key_holder_fails_verify_since() {
    let (d, seg, key) = signed_ledger();
    let old = notes_of(d.path(), &seg).pop().unwrap();
    // The log grows and is checkpointed again: it extends the old one.
    {
        let mut l = signing_ledger(d.path());
        l.open_run("r0-again", "developer");
        l.engine.checkpoint(true).unwrap();
    }
    let (code, v) = verify_since(d.path(), &old, &key);
    assert_eq!(code, 0, "{v}");
    let since = &v["since"];
    assert!(
        since["new_size"].as_u64() >= since["old_size"].as_u64(),
        "{v}"
    );

    // The key holder rewrites record 2 and re-signs every checkpoint of the
    // partition over the rewritten log.
    let signer = signer_of(d.path());
    let mut frames = read_frames(&seg);
    reattribute(&mut frames, 2);
    write_frames(&seg, &frames);
    rechain(d.path(), &seg, &frames, Some(&signer));
    let (code, v) = verify(d.path(), Some(&key));
    assert_eq!(
        code, 0,
        "the rewritten, re-signed log agrees with its signatures: {v}"
    );
    let (code, v) = verify_since(d.path(), &old, &key);
    assert_eq!(code, 1, "{v}");
    assert!(
        v["since"]["fault"]
            .as_str()
            .unwrap()
            .contains("does not extend"),
        "{v}"
    );
}

/// `verify --since` is `verify --key` and the consistency proof: a record
/// forged in a partition other than the old note's fails it, as it fails
/// `verify --key`, though the note's partition still extends.
#[test]
fn verify_since_runs_every_check_of_verify_key() {
    let (d, seg, key) = signed_ledger();
    let old = notes_of(d.path(), &seg).pop().unwrap();
    // A run in another partition, signed.
    let other = {
        let mut l = signing_ledger(d.path());
        let other = (0..)
            .find_map(|i| {
                let run = format!("elsewhere-{i}");
                l.open_run(&run, "developer");
                Some(segment_of_key(d.path(), &run)).filter(|s| *s != seg)
            })
            .unwrap();
        l.engine.checkpoint(true).unwrap();
        other
    };
    let (code, v) = verify_since(d.path(), &old, &key);
    assert_eq!(code, 0, "{v}");
    let mut frames = read_frames(&other);
    let n = frames[0].1.len();
    frames[0].1[n - 3] ^= 0x01;
    write_frames(&other, &frames);
    let (code, v) = verify_since(d.path(), &old, &key);
    assert_eq!(code, 1, "{v}");
    assert!(
        v["since"]["fault"].is_null(),
        "the note's own partition extends: {v}"
    );
    assert_eq!(
        v["first_mismatch"]["partition"].as_u64(),
        Some(partition_of(&other)),
        "{v}"
    );
}

fn segment_of_key(dir: &Path, key: &str) -> PathBuf {
    (0..4)
        .map(|p| dir.join(format!("log/ledger/{p}/{:020}.seg", 0)))
        .find(|s| s.exists() && read_frames(s).iter().any(|(k, _)| k == key.as_bytes()))
        .unwrap()
}

/// `proof inclusion` and `proof consistency` print RFC 9162 proofs that
/// verify against the root the ledger signed.
#[test]
fn printed_proofs_verify_against_the_signed_root() {
    use agentledger::audit::merkle::{leaf_hash, verify_consistency, verify_inclusion, MemoryTree};
    use base64::Engine as _;
    let (d, seg, _) = signed_ledger();
    let p = partition_of(&seg).to_string();
    let frames = read_frames(&seg);
    let note = notes_of(d.path(), &seg).pop().unwrap();
    let signed =
        agentledger::audit::note::CheckpointBody::parse(&note[..note.rfind("\n\n").unwrap() + 1])
            .unwrap();
    assert_eq!(signed.size, frames.len() as u64);
    let ask = |args: &[&str]| -> Value {
        let (code, out, err) = common::cli(d.path(), args);
        assert_eq!(code, 0, "{args:?}: {err}");
        serde_json::from_str(&out).unwrap()
    };
    let hashes = |v: &Value| -> Vec<[u8; 32]> {
        v["hashes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                b64()
                    .decode(h.as_str().unwrap())
                    .unwrap()
                    .try_into()
                    .unwrap()
            })
            .collect()
    };
    let v = ask(&["proof", "inclusion", "3", "--partition", &p]);
    assert_eq!(
        b64().decode(v["root"].as_str().unwrap()).unwrap(),
        signed.root
    );
    verify_inclusion(
        &leaf_hash(&frames[3].1),
        3,
        signed.size,
        &hashes(&v),
        &signed.root,
    )
    .unwrap();
    let v = ask(&["proof", "consistency", "2", "--partition", &p]);
    let mut old = MemoryTree::new();
    for f in &frames[..2] {
        old.push(leaf_hash(&f.1));
    }
    verify_consistency(2, signed.size, &old.root(), &signed.root, &hashes(&v)).unwrap();
    let (code, _, err) = common::cli(d.path(), &["proof", "inclusion", "999", "--partition", &p]);
    assert_eq!(code, 1, "{err}");
}

/// Reading signs nothing: a damaged checkpoint key does not stop an audit
/// (`verify`, `trail`, `status`), only what signs (`checkpoint`); and a
/// private key given where the verifier key belongs is never echoed.
#[test]
fn a_damaged_checkpoint_key_stops_signing_not_reading_and_a_private_key_is_never_shown() {
    let (d, _, verifier) = signed_ledger();
    let secret = std::fs::read_to_string(d.path().join("checkpoint.key")).unwrap();
    let (code, _, err) = common::cli(d.path(), &["verify", "--key", secret.trim()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("private signing key"), "{err}");
    // PRIVATE+KEY+<name>+<hash>+<key data>: the key data is base64, which
    // has '+' of its own (a short tail of it could be in any text).
    let body = secret.trim().splitn(5, '+').nth(4).unwrap();
    assert!(body.len() > 40, "{body}");
    assert!(!err.contains(body), "the private key was shown: {err}");
    std::fs::write(d.path().join("checkpoint.key"), "garbage\n").unwrap();
    let (code, v) = verify(d.path(), Some(&verifier));
    assert_eq!(code, 0, "{v}");
    for args in [&["status"][..], &["trail", "r0"][..]] {
        let (code, _, err) = common::cli(d.path(), args);
        assert_eq!(code, 0, "{args:?}: {err}");
    }
    let (code, _, err) = common::cli(d.path(), &["checkpoint"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("checkpoint key"), "{err}");
}

/// A ledger checkpointed before it had a key: `checkpoint` after `key
/// generate` signs the trees as they stand (a checkpoint of no records
/// at each partition's end carries the note), so `verify --key` and a
/// signed export hold at once, without waiting for new records; a second
/// `checkpoint` has nothing to sign. A checkpoint of no records that does
/// not link from the head there, or claims a head other than that of no
/// records, is named by `verify`.
#[test]
fn a_key_made_after_the_records_were_checkpointed_signs_them_at_the_next_checkpoint() {
    let d = tempfile::tempdir().unwrap();
    {
        let mut l = common::Ledger::open_with(
            d.path(),
            &common::Backend::Embedded,
            common::fixed_clock_options(),
        );
        l.drive_loop("r0");
        l.engine.checkpoint(true).unwrap();
    }
    let (code, _, err) = common::cli(d.path(), &["key", "generate", "--name", "late"]);
    assert_eq!(code, 0, "{err}");
    let (_, key, _) = common::cli(d.path(), &["key", "show"]);
    let key = key.trim().to_owned();
    let (code, v) = verify(d.path(), Some(&key));
    assert_eq!(code, 1, "nothing is signed yet: {v}");
    let (code, out, err) = common::cli(d.path(), &["checkpoint"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("signed at"), "{out}");
    let (code, v) = verify(d.path(), Some(&key));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["signed"]["attested"], v["records"], "{v}");
    let (_, again, _) = common::cli(d.path(), &["checkpoint"]);
    assert!(again.contains("already attested"), "{again}");
    let file = d.path().join("r0.jsonl");
    export(d.path(), &file);
    let (code, v) = verify_export(&file, Some(&key));
    assert_eq!(code, 0, "{v}");

    // The note-bearing checkpoints forged: linked from another head, or
    // with a head that is not the head of nothing.
    let cps = checkpoints(d.path());
    let frames = read_frames(&cps);
    let empty = frames
        .iter()
        .position(|(_, b)| {
            let c: Value = serde_json::from_slice(b).unwrap();
            c["topic"] == "ledger" && c["from"] == c["to"]
        })
        .unwrap();
    for field in ["prev_head", "head"] {
        let mut forged = frames.clone();
        let mut c: Value = serde_json::from_slice(&forged[empty].1).unwrap();
        c[field] = json!("ab".repeat(32));
        forged[empty].1 = serde_json::to_vec(&c).unwrap();
        write_frames(&cps, &forged);
        let (code, v) = verify(d.path(), None);
        assert_eq!(code, 1, "{field}: {v}");
        assert!(
            said(&v).contains("checkpoint of no records"),
            "{field}: {v}"
        );
    }
    write_frames(&cps, &frames);
    assert_eq!(verify(d.path(), Some(&key)).0, 0);
}

/// The header's selection is held against the records' own bytes: a
/// chain's export with one of its runs left out whole (every line of it,
/// the count fixed to match) fails naming the run and the record that
/// opened it; another run's records under the header of a run fail; so do
/// records past the selection's `as_of`. A selection naming neither a run
/// nor a chain, and a record's partition past u32, are not read at all.
#[test]
fn an_export_must_hold_what_its_header_selected() {
    use base64::Engine as _;
    let (d, _, key) = signed_ledger();
    let file = d.path().join("r0.jsonl");
    export(d.path(), &file);
    let lines: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let runs: Vec<String> = lines
        .iter()
        .filter(|l| l["type"] == "record")
        .map(|l| l["run"].as_str().unwrap().to_owned())
        .fold(Vec::new(), |mut v, r| {
            if !v.contains(&r) {
                v.push(r);
            }
            v
        });
    assert!(runs.len() >= 3, "a chain of several runs: {runs:?}");
    let write = |name: &str, ls: &[Value]| {
        let mut ls = ls.to_vec();
        ls[0]["records"] = json!(ls.iter().filter(|l| l["type"] == "record").count());
        let f = d.path().join(format!("{name}.jsonl"));
        let text: Vec<String> = ls.iter().map(Value::to_string).collect();
        std::fs::write(&f, text.join("\n")).unwrap();
        f
    };
    for (i, gone) in runs.iter().enumerate().skip(1) {
        let kept: Vec<Value> = lines
            .iter()
            .filter(|l| l["run"].as_str() != Some(gone))
            .cloned()
            .collect();
        let (code, v) = verify_export(&write(&format!("without-{i}"), &kept), Some(&key));
        assert_eq!(code, 1, "run {gone} left out: {v}");
        assert!(
            said(&v).contains(&format!("run {gone}, which this dispatch opened")),
            "{v}"
        );
    }
    // The root itself left out.
    let kept: Vec<Value> = lines
        .iter()
        .filter(|l| l["run"].as_str() != Some("r0"))
        .cloned()
        .collect();
    let (code, v) = verify_export(&write("without-root", &kept), Some(&key));
    assert_eq!(code, 1, "{v}");
    assert!(
        said(&v).contains("run r0, whose chain the header names, has no record here"),
        "{v}"
    );

    // The header of run r0 over another run's records.
    let mut swapped: Vec<Value> = lines
        .iter()
        .filter(|l| l["type"] != "record" || l["run"].as_str() == Some(&runs[1]))
        .cloned()
        .collect();
    swapped[0]["selection"] = json!({"run": "r0", "chain": null, "as_of": null});
    let (code, v) = verify_export(&write("swapped", &swapped), Some(&key));
    assert_eq!(code, 1, "{v}");
    assert!(
        said(&v).contains(&format!(
            "a record of run {} in an export of run r0",
            runs[1]
        )),
        "{v}"
    );

    // Records past the as_of the header claims.
    let mut early = lines.clone();
    early[0]["selection"]["as_of"] = json!(0);
    let (code, v) = verify_export(&write("as-of", &early), Some(&key));
    assert_eq!(code, 1, "{v}");
    assert!(said(&v).contains("record past the export's as_of"), "{v}");

    // A registry record slipped in (it is a step of no run), with its
    // own covering checkpoint from the log.
    let registry: Vec<Value> = {
        let all = d.path().join("all.jsonl");
        let out = Command::new(env!("CARGO_BIN_EXE_agentledger"))
            .arg("--data")
            .arg(d.path())
            .args(["export", "--chain", "r0", "-o"])
            .arg(&all)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let log = agentledger::log::embedded::EmbeddedLog::open(
            d.path().join("log"),
            &agentledger::log::embedded::EmbeddedConfig::default(),
        )
        .unwrap();
        use agentledger::log::Log;
        use agentledger::model::Topic;
        let rec = log.read(Topic::Registry, 0, 0, 1).unwrap().pop().unwrap();
        let decoded = agentledger::codec::decode(&rec.payload).unwrap();
        vec![
            json!({"type":"record","topic":"registry","partition":0,"offset":0,"run":null,
            "step":0,"kind":decoded.event.kind(),"event_id":decoded.event_id,
            "digest":hex::encode(agentledger::audit::record_digest(&rec.payload).unwrap()),
            "record_b64":b64().encode(&rec.payload)}),
        ]
    };
    let mut mixed = lines.clone();
    mixed.splice(1..1, registry);
    let (code, v) = verify_export(&write("registry", &mixed), Some(&key));
    assert_eq!(code, 1, "{v}");
    assert!(
        said(&v).contains("record, of no run, in an export of runs"),
        "{v}"
    );

    // As of a point before the run named opened, its chain's export holds
    // the runs before it: that is no fault.
    let mut before = lines.clone();
    let opened_at = lines
        .iter()
        .find(|l| l["run"].as_str() == Some(&runs[2]) && l["step"] == 0)
        .unwrap()["offset"]
        .as_u64()
        .unwrap();
    before.retain(|l| l["type"] != "record" || l["offset"].as_u64().unwrap() < opened_at);
    before[0]["selection"] = json!({"run": null, "chain": runs[2], "as_of": opened_at - 1});
    let (code, v) = verify_export(&write("before", &before), Some(&key));
    assert_eq!(code, 0, "as of before it opened: {v}");

    let mut neither = lines.clone();
    neither[0]["selection"] = json!({"run": null, "chain": null});
    let (code, v) = verify_export(&write("neither", &neither), Some(&key));
    assert_eq!(code, 2, "{v}");
    assert!(
        v["stderr"]
            .as_str()
            .unwrap()
            .contains("selection names neither"),
        "{v}"
    );
    let mut wide = lines.clone();
    let r = wide.iter().position(|l| l["type"] == "record").unwrap();
    wide[r]["partition"] = json!(wide[r]["partition"].as_u64().unwrap() + (1u64 << 32));
    let (code, v) = verify_export(&write("wide", &wide), Some(&key));
    assert_eq!(code, 2, "{v}");
    assert!(
        v["stderr"]
            .as_str()
            .unwrap()
            .contains("without a partition number"),
        "{v}"
    );
}

/// A key replaced: the new key signs the trees as they stand at the next
/// `checkpoint`; `verify --key NEW` is clean (the old key's notes attest
/// nothing to it and are counted, not faulted), the old key still verifies
/// what it signed, and an export proves every record into a tree the new
/// key signed. (A note of the key's own name whose signature does not
/// verify stays a fault: `checkpoints_signed_by_another_key_…`.)
#[test]
fn a_replaced_key_signs_the_trees_and_the_old_notes_are_no_fault() {
    let (d, _, old_key) = signed_ledger();
    std::fs::rename(d.path().join("checkpoint.key"), d.path().join("old.key")).unwrap();
    let (code, _, err) = common::cli(d.path(), &["key", "generate", "--name", "acme-prod-2"]);
    assert_eq!(code, 0, "{err}");
    let (_, new_key, _) = common::cli(d.path(), &["key", "show"]);
    let new_key = new_key.trim().to_owned();
    let (code, out, err) = common::cli(d.path(), &["checkpoint"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("signed at"), "{out}");
    let (code, v) = verify(d.path(), Some(&new_key));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["signed"]["attested"], v["records"], "{v}");
    assert!(v["signed"]["other_keys"].as_u64().unwrap() > 0, "{v}");
    let (code, v) = verify(d.path(), Some(&old_key));
    assert_eq!(code, 0, "{v}");
    let file = d.path().join("r0.jsonl");
    export(d.path(), &file);
    let (code, v) = verify_export(&file, Some(&new_key));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["signed"]["attested"], v["records"], "{v}");
}
