//! Which instance decides a request. On Kafka the serve instances share
//! the ledger partitions through the consumer group; a run's steps are
//! decided by the instance that owns its chain root's partition, so that
//! they are decided in order on views that saw every step before. A
//! request for a partition another live instance owns is not decided
//! here: it is answered `not_owner` with a [`Referral`] the HTTP face
//! follows (it forwards the request with the caller's own credential).
//! Registry operations (agents, tokens) and dispatch are decided anywhere.

use super::Engine;
use crate::error::Result;
use crate::model::{ids, Topic};
use crate::protocol::Request;
use std::collections::{BTreeMap, BTreeSet};

/// Another instance, as the group's roster names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Its id (writer name and tag).
    pub id: String,
    /// Where it answers (`serve --advertise`).
    pub url: String,
}

/// Who decides what, as this instance last learned it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// The ledger partitions this instance owns.
    pub owned: BTreeSet<u32>,
    /// The live owner of each partition this instance does not own, where
    /// one is known.
    pub owners: BTreeMap<u32, Owner>,
}

/// Where a request this instance does not decide belongs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referral {
    /// The ledger partition of the request's chain.
    pub partition: u32,
    pub owner: Owner,
}

/// Names the partition and its owner, as every refusal or forward
/// failure that follows a referral says it.
impl std::fmt::Display for Referral {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ledger partition {} of this chain is decided by instance {} at {}",
            self.partition, self.owner.id, self.owner.url
        )
    }
}

impl Engine {
    /// Say who decides which ledger partition (`None`: this instance
    /// decides everything, as the only one).
    pub fn place(&mut self, placement: Option<Placement>) {
        self.placement = placement;
    }

    /// Whether the requests decided next are referred to the owner of
    /// their partition when that is another instance (the caller's
    /// credential can be forwarded), or decided here regardless.
    pub fn refer(&mut self, on: bool) {
        self.referring = on;
    }

    /// Where `request` belongs when another instance decides it. A request
    /// whose run or task is not known here (even after catching up) is
    /// decided here, and refused as unknown.
    pub(crate) fn referral(&mut self, request: &Request) -> Result<Option<Referral>> {
        self.referral_for(whose(request))
    }

    /// Where a question about `whose` from a caller that may be referred
    /// (`refer`: see [`Engine::refer`]) belongs, if another instance
    /// decides its chain; referring is off again afterwards.
    pub fn referral_asked(&mut self, refer: bool, whose: Whose<'_>) -> Result<Option<Referral>> {
        if !refer {
            return Ok(None);
        }
        self.refer(true);
        let to = self.referral_for(whose);
        self.refer(false);
        to
    }

    /// Where questions or operations about `whose` belong when another
    /// instance decides its chain (while referring; see [`Engine::refer`]).
    pub fn referral_for(&mut self, whose: Whose<'_>) -> Result<Option<Referral>> {
        let Some(placement) = self.placement.as_ref().filter(|_| self.referring) else {
            return Ok(None);
        };
        if placement.owners.is_empty() || whose == Whose::Anyone {
            return Ok(None);
        }
        let mut partition = self.home_partition(whose, false)?;
        if partition.is_none() {
            // Perhaps not seen yet: look again on caught-up views, and
            // take a run still not known for a root run (a chain keyed
            // on itself, as every run a caller opens is): its owner
            // decided its opening, so knows it if any instance does.
            self.catch_up_now()?;
            partition = self.home_partition(whose, true)?;
        }
        let Some(placement) = self.placement.as_ref() else {
            return Ok(None);
        };
        Ok(partition
            .filter(|p| !placement.owned.contains(p))
            .and_then(|p| {
                placement.owners.get(&p).map(|owner| Referral {
                    partition: p,
                    owner: owner.clone(),
                })
            }))
    }

    /// The ledger partition of `whose` chain. `None` for what any
    /// instance decides, and for a task not known here; a run not known
    /// here is `None` too, or with `guess` taken for a root run.
    fn home_partition(&self, whose: Whose<'_>, guess: bool) -> Result<Option<u32>> {
        let partition = |key: &str| self.log.partition_of(Topic::Ledger, key.as_bytes());
        let of_run = |run: &str, guess: bool| -> Result<Option<u32>> {
            Ok(match self.views.run(run)? {
                Some(r) => Some(partition(ids::chain_key(r.root.as_deref(), &r.run))),
                None if guess => Some(partition(run)),
                None => None,
            })
        };
        let of_task = |task: &str| -> Result<Option<u32>> {
            match self.views.task(task)? {
                Some(t) => of_run(&t.master_run, false),
                None => Ok(None),
            }
        };
        match whose {
            Whose::Anyone => Ok(None),
            // A new root run keys its chain on itself.
            Whose::NewRun(run) => of_run(run, true),
            Whose::Run(run) => of_run(run, guess),
            Whose::Task(task) => of_task(task),
            Whose::TaskOrRun(task, run) => match of_task(task)? {
                Some(p) => Ok(Some(p)),
                None => of_run(run, guess),
            },
        }
    }
}

/// What decides where a request or question belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose<'a> {
    /// Decided by any instance (the registry, dispatch).
    Anyone,
    /// A run to be opened: a root, keyed on itself unless known already.
    NewRun(&'a str),
    /// A run's chain.
    Run(&'a str),
    /// A task's: its master run's chain.
    Task(&'a str),
    /// A task's, or when the task is not known, the run's (the task's
    /// records are keyed on its master run's chain; the run named is its
    /// master or one of its chain).
    TaskOrRun(&'a str, &'a str),
}

/// Whose chain a request is about.
fn whose(request: &Request) -> Whose<'_> {
    match request {
        Request::OpenRun(r) => Whose::NewRun(&r.run),
        Request::CloseRun(r) => Whose::Run(&r.run),
        Request::ReadArtifact(r) => Whose::Run(&r.run),
        Request::OpenTask(r) => Whose::Run(&r.run),
        Request::UpdateTask(r) => Whose::TaskOrRun(&r.task, &r.run),
        Request::SendContext(r) => Whose::TaskOrRun(&r.task, &r.run),
        Request::Evaluate(r) => Whose::TaskOrRun(&r.task, &r.run),
        Request::PutBlob(r) => Whose::Task(&r.task),
        Request::GetContext(r) => Whose::Task(&r.task),
        Request::GetBlob(r) => Whose::Task(&r.task),
        Request::ReturnContext(r) => Whose::Task(&r.task),
        Request::ForgetTask(r) => Whose::Task(&r.task),
        Request::PublishAgent(_)
        | Request::Dispatch(_)
        | Request::IssueToken(_)
        | Request::RevokeToken(_) => Whose::Anyone,
    }
}
