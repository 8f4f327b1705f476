//! Group commit on the embedded log: operations decided inside a group see
//! each other, are invisible to readers and unsynced until the group ends,
//! then durable together with one fdatasync per partition written.

mod common;

use agentledger::model::Topic;
use common::Ledger;
use serde_json::json;

fn visible(l: &Ledger) -> u64 {
    l.engine
        .log()
        .end_offsets(Topic::Ledger)
        .unwrap()
        .iter()
        .sum()
}

#[test]
fn a_group_is_decided_in_order_made_durable_with_one_sync_per_partition() {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(d.path());
    l.publish("developer", "acme/platform", &[], &[]);

    // Without a group: every operation pays its own sync.
    let s0 = l.engine.log().syncs();
    for i in 0..40 {
        l.open_run(&format!("alone-{i}"), "developer");
    }
    let alone = l.engine.log().syncs() - s0;
    assert!(alone >= 40, "{alone} syncs for 40 operations");

    // In a group: decided in order (the second open of a run is refused
    // because of the first, in the same group), invisible until the end.
    let before = visible(&l);
    let s1 = l.engine.log().syncs();
    l.engine.begin_group();
    for i in 0..40 {
        l.open_run(&format!("grouped-{i}"), "developer");
    }
    assert_eq!(
        l.refused(json!({"op":"open_run","run":"grouped-0","agent":"developer"})),
        "run_exists"
    );
    assert_eq!(
        visible(&l),
        before,
        "a reader sees nothing before the group ends"
    );
    assert_eq!(l.engine.log().syncs(), s1, "no sync inside the group");
    l.engine.end_group().unwrap();
    let grouped = l.engine.log().syncs() - s1;
    let partitions = l.engine.log().partitions(Topic::Ledger) as u64;
    assert!(
        grouped <= partitions + 1,
        "{grouped} syncs for a group of 40 operations over {partitions} partitions"
    );
    assert_eq!(visible(&l), before + 40);

    // Durable: a fresh open finds every grouped run.
    drop(l);
    let l = Ledger::open(d.path());
    for i in 0..40 {
        assert!(l
            .engine
            .views()
            .run(&format!("grouped-{i}"))
            .unwrap()
            .is_some());
    }
}
