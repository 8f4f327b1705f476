//! The ledger's state folded in memory from decided records: what the
//! given/when/then tests decide over, with no log, sled or files.

use agentledger::context::TaskState;
use agentledger::model::*;
use agentledger::rules::decide::{Decided, LedgerRead, StateError};
use std::collections::{BTreeMap, HashMap};

#[derive(Default)]
pub struct MemLedger {
    runs: HashMap<String, Run>,
    versions: BTreeMap<(String, u32), AgentVersion>,
    current: HashMap<String, u32>,
    tasks: HashMap<String, TaskState>,
}

impl MemLedger {
    /// The state after `records`, in order.
    pub fn given(records: impl IntoIterator<Item = Decided>) -> Self {
        let mut state = MemLedger::default();
        for r in records {
            state.evolve(&r);
        }
        state
    }

    /// Fold one decided record in, as the projector folds it into views.
    pub fn evolve(&mut self, d: &Decided) {
        match &d.event {
            LedgerEvent::AgentPublished(v) => {
                self.versions
                    .insert((v.agent.clone(), v.version), v.clone());
                let current = self.current.entry(v.agent.clone()).or_insert(0);
                *current = (*current).max(v.version);
            }
            LedgerEvent::RunOpened(e) => {
                self.runs
                    .entry(e.run.clone())
                    .or_insert_with(|| Run::opened(e, d.step));
            }
            ev => {
                if let Some(run) = ev.trail_run().and_then(|r| self.runs.get_mut(r)) {
                    run.evolve(d.step, ev);
                }
                if let LedgerEvent::Context(c) = ev {
                    let task = c.event.task().to_string();
                    let before = self.tasks.remove(&task);
                    if let Some(after) = agentledger::context::evolve(before, &c.event) {
                        self.tasks.insert(task, after);
                    }
                }
            }
        }
    }
}

impl LedgerRead for MemLedger {
    fn run(&self, run: &str) -> Result<Option<Run>, StateError> {
        Ok(self.runs.get(run).cloned())
    }
    fn version(&self, agent: &str, version: u32) -> Result<Option<AgentVersion>, StateError> {
        Ok(self.versions.get(&(agent.to_string(), version)).cloned())
    }
    fn current_version(&self, agent: &str) -> Result<Option<AgentVersion>, StateError> {
        Ok(self
            .current
            .get(agent)
            .and_then(|v| self.versions.get(&(agent.to_string(), *v)))
            .cloned())
    }
    fn listeners(&self, event: &str) -> Result<Vec<String>, StateError> {
        let mut out: Vec<String> = self
            .current
            .iter()
            .filter_map(|(a, v)| self.versions.get(&(a.clone(), *v)))
            .filter(|v| v.listens.iter().any(|e| e == event))
            .map(|v| v.agent.clone())
            .collect();
        out.sort();
        Ok(out)
    }
    fn task(&self, task: &str) -> Result<Option<TaskState>, StateError> {
        Ok(self.tasks.get(task).cloned())
    }
}
