//! Tests of the context rules: one group per rule (R11–R15, names prefixed
//! accordingly), the draft's own example objects, hostile inputs, and one
//! test per refusal code.

use serde_json::{json, Value};

use super::*;
use crate::codes::Code;

const NOW: UnixMillis = 1_700_000_000_000;
const MASTER: &str = "m1";
const TASK: &str = "t1";

/// Figure 3 of the draft, copied verbatim; only the surrounding braces are
/// added and the trailing comma after the object dropped, since the figure is
/// a member of a larger object.
const FIGURE_3: &str = r#"{
"TaskContext": {
"TaskID": "", "UserQuery": "", "TaskName": "", "TaskDescription": "", "GoalStatus": [ {"Goal": "",
"Status": ""}, {"Goal": "", "Status": ""}, {"Goal": "", "Status": ""} ], "OverallStatus": "",
"StartTime": "", "EndTime": "", "Optional": ["StartTime", "EndTime"] }
}"#;

/// Figure 4 of the draft, copied verbatim (surrounding braces added). It is
/// not JSON as printed: `...` marks elided array elements, and ContextType /
/// Priority show the *union* of allowed values. [`figure_4`] removes the
/// elisions and substitutes one concrete value for each union.
const FIGURE_4: &str = r#"{
"AgentContext": {
"AgentID": "", "AgentName": "", "SubTaskID": "", "SubTaskName": "", "Dependencies": [],
"ContextItems": [ { "ContextID": "", "ContextType":
"document|graph|video|image|audio|code|table|dataset|text|other", "MediaType": "", "ContextURI":
"", "Description": "", "Priority": "must_preserve|compressible|reference_only|discardable" } ... ],
"CompressionPolicy": { "Strategy": "target_ratio", "TargetRatio": 0.3, "LossTolerance": "low",
"MustPreserveFields": [ "KeyInformation", "Dependencies", "ContextItems[].Description" ] },
"todoItems": [ {"itemID": "", "description": ""}, {"itemID": "", "description": ""}, {"itemID": "",
"description": ""} ], "ItemStateUpdates": [ {"itemID": "", "state": 0}, {"itemID": "", "state": 1},
{"itemID": "", "state": 0} ], "KeyInformation": [ {"itemID": "", "outputabstract": ""}, {"itemID":
"", "outputabstract": ""}, {"itemID": "", "outputabstract": ""} ], "EvaluationPolicy": {
"SuccessCriteria": [
{ "CriterionID": "", "Description": "", "Required": true } ...
], "ConfidenceThreshold": 0.8 }, "EvaluationResult": { "Status": "", "Confidence": 0,
"CriterionResults": [ { "CriterionID": "", "Status": "", "EvidenceRefs": [], "TraceRefs": [] } ...
], "FailureReason": "" }, "LastUpdated": "", "Optional": [ "LastUpdated", "CompressionPolicy" ] }
}"#;

const CONTEXT_TYPE_UNION: &str = "document|graph|video|image|audio|code|table|dataset|text|other";
const PRIORITY_UNION: &str = "must_preserve|compressible|reference_only|discardable";

fn figure_3() -> Value {
    let v: Value = serde_json::from_str(FIGURE_3).expect("figure 3 is JSON");
    v["TaskContext"].clone()
}

/// Figure 4 with `...` elisions removed and the union strings replaced by
/// `concrete_type` / `concrete_priority`.
fn figure_4_with(concrete_type: &str, concrete_priority: &str) -> Value {
    let text = FIGURE_4
        .replace(" ...", "")
        .replace(CONTEXT_TYPE_UNION, concrete_type)
        .replace(PRIORITY_UNION, concrete_priority);
    let v: Value = serde_json::from_str(&text).expect("figure 4 without elisions is JSON");
    v["AgentContext"].clone()
}

fn figure_4() -> Value {
    figure_4_with("document", "must_preserve")
}

fn task_context(task_id: &str) -> Value {
    json!({
        "TaskID": task_id,
        "UserQuery": "plan a trip to Lisbon",
        "TaskName": "tour-plan",
        "TaskDescription": "book hotel and flight, check weather",
        "GoalStatus": [{"Goal": "hotel booked", "Status": "pending"}],
        "OverallStatus": "in_progress"
    })
}

/// Every cited ContextURI resolves.
fn resolves(_: &str) -> Option<String> {
    None
}

fn uri_of(content: &str) -> String {
    ContextUri::for_content(content.as_bytes()).to_string()
}

fn item(id: &str, content: &str, priority: &str) -> Value {
    json!({
        "ContextID": id,
        "ContextType": "text",
        "MediaType": "text/plain",
        "ContextURI": uri_of(content),
        "Description": format!("description of {id}"),
        "Priority": priority
    })
}

/// A context to send to `agent` for SubTaskID `sub`.
fn sent(agent: &str, sub: &str, deps: &[&str], items: Vec<Value>) -> Value {
    json!({
        "AgentID": format!("id-{agent}"),
        "AgentName": agent,
        "SubTaskID": sub,
        "SubTaskName": format!("do {sub}"),
        "Dependencies": deps,
        "ContextItems": items,
        "CompressionPolicy": {
            "Strategy": "target_ratio",
            "TargetRatio": 0.3,
            "LossTolerance": "low",
            "MustPreserveFields": ["KeyInformation", "Dependencies", "ContextItems[].Description"]
        },
        "todoItems": [
            {"itemID": "i1", "description": "first"},
            {"itemID": "i2", "description": "second"}
        ],
        "EvaluationPolicy": {
            "SuccessCriteria": [
                {"CriterionID": "c1", "Description": "correct", "Required": true},
                {"CriterionID": "c2", "Description": "nice to have", "Required": false}
            ],
            "ConfidenceThreshold": 0.8
        }
    })
}

/// The context as a well-behaved agent returns it: everything kept, all
/// items done, required criterion passed, confident.
fn returned(sent: &Value) -> Value {
    let mut r = sent.clone();
    r["ItemStateUpdates"] = json!([{"itemID": "i1", "state": 1}, {"itemID": "i2", "state": 1}]);
    r["KeyInformation"] = json!([
        {"itemID": "i1", "outputabstract": "done one"},
        {"itemID": "i2", "outputabstract": "done two"}
    ]);
    r["EvaluationResult"] = json!({
        "Status": "passed",
        "Confidence": 0.9,
        "CriterionResults": [{"CriterionID": "c1", "Status": "Passed", "EvidenceRefs": [], "TraceRefs": []}]
    });
    r["LastUpdated"] = json!("2026-10-25T10:00:00Z");
    r
}

fn opened() -> TaskState {
    let ev = decide_open(None, TASK, MASTER, &task_context("T-1"), NOW).expect("open");
    let mut state = evolve(None, &ev).expect("state");
    // What the tests send, and what their agents return in place of it
    // (content an invoked agent compressed is put in the task too).
    for content in ["alpha", "beta", "gamma", "delta", "other", "b", "result"] {
        let ev = decide_put_blob(&state, content.as_bytes(), "text/plain", 3600, NOW);
        state.evolve(&ev);
    }
    state
}

fn send(state: &mut TaskState, mode: Mode, ctx: &Value) -> Result<String, ContextError> {
    let ev = decide_send(state, MASTER, mode, ctx, NOW)?;
    state.evolve(&ev);
    match ev {
        ContextEvent::ContextSent { subtask, .. } => Ok(subtask),
        other => panic!("unexpected event {other:?}"),
    }
}

fn ret(state: &mut TaskState, agent: &str, ctx: &Value) -> Result<Layer1, ContextError> {
    let ev = decide_return(state, agent, ctx, &resolves, NOW)?;
    state.evolve(&ev);
    match ev {
        ContextEvent::ContextReturned { layer1, .. } => Ok(layer1),
        other => panic!("unexpected event {other:?}"),
    }
}

fn eval(state: &mut TaskState, subtask: &str, outcome: Outcome) -> Result<(), ContextError> {
    let ev = decide_evaluate(state, MASTER, subtask, outcome, "checked", NOW)?;
    state.evolve(&ev);
    Ok(())
}

/// The ContextItems array of a context under test.
fn items(v: &mut Value) -> &mut Vec<Value> {
    v["ContextItems"]
        .as_array_mut()
        .expect("ContextItems is an array")
}

/// Remove a top-level member of a context under test.
fn remove(v: &mut Value, key: &str) {
    v.as_object_mut().expect("an object").remove(key);
}

fn code<T: std::fmt::Debug>(r: Result<T, ContextError>) -> &'static str {
    r.expect_err("expected a refusal").code().as_str()
}

fn layer1_after(sent_ctx: &Value, returned_ctx: &Value) -> Layer1 {
    let mut state = opened();
    send(&mut state, Mode::Sync, sent_ctx).expect("send");
    let agent = sent_ctx["AgentName"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ret(&mut state, &agent, returned_ctx).expect("return")
}

fn has_reason(l: &Layer1, needle: &str) -> bool {
    l.reasons.iter().any(|r| r.contains(needle))
}

// ---------------------------------------------------------------- schemas --

#[test]
fn draft_examples_validate() {
    let tc = validate_task_context(&figure_3()).expect("Figure 3 validates");
    assert_eq!(tc.goal_status.len(), 3);
    assert_eq!(
        tc.optional.as_deref(),
        Some(&["StartTime".to_owned(), "EndTime".to_owned()][..])
    );

    // The figure's ContextType / Priority are the union strings; each
    // concrete member of the unions validates in their place.
    for t in CONTEXT_TYPE_UNION.split('|') {
        for p in PRIORITY_UNION.split('|') {
            let ac = validate_agent_context(&figure_4_with(t, p))
                .unwrap_or_else(|e| panic!("Figure 4 with {t}/{p}: {e}"));
            assert_eq!(ac.todo_items.len(), 3);
            assert_eq!(ac.evaluation_policy.confidence_threshold, 0.8);
        }
    }
}

#[test]
fn draft_example_union_strings_are_not_values() {
    let mut v = figure_4();
    v["ContextItems"][0]["ContextType"] = json!(CONTEXT_TYPE_UNION);
    v["ContextItems"][0]["Priority"] = json!(PRIORITY_UNION);
    let err = validate_agent_context(&v).expect_err("union strings are templates");
    let text = err.to_string();
    assert!(text.contains("/ContextItems/0/ContextType"), "{text}");
    assert!(text.contains("/ContextItems/0/Priority"), "{text}");
}

#[test]
fn schema_optional_fields_may_be_absent() {
    let mut tc = figure_3();
    let obj = tc.as_object_mut().expect("object");
    obj.remove("StartTime");
    obj.remove("EndTime");
    obj.remove("Optional");
    let parsed = validate_task_context(&tc).expect("valid without optional fields");
    assert_eq!(parsed.start_time, None);
    // Absent stays absent on the way out.
    let back = serde_json::to_value(&parsed).expect("serialize");
    assert!(back.get("StartTime").is_none());

    let mut ac = figure_4();
    let obj = ac.as_object_mut().expect("object");
    for k in [
        "LastUpdated",
        "CompressionPolicy",
        "Optional",
        "ItemStateUpdates",
        "KeyInformation",
        "EvaluationResult",
    ] {
        obj.remove(k);
    }
    validate_agent_context(&ac).expect("valid without optional fields");

    // A required one is named when missing.
    let mut ac = figure_4();
    remove(&mut ac, "todoItems");
    let text = validate_agent_context(&ac)
        .expect_err("todoItems")
        .to_string();
    assert!(
        text.contains("(root): \"todoItems\" is a required property"),
        "{text}"
    );
}

#[test]
fn schema_wrong_types_name_the_path() {
    let mut v = figure_4();
    v["ContextItems"][0]["Priority"] = json!("bogus");
    v["ItemStateUpdates"][1]["state"] = json!(2);
    v["EvaluationPolicy"]["ConfidenceThreshold"] = json!("high");
    v["Dependencies"] = json!("s1");
    let err = validate_agent_context(&v).expect_err("wrong types");
    assert_eq!(err.code(), "invalid_context");
    let ContextError::InvalidContext { violations, kind } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(*kind, ContextKind::AgentContext);
    let paths: Vec<&str> = violations.iter().map(|v| v.path.as_str()).collect();
    for p in [
        "/ContextItems/0/Priority",
        "/ItemStateUpdates/1/state",
        "/EvaluationPolicy/ConfidenceThreshold",
        "/Dependencies",
    ] {
        assert!(paths.contains(&p), "{p} not in {paths:?}");
    }
    let text = err.to_string();
    assert!(
        text.contains(
            r#"/ContextItems/0/Priority: "bogus" is not one of ["must_preserve","compressible","reference_only","discardable"]"#
        ),
        "{text}"
    );

    let mut tc = figure_3();
    tc["GoalStatus"][2]["Status"] = json!(3);
    let text = validate_task_context(&tc)
        .expect_err("wrong type")
        .to_string();
    assert!(
        text.contains("/GoalStatus/2/Status: 3 is not of type \"string\""),
        "{text}"
    );
}

#[test]
fn schema_unknown_member_refused() {
    let mut v = figure_4();
    v["Lastupdated"] = json!("typo");
    let text = validate_agent_context(&v)
        .expect_err("unknown member")
        .to_string();
    assert!(text.contains("Lastupdated"), "{text}");
}

#[test]
fn schema_hostile_inputs_never_panic() {
    let huge = "x".repeat(1_000_000);
    let mut deep = json!([]);
    for _ in 0..200 {
        deep = json!([deep]);
    }
    let inputs = vec![
        Value::Null,
        json!(1),
        json!("TaskContext"),
        json!([]),
        json!({}),
        json!({"TaskID": huge}),
        json!({"AgentName": {"nested": deep}}),
        json!({"ContextItems": [1, "two", null]}),
        json!({"ItemStateUpdates": [{"itemID": "i", "state": 1.0}]}),
    ];
    let state = opened();
    for v in &inputs {
        assert!(validate_task_context(v).is_err());
        assert!(validate_agent_context(v).is_err());
        assert!(decide_send(&state, MASTER, Mode::Sync, v, NOW).is_err());
        assert!(decide_return(&state, "x", v, &resolves, NOW).is_err());
        let err = decide_update_task(&state, MASTER, v, NOW).expect_err("invalid");
        // Messages quoting huge values are capped.
        assert!(err.to_string().len() < 10_000);
    }
    // state 1.0 passes the schema (an integer-valued number) and is read as 1.
    let mut v = figure_4();
    v["ItemStateUpdates"][0]["state"] = json!(1.0);
    let ctx = validate_agent_context(&v).expect("1.0 is the integer 1");
    assert_eq!(ctx.item_state_updates.map(|u| u[0].state), Some(1));
}

// -------------------------------------------------------------------- R11 --

#[test]
fn r11_send_delivers_one_agents_context_and_get_context_returns_only_own() {
    let mut state = opened();
    let hotel = sent(
        "hotel",
        "book-hotel",
        &[],
        vec![item("h1", "alpha", "must_preserve")],
    );
    let flight = sent(
        "flight",
        "book-flight",
        &[],
        vec![item("f1", "beta", "must_preserve")],
    );
    assert_eq!(send(&mut state, Mode::Async, &hotel).as_deref(), Ok("s1"));
    assert_eq!(send(&mut state, Mode::Async, &flight).as_deref(), Ok("s2"));

    let (s, ctx) = get_context(&state, "hotel").expect("hotel's own");
    assert_eq!(s.id, "s1");
    assert_eq!(ctx.agent_name, "hotel");
    assert!(ctx.context_items.iter().all(|i| i.context_id == "h1"));
    let (s, ctx) = get_context(&state, "flight").expect("flight's own");
    assert_eq!(
        (s.id.as_str(), ctx.sub_task_id.as_str()),
        ("s2", "book-flight")
    );

    // Each agent was granted only the references in its own context.
    assert!(state.grants["hotel"].contains(&uri_of("alpha")));
    assert!(!state.grants["hotel"].contains(&uri_of("beta")));

    // After return, the agent's current context is its returned one.
    ret(&mut state, "hotel", &returned(&hotel)).expect("return");
    let (_, ctx) = get_context(&state, "hotel").expect("returned");
    assert!(ctx.evaluation_result.is_some());
}

#[test]
fn r11_agent_returning_another_agents_context_is_refused() {
    let mut state = opened();
    let hotel = sent("hotel", "book-hotel", &[], vec![]);
    let flight = sent("flight", "book-flight", &[], vec![]);
    send(&mut state, Mode::Async, &hotel).expect("send");
    send(&mut state, Mode::Async, &flight).expect("send");

    // flight submits hotel's context as-is (AgentName hotel).
    let err =
        decide_return(&state, "flight", &returned(&hotel), &resolves, NOW).expect_err("hostile");
    assert_eq!(err.code(), "not_your_context");
    assert!(
        err.to_string().contains("belongs to agent \"hotel\""),
        "{err}"
    );

    // flight relabels hotel's context as its own: the SubTaskID gives it away.
    let mut forged = returned(&hotel);
    forged["AgentName"] = json!("flight");
    forged["AgentID"] = json!("id-flight");
    let err = decide_return(&state, "flight", &forged, &resolves, NOW).expect_err("hostile");
    assert_eq!(err.code(), "not_your_context");
    assert!(
        err.to_string().contains("is not a subtask sent to it"),
        "{err}"
    );

    // Nothing was recorded as returned.
    assert!(state.subtasks.iter().all(Subtask::is_outstanding));
}

#[test]
fn r11_return_with_foreign_agent_id_is_refused() {
    let mut state = opened();
    let hotel = sent("hotel", "book-hotel", &[], vec![]);
    send(&mut state, Mode::Sync, &hotel).expect("send");
    let mut r = returned(&hotel);
    r["AgentID"] = json!("id-impostor");
    assert_eq!(
        code(decide_return(&state, "hotel", &r, &resolves, NOW)),
        "not_your_context"
    );
}

#[test]
fn r11_return_without_outstanding_subtask_is_refused() {
    let state = opened();
    let ctx = returned(&sent("hotel", "book-hotel", &[], vec![]));
    let err = decide_return(&state, "hotel", &ctx, &resolves, NOW).expect_err("nothing sent");
    assert_eq!(err.code(), "not_your_context");
    assert!(err.to_string().contains("no outstanding subtask"), "{err}");
}

#[test]
fn r11_return_naming_unknown_subtask_id_cannot_probe() {
    let mut state = opened();
    send(&mut state, Mode::Async, &sent("hotel", "h", &[], vec![])).expect("send");
    send(&mut state, Mode::Async, &sent("flight", "f", &[], vec![])).expect("send");
    // A SubTaskID that exists nowhere and one that is another agent's get
    // the same answer, so an agent cannot probe other agents' subtasks.
    let nowhere = decide_return(
        &state,
        "hotel",
        &returned(&sent("hotel", "zz", &[], vec![])),
        &resolves,
        NOW,
    )
    .expect_err("unknown id");
    let elsewhere = decide_return(
        &state,
        "hotel",
        &returned(&sent("hotel", "f", &[], vec![])),
        &resolves,
        NOW,
    )
    .expect_err("flight's id");
    assert_eq!(
        (nowhere.code(), elsewhere.code()),
        (Code::NotYourContext, Code::NotYourContext)
    );
    assert_eq!(
        nowhere.to_string().replace("\"zz\"", "ID"),
        elsewhere.to_string().replace("\"f\"", "ID")
    );
}

#[test]
fn r11_get_context_of_agent_without_subtask_is_refused() {
    let mut state = opened();
    send(&mut state, Mode::Sync, &sent("hotel", "h", &[], vec![])).expect("send");
    assert_eq!(code(get_context(&state, "weather")), "not_your_context");
}

#[test]
fn r11_only_master_updates_task_context() {
    let state = opened();
    let mut tc = task_context("T-1");
    tc["OverallStatus"] = json!("done");
    let err = decide_update_task(&state, "hotel", &tc, NOW).expect_err("not master");
    assert_eq!(err.code(), "not_master");
    // Refused before validation: a non-master learns nothing from the schema.
    assert_eq!(
        code(decide_update_task(&state, "r9", &json!(null), NOW)),
        "not_master"
    );

    let ev = decide_update_task(&state, MASTER, &tc, NOW).expect("master may");
    let mut state = state;
    state.evolve(&ev);
    assert_eq!(state.task_context.overall_status, "done");

    // The TaskID of an open task is fixed.
    let err = decide_update_task(&state, MASTER, &task_context("T-2"), NOW).expect_err("TaskID");
    assert!(err.to_string().contains("/TaskID"), "{err}");
}

#[test]
fn r11_subtask_agent_name_required() {
    let state = opened();
    let ctx = sent("", "s", &[], vec![]);
    let err = decide_send(&state, MASTER, Mode::Sync, &ctx, NOW).expect_err("no agent");
    assert!(err.to_string().contains("/AgentName"), "{err}");
}

// -------------------------------------------------------------------- R12 --

#[test]
fn r12_sync_one_outstanding_at_a_time() {
    let mut state = opened();
    let a = sent("diagnosis", "diag", &[], vec![]);
    let b = sent("weather", "wx", &[], vec![]);
    send(&mut state, Mode::Sync, &a).expect("first");
    let err = decide_send(&state, MASTER, Mode::Sync, &b, NOW).expect_err("second while first out");
    assert_eq!(err.code(), "subtask_outstanding");
    assert!(err.to_string().contains("s1"), "{err}");
    ret(&mut state, "diagnosis", &returned(&a)).expect("return");
    // Independent of s1, so returning is enough; no decision needed.
    send(&mut state, Mode::Sync, &b).expect("after return");
}

#[test]
fn r12_sync_master_skipping_dependency_is_refused() {
    let mut state = opened();
    let diag = sent("diagnosis", "diag", &[], vec![]);
    let presc = sent("prescription", "presc", &["diag"], vec![]);

    // Skipping the dependency entirely.
    let err = decide_send(&state, MASTER, Mode::Sync, &presc, NOW).expect_err("never sent");
    assert_eq!(err.code(), "dependency_pending");
    assert!(err.to_string().contains("\"diag\""), "{err}");

    send(&mut state, Mode::Sync, &diag).expect("s1");
    ret(&mut state, "diagnosis", &returned(&diag)).expect("returned");
    // Returned but not accepted yet.
    let err = decide_send(&state, MASTER, Mode::Sync, &presc, NOW).expect_err("not evaluated");
    assert_eq!(err.code(), "dependency_pending");
    assert!(err.to_string().contains("not yet accepted"), "{err}");

    eval(&mut state, "s1", Outcome::Rejected).expect("rejected");
    let err = decide_send(&state, MASTER, Mode::Sync, &presc, NOW).expect_err("rejected");
    assert!(err.to_string().contains("rejected"), "{err}");

    // A retry of the same SubTaskID, accepted this time, satisfies it.
    assert_eq!(send(&mut state, Mode::Sync, &diag).as_deref(), Ok("s2"));
    ret(&mut state, "diagnosis", &returned(&diag)).expect("returned");
    eval(&mut state, "s2", Outcome::Accepted).expect("accepted");
    assert_eq!(send(&mut state, Mode::Sync, &presc).as_deref(), Ok("s3"));
}

#[test]
fn r12_async_independent_subtasks_run_concurrently() {
    let mut state = opened();
    for (agent, sub) in [("hotel", "h"), ("flight", "f"), ("weather", "w")] {
        send(&mut state, Mode::Async, &sent(agent, sub, &[], vec![])).expect("concurrent");
    }
    assert_eq!(
        state.subtasks.iter().filter(|s| s.is_outstanding()).count(),
        3
    );
    // A sync send must wait for them.
    let err = decide_send(
        &state,
        MASTER,
        Mode::Sync,
        &sent("x", "x", &[], vec![]),
        NOW,
    );
    assert_eq!(code(err), "subtask_outstanding");
}

#[test]
fn r12_async_still_honours_dependencies() {
    let mut state = opened();
    let flight = sent("flight", "f", &[], vec![]);
    send(&mut state, Mode::Async, &flight).expect("s1");
    let hotel = sent("hotel", "h", &["f"], vec![]);
    assert_eq!(
        code(decide_send(&state, MASTER, Mode::Async, &hotel, NOW)),
        "dependency_pending"
    );
    ret(&mut state, "flight", &returned(&flight)).expect("returned");
    eval(&mut state, "s1", Outcome::Accepted).expect("accepted");
    send(&mut state, Mode::Async, &hotel).expect("now allowed");
}

#[test]
fn r12_async_send_waits_for_outstanding_sync_subtask() {
    let mut state = opened();
    send(&mut state, Mode::Sync, &sent("a", "a", &[], vec![])).expect("sync");
    let err = decide_send(
        &state,
        MASTER,
        Mode::Async,
        &sent("b", "b", &[], vec![]),
        NOW,
    );
    assert_eq!(code(err), "subtask_outstanding");
}

#[test]
fn r12_dependency_by_agent_name_fallback() {
    let mut state = opened();
    let diag = sent("diagnosis", "d-1", &[], vec![]);
    send(&mut state, Mode::Sync, &diag).expect("s1");
    ret(&mut state, "diagnosis", &returned(&diag)).expect("ret");
    let buy = sent("pharmacy", "buy", &["diagnosis"], vec![]);
    assert_eq!(
        code(decide_send(&state, MASTER, Mode::Sync, &buy, NOW)),
        "dependency_pending"
    );
    eval(&mut state, "s1", Outcome::Accepted).expect("accepted");
    send(&mut state, Mode::Sync, &buy).expect("agent-name dependency met");
}

// -------------------------------------------------------------------- R13 --

#[test]
fn r13_layer_one_passes_for_complete_return() {
    let s = sent("hotel", "h", &[], vec![item("a", "alpha", "must_preserve")]);
    let l = layer1_after(&s, &returned(&s));
    assert!(l.passed, "{:?}", l.reasons);
    assert!(l.reasons.is_empty());
}

#[test]
fn r13_layer_one_reasons_for_each_failure() {
    let s = sent("hotel", "h", &[], vec![]);
    let mut r = returned(&s);
    r["ItemStateUpdates"] = json!([{"itemID": "i1", "state": 0}]);
    r["EvaluationResult"]["Confidence"] = json!(0.5);
    r["EvaluationResult"]["CriterionResults"][0]["Status"] = json!("failed");
    let l = layer1_after(&s, &r);
    assert!(!l.passed);
    assert_eq!(l.reasons.len(), 4, "{:?}", l.reasons);
    assert!(has_reason(&l, "todo item \"i1\" is not completed"));
    assert!(has_reason(
        &l,
        "todo item \"i2\" has no ItemStateUpdates entry"
    ));
    assert!(has_reason(&l, "required criterion \"c1\" did not pass"));
    assert!(has_reason(&l, "confidence 0.5 is below the threshold 0.8"));

    // A required criterion without any result, and confidence exactly at the
    // threshold (which passes).
    let mut r = returned(&s);
    r["EvaluationResult"]["CriterionResults"] = json!([]);
    r["EvaluationResult"]["Confidence"] = json!(0.8);
    let l = layer1_after(&s, &r);
    assert_eq!(
        l.reasons,
        vec!["required criterion \"c1\" has no CriterionResults entry".to_owned()]
    );
}

#[test]
fn r13_missing_evaluation_result_fails_layer_one() {
    let s = sent("hotel", "h", &[], vec![]);
    let mut r = returned(&s);
    remove(&mut r, "EvaluationResult");
    let l = layer1_after(&s, &r);
    assert!(!l.passed);
    assert!(has_reason(&l, "no EvaluationResult returned"));
}

#[test]
fn r13_layer_one_uses_sent_policy_not_returned() {
    let s = sent("hotel", "h", &[], vec![]);
    let mut r = returned(&s);
    // The agent drops the failing required criterion, lowers the bar and
    // deletes a todo item from its copy.
    r["EvaluationPolicy"] = json!({"SuccessCriteria": [], "ConfidenceThreshold": 0.1});
    r["todoItems"] = json!([{"itemID": "i1", "description": "first"}]);
    r["ItemStateUpdates"] = json!([{"itemID": "i1", "state": 1}]);
    r["EvaluationResult"]["Confidence"] = json!(0.2);
    r["EvaluationResult"]["CriterionResults"] = json!([]);
    let l = layer1_after(&s, &r);
    assert!(!l.passed);
    assert!(has_reason(&l, "\"i2\""));
    assert!(has_reason(&l, "\"c1\""));
    assert!(has_reason(&l, "below the threshold 0.8"));
}

#[test]
fn r13_master_decision_is_separate_step() {
    let mut state = opened();
    let s = sent("hotel", "h", &[], vec![]);
    send(&mut state, Mode::Sync, &s).expect("send");
    assert_eq!(
        code(decide_evaluate(
            &state,
            MASTER,
            "s1",
            Outcome::Accepted,
            "",
            NOW
        )),
        "not_returned"
    );
    let mut r = returned(&s);
    r["EvaluationResult"]["Confidence"] = json!(0.1);
    let l = ret(&mut state, "hotel", &r).expect("returned");
    assert!(!l.passed);
    // Layer one is recorded, the decision is not made for the master.
    assert_eq!(state.subtasks[0].layer1.as_ref(), Some(&l));
    assert_eq!(state.subtasks[0].decision, None);
    // The master may overrule layer one.
    eval(&mut state, "s1", Outcome::Accepted).expect("master accepts");
    assert_eq!(
        state.subtasks[0].decision.as_ref().map(|d| d.outcome),
        Some(Outcome::Accepted)
    );
    assert_eq!(
        code(decide_evaluate(
            &state,
            MASTER,
            "s1",
            Outcome::Rejected,
            "",
            NOW
        )),
        "already_evaluated"
    );
}

#[test]
fn r13_passing_status_vocabulary() {
    for s in ["passed", "PASS", " Success ", "succeeded"] {
        assert!(is_passing_status(s), "{s}");
    }
    for s in ["", "failed", "partial", "passed?", "ok"] {
        assert!(!is_passing_status(s), "{s}");
    }
}

// -------------------------------------------------------------------- R14 --

fn four_items() -> Value {
    sent(
        "hotel",
        "h",
        &[],
        vec![
            item("keep", "alpha", "must_preserve"),
            item("squeeze", "beta", "compressible"),
            item("ref", "gamma", "reference_only"),
            item("drop", "delta", "discardable"),
        ],
    )
}

fn without_policy(mut v: Value) -> Value {
    remove(&mut v, "CompressionPolicy");
    v
}

#[test]
fn r14_must_preserve_item_changed_or_removed_fails() {
    let s = four_items();
    let mut r = returned(&s);
    r["ContextItems"][0]["MediaType"] = json!("text/markdown");
    let l = layer1_after(&s, &r);
    assert!(has_reason(
        &l,
        "ContextItem \"keep\" (must_preserve) was changed (MediaType)"
    ));

    let mut r = returned(&s);
    items(&mut r).remove(0);
    let l = layer1_after(&s, &r);
    assert!(!l.passed);
    assert!(has_reason(
        &l,
        "ContextItem \"keep\" (must_preserve) was removed"
    ));
}

#[test]
fn r14_reference_only_keeps_uri_and_description() {
    let s = without_policy(four_items());
    let mut r = returned(&s);
    r["ContextItems"][2]["ContextURI"] = json!(uri_of("other"));
    let l = layer1_after(&s, &r);
    assert!(has_reason(
        &l,
        "\"ref\" (reference_only) changed its ContextURI"
    ));
    // Other members of a reference_only item may change.
    let mut r = returned(&s);
    r["ContextItems"][2]["MediaType"] = json!("application/octet-stream");
    assert!(layer1_after(&s, &r).passed);
}

#[test]
fn r14_compressible_may_change_but_not_vanish() {
    let s = without_policy(four_items());
    let mut r = returned(&s);
    r["ContextItems"][1]["ContextURI"] = json!(uri_of("b"));
    r["ContextItems"][1]["Description"] = json!("summary of beta");
    assert!(layer1_after(&s, &r).passed);

    let mut r = returned(&s);
    items(&mut r).remove(1);
    let l = layer1_after(&s, &r);
    assert!(has_reason(&l, "\"squeeze\" (compressible) was removed"));
}

#[test]
fn r14_discardable_may_go() {
    let s = four_items();
    let mut r = returned(&s);
    items(&mut r).remove(3);
    // Agents may add items of their own (offloaded outputs).
    items(&mut r).push(item("out", "result", "reference_only"));
    let l = layer1_after(&s, &r);
    assert!(l.passed, "{:?}", l.reasons);
}

#[test]
fn r14_must_preserve_fields_survive() {
    let s = four_items();
    let mut r = returned(&s);
    remove(&mut r, "KeyInformation");
    r["Dependencies"] = json!(["invented"]);
    // Priority alone would allow this (compressible) but MustPreserveFields
    // names ContextItems[].Description.
    r["ContextItems"][1]["Description"] = json!("shorter");
    let l = layer1_after(&s, &r);
    // Without KeyInformation both completed items lack their abstract, and
    // the field named by MustPreserveFields is gone.
    assert_eq!(l.reasons.len(), 5, "{:?}", l.reasons);
    assert!(has_reason(
        &l,
        "todo item \"i1\" is completed but has no KeyInformation output abstract"
    ));
    assert!(has_reason(
        &l,
        "\"KeyInformation\": KeyInformation is missing"
    ));
    assert!(has_reason(&l, "\"Dependencies\": Dependencies was changed"));
    assert!(has_reason(
        &l,
        "ContextItems[\"squeeze\"].Description was changed"
    ));

    // Reordering items is not a change.
    let mut r = returned(&s);
    items(&mut r).reverse();
    assert!(layer1_after(&s, &r).passed);
}

#[test]
fn r14_policy_removed_by_agent_still_applies() {
    let s = four_items();
    let mut r = without_policy(returned(&s));
    remove(&mut r, "KeyInformation");
    let l = layer1_after(&s, &r);
    assert!(has_reason(&l, "KeyInformation is missing"));
}

#[test]
fn r14_bad_must_preserve_path_refused_at_send() {
    let state = opened();
    let mut s = four_items();
    s["CompressionPolicy"]["MustPreserveFields"] = json!(["ContextItems[0].Description"]);
    let err = decide_send(&state, MASTER, Mode::Sync, &s, NOW).expect_err("bad path");
    assert!(
        err.to_string()
            .contains("/CompressionPolicy/MustPreserveFields/0"),
        "{err}"
    );
    assert_eq!(
        parse_field_path("ContextItems[].Description"),
        Ok(vec![
            PathSegment {
                name: "ContextItems".into(),
                each: true
            },
            PathSegment {
                name: "Description".into(),
                each: false
            },
        ])
    );
}

#[test]
fn r14_duplicate_context_ids_refused() {
    let state = opened();
    let s = sent(
        "hotel",
        "h",
        &[],
        vec![
            item("a", "alpha", "compressible"),
            item("a", "beta", "discardable"),
        ],
    );
    let err = decide_send(&state, MASTER, Mode::Sync, &s, NOW).expect_err("duplicate");
    assert!(
        err.to_string().contains("/ContextItems/1/ContextID"),
        "{err}"
    );
}

// -------------------------------------------------------------------- R15 --

#[test]
fn r15_parse_context_uri() {
    let hex = sha256_hex(b"alpha");
    let uri = parse_context_uri(&format!("cas://sha256/{hex}")).expect("valid");
    assert_eq!(uri.hex(), hex);
    assert_eq!(uri.digest(), format!("sha256:{hex}"));
    assert_eq!(uri.to_string(), format!("cas://sha256/{hex}"));
    for bad in [
        String::new(),
        "https://example.com/x".to_owned(),
        format!("cas://sha256/{}", hex.to_uppercase()),
        format!("cas://sha256/{}", &hex[..63]),
        format!("cas://sha256/{hex}0"),
        format!("cas://md5/{hex}"),
        format!("cas://sha256/{}é", &hex[..62]),
    ] {
        assert_eq!(code(parse_context_uri(&bad)), "bad_uri", "{bad}");
    }
}

#[test]
fn r15_put_blob_records_digest_and_expiry() {
    let state = opened();
    let ev = decide_put_blob(&state, b"hello", "text/plain", 60, NOW);
    let ContextEvent::BlobPut {
        uri,
        digest,
        size,
        expires_at,
        ..
    } = &ev
    else {
        panic!("{ev:?}");
    };
    assert_eq!(uri, &uri_of("hello"));
    assert_eq!(digest, &format!("sha256:{}", sha256_hex(b"hello")));
    assert_eq!((*size, *expires_at), (5, NOW + 60_000));
    // A re-put never shortens an existing expiry.
    let mut state = state;
    state.evolve(&ev);
    state.evolve(&decide_put_blob(&state, b"hello", "text/plain", 1, NOW));
    assert_eq!(state.blobs[uri].expires_at, NOW + 60_000);
}

fn state_with_hotel() -> TaskState {
    let mut state = opened();
    let s = sent(
        "hotel",
        "h",
        &[],
        vec![item("a", "alpha", "reference_only")],
    );
    send(&mut state, Mode::Sync, &s).expect("send");
    state
}

#[test]
fn r15_granted_agent_and_master_read_verified_content() {
    let state = state_with_hotel();
    let uri = uri_of("alpha");
    let actual = sha256_hex(b"alpha");
    let ev = decide_blob_read(&state, "hotel", &uri, Some(&actual), NOW).expect("granted");
    assert!(matches!(ev, ContextEvent::BlobRead { ref reader, .. } if reader == "hotel"));
    // The master reads any blob of its task, sent or not.
    let beta = sha256_hex(b"beta");
    decide_blob_read(&state, MASTER, &uri_of("beta"), Some(&beta), NOW).expect("master");
}

#[test]
fn r15_tampered_blob_is_refused() {
    let state = state_with_hotel();
    let tampered = sha256_hex(b"alpha, edited");
    let err = decide_blob_read(&state, "hotel", &uri_of("alpha"), Some(&tampered), NOW)
        .expect_err("tampered");
    assert_eq!(err.code(), "digest_mismatch");
}

#[test]
fn r15_expired_reference_is_refused_but_digest_stays() {
    let state = state_with_hotel();
    let uri = uri_of("alpha");
    let expires = state.blobs[&uri].expires_at;
    let actual = sha256_hex(b"alpha");
    decide_blob_read(&state, "hotel", &uri, Some(&actual), expires - 1).expect("just in time");
    // Even if the store still has the bytes, they are gone to readers.
    let err = decide_blob_read(&state, "hotel", &uri, Some(&actual), expires).expect_err("TTL");
    assert_eq!(err.code(), "expired");
    assert_eq!(state.blobs[&uri].digest, format!("sha256:{actual}"));
}

#[test]
fn r15_reference_resolved_by_agent_never_sent_it_is_refused() {
    let mut state = state_with_hotel();
    ret(
        &mut state,
        "hotel",
        &returned(&sent(
            "hotel",
            "h",
            &[],
            vec![item("a", "alpha", "reference_only")],
        )),
    )
    .expect("returned");
    send(
        &mut state,
        Mode::Sync,
        &sent("flight", "f", &[], vec![item("b", "beta", "must_preserve")]),
    )
    .expect("send");
    let alpha = sha256_hex(b"alpha");
    // flight knows (or guesses) hotel's reference: correct, but not its own.
    let err = decide_blob_read(&state, "flight", &uri_of("alpha"), Some(&alpha), NOW)
        .expect_err("never sent to flight");
    assert_eq!(err.code(), "not_granted");
    // Refused before anything about the blob is revealed.
    let err = decide_blob_read(
        &state,
        "flight",
        &uri_of("nonexistent"),
        None,
        NOW + u64::MAX / 2,
    )
    .expect_err("not granted first");
    assert_eq!(err.code(), "not_granted");
}

#[test]
fn r15_send_refuses_non_cas_references() {
    let state = opened();
    let mut s = sent("hotel", "h", &[], vec![item("a", "alpha", "must_preserve")]);
    s["ContextItems"][0]["ContextURI"] = json!("https://evil.example/redirect");
    let err = decide_send(&state, MASTER, Mode::Sync, &s, NOW).expect_err("not cas");
    assert_eq!(err.code(), "bad_uri");
    assert!(
        err.to_string().contains("/ContextItems/0/ContextURI"),
        "{err}"
    );
}

// ------------------------------------------------------------- accounting --

#[test]
fn accounting_inline_vs_referenced_bytes() {
    let state = opened();
    let v = sent(
        "hotel",
        "h",
        &[],
        vec![
            item("a", "alpha", "must_preserve"),
            item("a2", "alpha", "compressible"),
            item("b", "beta", "reference_only"),
            item("x", "not put", "discardable"),
        ],
    );
    let ctx = validate_agent_context(&v).expect("valid");
    let acc = account(&ctx, |u| state.blob_size(u));
    let compact = serde_json::to_vec(&v).expect("json").len() as u64;
    assert_eq!(acc.inline_bytes, compact);
    // alpha is referenced twice but counted once.
    assert_eq!(acc.referenced_bytes, 5 + 4);
    assert_eq!(acc.unresolved, vec![uri_of("not put")]);
    assert_eq!(acc.est_tokens_saved, 9 / BYTES_PER_TOKEN);
}

// ----------------------------------------------------------------- events --

fn full_history() -> Vec<ContextEvent> {
    let mut events = Vec::new();
    let open = decide_open(None, TASK, MASTER, &task_context("T-1"), NOW).expect("open");
    let mut state = evolve(None, &open).expect("state");
    events.push(open);
    let mut record = |state: &mut TaskState, ev: ContextEvent| {
        state.evolve(&ev);
        events.push(ev);
    };
    let put = decide_put_blob(&state, b"alpha", "text/plain", 60, NOW);
    record(&mut state, put);
    let s = sent("hotel", "h", &[], vec![item("a", "alpha", "must_preserve")]);
    let ev = decide_send(&state, MASTER, Mode::Sync, &s, NOW).expect("send");
    record(&mut state, ev);
    let alpha = sha256_hex(b"alpha");
    let ev = decide_blob_read(&state, "hotel", &uri_of("alpha"), Some(&alpha), NOW).expect("read");
    record(&mut state, ev);
    let err = decide_blob_read(&state, "flight", &uri_of("alpha"), Some(&alpha), NOW)
        .expect_err("not granted");
    record(
        &mut state,
        ContextEvent::refused(TASK, "get_blob", &err, Some("flight"), NOW),
    );
    let ev = decide_return(&state, "hotel", &returned(&s), &resolves, NOW).expect("return");
    record(&mut state, ev);
    let ev = decide_evaluate(&state, MASTER, "s1", Outcome::Accepted, "good", NOW).expect("eval");
    record(&mut state, ev);
    let ev = decide_update_task(&state, MASTER, &task_context("T-1"), NOW).expect("update");
    record(&mut state, ev);
    events
}

#[test]
fn events_rebuild_state_by_folding() {
    let events = full_history();
    let state = events.iter().fold(None, evolve).expect("rebuilt");
    assert_eq!(state.subtasks.len(), 1);
    let s1 = &state.subtasks[0];
    assert!(s1.layer1.as_ref().is_some_and(|l| l.passed));
    assert_eq!(
        s1.decision.as_ref().map(|d| d.outcome),
        Some(Outcome::Accepted)
    );
    assert!(state.grants["hotel"].contains(&uri_of("alpha")));
    // Events of another task are ignored.
    let mut other = events[2].clone();
    if let ContextEvent::ContextSent { task, .. } = &mut other {
        *task = "t2".into();
    }
    let mut again = state.clone();
    again.evolve(&other);
    assert_eq!(again, state);
    // Applying a record twice changes nothing.
    let mut again = state.clone();
    again.evolve(&events[2]);
    assert_eq!(again, state);
    // Nothing before TaskOpened builds a state.
    assert_eq!(evolve(None, &events[1]), None);
}

#[test]
fn events_round_trip_json_and_bincode() {
    let config = bincode::config::standard();
    for ev in full_history() {
        let json = serde_json::to_value(&ev).expect("json");
        let back: ContextEvent = serde_json::from_value(json.clone()).expect("from json");
        assert_eq!(back, ev);
        let bytes = bincode::serde::encode_to_vec(&ev, config).expect("bincode");
        let (back, _): (ContextEvent, usize) =
            bincode::serde::decode_from_slice(&bytes, config).expect("from bincode");
        assert_eq!(back, ev);
    }
    // In JSON, contexts are nested objects with the draft's member names.
    let sent_ev = serde_json::to_value(&full_history()[2]).expect("json");
    assert_eq!(
        sent_ev["context_sent"]["context"]["AgentName"],
        json!("hotel")
    );
    let state = full_history().iter().fold(None, evolve).expect("state");
    let bytes = bincode::serde::encode_to_vec(&state, config).expect("bincode state");
    let (back, _): (TaskState, usize) =
        bincode::serde::decode_from_slice(&bytes, config).expect("state back");
    assert_eq!(back, state);
}

#[test]
fn refused_event_records_code_and_agent() {
    let err = ContextError::NotGranted {
        agent: "flight".into(),
        uri: uri_of("alpha"),
    };
    let ev = ContextEvent::refused(TASK, "get_blob", &err, Some("flight"), NOW);
    let ContextEvent::Refused {
        code, agent, op, ..
    } = &ev
    else {
        panic!("{ev:?}");
    };
    assert_eq!(
        (code.as_str(), agent.as_deref(), op.as_str()),
        ("not_granted", Some("flight"), "get_blob")
    );
}

// ---------------------------------------------------- one per refusal code --

#[test]
fn refusal_invalid_context() {
    let state = opened();
    let mut s = sent("hotel", "h", &[], vec![]);
    s["todoItems"] = json!({});
    assert_eq!(
        code(decide_send(&state, MASTER, Mode::Sync, &s, NOW)),
        "invalid_context"
    );
}

#[test]
fn refusal_schema_unavailable() {
    assert!(schema::compile("{not json").is_err());
    assert!(schema::compile(r#"{"type": 12}"#).is_err());
    let err = ContextError::SchemaUnavailable {
        kind: ContextKind::TaskContext,
        detail: "x".into(),
    };
    assert_eq!(err.code(), "schema_unavailable");
    // The embedded schemas do compile.
    assert!(schema::compile(TASK_CONTEXT_SCHEMA).is_ok());
    assert!(schema::compile(AGENT_CONTEXT_SCHEMA).is_ok());
}

#[test]
fn refusal_task_exists() {
    let state = opened();
    assert_eq!(
        code(decide_open(
            Some(&state),
            TASK,
            MASTER,
            &task_context("T-1"),
            NOW
        )),
        "task_exists"
    );
}

#[test]
fn refusal_not_your_context() {
    let mut state = opened();
    let s = sent("hotel", "h", &[], vec![]);
    send(&mut state, Mode::Sync, &s).expect("send");
    assert_eq!(
        code(decide_return(
            &state,
            "flight",
            &returned(&s),
            &resolves,
            NOW
        )),
        "not_your_context"
    );
}

#[test]
fn refusal_not_master() {
    let state = opened();
    assert_eq!(
        code(decide_update_task(
            &state,
            "hotel",
            &task_context("T-1"),
            NOW
        )),
        "not_master"
    );
}

#[test]
fn refusal_dependency_pending() {
    let state = opened();
    let s = sent("hotel", "h", &["f"], vec![]);
    assert_eq!(
        code(decide_send(&state, MASTER, Mode::Async, &s, NOW)),
        "dependency_pending"
    );
}

#[test]
fn refusal_subtask_outstanding() {
    let mut state = opened();
    send(&mut state, Mode::Sync, &sent("a", "a", &[], vec![])).expect("send");
    let s = sent("b", "b", &[], vec![]);
    assert_eq!(
        code(decide_send(&state, MASTER, Mode::Sync, &s, NOW)),
        "subtask_outstanding"
    );
}

#[test]
fn refusal_duplicate_subtask() {
    let mut state = opened();
    send(&mut state, Mode::Async, &sent("a", "same", &[], vec![])).expect("send");
    let s = sent("b", "same", &[], vec![]);
    assert_eq!(
        code(decide_send(&state, MASTER, Mode::Async, &s, NOW)),
        "duplicate_subtask"
    );
}

#[test]
fn refusal_unknown_subtask() {
    // Only the master's evaluate names subtasks by id.
    let state = opened();
    assert_eq!(
        code(decide_evaluate(
            &state,
            MASTER,
            "s9",
            Outcome::Accepted,
            "",
            NOW
        )),
        "unknown_subtask"
    );
}

#[test]
fn refusal_already_returned() {
    let mut state = opened();
    let s = sent("hotel", "h", &[], vec![]);
    send(&mut state, Mode::Sync, &s).expect("send");
    ret(&mut state, "hotel", &returned(&s)).expect("first");
    assert_eq!(
        code(decide_return(
            &state,
            "hotel",
            &returned(&s),
            &resolves,
            NOW
        )),
        "already_returned"
    );
}

#[test]
fn refusal_digest_mismatch() {
    let state = state_with_hotel();
    let wrong = sha256_hex(b"not alpha");
    assert_eq!(
        code(decide_blob_read(
            &state,
            "hotel",
            &uri_of("alpha"),
            Some(&wrong),
            NOW
        )),
        "digest_mismatch"
    );
}

#[test]
fn refusal_expired() {
    let state = state_with_hotel();
    let actual = sha256_hex(b"alpha");
    let later = NOW + 3_600_000;
    assert_eq!(
        code(decide_blob_read(
            &state,
            "hotel",
            &uri_of("alpha"),
            Some(&actual),
            later
        )),
        "expired"
    );
}

#[test]
fn refusal_not_granted() {
    let state = state_with_hotel();
    let actual = sha256_hex(b"beta");
    assert_eq!(
        code(decide_blob_read(
            &state,
            "hotel",
            &uri_of("beta"),
            Some(&actual),
            NOW
        )),
        "not_granted"
    );
}

#[test]
fn refusal_bad_uri() {
    let state = state_with_hotel();
    assert_eq!(
        code(decide_blob_read(
            &state,
            "hotel",
            "cas://sha256/xyz",
            None,
            NOW
        )),
        "bad_uri"
    );
}

#[test]
fn refusal_unknown_blob() {
    let mut state = opened();
    let s = sent(
        "hotel",
        "h",
        &[],
        vec![item("z", "never put", "discardable")],
    );
    // Neither sent nor read: the ledger holds nothing for it.
    assert_eq!(code(send(&mut state, Mode::Sync, &s)), "unknown_blob");
    let actual = sha256_hex(b"never put");
    assert_eq!(
        code(decide_blob_read(
            &state,
            MASTER,
            &uri_of("never put"),
            Some(&actual),
            NOW
        )),
        "unknown_blob"
    );
}

#[test]
fn refusal_blob_missing() {
    let state = state_with_hotel();
    assert_eq!(
        code(decide_blob_read(
            &state,
            "hotel",
            &uri_of("alpha"),
            None,
            NOW
        )),
        "blob_missing"
    );
}

#[test]
fn refusal_already_evaluated() {
    let mut state = opened();
    let s = sent("hotel", "h", &[], vec![]);
    send(&mut state, Mode::Sync, &s).expect("send");
    ret(&mut state, "hotel", &returned(&s)).expect("ret");
    eval(&mut state, "s1", Outcome::Accepted).expect("eval");
    assert_eq!(
        code(eval(&mut state, "s1", Outcome::Accepted)),
        "already_evaluated"
    );
}

#[test]
fn refusal_not_returned() {
    let mut state = opened();
    send(&mut state, Mode::Sync, &sent("hotel", "h", &[], vec![])).expect("send");
    assert_eq!(
        code(eval(&mut state, "s1", Outcome::Rejected)),
        "not_returned"
    );
}

#[test]
fn a_task_holds_a_bounded_amount_of_context() {
    let mut state = opened();
    let s = sent("hotel", "h", &[], vec![item("a", "alpha", "must_preserve")]);
    let size = context_size(&validate_agent_context(&s).expect("valid"));
    state.context_bytes = crate::model::limits::MAX_TASK_CONTEXT_BYTES - size + 1;
    let err = decide_send(&state, MASTER, Mode::Sync, &s, NOW).expect_err("over budget");
    assert_eq!(err.code(), "limit_exceeded");
    state.context_bytes -= 1;
    send(&mut state, Mode::Sync, &s).expect("exactly at the limit");
    assert_eq!(
        state.context_bytes,
        crate::model::limits::MAX_TASK_CONTEXT_BYTES
    );
    // The return counts too.
    assert_eq!(
        code(ret(&mut state, "hotel", &returned(&s))),
        "limit_exceeded"
    );
}
