//! The dispatcher: the only place agent events go out (R2–R9). It walks the
//! finished runs of each ledger partition forward from a durable cursor
//! (R7): every closed run is visited in log order, however many closed since
//! the last sweep, and the cursor moves past a run only in the record that
//! finishes its dispatch. After a crash it resumes at the first run whose
//! dispatch record is missing; listener run ids are deterministic, so a run
//! opened before the crash is found and not opened again (R3).
//!
//! Each published event also goes to the `published` topic as a CloudEvent
//! ([`crate::engine::published`]), before
//! the dispatch record: a downstream consumer may see an event twice after a
//! crash (dedupe by `event_id`) but never miss one, and never sees a
//! withheld one.

use super::{Decided, Engine};
use crate::engine::published::{CloudEvent, Publisher};
use crate::error::Result;
use crate::model::scope;
use crate::model::Topic;
use crate::model::*;
use crate::rules::decide::{self, ListenerOutcome};

/// Records of the `published` topic (key, CloudEvent JSON) and their headers.
type PublishedRecords = (Vec<(Vec<u8>, Vec<u8>)>, Vec<crate::log::Headers>);

/// Most runs per partition whose events `publish_ahead` publishes at once.
const PUBLISH_AHEAD: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenedListener {
    pub run: String,
    pub agent: String,
    pub root: String,
    pub hop: u32,
    pub event: String,
    pub event_id: String,
    pub source_run: String,
    /// What the listener is started with: the event and its artifact
    /// contract (names, refs, digests, sizes, source run, labels; never
    /// bytes), so that a platform can start the agent from the answer.
    pub input: Trigger,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedListener {
    pub agent: String,
    pub event: String,
    pub source_run: String,
    pub reason: RefusalReason,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WithheldRun {
    pub run: String,
    pub root: Option<String>,
    pub hop: Option<u32>,
    pub reason: String,
    pub events: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DispatchAnswer {
    pub opened: Vec<OpenedListener>,
    pub refused: Vec<RefusedListener>,
    pub withheld: Vec<WithheldRun>,
    /// How many finished runs this sweep walked past.
    pub dispatched_runs: u64,
}

/// Finished runs read from the queue at once while dispatching.
const SWEEP_BATCH: usize = 256;

/// Whose finished runs a sweep dispatches.
#[derive(Clone, Copy)]
struct Sweep<'a> {
    /// The ledger partitions this instance owns.
    owned: &'a dyn Fn(u32) -> bool,
    /// The scopes of the platform asking; `None`: every run's.
    within: Option<&'a [String]>,
}

impl Sweep<'_> {
    /// Whether an agent in `scope` is the caller's (every agent is, when
    /// the sweep is not narrowed).
    fn covers(&self, scope: Option<&str>) -> bool {
        self.within.is_none_or(|granted| {
            scope.is_some_and(|s| granted.iter().any(|g| scope::scope_within(s, g)))
        })
    }

    /// A finished run's events are the business of the platform its
    /// agent's scope belongs to: another's are left for their owner.
    fn mine(&self, run: &crate::model::Run) -> bool {
        self.covers(Some(&run.scope))
    }
}

impl Engine {
    /// Run the dispatcher until no finished run is left undispatched.
    pub fn dispatch(&mut self) -> Result<DispatchAnswer> {
        self.dispatch_partitions(&|_| true)
    }

    /// Dispatch only the ledger partitions this instance owns: with several
    /// instances, each chain (one partition) is dispatched by exactly one.
    pub fn dispatch_partitions(&mut self, owned: &dyn Fn(u32) -> bool) -> Result<DispatchAnswer> {
        self.sweep(Sweep {
            owned,
            within: None,
        })
    }

    /// Dispatch the finished runs of agents within `within` (a platform's
    /// scopes; every run when `None`), leaving the others' for their
    /// owners: a platform is answered only about listeners in its scopes
    /// (the others are opened all the same, each event goes out once).
    pub fn dispatch_within(&mut self, within: Option<&[String]>) -> Result<DispatchAnswer> {
        // Of the partitions projected here: the others' finished runs are
        // their owners' to dispatch.
        let scope = self.scope.clone();
        self.sweep(Sweep {
            owned: &|p| scope.as_ref().is_none_or(|s| s.contains(&p)),
            within,
        })
    }

    fn sweep(&mut self, sweep: Sweep<'_>) -> Result<DispatchAnswer> {
        // Events go out only for closes the log has acknowledged: inside a
        // pipelined group, settle the group so far first.
        self.settle_in_flight();
        let mut answer = DispatchAnswer::default();
        let published = self.publish_ahead(sweep)?;
        loop {
            let mut progressed = false;
            for p in (0..self.log.partitions(Topic::Ledger)).filter(|p| (sweep.owned)(*p)) {
                let mut after = None;
                loop {
                    let batch = self.views.finished_from(p, after, SWEEP_BATCH)?;
                    let Some((last, _)) = batch.last() else { break };
                    after = Some(*last);
                    for (offset, run_id) in batch {
                        if self.caught_up_at.is_none() {
                            // A dispatch just made durable could not be
                            // projected: the views must see it before the
                            // next decision.
                            self.catch_up(&|_| {})?;
                        }
                        // Dispatched meanwhile (an earlier run's listener
                        // steps may have moved the views on), or not ours.
                        let Some(run) = self.views.run(&run_id)? else {
                            continue;
                        };
                        if run.dispatched || !sweep.mine(&run) {
                            continue;
                        }
                        let ahead = published.contains(&run_id);
                        self.dispatch_one(p, offset, run, ahead, sweep, &mut answer)?;
                        answer.dispatched_runs += 1;
                        progressed = true;
                    }
                }
            }
            // Listeners opened above may themselves be closed by now only
            // through later operations, so one pass normally suffices; loop
            // anyway in case another writer closed runs meanwhile.
            if !progressed {
                break;
            }
        }
        Ok(answer)
    }

    /// Inside a commit group, publish the events of every run waiting to
    /// be dispatched at once, before any dispatch record: on Kafka one
    /// round trip for all of them instead of one per run in
    /// `dispatch_one`; on the embedded log, where a `published` record
    /// after a `ledger` one in a group starts a phase of its own (its
    /// premise may be that record), one phase for all the events instead
    /// of one per run. Returns the runs whose events are now on the
    /// `published` topic (durable with the group). A run missing from it
    /// is published by `dispatch_one` as usual (its events at least once,
    /// as after a crash).
    fn publish_ahead(&mut self, sweep: Sweep<'_>) -> Result<std::collections::HashSet<String>> {
        let mut done = std::collections::HashSet::new();
        if self.pipeline.is_none() && !self.grouping {
            return Ok(done);
        }
        let now = self.now_ms();
        let mut appending = Vec::new();
        for p in (0..self.log.partitions(Topic::Ledger)).filter(|p| (sweep.owned)(*p)) {
            let mut runs = Vec::new();
            let mut after = None;
            while runs.len() < PUBLISH_AHEAD {
                let batch = self.views.finished_from(p, after, SWEEP_BATCH)?;
                let Some((last, _)) = batch.last() else { break };
                after = Some(*last);
                for (_, run_id) in batch {
                    let run = self.existing_run(&run_id)?;
                    if !run.dispatched && sweep.mine(&run) && runs.len() < PUBLISH_AHEAD {
                        runs.push(run);
                    }
                }
            }
            for run in runs {
                let run_id = run.run.clone();
                let (recs, headers) = self.published_records(&run, now);
                if recs.is_empty() {
                    continue;
                }
                appending.push((
                    run_id,
                    self.log
                        .append_begin_with_headers(Topic::Published, &recs, &headers)?,
                ));
            }
        }
        for (run_id, a) in appending {
            match a.wait() {
                Ok(_) => {
                    done.insert(run_id);
                }
                Err(e) => {
                    tracing::warn!(run = %run_id, "publishing a run's events ahead of its dispatch (published again by the dispatch): {e}")
                }
            }
        }
        Ok(done)
    }

    /// A run's dispatchable events as records of the `published` topic,
    /// with their CloudEvents headers.
    fn published_records(&self, run: &crate::model::Run, now: u64) -> PublishedRecords {
        let (events, _) = crate::rules::chain::dispatchable(run);
        let key = ids::chain_key(run.root.as_deref(), &run.run);
        let by = Publisher {
            ledger: self.opts.ledger_name(),
            run: &run.run,
            agent: &run.agent,
            version: run.version,
            root: key,
            hop: run.hop.unwrap_or(0),
        };
        let mut recs = Vec::with_capacity(events.len());
        let mut headers = Vec::with_capacity(events.len());
        for ev in &events {
            let e = CloudEvent::of(&by, ev, now);
            headers.push(e.kafka_headers());
            recs.push((
                key.as_bytes().to_vec(),
                serde_json::to_vec(&e).unwrap_or_default(),
            ));
        }
        (recs, headers)
    }

    fn dispatch_one(
        &mut self,
        partition: u32,
        offset: u64,
        run: crate::views::RunState,
        published_ahead: bool,
        sweep: Sweep<'_>,
        answer: &mut DispatchAnswer,
    ) -> Result<()> {
        let run_id = run.run.clone();
        let mut pending = Vec::new();
        let mut next_step = run.next_step;
        let mut opened_ids = Vec::new();

        let (events, withheld) = crate::rules::chain::dispatchable(&run);
        if let Some(w) = withheld {
            answer.withheld.push(WithheldRun {
                run: run.run.clone(),
                root: run.root.clone(),
                hop: run.hop,
                reason: w.reason.code().to_string(),
                events: w.events,
            });
        }

        if !published_ahead {
            let (recs, headers) = self.published_records(&run, self.now_ms());
            if !recs.is_empty() {
                self.log
                    .append_with_headers(Topic::Published, &recs, &headers)?;
            }
        }
        let mut run = run;
        for ev in &events {
            for agent in self.views.listeners(&ev.event)? {
                // An event many agents listen to is written in bounded
                // steps. Listener ids are deterministic and refusals are
                // kept on the run, so a step written before a crash is
                // found again, not repeated (R3).
                if pending.len() >= crate::model::limits::DISPATCH_STEP {
                    self.commit(std::mem::take(&mut pending))?;
                    if self.caught_up_at.is_none() {
                        self.catch_up(&|_| {})?;
                    }
                    run = self.existing_run(&run_id)?;
                    next_step = run.next_step;
                }
                // What the answer tells of a listener (its run, its
                // trigger's refs and digests) only for the caller's agents;
                // the agent's view is read only when the sweep is narrowed.
                let shown = sweep.within.is_none()
                    || sweep.covers(self.views.agent(&agent)?.map(|a| a.scope).as_deref());
                match decide::decide_listener_record(&self.views, &run, ev, &agent, next_step)? {
                    ListenerOutcome::Opened(record) => {
                        let LedgerEvent::RunOpened(o) = &record.event else {
                            continue;
                        };
                        opened_ids.push(o.run.clone());
                        if !shown {
                            pending.push(record);
                            continue;
                        }
                        answer.opened.push(OpenedListener {
                            run: o.run.clone(),
                            agent: agent.clone(),
                            root: o.root.clone().unwrap_or_default(),
                            hop: o.hop.unwrap_or_default(),
                            event: ev.event.clone(),
                            event_id: ev.event_id.clone(),
                            source_run: run.run.clone(),
                            input: o.trigger.clone().unwrap_or_else(|| Trigger {
                                event_id: ev.event_id.clone(),
                                event: ev.event.clone(),
                                context: ev.context.clone(),
                                source_run: run.run.clone(),
                                artifacts: Vec::new(),
                            }),
                        });
                        pending.push(record);
                    }
                    ListenerOutcome::Refused(record, reason) => {
                        pending.push(record);
                        next_step += 1;
                        if !shown {
                            continue;
                        }
                        answer.refused.push(RefusedListener {
                            agent: agent.clone(),
                            event: ev.event.clone(),
                            source_run: run.run.clone(),
                            reason,
                        });
                    }
                    ListenerOutcome::Nothing => {}
                }
            }
        }
        pending.push(Decided::step(
            &run,
            next_step,
            LedgerEvent::RunDispatched(RunDispatched {
                run: run.run.clone(),
                closed_partition: partition,
                closed_offset: offset,
                opened: opened_ids,
            }),
        ));
        self.commit(pending)?;
        Ok(())
    }
}
