//! Scale-out on Kafka: engine instances join one consumer group, whose
//! coordinator splits the ledger partitions (whole chains) between them;
//! two instances — one of which leaves half-way, its partitions moving to
//! the other — produce the same chains, hops and trails as one instance
//! doing everything.

mod common;

use agentledger::engine::Engine;
use agentledger::log::group::Membership;
use common::{Backend, Ledger};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// run → (agent, root, hop, kinds of its trail steps)
type Outcome = BTreeMap<String, (String, Option<String>, Option<u32>, Vec<String>)>;

const ROOTS: usize = 12;

fn setup(writer: &mut Ledger) {
    writer.publish_review_loop();
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

/// Poll every member until the group has settled with each owning some
/// partitions, none twice, all of them together; returns each one's share.
fn settle(members: &mut [Box<dyn Membership>], partitions: u32) -> Vec<BTreeSet<u32>> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let owned: Vec<BTreeSet<u32>> = members.iter_mut().map(|m| m.owned().unwrap()).collect();
        let total: usize = owned.iter().map(|o| o.len()).sum();
        let union: BTreeSet<u32> = owned.iter().flatten().copied().collect();
        if owned.iter().all(|o| !o.is_empty())
            && total == partitions as usize
            && union.len() == total
        {
            return owned;
        }
        assert!(
            Instant::now() < deadline,
            "the group did not settle within 90 s: {owned:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Close every open run through the first instance, let each instance
/// dispatch the partitions the group gave it, until nothing is left to do.
/// With `leave_after`, the last instance leaves the group after that many
/// rounds and the others take its partitions over.
fn drive(instances: &mut Vec<Ledger>, group: &str, leave_after: Option<usize>) -> Outcome {
    let partitions = instances[0]
        .engine
        .log()
        .partitions(agentledger::model::Topic::Ledger);
    let mut members: Vec<Box<dyn Membership>> = instances
        .iter()
        .map(|i| i.engine.log().join(group).unwrap())
        .collect();
    let mut shares = settle(&mut members, partitions);
    setup(&mut instances[0]);
    for round in 0..20 {
        if leave_after == Some(round) && instances.len() > 1 {
            // Dropping the membership leaves the group at once.
            drop(members.pop());
            instances.pop();
            shares = settle(&mut members, partitions);
            assert_eq!(
                shares[0].len(),
                partitions as usize,
                "the survivor owns all"
            );
        }
        instances[0].engine.catch_up(&|_| {}).unwrap();
        let open = open_runs(&instances[0].engine);
        for r in &open {
            instances[0].close(r, json!({"patch": "p", "review": "r"}));
        }
        let mut dispatched = 0;
        for (inst, member) in instances.iter_mut().zip(members.iter_mut()) {
            let owned = member.owned().unwrap();
            inst.engine.catch_up(&|_| {}).unwrap();
            let a = inst
                .engine
                .dispatch_partitions(&|p| owned.contains(&p))
                .unwrap();
            dispatched += a.dispatched_runs;
        }
        // The group does not move partitions while every member is alive.
        let now: Vec<_> = members.iter_mut().map(|m| m.owned().unwrap()).collect();
        assert_eq!(now, shares);
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
            out.insert(r, (s.state.agent, s.state.root, s.state.hop, kinds));
        }
    }
    out
}

#[test]
fn instances_in_one_group_give_the_same_trails_and_hops_as_one_also_when_one_leaves() {
    let one_dir = tempfile::tempdir().unwrap();
    let single = Backend::kafka("scale_single");
    let mut one = vec![Ledger::open_on(one_dir.path(), &single)];
    let alone = drive(&mut one, "serve", None);

    let shared = Backend::kafka("scale_pair");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut pair = vec![
        Ledger::open_on(a.path(), &shared),
        Ledger::open_on(b.path(), &shared),
    ];
    let together = drive(&mut pair, "serve", None);

    // 12 chains of 9 runs along the loop, plus a linter at every odd hop.
    assert_eq!(alone.values().filter(|v| v.2 == Some(8)).count(), ROOTS);
    assert_eq!(alone, together);
    // The second instance, which wrote only dispatch records, sees the same.
    pair[1].engine.catch_up(&|_| {}).unwrap();
    for (run, (agent, _, hop, _)) in &together {
        let s = pair[1].engine.views().run(run).unwrap().unwrap();
        assert_eq!((&s.agent, s.hop), (agent, *hop));
    }

    // Two more instances on topics of their own; after three rounds the
    // second stops, and the first finishes its chains.
    let parted = Backend::kafka("scale_leave");
    let (c, d) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut pair = vec![
        Ledger::open_on(c.path(), &parted),
        Ledger::open_on(d.path(), &parted),
    ];
    let handed_over = drive(&mut pair, "serve", Some(3));
    assert_eq!(alone, handed_over);
}
