//! Synthetic ledgers for benchmarks and load tests: small two-run chains
//! (a developer run whose event opens a reviewer that reads and closes),
//! written straight to a log in large batches.

use crate::codec;
use crate::error::LedgerError;
use crate::log::Log;
use crate::model::Topic;
use crate::model::*;

fn art(name: &str, run: &str) -> ArtifactRef {
    ArtifactRef {
        name: name.into(),
        sha256: [0xab; 32],
        size: 120,
        source_run: run.into(),
        labels: vec!["area:acme/platform".into()],
    }
}

fn version(agent: &str, listens: &[&str], emits: &[&str]) -> AgentVersion {
    AgentVersion {
        agent: agent.into(),
        version: 1,
        scope: "acme/platform".into(),
        listens: listens.iter().map(|s| s.to_string()).collect(),
        emits: emits
            .iter()
            .map(|e| EmitDecl {
                event: e.to_string(),
                context: "change".into(),
                artifacts: vec!["patch".into()],
            })
            .collect(),
        access: vec!["acme".into()],
        tool_budget: None,
        loop_check: LoopCheck::default(),
    }
}

/// The seven records of one small chain: root opens, closes, is dispatched;
/// its listener opens, reads, closes, is dispatched.
pub fn chain_records(i: usize) -> Vec<(String, u32, LedgerEvent)> {
    let root = format!("root-{i}");
    let ev_id = ids::agent_event_id(&root, "code.ready");
    let listener = ids::listener_run_id(&ev_id, "reviewer");
    let patch = art("patch", &root);
    let labels = vec!["area:acme/platform".to_string()];
    vec![
        (
            root.clone(),
            0,
            LedgerEvent::RunOpened(RunOpened {
                run: root.clone(),
                agent: "developer".into(),
                version: 1,
                scope: "acme/platform".into(),
                root: Some(root.clone()),
                hop: Some(0),
                trigger: None,
                legacy_trigger: None,
                labels: labels.clone(),
            }),
        ),
        (
            root.clone(),
            1,
            LedgerEvent::RunClosed(RunClosed {
                run: root.clone(),
                status: RunStatus::Succeeded,
                summary: "done".into(),
                artifacts: vec![patch.clone()],
                labels: labels.clone(),
                published: vec![AgentEventOut {
                    event_id: ev_id.clone(),
                    event: "code.ready".into(),
                    context: "change".into(),
                    artifacts: vec![patch.clone()],
                }],
                withheld: None,
            }),
        ),
        (
            listener.clone(),
            0,
            LedgerEvent::RunOpened(RunOpened {
                run: listener.clone(),
                agent: "reviewer".into(),
                version: 1,
                scope: "acme/platform".into(),
                root: Some(root.clone()),
                hop: Some(1),
                trigger: Some(Trigger {
                    event_id: ev_id.clone(),
                    event: "code.ready".into(),
                    context: "change".into(),
                    source_run: root.clone(),
                    artifacts: vec![patch.clone()],
                }),
                legacy_trigger: None,
                labels: labels.clone(),
            }),
        ),
        (
            root.clone(),
            2,
            LedgerEvent::RunDispatched(RunDispatched {
                run: root.clone(),
                closed_partition: 0,
                closed_offset: 0,
                opened: vec![listener.clone()],
            }),
        ),
        (
            listener.clone(),
            1,
            LedgerEvent::ArtifactRead(ArtifactRead {
                run: listener.clone(),
                artifact: patch.clone(),
                labels_after: labels.clone(),
            }),
        ),
        (
            listener.clone(),
            2,
            LedgerEvent::RunClosed(RunClosed {
                run: listener.clone(),
                status: RunStatus::Succeeded,
                summary: "reviewed".into(),
                artifacts: vec![],
                labels: labels.clone(),
                published: vec![],
                withheld: None,
            }),
        ),
        (
            listener.clone(),
            3,
            LedgerEvent::RunDispatched(RunDispatched {
                run: listener.clone(),
                closed_partition: 0,
                closed_offset: 0,
                opened: vec![],
            }),
        ),
    ]
}

/// Write two agent versions and `events` ledger records of small chains.
pub fn write_synthetic_log(log: &dyn Log, events: usize) -> Result<(), LedgerError> {
    let reg: Vec<_> = [
        version("developer", &["review.done"], &["code.ready"]),
        version("reviewer", &["code.ready"], &["review.done"]),
    ]
    .into_iter()
    .map(|v| {
        let id = ids::agent_version_event_id(&v.agent, 1);
        Ok((
            v.agent.clone().into_bytes(),
            codec::encode(&LedgerEvent::AgentPublished(v), &id, "x", 0, "bench", 0)?,
        ))
    })
    .collect::<Result<_, LedgerError>>()?;
    log.append(Topic::Registry, &reg)?;
    let mut batch = Vec::new();
    let mut written = 0;
    let mut i = 0;
    while written < events {
        for (run, step, ev) in chain_records(i) {
            if written == events {
                break;
            }
            let root = format!("root-{i}");
            let bytes = codec::encode(
                &ev,
                &ids::step_event_id(&run, step),
                &root,
                1_700_000_000_000,
                "bench",
                step,
            )?;
            batch.push((root.into_bytes(), bytes));
            written += 1;
        }
        i += 1;
        if batch.len() >= 20_000 {
            log.append(Topic::Ledger, &batch)?;
            batch.clear();
        }
    }
    log.append(Topic::Ledger, &batch)?;
    Ok(())
}
