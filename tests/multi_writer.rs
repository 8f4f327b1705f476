//! Two engines writing one log, each deciding on views up to an hour old
//! (`max_staleness`): a decision that lost the race for a step is answered
//! `conflict` and kept out of the views, the winner's record stands in
//! both; an entity only the other engine has seen yet is found by catching
//! up before refusing. On the embedded log (two engines over one log
//! object) and on Kafka (two engines on the same topics).

mod common;

use agentledger::apply::apply_value;
use agentledger::content::store::ContentStore;
use agentledger::engine::{Engine, EngineOptions};
use agentledger::log::embedded::{EmbeddedConfig, EmbeddedLog};
use agentledger::log::kafka::KafkaConfig;
use agentledger::views::Views;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

fn stale_ok() -> EngineOptions {
    EngineOptions {
        max_staleness: Duration::from_secs(3600),
        ..common::fixed_clock_options()
    }
}

fn code(engine: &mut Engine, op: Value) -> String {
    match apply_value(engine, &op) {
        Ok(a) => format!("ok: {a}"),
        Err(e) => e.code().to_string(),
    }
}

fn ok(engine: &mut Engine, op: Value) -> Value {
    apply_value(engine, &op).unwrap_or_else(|e| panic!("{op}: {e}"))
}

fn race(a: &mut Engine, b: &mut Engine) {
    ok(
        a,
        json!({"op":"publish_agent","agent":"worker","scope":"acme/platform","listens":[],"emits":[]}),
    );
    b.catch_up(&|_| {}).unwrap();
    // B's views are now "fresh" for an hour: it will not see A's run.
    ok(a, json!({"op":"open_run","run":"x","agent":"worker"}));
    assert_eq!(
        code(b, json!({"op":"open_run","run":"x","agent":"worker"})),
        "conflict"
    );
    // Losing the race brought A's record into B's views.
    assert_eq!(
        code(b, json!({"op":"open_run","run":"x","agent":"worker"})),
        "run_exists"
    );
    let in_a = a.trail("x", false).unwrap();
    let in_b = b.trail("x", false).unwrap();
    assert_eq!(in_a.len(), 1);
    assert_eq!(in_a, in_b);
    // An agent only A has published: B catches up instead of refusing.
    ok(
        a,
        json!({"op":"publish_agent","agent":"newbie","scope":"acme/platform","listens":[],"emits":[]}),
    );
    let opened = ok(b, json!({"op":"open_run","run":"y","agent":"newbie"}));
    assert_eq!(opened["ok"], true, "{opened}");
    // Both keep working on the same runs afterwards.
    a.catch_up(&|_| {}).unwrap();
    assert_eq!(
        a.views().run("y").unwrap().map(|r| r.state.agent),
        Some("newbie".to_string())
    );
}

/// A commit group decided on views that had not seen another writer's
/// run: the operation that lost the race is answered `conflict`, the rest
/// of the group is answered as the log decided it (on Kafka the group's
/// records were projected ahead of their acknowledgements, at offsets the
/// other writer's record took), and the views equal the log projected
/// afresh. Kafka only: the embedded log's data dir has one writer (it is
/// locked), so no other record can land inside one of its groups.
fn a_group_that_lost_a_race(
    a: &mut Engine,
    b: &mut Engine,
    log: &dyn agentledger::log::Log,
    dir: &std::path::Path,
) {
    ok(
        a,
        json!({"op":"publish_agent","agent":"worker","scope":"acme/platform","listens":[],"emits":[]}),
    );
    b.catch_up(&|_| {}).unwrap();
    ok(b, json!({"op":"open_run","run":"x","agent":"worker"}));
    let operator = agentledger::auth::Grant::operator();
    let ops = [
        json!({"op":"open_run","run":"x","agent":"worker"}),
        json!({"op":"close_run","run":"x","status":"failed"}),
        json!({"op":"open_run","run":"z","agent":"worker"}),
    ];
    let lines = ops.iter().map(|v| {
        (
            &operator,
            None,
            Ok::<Value, _>(v.clone()) as agentledger::protocol::Line,
        )
    });
    let done = agentledger::protocol::reply_group(a, lines, None::<fn(&mut Engine)>);
    done.durable.unwrap();
    let codes: Vec<String> = done
        .answered
        .iter()
        .map(|a| match &a.reply {
            agentledger::protocol::Reply::Done(_) => "ok".into(),
            agentledger::protocol::Reply::Failed(f) => f.error.code.to_string(),
        })
        .collect();
    // A's open lost; its close, decided after it, closed the run B opened.
    assert_eq!(codes, ["conflict", "ok", "ok"]);
    a.catch_up(&|_| {}).unwrap();
    b.catch_up(&|_| {}).unwrap();
    assert_eq!(a.trail("x", false).unwrap(), b.trail("x", false).unwrap());
    assert!(!a.views().run("x").unwrap().unwrap().is_open());
    let fresh = Views::open(dir.join("fresh")).unwrap();
    agentledger::projector::project_all(log, &fresh, None, &|_| {}).unwrap();
    assert_eq!(fresh.digest().unwrap(), a.views().digest().unwrap());
}

/// The loop search sees every version the log holds, another writer's
/// too: B's index was built before A published `tester`.
fn loops_through_another_writers_publish(a: &mut Engine, b: &mut Engine) {
    ok(
        a,
        json!({"op":"publish_agent","agent":"developer","scope":"acme/platform",
            "listens":["review.done"],"emits":[{"event":"code.ready","context":"c"}]}),
    );
    ok(
        b,
        json!({"op":"publish_agent","agent":"bystander","scope":"acme/platform"}),
    );
    ok(
        a,
        json!({"op":"publish_agent","agent":"tester","scope":"acme/platform",
            "listens":["review.done"],"emits":[{"event":"code.ready","context":"c"}]}),
    );
    let published = ok(
        b,
        json!({"op":"publish_agent","agent":"reviewer","scope":"acme/platform",
            "listens":["code.ready"],"emits":[{"event":"review.done","context":"c"}]}),
    );
    let loops: Vec<&str> = published["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        loops,
        [
            "reviewer → developer → reviewer",
            "reviewer → tester → reviewer"
        ]
    );
}

/// Two engines, each with views of its own, over one embedded log.
fn two_embedded(d: &std::path::Path) -> (Engine, Engine) {
    let log = Arc::new(EmbeddedLog::open(d.join("log"), &EmbeddedConfig::default()).unwrap());
    let engine = |name: &str| {
        Engine::with_parts(
            log.clone(),
            Views::open(d.join(format!("views-{name}"))).unwrap(),
            ContentStore::open(d.join(format!("blobs-{name}"))).unwrap(),
            stale_ok(),
        )
    };
    (engine("a"), engine("b"))
}

/// Two engines, each with views of its own, on the same Kafka topics.
fn two_on_kafka(d: &std::path::Path, test: &str) -> (Engine, Engine) {
    let cfg = KafkaConfig {
        topic_prefix: common::unique_prefix(test),
        ..KafkaConfig::new(common::required_env(common::KAFKA_ENV))
    };
    let a = Engine::open_kafka(d.join("a"), &cfg, stale_ok()).unwrap();
    let b = Engine::open_kafka(d.join("b"), &cfg, stale_ok()).unwrap();
    (a, b)
}

#[test]
fn embedded_loop_search_sees_another_writers_versions() {
    let d = tempfile::tempdir().unwrap();
    let (mut a, mut b) = two_embedded(d.path());
    loops_through_another_writers_publish(&mut a, &mut b);
}

#[test]
fn kafka_loop_search_sees_another_writers_versions() {
    let d = tempfile::tempdir().unwrap();
    let (mut a, mut b) = two_on_kafka(d.path(), "loops");
    loops_through_another_writers_publish(&mut a, &mut b);
}

#[test]
fn embedded_two_writers_conflict_and_catch_up() {
    let d = tempfile::tempdir().unwrap();
    let (mut a, mut b) = two_embedded(d.path());
    race(&mut a, &mut b);
}

#[test]
fn kafka_two_writers_conflict_and_catch_up() {
    let d = tempfile::tempdir().unwrap();
    let (mut a, mut b) = two_on_kafka(d.path(), "multi");
    race(&mut a, &mut b);
}

#[test]
fn kafka_a_pipelined_group_that_lost_a_race_answers_conflict_for_what_it_lost() {
    let d = tempfile::tempdir().unwrap();
    let (mut a, mut b) = two_on_kafka(d.path(), "group-race");
    let log = a.log().clone();
    assert!(log.pipelines_groups());
    a_group_that_lost_a_race(&mut a, &mut b, log.as_ref(), d.path());
}
