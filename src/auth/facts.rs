//! The edge of the policy: what the views say about the things a request
//! names, read before [`super::authorize`] decides. Reads only.

use super::Facts;
use crate::protocol::Request;
use crate::views::{ViewError, Views};

/// Gather the facts `authorize` needs about `request`.
pub fn gather(views: &Views, request: &Request) -> Result<Facts, ViewError> {
    let mut facts = Facts::default();
    let run_of = |run: &str, facts: &mut Facts| -> Result<(), ViewError> {
        if let Some(r) = views.run(run)? {
            facts.run_agent = Some(r.agent.clone());
            facts.agent_scope = Some(r.scope.clone());
            facts.run_opened_by = Some(r.opened_by.clone());
        }
        Ok(())
    };
    let master_of = |task: &str, facts: &mut Facts| -> Result<(), ViewError> {
        if let Some(t) = views.task(task)? {
            if let Some(master) = views.run(&t.master_run)? {
                facts.task_master = Some(master.opened_by.clone());
                facts.task_master_agent = Some(master.agent.clone());
            }
        }
        Ok(())
    };
    match request {
        Request::OpenRun(o) => facts.agent_scope = views.agent(&o.agent)?.map(|a| a.scope),
        Request::PublishAgent(p) => facts.agent_scope = views.agent(&p.agent)?.map(|a| a.scope),
        Request::CloseRun(c) => run_of(&c.run, &mut facts)?,
        Request::ReadArtifact(r) => run_of(&r.run, &mut facts)?,
        Request::OpenTask(o) => run_of(&o.run, &mut facts)?,
        Request::UpdateTask(u) => master_of(&u.task, &mut facts)?,
        Request::PutBlob(p) => master_of(&p.task, &mut facts)?,
        Request::SendContext(s) => master_of(&s.task, &mut facts)?,
        Request::Evaluate(e) => master_of(&e.task, &mut facts)?,
        Request::ForgetTask(f) => master_of(&f.task, &mut facts)?,
        Request::Dispatch(_)
        | Request::GetContext(_)
        | Request::GetBlob(_)
        | Request::ReturnContext(_)
        | Request::IssueToken(_)
        | Request::RevokeToken(_) => {}
    }
    Ok(facts)
}
