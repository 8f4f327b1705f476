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

/// An engine that projects only its own partitions (a `serve` instance
/// on Kafka): its views hold only their chains; a request for another's
/// chain is referred even for a caller that cannot be forwarded (it is
/// told where to ask), refused `not_owner` without a referral while no
/// instance has claimed it, and nothing of it is recorded here; a run
/// not held here is found where another instance said it lives.
#[test]
fn an_engine_scoped_to_its_partitions_holds_and_decides_only_their_chains() {
    let d = tempfile::tempdir().unwrap();
    let log;
    let (mine, theirs, nobodys);
    {
        // Written before by an instance that held everything.
        let mut e = Engine::open_embedded(d.path(), EngineOptions::default()).unwrap();
        log = e.log().clone();
        (mine, theirs, nobodys) = (
            run_in(log.as_ref(), 0, "mine"),
            run_in(log.as_ref(), 1, "theirs"),
            run_in(log.as_ref(), 3, "nobodys"),
        );
        let mut ops = vec![json!({"op":"publish_agent","agent":"worker","scope":"s"})];
        for r in [&mine, &theirs, &nobodys] {
            ops.push(json!({"op":"open_run","run":r,"agent":"worker"}));
        }
        ops.push(json!({"op":"open_task","task":"t1","run":theirs,"task_context":task_context()}));
        ops.push(json!({"op":"close_run","run":nobodys,"status":"succeeded"}));
        let codes: Vec<String> = group(&mut e, &ops).iter().map(code).collect();
        assert!(codes.iter().all(|c| c == "ok"), "{codes:?}");
    }
    // Views projected again from the log, by a scoped engine.
    std::fs::remove_dir_all(d.path().join("views")).unwrap();
    let scoped = EngineOptions {
        scoped: true,
        drop_views_after: std::time::Duration::ZERO,
        ..EngineOptions::default()
    };
    let mut e = Engine::open_embedded(d.path(), scoped).unwrap();
    // Until told what it owns: the registry, none of the ledger.
    assert!(e.views().agent("worker").unwrap().is_some());
    assert!(e.views().run(&mine).unwrap().is_none());
    e.scope(&BTreeSet::from([0])).unwrap();
    e.catch_up(&|_| {}).unwrap();
    assert!(e.views().run(&mine).unwrap().is_some());
    for r in [&theirs, &nobodys] {
        assert!(e.views().run(r).unwrap().is_none(), "{r}");
    }
    assert_eq!(e.scoped_to(), Some(&BTreeSet::from([0])));
    // Dispatching, whoever asks: only the chains held here (the closed
    // run of partition 3 is its owner's to dispatch).
    let ends = ledger_ends(&e);
    let d = group(&mut e, &[json!({"op":"dispatch"})]);
    assert_eq!(code(&d[0]), "ok");
    assert_eq!(ledger_ends(&e)[3], ends[3]);
    e.place(Some(placement()));
    for refer in [true, false] {
        e.refer(refer);
        let replies = group(
            &mut e,
            &[
                json!({"op":"close_run","run":theirs,"status":"failed"}),
                json!({"op":"open_run","run":run_in(log.as_ref(), 2, "new"),"agent":"worker"}),
                json!({"op":"open_run","run":run_in(log.as_ref(), 3, "new"),"agent":"worker"}),
                json!({"op":"open_run","run":run_in(log.as_ref(), 0, &format!("new{refer}")),"agent":"worker"}),
                json!({"op":"read_artifact","run":mine,"name":"x"}),
            ],
        );
        let codes: Vec<String> = replies.iter().map(code).collect();
        assert_eq!(
            codes,
            ["not_owner", "not_owner", "not_owner", "ok", "no_contract"],
            "refer {refer}"
        );
        // Referred where an owner is known, the caller forwarded or not.
        assert_eq!(replies[0].referral().unwrap().partition, 1);
        assert_eq!(replies[1].referral().unwrap().partition, 2);
        // Nobody has claimed partition 3: retry, no referral.
        let Reply::Failed(f) = &replies[2] else {
            unreachable!()
        };
        assert!(replies[2].referral().is_none());
        assert!(
            f.error.message.contains("partition 3") && f.error.message.contains("no other"),
            "{}",
            f.error.message
        );
    }
    e.refer(false);
    let after = ledger_ends(&e);
    assert_eq!((after[1], after[2], after[3]), (ends[1], ends[2], ends[3]));
    // A task of another's chain, unknown here: decided here (unknown)
    // until another instance says where it lives; then referred there.
    let ask = [json!({"op":"get_context","task":"t1","agent":"worker"})];
    assert_eq!(code(&group(&mut e, &ask)[0]), "unknown_task");
    use agentledger::engine::Whose;
    assert_eq!(e.partition_known(Whose::Task("t1")).unwrap(), None);
    e.learn_partition(Whose::Task("t1"), 1);
    let replies = group(&mut e, &ask);
    assert_eq!(replies[0].referral().unwrap().partition, 1);
    // What was learned is not what the views hold: not answered to others.
    assert_eq!(e.partition_known(Whose::Task("t1")).unwrap(), None);
    assert_eq!(e.partition_known(Whose::Run(&mine)).unwrap(), Some(0));
    // Owning every partition: nothing referred, everything projected.
    e.scope(&BTreeSet::from([0, 1, 2, 3])).unwrap();
    e.catch_up(&|_| {}).unwrap();
    assert!(e.views().run(&theirs).unwrap().is_some());
    // Decided here, on the task now held (a context not the worker's).
    let replies = group(&mut e, &ask);
    assert_eq!(code(&replies[0]), "not_your_context");
    // Partitions lost: what the views held of them is dropped (runs,
    // tasks, offsets), what stays owned is kept.
    e.scope(&BTreeSet::from([0])).unwrap();
    e.flush().unwrap();
    assert!(e.views().run(&mine).unwrap().is_some());
    for r in [&theirs, &nobodys] {
        assert!(e.views().run(r).unwrap().is_none(), "{r}");
        assert!(e.views().trail_pointers(r).unwrap().is_empty(), "{r}");
    }
    assert!(e.views().task("t1").unwrap().is_none());
    for p in 1..4 {
        assert_eq!(e.views().offset(Topic::Ledger, p).unwrap(), 0, "{p}");
    }
    assert_eq!(e.views().dispatch_cursor(3).unwrap(), 0);
    // Back again: projected anew from the log, the same as before.
    e.scope(&BTreeSet::from([0, 1, 3])).unwrap();
    e.catch_up(&|_| {}).unwrap();
    assert!(e.views().run(&theirs).unwrap().is_some());
    assert!(e
        .views()
        .run(&nobodys)
        .unwrap()
        .unwrap()
        .closed_at
        .is_some());
    assert_eq!(code(&group(&mut e, &ask)[0]), "not_your_context");
    // Dropped and projected again, the views are what one projection of
    // the whole log makes.
    e.scope(&BTreeSet::from([0, 1, 2, 3])).unwrap();
    e.catch_up(&|_| {}).unwrap();
    e.flush().unwrap();
    e.start_rebuild().unwrap();
    let rebuilt = loop {
        if let Some(r) = e.finish_rebuild().unwrap() {
            break r;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(rebuilt.identical(), Some(true), "{rebuilt:?}");
}

/// The views of a partition not owned are kept for a while (a rolling
/// restart hands it back within seconds): by default ten minutes.
#[test]
fn views_of_a_partition_not_owned_are_kept_for_a_while_before_they_are_dropped() {
    let d = tempfile::tempdir().unwrap();
    let theirs;
    {
        let mut e = Engine::open_embedded(d.path(), EngineOptions::default()).unwrap();
        theirs = run_in(e.log().as_ref(), 1, "theirs");
        let ops = [
            json!({"op":"publish_agent","agent":"worker","scope":"s"}),
            json!({"op":"open_run","run":theirs,"agent":"worker"}),
        ];
        assert!(group(&mut e, &ops).iter().all(|r| code(r) == "ok"));
    }
    let scoped = EngineOptions {
        scoped: true,
        ..EngineOptions::default()
    };
    assert_eq!(scoped.drop_views_after.as_secs(), 600);
    let mut e = Engine::open_embedded(d.path(), scoped).unwrap();
    for _ in 0..3 {
        e.scope(&BTreeSet::from([0])).unwrap();
    }
    assert!(e.views().run(&theirs).unwrap().is_some());
    assert!(e.views().offset(Topic::Ledger, 1).unwrap() > 0);
}
