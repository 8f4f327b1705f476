//! Who serves this ledger: the serve loop announces this instance to the
//! group (its id, URL, the partitions it owns) whenever what it owns
//! changes and every few seconds, and keeps every member's last
//! announcement for `GET /v1/cluster` (answered in `operate`), from which
//! the engine learns who decides which partition (`placement`). On the
//! embedded log the only member is this instance, owning every partition.

use crate::engine::{Owner, Placement};
use crate::log::group::{Member, Membership};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often an instance announces itself when nothing changed.
const ANNOUNCE_EVERY: Duration = Duration::from_secs(5);

/// An announcement older than this is from an instance that stopped
/// announcing: died, or paused.
const STALE_AFTER: Duration = Duration::from_secs(15);

/// What `GET /v1/cluster` answers.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClusterView {
    /// The consumer group the instances share the partitions in.
    pub group: String,
    /// This instance's id.
    pub me: String,
    /// Where this instance answers (`--advertise`, or the address it
    /// listens on unless that is a wildcard address).
    pub advertise: Option<String>,
    pub members: Vec<MemberView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MemberView {
    #[serde(flatten)]
    pub member: Member,
    /// How old its last announcement is.
    pub age_ms: u64,
    /// Whether it stopped announcing (older than 15 s).
    pub stale: bool,
}

/// One ledger partition in `GET /v1/cluster`, as this instance sees it.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionView {
    pub partition: u32,
    /// The member that owns it, as announced (none while nobody has).
    pub owner: Option<String>,
    /// The log's end: the offset its next record gets.
    pub end: u64,
    /// Whether this instance's views project it (on Kafka: it owns it;
    /// the others' `projected` stands where its views last left it).
    pub held: bool,
    /// How far this instance's views have projected it.
    pub projected: u64,
    /// Records not projected here yet.
    pub lag: u64,
    /// Records its dispatcher has not passed yet (the owner's is the one
    /// that dispatches).
    pub dispatch_lag: u64,
}

/// Each ledger partition's end and lag in this instance's views, with its
/// owner from `owners` (see [`ClusterView::owner_of_each`]).
pub(crate) fn partitions(
    engine: &crate::engine::Engine,
    owners: &BTreeMap<u32, String>,
) -> Result<Vec<PartitionView>, crate::error::LedgerError> {
    let ends = engine.log().end_offsets(crate::model::Topic::Ledger)?;
    let views = engine.views();
    ends.into_iter()
        .enumerate()
        .map(|(p, end)| {
            let p = p as u32;
            let projected = views.offset(crate::model::Topic::Ledger, p)?;
            let dispatched = views.dispatch_cursor(p)?;
            Ok(PartitionView {
                partition: p,
                owner: owners.get(&p).cloned(),
                held: engine.scoped_to().is_none_or(|s| s.contains(&p)),
                end,
                projected,
                lag: end.saturating_sub(projected),
                dispatch_lag: end.saturating_sub(dispatched),
            })
        })
        .collect()
}

impl ClusterView {
    /// The member owning each partition, as announced (see
    /// [`ClusterView::claims`]).
    pub(crate) fn owner_of_each(&self) -> BTreeMap<u32, String> {
        self.claims(false)
            .into_iter()
            .map(|(p, m)| (p, m.member.id.clone()))
            .collect()
    }

    /// Who decides which ledger partition, as far as this view knows:
    /// `None` while no other live instance with a URL owns anything (this
    /// instance decides every request it is asked).
    pub(crate) fn placement(&self, owned: &BTreeSet<u32>) -> Option<Placement> {
        let owners: BTreeMap<u32, Owner> = self
            .claims(true)
            .into_iter()
            .filter(|(p, _)| !owned.contains(p))
            .filter_map(|(p, m)| {
                let url = m.member.url.clone()?;
                let id = m.member.id.clone();
                Some((p, Owner { id, url }))
            })
            .collect();
        (!owners.is_empty()).then(|| Placement {
            owned: owned.clone(),
            owners,
        })
    }

    /// The live member claiming each partition (`others`: besides this
    /// instance, whose own claims are what it owns now). Where two claim
    /// one (the loser has not announced its loss yet), the later
    /// announcement wins.
    fn claims(&self, others: bool) -> BTreeMap<u32, &MemberView> {
        let mut claims: BTreeMap<u32, &MemberView> = BTreeMap::new();
        let live = self
            .members
            .iter()
            .filter(|m| !m.stale)
            .filter(|m| !others || m.member.id != self.me);
        for m in live {
            for &p in &m.member.owned {
                if claims
                    .get(&p)
                    .is_none_or(|c| c.member.at_ms < m.member.at_ms)
                {
                    claims.insert(p, m);
                }
            }
        }
        claims
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The serve loop's side: when to announce, and the view it keeps.
#[derive(Default)]
pub(crate) struct Announcer {
    /// This instance's id: its writer name and a random tag, so that two
    /// hosts' processes of the same pid are told apart.
    id: Option<String>,
    last: Option<Instant>,
    owned: Option<BTreeSet<u32>>,
    /// The URL last announced: the listener binds after the loop starts.
    url: Option<String>,
    epoch: u64,
}

impl Announcer {
    /// Announce this instance if what it owns changed or the last
    /// announcement is getting old, then read the members into `view`.
    /// The group's own protocol, not these, decides ownership: a failure
    /// here is logged and tried again next turn.
    pub(crate) fn turn(
        &mut self,
        member: &mut dyn Membership,
        writer: &str,
        owned: &BTreeSet<u32>,
        view: &Mutex<ClusterView>,
    ) {
        let id = self
            .id
            .get_or_insert_with(|| {
                let mut tag = [0u8; 4];
                let _ = getrandom::fill(&mut tag);
                format!("{writer}#{}", hex::encode(tag))
            })
            .clone();
        let id = id.as_str();
        let changed = self.owned.as_ref() != Some(owned);
        let url = view
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .advertise
            .clone();
        if changed || url != self.url || self.last.is_none_or(|t| t.elapsed() >= ANNOUNCE_EVERY) {
            self.epoch += u64::from(changed);
            self.url = url.clone();
            let me = Member {
                id: id.to_string(),
                url,
                owned: owned.clone(),
                epoch: self.epoch,
                at_ms: now_ms(),
            };
            if let Err(e) = member.announce(&me) {
                tracing::warn!("announcing this instance to the group: {e}");
            }
            self.owned = Some(owned.clone());
            self.last = Some(Instant::now());
        }
        let members = match member.members() {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("reading the group's members: {e}");
                return;
            }
        };
        let now = now_ms();
        let mut v = view.lock().unwrap_or_else(|e| e.into_inner());
        v.me = id.to_string();
        v.members = members
            .into_iter()
            .map(|member| {
                let age_ms = now.saturating_sub(member.at_ms);
                MemberView {
                    member,
                    age_ms,
                    stale: age_ms > STALE_AFTER.as_millis() as u64,
                }
            })
            .collect();
    }
}
