//! Read-only commands: trail, chain, agent, status.

use super::{open_engine_read_only, Cli};
use agentledger::log::Topic;
use agentledger::protocol::{LoopCheckOut, WithheldOut};
use agentledger::report;
use anyhow::Result;
use serde_json::json;

pub fn trail(cli: &Cli, run: &str, chain: bool, as_of: Option<&str>) -> Result<i32> {
    let point = match as_of.map(report::parse_as_of).transpose() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("agentledger: --as-of: {e}");
            return Ok(2);
        }
    };
    let engine = open_engine_read_only(cli)?;
    let mut steps = match report::collect_trail(engine.views(), engine.log().as_ref(), run, chain) {
        Ok(s) => s,
        Err(e) if e.is_refusal() => {
            eprintln!("agentledger: {}: {e}", e.code());
            return Ok(1);
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(point) = point {
        steps.retain(|(_, s)| point.includes(s));
    }
    for (r, s) in &steps {
        if cli.json {
            outln!("{}", report::step_json(r, s));
        } else {
            outln!("{}", report::step_line(r, s));
        }
    }
    Ok(0)
}

pub fn chain(cli: &Cli, run: &str) -> Result<i32> {
    let engine = open_engine_read_only(cli)?;
    let views = engine.views();
    let Some(state) = views.run(run)? else {
        eprintln!("agentledger: unknown_run: no run {run:?} in the ledger");
        return Ok(1);
    };
    let Some(root) = state.root.clone() else {
        if cli.json {
            outln!(
                "{}",
                json!({"run": run, "root": null, "hop": null, "runs": [run]})
            );
        } else {
            outln!("{run}: chain unknown (opened without a recorded chain position)");
        }
        return Ok(0);
    };
    let chain = views.chain(&root)?;
    let runs = chain.map(|c| c.runs).unwrap_or_default();
    let mut rows = Vec::new();
    for r in &runs {
        if let Some(s) = views.run(r)? {
            rows.push(s);
        }
    }
    if cli.json {
        outln!(
            "{}",
            json!({"root": root, "runs": rows.iter().map(|s| json!({
                "run": s.run, "agent": s.agent, "version": s.version, "hop": s.hop,
                "status": s.status.map(|x| x.as_str()),
                "source_run": s.trigger.as_ref().map(|t| t.source_run.clone()),
                "withheld": s.withheld.as_ref().map(WithheldOut::from)})).collect::<Vec<_>>()})
        );
    } else {
        outln!("chain of {root}:");
        for s in rows {
            let status = s.status.map(|x| x.as_str()).unwrap_or("open");
            let from = s
                .trigger
                .as_ref()
                .map(|t| format!(" <- {} ({})", t.source_run, t.event))
                .unwrap_or_default();
            let w = if s.withheld.is_some() {
                "  [events withheld]"
            } else {
                ""
            };
            outln!(
                "  hop {:<2} {:<22} {:<12} {status}{from}{w}",
                s.hop.unwrap_or(0),
                s.run,
                s.agent
            );
        }
    }
    Ok(0)
}

pub fn agent(cli: &Cli, name: &str) -> Result<i32> {
    let engine = open_engine_read_only(cli)?;
    let versions = engine.views().versions(name)?;
    if versions.is_empty() {
        eprintln!("agentledger: unknown_agent: no agent {name:?} has been published");
        return Ok(1);
    }
    for v in versions {
        if cli.json {
            let mut o = json!({"agent": v.agent, "version": v.version, "scope": v.scope, "listens": v.listens,
                "emits": v.emits.iter().map(|e| json!({"event": e.event, "context": e.context, "artifacts": e.artifacts})).collect::<Vec<_>>(),
                "access": v.access, "tool_budget": v.tool_budget});
            o["loop_check"] = json!(LoopCheckOut::from(&v.loop_check));
            outln!("{o}");
        } else {
            outln!(
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
                outln!(
                    "  loop: {}{}",
                    w.text,
                    w.note
                        .as_ref()
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default()
                );
            }
            if v.loop_check.may_be_more {
                outln!("  there may be more loops than listed");
            }
            if let Some(t) = &v.loop_check.text {
                outln!("  {t}");
            }
        }
    }
    Ok(0)
}

pub fn status(cli: &Cli) -> Result<i32> {
    let engine = open_engine_read_only(cli)?;
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
                end: log.end_offset(topic, p)?,
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
    if cli.json {
        outln!(
            "{}",
            json!({"log": log.describe(),
                "partitions": rows.iter().map(|r| json!({"topic": r.topic.name(), "partition": r.partition,
                    "end": r.end, "projected": r.projected, "lag": lag(r), "dispatch_cursor": r.dispatch,
                    "attested_by_checkpoints": r.attested})).collect::<Vec<_>>(),
                "views": sizes.iter().map(|(n, c)| (n.to_string(), json!(c))).collect::<serde_json::Map<_, _>>()})
        );
    } else {
        outln!("{}", log.describe());
        outln!(
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
            outln!(
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
        outln!(
            "views: {}",
            sizes
                .iter()
                .map(|(n, c)| format!("{n} {c}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(0)
}

pub fn stats(cli: &Cli, task: &str) -> Result<i32> {
    let engine = open_engine_read_only(cli)?;
    let st = match engine.task_stats(task) {
        Ok(s) => s,
        Err(e) if e.is_refusal() => {
            eprintln!("agentledger: {}: {e}", e.code());
            return Ok(1);
        }
        Err(e) => return Err(e.into()),
    };
    let per_token = agentledger::context::BYTES_PER_TOKEN;
    if cli.json {
        outln!(
            "{}",
            json!({"task": task, "subtasks": st.subtasks, "inline_bytes": st.inline_bytes,
                   "referenced_bytes": st.referenced_bytes, "est_tokens_saved": st.est_tokens_saved,
                   "bytes_per_token": per_token, "refusals": st.refusals})
        );
    } else {
        outln!("task {task}: {} subtasks", st.subtasks);
        outln!("  sent inline:            {:>10} bytes", st.inline_bytes);
        outln!(
            "  left behind references: {:>10} bytes",
            st.referenced_bytes
        );
        outln!(
            "  estimated tokens saved: {:>10} (at ~{per_token} bytes per token, a common rule of thumb for English text)",
            st.est_tokens_saved
        );
        outln!("  refusals recorded:      {:>10}", st.refusals);
    }
    Ok(0)
}
