//! Fault test through the engine on the 3-node test cluster (replication 3,
//! min.insync.replicas 2): at least 10,000 ledger events stream through
//! `apply` operations while broker 2 is killed with SIGKILL and restarted.
//! Afterwards no event is lost or duplicated in the views: every run is
//! there, closed and dispatched once, each chain has exactly its two runs,
//! no event id appears twice in the log, and the views equal a rebuild.
//!
//! The outage is bounded by the cluster's failover, not by the client's
//! metadata refresh interval.
//!
//! An operation that failed on the log (not acknowledged) is retried, as a
//! platform would; the retry finds what a failed attempt may have written
//! (`run_exists` / `run_closed`) and counts that as done.

mod common;

use agentledger::codec;
use agentledger::engine::Engine;
use agentledger::log::kafka::KafkaConfig;
use agentledger::model::Topic;
use agentledger::projector::project_all;
use agentledger::views::Views;
use common::*;
use serde_json::json;
use std::collections::HashSet;
use std::time::{Duration, Instant};

const RUNS: usize = 2_600; // 4 events each: open, close, listener open, dispatched
const KILL_AT: usize = 700;
const RESTART_AT: usize = 1_400;

#[test]
fn ten_thousand_events_through_the_engine_survive_a_broker_kill() {
    let cluster = Cluster::from_env();
    let config = KafkaConfig {
        topic_prefix: unique_prefix("engine-fault"),
        replication_factor: 3,
        min_insync_replicas: Some(2),
        timeout: Duration::from_secs(15),
        ..KafkaConfig::new(required_env(KAFKA3_ENV))
    };
    let dir = tempfile::tempdir().unwrap();
    let mut engine =
        Engine::open_kafka(dir.path(), &config, common::fixed_clock_options()).unwrap();
    apply_retrying(
        &mut engine,
        json!({"op":"publish_agent","agent":"worker","scope":"acme/ops","listens":[],"emits":[{"event":"job.done","context":"job","artifacts":[]}]}),
        &[],
    );
    apply_retrying(
        &mut engine,
        json!({"op":"publish_agent","agent":"collector","scope":"acme/ops","listens":["job.done"],"emits":[]}),
        &[],
    );
    let started = Instant::now();
    for i in 0..RUNS {
        if i == KILL_AT {
            cluster.run(&["kill", "2"]).expect("kill broker 2");
        }
        if i == RESTART_AT {
            cluster.run(&["restart", "2"]).expect("restart broker 2");
        }
        let run = format!("job-{i}");
        apply_retrying(
            &mut engine,
            json!({"op":"open_run","run":run,"agent":"worker"}),
            &["run_exists"],
        );
        apply_retrying(
            &mut engine,
            json!({"op":"close_run","run":run,"status":"succeeded"}),
            &["run_closed"],
        );
        if i % 25 == 24 {
            apply_retrying(&mut engine, json!({"op":"dispatch"}), &[]);
        }
    }
    apply_retrying(&mut engine, json!({"op":"dispatch"}), &[]);
    let streamed = started.elapsed();
    eprintln!("streamed {RUNS} runs in {:.1}s", streamed.as_secs_f64());
    // Not a speed test: an availability bound. The outage should last as
    // long as the cluster takes to move leadership (~10 s here), not until
    // librdkafka's periodic metadata refresh (5 min by default), which held
    // up every offset query against the dead leader (~40 s vs 320 s).
    assert!(
        streamed < Duration::from_secs(240),
        "the stream took {streamed:?}: operations stalled long after the kill"
    );

    // Nothing lost: every run closed and dispatched, with its one listener.
    let views = engine.views();
    for i in 0..RUNS {
        let run = format!("job-{i}");
        let s = views
            .run(&run)
            .unwrap()
            .unwrap_or_else(|| panic!("{run} lost"));
        assert!(!s.is_open() && s.dispatched, "{run}: {s:?}");
        let chain = views.chain(&run).unwrap().unwrap();
        assert_eq!(chain.runs.len(), 2, "{run}: {:?}", chain.runs);
    }
    // Nothing duplicated: every event id once in the ledger.
    let log = engine.log().clone();
    let mut ids = HashSet::new();
    let mut events = 0;
    for p in 0..log.partitions(Topic::Ledger) {
        for r in read_all(log.as_ref(), Topic::Ledger, p, 4096) {
            let rec = codec::decode(&r.payload).unwrap();
            assert!(
                ids.insert(rec.event_id.clone()),
                "duplicate event {} at {p}@{}",
                rec.event_id,
                r.offset
            );
            events += 1;
        }
    }
    assert!(events >= 10_000, "only {events} events");
    // The live views equal a projection from scratch.
    let fresh = Views::open(dir.path().join("fresh")).unwrap();
    project_all(log.as_ref(), &fresh, None, &|_| {}).unwrap();
    assert_eq!(fresh.digest().unwrap(), engine.views().digest().unwrap());
}
