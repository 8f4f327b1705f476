//! Questions about the ledger as a whole: an agent, the tokens, the
//! status of every topic and view, a task's statistics.

use super::Said;
use crate::codes::Code;
use crate::engine::Engine;
use crate::error::LedgerError;
use crate::model::Topic;
use crate::protocol::LoopCheckOut;
use serde_json::json;
use std::fmt::Write as _;

pub(super) fn agent(engine: &Engine, name: &str, json: bool) -> Result<Said, LedgerError> {
    let versions = engine.views().versions(name)?;
    if versions.is_empty() {
        return Ok(Said::refused(
            Code::UnknownAgent,
            format!("no agent {name:?} has been published"),
        ));
    }
    let mut out = String::new();
    for v in versions {
        if json {
            let o = json!({"agent": v.agent, "version": v.version, "scope": v.scope, "listens": v.listens,
                "emits": v.emits.iter().map(|e| json!({"event": e.event, "context": e.context, "artifacts": e.artifacts})).collect::<Vec<_>>(),
                "access": v.access, "tool_budget": v.tool_budget,
                "loop_check": LoopCheckOut::from(&v.loop_check)});
            line!(out, "{o}");
        } else {
            line!(
                out,
                "{} v{} ({}) listens [{}] emits [{}]",
                v.agent,
                v.version,
                v.scope,
                v.listens.join(", "),
                v.emits
                    .iter()
                    .map(|e| e.event.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            for w in &v.loop_check.warnings {
                line!(
                    out,
                    "  loop: {}{}",
                    w.text,
                    w.note
                        .as_ref()
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default()
                );
            }
            if v.loop_check.may_be_more {
                line!(out, "  there may be more loops than listed");
            }
            if let Some(t) = &v.loop_check.text {
                line!(out, "  {t}");
            }
        }
    }
    Ok(Said::answered(out))
}

pub(super) fn tokens(engine: &mut Engine, json: bool) -> Result<Said, LedgerError> {
    // Another instance may have issued or revoked one a moment ago.
    engine.refresh()?;
    let now = engine.now_ms();
    let mut out = String::new();
    let tokens = engine.tokens()?;
    for t in &tokens {
        let state = match (t.revoked_at_ms, t.expires_at_ms) {
            (Some(_), _) => "revoked",
            (None, Some(at)) if now >= at => "expired",
            _ => "active",
        };
        let time = |ms: Option<u64>| ms.map(crate::model::time::rfc3339_ms);
        if json {
            line!(
                out,
                "{}",
                json!({
                    "id": t.id,
                    "principal": t.principal,
                    "scopes": t.scopes,
                    "state": state,
                    "issued_at": crate::model::time::rfc3339_ms(t.issued_at_ms),
                    "expires_at": time(t.expires_at_ms),
                    "revoked_at": time(t.revoked_at_ms),
                })
            );
        } else {
            let scopes = if t.scopes.is_empty() {
                String::new()
            } else {
                format!(" scopes {}", t.scopes.join(","))
            };
            let until = match (t.revoked_at_ms, t.expires_at_ms) {
                (Some(at), _) => format!(" revoked {}", crate::model::time::rfc3339_ms(at)),
                (None, Some(at)) => format!(" expires {}", crate::model::time::rfc3339_ms(at)),
                (None, None) => String::new(),
            };
            line!(
                out,
                "{} {state} {}{scopes} issued {}{until}",
                t.id,
                t.principal,
                crate::model::time::rfc3339_ms(t.issued_at_ms)
            );
        }
    }
    if tokens.is_empty() && !json {
        line!(out, "no tokens issued");
    }
    Ok(Said::answered(out))
}

pub(super) fn status(engine: &Engine, json: bool) -> Result<Said, LedgerError> {
    let log = engine.log();
    let views = engine.views();
    struct Row {
        topic: Topic,
        partition: u32,
        end: u64,
        projected: Option<u64>,
        dispatch: Option<u64>,
        attested: Option<u64>,
    }
    let mut rows = Vec::new();
    for topic in Topic::ALL {
        for p in 0..log.partitions(topic) {
            let chained = matches!(topic, Topic::Ledger | Topic::Registry);
            rows.push(Row {
                topic,
                partition: p,
                end: log.end_offset(topic, p).map_err(LedgerError::Log)?,
                projected: match topic {
                    Topic::Published => None,
                    _ => Some(views.offset(topic, p)?),
                },
                dispatch: match topic {
                    Topic::Ledger => Some(views.dispatch_cursor(p)?),
                    _ => None,
                },
                attested: if chained {
                    Some(views.checkpoint_mark(topic, p)?.to)
                } else {
                    None
                },
            });
        }
    }
    let sizes = views.sizes()?;
    let lag = |r: &Row| r.projected.map(|x| r.end - x.min(r.end));
    let rebuild = engine.rebuild_status();
    // What the instances share through the log (Kafka): records kept in
    // the blobs and keys topics, compaction's leftovers included.
    let mut shared = Vec::new();
    for topic in [Topic::Blobs, Topic::Keys] {
        if log.partitions(topic) > 0 {
            let ends = log.end_offsets(topic).map_err(LedgerError::Log)?;
            shared.push((topic, ends.len(), ends.iter().sum::<u64>()));
        }
    }
    let mut out = String::new();
    if json {
        let mut answer = json!({"log": log.describe(),
            "partitions": rows.iter().map(|r| json!({"topic": r.topic.name(), "partition": r.partition,
                "end": r.end, "projected": r.projected, "lag": lag(r), "dispatch_cursor": r.dispatch,
                "attested_by_checkpoints": r.attested})).collect::<Vec<_>>(),
            "views": sizes.iter().map(|(n, c)| (n.to_string(), json!(c))).collect::<serde_json::Map<_, _>>()});
        if let Some(r) = &rebuild {
            answer["rebuild"] = json!(r);
        }
        if !shared.is_empty() {
            answer["shared"] = shared
                .iter()
                .map(|(t, parts, records)| {
                    (
                        t.name().to_string(),
                        json!({"partitions": parts, "records": records}),
                    )
                })
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        line!(out, "{answer}");
    } else {
        line!(out, "{}", log.describe());
        line!(
            out,
            "{:<12} {:>4} {:>10} {:>10} {:>6} {:>10} {:>10}",
            "topic",
            "part",
            "end",
            "projected",
            "lag",
            "dispatch@",
            "attested"
        );
        let f = |x: Option<u64>| x.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
        for r in &rows {
            line!(
                out,
                "{:<12} {:>4} {:>10} {:>10} {:>6} {:>10} {:>10}",
                r.topic.name(),
                r.partition,
                r.end,
                f(r.projected),
                f(lag(r)),
                f(r.dispatch),
                f(r.attested)
            );
        }
        line!(
            out,
            "views: {}",
            sizes
                .iter()
                .map(|(n, c)| format!("{n} {c}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if !shared.is_empty() {
            line!(
                out,
                "shared through the log: {}",
                shared
                    .iter()
                    .map(|(t, parts, records)| format!(
                        "{t} {records} records in {parts} partitions"
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if let Some(r) = &rebuild {
            line!(out, "{}", rebuild_line(r));
        }
    }
    Ok(Said::answered(out))
}

/// A rebuild's state in one line, for `status`.
pub(super) fn rebuild_line(r: &crate::rebuild::beside::RebuildStatus) -> String {
    use crate::rebuild::beside::RebuildState;
    match r.state {
        RebuildState::Running => format!(
            "rebuild {}: running, {}/{} records projected beside the live views ({:.1}s)",
            r.id, r.projected, r.total, r.seconds
        ),
        RebuildState::Swapped => format!(
            "rebuild {}: swapped in after {:.1}s, {}",
            r.id,
            r.seconds,
            match r.identical() {
                Some(true) => "identical to the views it replaced",
                Some(false) => "the views it replaced had DRIFTED",
                None => "not compared (the log kept moving)",
            }
        ),
        RebuildState::Failed => format!(
            "rebuild {}: FAILED after {:.1}s: {}",
            r.id,
            r.seconds,
            r.error.as_deref().unwrap_or("")
        ),
    }
}

pub(super) fn stats(engine: &Engine, task: &str, json: bool) -> Result<Said, LedgerError> {
    let st = engine.task_stats(task)?;
    let per_token = crate::context::BYTES_PER_TOKEN;
    let mut out = String::new();
    if json {
        line!(
            out,
            "{}",
            json!({"task": task, "subtasks": st.subtasks, "inline_bytes": st.inline_bytes,
                   "referenced_bytes": st.referenced_bytes, "est_tokens_saved": st.est_tokens_saved,
                   "bytes_per_token": per_token, "refusals": st.refusals})
        );
    } else {
        line!(out, "task {task}: {} subtasks", st.subtasks);
        line!(
            out,
            "  sent inline:            {:>10} bytes",
            st.inline_bytes
        );
        line!(
            out,
            "  left behind references: {:>10} bytes",
            st.referenced_bytes
        );
        line!(
            out,
            "  estimated tokens saved: {:>10} (at ~{per_token} bytes per token, a common rule of thumb for English text)",
            st.est_tokens_saved
        );
        line!(out, "  refusals recorded:      {:>10}", st.refusals);
    }
    Ok(Said::answered(out))
}
