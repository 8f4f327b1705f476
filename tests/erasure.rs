//! Erasure without breaking verification (seed 000 §6): a task's context
//! is sealed with a key of its own before it reaches the log or the views,
//! so no plaintext of it is at rest anywhere under the data dir; once the
//! key is deleted (`forget_task`, or its time to live at `gc`) the trail
//! says "content erased at …", the task refuses further use, and `verify`
//! (signed too) and `rebuild` stay clean — the Merkle leaves are over the
//! sealed bytes.

mod common;

use serde_json::{json, Value};
use std::path::Path;

const QUERY: &str = "SECRET-QUERY-7f3a9c";
const SUBTASK: &str = "SECRET-SUBTASK-19bd44";
const REASON: &str = "SECRET-REASON-55e1aa";
const BLOB: &str = "SECRET-BLOB-c0ffee42";

/// The ContextURI of `BLOB` once put.
fn blob_uri() -> String {
    format!(
        "cas://sha256/{}",
        hex::encode(common::sha256(&[BLOB.as_bytes()]))
    )
}

fn ctx(agent: &str, sub: &str) -> Value {
    json!({
        "AgentID": format!("id-{agent}"), "AgentName": agent, "SubTaskID": sub, "SubTaskName": SUBTASK,
        "Dependencies": [], "ContextItems": [{"ContextID": "doc", "ContextType": "text", "MediaType": "text/plain",
            "ContextURI": blob_uri(), "Description": "the doc", "Priority": "reference_only"}],
        "todoItems": [{"itemID": "i1", "description": SUBTASK}],
        "EvaluationPolicy": {"SuccessCriteria": [{"CriterionID": "c1", "Description": "ok", "Required": true}], "ConfidenceThreshold": 0.8}
    })
}

fn done(sent: &Value) -> Value {
    let mut r = sent.clone();
    r["ItemStateUpdates"] = json!([{"itemID": "i1", "state": 1}]);
    r["KeyInformation"] = json!([{"itemID": "i1", "outputabstract": SUBTASK}]);
    r["EvaluationResult"] = json!({"Status": "passed", "Confidence": 0.9,
        "CriterionResults": [{"CriterionID": "c1", "Status": "passed", "EvidenceRefs": [], "TraceRefs": []}]});
    r
}

/// A task `task` of master run `run`, one subtask sent, returned and
/// accepted, every body carrying the secrets.
fn task_ops(task: &str, run: &str) -> Vec<Value> {
    let sent = ctx("hotel", "h1");
    vec![
        json!({"op":"open_run","run":run,"agent":"master"}),
        json!({"op":"open_task","task":task,"run":run,"task_context":{
            "TaskID":"T1","UserQuery":QUERY,"TaskName":"trip","TaskDescription":"d","GoalStatus":[],"OverallStatus":"open"}}),
        json!({"op":"put_blob","task":task,"content":BLOB,"ttl_s":3600}),
        json!({"op":"send_context","task":task,"run":run,"mode":"async","agent_context":sent}),
        json!({"op":"return_context","task":task,"agent":"hotel","agent_context":done(&sent)}),
        json!({"op":"evaluate","task":task,"run":run,"subtask":"s1","decision":"accepted","reason":REASON}),
    ]
}

fn apply(dir: &Path, ops: &[Value], extra: &[&str]) -> Vec<Value> {
    let input: Vec<String> = ops.iter().map(Value::to_string).collect();
    let (code, answers, err) = common::apply_answers(dir, &(input.join("\n") + "\n"), extra);
    assert_eq!(code, 0, "{answers:?} {err}");
    answers
}

fn trail(dir: &Path, run: &str, json: bool) -> String {
    let mut args = vec!["trail", run];
    if json {
        args.insert(0, "--json");
    }
    let (code, out, err) = common::cli(dir, &args);
    assert_eq!(code, 0, "{err}");
    out
}

#[test]
fn forgetting_a_task_erases_its_context_everywhere_and_verify_stays_clean() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let (code, vkey, err) = common::cli(dir, &["key", "generate", "--name", "erasure"]);
    assert_eq!(code, 0, "{err}");
    let vkey = vkey.trim().to_owned();
    let mut ops = vec![
        json!({"op":"publish_agent","agent":"master","scope":"acme/travel"}),
        json!({"op":"publish_agent","agent":"hotel","scope":"acme/travel"}),
    ];
    ops.extend(task_ops("t1", "m1"));
    let answers = apply(dir, &ops, &[]);
    assert!(answers.iter().all(|a| a["ok"] == true), "{answers:?}");
    // Signed while the context could still be read.
    let (code, _, err) = common::cli(dir, &["checkpoint"]);
    assert_eq!(code, 0, "{err}");

    // Readable while the key is held; at rest nowhere in clear.
    let before = trail(dir, "m1", true);
    assert!(before.contains(QUERY) && before.contains(SUBTASK) && before.contains(REASON));
    for secret in [QUERY, SUBTASK, REASON] {
        assert_eq!(
            common::holding(dir, secret),
            Vec::<String>::new(),
            "{secret} at rest"
        );
    }
    let got = apply(
        dir,
        &[json!({"op":"get_context","task":"t1","agent":"hotel"})],
        &[],
    );
    assert_eq!(got[0]["agent_context"]["SubTaskName"], SUBTASK);

    // Forgotten after its master run closed: the erasure is still a step
    // of that run's trail.
    let closed = apply(
        dir,
        &[json!({"op":"close_run","run":"m1","status":"succeeded"})],
        &[],
    );
    assert_eq!(closed[0]["ok"], true, "{closed:?}");
    let forgot = apply(dir, &[json!({"op":"forget_task","task":"t1"})], &[]);
    assert_eq!(forgot[0]["ok"], true, "{forgot:?}");
    assert_eq!(forgot[0]["erased"], true);

    // The trail says what was there and when it went; nothing of it is left.
    let text = trail(dir, "m1", false);
    assert!(
        text.contains("task_opened of task t1: content erased at "),
        "{text}"
    );
    assert!(text.contains("context of task t1 erased at "), "{text}");
    assert!(text.contains("forgotten on request"), "{text}");
    let after = trail(dir, "m1", true);
    for secret in [QUERY, SUBTASK, REASON, BLOB] {
        assert!(!after.contains(secret), "{after}");
        assert!(!text.contains(secret));
        assert_eq!(common::holding(dir, secret), Vec::<String>::new());
    }
    // Its sealed blobs went with the key.
    let sealed = dir.join("blobs/sealed");
    let left: Vec<_> = std::fs::read_dir(&sealed)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert_eq!(left, Vec::<std::path::PathBuf>::new());
    // The task is gone for use, named as erased.
    let (code, answers, _) = common::apply_answers(
        dir,
        &(json!({"op":"get_context","task":"t1","agent":"hotel"}).to_string() + "\n"),
        &[],
    );
    assert_eq!(code, 1);
    assert_eq!(answers[0]["error"]["code"], "expired", "{answers:?}");
    assert!(answers[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("erased at"));
    // Its id is not opened again (forgetting must reach what it names).
    let (code, answers, _) = common::apply_answers(
        dir,
        &format!(
            "{}\n{}\n",
            json!({"op":"open_run","run":"m2","agent":"master"}),
            json!({"op":"open_task","task":"t1","run":"m2","task_context":{
                "TaskID":"T1","UserQuery":"again","TaskName":"n","TaskDescription":"d","GoalStatus":[],"OverallStatus":"open"}})
        ),
        &[],
    );
    assert_eq!(code, 1);
    assert_eq!(answers[0]["ok"], true, "{answers:?}");
    assert_eq!(answers[1]["error"]["code"], "task_exists", "{answers:?}");
    // Again: nothing more to erase, and said so.
    let again = apply(dir, &[json!({"op":"forget_task","task":"t1"})], &[]);
    assert_eq!(again[0]["erased"], false);

    // Every digest, chain head and signed Merkle root still holds: those
    // signed before the erasure, and the erasure's own.
    let (code, _, err) = common::cli(dir, &["checkpoint"]);
    assert_eq!(code, 0, "{err}");
    let (code, v) = common::verify_json(dir, &["--key", &vkey]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["signed"]["attested"], v["records"], "{v}");
    // An export of the run proves every sealed record offline.
    let export = dir.join("m1.export");
    let (code, text, err) = common::cli(dir, &["export", "--run", "m1"]);
    assert_eq!(code, 0, "{err}");
    assert!(!text.contains(QUERY));
    std::fs::write(&export, &text).unwrap();
    let (code, out, err) = common::cli(
        dir,
        &[
            "verify",
            "--export",
            export.to_str().unwrap(),
            "--key",
            &vkey,
        ],
    );
    assert_eq!(code, 0, "{out} {err}");
    // And the views rebuilt from the log alone are the same.
    let (code, report) = common::rebuild_report(dir);
    assert_eq!(
        (code, &report["identical"]),
        (Some(0), &json!(true)),
        "{report}"
    );
}

#[test]
fn context_past_its_time_to_live_is_erased_by_gc_and_unsealed_tasks_say_they_cannot_be() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let mut ops = vec![
        json!({"op":"publish_agent","agent":"master","scope":"acme/travel"}),
        json!({"op":"publish_agent","agent":"hotel","scope":"acme/travel"}),
    ];
    ops.extend(task_ops("t1", "m1"));
    apply(dir, &ops, &["--context-ttl-secs", "0"]);
    let (code, out, err) = common::cli(dir, &["gc", "--grace-secs", "0"]);
    assert_eq!(code, 0, "{out} {err}");
    let text = trail(dir, "m1", false);
    assert!(text.contains("its time to live ran out"), "{text}");
    assert!(!trail(dir, "m1", true).contains(QUERY));
    assert_eq!(common::holding(dir, QUERY), Vec::<String>::new());

    // A task opened without sealing keeps its context in clear, and says
    // it cannot be erased rather than pretending to.
    apply(dir, &task_ops("t2", "m2"), &["--seal-context", "off"]);
    assert!(!common::holding(dir, QUERY).is_empty());
    let (code, answers, _) = common::apply_answers(
        dir,
        &(json!({"op":"forget_task","task":"t2"}).to_string() + "\n"),
        &[],
    );
    assert_eq!(code, 1);
    assert_eq!(
        answers[0]["error"]["code"], "invalid_request",
        "{answers:?}"
    );
    assert!(answers[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not sealed"));
    let (code, answers, _) = common::apply_answers(
        dir,
        &(json!({"op":"forget_task","task":"nope"}).to_string() + "\n"),
        &[],
    );
    assert_eq!(
        (code, answers[0]["error"]["code"].as_str()),
        (1, Some("unknown_task"))
    );
}

/// The key file of `task` under the data dir.
fn key_file(dir: &Path, task: &str) -> std::path::PathBuf {
    dir.join("keys").join(format!(
        "{}.key",
        hex::encode(common::sha256(&[task.as_bytes()]))
    ))
}

/// A sealed record that cannot be opened says why — erased on the record,
/// its key lost, its key file damaged, or the record not matching its key —
/// instead of calling every one of them erased.
#[test]
fn unreadable_sealed_records_say_whether_erased_lost_or_damaged() {
    let d = tempfile::tempdir().unwrap();
    let mut ops = vec![
        json!({"op":"publish_agent","agent":"master","scope":"acme/travel"}),
        json!({"op":"publish_agent","agent":"hotel","scope":"acme/travel"}),
    ];
    for (task, run) in [
        ("lost", "m-lost"),
        ("broken", "m-broken"),
        ("wrong", "m-wrong"),
    ] {
        ops.extend(task_ops(task, run));
    }
    let answers = apply(d.path(), &ops, &[]);
    assert!(answers.iter().all(|a| a["ok"] == true), "{answers:?}");
    for (task, run) in [
        ("lost", "m-lost"),
        ("broken", "m-broken"),
        ("wrong", "m-wrong"),
    ] {
        assert!(key_file(d.path(), task).exists(), "{task}");
        assert!(trail(d.path(), run, true).contains(QUERY), "{run} reads");
    }
    // Lost: the file removed behind the ledger's back.
    std::fs::remove_file(key_file(d.path(), "lost")).unwrap();
    // Damaged: not a key file any more.
    std::fs::write(key_file(d.path(), "broken"), "{not json").unwrap();
    // Wrong: a well-formed key of this task, but not the one that sealed.
    let path = key_file(d.path(), "wrong");
    let mut f: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    f["key"] = json!("11".repeat(32));
    std::fs::write(&path, f.to_string()).unwrap();

    let lost = trail(d.path(), "m-lost", false);
    assert!(
        lost.contains("the task's key is missing and no erasure is recorded"),
        "{lost}"
    );
    assert!(!lost.contains("content erased"), "{lost}");
    let broken = trail(d.path(), "m-broken", false);
    assert!(
        broken.contains("the task's key file is damaged"),
        "{broken}"
    );
    let wrong = trail(d.path(), "m-wrong", false);
    assert!(
        wrong.contains("record DAMAGED: the task's key does not open it"),
        "{wrong}"
    );
    for (run, code) in [
        ("m-lost", "key_missing"),
        ("m-broken", "key_damaged"),
        ("m-wrong", "record_damaged"),
    ] {
        let json = trail(d.path(), run, true);
        let sealed: Vec<Value> = json
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["detail"]["unreadable"].is_string())
            .collect();
        assert!(!sealed.is_empty(), "{json}");
        for v in sealed {
            assert_eq!(v["detail"]["unreadable"], code, "{v}");
            assert_eq!(v["detail"]["erased"], false, "{v}");
        }
    }
    for secret in [QUERY, SUBTASK, REASON] {
        assert!(!lost.contains(secret) && !broken.contains(secret) && !wrong.contains(secret));
    }
}

/// An `open_task` refused for its context is recorded before the task has
/// a key to seal with: the refusal in the log names where the context was
/// wrong and which schema rule it broke, never the values — a value of the
/// wrong type, an array item that is not the object it must be, a
/// property the schema does not have — while the caller's answer still
/// quotes them.
#[test]
fn a_refused_open_task_records_what_was_wrong_not_the_values() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let good = json!({"TaskID":"T1","UserQuery":"q","TaskName":"n","TaskDescription":"d",
        "GoalStatus":[],"OverallStatus":"open"});
    let mut typed = good.clone();
    typed["UserQuery"] = json!({"text": format!("{QUERY}-typed")});
    let mut listed = good.clone();
    listed["GoalStatus"] = json!([format!("{QUERY}-listed")]);
    let mut extra = good.clone();
    extra[format!("{QUERY}-extra")] = json!(1);
    let mut ops = vec![
        json!({"op":"publish_agent","agent":"master","scope":"acme/travel"}),
        json!({"op":"open_run","run":"m1","agent":"master"}),
    ];
    for tc in [&typed, &listed, &extra] {
        ops.push(json!({"op":"open_task","task":"t1","run":"m1","task_context":tc}));
    }
    let input: Vec<String> = ops.iter().map(Value::to_string).collect();
    let (_, answers, err) = common::apply_answers(dir, &(input.join("\n") + "\n"), &[]);
    assert_eq!(answers.len(), 5, "{answers:?} {err}");
    for (a, what) in answers[2..].iter().zip(["typed", "listed", "extra"]) {
        assert_eq!(a["error"]["code"], "invalid_context", "{a}");
        assert!(
            a["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("{QUERY}-{what}")),
            "the caller is told its value: {a}"
        );
    }
    let text = trail(dir, "m1", false);
    assert!(text.contains("/UserQuery: breaks the schema at"), "{text}");
    assert!(!text.contains(QUERY), "{text}");
    assert_eq!(common::holding(dir, QUERY), Vec::<String>::new());
}
