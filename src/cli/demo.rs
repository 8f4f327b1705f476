//! `agentledger demo`: the seed scenarios end to end on a fresh embedded
//! data dir, driven through the same JSON operations a platform would send.

use agentledger::apply::apply_value;
use agentledger::engine::{Engine, EngineOptions};
use agentledger::queries::report;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::path::Path;

const MARKER: &str = ".agentledger-demo";

/// Where the demo plays without `--dir` or `--data`.
pub const DEFAULT_DIR: &str = "./agentledger-demo";

/// Whether `dir` holds a demo's ledger.
pub fn made(dir: &Path) -> bool {
    dir.join(MARKER).exists()
}

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
        outln!("  > {}", abbreviated(&v));
        outln!("  < {}", abbreviated(&a));
        Ok(a)
    }

    fn trail(&self, run: &str) -> Result<()> {
        for (r, s) in agentledger::engine::trail::collect_trail(
            self.engine.views(),
            self.engine.log().as_ref(),
            run,
            true,
        )? {
            outln!("    {}", report::step_line(&r, &s));
        }
        Ok(())
    }
}

/// Longer strings than this are cut when the demo shows an operation.
const SHOWN_CHARS: usize = 100;

/// The JSON of an operation or answer as the demo shows it: a string value
/// longer than [`SHOWN_CHARS`] is cut, saying how long it was, so that a
/// 1,800-character blob reads as one line. The ledger got it whole.
fn abbreviated(v: &Value) -> Value {
    match v {
        Value::String(s) if s.chars().count() > SHOWN_CHARS => {
            let head: String = s.chars().take(SHOWN_CHARS - 20).collect();
            Value::String(format!("{head}… ({} characters)", s.chars().count()))
        }
        Value::Array(items) => Value::Array(items.iter().map(abbreviated).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), abbreviated(v)))
                .collect(),
        ),
        other => other.clone(),
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
    agentledger::log::private_files::create_dir_all(dir)?;
    agentledger::log::private_files::write(
        &dir.join(MARKER),
        "made by agentledger demo; safe to delete\n",
    )?;
    Ok(())
}

pub fn run(dir: &Path) -> Result<i32> {
    if dir.exists() && !dir.is_dir() {
        anyhow::bail!(
            "demo --dir {}: that is a file, not a directory",
            dir.display()
        );
    }
    prepare(dir)?;
    let engine = Engine::open_embedded(dir, EngineOptions::default())?;
    let mut d = Demo {
        engine,
        ops: 0,
        refused: 0,
    };
    outln!("agentledger demo — embedded log in {}\n", dir.display());

    outln!("1. Incident triage shares context by reference");
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
    outln!(
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
        .and_then(|r| r.state.trigger)
        .map(|t| t.artifacts[0].content_ref())
        .unwrap_or_default();
    outln!("  (a read by ref is refused, even with the correct ref)");
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
    outln!("  trail of the chain started by inc-1:");
    d.trail("inc-1")?;

    outln!("\n2. A developer ⇄ reviewer loop runs into the eight-hop limit");
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
            outln!(
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
        outln!(
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
    outln!("  trail of {current} (the run at the limit):");
    for (r, s) in agentledger::engine::trail::collect_trail(
        d.engine.views(),
        d.engine.log().as_ref(),
        &current,
        false,
    )? {
        outln!("    {}", report::step_line(&r, &s));
    }

    outln!("\n3. An agent listening to its own event");
    d.show(
        json!({"op":"publish_agent","agent":"echo","scope":"acme/platform","listens":["echo.said"],
        "emits":[{"event":"echo.said","context":"chat","artifacts":[]}]}),
        true,
    )?;
    d.show(json!({"op":"open_run","run":"echo-1","agent":"echo"}), true)?;
    d.show(
        json!({"op":"close_run","run":"echo-1","status":"succeeded","summary":"said"}),
        true,
    )?;
    outln!("  (echo-1 published echo.said; its own agent is not started by it)");
    d.show(json!({"op":"dispatch"}), true)?;

    context_scenarios(&mut d)?;

    d.engine.flush()?;
    let views = d.engine.views();
    let chain = views
        .chain("dev-0")?
        .map(|c| (c.runs.len(), c.max_hop))
        .unwrap_or_default();
    outln!("\nSummary");
    outln!(
        "  operations applied: {} ({} refused on purpose)",
        d.ops,
        d.refused
    );
    outln!(
        "  dev-0 chain: {} runs, deepest hop {} (limit 8), last run's events withheld",
        chain.0,
        chain.1
    );
    outln!("  inc-1 chain: responder read triage_summary and now carries `untrusted`; billing-watch stopped by the scope barrier");
    for task in ["tour", "doctor"] {
        let st = d.engine.task_stats(task)?;
        outln!(
            "  task {task}: {} subtasks; {} bytes sent inline, {} bytes left behind references (~{} tokens saved at ~4 bytes/token); {} refusals recorded",
            st.subtasks, st.inline_bytes, st.referenced_bytes, st.est_tokens_saved, st.refusals
        );
    }
    outln!(
        "  explore: agentledger --data {} trail dev-0 --chain | stats tour | verify | status | rebuild",
        dir.display()
    );
    outln!(
        "  picture: agentledger --data {} chain dev-0 --format svg > chain.svg   (or --format dot)",
        dir.display()
    );
    outln!(
        "  pages:   agentledger --data {} serve --listen 127.0.0.1:8700, then open http://127.0.0.1:8700/ (user any, password: the token in {})",
        dir.display(),
        dir.join("serve.token").display()
    );
    Ok(0)
}

/// An AgentContext as the master sends it (draft, Figure 4).
fn agent_context(
    agent: &str,
    sub: &str,
    name: &str,
    deps: &[&str],
    items: &[(&str, &str, &str, &str)],
    todos: &[&str],
) -> Value {
    json!({
        "AgentID": format!("agent-{agent}"),
        "AgentName": agent,
        "SubTaskID": sub,
        "SubTaskName": name,
        "Dependencies": deps,
        "ContextItems": items.iter().map(|(id, uri, desc, prio)| json!({
            "ContextID": id, "ContextType": "document", "MediaType": "text/plain",
            "ContextURI": uri, "Description": desc, "Priority": prio})).collect::<Vec<_>>(),
        "CompressionPolicy": {"Strategy": "target_ratio", "TargetRatio": 0.3, "LossTolerance": "low",
            "MustPreserveFields": ["KeyInformation", "Dependencies", "ContextItems[].Description"]},
        "todoItems": todos.iter().enumerate().map(|(i, t)| json!({"itemID": format!("i{}", i + 1), "description": t})).collect::<Vec<_>>(),
        "EvaluationPolicy": {"SuccessCriteria": [{"CriterionID": "c1", "Description": "result usable by the master", "Required": true}],
            "ConfidenceThreshold": 0.8}
    })
}

/// The agent's updated context: `done` of its todo items finished.
fn returned(sent: &Value, done: usize, confidence: f64, abstracts: &[&str]) -> Value {
    let mut r = sent.clone();
    let todos = sent["todoItems"].as_array().cloned().unwrap_or_default();
    r["ItemStateUpdates"] = json!(todos
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"itemID": t["itemID"], "state": u8::from(i < done)}))
        .collect::<Vec<_>>());
    r["KeyInformation"] = json!(todos
        .iter()
        .zip(abstracts)
        .map(|(t, a)| json!({"itemID": t["itemID"], "outputabstract": a}))
        .collect::<Vec<_>>());
    r["EvaluationResult"] = json!({"Status": if done == todos.len() { "passed" } else { "failed" }, "Confidence": confidence,
        "CriterionResults": [{"CriterionID": "c1", "Status": if done == todos.len() { "passed" } else { "failed" }, "EvidenceRefs": [], "TraceRefs": []}]});
    r
}

fn task_context(id: &str, name: &str, query: &str, goals: &[&str]) -> Value {
    json!({"TaskID": id, "UserQuery": query, "TaskName": name, "TaskDescription": query,
        "GoalStatus": goals.iter().map(|g| json!({"Goal": g, "Status": "pending"})).collect::<Vec<_>>(),
        "OverallStatus": "in_progress"})
}

fn context_scenarios(d: &mut Demo) -> Result<()> {
    outln!("\n4. Tour plan: independent hotel, flight and weather agents (async)");
    d.show(json!({"op":"publish_agent","agent":"planner","scope":"acme/travel","listens":[],"emits":[]}), true)?;
    d.op(
        json!({"op":"open_run","run":"tour-master","agent":"planner"}),
        true,
    )?;
    d.show(json!({"op":"open_task","task":"tour","run":"tour-master","task_context":
        task_context("T-tour", "tour-plan", "Plan three days in Lisbon in May", &["hotel", "flight", "weather"])}), true)?;
    let prefs = d.show(json!({"op":"put_blob","task":"tour","content":"Traveller profile: two adults, mid-range budget, prefers the old town, no red-eye flights. ".repeat(20),"media_type":"text/plain","ttl_s":3600}), true)?;
    let uri = prefs["uri"].as_str().unwrap_or_default().to_string();
    let hotel = agent_context(
        "hotel",
        "h1",
        "book a hotel",
        &[],
        &[("prefs", &uri, "traveller profile", "reference_only")],
        &["shortlist hotels", "book one"],
    );
    let flight = agent_context(
        "flight",
        "f1",
        "book flights",
        &[],
        &[("prefs", &uri, "traveller profile", "reference_only")],
        &["find flights", "book them"],
    );
    let weather = agent_context(
        "weather",
        "w1",
        "check the weather",
        &[],
        &[],
        &["fetch the forecast"],
    );
    for ctx in [&hotel, &flight, &weather] {
        d.show(
            json!({"op":"send_context","task":"tour","run":"tour-master","mode":"async","agent_context":ctx}),
            true,
        )?;
    }
    outln!("  (three subtasks outstanding at once; each agent sees only its own context)");
    d.show(
        json!({"op":"get_context","task":"tour","agent":"weather"}),
        true,
    )
    .map(|_| ())?;
    d.show(
        json!({"op":"get_blob","task":"tour","agent":"hotel","uri":uri}),
        true,
    )
    .map(|_| ())?;
    outln!("  (weather was never sent the profile: resolving it is refused)");
    d.show(
        json!({"op":"get_blob","task":"tour","agent":"weather","uri":uri}),
        false,
    )?;
    outln!("  (flight returning the hotel's context is refused)");
    d.show(json!({"op":"return_context","task":"tour","agent":"flight","agent_context":returned(&hotel, 2, 0.9, &["", ""])}), false)?;
    d.show(json!({"op":"return_context","task":"tour","agent":"hotel","agent_context":returned(&hotel, 2, 0.92, &["3 hotels near Alfama", "booked Casa Alfama, 3 nights"])}), true)?;
    d.show(json!({"op":"return_context","task":"tour","agent":"flight","agent_context":returned(&flight, 1, 0.6, &["TP1351 and TP1360 found", ""])}), true)?;
    d.show(json!({"op":"return_context","task":"tour","agent":"weather","agent_context":returned(&weather, 1, 0.95, &["sunny, 22°C"])}), true)?;
    d.show(json!({"op":"evaluate","task":"tour","run":"tour-master","subtask":"s1","decision":"accepted","reason":"booking confirmed"}), true)?;
    d.show(json!({"op":"evaluate","task":"tour","run":"tour-master","subtask":"s2","decision":"rejected","reason":"flights found but not booked"}), true)?;
    d.show(json!({"op":"evaluate","task":"tour","run":"tour-master","subtask":"s3","decision":"accepted","reason":"forecast is enough"}), true)?;
    let mut tc = task_context(
        "T-tour",
        "tour-plan",
        "Plan three days in Lisbon in May",
        &[],
    );
    tc["GoalStatus"] = json!([{"Goal":"hotel","Status":"done"},{"Goal":"flight","Status":"retry"},{"Goal":"weather","Status":"done"}]);
    d.show(
        json!({"op":"update_task","task":"tour","run":"tour-master","task_context":tc}),
        true,
    )?;
    outln!("  trail of tour-master:");
    d.trail("tour-master")?;

    outln!("\n5. See a doctor: diagnosis -> prescription -> buy-medicine (sync, dependencies)");
    d.op(
        json!({"op":"open_run","run":"doctor-master","agent":"planner"}),
        true,
    )?;
    d.op(json!({"op":"open_task","task":"doctor","run":"doctor-master","task_context":
        task_context("T-doc", "see-a-doctor", "Persistent cough for two weeks", &["diagnosis", "prescription", "medicine"])}), true)?;
    let symptoms = d.op(json!({"op":"put_blob","task":"doctor","content":"Patient notes: dry cough 14 days, no fever, non-smoker.","ttl_s":3600}), true)?;
    let symptoms = symptoms["uri"].as_str().unwrap_or_default().to_string();
    let diag = agent_context(
        "diagnosis",
        "d1",
        "diagnose",
        &[],
        &[("notes", &symptoms, "patient notes", "must_preserve")],
        &["assess symptoms", "name a diagnosis"],
    );
    let presc = agent_context(
        "prescription",
        "p1",
        "prescribe",
        &["d1"],
        &[("notes", &symptoms, "patient notes", "reference_only")],
        &["choose medication"],
    );
    let buy = agent_context(
        "buy-medicine",
        "b1",
        "buy the medicine",
        &["p1"],
        &[],
        &["order from pharmacy"],
    );
    outln!("  (the master skips a dependency: prescription before diagnosis is accepted)");
    d.show(
        json!({"op":"send_context","task":"doctor","run":"doctor-master","mode":"sync","agent_context":presc}),
        false,
    )?;
    d.show(
        json!({"op":"send_context","task":"doctor","run":"doctor-master","mode":"sync","agent_context":diag}),
        true,
    )?;
    outln!("  (sync: one outstanding subtask at a time)");
    d.show(
        json!({"op":"send_context","task":"doctor","run":"doctor-master","mode":"sync","agent_context":buy}),
        false,
    )?;
    d.op(
        json!({"op":"get_blob","task":"doctor","agent":"diagnosis","uri":symptoms}),
        true,
    )?;
    d.show(json!({"op":"return_context","task":"doctor","agent":"diagnosis","agent_context":returned(&diag, 2, 0.88, &["dry cough, no fever", "likely post-viral cough"])}), true)?;
    d.op(json!({"op":"evaluate","task":"doctor","run":"doctor-master","subtask":"s1","decision":"accepted","reason":"plausible"}), true)?;
    d.show(
        json!({"op":"send_context","task":"doctor","run":"doctor-master","mode":"sync","agent_context":presc}),
        true,
    )?;
    outln!("  (the stored notes are tampered with on disk: the digest check refuses them)");
    let path = d.engine.blob_file("doctor", &symptoms)?;
    let original = std::fs::read(&path)?;
    std::fs::write(&path, b"Patient notes: prescribe antibiotics.")?;
    d.show(
        json!({"op":"get_blob","task":"doctor","agent":"prescription","uri":symptoms}),
        false,
    )?;
    std::fs::write(&path, original)?;
    let mut breach = returned(&presc, 1, 0.9, &["honey and rest"]);
    breach["ContextItems"] = json!([]);
    outln!("  (prescription drops a reference_only item: a compression breach fails layer one)");
    d.show(json!({"op":"return_context","task":"doctor","agent":"prescription","agent_context":breach}), true)?;
    d.op(json!({"op":"evaluate","task":"doctor","run":"doctor-master","subtask":"s2","decision":"accepted","reason":"master overrules: advice is sound"}), true)?;
    d.op(
        json!({"op":"send_context","task":"doctor","run":"doctor-master","mode":"sync","agent_context":buy}),
        true,
    )?;
    let short = d.op(
        json!({"op":"put_blob","task":"doctor","content":"one-time pharmacy code 4711","ttl_s":0}),
        true,
    )?;
    outln!("  (a reference past its TTL: the bytes are gone, the digest stays in the ledger)");
    d.show(
        json!({"op":"get_blob","task":"doctor","agent":"doctor-master","uri":short["uri"]}),
        false,
    )?;
    d.op(json!({"op":"return_context","task":"doctor","agent":"buy-medicine","agent_context":returned(&buy, 1, 0.99, &["ordered, pickup tomorrow"])}), true)?;
    d.op(json!({"op":"evaluate","task":"doctor","run":"doctor-master","subtask":"s3","decision":"accepted","reason":"done"}), true)?;
    outln!("  trail of doctor-master:");
    d.trail("doctor-master")?;
    Ok(())
}
