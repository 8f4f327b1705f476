//! The next agent starts at once: with `serve`'s poll set to a minute, a
//! listener still opens right after its source run closes — through the
//! server (the serve loop dispatches on the close it just made durable)
//! and, on Kafka, when another writer closes the run (the server is woken
//! by the ledger's tail). Before, both waited for the next poll.

mod common;

use common::server;
use common::{Backend, Ledger};
use serde_json::{json, Value};
use std::time::Duration;

fn agents() -> [Value; 2] {
    [
        json!({"op":"publish_agent","agent":"producer","scope":"acme/platform",
               "emits":[{"event":"work.done","context":"c","artifacts":[]}]}),
        json!({"op":"publish_agent","agent":"consumer","scope":"acme/platform",
               "listens":["work.done"],"emits":[]}),
    ]
}

/// Wait (well under the minute-long poll) for `run`'s listener.
fn listener_opens(s: &server::Server, run: &str) {
    server::wait_chain(s, run, 2, Duration::from_secs(15));
}

const SLOW_POLL: [&str; 2] = ["--poll-ms", "60000"];

#[test]
fn a_close_through_serve_dispatches_without_waiting_for_the_poll() {
    let d = tempfile::tempdir().unwrap();
    let s = server::start(&d.path().join("d"), None, &SLOW_POLL);
    for a in agents() {
        server::post_ok(&s.url, a);
    }
    for i in 0..3 {
        let run = format!("p{i}");
        server::post_ok(
            &s.url,
            json!({"op":"open_run","run":run,"agent":"producer"}),
        );
        server::post_ok(
            &s.url,
            json!({"op":"close_run","run":run,"status":"succeeded","artifacts":{}}),
        );
        listener_opens(&s, &run);
    }
}

#[test]
fn kafka_a_close_by_another_writer_wakes_serve() {
    let backend = Backend::kafka("dispatch_wake");
    let Backend::Kafka(k) = &backend else {
        unreachable!()
    };
    let d = tempfile::tempdir().unwrap();
    let kafka = (k.brokers.clone(), k.topic_prefix.clone());
    let s = server::start(&d.path().join("serve"), Some(&kafka), &SLOW_POLL);
    for a in agents() {
        server::post_ok(&s.url, a);
    }
    let mut other = Ledger::open_on(&d.path().join("other"), &backend);
    for i in 0..3 {
        let run = format!("w{i}");
        other.ok(json!({"op":"open_run","run":run,"agent":"producer"}));
        other.ok(json!({"op":"close_run","run":run,"status":"succeeded","artifacts":{}}));
        listener_opens(&s, &run);
    }
}
