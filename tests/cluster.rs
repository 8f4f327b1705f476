//! `GET /v1/cluster`: who serves the ledger, where each instance answers
//! and which ledger partitions each owns — on the embedded log this
//! instance alone, owning all; on Kafka every instance of the group, as
//! each announced itself on the members topic.

mod common;

use common::server::{self, Server};
use common::Backend;
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

fn cluster(s: &Server) -> Value {
    let r = server::http(&s.url)
        .get(format!("{}/v1/cluster", s.url))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    r.json().unwrap()
}

/// Ask `s` until `done` holds of its answer (within 90 s).
fn cluster_until(s: &Server, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let v = cluster(s);
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn owned(m: &Value) -> BTreeSet<u64> {
    m["owned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap())
        .collect()
}

#[test]
fn on_the_embedded_log_the_one_instance_owns_every_partition() {
    let d = tempfile::tempdir().unwrap();
    let s = server::start(d.path(), None, &[]);
    // Announced at once, and again once the listener has bound.
    let v = cluster_until(&s, "this instance announced with its URL", |v| {
        v["members"][0]["url"] == s.url.as_str()
    });
    let members = v["members"].as_array().unwrap();
    assert_eq!(members.len(), 1, "{v}");
    let me = &members[0];
    assert_eq!(me["id"], v["me"]);
    assert_eq!(me["url"], s.url.as_str(), "the address it listens on");
    assert_eq!(v["advertise"], s.url.as_str());
    assert_eq!(owned(me), (0..4).collect());
    assert_eq!(me["stale"], false);
    // Who serves the ledger is for authenticated readers only.
    let anon = reqwest::blocking::get(format!("{}/v1/cluster", s.url)).unwrap();
    assert_eq!(anon.status().as_u16(), 401);
}

#[test]
fn an_advertised_url_is_what_the_others_are_told() {
    let d = tempfile::tempdir().unwrap();
    let s = server::start(
        d.path(),
        None,
        &["--advertise", "https://ledger-1.example:8443"],
    );
    let v = cluster_until(&s, "this instance announced with its URL", |v| {
        !v["members"][0]["url"].is_null()
    });
    assert_eq!(v["members"][0]["url"], "https://ledger-1.example:8443");
    assert_eq!(v["advertise"], "https://ledger-1.example:8443");
}

#[test]
fn on_kafka_every_instance_lists_every_member_and_what_it_owns() {
    let Backend::Kafka(k) = Backend::kafka("cluster_pair") else {
        unreachable!("a Kafka backend")
    };
    let kafka = (k.brokers.clone(), k.topic_prefix.clone());
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sa = server::start(a.path(), Some(&kafka), &[]);
    let sb = server::start(b.path(), Some(&kafka), &[]);
    // Both listed by each, owning the four partitions between them.
    let settled = |v: &Value| {
        let Some(m) = v["members"].as_array() else {
            return false;
        };
        if m.iter().any(|m| m["url"].is_null()) {
            return false;
        }
        let shares: Vec<BTreeSet<u64>> = m.iter().map(owned).collect();
        let all: BTreeSet<u64> = shares.iter().flatten().copied().collect();
        m.len() == 2
            && shares.iter().all(|s| !s.is_empty())
            && shares.iter().map(BTreeSet::len).sum::<usize>() == 4
            && all.len() == 4
    };
    let va = cluster_until(&sa, "a sees both settled", settled);
    let vb = cluster_until(&sb, "b sees both settled", settled);
    let urls: BTreeSet<String> = va["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["url"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(urls, BTreeSet::from([sa.url.clone(), sb.url.clone()]));
    assert_ne!(va["me"], vb["me"], "each instance has an id of its own");
    // B stops (leaving the group and the roster): A lists itself alone,
    // owning everything.
    let mut sb = sb;
    let pid = sb.child.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let _ = sb.child.wait();
    let v = cluster_until(&sa, "b gone, a owning all", |v| {
        v["members"]
            .as_array()
            .is_some_and(|m| m.len() == 1 && owned(&m[0]).len() == 4)
    });
    assert_eq!(v["members"][0]["url"], sa.url.as_str());
}
