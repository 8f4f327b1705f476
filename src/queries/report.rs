//! Trails for people and for machines: one line per step, the withheld
//! closing step spelled out; or one JSON object per step.

use crate::context::{ContextEvent, Mode, Outcome};
use crate::encode::text;
use crate::error::Result;
use crate::model::*;
use crate::views::{TrailStep, Views};
use serde_json::{json, Value};

/// A name or label as written in a trail line: as it is when it shows as
/// what it is, else quoted with its control and invisible characters
/// escaped (the log may hold what no check let in, e.g. from an older
/// writer or a forger).
pub fn shown(s: &str) -> std::borrow::Cow<'_, str> {
    if crate::rules::labels::plainly_visible(s) && !s.contains(['"', ',', '[', ']']) {
        std::borrow::Cow::Borrowed(s)
    } else {
        std::borrow::Cow::Owned(escaped(s))
    }
}

/// `s` quoted, with everything but plainly visible characters escaped.
fn escaped(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' ' => out.push(' '),
            c if crate::rules::labels::plainly_visible(c.encode_utf8(&mut [0; 4])) => out.push(c),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    out.push('"');
    out
}

fn labels_text(labels: &[String]) -> String {
    let shown: Vec<_> = labels.iter().map(|l| shown(l)).collect();
    format!("[{}]", shown.join(", "))
}

/// Why a task's sealed records in a trail could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    /// Erased on the record (`forget_task` or its time to live), at.
    Erased(u64),
    /// No key and no erasure on the record: the key file was lost.
    KeyMissing,
    /// The key file is there but is not this task's key.
    KeyDamaged,
    /// The key opens the task's other records, not this one: the record
    /// does not match its task's key.
    RecordDamaged,
}

impl Unreadable {
    pub fn code(self) -> &'static str {
        match self {
            Unreadable::Erased(_) => "erased",
            Unreadable::KeyMissing => "key_missing",
            Unreadable::KeyDamaged => "key_damaged",
            Unreadable::RecordDamaged => "record_damaged",
        }
    }
}

/// Why each task whose sealed records `steps` still holds sealed (after
/// [`crate::engine::trail::collect_trail`] opened what its keys open) is unreadable.
pub fn erasures(
    steps: &[(String, TrailStep)],
    views: &Views,
) -> Result<std::collections::BTreeMap<String, Unreadable>> {
    let mut out: std::collections::BTreeMap<String, Unreadable> = steps
        .iter()
        .filter_map(|(_, s)| match &s.event {
            LedgerEvent::ContextErased(e) => Some((e.task.clone(), Unreadable::Erased(e.at))),
            _ => None,
        })
        .collect();
    for (_, s) in steps {
        if let LedgerEvent::SealedContext(c) = &s.event {
            if !out.contains_key(&c.task) {
                // Erased by a record outside these steps.
                if let Some(at) = views.task_erased_at(&c.task)? {
                    out.insert(c.task.clone(), Unreadable::Erased(at));
                    continue;
                }
                let why = match views.keys().status(&c.task) {
                    crate::erasure::KeyStatus::Held => Unreadable::RecordDamaged,
                    crate::erasure::KeyStatus::Missing => Unreadable::KeyMissing,
                    crate::erasure::KeyStatus::Damaged => Unreadable::KeyDamaged,
                };
                out.insert(c.task.clone(), why);
            }
        }
    }
    Ok(out)
}

/// One readable line for a step.
pub fn step_line(run: &str, s: &TrailStep) -> String {
    step_line_with(run, s, &std::collections::BTreeMap::new())
}

/// [`step_line`], saying when a sealed record's content was erased where
/// `erased` knows (see [`erasures`]).
pub fn step_line_with(
    run: &str,
    s: &TrailStep,
    erased: &std::collections::BTreeMap<String, Unreadable>,
) -> String {
    let body = match &s.event {
        LedgerEvent::AgentPublished(v) => {
            format!("published agent {} v{}", shown(&v.agent), v.version)
        }
        LedgerEvent::TokenIssued(t) => format!("issued token {} for {}", t.id, t.principal),
        LedgerEvent::TokenRevoked(t) => format!("revoked token {}", t.id),
        LedgerEvent::RunOpened(e) => {
            let pos = match (&e.root, e.hop) {
                (Some(r), Some(h)) => format!("root {r}, hop {h}"),
                _ => format!(
                    "chain position unknown (opened by an older worker from event {})",
                    e.legacy_trigger.as_deref().unwrap_or("?")
                ),
            };
            let by = match &e.trigger {
                Some(t) => format!(
                    " by {} from {} (exposes {})",
                    shown(&t.event),
                    shown(&t.source_run),
                    if t.artifacts.is_empty() {
                        "nothing".to_string()
                    } else {
                        t.artifacts
                            .iter()
                            .map(|a| shown(&a.name))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
                None if e.legacy_trigger.is_none() => " by a user".to_string(),
                None => String::new(),
            };
            format!(
                "opened {} v{}{by}; {pos}; labels {}",
                shown(&e.agent),
                e.version,
                labels_text(&e.labels)
            )
        }
        LedgerEvent::ArtifactRead(e) => format!(
            "read {} from {} ({}, {} bytes); labels now {}",
            shown(&e.artifact.name),
            shown(&e.artifact.source_run),
            e.artifact.digest(),
            e.artifact.size,
            labels_text(&e.labels_after)
        ),
        LedgerEvent::ReadRefused(e) => format!(
            "read of {:?} REFUSED ({}): {}",
            e.requested, e.code, e.message
        ),
        LedgerEvent::Forbidden(e) => {
            format!("{} FORBIDDEN: {}", shown(&e.op), shown(&e.message))
        }
        LedgerEvent::RunClosed(e) => {
            let arts = if e.artifacts.is_empty() {
                "no artifacts".to_string()
            } else {
                format!(
                    "artifacts {}",
                    e.artifacts
                        .iter()
                        .map(|a| shown(&a.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            let outcome = match &e.withheld {
                Some(w) => match &w.reason {
                    WithheldReason::HopLimit { root, limit } => format!(
                        "events WITHHELD ({}): this run is at hop {limit}, the limit of the chain started by {root}; its listeners do not start",
                        w.events.join(", ")
                    ),
                    WithheldReason::ChainUnknown => format!(
                        "events WITHHELD ({}): the chain is unknown (the run was opened without a recorded chain position)",
                        w.events.join(", ")
                    ),
                    WithheldReason::NotSucceeded { status } => {
                        format!("events not published ({}): the run {}", w.events.join(", "), status.as_str())
                    }
                },
                None if e.published.is_empty() => "publishes no events".to_string(),
                None => format!(
                    "publishes {}",
                    e.published.iter().map(|p| p.event.as_str()).collect::<Vec<_>>().join(", ")
                ),
            };
            let summary = if e.summary.is_empty() {
                String::new()
            } else {
                format!(" {:?}", e.summary)
            };
            format!(
                "closed {}{summary}; {arts}; {outcome}; labels {}",
                e.status.as_str(),
                labels_text(&e.labels)
            )
        }
        LedgerEvent::ListenerRefused(e) => {
            let why = match &e.reason {
                RefusalReason::SelfListen => {
                    "an agent is never started by its own event".to_string()
                }
                RefusalReason::ScopeBarrier {
                    listener_scope,
                    areas,
                } => format!(
                    "scope barrier: {} may not receive data of {}",
                    shown(listener_scope),
                    areas
                        .iter()
                        .map(|a| format!("area:{}", shown(a)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            format!(
                "listener {} for {} NOT OPENED ({}): {why}",
                shown(&e.agent),
                shown(&e.event),
                e.reason.code()
            )
        }
        LedgerEvent::Context(c) => context_line(&c.master_run, &c.event),
        LedgerEvent::SealedContext(c) => format!(
            "{} of task {}: {}",
            c.kind,
            shown(&c.task),
            match erased.get(&c.task) {
                Some(Unreadable::Erased(at)) => format!(
                    "content erased at {} (the sealed record still verifies)",
                    crate::model::time::rfc3339_ms(*at)
                ),
                Some(Unreadable::KeyDamaged) => "content UNREADABLE: the task's key file is damaged, nothing erased it (the sealed record still verifies)".to_owned(),
                Some(Unreadable::RecordDamaged) => "record DAMAGED: the task's key does not open it (run verify)".to_owned(),
                Some(Unreadable::KeyMissing) | None => "content UNREADABLE: the task's key is missing and no erasure is recorded (the sealed record still verifies)".to_owned(),
            }
        ),
        LedgerEvent::ContextErased(e) => format!(
            "context of task {} erased at {} ({}): its records stay sealed, verifiable and unreadable",
            shown(&e.task),
            crate::model::time::rfc3339_ms(e.at),
            if e.expired { "its time to live ran out" } else { "forgotten on request" }
        ),
        LedgerEvent::RunDispatched(e) => {
            if e.opened.is_empty() {
                "dispatched: no listener opened".to_string()
            } else {
                let opened: Vec<_> = e.opened.iter().map(|r| shown(r)).collect();
                format!("dispatched: opened {}", opened.join(", "))
            }
        }
    };
    format!(
        "{:<22} #{:<3} {body} (by {})",
        shown(run),
        s.step,
        shown(&s.principal)
    )
}

fn short_uri(uri: &str) -> String {
    match crate::model::cas::ContentRef::parse(uri) {
        Ok(r) => r.short(),
        Err(_) => shown(uri).into_owned(),
    }
}

/// A context exchange (IETF draft) in words: who sent what to whom, item
/// states, and both evaluation layers.
fn context_line(master_run: &str, ev: &ContextEvent) -> String {
    match ev {
        ContextEvent::TaskOpened {
            task,
            master_run,
            task_context,
            ..
        } => format!(
            "task {} opened by master {}: {:?} ({} goals, status {:?})",
            shown(task),
            shown(master_run),
            task_context.task_name,
            task_context.goal_status.len(),
            task_context.overall_status
        ),
        ContextEvent::ContextSent {
            subtask,
            agent,
            mode,
            context,
            ..
        } => {
            let mode = match mode {
                Mode::Sync => "sync",
                Mode::Async => "async",
            };
            let deps = if context.dependencies.is_empty() {
                String::new()
            } else {
                let deps: Vec<_> = context.dependencies.iter().map(|d| shown(d)).collect();
                format!("; after {}", deps.join(", "))
            };
            format!(
                "sent {} {:?} to {} ({mode}): {} todo items, {} context items by reference{deps}",
                shown(subtask),
                context.sub_task_name,
                shown(agent),
                context.todo_items.len(),
                context.context_items.len()
            )
        }
        ContextEvent::ContextReturned {
            subtask,
            agent,
            context,
            layer1,
            ..
        } => {
            let states = context.item_state_updates.as_deref().unwrap_or(&[]);
            let done = states.iter().filter(|s| s.state == 1).count();
            let verdict = if layer1.passed {
                "layer one PASSED".to_string()
            } else {
                format!(
                    "layer one FAILED: {}",
                    crate::encode::text(&layer1.reasons.join("; "))
                )
            };
            format!(
                "{} returned {}: items done {done}/{}; {verdict}",
                shown(agent),
                shown(subtask),
                context.todo_items.len()
            )
        }
        ContextEvent::Evaluated {
            subtask, decision, ..
        } => {
            let outcome = match decision.outcome {
                Outcome::Accepted => "ACCEPTED",
                Outcome::Rejected => "REJECTED",
            };
            format!(
                "layer two: master {outcome} {}: {:?}",
                shown(subtask),
                decision.reason
            )
        }
        ContextEvent::TaskUpdated {
            run, task_context, ..
        } => format!(
            "master {} updated the TaskContext: status {:?}, goals {}",
            shown(run),
            task_context.overall_status,
            task_context
                .goal_status
                .iter()
                .map(|g| format!("{}={}", shown(&g.goal), shown(&g.status.to_string())))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        ContextEvent::BlobPut {
            uri,
            size,
            media_type,
            expires_at,
            ..
        } => format!(
            "stored {} ({size} bytes, {}) until {}",
            short_uri(uri),
            shown(media_type),
            crate::model::time::rfc3339_ms(*expires_at)
        ),
        ContextEvent::BlobRead { reader, uri, .. } => {
            format!(
                "{} read {} (digest verified)",
                shown(reader),
                short_uri(uri)
            )
        }
        ContextEvent::Refused {
            op,
            code,
            message,
            agent,
            ..
        } => {
            // The caller as given: a run for the master's operations, an
            // agent for the invoked agent's.
            let by = match (agent.as_deref(), op.as_str()) {
                (Some(run), op) if run == master_run && op != "open_task" => {
                    format!("run {} (the master)", shown(run))
                }
                (Some(run), "open_task" | "update_task" | "send_context" | "evaluate") => {
                    format!("run {}", shown(run))
                }
                (Some(agent), _) => format!("agent {}", shown(agent)),
                (None, _) => "an unnamed caller".to_string(),
            };
            format!("{} by {by} REFUSED ({code}): {}", shown(op), text(message))
        }
    }
}

/// An artifact as every JSON answer and topic shows it: name, ref, digest
/// and size (never bytes).
pub fn artifact_json(a: &ArtifactRef) -> Value {
    json!({"name": a.name, "ref": a.content_ref(), "digest": a.digest(), "size": a.size})
}

/// One JSON object for a step.
pub fn step_json(run: &str, s: &TrailStep) -> Value {
    step_json_with(run, s, &std::collections::BTreeMap::new())
}

/// [`step_json`], saying why a sealed record is unreadable where
/// `unreadable` knows (see [`erasures`]).
pub fn step_json_with(
    run: &str,
    s: &TrailStep,
    unreadable: &std::collections::BTreeMap<String, Unreadable>,
) -> Value {
    let mut detail = match &s.event {
        // Ciphertext says nothing to a reader: what it was, and why it
        // cannot be read.
        LedgerEvent::SealedContext(c) => {
            let why = unreadable
                .get(&c.task)
                .copied()
                .unwrap_or(Unreadable::KeyMissing);
            json!({"SealedContext": {"master_run": c.master_run, "task": c.task, "kind": c.kind,
                "erased": matches!(why, Unreadable::Erased(_)), "unreadable": why.code()}})
        }
        e => serde_json::to_value(e).unwrap_or(Value::Null),
    };
    // Externally tagged {"RunOpened": {...}}: keep the inner object.
    if let Value::Object(m) = &mut detail {
        if m.len() == 1 {
            if let Some((_, inner)) = m.iter().next() {
                detail = inner.clone();
            }
        }
    }
    let mut step = json!({
        "run": run,
        "step": s.step,
        "kind": s.event.kind(),
        "partition": s.partition,
        "offset": s.offset,
        "time_ms": s.time_ms,
        "event_id": s.event_id,
        "writer": s.writer,
        "by": s.principal,
        "detail": detail,
    });
    // The request's span (an MCP tool call), as W3C trace context writes it.
    if let Some(span) = &s.span {
        step["traceparent"] = json!(format!(
            "00-{}-{}-01",
            hex::encode(span.trace_id),
            hex::encode(span.span_id)
        ));
    }
    step
}

/// A point in history for `--as-of`: a ledger offset or a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsOf {
    Offset(u64),
    TimeMs(u64),
}

impl AsOf {
    pub fn includes(&self, s: &TrailStep) -> bool {
        match self {
            AsOf::Offset(o) => s.offset <= *o,
            AsOf::TimeMs(t) => s.time_ms <= *t,
        }
    }
}

/// Parse `--as-of`: digits are a ledger offset; `<digits>ms` is Unix
/// milliseconds; otherwise an RFC 3339 UTC time like 2026-12-02T10:00:00Z.
/// A `--as-of` that names no point in history.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is neither an offset, nor <unix ms>ms, nor a UTC time like 2026-12-02T10:00:00Z")]
pub struct BadAsOf(pub String);

pub fn parse_as_of(s: &str) -> std::result::Result<AsOf, BadAsOf> {
    let s = s.trim();
    if let Ok(o) = s.parse::<u64>() {
        return Ok(AsOf::Offset(o));
    }
    if let Some(ms) = s.strip_suffix("ms").and_then(|m| m.parse::<u64>().ok()) {
        return Ok(AsOf::TimeMs(ms));
    }
    parse_rfc3339_utc(s)
        .map(AsOf::TimeMs)
        .ok_or_else(|| BadAsOf(s.chars().take(100).collect()))
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]Z` to Unix milliseconds.
fn parse_rfc3339_utc(s: &str) -> Option<u64> {
    let s = s.strip_suffix('Z').or_else(|| s.strip_suffix("+00:00"))?;
    let (date, time) = s.split_once(['T', ' '])?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.split(':').map(|x| x.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&m)
        || !(1..=31).contains(&day)
        || !(0..=23).contains(&hh)
        || !(0..=59).contains(&mm)
        || !(0..=60).contains(&ss)
    {
        return None;
    }
    let ms: i64 = if frac.is_empty() {
        0
    } else {
        format!("{:0<3}", &frac[..frac.len().min(3)]).parse().ok()?
    };
    // Days from civil (proleptic Gregorian), after Howard Hinnant's algorithm.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    let total = ((days * 24 + hh) * 60 + mm) * 60 + ss;
    u64::try_from(total * 1000 + ms).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::time::rfc3339_ms;

    #[test]
    fn times_print_as_utc_and_read_back() {
        for ms in [951_782_400_000u64, 4_102_444_799_999, 1_709_164_800_000] {
            assert_eq!(parse_as_of(&rfc3339_ms(ms)), Ok(AsOf::TimeMs(ms)));
        }
    }

    #[test]
    fn text_from_the_log_cannot_forge_a_trail_line_or_drive_the_terminal() {
        // As an older writer (or a forger) could have left it in the log.
        let ev = ContextEvent::BlobPut {
            task: "t1".into(),
            uri: "bad".into(),
            digest: "d".into(),
            size: 2,
            media_type: "text/plain) until 0 ms\nm   #2 closed succeeded \"all good\"\u{1b}[8m"
                .into(),
            expires_at: 0,
            at: 0,
        };
        let line = context_line("m", &ev);
        assert!(!line.contains('\n') && !line.contains('\u{1b}'), "{line}");
        assert!(
            line.contains("\\u{a}") && line.contains("\\u{1b}"),
            "{line}"
        );
        let refused = ContextEvent::Refused {
            op: "put_blob".into(),
            code: "invalid_request".into(),
            message: "bad\r\nm  #9 closed".into(),
            agent: None,
            task: "t1".into(),
            at: 0,
        };
        let line = context_line("m", &refused);
        assert!(!line.contains('\n') && !line.contains('\r'), "{line}");
        assert_eq!(text("plain words, kept"), "plain words, kept");
    }

    #[test]
    fn as_of_parses_offsets_millis_and_utc_times() {
        assert_eq!(parse_as_of("42"), Ok(AsOf::Offset(42)));
        assert_eq!(
            parse_as_of("1700000000000ms"),
            Ok(AsOf::TimeMs(1_700_000_000_000))
        );
        assert_eq!(
            parse_as_of("2023-11-14T22:13:20Z"),
            Ok(AsOf::TimeMs(1_700_000_000_000))
        );
        assert_eq!(parse_as_of("1970-01-01T00:00:00.5Z"), Ok(AsOf::TimeMs(500)));
        assert!(parse_as_of("yesterday").is_err());
        assert!(parse_as_of("2023-13-01T00:00:00Z").is_err());
    }
}
