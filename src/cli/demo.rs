//! `agentledger demo`: the seed scenarios end to end on a fresh embedded
//! data dir, driven through the same JSON operations a platform would send.

use agentledger::apply::apply_value;
use agentledger::engine::{Engine, EngineOptions};
use agentledger::report;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::path::Path;

const MARKER: &str = ".agentledger-demo";

struct Demo {
    engine: Engine,
    ops: u64,
    refused: u64,
}

impl Demo {
    /// Apply one operation; `expect_ok` says whether the demo expects it to
    /// be accepted (a refusal it shows on purpose is not a failure).
    fn op(&mut self, v: Value, expect_ok: bool) -> Result<Value> {
        self.ops += 1;
        let answer = match apply_value(&mut self.engine, &v) {
            Ok(a) => a,
            Err(e) => json!({"ok": false, "error": {"code": e.code(), "message": e.to_string()}}),
        };
        let ok = answer["ok"] == json!(true);
        if !ok {
            self.refused += 1;
        }
        if ok != expect_ok {
            bail!("demo step {v} answered unexpectedly: {answer}");
        }
        Ok(answer)
    }

    fn show(&mut self, v: Value, expect_ok: bool) -> Result<Value> {
        let a = self.op(v.clone(), expect_ok)?;
        println!("  > {v}");
        println!("  < {a}");
        Ok(a)
    }

    fn trail(&self, run: &str) -> Result<()> {
        for (r, s) in
            report::collect_trail(self.engine.views(), self.engine.log().as_ref(), run, true)?
        {
            println!("    {}", report::step_line(&r, &s));
        }
        Ok(())
    }
}

fn prepare(dir: &Path) -> Result<()> {
    if dir.exists() {
        let empty = std::fs::read_dir(dir)?.next().is_none();
        if !empty && !dir.join(MARKER).exists() {
            bail!(
                "{} exists and was not made by the demo; pass --dir with a new path",
                dir.display()
            );
        }
        std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join(MARKER),
        "made by agentledger demo; safe to delete\n",
    )?;
    Ok(())
}

pub fn run(dir: &Path) -> Result<i32> {
    prepare(dir)?;
    let engine = Engine::open_embedded(dir, EngineOptions::default())?;
    let mut d = Demo {
        engine,
        ops: 0,
        refused: 0,
    };
    println!("agentledger demo — embedded log in {}\n", dir.display());

    println!("1. Incident triage shares context by reference");
    d.show(json!({"op":"publish_agent","agent":"triager","scope":"acme/platform","listens":[],
        "emits":[{"event":"incident.triaged","context":"incident","artifacts":["triage_summary","suspected_cause"]}]}), true)?;
    d.show(json!({"op":"publish_agent","agent":"responder","scope":"acme/platform","listens":["incident.triaged"],"emits":[]}), true)?;
    d.show(json!({"op":"publish_agent","agent":"billing-watch","scope":"acme/finance","listens":["incident.triaged"],"emits":[]}), true)?;
    d.show(
        json!({"op":"open_run","run":"inc-1","agent":"triager"}),
        true,
    )?;
    d.show(
        json!({"op":"close_run","run":"inc-1","status":"succeeded","summary":"Incident triaged.",
        "artifacts":{"triage_summary":"The API is healthy; the failing target is one pod.",
                     "suspected_cause":"The worker is missing the Slack app token."},
        "labels":["untrusted"]}),
        true,
    )?;
    let a = d.show(json!({"op":"dispatch"}), true)?;
    let responder = a["opened"][0]["run"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    println!(
        "  (billing-watch in acme/finance is not opened: the artifacts carry area:acme/platform)"
    );
    d.show(
        json!({"op":"read_artifact","run":responder,"name":"triage_summary"}),
        true,
    )?;
    let by_ref = a["opened"][0]["run"].clone();
    let _ = by_ref;
    let summary_ref = d
        .engine
        .views()
        .run(&responder)?
        .and_then(|r| r.trigger)
        .map(|t| t.artifacts[0].content_ref.clone())
        .unwrap_or_default();
    println!("  (a read by ref is refused, even with the correct ref)");
    d.show(
        json!({"op":"read_artifact","run":responder,"name":summary_ref}),
        false,
    )?;
    d.show(
        json!({"op":"close_run","run":responder,"status":"succeeded","summary":"Token restored.",
        "artifacts":{"final_answer":"Restarted the worker with the Slack app token."}}),
        true,
    )?;
    d.op(json!({"op":"dispatch"}), true)?;
    println!("  trail of the chain started by inc-1:");
    d.trail("inc-1")?;

    println!("\n2. A developer ⇄ reviewer loop runs into the eight-hop limit");
    d.show(json!({"op":"publish_agent","agent":"developer","scope":"acme/platform","listens":["review.done"],
        "emits":[{"event":"code.ready","context":"change","artifacts":["patch"]}]}), true)?;
    d.show(json!({"op":"publish_agent","agent":"reviewer","scope":"acme/platform","listens":["code.ready"],
        "emits":[{"event":"review.done","context":"change","artifacts":["review"]}]}), true)?;
    d.show(
        json!({"op":"open_run","run":"dev-0","agent":"developer"}),
        true,
    )?;
    let mut current = "dev-0".to_string();
    let mut hop = 0;
    loop {
        let agent = if hop % 2 == 0 {
            "developer"
        } else {
            "reviewer"
        };
        let artifact = if agent == "developer" {
            "patch"
        } else {
            "review"
        };
        let close = d.op(
            json!({"op":"close_run","run":current,"status":"succeeded",
            "summary":format!("{agent} pass at hop {hop}"),
            "artifacts":{artifact: format!("{artifact} written at hop {hop}")}}),
            true,
        )?;
        if !close["withheld"].is_null() {
            println!(
                "  hop {hop}: {current} closed; withheld: {}",
                close["withheld"]
            );
            break;
        }
        let disp = d.op(json!({"op":"dispatch"}), true)?;
        let next = disp["opened"][0]["run"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        println!(
            "  hop {hop}: {current} ({agent}) closed -> opened {next} at hop {}",
            disp["opened"][0]["hop"]
        );
        if next.is_empty() {
            bail!("the loop stopped before the hop limit");
        }
        current = next;
        hop += 1;
    }
    let disp = d.show(json!({"op":"dispatch"}), true)?;
    if disp["opened"].as_array().is_some_and(|o| !o.is_empty()) {
        bail!("something opened beyond the hop limit");
    }
    println!("  trail of {current} (the run at the limit):");
    for (r, s) in report::collect_trail(d.engine.views(), d.engine.log().as_ref(), &current, false)?
    {
        println!("    {}", report::step_line(&r, &s));
    }

    println!("\n3. An agent listening to its own event");
    d.show(
        json!({"op":"publish_agent","agent":"echo","scope":"acme/platform","listens":["echo.said"],
        "emits":[{"event":"echo.said","context":"chat","artifacts":[]}]}),
        true,
    )?;
    d.op(json!({"op":"open_run","run":"echo-1","agent":"echo"}), true)?;
    d.op(
        json!({"op":"close_run","run":"echo-1","status":"succeeded","summary":"said"}),
        true,
    )?;
    d.show(json!({"op":"dispatch"}), true)?;

    d.engine.flush()?;
    let views = d.engine.views();
    let chain = views
        .chain("dev-0")?
        .map(|c| (c.runs.len(), c.max_hop))
        .unwrap_or_default();
    println!("\nSummary");
    println!(
        "  operations applied: {} ({} refused on purpose)",
        d.ops, d.refused
    );
    println!(
        "  dev-0 chain: {} runs, deepest hop {} (limit 8), last run's events withheld",
        chain.0, chain.1
    );
    println!("  inc-1 chain: responder read triage_summary and now carries `untrusted`; billing-watch stopped by the scope barrier");
    println!(
        "  explore: agentledger --data {} trail dev-0 --chain | status | rebuild",
        dir.display()
    );
    Ok(0)
}
