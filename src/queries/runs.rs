//! Questions about runs: the trail, the chain and its picture, the trace.

use super::{PictureFormat, Said};
use crate::codes::Code;
use crate::codes::Refusal;
use crate::engine::Engine;
use crate::error::LedgerError;
use crate::model::{LedgerEvent, ListenerRefused};
use crate::picture::ChainPicture;
use crate::protocol::WithheldOut;
use crate::queries::report;
use serde_json::json;
use std::fmt::Write as _;

pub(super) fn trail(
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

pub(super) fn chain(engine: &Engine, run: &str, json: bool) -> Result<Said, LedgerError> {
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

pub(super) fn trace(engine: &Engine, run: &str, whole_chain: bool) -> Result<Said, LedgerError> {
    let spans = spans(engine, run, whole_chain)?;
    let mut out = crate::trace::otlp::to_json(spans, engine.ledger_name());
    out.push('\n');
    Ok(Said::answered(out))
}

pub(super) fn picture(
    engine: &Engine,
    run: &str,
    format: PictureFormat,
) -> Result<Said, LedgerError> {
    let p = chain_picture(engine, run)?;
    Ok(Said::answered(match format {
        PictureFormat::Dot => crate::picture::dot::render(&p),
        PictureFormat::Svg => crate::picture::svg::render(&p, None),
    }))
}
