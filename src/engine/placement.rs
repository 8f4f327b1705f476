//! Which instance decides a request. On Kafka the serve instances share
//! the ledger partitions through the consumer group; a run's steps are
//! decided by the instance that owns its chain root's partition, so that
//! they are decided in order on views that saw every step before. A
//! request for a partition another live instance owns is not decided
//! here: it is answered `not_owner` with a [`Referral`] the HTTP face
//! follows (it forwards the request with the caller's own credential).
//! Registry operations (agents, tokens) and dispatch are decided anywhere.

use super::Engine;
use crate::codes::Code;
use crate::codes::Refusal;
use crate::error::Result;
use crate::model::{ids, Topic};
use crate::protocol::Request;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

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
        if !refer && self.scope.is_none() {
            return Ok(None);
        }
        self.refer(refer);
        let to = self.referral_for(whose);
        self.refer(false);
        to
    }

    /// Where questions or operations about `whose` belong when another
    /// instance decides its chain (while referring; see [`Engine::refer`]).
    /// An engine that projects only its own partitions ([`Engine::scope`])
    /// decides nothing of the others': it refers every caller (one that
    /// cannot be forwarded is told where to ask), and without a known
    /// owner it refuses `not_owner` (retryable).
    pub fn referral_for(&mut self, whose: Whose<'_>) -> Result<Option<Referral>> {
        if whose == Whose::Anyone {
            return Ok(None);
        }
        match &self.scope {
            Some(s) if s.len() as u32 >= self.log.partitions(Topic::Ledger) => return Ok(None),
            Some(_) => {}
            None => {
                let others = self.placement.as_ref().filter(|_| self.referring);
                if others.is_none_or(|p| p.owners.is_empty()) {
                    return Ok(None);
                }
            }
        }
        let mut partition = self.home_partition(whose, false, true)?;
        if partition.is_none() {
            // Perhaps not seen yet: look again on caught-up views, and
            // take a run still not known for a root run (a chain keyed
            // on itself, as every run a caller opens is): its owner
            // decided its opening, so knows it if any instance does.
            self.catch_up_now()?;
            partition = self.home_partition(whose, true, true)?;
        }
        let Some(p) = partition else {
            return Ok(None);
        };
        let ours = match (&self.scope, &self.placement) {
            (Some(s), _) => s.contains(&p),
            (None, Some(placement)) => placement.owned.contains(&p),
            (None, None) => true,
        };
        if ours {
            return Ok(None);
        }
        let scoped = self.scope.is_some();
        match self.placement.as_ref().and_then(|pl| pl.owners.get(&p)) {
            // Unscoped, a caller not referred is decided here (these views
            // hold every chain); scoped, it is told where to ask.
            Some(owner) if self.referring || scoped => Ok(Some(Referral {
                partition: p,
                owner: owner.clone(),
            })),
            None if scoped => Err(Refusal::new(
                Code::NotOwner,
                format!(
                    "ledger partition {p} of this chain is not this instance's, and no other \
                     instance has claimed it yet (the group is moving partitions); ask again in a \
                     moment"
                ),
            )
            .into()),
            _ => Ok(None),
        }
    }

    /// Project only the ledger partitions in `owned` from now on, when
    /// this engine projects only its own (see [`EngineOptions::scoped`]);
    /// a partition gained is caught up with the next catch-up, before
    /// anything of it is decided. What the views hold of any other (lost
    /// to another instance, or held before this process started) is
    /// dropped once it has not been owned here for
    /// [`EngineOptions::drop_views_after`]. Call it often: the time is
    /// looked at once a second.
    ///
    /// [`EngineOptions::scoped`]: crate::engine::EngineOptions::scoped
    /// [`EngineOptions::drop_views_after`]: crate::engine::EngineOptions::drop_views_after
    pub fn scope(&mut self, owned: &BTreeSet<u32>) -> Result<()> {
        let Some(scope) = self.scope.as_mut() else {
            return Ok(());
        };
        if scope != owned {
            *scope = owned.clone();
        }
        self.unowned_since.retain(|p, _| !owned.contains(p));
        let now = std::time::Instant::now();
        let after = self.opts.drop_views_after;
        let recently = |t: std::time::Instant| now.duration_since(t) < Duration::from_secs(1);
        if !after.is_zero() && self.unowned_checked.is_some_and(recently) {
            return Ok(());
        }
        self.unowned_checked = Some(now);
        let log = self.log.clone();
        let partition_of = |key: &str| log.partition_of(Topic::Ledger, key.as_bytes());
        for p in (0..log.partitions(Topic::Ledger)).filter(|p| !owned.contains(p)) {
            if self.views.offset(Topic::Ledger, p)? == 0 {
                self.unowned_since.remove(&p);
                continue;
            }
            let since = *self.unowned_since.entry(p).or_insert(now);
            if now.duration_since(since) < after {
                continue;
            }
            let runs = self.views.forget_partition(p, &partition_of)?;
            self.unowned_since.remove(&p);
            tracing::info!(
                partition = p,
                runs,
                "views of a ledger partition not owned here dropped"
            );
        }
        Ok(())
    }

    /// The ledger partitions this engine projects (`None`: every one).
    pub fn scoped_to(&self) -> Option<&BTreeSet<u32>> {
        self.scope.as_ref()
    }

    /// The ledger partition `whose` chain lives in, as these views know
    /// it (what another instance asks when it cannot find a run or task).
    pub fn partition_known(&self, whose: Whose<'_>) -> Result<Option<u32>> {
        self.home_partition(whose, false, false)
    }

    /// Remember that `whose` lives in ledger partition `p`, as another
    /// instance that holds it said: its next request is referred there at
    /// once. Bounded: forgotten wholesale when full (asked again then).
    pub fn learn_partition(&mut self, whose: Whose<'_>, p: u32) {
        if self.located.len() >= MAX_LOCATED {
            self.located.clear();
        }
        match whose {
            Whose::Run(r) | Whose::NewRun(r) => {
                self.located.insert(located_run(r), p);
            }
            Whose::Task(t) | Whose::TaskOrRun(t, _) => {
                self.located.insert(located_task(t), p);
            }
            Whose::Anyone => {}
        }
    }

    /// The ledger partition of `whose` chain. `None` for what any
    /// instance decides, and for a task not known here; a run not known
    /// here is `None` too, or with `guess` taken for a root run. With
    /// `hearsay`, runs and tasks another instance said where to find are
    /// found there.
    fn home_partition(&self, whose: Whose<'_>, guess: bool, hearsay: bool) -> Result<Option<u32>> {
        let told = |key: String| self.located.get(&key).copied().filter(|_| hearsay);
        let partition = |key: &str| self.log.partition_of(Topic::Ledger, key.as_bytes());
        let of_run = |run: &str, guess: bool| -> Result<Option<u32>> {
            Ok(match self.views.run(run)? {
                Some(r) => Some(partition(ids::chain_key(r.root.as_deref(), &r.run))),
                None => match told(located_run(run)) {
                    Some(p) => Some(p),
                    None if guess => Some(partition(run)),
                    None => None,
                },
            })
        };
        let of_task = |task: &str| -> Result<Option<u32>> {
            match self.views.task(task)? {
                Some(t) => of_run(&t.master_run, false),
                None => Ok(told(located_task(task))),
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

/// Most runs and tasks remembered as found elsewhere.
const MAX_LOCATED: usize = 65_536;

fn located_run(run: &str) -> String {
    format!("r\0{run}")
}

fn located_task(task: &str) -> String {
    format!("t\0{task}")
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
pub fn whose(request: &Request) -> Whose<'_> {
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
