//! Opening runs, reading artifacts, closing runs.

use super::{Decided, Engine};
use crate::error::{Code, LedgerError, Refusal, Result};
use crate::log::Topic;
use crate::model::*;
use crate::rules::{artifacts, chain, labels};
use crate::views::RunState;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAnswer {
    pub run: String,
    pub root: Option<String>,
    pub hop: Option<u32>,
    pub version: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadAnswer {
    /// The bytes, exactly as published (text or not).
    pub content: Vec<u8>,
    pub artifact: ArtifactRef,
}

/// A `close_run` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseRun {
    pub run: String,
    pub status: RunStatus,
    pub summary: String,
    /// Artifact name → its bytes.
    pub artifacts: BTreeMap<String, Vec<u8>>,
    pub labels: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseAnswer {
    pub run: String,
    pub withheld: Option<Withheld>,
    pub artifacts: Vec<ArtifactRef>,
    /// The run's labels at close, which every artifact carries (R9).
    pub labels: Vec<String>,
}

impl Engine {
    pub(crate) fn existing_run(&self, run: &str) -> Result<RunState> {
        self.views.run(run)?.ok_or_else(|| {
            Refusal::new(Code::UnknownRun, format!("no run {run:?} in the ledger")).into()
        })
    }

    /// Open a root run (a user started it), or with `legacy_trigger` a run an
    /// older worker opened from an event without recording its chain position.
    pub fn open_run(
        &mut self,
        run: &str,
        agent: &str,
        legacy_trigger: Option<&str>,
    ) -> Result<OpenAnswer> {
        if !ids::valid_name(run) {
            return Err(Refusal::new(
                Code::InvalidName,
                format!("run id {run:?} is not a valid name"),
            )
            .into());
        }
        if self.views.run(run)?.is_some() {
            return Err(Refusal::new(
                Code::RunExists,
                format!("run {run:?} is already in the ledger"),
            )
            .into());
        }
        let version = self.views.current_version(agent)?.ok_or_else(|| {
            LedgerError::from(Refusal::new(
                Code::UnknownAgent,
                format!("no agent {agent:?} has been published"),
            ))
        })?;
        let (root, hop) = match legacy_trigger {
            Some(_) => (None, None),
            None => {
                let (r, h) = chain::root_position(run);
                (Some(r), Some(h))
            }
        };
        let key = ids::chain_key(root.as_deref(), run).to_string();
        self.commit(vec![Decided {
            topic: Topic::Ledger,
            key,
            event_id: ids::step_event_id(run, 0),
            step: 0,
            event: LedgerEvent::RunOpened(RunOpened {
                run: run.to_string(),
                agent: agent.to_string(),
                version: version.version,
                scope: version.scope.clone(),
                root: root.clone(),
                hop,
                trigger: None,
                legacy_trigger: legacy_trigger.map(str::to_string),
                labels: labels::opening_labels(&version.scope),
            }),
        }])?;
        Ok(OpenAnswer {
            run: run.to_string(),
            root,
            hop,
            version: version.version,
        })
    }

    /// Read an artifact by name through the run's trigger contract (R8).
    /// Granted or refused, the read is a trail step and a tool call.
    pub fn read_artifact(&mut self, run_id: &str, name: &str) -> Result<ReadAnswer> {
        let run = self.existing_run(run_id)?;
        let budget = self
            .views
            .version(&run.agent, run.version)?
            .and_then(|v| v.tool_budget);
        let decided = artifacts::authorize_read(&run, name, budget).and_then(|art| {
            match self.store.get(&art.content_ref()) {
                Ok(bytes) => Ok((art, bytes)),
                Err(e) => Err(Refusal::new(
                    match e {
                        crate::content_store::StoreError::DigestMismatch { .. } => {
                            Code::DigestMismatch
                        }
                        _ => Code::ContentUnavailable,
                    },
                    format!("artifact {name:?}: {e}"),
                )),
            }
        });
        let step = run.next_step;
        match decided {
            Ok((art, bytes)) => {
                let labels_after = labels::after_read(&run.labels, &art);
                self.commit(vec![Decided::step(
                    &run,
                    step,
                    LedgerEvent::ArtifactRead(ArtifactRead {
                        run: run_id.to_string(),
                        artifact: art.clone(),
                        labels_after,
                    }),
                )])?;
                Ok(ReadAnswer {
                    content: bytes,
                    artifact: art,
                })
            }
            Err(refusal) => {
                if run.is_open() {
                    self.commit(vec![Decided::step(
                        &run,
                        step,
                        LedgerEvent::ReadRefused(ReadRefused {
                            run: run_id.to_string(),
                            requested: name.to_string(),
                            code: refusal.code.to_string(),
                            message: refusal.message.clone(),
                        }),
                    )])?;
                }
                Err(refusal.into())
            }
        }
    }

    /// Close a run: store its artifacts, decide what it publishes (R2, R5, R6).
    pub fn close_run(&mut self, req: CloseRun) -> Result<CloseAnswer> {
        let run = self.existing_run(&req.run)?;
        if !run.is_open() {
            return Err(Refusal::new(
                Code::RunClosed,
                format!("run {:?} is already closed", req.run),
            )
            .into());
        }
        crate::limits::check_count(
            "artifacts in one close_run",
            req.artifacts.len(),
            crate::limits::MAX_ARTIFACTS_PER_CLOSE,
        )?;
        for name in req.artifacts.keys() {
            if !ids::valid_name(name) {
                return Err(Refusal::new(
                    Code::InvalidName,
                    format!("artifact name {name:?} is not a valid name"),
                )
                .into());
            }
        }
        crate::limits::check_count(
            "labels in one close_run",
            req.labels.len(),
            crate::limits::MAX_LABELS_PER_RUN,
        )
        .map_err(|r| Refusal::new(Code::TooManyLabels, r.message))?;
        for l in &req.labels {
            labels::check_label(l)?;
        }
        let opened_on = self
            .views
            .version(&run.agent, run.version)?
            .ok_or_else(|| {
                crate::views::ViewError::Inconsistent(format!(
                    "version {} of agent {} is missing from the views",
                    run.version, run.agent
                ))
            })?;
        let run_labels = labels::at_close(&run.labels, &req.labels);
        labels::check_label_count(&run_labels, "this close")?;
        let mut arts = Vec::with_capacity(req.artifacts.len());
        for (name, content) in &req.artifacts {
            let blob = self.store.put(content)?;
            arts.push(ArtifactRef {
                name: name.clone(),
                sha256: blob.sha256,
                size: blob.size,
                source_run: run.run.clone(),
                labels: run_labels.clone(),
            });
        }
        let (published, withheld) = chain::close_outcome(&run, &opened_on, req.status, &arts);
        let step = run.next_step;
        self.commit(vec![Decided::step(
            &run,
            step,
            LedgerEvent::RunClosed(RunClosed {
                run: run.run.clone(),
                status: req.status,
                summary: req.summary,
                artifacts: arts.clone(),
                labels: run_labels.clone(),
                published,
                withheld: withheld.clone(),
            }),
        )])?;
        Ok(CloseAnswer {
            run: run.run,
            withheld,
            artifacts: arts,
            labels: run_labels,
        })
    }
}
