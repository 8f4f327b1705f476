//! The inspection commands a platform and an auditor use from the shell,
//! each run as the binary: `chain`, `agent`, `stats`, `subscribe`, `demo`.

mod common;

use common::{cli, Ledger};
use serde_json::{json, Value};

fn lines_json(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// The developer ⇄ reviewer loop driven to the hop limit from `dev-0`.
fn looped() -> (tempfile::TempDir, Vec<String>) {
    let d = tempfile::tempdir().unwrap();
    let runs = Ledger::open(d.path()).drive_loop("dev-0");
    (d, runs)
}

#[test]
fn chain_lists_every_run_with_its_hop_and_who_opened_it() {
    let (d, runs) = looped();
    assert_eq!(runs.len(), 9);
    let (code, out, err) = cli(d.path(), &["--json", "chain", &runs[3]]);
    assert_eq!(code, 0, "{err}");
    let chain: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(chain["root"], "dev-0");
    let listed = chain["runs"].as_array().unwrap();
    assert_eq!(listed.len(), 9);
    for (hop, (row, run)) in listed.iter().zip(&runs).enumerate() {
        assert_eq!(row["run"], json!(run));
        assert_eq!(row["hop"], json!(hop));
        let source = (hop > 0).then(|| runs[hop - 1].clone());
        assert_eq!(row["source_run"], json!(source));
    }
    assert_eq!(listed[8]["withheld"]["reason"], "hop_limit");
    assert!(listed[7]["withheld"].is_null());
    let (code, text, _) = cli(d.path(), &["chain", "dev-0"]);
    assert_eq!(code, 0);
    assert!(text.starts_with("chain of dev-0:"), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("[events withheld]"))
            .count(),
        1
    );
    let (code, _, err) = cli(d.path(), &["chain", "nope"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown_run"), "{err}");
}

#[test]
fn agent_shows_every_version_and_its_loop_warnings() {
    let (d, _) = looped();
    let (code, out, err) = cli(d.path(), &["--json", "agent", "reviewer"]);
    assert_eq!(code, 0, "{err}");
    let versions = lines_json(&out);
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0]["version"], 1);
    assert_eq!(versions[0]["listens"], json!(["code.ready"]));
    assert_eq!(
        versions[0]["loop_check"]["warnings"][0]["text"],
        "reviewer → developer → reviewer"
    );
    let (_, text, _) = cli(d.path(), &["agent", "developer"]);
    assert!(text.starts_with("developer v1 (acme/platform)"), "{text}");
    assert!(
        !text.contains("loop:"),
        "developer was published first: {text}"
    );
    let (code, _, err) = cli(d.path(), &["agent", "nobody"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown_agent"), "{err}");
}

#[test]
fn stats_counts_bytes_inline_and_behind_references() {
    let d = tempfile::tempdir().unwrap();
    {
        let mut l = Ledger::open(d.path());
        l.publish("master", "acme/travel", &[], &[]);
        l.open_run("m1", "master");
        l.ok(json!({"op":"open_task","task":"t1","run":"m1","task_context":{"TaskID":"T",
            "UserQuery":"q","TaskName":"n","TaskDescription":"d","GoalStatus":[],"OverallStatus":"open"}}));
        let doc = "x".repeat(4000);
        let uri = l.ok(json!({"op":"put_blob","task":"t1","content":doc}))["uri"].clone();
        let ctx = json!({"AgentID":"a","AgentName":"hotel","SubTaskID":"h","SubTaskName":"h",
            "Dependencies":[],"ContextItems":[{"ContextID":"c","ContextType":"text","MediaType":"text/plain",
            "ContextURI":uri,"Description":"d","Priority":"reference_only"}],
            "todoItems":[],"EvaluationPolicy":{"SuccessCriteria":[],"ConfidenceThreshold":0.5}});
        let sent = l.ok(
            json!({"op":"send_context","task":"t1","run":"m1","mode":"sync","agent_context":ctx}),
        );
        assert_eq!(sent["referenced_bytes"], 4000);
        l.refused(json!({"op":"get_context","task":"t1","agent":"nobody"}));
        let inline = sent["inline_bytes"].clone();
        drop(l);
        let (code, out, err) = cli(d.path(), &["--json", "stats", "t1"]);
        assert_eq!(code, 0, "{err}");
        let stats: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(stats["subtasks"], 1);
        assert_eq!(stats["inline_bytes"], inline);
        assert_eq!(stats["referenced_bytes"], 4000);
        assert_eq!(stats["est_tokens_saved"], 1000);
        assert_eq!(stats["refusals"], 1);
    }
    let (code, _, err) = cli(d.path(), &["stats", "nope"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown_task"), "{err}");
}

#[test]
fn subscribe_prints_every_published_event_and_never_a_withheld_one() {
    let (d, runs) = looped();
    let (code, out, err) = cli(
        d.path(),
        &["subscribe", "--from-beginning", "--idle-exit", "1"],
    );
    assert_eq!(code, 0, "{err}");
    let events = lines_json(&out);
    // Runs at hops 0..7 each published one event; the run at hop 8 withheld.
    assert_eq!(events.len(), 8);
    for (e, run) in events.iter().zip(&runs) {
        assert_eq!(e["subject"], json!(run));
        assert_eq!(e["specversion"], "1.0");
        assert_eq!(e["data"]["schema"], "agentledger.published_event.v1");
    }
    assert!(events.iter().all(|e| e["subject"] != json!(runs[8])));
    let (_, two, _) = cli(d.path(), &["subscribe", "--from-beginning", "--max", "2"]);
    assert_eq!(two.lines().count(), 2);
}

#[test]
fn demo_plays_the_seed_scenarios_and_leaves_a_ledger_that_verifies() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("demo");
    // `--data` names the demo's dir as `--dir` does (both, differing, are
    // refused: tests/help.rs).
    let (code, out, err) = cli(&dir, &["demo", "--dir", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        !err.contains("chmod"),
        "the demo's data dir is private: {err}"
    );
    assert!(
        out.contains("dev-0 chain: 9 runs, deepest hop 8 (limit 8)"),
        "{out}"
    );
    assert!(
        out.contains("billing-watch stopped by the scope barrier"),
        "{out}"
    );
    let (code, out, err) = cli(&dir, &["--json", "verify"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["ok"], true);
    // Played again over its own data dir: the same story, not an error.
    let (code, _, err) = cli(&dir, &["demo"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn the_views_cache_is_bounded_by_cache_mb_and_zero_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let (code, _, err) = cli(d.path(), &["--cache-mb", "0", "status"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--cache-mb"), "{err}");
    let mut l = Ledger::open(d.path());
    l.drive_loop("r0");
    drop(l);
    let (code, out, err) = cli(d.path(), &["--cache-mb", "16", "trail", "r0"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("r0"), "{out}");
    let (code, _, err) = cli(d.path(), &["--cache-mb", "16", "rebuild"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn verify_says_how_much_no_checkpoint_attests_and_can_require_it_all() {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(d.path());
    l.drive_loop("r0");
    drop(l);
    let (code, out, err) = cli(d.path(), &["verify"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("records are not yet attested by any checkpoint"),
        "{out}"
    );
    let (code, out, _) = cli(d.path(), &["verify", "--require-attested"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("NOT ATTESTED"), "{out}");
    let (code, out, _) = cli(d.path(), &["--json", "verify", "--require-attested"]);
    assert_eq!(code, 1, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], false, "{v}");
    assert!(v["unattested"].as_u64().unwrap() > 0, "{v}");
    let (code, _, err) = cli(d.path(), &["checkpoint"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(d.path(), &["verify", "--require-attested"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("clean: every digest and chain head matches")
            && !out.contains("not yet attested"),
        "{out}"
    );
}

#[test]
fn trails_say_times_as_people_read_them() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("demo");
    let (code, out, err) = cli(&dir, &["demo"]);
    assert_eq!(code, 0, "{err}");
    let stored: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(" stored cas://"))
        .collect();
    assert!(!stored.is_empty(), "{out}");
    for l in &stored {
        assert!(l.contains(" until 20") && l.contains("Z (by "), "{l}");
        assert!(!l.contains(" ms (by "), "{l}");
    }
    let expired = out
        .lines()
        .find(|l| l.contains("REFUSED (expired)"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        expired.contains("expired at 20") && !expired.contains("unix ms"),
        "{expired}"
    );
}

/// One casing on the wire: what the input spells `succeeded` the trail's
/// JSON spells so too, and reasons go by their codes; the demo shows long
/// bodies cut and every step a refusal is about.
#[test]
fn words_on_the_wire_are_spelt_as_the_input_spells_them() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("demo");
    let (code, out, err) = cli(&dir, &["demo"]);
    assert_eq!(code, 0, "{err}");
    let put_blob = out
        .lines()
        .find(|l| l.contains(r#""op":"put_blob""#))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        put_blob.chars().count() < 300 && put_blob.contains("characters)"),
        "the blob's body is shown whole: {put_blob}"
    );
    let echo = out.split("\n3. ").nth(1).unwrap();
    assert!(
        echo.contains(r#""op":"open_run","run":"echo-1""#),
        "echo-1's opening is not shown: {echo}"
    );

    let (code, out, err) = cli(&dir, &["--json", "trail", "dev-0", "--chain"]);
    assert_eq!(code, 0, "{err}");
    let steps: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let closed: Vec<&Value> = steps.iter().filter(|s| s["kind"] == "run_closed").collect();
    assert_eq!(closed.len(), 9, "{out}");
    for s in &closed {
        assert_eq!(s["detail"]["status"], "succeeded", "{s}");
    }
    let withheld = closed
        .iter()
        .find_map(|s| s["detail"]["withheld"].as_object())
        .unwrap_or_else(|| panic!("nothing withheld: {out}"));
    assert!(
        withheld["reason"].get("hop_limit").is_some(),
        "{withheld:?}"
    );
    assert!(
        !out.contains("Succeeded") && !out.contains("HopLimit"),
        "{out}"
    );
}

#[test]
fn checkpoint_json_is_one_object_with_each_logs_signed_note_even_when_nothing_is_written() {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(d.path());
    l.drive_loop("r0");
    drop(l);
    let (code, _, err) = cli(
        d.path(),
        &["key", "generate", "--name", "ledger.example/l1"],
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(d.path(), &["--json", "checkpoint"]);
    assert_eq!(code, 0, "{err}");
    let first: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out}: {e}"));
    assert!(!first["written"].as_array().unwrap().is_empty(), "{first}");
    let (code, out, err) = cli(d.path(), &["--json", "checkpoint"]);
    assert_eq!(code, 0, "{err}");
    let again: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out:?}: {e}"));
    assert_eq!(again["ok"], true);
    assert_eq!(again["written"], json!([]), "{again}");
    let notes = again["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n["topic"] == "ledger"
            && n["note"]
                .as_str()
                .unwrap()
                .starts_with("agentledger/ledger.example/l1/ledger/")),
        "{again}"
    );
}
