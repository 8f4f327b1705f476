//! `open_run` + `close_run` pairs through the engine alone (no HTTP, no
//! network), for `tools/count-instructions`: it runs this under valgrind's
//! callgrind with two counts of pairs, and the difference in instructions
//! over the difference in pairs is what one pair costs once started — a
//! figure that a noisy machine does not move, beside the timed ones.
//! Usage: count_ops PAIRS DIR

use agentledger::engine::{Engine, EngineOptions};
use agentledger::protocol::reply;
use serde_json::json;

fn main() {
    let mut args = std::env::args().skip(1);
    let pairs: usize = args.next().and_then(|n| n.parse().ok()).expect("PAIRS");
    let dir = std::path::PathBuf::from(args.next().expect("DIR"));
    let mut engine = Engine::open_embedded(&dir, EngineOptions::default()).expect("open");
    ok(
        &mut engine,
        json!({"op":"publish_agent","agent":"developer","scope":"acme/platform",
        "emits":[{"event":"code.ready","context":"change","artifacts":["patch"]}]}),
    );
    count_these(&mut engine, pairs);
}

fn ok(engine: &mut Engine, op: serde_json::Value) {
    let (r, _) = reply(engine, &op);
    assert!(r.is_ok(), "{op}: {r:?}");
}

/// The pairs: callgrind counts this function's instructions alone
/// (`--toggle-collect`), since what the background threads (the views'
/// write-behind, sled's flusher) do per pair depends on time, not on work.
#[inline(never)]
fn count_these(engine: &mut Engine, pairs: usize) {
    for i in 0..pairs {
        let run = format!("run-{i}");
        ok(
            engine,
            json!({"op":"open_run","run":run,"agent":"developer"}),
        );
        ok(
            engine,
            json!({"op":"close_run","run":run,"status":"succeeded","artifacts":{"patch":format!("diff {i}")}}),
        );
    }
}
