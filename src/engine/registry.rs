//! Publishing agent versions (registry topic) and the publish-time loop
//! warning (R10).

use super::{Decided, Engine};
use crate::codes::Code;
use crate::error::{Refusal, Result};
use crate::log::Topic;
use crate::loops::{self, AgentIndex, AgentNode};
use crate::model::scope::valid_scope;
use crate::model::*;

/// A `publish_agent` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishAgent {
    pub agent: String,
    pub scope: String,
    pub listens: Vec<String>,
    pub emits: Vec<EmitDecl>,
    pub access: Option<Vec<String>>,
    pub tool_budget: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishAnswer {
    pub agent: String,
    pub version: u32,
    pub loop_check: LoopCheck,
}

fn node_of(v: &AgentVersion) -> AgentNode {
    AgentNode {
        name: v.agent.clone(),
        scope: v.scope.clone(),
        listens: v.listens.clone(),
        emits: v.emits.iter().map(|e| e.event.clone()).collect(),
    }
}

fn check_names(what: &str, names: &[String]) -> Result<()> {
    for n in names {
        if !ids::valid_name(n) {
            return Err(Refusal::new(
                Code::InvalidName,
                format!("{what} {n:?} is not a valid name (letters, digits, - _ . :; 1 to 128)"),
            )
            .into());
        }
    }
    Ok(())
}

impl Engine {
    /// The loop search's index of current versions, up to date with every
    /// version the views hold: built once, then brought up to date from the
    /// registry records projected since (another writer's publishes too).
    fn agent_index(&mut self) -> Result<&mut AgentIndex> {
        let projected = self.views.offset(Topic::Registry, 0)?;
        match self.agent_index.take() {
            Some((mut index, seen)) if seen <= projected => {
                let mut at = seen;
                while at < projected {
                    let recs = self.log.read(Topic::Registry, 0, at, 1024)?;
                    let Some(last) = recs.last().map(|r| r.offset) else {
                        break;
                    };
                    for r in recs.iter().filter(|r| r.offset < projected) {
                        let rec = crate::codec::decode_for_projection(&r.payload)?;
                        if let LedgerEvent::AgentPublished(v) = rec.event {
                            // A late older version never replaces a newer one.
                            if let Some(current) = self.views.current_version(&v.agent)? {
                                index.upsert(node_of(&current));
                            }
                        }
                    }
                    at = last + 1;
                }
                self.agent_index = Some((index, projected));
            }
            _ => {
                let mut index = AgentIndex::default();
                for a in self.views.agents()? {
                    if let Some(v) = self.views.version(&a.agent, a.current)? {
                        index.upsert(node_of(&v));
                    }
                }
                self.agent_index = Some((index, projected));
            }
        }
        Ok(&mut self
            .agent_index
            .get_or_insert_with(|| (AgentIndex::default(), 0))
            .0)
    }

    /// Publish a new version of an agent. Loops it closes are warned about,
    /// never refused (R10).
    pub fn publish_agent(&mut self, req: PublishAgent) -> Result<PublishAnswer> {
        // Publishing is rare and both the version number and the loop
        // search depend on every version published so far, another
        // writer's included: decide on the whole registry.
        self.catch_up(&|_| {})?;
        check_names("agent", std::slice::from_ref(&req.agent))?;
        use crate::limits::{check_count, MAX_ACCESS_SCOPES, MAX_ARTIFACTS_PER_EMIT};
        check_count(
            "events one version listens to",
            req.listens.len(),
            crate::limits::MAX_LISTENS_PER_VERSION,
        )?;
        check_count(
            "events one version emits",
            req.emits.len(),
            crate::limits::MAX_EMITS_PER_VERSION,
        )?;
        for e in &req.emits {
            check_count(
                &format!("artifacts event {:?} exposes", e.event),
                e.artifacts.len(),
                MAX_ARTIFACTS_PER_EMIT,
            )?;
        }
        if let Some(access) = &req.access {
            check_count("scopes in access", access.len(), MAX_ACCESS_SCOPES)?;
        }
        if !valid_scope(&req.scope) {
            return Err(Refusal::new(
                Code::InvalidScope,
                format!("scope {:?} is not a path like company/area", req.scope),
            )
            .into());
        }
        check_names("event", &req.listens)?;
        for e in &req.emits {
            check_names("event", std::slice::from_ref(&e.event))?;
            check_names("context", std::slice::from_ref(&e.context))?;
            check_names("artifact", &e.artifacts)?;
        }
        let access = req
            .access
            .clone()
            .unwrap_or_else(|| vec![req.scope.clone()]);
        if let Some(bad) = access.iter().find(|s| !valid_scope(s)) {
            return Err(Refusal::new(
                Code::InvalidScope,
                format!("access scope {bad:?} is not a path like company/area"),
            )
            .into());
        }
        let version = self
            .views
            .agent(&req.agent)?
            .map(|a| a.current + 1)
            .unwrap_or(1);
        let candidate = AgentVersion {
            agent: req.agent.clone(),
            version,
            scope: req.scope.clone(),
            listens: req.listens.clone(),
            emits: req.emits.clone(),
            access: access.clone(),
            tool_budget: req.tool_budget,
            loop_check: LoopCheck::default(),
        };
        let bounds = self.opts.loop_bounds.clone();
        let loop_check =
            loops::check_publish(self.agent_index()?, &node_of(&candidate), &access, &bounds);
        let version_rec = AgentVersion {
            loop_check: loop_check.clone(),
            ..candidate
        };
        let before = self.views.offset(Topic::Registry, 0)?;
        self.commit(vec![Decided {
            topic: Topic::Registry,
            key: req.agent.clone(),
            event_id: ids::agent_version_event_id(&req.agent, version),
            step: 0,
            event: LedgerEvent::AgentPublished(version_rec.clone()),
        }])?;
        // Our own record alone landed: the index takes it without reading
        // it back from the log.
        if let Some((index, seen)) = &mut self.agent_index {
            if *seen == before && self.views.offset(Topic::Registry, 0)? == before + 1 {
                index.upsert(node_of(&version_rec));
                *seen = before + 1;
            }
        }
        Ok(PublishAnswer {
            agent: req.agent,
            version,
            loop_check,
        })
    }
}
