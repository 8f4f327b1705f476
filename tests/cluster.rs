//! `GET /v1/cluster`: who serves the ledger, where each instance answers
//! and which ledger partitions each owns — on the embedded log this
//! instance alone, owning all; on Kafka every instance of the group, as
//! each announced itself on the members topic.

mod common;

use common::server::{self, Server};
use common::Backend;
use serde_json::{json, Value};
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
    // Each partition's end and lag in this instance's views.
    server::post_ok(
        &s.url,
        json!({"op":"publish_agent","agent":"worker","scope":"s"}),
    );
    server::post_ok(&s.url, json!({"op":"open_run","run":"r1","agent":"worker"}));
    let v = cluster(&s);
    let parts = v["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 4, "{v}");
    let mut written = 0;
    for (i, p) in parts.iter().enumerate() {
        assert_eq!(p["partition"], i as u64, "{v}");
        assert_eq!(p["owner"], v["me"], "{v}");
        assert_eq!(p["lag"], 0, "{v}");
        assert_eq!(p["projected"], p["end"], "{v}");
        written += p["end"].as_u64().unwrap();
    }
    assert_eq!(written, 1, "the run's opening: {v}");
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
    let (_dirs, sa, sb) = pair("cluster_pair");
    // Both listed by each, owning the four partitions between them.
    let va = cluster_until(&sa, "a sees both settled", settled);
    let vb = cluster_until(&sb, "b sees both settled", settled);
    let urls: BTreeSet<String> = va["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["url"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(urls, BTreeSet::from([sa.url.clone(), sb.url.clone()]));
    // Each partition named with its owner.
    for p in va["partitions"].as_array().unwrap() {
        let n = p["partition"].as_u64().unwrap();
        let owner = va["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| owned(m).contains(&n))
            .unwrap();
        assert_eq!(p["owner"], owner["id"], "{va}");
    }
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

/// Two `serve --listen` instances on the same Kafka topics, and their
/// data dirs.
fn pair(test: &str) -> ([tempfile::TempDir; 2], Server, Server) {
    let Backend::Kafka(k) = Backend::kafka(test) else {
        unreachable!("a Kafka backend")
    };
    let kafka = (k.brokers.clone(), k.topic_prefix.clone());
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sa = server::start(a.path(), Some(&kafka), &[]);
    let sb = server::start(b.path(), Some(&kafka), &[]);
    ([a, b], sa, sb)
}

/// Both instances of a pair listed by each, with URLs, sharing the four
/// partitions.
fn settled(v: &Value) -> bool {
    let Some(m) = v["members"].as_array() else {
        return false;
    };
    if m.iter().any(|m| m["url"].is_null() || m["stale"] == true) {
        return false;
    }
    let shares: Vec<BTreeSet<u64>> = m.iter().map(owned).collect();
    let all: BTreeSet<u64> = shares.iter().flatten().copied().collect();
    m.len() == 2
        && shares.iter().all(|s| !s.is_empty())
        && shares.iter().map(BTreeSet::len).sum::<usize>() == 4
        && all.len() == 4
}

/// POST `body` (ndjson when it has several lines) with `token` and any
/// `extra` headers: the status, the `Retry-After` header and the text.
fn post(
    url: &str,
    token: &str,
    body: &str,
    extra: &[(&str, &str)],
) -> (u16, Option<String>, String) {
    let mut r = server::client()
        .post(format!("{url}/v1/ops"))
        .bearer_auth(token)
        .header(
            "content-type",
            if body.trim().contains('\n') {
                "application/x-ndjson"
            } else {
                "application/json"
            },
        );
    for (k, v) in extra {
        r = r.header(*k, *v);
    }
    let r = r.body(body.to_string()).send().unwrap();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (r.status().as_u16(), retry, r.text().unwrap())
}

/// The forwarded-requests counter of an instance's `/metrics`.
fn forwarded(s: &Server) -> u64 {
    let text = server::http(&s.url)
        .get(format!("{}/metrics", s.url))
        .send()
        .unwrap()
        .text()
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("agentledger_forwarded_requests_total "))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// Each step of a run's trail as `s` answers it: (partition, writer).
fn trail(s: &Server, token: &str, run: &str) -> Vec<(u64, String)> {
    let r = server::client()
        .get(format!("{}/v1/runs/{run}/trail", s.url))
        .bearer_auth(token)
        .send()
        .unwrap();
    if r.status().as_u16() != 200 {
        return Vec::new();
    }
    r.text()
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["partition"].as_u64().unwrap(),
                v["writer"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn on_kafka_any_instance_takes_any_request_and_the_owner_decides_it() {
    let (_dirs, sa, sb) = pair("cluster_forward");
    let va = cluster_until(&sa, "a sees both settled", settled);
    cluster_until(&sb, "b sees both settled", settled);
    // A ledger token means the same to both (the operator's session
    // token is each instance's own, and is decided where it is shown).
    let token = server::issue(&sa.url, "operator", &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while post(
        &sb.url,
        &token,
        r#"{"op":"publish_agent","agent":"worker","scope":"s"}"#,
        &[],
    )
    .0 != 200
    {
        assert!(Instant::now() < deadline, "b never learned the token");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Each run opened through one instance and closed through the other:
    // every operation answered ok, none unknown_run or conflict.
    let (one, two) = (&sa, &sb);
    let runs: Vec<String> = (0..16).map(|i| format!("fw-{i}")).collect();
    for (i, run) in runs.iter().enumerate() {
        let (first, then) = if i % 2 == 0 { (one, two) } else { (two, one) };
        let open = format!(r#"{{"op":"open_run","run":"{run}","agent":"worker"}}"#);
        let (status, _, text) = post(&first.url, &token, &open, &[]);
        assert_eq!(status, 200, "open {run}: {text}");
        let close = format!(r#"{{"op":"close_run","run":"{run}","status":"succeeded"}}"#);
        let (status, _, text) = post(&then.url, &token, &close, &[]);
        assert_eq!(status, 200, "close {run}: {text}");
    }
    // An ndjson body spanning both instances' partitions, answered in order.
    let body: String = (0..8)
        .map(|i| format!("{{\"op\":\"open_run\",\"run\":\"nd-{i}\",\"agent\":\"worker\"}}\n"))
        .collect();
    let (status, _, text) = post(&sa.url, &token, &body, &[]);
    assert_eq!(status, 200, "{text}");
    let answers: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), 8, "{text}");
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(
            (&a["ok"], &a["run"]),
            (&json!(true), &json!(format!("nd-{i}"))),
            "{text}"
        );
    }
    // A WebSocket's operations go to their owners too, answered in order.
    let mut ws = server::ws_connect(&sa.url, &token).unwrap();
    for i in 0..8 {
        let a = server::ws_ask(
            &mut ws,
            &json!({"op":"open_run","run":format!("ws-{i}"),"agent":"worker"}),
        );
        assert_eq!(
            (&a["ok"], &a["run"]),
            (&json!(true), &json!(format!("ws-{i}"))),
            "{a}"
        );
    }
    let mut runs = runs;
    runs.extend((0..8).map(|i| format!("ws-{i}")));
    // Both forwarded, and every step was written by its partition's owner.
    assert!(forwarded(&sa) > 0 && forwarded(&sb) > 0);
    let owners: std::collections::BTreeMap<u64, String> = va["members"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| {
            let writer = m["id"]
                .as_str()
                .unwrap()
                .split('#')
                .next()
                .unwrap()
                .to_string();
            owned(m).into_iter().map(move |p| (p, writer.clone()))
        })
        .collect();
    for run in &runs {
        let steps = trail(&sa, &token, run);
        assert!(!steps.is_empty(), "{run}: {steps:?}");
        for (p, writer) in &steps {
            assert_eq!(&owners[p], writer, "{run}: {steps:?}");
        }
        // The same trail from the other instance, once it has caught up.
        let deadline = Instant::now() + Duration::from_secs(30);
        while trail(&sb, &token, run) != steps {
            assert!(Instant::now() < deadline, "b's trail of {run}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // A forwarded request for a chain this instance does not own (its
    // owner moved meanwhile) is refused, retryably, not decided or sent on.
    let a_writes_as = va["me"].as_str().unwrap().split('#').next().unwrap();
    let run = runs
        .iter()
        .find(|r| owners[&trail(&sa, &token, r)[0].0] != a_writes_as)
        .unwrap();
    let read = format!(r#"{{"op":"read_artifact","run":"{run}","name":"x"}}"#);
    let (status, retry, text) = post(
        &sa.url,
        &token,
        &read,
        &[("x-agentledger-forwarded-by", "test")],
    );
    assert_eq!((status, retry.as_deref()), (503, Some("1")), "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "not_owner", "{text}");
    // Reads of a chain go to its owner too (its views hold every step it
    // decided), and a forwarded read is answered by the owner only.
    let before = forwarded(&sa);
    assert!(trail(&sa, &token, run).len() >= 2);
    assert_eq!(forwarded(&sa), before + 1);
    let r = server::client()
        .get(format!("{}/v1/runs/{run}/trail", sa.url))
        .bearer_auth(&token)
        .header("x-agentledger-forwarded-by", "test")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let v: Value = r.json().unwrap();
    assert_eq!(v["error"]["code"], "not_owner", "{v}");
    // A token scoped elsewhere is refused by the owner through either instance.
    let stranger = server::issue(&sa.url, "platform:other", &["elsewhere"]);
    let close = r#"{"op":"close_run","run":"nd-0","status":"failed"}"#;
    for s in [&sa, &sb] {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, _, text) = post(&s.url, &stranger, close, &[]);
            if status == 401 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            assert_eq!(status, 403, "{text}");
            break;
        }
    }
}

/// The trail of `root`'s chain as instance `s`'s own views hold it (read
/// with its session token, so answered there, not by the owner).
fn local_chain_trail(s: &Server, root: &str) -> String {
    server::http(&s.url)
        .get(format!("{}/v1/runs/{root}/trail?chain=true", s.url))
        .send()
        .unwrap()
        .text()
        .unwrap()
}

#[test]
fn on_three_instances_a_chains_steps_sent_round_robin_are_all_answered_ok() {
    let k = common::required_env(common::KAFKA3_ENV);
    let kafka = (k, common::unique_prefix("cluster_three"));
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let s: Vec<Server> = dirs
        .iter()
        .map(|d| server::start(d.path(), Some(&kafka), &[]))
        .collect();
    let settled3 = |v: &Value| {
        let Some(m) = v["members"].as_array() else {
            return false;
        };
        let shares: Vec<BTreeSet<u64>> = m.iter().map(owned).collect();
        let all: BTreeSet<u64> = shares.iter().flatten().copied().collect();
        m.len() == 3
            && m.iter().all(|m| !m["url"].is_null() && m["stale"] == false)
            && shares.iter().all(|s| !s.is_empty())
            && shares.iter().map(BTreeSet::len).sum::<usize>() == all.len()
            && all.len() == 4
    };
    for i in &s {
        cluster_until(i, "all three settled", settled3);
    }
    let token = server::issue(&s[0].url, "operator", &[]);
    for (agent, listens, event, artifact) in [
        ("developer", "review.done", "code.ready", "patch"),
        ("reviewer", "code.ready", "review.done", "review"),
    ] {
        let publish = json!({"op":"publish_agent","agent":agent,"scope":"acme/platform",
            "listens":[listens],"emits":[{"event":event,"context":"c","artifacts":[artifact]}]});
        let deadline = Instant::now() + Duration::from_secs(60);
        // Through the last instance: once it takes the token, all do.
        while post(&s[2].url, &token, &publish.to_string(), &[]).0 != 200 {
            assert!(
                Instant::now() < deadline,
                "the token never reached every instance"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Four chains, each driven three hops, every step through the next
    // instance in turn: roots opened, closed, the listeners the owner's
    // dispatcher opens closed in their turn.
    let roots: Vec<String> = (0..4).map(|i| format!("rr-{i}")).collect();
    let mut turn = 0usize;
    let mut next = || {
        turn += 1;
        &s[turn % 3]
    };
    let mut answers = Vec::new();
    for root in &roots {
        let open = json!({"op":"open_run","run":root,"agent":"developer"});
        answers.push(post(&next().url, &token, &open.to_string(), &[]));
        let mut current = root.clone();
        for hop in 1..=3 {
            let close = json!({"op":"close_run","run":current,"status":"succeeded",
                "artifacts":{"patch":"p","review":"r"}});
            let via = next();
            let answer = post(&via.url, &token, &close.to_string(), &[]);
            assert_eq!(answer.0, 200, "{root} hop {hop}: {answer:?}");
            answers.push(answer);
            // The next run of the chain, once the instance asked next knows it.
            let runs = server::wait_chain(via, root, hop + 1, Duration::from_secs(30));
            current = runs.last().unwrap().clone();
        }
    }
    for (status, _, text) in &answers {
        assert_eq!(*status, 200, "{text}");
    }
    assert_eq!(answers.len(), 4 * 4);
    // Every instance's own views end with the same trail of each chain.
    for root in &roots {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let trails: Vec<String> = s.iter().map(|i| local_chain_trail(i, root)).collect();
            if trails.iter().all(|t| t == &trails[0]) && trails[0].lines().count() >= 7 {
                break;
            }
            assert!(Instant::now() < deadline, "{root}: {trails:#?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert!(s.iter().map(forwarded).sum::<u64>() > 0);
}
