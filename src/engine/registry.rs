//! Publishing agent versions (registry topic) and the publish-time loop
//! warning (R10).

use super::Engine;
use crate::error::Result;
use crate::loops::AgentIndex;
use crate::model::Topic;
use crate::model::*;

pub use crate::rules::decide::PublishAgent;
use crate::rules::decide::{self, node_of};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishAnswer {
    pub agent: String,
    pub version: u32,
    pub loop_check: LoopCheck,
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
        // writer's included: decide on the whole registry. Inside a
        // pipelined group, versions published before this one in the group
        // must be in the log before the index reads it.
        self.settle_in_flight();
        self.catch_up(&|_| {})?;
        self.agent_index()?;
        let index = match &self.agent_index {
            Some((index, _)) => index,
            None => return Err(crate::error::LedgerError::Internal("no agent index")),
        };
        let record = decide::decide_publish(&self.views, index, &self.opts.loop_bounds, &req)?;
        let LedgerEvent::AgentPublished(version) = &record.event else {
            return Err(crate::error::LedgerError::Internal(
                "publish_agent decided another kind of event",
            ));
        };
        let version = version.clone();
        let before = self.views.offset(Topic::Registry, 0)?;
        self.commit(vec![record])?;
        // Our own record alone landed: the index takes it without reading
        // it back from the log.
        if let Some((index, seen)) = &mut self.agent_index {
            if *seen == before && self.views.offset(Topic::Registry, 0)? == before + 1 {
                index.upsert(node_of(&version));
                *seen = before + 1;
            }
        }
        Ok(PublishAnswer {
            agent: version.agent,
            version: version.version,
            loop_check: version.loop_check,
        })
    }
}
