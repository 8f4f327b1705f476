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
    cluster_via(&server::http(&s.url), &s.url)
}

/// `GET /v1/cluster` of the instance at `url`, asked with client `c`.
fn cluster_via(c: &reqwest::blocking::Client, url: &str) -> Value {
    let r = c.get(format!("{url}/v1/cluster")).send().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    r.json().unwrap()
}

/// Ask `s` until `done` holds of its answer (within 90 s).
fn cluster_until(s: &Server, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    cluster_until_via(&server::http(&s.url), &s.url, what, done)
}

fn cluster_until_via(
    c: &reqwest::blocking::Client,
    url: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let v = cluster_via(c, url);
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The writer name a member's records carry (its id without the tag).
fn writer_of(m: &Value) -> String {
    m["id"]
        .as_str()
        .unwrap()
        .split('#')
        .next()
        .unwrap()
        .to_string()
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
    // The others relay MCP requests to that name: its endpoints answer it.
    server::post_ok(
        &s.url,
        json!({"op":"publish_agent","agent":"worker","scope":"s"}),
    );
    server::post_ok(
        &s.url,
        json!({"op":"open_run","run":"adv","agent":"worker"}),
    );
    let initialize = |host: &str| {
        server::http(&s.url)
            .post(format!("{}/v1/runs/adv/mcp", s.url))
            .header("host", host)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(server::mcp_initialize().to_string())
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(initialize("attacker.example"), 403);
    assert_eq!(initialize("ledger-1.example:8443"), 200);
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
    forwarded_via(&server::http(&s.url), &s.url)
}

fn forwarded_via(c: &reqwest::blocking::Client, url: &str) -> u64 {
    counter_via(c, url, "agentledger_forwarded_requests_total ")
}

/// Runs and tasks instance `s` found at another instance.
fn located(s: &Server) -> u64 {
    counter_via(&server::http(&s.url), &s.url, "agentledger_located_total ")
}

fn counter_via(c: &reqwest::blocking::Client, url: &str, name: &str) -> u64 {
    let text = c
        .get(format!("{url}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// Each step of a run's trail as `s` answers it: (partition, writer).
fn trail(s: &Server, token: &str, run: &str) -> Vec<(u64, String)> {
    trail_via(
        server::client()
            .get(format!("{}/v1/runs/{run}/trail", s.url))
            .bearer_auth(token),
    )
}

/// Each step of a trail as `asked` (its GET) answers it.
fn trail_via(asked: reqwest::blocking::RequestBuilder) -> Vec<(u64, String)> {
    let r = asked.send().unwrap();
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
    // A task (its id does not name its chain) asked of through the
    // instance that does not hold its run: found where it lives.
    let context = json!({"TaskID":"T","UserQuery":"q","TaskName":"n","TaskDescription":"d",
        "GoalStatus":[],"OverallStatus":"open"});
    for op in [
        json!({"op":"open_run","run":"task-root","agent":"worker"}),
        json!({"op":"open_task","task":"task-1","run":"task-root","task_context":context}),
    ] {
        let (status, _, text) = post(&sa.url, &token, &op.to_string(), &[]);
        assert_eq!(status, 200, "{text}");
    }
    let ask = r#"{"op":"get_context","task":"task-1","agent":"worker"}"#;
    for s in [&sa, &sb] {
        let (_, _, text) = post(&s.url, &token, ask, &[]);
        assert!(text.contains("not_your_context"), "{text}");
    }
    assert_eq!(located(&sa) + located(&sb), 1);
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
            let writer = writer_of(m);
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
    // So is the auditor's page of the chain, for a browser's Basic login.
    let page = server::client()
        .get(format!("{}/chains/{run}", sa.url))
        .basic_auth("auditor", Some(&token))
        .send()
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.text().unwrap().contains(run.as_str()));
    assert_eq!(forwarded(&sa), before + 2);
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
/// Views of partitions an instance no longer owns dropped within a second
/// (ten minutes by default).
const DROP_SOON: &[&str] = &["--drop-views-after-secs", "1"];

fn local_chain_trail(s: &Server, root: &str) -> (u16, String) {
    let r = server::http(&s.url)
        .get(format!("{}/v1/runs/{root}/trail?chain=true", s.url))
        .send()
        .unwrap();
    (r.status().as_u16(), r.text().unwrap())
}

/// The trail of `root`'s chain through instance `s` for `token` (answered
/// by the chain's owner).
fn chain_trail(s: &Server, token: &str, root: &str) -> String {
    server::client()
        .get(format!("{}/v1/runs/{root}/trail?chain=true", s.url))
        .bearer_auth(token)
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
        .map(|d| server::start(d.path(), Some(&kafka), DROP_SOON))
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
    // One chain in each partition, so that every instance holds some.
    let roots: Vec<String> = (0..4)
        .map(|p| run_in(&BTreeSet::from([p]), &format!("rr{p}")))
        .collect();
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
            let runs =
                server::wait_chain_as(via, Some(&token), root, hop + 1, Duration::from_secs(30));
            current = runs.last().unwrap().clone();
        }
    }
    for (status, _, text) in &answers {
        assert_eq!(*status, 200, "{text}");
    }
    assert_eq!(answers.len(), 4 * 4);
    // The same trail of each chain through every instance; only its
    // owner's views hold it (each instance projects its own partitions):
    // the others, asked with a credential they cannot pass on, say where.
    for root in &roots {
        let trails: Vec<String> = s.iter().map(|i| chain_trail(i, &token, root)).collect();
        assert!(
            trails.iter().all(|t| t == &trails[0]),
            "{root}: {trails:#?}"
        );
        assert!(trails[0].lines().count() >= 7, "{}", trails[0]);
        let local: Vec<(u16, String)> = s.iter().map(|i| local_chain_trail(i, root)).collect();
        let held: Vec<&(u16, String)> = local.iter().filter(|(st, _)| *st == 200).collect();
        assert_eq!(held.len(), 1, "{root}: {local:#?}");
        assert_eq!(held[0].1, trails[0]);
        for (status, text) in local.iter().filter(|(st, _)| *st != 200) {
            assert_eq!(*status, 503, "{text}");
            assert!(
                text.contains("not_owner") && text.contains("decided by instance"),
                "{text}"
            );
        }
    }
    assert!(s.iter().map(forwarded).sum::<u64>() > 0);
    // Each instance's views hold the partitions it owns, and only those.
    for i in &s {
        let v = cluster(i);
        let me = v["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == v["me"])
            .map(owned)
            .unwrap();
        let held: BTreeSet<u64> = v["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["held"] == true)
            .map(|p| p["partition"].as_u64().unwrap())
            .collect();
        assert_eq!(held, me, "{v}");
    }
    // The listener runs (their ids do not name their chain) closed through
    // instances that do not hold them were found where they live.
    assert!(s.iter().map(located).sum::<u64>() > 0);
    // A fourth instance joins and takes a partition: the instance that
    // held it drops its views of it; the newcomer projects it, and the
    // trails read through it are the same.
    let d4 = tempfile::tempdir().unwrap();
    let s4 = server::start(d4.path(), Some(&kafka), DROP_SOON);
    let settled4 = |v: &Value| {
        let Some(m) = v["members"].as_array() else {
            return false;
        };
        let all: BTreeSet<u64> = m.iter().flat_map(owned).collect();
        m.len() == 4
            && m.iter().all(|m| !m["url"].is_null() && m["stale"] == false)
            && m.iter().all(|m| owned(m).len() == 1)
            && all.len() == 4
    };
    let dropped = |v: &Value| {
        v["partitions"].as_array().is_some_and(|ps| {
            ps.iter().all(|p| {
                let held = p["held"] == true;
                (held && p["projected"] == p["end"]) || (!held && p["projected"] == 0)
            })
        })
    };
    let all: Vec<&Server> = s.iter().chain([&s4]).collect();
    for i in &all {
        cluster_until(i, "four settled", settled4);
        cluster_until(i, "views of partitions not held dropped", dropped);
    }
    let v4 = cluster(&s4);
    let ends: u64 = v4["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["held"] == true)
        .map(|p| p["end"].as_u64().unwrap())
        .sum();
    assert!(ends > 0, "the newcomer took a partition with records: {v4}");
    for root in &roots {
        let trails: Vec<String> = all.iter().map(|i| chain_trail(i, &token, root)).collect();
        assert!(
            trails.iter().all(|t| t == &trails[0]),
            "{root}: {trails:#?}"
        );
        assert!(trails[0].lines().count() >= 7, "{}", trails[0]);
    }
}

/// A client of instances serving HTTPS with certificates of `ca`, showing
/// the client certificate `identity` if given and, if given, `bearer`.
fn tls_client(
    ca: &common::tls::TestCa,
    identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
    bearer: Option<&str>,
) -> reqwest::blocking::Client {
    let mut b = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap());
    if let Some((cert, key)) = identity {
        let mut pem = std::fs::read(key).unwrap();
        pem.extend(std::fs::read(cert).unwrap());
        b = b.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    if let Some(t) = bearer {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("authorization", format!("Bearer {t}").parse().unwrap());
        b = b.default_headers(h);
    }
    b.build().unwrap()
}

/// POST one operation with client `c`: the status and the answer.
fn post_via(c: &reqwest::blocking::Client, url: &str, op: &Value) -> (u16, Value) {
    let r = c
        .post(format!("{url}/v1/ops"))
        .header("content-type", "application/json")
        .body(op.to_string())
        .send()
        .unwrap();
    (r.status().as_u16(), r.json().unwrap())
}

/// A run id whose chain lands in one of `partitions` (of the four).
fn run_in(partitions: &BTreeSet<u64>, tag: &str) -> String {
    (0..)
        .map(|i| format!("{tag}-{i}"))
        .find(|r| partitions.contains(&(common::java_partition(r.as_bytes(), 4) as u64)))
        .unwrap()
}

/// Callers whose credential only the instance they reach can check — a
/// client certificate (it stays with its TLS connection), that instance's
/// own session token — are forwarded with an assertion made with the
/// cluster key, and the owner decides as them: a run of another instance's
/// partition opened with a platform's certificate or the session token is
/// written by that owner; the owner's policy holds through forwarding (an
/// agent's certificate cannot close another agent's run through either
/// instance, while the run's own agent can). An assertion made with the key
/// but sent with another body or to another path, one made with another
/// key, or one on a request that was not forwarded is refused 401 saying why.
#[test]
fn on_kafka_callers_only_one_instance_can_authenticate_are_vouched_for_with_the_cluster_key() {
    use agentledger::auth::assertion;
    use common::tls::TestCa;
    let Backend::Kafka(k) = Backend::kafka("cluster_vouch") else {
        unreachable!("a Kafka backend")
    };
    let kafka = (k.brokers.clone(), k.topic_prefix.clone());
    let d = tempfile::tempdir().unwrap();
    let server_ca = TestCa::new();
    let (cert, key) = server_ca.server(d.path(), "server");
    let server_ca_file = server_ca.write(d.path(), "server");
    let clients = TestCa::new();
    let clients_file = clients.write(d.path(), "clients");
    let key_file = d.path().join("cluster.key");
    let secret = "5e".repeat(32);
    std::fs::write(&key_file, format!("{secret}\n")).unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let args = [
        "--tls-cert".to_string(),
        path(&cert),
        "--tls-key".into(),
        path(&key),
        "--client-ca".into(),
        path(&clients_file),
        "--cluster-key".into(),
        path(&key_file),
        "--tls-ca".into(),
        path(&server_ca_file),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sa = server::start(&d.path().join("a"), Some(&kafka), &args);
    let sb = server::start(&d.path().join("b"), Some(&kafka), &args);
    assert!(sa.url.starts_with("https://"), "{}", sa.url);
    let session = |s: &Server| server::SESSIONS.lock().unwrap()[&s.url].clone();
    let (op_a, op_b) = (
        tls_client(&server_ca, None, Some(&session(&sa))),
        tls_client(&server_ca, None, Some(&session(&sb))),
    );
    let va = cluster_until_via(&op_a, &sa.url, "a sees both settled", settled);
    cluster_until_via(&op_b, &sb.url, "b sees both settled", settled);
    let me_a = va["me"].as_str().unwrap().to_string();
    let (mine, theirs): (Vec<&Value>, Vec<&Value>) = va["members"]
        .as_array()
        .unwrap()
        .iter()
        .partition(|m| m["id"] == me_a.as_str());
    let b_owns = owned(theirs[0]);
    assert!(owned(mine[0]).is_disjoint(&b_owns));
    let b_writes_as = writer_of(theirs[0]);

    let cert_client = |name: &str, uri: &str| {
        tls_client(
            &server_ca,
            Some(clients.client(d.path(), name, &[uri])),
            None,
        )
    };
    let platform = cert_client("platform", "agentledger:platform:acme?scope=acme/travel");
    for agent in ["hotel", "weather"] {
        let publish = json!({"op":"publish_agent","agent":agent,"scope":"acme/travel"});
        let (status, a) = post_via(&platform, &sa.url, &publish);
        assert_eq!(status, 200, "{a}");
    }
    // Opened with the platform's certificate through a, on b's partition;
    // the agent's own certificate closes it through a too.
    let before = forwarded_via(&op_a, &sa.url);
    let run = run_in(&b_owns, "vouch-cert");
    let (status, a) = post_via(
        &platform,
        &sa.url,
        &json!({"op":"open_run","run":run,"agent":"hotel"}),
    );
    assert_eq!(status, 200, "{a}");
    assert!(forwarded_via(&op_a, &sa.url) > before);
    // The weather agent cannot close the hotel's run through either instance.
    let weather = cert_client("weather", "agentledger:agent:weather");
    let close = json!({"op":"close_run","run":run,"status":"succeeded"});
    for s in [&sa, &sb] {
        let (status, a) = post_via(&weather, &s.url, &close);
        assert_eq!(
            (status, &a["error"]["code"]),
            (403, &json!("forbidden")),
            "{a}"
        );
    }
    let hotel = cert_client("hotel", "agentledger:agent:hotel");
    let (status, a) = post_via(&hotel, &sa.url, &close);
    assert_eq!(status, 200, "{a}");
    // The trail, read with the certificate through a, is b's writing.
    let steps = trail_via(platform.get(format!("{}/v1/runs/{run}/trail", sa.url)));
    assert!(steps.len() >= 2, "{steps:?}");
    assert!(steps.iter().all(|(_, w)| *w == b_writes_as), "{steps:?}");

    // a's own session token, for a run on b's partition: decided by b.
    let run = run_in(&b_owns, "vouch-session");
    let (status, a) = post_via(
        &op_a,
        &sa.url,
        &json!({"op":"open_run","run":run,"agent":"weather"}),
    );
    assert_eq!(status, 200, "{a}");
    let steps = trail_via(op_a.get(format!("{}/v1/runs/{run}/trail", sa.url)));
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert_eq!(steps[0].1, b_writes_as, "{steps:?}");

    // Assertions made with the key (as a would), sent to b directly.
    let key = assertion::ClusterKey::from_bytes(secret.as_bytes()).unwrap();
    let acme = agentledger::auth::Grant::new(
        agentledger::auth::Principal::Platform("acme".into()),
        vec!["acme/travel".into()],
    )
    .unwrap();
    let plain = tls_client(&server_ca, None, None);
    let asserted =
        |key: &assertion::ClusterKey, target: &str, made_for: &str, sent: &str, forwarded: bool| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64;
            let a = assertion::make(
                key,
                "test",
                &acme,
                None,
                target,
                &assertion::body_digest(made_for.as_bytes()),
                now,
            );
            let mut r = plain
                .post(format!("{}/v1/ops", sb.url))
                .header("content-type", "application/json")
                .header(assertion::HEADER, a)
                .body(sent.to_string());
            if forwarded {
                r = r.header("x-agentledger-forwarded-by", "test");
            }
            let r = r.send().unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().unwrap())
        };
    let own = run_in(&b_owns, "vouch-made");
    let open = json!({"op":"open_run","run":own,"agent":"hotel"}).to_string();
    let other = json!({"op":"open_run","run":format!("{own}-x"),"agent":"hotel"}).to_string();
    let wrong_key = assertion::ClusterKey::from_bytes(&[7; 32]).unwrap();
    for (k, target, made_for, forwarded, says) in [
        (&key, "/v1/ops", &other, true, "another body"),
        (&key, "/v1/runs/x/trail", &open, true, "was made for"),
        (&wrong_key, "/v1/ops", &open, true, "--cluster-key"),
        (
            &key,
            "/v1/ops",
            &open,
            false,
            "only on a request another instance forwarded",
        ),
    ] {
        let (status, a) = asserted(k, target, made_for, &open, forwarded);
        assert_eq!(status, 401, "{says}: {a}");
        let message = a["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{says}: {a}");
    }
    // Nothing of those was recorded; the one made right is answered.
    let (status, a) = post_via(
        &op_b,
        &sb.url,
        &json!({"op":"read_artifact","run":own,"name":"x"}),
    );
    assert_eq!(
        (status, &a["error"]["code"]),
        (422, &json!("unknown_run")),
        "{a}"
    );
    let (status, a) = asserted(&key, "/v1/ops", &open, &open, true);
    assert_eq!(status, 200, "{a}");
}

/// An instance without a cluster key takes no assertion, saying what it
/// lacks; a key file too short to be one stops `serve` before it listens.
#[test]
fn an_assertion_needs_the_cluster_key_and_a_key_must_be_long_enough() {
    let d = tempfile::tempdir().unwrap();
    let s = server::start(&d.path().join("data"), None, &[]);
    let r = server::client()
        .post(format!("{}/v1/ops", s.url))
        .header("x-agentledger-assertion", "v1.e30.AAAA")
        .header("x-agentledger-forwarded-by", "test")
        .body(r#"{"op":"publish_agent","agent":"a","scope":"s"}"#)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let v: Value = r.json().unwrap();
    assert_eq!(v["error"]["code"], "unauthenticated", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no --cluster-key"),
        "{v}"
    );
    // With a key: an assertion of bytes that are not UTF-8, or cut short,
    // is refused saying what it is not; nothing is recorded.
    let key = d.path().join("cluster.key");
    std::fs::write(&key, "k".repeat(32)).unwrap();
    let keyed_dir = d.path().join("keyed");
    let keyed = server::start(&keyed_dir, None, &["--cluster-key", key.to_str().unwrap()]);
    for value in [&b"v1.\xff\xfe.AAAA"[..], b"v1.eyJieSI6"] {
        let r = server::client()
            .post(format!("{}/v1/ops", keyed.url))
            .header(
                "x-agentledger-assertion",
                reqwest::header::HeaderValue::from_bytes(value).unwrap(),
            )
            .header("x-agentledger-forwarded-by", "test")
            .body(r#"{"op":"publish_agent","agent":"a","scope":"s"}"#)
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 401);
        let v: Value = r.json().unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("is not v1.CLAIMS.MAC"), "{v}");
    }
    let agent = server::http(&keyed.url)
        .get(format!("{}/v1/agents/a", keyed.url))
        .send()
        .unwrap();
    let v: Value = agent.json().unwrap();
    assert_eq!(v["error"]["code"], "unknown_agent", "{v}");
    let short = d.path().join("short.key");
    std::fs::write(&short, "tooshort\n").unwrap();
    let other = d.path().join("other");
    let (code, _, err) = common::cli(
        &other,
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--cluster-key",
            short.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--cluster-key") && err.contains("holds 8 bytes"),
        "{err}"
    );
    assert!(!other.join("serve.addr").exists());
}

/// A JSON-RPC message POSTed to a run's MCP endpoint with `token` (and
/// the session, once there is one): the status, the session the answer
/// names, and the message it answers with (an SSE event's data, or JSON).
fn mcp_post(
    endpoint: &str,
    token: &str,
    session: Option<&str>,
    message: Value,
) -> (u16, Option<String>, Value) {
    let mut r = server::client()
        .post(endpoint)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-06-18");
    if let Some(id) = session {
        r = r.header("mcp-session-id", id);
    }
    let r = r.body(message.to_string()).send().unwrap();
    let status = r.status().as_u16();
    let session = r
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    let text = r.text().unwrap();
    let data = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .find(|d| !d.is_empty())
        .unwrap_or(&text)
        .trim()
        .to_string();
    let answer = serde_json::from_str(&data).unwrap_or(Value::String(text));
    (status, session, answer)
}

/// A run's MCP endpoint answers through any instance: the session lives
/// at the owner of the run's chain and every request of it — initialize,
/// the notification, a tool call, its end — is relayed there, so the close
/// a tool call makes is written by the owner; a request of it marked
/// forwarded to the other instance is refused 503 with `Retry-After`.
#[test]
fn on_kafka_a_runs_mcp_endpoint_answers_through_any_instance() {
    let (_dirs, sa, sb) = pair("cluster_mcp");
    let va = cluster_until(&sa, "a sees both settled", settled);
    cluster_until(&sb, "b sees both settled", settled);
    let theirs = va["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] != va["me"])
        .unwrap()
        .clone();
    let b_owns = owned(&theirs);
    let b_writes_as = writer_of(&theirs);
    let token = server::issue(&sa.url, "operator", &[]);
    let agent = server::issue(&sa.url, "agent:worker", &[]);
    let publish = r#"{"op":"publish_agent","agent":"worker","scope":"s"}"#;
    let deadline = Instant::now() + Duration::from_secs(60);
    while post(&sb.url, &token, publish, &[]).0 != 200 {
        assert!(Instant::now() < deadline, "b never learned the token");
        std::thread::sleep(Duration::from_millis(100));
    }
    let run = run_in(&b_owns, "mcp");
    let open = json!({"op":"open_run","run":run,"agent":"worker"}).to_string();
    let (status, _, text) = post(&sa.url, &token, &open, &[]);
    assert_eq!(status, 200, "{text}");
    let endpoint = format!("{}/v1/runs/{run}/mcp", sa.url);
    let before = forwarded(&sa);
    let initialize = server::mcp_initialize();
    let deadline = Instant::now() + Duration::from_secs(30);
    let session = loop {
        // b learns the agent's token from the registry a moment later.
        match mcp_post(&endpoint, &agent, None, initialize.clone()) {
            (200, Some(id), answer) => {
                assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
                break id;
            }
            (401, _, _) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100))
            }
            other => panic!("initialize through a: {other:?}"),
        }
    };
    let (status, _, _) = mcp_post(
        &endpoint,
        &agent,
        Some(&session),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    );
    assert!((200..300).contains(&status), "{status}");
    let (status, _, answer) = mcp_post(
        &endpoint,
        &agent,
        Some(&session),
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
            "name":"close_run","arguments":{"status":"succeeded","summary":"done"}}}),
    );
    assert_eq!(status, 200, "{answer}");
    assert_ne!(answer["result"]["isError"], true, "{answer}");
    // The session is b's: a knows nothing of it, so a request of it marked
    // forwarded to a is refused, retryably.
    let r = server::client()
        .post(&endpoint)
        .bearer_auth(&agent)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", &session)
        .header("x-agentledger-forwarded-by", "test")
        .body(json!({"jsonrpc":"2.0","id":3,"method":"tools/list"}).to_string())
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let ended = server::client()
        .delete(&endpoint)
        .bearer_auth(&agent)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .unwrap();
    assert!(ended.status().is_success(), "{}", ended.status());
    assert!(
        forwarded(&sa) >= before + 4,
        "initialize, notification, call, end"
    );
    let steps = trail(&sa, &token, &run);
    assert!(steps.len() >= 2, "the open, the close: {steps:?}");
    assert!(steps.iter().all(|(_, w)| *w == b_writes_as), "{steps:?}");
}
