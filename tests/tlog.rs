//! The ledger as a transparency log over HTTP (C2SP tlog-tiles,
//! tlog-checkpoint): what `serve --listen` hands to tlog clients and
//! witnesses, checked here with hashing written in the test from RFC 9162
//! (MTH over leaf hashes), not with the code under test.

mod common;

use base64::Engine as _;
use common::server::{http, start};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

type H = [u8; 32];

fn sha(parts: &[&[u8]]) -> H {
    common::sha256(parts)
}

/// RFC 9162 MTH over leaf hashes (k = the largest power of two < n).
fn mth(leaves: &[H]) -> H {
    match leaves.len() {
        0 => sha(&[]),
        1 => leaves[0],
        n => {
            let mut k = 1;
            while k * 2 < n {
                k *= 2;
            }
            sha(&[&[1], &mth(&leaves[..k]), &mth(&leaves[k..])])
        }
    }
}

fn hashes(bytes: &[u8]) -> Vec<H> {
    assert_eq!(bytes.len() % 32, 0);
    bytes.chunks(32).map(|c| c.try_into().unwrap()).collect()
}

/// The body at `path` of the server at `url`, as text.
fn text(c: &reqwest::blocking::Client, url: &str, path: &str) -> String {
    c.get(format!("{url}{path}"))
        .send()
        .unwrap()
        .text()
        .unwrap()
}

/// A ledger serving with a checkpoint key, with `runs` runs opened on its
/// one ledger partition; its verifier key.
fn serving(runs: usize, d: &std::path::Path) -> (common::server::Server, String) {
    let data = d.join("data");
    let (code, _, err) = common::cli(&data, &["key", "generate", "--name", "tlog.example"]);
    assert_eq!(code, 0, "{err}");
    let (code, vkey, err) = common::cli(&data, &["key", "show"]);
    assert_eq!(code, 0, "{err}");
    let s = start(
        &data,
        None,
        &["--checkpoint-ms", "100", "--ledger-partitions", "1"],
    );
    post_ops(
        &s.url,
        std::iter::once(json!({"op":"publish_agent","agent":"hotel","scope":"acme/travel"})).chain(
            (0..runs).map(|i| json!({"op":"open_run","run":format!("r{i}"),"agent":"hotel"})),
        ),
    );
    (s, vkey.trim().to_owned())
}

/// The checkpoint at `path` once it attests at least `size` records.
fn checkpoint_reaching(c: &reqwest::blocking::Client, url: &str, size: u64) -> (String, u64, H) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = c.get(url).send().unwrap();
        if r.status().as_u16() == 200 {
            assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
            let note = r.text().unwrap();
            let lines: Vec<&str> = note.split('\n').collect();
            let n: u64 = lines[1].parse().unwrap();
            let root: H = base64::engine::general_purpose::STANDARD
                .decode(lines[2])
                .unwrap()
                .try_into()
                .unwrap();
            if n >= size {
                return (note, n, root);
            }
        } else {
            assert_eq!(r.status().as_u16(), 404, "{}", r.text().unwrap());
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint of {size} at {url}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_ledger_serves_its_signed_checkpoints_and_tiles_for_tlog_clients() {
    let d = tempfile::tempdir().unwrap();
    let runs = 300;
    let (s, vkey) = serving(runs, d.path());
    let c = http(&s.url);
    // Each open_run is one ledger record: 300 records, a full tile and a
    // partial one.
    let (note, size, root) = checkpoint_reaching(&c, &format!("{}/checkpoint", s.url), runs as u64);
    assert_eq!(size, runs as u64);
    let origin = note.lines().next().unwrap();
    assert!(
        origin.starts_with("agentledger/tlog.example/ledger/0"),
        "{note}"
    );
    assert!(note.contains("\n\n\u{2014} tlog.example "), "{note}");
    // The same note under the partition's own prefix; the key verifies it.
    let same = text(&c, &s.url, "/v1/log/ledger/0/checkpoint");
    assert!(same.lines().nth(1).unwrap().parse::<u64>().unwrap() >= size);
    let (code, out, err) = common::cli(
        &d.path().join("data"),
        &["--server", &s.url, "verify", "--key", &vkey],
    );
    assert_eq!(code, 0, "{out}{err}");

    // Tiles: the full level-0 tile and the partial one give the root.
    let get = |path: &str| {
        let r = c.get(format!("{}{path}", s.url)).send().unwrap();
        let status = r.status().as_u16();
        (status, r.bytes().unwrap().to_vec())
    };
    let (st, full) = get("/tile/0/000");
    assert_eq!(st, 200);
    let (st, part) = get(&format!("/tile/0/001.p/{}", size - 256));
    assert_eq!(st, 200);
    let mut leaves = hashes(&full);
    assert_eq!(leaves.len(), 256);
    leaves.extend(hashes(&part));
    assert_eq!(mth(&leaves), root, "the tiles give the signed root");
    // A partial tile is a prefix of what it grows into.
    let (_, shorter) = get("/v1/log/ledger/0/tile/0/001.p/3");
    assert_eq!(shorter, part[..96]);
    // Level 1 holds the root of the full level-0 tile.
    let (st, up) = get("/tile/1/000.p/1");
    assert_eq!(st, 200);
    assert_eq!(hashes(&up), vec![mth(&leaves[..256])]);
    // Leaves are SHA-256(0x00 ‖ record bytes): the export's record of r7.
    let (code, export, err) = common::cli(
        &d.path().join("data"),
        &["--server", &s.url, "export", "--run", "r7"],
    );
    assert_eq!(code, 0, "{err}");
    let rec: Value = export
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["type"] == "record")
        .unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(rec["record_b64"].as_str().unwrap())
        .unwrap();
    let at = rec["offset"].as_u64().unwrap() as usize;
    assert_eq!(leaves[at], sha(&[&[0], &bytes]));

    // What is not there is 404 naming why; the tile tree is not readable
    // without a credential.
    for (path, why) in [
        ("/tile/0/7", "not a hash tile path"),
        ("/tile/0/002", "not held"),
        ("/tile/0/001", "not held"),
        (&format!("/tile/0/001.p/{}", size - 255), "not held"),
        ("/tile/entries/000", "not a hash tile path"),
        ("/v1/log/views/0/checkpoint", "no log views/0"),
        ("/v1/log/ledger/1/tile/0/000", "no log ledger/1"),
    ] {
        let (st, body) = get(path);
        assert_eq!(st, 404, "{path}");
        let body = String::from_utf8(body).unwrap();
        assert!(body.contains(why), "{path}: {body}");
        assert!(body.contains("not_found"), "{path}: {body}");
    }
    let anonymous = reqwest::blocking::Client::new();
    for path in ["/checkpoint", "/tile/0/000", "/v1/log"] {
        let r = anonymous.get(format!("{}{path}", s.url)).send().unwrap();
        assert_eq!(r.status().as_u16(), 401, "{path}");
    }
    // The listing names every log and where it is followed.
    let logs: Value = c
        .get(format!("{}/v1/log", s.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let logs = logs.as_array().unwrap();
    let names: Vec<String> = logs
        .iter()
        .map(|l| format!("{}/{}", l["topic"].as_str().unwrap(), l["partition"]))
        .collect();
    assert_eq!(names, ["registry/0", "ledger/0"]);
    assert_eq!(logs[1]["origin"], origin);
    assert_eq!(logs[1]["prefix"], "/v1/log/ledger/0/");
    assert!(logs[0]["size"].as_u64().unwrap() >= 1, "{logs:?}");
}

#[test]
fn tiles_are_rebuilt_with_the_views_and_served_at_once() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let (s, _) = serving(40, d.path());
    let c = http(&s.url);
    let (note, size, root) = checkpoint_reaching(&c, &format!("{}/checkpoint", s.url), 40);
    drop(s);
    // The views (tiles with them) are rebuilt from the log alone.
    let (code, _, err) = common::cli(&data, &["rebuild"]);
    assert_eq!(code, 0, "{err}");
    let s = start(&data, None, &["--ledger-partitions", "1"]);
    let c = http(&s.url);
    let r = c.get(format!("{}/checkpoint", s.url)).send().unwrap();
    assert_eq!(r.text().unwrap(), note);
    let r = c
        .get(format!("{}/tile/0/000.p/{size}", s.url))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(mth(&hashes(&r.bytes().unwrap())), root);
}

/// `agentledger witness --once` as a witness with its own directory and a
/// reader's token: exit code, the JSON lines, stderr.
fn witness_once(
    wdir: &std::path::Path,
    url: &str,
    token: &str,
    ledger_key: &str,
) -> (i32, Vec<Value>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentledger"))
        .env("AGENTLEDGER_TOKEN", token)
        .arg("--data")
        .arg(wdir)
        .args([
            "witness",
            "--once",
            "--log",
            url,
            "--ledger-key",
            ledger_key,
        ])
        .arg("--key")
        .arg(wdir.join("witness.key"))
        .arg("--state")
        .arg(wdir.join("state.json"))
        .output()
        .unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (
        out.status.code().unwrap_or(-1),
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every op answered ok, through `POST /v1/ops` as one ndjson body.
fn post_ops(url: &str, ops: impl Iterator<Item = Value>) {
    let body: Vec<String> = ops.map(|o| o.to_string()).collect();
    let r = http(url)
        .post(format!("{url}/v1/ops"))
        .header("content-type", "application/x-ndjson")
        .body(body.join("\n"))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(!r.text().unwrap().contains("\"ok\":false"));
}

#[test]
fn a_witness_cosigns_what_extends_and_refuses_a_rewritten_history() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("data");
    let (s, vkey) = serving(30, d.path());
    let c = http(&s.url);
    checkpoint_reaching(&c, &format!("{}/checkpoint", s.url), 30);
    // The witness: its own key and directory, an auditor's token.
    let wdir = d.path().join("witness");
    let (code, wkey, err) = common::cli(
        &wdir,
        &[
            "key",
            "generate",
            "--witness",
            "--name",
            "witness.example/w1",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let wkey = wkey.trim().to_owned();
    let (code, shown, _) = common::cli(&wdir, &["key", "show", "--witness"]);
    assert_eq!((code, shown.trim()), (0, wkey.as_str()));
    let (code, token, err) = common::cli(&a, &["token", "issue", "--principal", "auditor"]);
    assert_eq!(code, 0, "{err}");
    let token = token.trim().to_owned();
    // The token is a registry record: signed before anything is verified.
    checkpoint_reaching(&c, &format!("{}/v1/log/registry/0/checkpoint", s.url), 2);

    let (code, lines, err) = witness_once(&wdir, &s.url, &token, &vkey);
    assert_eq!(code, 0, "{err}");
    let cosigned: Vec<&str> = lines
        .iter()
        .map(|l| l["origin"].as_str().unwrap())
        .collect();
    assert_eq!(
        cosigned,
        [
            "agentledger/tlog.example/registry/0",
            "agentledger/tlog.example/ledger/0"
        ],
        "{lines:?}"
    );
    assert!(lines.iter().all(|l| l["cosigned"] == true));
    // Each line carries the note as cosigned, for auditors to take from
    // the witness: the ledger's signature and the witness's, over it.
    for l in &lines {
        let note = l["note"].as_str().unwrap();
        assert!(note.starts_with(l["origin"].as_str().unwrap()), "{note}");
        assert!(note.contains("\n\n\u{2014} tlog.example "), "{note}");
        assert!(
            note.ends_with('\n') && note.contains("\n\u{2014} witness.example/w1 "),
            "{note}"
        );
    }
    // The ledger keeps the cosignature and serves it with the note.
    let witnessed = text(&c, &s.url, "/v1/log/ledger/0/witnessed");
    assert!(
        witnessed.contains("\u{2014} witness.example/w1 "),
        "{witnessed}"
    );
    assert!(witnessed.starts_with("agentledger/tlog.example/ledger/0\n"));

    // verify requires it; a second witness that never cosigned fails it.
    let verify = |extra: &[&str]| {
        let mut args = vec![
            "--server",
            s.url.as_str(),
            "--json",
            "verify",
            "--key",
            vkey.as_str(),
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = common::cli(&a, &args);
        (
            code,
            serde_json::from_str::<Value>(&out).unwrap_or(Value::Null),
            err,
        )
    };
    let (code, v, err) = verify(&["--witness-key", &wkey]);
    assert_eq!(code, 0, "{v} {err}");
    let w = &v["signed"]["witnessed"];
    assert_eq!(w["required"], 1);
    assert_eq!(w["logs"][0]["log"], "ledger/0", "{v}");
    assert!(w["logs"][0]["size"].as_u64().unwrap() >= 30, "{v}");
    assert_eq!(w["logs"][0]["by"], json!(["witness.example/w1"]));
    assert_eq!(w["logs"][1]["log"], "registry/0", "{v}");
    let (code, other, _) = common::cli(
        &d.path().join("other"),
        &["key", "generate", "--witness", "--name", "w2"],
    );
    assert_eq!(code, 0);
    let (code, v, _) = verify(&["--witness-key", &wkey, "--witness-key", other.trim()]);
    assert_eq!(code, 1, "{v}");
    let first = v["first_mismatch"].to_string();
    assert!(first.contains("cosigned by 2 of the witnesses"), "{v}");
    let (code, v, _) = verify(&[
        "--witness-key",
        &wkey,
        "--witness-key",
        other.trim(),
        "--witnesses",
        "1",
    ]);
    assert_eq!(code, 0, "{v}");
    // A checkpoint key where a witness key belongs is named.
    let (code, _, err) = verify(&["--witness-key", &vkey]);
    assert_eq!(code, 2);
    assert!(err.contains("not a witness key"), "{err}");

    // What the ledger takes: its own checkpoint with a cosignature, only.
    let note = text(&c, &s.url, "/v1/log/ledger/0/checkpoint");
    let post = |body: String| {
        let r = c
            .post(format!("{}/v1/log/ledger/0/cosignatures", s.url))
            .body(body)
            .send()
            .unwrap();
        (r.status().as_u16(), r.text().unwrap())
    };
    let plain = note.lines().take(5).collect::<Vec<_>>().join("\n") + "\n";
    let (st, body) = post(plain.clone());
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("no cosignature"), "{body}");
    let (st, body) = post(plain.replace("\n30\n", "\n29\n") + "\u{2014} w x\n");
    assert_eq!(st, 400, "{body}");
    assert!(
        body.contains("does not verify") || body.contains("the note"),
        "{body}"
    );
    let (st, body) = post(format!("{plain}\u{2014} w AAAA\n"));
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("not an Ed25519 cosignature"), "{body}");

    // The ledger grows; the witness proves the extension from the tiles.
    post_ops(
        &s.url,
        (30..45).map(|i| json!({"op":"open_run","run":format!("r{i}"),"agent":"hotel"})),
    );
    let (old_note, _, _) = checkpoint_reaching(&c, &format!("{}/checkpoint", s.url), 45);
    // Anyone may post well-formed lines to a ledger not told its
    // witnesses' keys: eight of junk on the note the witness is about to
    // cosign. Posted again, nothing more is kept; the witness, posting
    // only its own line, is not crowded out.
    let served = text(&c, &s.url, "/v1/log/ledger/0/checkpoint");
    let junk: String = (0..8)
        .map(|i| {
            let sig = base64::engine::general_purpose::STANDARD.encode([i as u8; 76]);
            format!("\u{2014} junk{i} {sig}\n")
        })
        .collect();
    let (st, body) = post(format!("{served}{junk}"));
    assert_eq!((st, body.contains("\"kept\":8")), (200, true), "{body}");
    let (st, body) = post(format!("{served}{junk}"));
    assert_eq!((st, body.contains("\"kept\":0")), (200, true), "{body}");
    let (code, lines, err) = witness_once(&wdir, &s.url, &token, &vkey);
    assert_eq!(code, 0, "{err}");
    assert!(
        lines
            .iter()
            .any(|l| l["origin"] == "agentledger/tlog.example/ledger/0"
                && l["size"].as_u64().unwrap() >= 45),
        "{lines:?}"
    );
    // An export carries the cosigned checkpoint its record is proven
    // under: an auditor requires the witness offline.
    let (code, export, err) = common::cli(&a, &["--server", &s.url, "export", "--run", "r40"]);
    assert_eq!(code, 0, "{err}");
    assert!(export.contains("\"type\":\"cosigned\""), "{export}");
    let schema = |name: &str| -> Value {
        let path = format!("{}/schemas/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let mut export_schema = schema("export.json");
    export_schema["oneOf"][2]["properties"]["checkpoint"] = schema("checkpoint.json");
    let validator = jsonschema::validator_for(&export_schema).unwrap();
    for line in export.lines() {
        let l: Value = serde_json::from_str(line).unwrap();
        let errors: Vec<String> = validator.iter_errors(&l).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{line}: {errors:?}");
    }
    let verify_file = |name: &str, body: &str, extra: &[&str]| {
        let f = d.path().join(name);
        std::fs::write(&f, body).unwrap();
        let mut args = vec![
            "--json",
            "verify",
            "--export",
            f.to_str().unwrap(),
            "--key",
            &vkey,
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = common::cli(&a, &args);
        (
            code,
            serde_json::from_str::<Value>(&out).unwrap_or(json!({"stderr": err})),
        )
    };
    let (code, v) = verify_file("r40.export", &export, &["--witness-key", &wkey]);
    assert_eq!(code, 0, "{v}");
    let w = &v["signed"]["witnessed"];
    assert_eq!(w["witnessed"], 1, "{v}");
    assert_eq!(w["logs"][0]["by"], json!(["witness.example/w1"]), "{v}");
    let (code, v) = verify_file(
        "r40.export",
        &export,
        &["--witness-key", &wkey, "--witness-key", other.trim()],
    );
    assert_eq!(code, 1, "{v}");
    assert!(
        v["first_mismatch"]
            .to_string()
            .contains("not under a checkpoint 2 of the witnesses cosigned"),
        "{v}"
    );
    // Without its cosigned line, or with the cosignature cut from the
    // note, the record is not witnessed; each names the record.
    let without: String = export
        .lines()
        .filter(|l| !l.contains("\"type\":\"cosigned\""))
        .map(|l| format!("{l}\n"))
        .collect();
    let (code, v) = verify_file("r40-uncosigned.export", &without, &["--witness-key", &wkey]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["first_mismatch"]["topic"], "ledger", "{v}");
    let cut: String = export
        .lines()
        .map(|l| {
            if !l.contains("\"type\":\"cosigned\"") {
                return format!("{l}\n");
            }
            let mut c: Value = serde_json::from_str(l).unwrap();
            let note: String = c["note"]
                .as_str()
                .unwrap()
                .lines()
                .filter(|n| !n.contains("witness.example/w1"))
                .map(|n| format!("{n}\n"))
                .collect();
            c["note"] = json!(note);
            format!("{c}\n")
        })
        .collect();
    let (code, v) = verify_file("r40-cut.export", &cut, &["--witness-key", &wkey]);
    assert_eq!(code, 1, "{v}");
    assert!(
        v["first_mismatch"]
            .to_string()
            .contains("cosigned by none of them"),
        "{v}"
    );
    // Signatures alone still hold for both.
    let (code, v) = verify_file("r40-cut.export", &cut, &[]);
    assert_eq!(code, 0, "{v}");

    let old = d.path().join("old-note");
    std::fs::write(&old, &old_note).unwrap();
    drop(s);

    // The key holder rewrites history: another ledger, the same key, more
    // records — re-signed, consistent with itself.
    let b = d.path().join("rewritten");
    std::fs::create_dir_all(&b).unwrap();
    std::fs::copy(a.join("checkpoint.key"), b.join("checkpoint.key")).unwrap();
    let s2 = start(
        &b,
        None,
        &["--checkpoint-ms", "100", "--ledger-partitions", "1"],
    );
    post_ops(
        &s2.url,
        std::iter::once(json!({"op":"publish_agent","agent":"hotel","scope":"acme/travel"})).chain(
            (0..60).map(|i| json!({"op":"open_run","run":format!("forged-{i}"),"agent":"hotel"})),
        ),
    );
    let c2 = http(&s2.url);
    checkpoint_reaching(&c2, &format!("{}/checkpoint", s2.url), 60);
    let (code, t2, err) = common::cli(&b, &["token", "issue", "--principal", "auditor"]);
    assert_eq!(code, 0, "{err}");
    let (code, lines, err) = witness_once(&wdir, &s2.url, t2.trim(), &vkey);
    assert_eq!(code, 1, "{lines:?} {err}");
    let ledger = lines
        .iter()
        .find(|l| l["origin"] == "agentledger/tlog.example/ledger/0")
        .unwrap();
    assert_eq!(ledger["cosigned"], false);
    assert!(
        ledger["refused"]
            .as_str()
            .unwrap()
            .contains("history was rewritten"),
        "{ledger}"
    );
    assert!(
        err.contains("witness refuses agentledger/tlog.example/ledger/0"),
        "{err}"
    );
    // Nothing was cosigned there.
    let r = c2
        .get(format!("{}/v1/log/ledger/0/witnessed", s2.url))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    drop(s2);
    // And an auditor holding the old note catches it too.
    let (code, out, err) = common::cli(
        &b,
        &["verify", "--key", &vkey, "--since", old.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{out} {err}");
    assert!(out.contains("history was rewritten"), "{out}");
}

/// Told its witnesses' keys (`serve --witness-key`), the ledger keeps
/// only their cosignatures, each verified: no caller can post in a
/// witness's name or crowd one out with lines of its own.
#[test]
fn a_ledger_told_its_witnesses_keeps_only_their_valid_cosignatures() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let (code, _, err) = common::cli(&data, &["key", "generate", "--name", "tlog.example"]);
    assert_eq!(code, 0, "{err}");
    let (_, vkey, _) = common::cli(&data, &["key", "show"]);
    let vkey = vkey.trim().to_owned();
    let wdir = d.path().join("witness");
    let (code, wkey, err) = common::cli(&wdir, &["key", "generate", "--witness", "--name", "w1"]);
    assert_eq!(code, 0, "{err}");
    let s = start(
        &data,
        None,
        &[
            "--checkpoint-ms",
            "100",
            "--ledger-partitions",
            "1",
            "--witness-key",
            wkey.trim(),
        ],
    );
    post_ops(
        &s.url,
        std::iter::once(json!({"op":"publish_agent","agent":"hotel","scope":"acme/travel"}))
            .chain((0..5).map(|i| json!({"op":"open_run","run":format!("r{i}"),"agent":"hotel"}))),
    );
    let c = http(&s.url);
    checkpoint_reaching(&c, &format!("{}/checkpoint", s.url), 5);
    let (code, token, err) = common::cli(&data, &["token", "issue", "--principal", "auditor"]);
    assert_eq!(code, 0, "{err}");
    checkpoint_reaching(&c, &format!("{}/v1/log/registry/0/checkpoint", s.url), 2);
    let served = text(&c, &s.url, "/v1/log/ledger/0/checkpoint");
    let post = |line: String| {
        let r = c
            .post(format!("{}/v1/log/ledger/0/cosignatures", s.url))
            .body(format!("{served}{line}"))
            .send()
            .unwrap();
        (r.status().as_u16(), r.text().unwrap())
    };
    let sig = base64::engine::general_purpose::STANDARD.encode([7u8; 76]);
    let (st, body) = post(format!("\u{2014} junk {sig}\n"));
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("not a witness this ledger keeps"), "{body}");
    let (st, body) = post(format!("\u{2014} w1 {sig}\n"));
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("does not verify"), "{body}");
    // The witness itself is kept.
    let (code, lines, err) = witness_once(&wdir, &s.url, token.trim(), &vkey);
    assert_eq!(code, 0, "{err}");
    assert!(lines.iter().all(|l| l["cosigned"] == true), "{lines:?}");
    let witnessed = text(&c, &s.url, "/v1/log/ledger/0/witnessed");
    assert!(witnessed.contains("\u{2014} w1 "), "{witnessed}");
    assert!(!witnessed.contains("junk"), "{witnessed}");
}
