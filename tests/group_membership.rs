//! Incremental rebalancing of the instances serving one ledger on Kafka:
//! when an instance joins or leaves, only the ledger partitions that must
//! move are revoked, and every member keeps the others throughout — on
//! the KIP-848 consumer protocol (the default) and on the classic one
//! (cooperative-sticky). An eager protocol would take every partition
//! from every member at each join and leave: no dispatching anywhere
//! until the group settled again.

mod common;

use agentledger::log::group::{Member, Membership};
use agentledger::log::kafka::{GroupProtocol, KafkaLog};
use agentledger::log::Log;
use agentledger::model::Topic;
use common::Backend;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const PARTITIONS: u32 = 6;

/// Two instances' logs on the same topics (of this test's own).
fn logs(test: &str, protocol: GroupProtocol) -> (KafkaLog, KafkaLog) {
    let Backend::Kafka(mut k) = Backend::kafka(test) else {
        unreachable!("Backend::kafka is a Kafka backend")
    };
    k.group_protocol = protocol;
    k.ledger_partitions = PARTITIONS;
    (
        KafkaLog::connect(&k).unwrap(),
        KafkaLog::connect(&k).unwrap(),
    )
}

type Shares = Vec<BTreeSet<u32>>;

/// Poll every member (every 20 ms) until each owns some partitions, none
/// twice, all of them together; returns every sample taken and the
/// settled shares.
fn settle(members: &mut [Box<dyn Membership>], what: &str) -> (Vec<Shares>, Shares) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut samples = Vec::new();
    loop {
        let owned: Shares = members.iter_mut().map(|m| m.owned().unwrap()).collect();
        samples.push(owned.clone());
        let total: usize = owned.iter().map(BTreeSet::len).sum();
        let union: BTreeSet<u32> = owned.iter().flatten().copied().collect();
        if owned.iter().all(|o| !o.is_empty())
            && total == PARTITIONS as usize
            && union.len() == total
        {
            return (samples, owned);
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the group did not settle within 90 s: {owned:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Member `m` never lost what it holds at the end.
fn kept_throughout(samples: &[Shares], settled: &Shares, m: usize, what: &str) {
    for s in samples {
        assert!(
            s[m].is_superset(&settled[m]),
            "{what}: member {m} held {:?} at one point, not all of its final {:?} (samples: {samples:?})",
            s[m],
            settled[m]
        );
    }
}

fn joins_and_leaves_move_only_what_must(test: &str, protocol: GroupProtocol) {
    let (a, b) = logs(test, protocol);
    assert_eq!(a.partitions(Topic::Ledger), PARTITIONS);
    let group = "serve";
    let mut members = vec![a.join(group).unwrap()];
    assert!(
        members[0]
            .describe()
            .contains(&format!("({protocol} protocol)")),
        "{}",
        members[0].describe()
    );
    let (_, alone) = settle(&mut members, "alone");
    assert_eq!(alone[0].len(), PARTITIONS as usize);

    // A second instance joins: the first keeps what it is not asked to
    // give up, without a moment of owning nothing.
    members.push(b.join(group).unwrap());
    let (samples, pair) = settle(&mut members, "after a join");
    kept_throughout(&samples, &pair, 0, "join");
    assert!(
        pair.iter().all(|s| s.len() == PARTITIONS as usize / 2),
        "{pair:?}"
    );
    // The newcomer only ever gains.
    for s in &samples {
        assert!(
            s[1].is_subset(&pair[1]),
            "join: the newcomer held {:?}",
            s[1]
        );
    }

    // The second leaves (dropping the membership leaves the group): the
    // first keeps its share throughout and gains the rest.
    drop(members.pop());
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let owned = members[0].owned().unwrap();
        assert!(
            owned.is_superset(&pair[0]),
            "leave: the survivor held {owned:?}, not all of its {:?}",
            pair[0]
        );
        if owned.len() == PARTITIONS as usize {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "leave: the survivor did not get every partition within 90 s: {owned:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn consumer_protocol_joins_and_leaves_move_only_what_must() {
    joins_and_leaves_move_only_what_must("group_consumer", GroupProtocol::Consumer);
}

#[test]
fn classic_cooperative_joins_and_leaves_move_only_what_must() {
    joins_and_leaves_move_only_what_must("group_classic", GroupProtocol::Classic);
}

fn announced(id: &str, owned: &BTreeSet<u32>) -> Member {
    Member {
        id: id.to_string(),
        url: Some(format!("http://{id}.example:7000")),
        owned: owned.clone(),
        epoch: 1,
        at_ms: 1_700_000_000_000,
    }
}

/// What `m` lists, once `done` holds of it (within 60 s).
fn members_until(
    m: &mut Box<dyn Membership>,
    what: &str,
    done: impl Fn(&[Member]) -> bool,
) -> Vec<Member> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen = m.members().unwrap();
        if done(&seen) {
            return seen;
        }
        assert!(Instant::now() < deadline, "{what}: {seen:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_members_topic_tells_every_instance_who_owns_what_and_forgets_who_left() {
    let (a, b) = logs("group_roster", GroupProtocol::Consumer);
    let mut members = vec![a.join("serve").unwrap(), b.join("serve").unwrap()];
    let (_, shares) = settle(&mut members, "two members");
    let (ma, mb) = (announced("a", &shares[0]), announced("b", &shares[1]));
    members[0].announce(&ma).unwrap();
    members[1].announce(&mb).unwrap();
    for m in members.iter_mut() {
        let seen = members_until(m, "both announced", |s| s.len() == 2);
        assert_eq!(
            seen,
            [ma.clone(), mb.clone()],
            "exactly as announced, by id"
        );
    }
    // A later announcement replaces the earlier one.
    let moved = Member {
        epoch: 2,
        ..ma.clone()
    };
    members[0].announce(&moved).unwrap();
    members_until(&mut members[1], "a's second announcement", |s| {
        s.first().is_some_and(|m| m.epoch == 2)
    });
    // Leaving writes a tombstone: b stops listing a.
    drop(members.remove(0));
    let seen = members_until(&mut members[0], "a gone", |s| s.len() == 1);
    assert_eq!(seen, [mb]);
}
