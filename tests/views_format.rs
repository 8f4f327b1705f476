//! The views' own format: a run's first trail page lives in its run state
//! and later pages under keys of their own; views written in an older
//! format are refused by `Views::open` and projected again by the engine.

mod common;

use agentledger::engine::{Engine, EngineOptions};
use agentledger::views::{keys, ViewError, Views, VIEWS_FORMAT};
use serde_json::json;

/// A run with `reads` refused reads after its opening: one step each.
fn long_run(l: &mut common::Ledger, run: &str, reads: usize) {
    l.publish("worker", "acme/platform", &[], &[]);
    l.open_run(run, "worker");
    for _ in 0..reads {
        assert_eq!(
            l.refused(json!({"op":"read_artifact","run":run,"name":"nothing_here"})),
            "no_contract"
        );
    }
}

#[test]
fn a_trail_longer_than_a_page_keeps_every_step_in_order() {
    let d = tempfile::tempdir().unwrap();
    let mut l = common::Ledger::open(d.path());
    let steps = 3 * keys::TRAIL_PAGE as usize + 5;
    long_run(&mut l, "big", steps - 1);
    let trail = l.engine.trail("big", false).unwrap();
    let numbers: Vec<u32> = trail.iter().map(|s| s.step).collect();
    assert_eq!(numbers, (0..steps as u32).collect::<Vec<_>>());
    // The first page is in the run state, the rest under page keys.
    let stored = l.engine.views().run("big").unwrap().unwrap();
    assert_eq!(stored.trail.len(), keys::TRAIL_PAGE as usize);
    let page_keys = l
        .engine
        .views()
        .tree()
        .unwrap()
        .scan_prefix(keys::trail_prefix("big"))
        .count();
    assert_eq!(page_keys, 3);
    // And a rebuild gives the same views.
    drop(l);
    let (_, report) = common::rebuild_report(d.path());
    assert_eq!(report["identical"], true, "{report}");
}

#[test]
fn views_in_an_older_format_are_refused_then_projected_again() {
    let d = tempfile::tempdir().unwrap();
    let before = {
        let mut l = common::Ledger::open(d.path());
        long_run(&mut l, "r1", 3);
        l.engine.trail("r1", false).unwrap()
    };
    let views_dir = d.path().join("views");
    {
        let v = Views::open(&views_dir).unwrap();
        v.tree()
            .unwrap()
            .insert(keys::format(), agentledger::codec::to_bytes(&1u32).unwrap())
            .unwrap();
        v.flush().unwrap();
    }
    match Views::open(&views_dir) {
        Err(ViewError::StaleFormat { found, want }) => {
            assert_eq!((found, want), (1, VIEWS_FORMAT));
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("stale views opened"),
    }
    let engine = Engine::open_embedded(d.path(), EngineOptions::default()).unwrap();
    assert_eq!(engine.trail("r1", false).unwrap(), before);
}

#[test]
fn a_lone_root_chain_is_read_off_its_run_and_stored_once_joined() {
    let d = tempfile::tempdir().unwrap();
    let mut l = common::Ledger::open(d.path());
    let runs = l.drive_loop("solo");
    assert!(runs.len() > 2, "{runs:?}");
    l.open_run("alone", "developer");
    let stored = |l: &common::Ledger, root: &str| {
        l.engine
            .views()
            .tree()
            .unwrap()
            .get(keys::chain(root))
            .unwrap()
            .is_some()
    };
    // Alone: no chain write, yet the chain reads as the run itself.
    assert!(!stored(&l, "alone"));
    let c = l.engine.views().chain("alone").unwrap().unwrap();
    assert_eq!((c.runs, c.max_hop), (vec!["alone".to_string()], 0));
    // Joined by listeners: stored, every run in order.
    assert!(stored(&l, "solo"));
    let c = l.engine.views().chain("solo").unwrap().unwrap();
    assert_eq!(c.runs, runs);
    // A rebuild (root and listeners in one batch) gives the same views.
    drop(l);
    let (_, report) = common::rebuild_report(d.path());
    assert_eq!(report["identical"], true, "{report}");
}
