//! The `agentledger` binary: answers per line, exit codes, hostile input.

mod common;

use serde_json::Value;

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agentledger"))
}

fn apply(dir: &std::path::Path, input: &str, extra: &[&str]) -> (i32, Vec<Value>, String) {
    common::apply_answers(dir, input, extra)
}

const SETUP: &str = r#"{"op":"publish_agent","agent":"developer","scope":"acme/platform","listens":[],"emits":[{"event":"code.ready","context":"change","artifacts":["patch"]}]}
{"op":"open_run","run":"r1","agent":"developer"}
"#;

#[test]
fn all_ok_exits_zero() {
    let d = tempfile::tempdir().unwrap();
    let (code, answers, _) = apply(d.path(), SETUP, &[]);
    assert_eq!(code, 0);
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[1]["root"], "r1");
    assert_eq!(answers[1]["hop"], 0);
    // Keys in contract order: "ok" first.
    assert!(serde_json::to_string(&answers[0])
        .unwrap()
        .starts_with(r#"{"ok":true"#));
}

#[test]
fn hostile_lines_are_answered_and_skipped_the_rest_applies() {
    let d = tempfile::tempdir().unwrap();
    let big = format!(
        r#"{{"op":"close_run","run":"r1","status":"succeeded","summary":"{}"}}"#,
        "x".repeat(5000)
    );
    let input = format!(
        "{SETUP}{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n",
        r#"{"op":"open_run","run":"r2""#,  // malformed JSON
        r#"{"op":"launch_missiles"}"#,     // unknown op
        r#"{"op":"open_run","run":"r3"}"#, // missing field
        r#"{"op":"open_run","run":3,"agent":"developer"}"#, // wrong type
        r#"{"op":"open_run","run":"r4","agent":"nobody"}"#, // unknown agent
        r#"{"op":"close_run","run":"ghost","status":"succeeded"}"#, // unknown run
        big,                               // oversized
        r#"[1,2,3]"#,                      // not an object
        r#"{"op":"close_run","run":"r1","status":"exploded"}"#, // bad enum value
        r#"{"op":"open_run","run":"r5","agent":"developer","colour":"red"}"#, // unknown field
        r#"{"op":"close_run","run":"r1","status":"succeeded","artifacts":{"patch":"p"}}"#, // still applies
    );
    let (code, answers, _) = apply(d.path(), &input, &["--max-line-bytes", "1024"]);
    assert_eq!(code, 1);
    let codes: Vec<String> = answers
        .iter()
        .map(|a| a["error"]["code"].as_str().unwrap_or("ok").to_string())
        .collect();
    assert_eq!(
        codes,
        vec![
            "ok",
            "ok",
            "malformed_json",
            "unknown_op",
            "invalid_request",
            "invalid_request",
            "unknown_agent",
            "unknown_run",
            "line_too_long",
            "invalid_request",
            "invalid_request",
            "invalid_request",
            "ok"
        ]
    );
    for a in &answers {
        if a["ok"] == false {
            assert!(!a["error"]["message"].as_str().unwrap().is_empty());
        }
    }
    assert!(
        answers[4]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("agent"),
        "{}",
        answers[4]
    );
    assert!(
        answers[5]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("run"),
        "{}",
        answers[5]
    );
    // Nothing already written was lost: the close applied after all that.
    let (code, answers, _) = apply(
        d.path(),
        r#"{"op":"open_run","run":"r1","agent":"developer"}"#,
        &[],
    );
    assert_eq!(code, 1);
    assert_eq!(answers[0]["error"]["code"], "run_exists");
}

#[test]
fn usage_and_io_errors_exit_two() {
    let d = tempfile::tempdir().unwrap();
    let out = bin()
        .arg("--data")
        .arg(d.path())
        .arg("frobnicate")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = bin()
        .arg("--data")
        .arg(d.path())
        .args(["apply", "/no/such/file"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/file"));
}

#[test]
fn trail_and_chain_commands() {
    let d = tempfile::tempdir().unwrap();
    apply(d.path(), SETUP, &[]);
    let out = bin()
        .arg("--data")
        .arg(d.path())
        .args(["trail", "r1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout)
        .contains("opened developer v1 by a user; root r1, hop 0"));
    let out = bin()
        .arg("--data")
        .arg(d.path())
        .args(["--json", "trail", "r1"])
        .output()
        .unwrap();
    let step: Value =
        serde_json::from_slice(out.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(step["kind"], "run_opened");
    let out = bin()
        .arg("--data")
        .arg(d.path())
        .args(["trail", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = bin()
        .arg("--data")
        .arg(d.path())
        .args(["--json", "status"])
        .output()
        .unwrap();
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    let parts = status["partitions"].as_array().unwrap();
    let ends = |topic: &str| -> u64 {
        parts
            .iter()
            .filter(|p| p["topic"] == topic)
            .map(|p| p["end"].as_u64().unwrap())
            .sum()
    };
    // One publish and one opened run: one record each, all projected.
    assert_eq!((ends("registry"), ends("ledger")), (1, 1), "{status}");
    for p in parts {
        if p["topic"] == "published" {
            assert!(p["lag"].is_null(), "not projected: {p}");
        } else {
            assert_eq!(p["lag"], 0, "{p}");
            assert_eq!(p["projected"], p["end"], "{p}");
        }
    }
}

#[test]
fn corrupted_log_bytes_are_a_clear_error_and_nothing_is_cut() {
    let d = tempfile::tempdir().unwrap();
    apply(d.path(), SETUP, &[]);
    let (_, _, _) = apply(
        d.path(),
        r#"{"op":"close_run","run":"r1","status":"succeeded"}"#,
        &[],
    );
    // Damage the first ledger record of whichever partition holds r1.
    let ledger = d.path().join("log/ledger");
    let mut damaged = None;
    for p in std::fs::read_dir(&ledger).unwrap() {
        let p = p.unwrap().path();
        if !p.is_dir() {
            continue; // the partition count beside the partitions
        }
        let seg = p.join(format!("{:020}.seg", 0));
        let mut bytes = std::fs::read(&seg).unwrap();
        if bytes.len() > 40 {
            bytes[30] ^= 0xff;
            std::fs::write(&seg, &bytes).unwrap();
            damaged = Some((seg, bytes.len()));
            break;
        }
    }
    let (seg, len) = damaged.unwrap();
    let out = bin()
        .arg("--data")
        .arg(d.path())
        .args(["status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("corrupt") && err.contains("record offset 0"),
        "{err}"
    );
    assert_eq!(std::fs::metadata(&seg).unwrap().len() as usize, len);
}

/// A caller that writes one line and waits for its answer gets it at once:
/// reading ahead never waits for lines that have not arrived.
#[test]
fn a_caller_waiting_on_each_answer_gets_it_before_writing_the_next() {
    use std::io::{BufRead, BufReader, Write};
    let d = tempfile::tempdir().unwrap();
    let mut child = common::spawn_apply(d.path());
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let ops = [
        r#"{"op":"publish_agent","agent":"developer","scope":"acme/platform"}"#,
        r#"{"op":"open_run","run":"r1","agent":"developer"}"#,
        r#"{"op":"open_run","run":"r1","agent":"developer"}"#,
    ];
    let mut answers = Vec::new();
    for op in ops {
        writeln!(stdin, "{op}").unwrap();
        stdin.flush().unwrap();
        let answer = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no answer to {op} while the input stays open"));
        answers.push(serde_json::from_str::<Value>(&answer).unwrap());
    }
    drop(stdin);
    assert_eq!(child.wait().unwrap().code(), Some(1));
    assert_eq!(answers[0]["ok"], true);
    assert_eq!(answers[1]["ok"], true);
    assert_eq!(answers[2]["error"]["code"], "run_exists");
}

/// Lines already read ahead are one commit group: one sync per partition
/// written, not one per operation; decided in order (the second open of a
/// run in the same group is refused because of the first).
#[test]
fn lines_read_ahead_are_decided_in_order_and_synced_once() {
    use agentledger::apply::apply_stream;
    use agentledger::model::Topic;
    let d = tempfile::tempdir().unwrap();
    let mut l = common::Ledger::open(d.path());
    let mut input = String::from(
        r#"{"op":"publish_agent","agent":"developer","scope":"acme/platform"}
"#,
    );
    for i in 0..200 {
        input.push_str(&format!(
            "{{\"op\":\"open_run\",\"run\":\"g{i}\",\"agent\":\"developer\"}}\n"
        ));
    }
    input.push_str(r#"{"op":"open_run","run":"g0","agent":"developer"}"#);
    let before = l.engine.log().syncs();
    let mut out = Vec::new();
    let summary = apply_stream(&mut l.engine, &mut input.as_bytes(), &mut out, 1 << 20).unwrap();
    let syncs = l.engine.log().syncs() - before;
    assert_eq!((summary.ok, summary.refused), (201, 1));
    let last: Value = serde_json::from_slice(out.split(|b| *b == b'\n').nth(201).unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "run_exists");
    let partitions = (l.engine.log().partitions(Topic::Ledger)
        + l.engine.log().partitions(Topic::Registry)) as u64;
    assert!(
        syncs <= partitions + 1,
        "{syncs} syncs for 202 lines read ahead"
    );
    // Durable: a fresh open finds every run.
    drop(l);
    let l = common::Ledger::open(d.path());
    assert!(l.engine.views().run("g199").unwrap().is_some());
}

/// A file where a directory belongs (or the other way round) is named as
/// such, not left to an OS error about some path inside it.
#[test]
fn a_file_where_a_directory_belongs_is_named() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let f = file.to_str().unwrap();
    let (code, _, err) = common::cli(&file, &["status"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("that is a file, not a directory"), "{err}");
    let (code, _, err) = common::cli(
        &d.path().join("data"),
        &["apply", d.path().to_str().unwrap()],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("that is a directory, not a file of JSON lines"),
        "{err}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentledger"))
        .args(["demo", "--dir", f])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("that is a file, not a directory"), "{err}");
}

/// Views set aside twice: the earlier set-aside is kept under its own name.
#[test]
fn views_set_aside_twice_keep_the_earlier_ones() {
    let d = tempfile::tempdir().unwrap();
    apply(d.path(), SETUP, &[]);
    for round in 0..2 {
        // Views that cannot be opened at all: a file where their directory was.
        std::fs::remove_dir_all(d.path().join("views")).unwrap();
        std::fs::write(d.path().join("views"), b"not views at all").unwrap();
        let (code, _, err) = common::cli(d.path(), &["status"]);
        assert_eq!(code, 0, "round {round}: {err}");
        assert!(err.contains("set aside"), "round {round}: {err}");
    }
    let kept: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("views.set-aside"))
        .collect();
    assert_eq!(kept.len(), 2, "{kept:?}");
}
