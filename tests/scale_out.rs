//! Scale-out on Kafka: two engine instances on the same topics, each
//! dispatching half of the ledger partitions (whole chains), produce the
//! same chains, hops and trails as one instance doing everything.

mod common;

use agentledger::engine::Engine;
use common::{Backend, Ledger};
use serde_json::json;
use std::collections::BTreeMap;

/// run → (agent, root, hop, kinds of its trail steps)
type Outcome = BTreeMap<String, (String, Option<String>, Option<u32>, Vec<String>)>;

const ROOTS: usize = 12;

fn setup(writer: &mut Ledger) {
    writer.publish(
        "developer",
        "acme/platform",
        &["review.done"],
        &[("code.ready", &["patch"])],
    );
    writer.publish(
        "reviewer",
        "acme/platform",
        &["code.ready"],
        &[("review.done", &["review"])],
    );
    writer.publish("linter", "acme/platform", &["code.ready"], &[]);
    for i in 0..ROOTS {
        writer.open_run(&format!("root-{i}"), "developer");
    }
}

fn open_runs(e: &Engine) -> Vec<String> {
    let mut open = Vec::new();
    for i in 0..ROOTS {
        if let Some(chain) = e.views().chain(&format!("root-{i}")).unwrap() {
            for r in chain.runs {
                if e.views().run(&r).unwrap().is_some_and(|s| s.is_open()) {
                    open.push(r);
                }
            }
        }
    }
    open
}

/// Close every open run through the first instance, let each instance
/// dispatch its share, until nothing is left to do.
fn drive(instances: &mut [Ledger]) -> Outcome {
    let n = instances.len() as u32;
    setup(&mut instances[0]);
    for _round in 0..20 {
        instances[0].engine.catch_up(&|_| {}).unwrap();
        let open = open_runs(&instances[0].engine);
        for r in &open {
            instances[0].close(r, json!({"patch": "p", "review": "r"}));
        }
        let mut dispatched = 0;
        for (i, inst) in instances.iter_mut().enumerate() {
            inst.engine.catch_up(&|_| {}).unwrap();
            let a = inst
                .engine
                .dispatch_partitions(&|p| p % n == i as u32)
                .unwrap();
            dispatched += a.dispatched_runs;
        }
        if open.is_empty() && dispatched == 0 {
            break;
        }
    }
    let e = &mut instances[0].engine;
    e.catch_up(&|_| {}).unwrap();
    let mut out = Outcome::new();
    for i in 0..ROOTS {
        let chain = e.views().chain(&format!("root-{i}")).unwrap().unwrap();
        for r in chain.runs {
            let s = e.views().run(&r).unwrap().unwrap();
            let kinds = e
                .trail(&r, false)
                .unwrap()
                .iter()
                .map(|t| t.event.kind().to_string())
                .collect();
            out.insert(r, (s.agent, s.root, s.hop, kinds));
        }
    }
    out
}

#[test]
fn two_instances_in_one_group_give_the_same_trails_and_hops_as_one() {
    let one_dir = tempfile::tempdir().unwrap();
    let single = Backend::kafka("scale_single");
    let mut one = vec![Ledger::open_on(one_dir.path(), &single)];
    let alone = drive(&mut one);

    let shared = Backend::kafka("scale_pair");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut pair = vec![
        Ledger::open_on(a.path(), &shared),
        Ledger::open_on(b.path(), &shared),
    ];
    let together = drive(&mut pair);

    // 12 chains of 9 runs along the loop, plus a linter at every odd hop.
    assert_eq!(alone.values().filter(|v| v.2 == Some(8)).count(), ROOTS);
    assert_eq!(alone, together);
    // The second instance, which wrote only dispatch records, sees the same.
    pair[1].engine.catch_up(&|_| {}).unwrap();
    for (run, (agent, _, hop, _)) in &together {
        let s = pair[1].engine.views().run(run).unwrap().unwrap();
        assert_eq!((&s.agent, s.hop), (agent, *hop));
    }
}
