//! The read-only questions — trail, chain, agent, status, stats — answered
//! as the exact text or JSON lines the CLI prints. One function per
//! question over an open [`Engine`], so that `agentledger trail` on the
//! data dir and `GET /v1/runs/{run}/trail` through a running server say
//! the same thing, byte for byte.

use crate::auth::Subject;
use crate::codes::Code;
use crate::codes::Refusal;
use crate::engine::Engine;
use crate::error::LedgerError;
use crate::model::Topic;
use crate::model::{LedgerEvent, ListenerRefused};
use crate::picture::ChainPicture;
use crate::protocol::{Failure, LoopCheckOut, WithheldOut};
use crate::report;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::fmt::Write as _;

/// A read-only question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "query", rename_all = "snake_case")]
pub enum Query {
    Trail {
        run: String,
        #[serde(default)]
        chain: bool,
        #[serde(default)]
        as_of: Option<String>,
    },
    Chain {
        run: String,
    },
    /// A run's spans, or its chain's, as OTLP/JSON (`trail --otlp`).
    Trace {
        run: String,
        #[serde(default)]
        chain: bool,
    },
    /// A run's chain drawn (`chain --format dot|svg`).
    Picture {
        run: String,
        format: PictureFormat,
    },
    Agent {
        name: String,
    },
    Status,
    Stats {
        task: String,
    },
    /// Every token issued: id, principal, scopes, times (never a token).
    Tokens,
    /// A run's or a chain's records with their covering checkpoints
    /// (checkpointing the tail first, so everything exported is attested).
    Export {
        #[serde(default)]
        run: Option<String>,
        #[serde(default)]
        chain: Option<String>,
        #[serde(default)]
        as_of: Option<u64>,
    },
}

/// How a chain is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PictureFormat {
    Dot,
    Svg,
}

impl PictureFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            PictureFormat::Dot => "dot",
            PictureFormat::Svg => "svg",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "dot" => Some(PictureFormat::Dot),
            "svg" => Some(PictureFormat::Svg),
            _ => None,
        }
    }

    /// The media type a server answers it with.
    pub fn content_type(self) -> &'static str {
        match self {
            PictureFormat::Dot => "text/vnd.graphviz; charset=utf-8",
            PictureFormat::Svg => "image/svg+xml",
        }
    }
}

/// What a question's answer prints: lines for stdout, or a refusal (exit
/// 1) or a bad question (exit 2) with its code and message.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Said {
    pub out: String,
    pub failure: Option<Failure>,
    /// Answered, but what it found is not clean (`verify` found a
    /// mismatch): exit 1.
    pub unclean: bool,
}

impl Said {
    fn refused(code: Code, message: impl Into<String>) -> Self {
        Said {
            out: String::new(),
            failure: Some(Failure::new(code, message)),
            unclean: false,
        }
    }

    pub fn answered(out: String) -> Self {
        Said {
            out,
            failure: None,
            unclean: false,
        }
    }

    /// The exit code the CLI ends with: 0 answered, 1 refused, 2 a
    /// question that cannot be asked.
    pub fn exit_code(&self) -> i32 {
        match &self.failure {
            None if self.unclean => 1,
            None => 0,
            Some(f) if f.error.code == Code::InvalidRequest => 2,
            Some(_) => 1,
        }
    }

    /// The line the CLI prints on stderr for a failure.
    pub fn error_line(&self) -> Option<String> {
        self.failure
            .as_ref()
            .map(|f| format!("agentledger: {}: {}", f.error.code, f.error.message))
    }
}

/// Answer `q`, as JSON lines when `json`, else as text (an export is JSON
/// lines either way).
pub fn answer(engine: &mut Engine, q: &Query, json: bool) -> Result<Said, LedgerError> {
    if let Some(refused) = not_a_name(q) {
        return Ok(refused);
    }
    let said = match q {
        Query::Export { run, chain, as_of } => {
            export(engine, run.as_deref(), chain.as_deref(), *as_of)
        }
        Query::Trail { run, chain, as_of } => trail(engine, run, *chain, as_of.as_deref(), json),
        Query::Chain { run } => chain(engine, run, json),
        Query::Picture { run, format } => picture(engine, run, *format),
        Query::Trace { run, chain } => trace(engine, run, *chain),
        Query::Agent { name } => agent(engine, name, json),
        Query::Status => status(engine, json),
        Query::Stats { task } => stats(engine, task, json),
        Query::Tokens => tokens(engine, json),
    };
    match said {
        Err(e) if e.is_refusal() => Ok(Said::refused(e.code(), e.to_string())),
        other => other,
    }
}

/// What `q` is about, for the policy: the scopes of the agents whose run,
/// chain, agent or task it names (none when they do not exist), or the
/// ledger as a whole.
pub fn subject(engine: &Engine, q: &Query) -> Result<Subject, LedgerError> {
    let views = engine.views();
    let run = |run: &str| -> Result<Vec<String>, LedgerError> {
        Ok(views
            .run(run)?
            .map(|r| vec![r.scope.clone()])
            .unwrap_or_default())
    };
    // Every run of the chain the run is in: a chain may reach agents of
    // other scopes, and reading it shows their steps.
    let chain = |of: &str| -> Result<Vec<String>, LedgerError> {
        let Some(r) = views.run(of)? else {
            return Ok(Vec::new());
        };
        let mut scopes = vec![r.scope.clone()];
        let root = r.root.clone().unwrap_or_else(|| r.run.clone());
        for member in views.chain(&root)?.map(|c| c.runs).unwrap_or_default() {
            if let Some(m) = views.run(&member)? {
                scopes.push(m.scope.clone());
            }
        }
        scopes.sort();
        scopes.dedup();
        Ok(scopes)
    };
    Ok(Subject::Scopes(match q {
        Query::Status | Query::Tokens => return Ok(Subject::Whole),
        Query::Export {
            run: None,
            chain: None,
            ..
        } => return Ok(Subject::Whole),
        Query::Trail {
            run: r,
            chain: false,
            ..
        }
        | Query::Trace {
            run: r,
            chain: false,
        } => run(r)?,
        Query::Trail { run: r, .. }
        | Query::Trace { run: r, .. }
        | Query::Chain { run: r }
        | Query::Picture { run: r, .. } => chain(r)?,
        Query::Export {
            run: r, chain: c, ..
        } => {
            let mut scopes = Vec::new();
            if let Some(r) = r {
                scopes.extend(run(r)?);
            }
            if let Some(c) = c {
                scopes.extend(chain(c)?);
            }
            scopes
        }
        Query::Agent { name } => views
            .agent(name)?
            .map(|a| vec![a.scope])
            .unwrap_or_default(),
        Query::Stats { task } => match views.task(task)? {
            Some(t) => run(&t.master_run)?,
            None => Vec::new(),
        },
    }))
}

/// A question naming what cannot be a name (a run, agent or task): refused
/// `invalid_name` before anything is looked up, echoing at most 100
/// characters of it.
fn not_a_name(q: &Query) -> Option<Said> {
    let names: Vec<(&str, &str)> = match q {
        Query::Trail { run, .. }
        | Query::Chain { run }
        | Query::Picture { run, .. }
        | Query::Trace { run, .. } => vec![("run", run)],
        Query::Agent { name } => vec![("agent", name)],
        Query::Stats { task } => vec![("task", task)],
        Query::Export { run, chain, .. } => run
            .iter()
            .map(|r| ("run", r.as_str()))
            .chain(chain.iter().map(|c| ("chain root", c.as_str())))
            .collect(),
        Query::Status | Query::Tokens => Vec::new(),
    };
    let (what, name) = names
        .into_iter()
        .find(|(_, n)| !crate::model::ids::valid_name(n))?;
    Some(Said::refused(
        Code::InvalidName,
        format!(
            "{what} {:?} is not a name (1–128 of letters, digits, -_.:, never . or ..)",
            name.chars().take(100).collect::<String>()
        ),
    ))
}

macro_rules! line {
    ($out:expr, $($arg:tt)*) => {{
        let _ = writeln!($out, $($arg)*);
    }};
}

fn trail(
    engine: &Engine,
    run: &str,
    chain: bool,
    as_of: Option<&str>,
    json: bool,
) -> Result<Said, LedgerError> {
    let point = match as_of.map(report::parse_as_of).transpose() {
        Ok(p) => p,
        Err(e) => return Ok(Said::refused(Code::InvalidRequest, format!("--as-of: {e}"))),
    };
    let mut steps =
        crate::engine::trail::collect_trail(engine.views(), engine.log().as_ref(), run, chain)?;
    if let Some(point) = point {
        steps.retain(|(_, s)| point.includes(s));
    }
    let mut out = String::new();
    let erased = report::erasures(&steps, engine.views())?;
    for (r, s) in &steps {
        if json {
            line!(out, "{}", report::step_json_with(r, s, &erased));
        } else {
            line!(out, "{}", report::step_line_with(r, s, &erased));
        }
    }
    Ok(Said::answered(out))
}

fn chain(engine: &Engine, run: &str, json: bool) -> Result<Said, LedgerError> {
    let views = engine.views();
    let Some(state) = views.run(run)? else {
        return Ok(Said::refused(
            Code::UnknownRun,
            format!("no run {run:?} in the ledger"),
        ));
    };
    let mut out = String::new();
    let Some(root) = state.root.clone() else {
        if json {
            line!(
                out,
                "{}",
                json!({"run": run, "root": null, "hop": null, "runs": [run]})
            );
        } else {
            line!(
                out,
                "{run}: chain unknown (opened without a recorded chain position)"
            );
        }
        return Ok(Said::answered(out));
    };
    let runs = views.chain(&root)?.map(|c| c.runs).unwrap_or_default();
    let mut rows = Vec::new();
    for r in &runs {
        if let Some(s) = views.run(r)? {
            rows.push(s);
        }
    }
    if json {
        line!(
            out,
            "{}",
            json!({"root": root, "runs": rows.iter().map(|s| json!({
                "run": s.run, "agent": s.agent, "version": s.version, "hop": s.hop,
                "status": s.status.map(|x| x.as_str()),
                "source_run": s.trigger.as_ref().map(|t| t.source_run.clone()),
                "withheld": s.withheld.as_ref().map(WithheldOut::from)})).collect::<Vec<_>>()})
        );
    } else {
        line!(out, "chain of {root}:");
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
            line!(
                out,
                "  hop {:<2} {:<22} {:<12} {status}{from}{w}",
                s.hop.unwrap_or(0),
                s.run,
                s.agent
            );
        }
    }
    Ok(Said::answered(out))
}

/// The picture of `run`'s chain: its runs' states and the listener
/// refusals its trail records.
pub fn chain_picture(engine: &Engine, run: &str) -> Result<ChainPicture, LedgerError> {
    let views = engine.views();
    let state = views
        .run(run)?
        .ok_or_else(|| Refusal::new(Code::UnknownRun, format!("no run {run:?} in the ledger")))?;
    let (root, ids) = match &state.root {
        Some(root) => (
            root.clone(),
            views
                .chain(root)?
                .map(|c| c.runs)
                .unwrap_or_else(|| vec![run.to_string()]),
        ),
        None => (run.to_string(), vec![run.to_string()]),
    };
    let mut runs = Vec::with_capacity(ids.len());
    for r in &ids {
        if let Some(s) = views.run(r)? {
            runs.push(s.state);
        }
    }
    let refusals: Vec<ListenerRefused> =
        crate::engine::trail::collect_trail(views, engine.log().as_ref(), run, true)?
            .into_iter()
            .filter_map(|(_, s)| match s.event {
                LedgerEvent::ListenerRefused(f) => Some(f),
                _ => None,
            })
            .collect();
    Ok(ChainPicture::of(&root, &runs, &refusals))
}

/// The spans of `run` (with `whole_chain`, of every run of its chain).
pub fn spans(
    engine: &Engine,
    run: &str,
    whole_chain: bool,
) -> Result<Vec<opentelemetry_sdk::trace::SpanData>, LedgerError> {
    let views = engine.views();
    let steps =
        crate::engine::trail::collect_trail(views, engine.log().as_ref(), run, whole_chain)?;
    // Runs in the order their first step was recorded: parents first.
    let mut order: Vec<String> = Vec::new();
    let mut by_run: std::collections::HashMap<String, Vec<crate::views::TrailStep>> =
        std::collections::HashMap::new();
    for (r, s) in steps {
        if !by_run.contains_key(&r) {
            order.push(r.clone());
        }
        by_run.entry(r).or_default().push(s);
    }
    let mut out = Vec::new();
    for r in order {
        let Some(state) = views.run(&r)? else {
            continue;
        };
        let mut trail = by_run.remove(&r).unwrap_or_default();
        trail.sort_by_key(|s| s.step);
        let warnings: Vec<String> = views
            .versions(&state.agent)?
            .into_iter()
            .find(|v| v.version == state.version)
            .map(|v| {
                v.loop_check
                    .warnings
                    .iter()
                    .map(|w| w.text.clone())
                    .collect()
            })
            .unwrap_or_default();
        out.extend(crate::trace::run_spans(&crate::trace::RunTrail {
            run: &state.state,
            steps: &trail,
            loop_warnings: &warnings,
        }));
    }
    Ok(out)
}

fn trace(engine: &Engine, run: &str, whole_chain: bool) -> Result<Said, LedgerError> {
    let spans = spans(engine, run, whole_chain)?;
    let mut out = crate::trace::otlp::to_json(spans, engine.ledger_name());
    out.push('\n');
    Ok(Said::answered(out))
}

fn picture(engine: &Engine, run: &str, format: PictureFormat) -> Result<Said, LedgerError> {
    let p = chain_picture(engine, run)?;
    Ok(Said::answered(match format {
        PictureFormat::Dot => crate::picture::dot::render(&p),
        PictureFormat::Svg => crate::picture::svg::render(&p, None),
    }))
}

fn agent(engine: &Engine, name: &str, json: bool) -> Result<Said, LedgerError> {
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

fn tokens(engine: &mut Engine, json: bool) -> Result<Said, LedgerError> {
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

fn status(engine: &Engine, json: bool) -> Result<Said, LedgerError> {
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
fn rebuild_line(r: &crate::rebuild::beside::RebuildStatus) -> String {
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

fn stats(engine: &Engine, task: &str, json: bool) -> Result<Said, LedgerError> {
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

fn export(
    engine: &mut Engine,
    run: Option<&str>,
    chain: Option<&str>,
    as_of: Option<u64>,
) -> Result<Said, LedgerError> {
    let (subject, whole_chain) = match (run, chain) {
        (Some(r), None) => (r, false),
        (None, Some(c)) => (c, true),
        _ => {
            return Ok(Said::refused(
                Code::InvalidRequest,
                "give exactly one of run or chain",
            ))
        }
    };
    engine.checkpoint(true)?;
    let mut steps = crate::engine::trail::collect_trail(
        engine.views(),
        engine.log().as_ref(),
        subject,
        whole_chain,
    )?;
    if let Some(limit) = as_of {
        steps.retain(|(_, s)| s.offset <= limit);
    }
    let checkpoints: Vec<_> = crate::audit::checkpoint::read_all(engine.log().as_ref())?
        .into_iter()
        .filter_map(|(_, c)| c.ok())
        .collect();
    let witnessed =
        crate::audit::checkpoint::latest_cosigned(engine.log().as_ref(), Topic::Ledger)?;
    let what = json!({"run": run, "chain": chain, "as_of": as_of});
    let mut out = Vec::new();
    crate::audit::export::write_export(
        engine.log().as_ref(),
        engine.views().tiles(),
        what,
        &steps,
        &crate::audit::export::Attestations {
            checkpoints: &checkpoints,
            witnessed: &witnessed,
            signer: engine.signer().map(|k| k.verifier()).as_ref(),
        },
        &mut out,
    )?;
    Ok(Said::answered(String::from_utf8(out).map_err(|_| {
        LedgerError::Internal("an export that is not UTF-8")
    })?))
}

/// What `verify` says of a report: `torn` are torn tails found and left in
/// place (a crash's leftovers, or evidence: shown either way).
pub fn verify_said(
    report: &crate::audit::VerifyReport,
    torn: &[String],
    subject: &str,
    json: bool,
) -> Said {
    let mut out = String::new();
    if json {
        line!(
            out,
            "{}",
            json!({"ok": report.clean(), "records": report.records, "checkpoints": report.checkpoints,
                   "covered": report.covered, "first_mismatch": report.first(), "mismatches": report.mismatches,
                   "torn_tails": torn, "signed": report.signed, "since": report.since,
                   "published": report.published})
        );
    } else {
        line!(
            out,
            "{subject}: {} records, {} checkpoints, {} records attested by a checkpoint",
            report.records,
            report.checkpoints,
            report.covered
        );
        if let Some(s) = &report.signed {
            line!(
                out,
                "signed by {}: {} signed checkpoints attest {} records",
                s.key,
                s.signed_checkpoints,
                s.attested
            );
            if s.other_keys > 0 {
                line!(
                    out,
                    "  {} checkpoints carry notes of other keys (one this key replaced?): they attest nothing to it",
                    s.other_keys
                );
            }
            if let Some(w) = &s.witnessed {
                line!(
                    out,
                    "witnessed ({} of {} witnesses per checkpoint): {} records",
                    w.required,
                    w.witnesses.len(),
                    w.witnessed
                );
                for l in &w.logs {
                    line!(out, "  {} up to {} by {}", l.log, l.size, l.by.join(", "));
                }
                if w.unwitnessed > 0 {
                    line!(
                        out,
                        "  {} records past the newest cosigned checkpoints rest on the ledger's key alone (--all-witnessed refuses them; --since with a witness's own latest cosigned note proves the log extends it)",
                        w.unwitnessed
                    );
                }
            }
        }
        if let Some(n) = report.published {
            line!(
                out,
                "published topic: {n} events held against the ledger's records"
            );
        }
        if let Some(s) = report.since.as_ref().filter(|s| s.fault.is_none()) {
            line!(
                out,
                "{}: the log at {} extends the checkpoint at {} (consistency proof of {} hashes checked)",
                s.origin,
                s.new_size,
                s.old_size,
                s.proof.len()
            );
        }
        for t in torn {
            line!(out, "{t}");
        }
        match report.first() {
            None if report.signed.is_some() => line!(
                out,
                "clean: every digest and chain head matches, and every record lies under a signed checkpoint whose Merkle root matches"
            ),
            None => line!(out, "clean: every digest and chain head matches"),
            Some(m) => {
                line!(out, "MISMATCH at {m}");
                for other in report.mismatches.iter().skip(1) {
                    line!(out, "  also: {other}");
                }
            }
        }
    }
    Said {
        out,
        failure: None,
        unclean: !report.clean(),
    }
}

/// `verify` of a whole log (read only; safe beside a writer, which it
/// does not block).
pub fn verify(
    log: &dyn crate::log::Log,
    json: bool,
    progress: &(dyn Fn(u64) + Sync),
    trust: Option<&crate::audit::signed::Trust>,
    since: Option<&str>,
    published: bool,
) -> Result<Said, LedgerError> {
    let (mut report, for_key) = match trust {
        // One pass: the leaf digests the checkpoints are checked with
        // build the trees the signed notes are checked against, and the
        // checkpoints it reads carry the notes.
        Some(_) => {
            let (r, k) = crate::audit::log_verify::verify_log_for_key(log, progress)?;
            (r, Some(k))
        }
        None => (crate::audit::verify::verify_log(log, progress)?, None),
    };
    if let (Some(trust), Some(k)) = (trust, for_key) {
        let (summary, mismatches) =
            crate::audit::signed::verify_signed_given(log, trust, Some(&k.roots), &k.noted)?;
        report.mismatches.extend(mismatches);
        report.signed = Some(summary);
        if let Some(old) = since {
            let s = crate::audit::signed::verify_since(log, &trust.key, old)?;
            if let Some(why) = &s.fault {
                report.mismatches.push(crate::audit::Mismatch {
                    topic: Topic::Checkpoints.name().to_owned(),
                    partition: 0,
                    offset: 0,
                    what: format!("the log of {} since the old checkpoint", s.origin),
                    expected: format!("a log extending the one of {} records", s.old_size),
                    found: why.clone(),
                });
            }
            report.since = Some(s);
        }
    }
    if published {
        let check = crate::audit::published_check::check_published(log)?;
        report.mismatches.extend(check.mismatches);
        report.published = Some(check.events);
    }
    Ok(verify_said(
        &report,
        &log.torn_tails(),
        &log.describe(),
        json,
    ))
}
