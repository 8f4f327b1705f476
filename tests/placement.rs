//! Which instance decides a request: with a placement (a cluster on
//! Kafka), a request for a chain whose ledger partition another live
//! instance owns is answered `not_owner` with a referral to it, and
//! nothing of it is recorded here; registry operations are decided
//! anywhere; a caller whose credential cannot be passed on (`refer` off)
//! is decided here as before. Checked on the embedded log, with the
//! placement set as the serve loop would set it.

use agentledger::engine::{Engine, EngineOptions, Owner, Placement};
use agentledger::log::Log;
use agentledger::model::Topic;
use agentledger::protocol::Reply;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

mod common;

use common::{operator_group as group, reply_code as code};

/// A run id whose chain lands in `partition`.
fn run_in(log: &dyn Log, partition: u32, tag: &str) -> String {
    (0..)
        .map(|i| format!("{tag}-{i}"))
        .find(|r| log.partition_of(Topic::Ledger, r.as_bytes()) == partition)
        .unwrap()
}

fn task_context() -> Value {
    json!({"TaskID":"T1","UserQuery":"q","TaskName":"n","TaskDescription":"d",
        "GoalStatus":[],"OverallStatus":"open"})
}

fn other() -> Owner {
    Owner {
        id: "other#0001".into(),
        url: "http://127.0.0.1:9".into(),
    }
}

/// This instance owns partition 0; partitions 1 and 2 are the other's;
/// nobody is known to own 3.
fn placement() -> Placement {
    Placement {
        owned: BTreeSet::from([0]),
        owners: BTreeMap::from([(1, other()), (2, other())]),
    }
}

fn ledger_ends(engine: &Engine) -> Vec<u64> {
    engine.log().end_offsets(Topic::Ledger).unwrap()
}

#[test]
fn a_chain_another_instance_owns_is_referred_there_and_nothing_is_recorded() {
    let d = tempfile::tempdir().unwrap();
    let mut e = Engine::open_embedded(d.path(), EngineOptions::default()).unwrap();
    let log = e.log().clone();
    let (mine, theirs, nobodys) = (
        run_in(log.as_ref(), 0, "mine"),
        run_in(log.as_ref(), 1, "theirs"),
        run_in(log.as_ref(), 3, "nobodys"),
    );
    // Before the placement: every chain is decided here.
    let before = group(
        &mut e,
        &[
            json!({"op":"publish_agent","agent":"worker","scope":"s"}),
            json!({"op":"open_run","run":theirs,"agent":"worker"}),
            json!({"op":"open_task","task":"t1","run":theirs,"task_context":task_context()}),
        ],
    );
    assert_eq!(
        before.iter().map(code).collect::<Vec<_>>(),
        ["ok", "ok", "ok"]
    );
    e.place(Some(placement()));
    e.refer(true);
    let ends = ledger_ends(&e);
    let replies = group(
        &mut e,
        &[
            json!({"op":"open_run","run":mine,"agent":"worker"}),
            json!({"op":"open_run","run":run_in(log.as_ref(), 2, "new"),"agent":"worker"}),
            json!({"op":"close_run","run":theirs,"status":"succeeded"}),
            // A task's operations follow its master run's chain.
            json!({"op":"get_context","task":"t1","agent":"worker"}),
            json!({"op":"forget_task","task":"t1"}),
            json!({"op":"open_run","run":nobodys,"agent":"worker"}),
            json!({"op":"publish_agent","agent":"helper","scope":"s"}),
            // Unknown here even after catching up: taken for a root run,
            // decided by its partition's owner (refused here when that
            // is this instance or nobody known).
            json!({"op":"close_run","run":run_in(log.as_ref(), 3, "unknown"),"status":"failed"}),
            json!({"op":"close_run","run":run_in(log.as_ref(), 2, "unknown"),"status":"failed"}),
            // An unknown task: decided here.
            json!({"op":"get_context","task":"no-such-task","agent":"worker"}),
        ],
    );
    assert_eq!(
        replies.iter().map(code).collect::<Vec<_>>(),
        [
            "ok",
            "not_owner",
            "not_owner",
            "not_owner",
            "not_owner",
            "ok",
            "ok",
            "unknown_run",
            "not_owner",
            "unknown_task"
        ]
    );
    for (i, p) in [(1, 2), (2, 1), (3, 1), (4, 1), (8, 2)] {
        let r = replies[i].referral().expect("a referral");
        assert_eq!((r.partition, &r.owner), (p, &other()), "line {i}");
        let Reply::Failed(f) = &replies[i] else {
            unreachable!()
        };
        assert!(
            f.error.message.contains("other#0001") && f.error.message.contains("127.0.0.1:9"),
            "{}",
            f.error.message
        );
        // Never on the wire.
        let wire = serde_json::to_value(&replies[i]).unwrap();
        assert_eq!(wire["error"].as_object().unwrap().len(), 2, "{wire}");
        assert!(wire.get("referral").is_none(), "{wire}");
    }
    // Nothing was written to the partitions referred elsewhere.
    let after = ledger_ends(&e);
    assert_eq!((after[1], after[2]), (ends[1], ends[2]));
    assert!(after[0] > ends[0] && after[3] > ends[3]);
    assert!(e.views().run(&theirs).unwrap().unwrap().closed_at.is_none());

    // A caller whose credential cannot be passed on: decided here.
    e.refer(false);
    let replies = group(
        &mut e,
        &[json!({"op":"close_run","run":theirs,"status":"succeeded"})],
    );
    assert_eq!(code(&replies[0]), "ok");
    // Alone again: nothing is referred.
    e.refer(true);
    e.place(None);
    let replies = group(
        &mut e,
        &[json!({"op":"open_run","run":run_in(log.as_ref(), 1, "later"),"agent":"worker"})],
    );
    assert_eq!(code(&replies[0]), "ok");
}
