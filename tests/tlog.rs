//! The ledger as a transparency log over HTTP (C2SP tlog-tiles,
//! tlog-checkpoint): what `serve --listen` hands to tlog clients and
//! witnesses, checked here with hashing written in the test from RFC 9162
//! (MTH over leaf hashes), not with the code under test.

mod common;

use base64::Engine as _;
use common::server::{http, start};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};

type H = [u8; 32];

fn sha(parts: &[&[u8]]) -> H {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
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
    let c = http(&s.url);
    let mut body =
        vec![json!({"op":"publish_agent","agent":"hotel","scope":"acme/travel"}).to_string()];
    for i in 0..runs {
        body.push(json!({"op":"open_run","run":format!("r{i}"),"agent":"hotel"}).to_string());
    }
    let r = c
        .post(format!("{}/v1/ops", s.url))
        .header("content-type", "application/x-ndjson")
        .body(body.join("\n"))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(!r.text().unwrap().contains("\"ok\":false"));
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
    let same = c
        .get(format!("{}/v1/log/ledger/0/checkpoint", s.url))
        .send()
        .unwrap()
        .text()
        .unwrap();
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
