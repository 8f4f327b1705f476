//! Opening runs, reading artifacts, closing runs.

use super::Engine;
use crate::codes::{Code, Refusal};
use crate::error::{LedgerError, Result};
use crate::model::*;
use crate::rules::decide;
use crate::views::RunState;

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

pub use crate::rules::decide::CloseRun;

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

    /// Keep a refused request on the trail of `run` when it is open (a
    /// closed run's trail has ended): who asked (the principal the engine
    /// acts as), for what, and why not.
    pub fn record_forbidden(&mut self, run: &str, op: &str, message: &str) -> Result<bool> {
        let Some(state) = self.views.run(run)? else {
            return Ok(false);
        };
        if !state.is_open() {
            return Ok(false);
        }
        let record = decide::Decided::step(
            &state,
            state.next_step,
            LedgerEvent::Forbidden(Forbidden {
                run: run.to_string(),
                op: op.to_string(),
                message: message.to_string(),
            }),
        );
        self.commit(vec![record])?;
        Ok(true)
    }

    /// Keep a refusal of a principal that writes nothing (the one the
    /// engine acts as) on the trail of the run `run` finds, at most once a
    /// minute for each such principal: the others are counted, and the
    /// next one kept says how many. Whether it was kept.
    pub fn record_forbidden_limited(
        &mut self,
        run: impl FnOnce(&mut Self) -> Result<Option<String>>,
        op: &str,
        message: &str,
    ) -> Result<bool> {
        let principal = self.principal.clone();
        let Some(unrecorded) = self.refusals.admit(&principal, self.now_ms()) else {
            return Ok(false);
        };
        let kept = match run(self) {
            Ok(Some(r)) => self.record_forbidden(
                &r,
                op,
                &super::refusals::with_unrecorded(message, unrecorded),
            ),
            Ok(None) => Ok(false),
            Err(e) => Err(e),
        };
        self.refusals.settle(&principal, matches!(kept, Ok(true)));
        kept
    }

    /// Refusals of principals that write nothing left off their trails
    /// since the engine opened, by principal.
    pub fn refusals_unrecorded(&self) -> Vec<(String, u64)> {
        self.refusals
            .unrecorded()
            .map(|(p, n)| (p.to_string(), n))
            .collect()
    }

    /// Open a root run (a user started it), or with `legacy_trigger` a run an
    /// older worker opened from an event without recording its chain position.
    pub fn open_run(
        &mut self,
        run: &str,
        agent: &str,
        legacy_trigger: Option<&str>,
    ) -> Result<OpenAnswer> {
        let record = decide::decide_open_run(
            &self.views,
            &decide::OpenRun {
                run: run.to_string(),
                agent: agent.to_string(),
                legacy_trigger: legacy_trigger.map(str::to_string),
            },
        )?;
        let LedgerEvent::RunOpened(opened) = &record.event else {
            return Err(LedgerError::Internal(
                "open_run decided another kind of event",
            ));
        };
        let answer = OpenAnswer {
            run: run.to_string(),
            root: opened.root.clone(),
            hop: opened.hop,
            version: opened.version,
        };
        self.commit(vec![record])?;
        Ok(answer)
    }

    /// Read an artifact by name through the run's trigger contract (R8).
    /// Granted or refused, the read is a trail step and a tool call.
    pub fn read_artifact(&mut self, run_id: &str, name: &str) -> Result<ReadAnswer> {
        let mut bytes = None;
        let store = &self.store;
        let mut content = |art: &ArtifactRef| {
            bytes = Some(store.get(&art.content_ref())?);
            Ok(())
        };
        let decision = decide::decide_read(&self.views, run_id, name, &mut content)?;
        match decision {
            decide::ReadDecision::Granted { artifact, record } => {
                self.commit(vec![record])?;
                Ok(ReadAnswer {
                    content: bytes.unwrap_or_default(),
                    artifact,
                })
            }
            decide::ReadDecision::Refused { refusal, record } => {
                self.commit(record.into_iter().collect())?;
                Err(refusal.into())
            }
        }
    }

    /// Close a run: store its artifacts, decide what it publishes (R2, R5, R6).
    pub fn close_run(&mut self, req: CloseRun) -> Result<CloseAnswer> {
        let record = decide::decide_close(&self.views, &req)?;
        // The bytes go to the content store under the refs the record
        // names, before the record.
        for content in req.artifacts.values() {
            self.store.put(content)?;
        }
        let LedgerEvent::RunClosed(closed) = &record.event else {
            return Err(LedgerError::Internal(
                "close_run decided another kind of event",
            ));
        };
        let answer = CloseAnswer {
            run: req.run.clone(),
            withheld: closed.withheld.clone(),
            artifacts: closed.artifacts.clone(),
            labels: closed.labels.clone(),
        };
        self.commit(vec![record])?;
        Ok(answer)
    }
}
