//! Finding the run or task this instance does not hold. In a group each
//! instance projects only its own ledger partitions, and a run's
//! partition is its chain root's: a root run's id names it, but a listener
//! run's (opened by a dispatch) or a task's does not. When a request names
//! one that neither this instance nor the owner it guessed knows, the
//! other live instances are asked where it lives (`GET
//! /v1/cluster/locate`, answered from their views), the request goes to
//! the owner of that partition, and the ledger thread remembers the
//! answer so that the next request goes there at once.
//!
//! A request for a partition no instance has claimed yet (the group is
//! moving partitions) waits for a claim, bounded, before it is answered
//! `not_owner`.

use super::access::{admitted, Asked, Permit};
use super::answer::{failure_response, gone, timed_out};
use super::ledger::{Caller, Gone};
use super::state::AppState;
use crate::codes::Code;
use crate::engine::{Owner, Referral, Whose};
use crate::protocol::{Failure, Reply};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// What a request is about, owned (to be asked of other instances).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Subject {
    Run(String),
    Task(String),
    /// A task, or when it is not known, a run of its chain.
    TaskOrRun(String, String),
}

impl Subject {
    /// The subject of a question about `whose`; `None` for what any
    /// instance answers.
    pub(super) fn of(whose: Whose<'_>) -> Option<Self> {
        match whose {
            Whose::Anyone => None,
            Whose::NewRun(r) | Whose::Run(r) => Some(Self::Run(r.to_string())),
            Whose::Task(t) => Some(Self::Task(t.to_string())),
            Whose::TaskOrRun(t, r) => Some(Self::TaskOrRun(t.to_string(), r.to_string())),
        }
    }

    /// The subject of one request line, if it parses.
    pub(super) fn of_line(line: &[u8]) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_slice(line).ok()?;
        let request = crate::protocol::parse_request(&v).ok()?;
        Self::of(crate::engine::whose(&request))
    }

    fn whose(&self) -> Whose<'_> {
        match self {
            Self::Run(r) => Whose::Run(r),
            Self::Task(t) => Whose::Task(t),
            Self::TaskOrRun(t, r) => Whose::TaskOrRun(t, r),
        }
    }

    fn query(&self) -> String {
        let enc = crate::encode::path_segment;
        match self {
            Self::Run(r) => format!("run={}", enc(r)),
            Self::Task(t) => format!("task={}", enc(t)),
            Self::TaskOrRun(t, r) => format!("task={}&run={}", enc(t), enc(r)),
        }
    }
}

/// Whether a failure says the run or task named is not known where it
/// was decided: worth asking the others where it lives.
pub(super) fn unknown(f: &Failure) -> bool {
    matches!(f.error.code, Code::UnknownRun | Code::UnknownTask)
}

/// Whether a failure says no instance has claimed the chain's partition
/// yet: worth waiting a moment for one.
pub(super) fn unclaimed(f: &Failure) -> bool {
    f.error.code == Code::NotOwner && f.referral.is_none()
}

/// Whether every reply is [`unclaimed`] (nothing was decided).
pub(super) fn all_unclaimed(replies: &[Reply]) -> bool {
    !replies.is_empty()
        && replies
            .iter()
            .all(|r| matches!(r, Reply::Failed(f) if unclaimed(f)))
}

/// How long a request waits for its partition to be claimed.
const CLAIM_WAIT: Duration = Duration::from_secs(10);

/// How often it looks again meanwhile.
const CLAIM_POLL: Duration = Duration::from_millis(200);

/// When a request that started at `started` should stop waiting for a
/// claim (within the request timeout).
pub(super) fn wait_for_claim(s: &AppState, started: Instant) -> Option<Duration> {
    let limit = CLAIM_WAIT.min(s.opts.timeout.saturating_sub(CLAIM_POLL));
    (started.elapsed() + CLAIM_POLL < limit).then_some(CLAIM_POLL)
}

#[derive(serde::Deserialize)]
pub(super) struct LocateParams {
    run: Option<String>,
    task: Option<String>,
}

/// `GET /v1/cluster/locate?run=R` (or `task=T`, or both): the ledger
/// partition these views hold the run or task in; 404 when they hold
/// neither. Any authenticated reader may ask (it says no more than that
/// the id exists, and where).
pub(super) async fn answer(
    State(s): State<AppState>,
    headers: Asked,
    Query(q): Query<LocateParams>,
) -> Response {
    if let Err(r) = admitted(&s, &headers, Permit::Read).await {
        return r;
    }
    let subject = match (q.task, q.run) {
        (Some(t), Some(r)) => Subject::TaskOrRun(t, r),
        (Some(t), None) => Subject::Task(t),
        (None, Some(r)) => Subject::Run(r),
        (None, None) => {
            return failure_response(Failure::new(
                Code::InvalidRequest,
                "name a run (?run=) or a task (?task=) to locate",
            ))
        }
    };
    let asked = s
        .ledger
        .call(move |engine| engine.partition_known(subject.whose()));
    match s.in_time(asked).await {
        Ok(Ok(Ok(Some(p)))) => axum::Json(serde_json::json!({ "partition": p })).into_response(),
        Ok(Ok(Ok(None))) => failure_response(Failure::new(
            Code::NotFound,
            "this instance's views hold no such run or task",
        )),
        Ok(Ok(Err(e))) => failure_response(Failure::new(e.code(), e.to_string())),
        Ok(Err(Gone)) => gone(),
        Err(_) => timed_out(s.opts.timeout),
    }
}

/// Where `subject` lives when another live instance holds it: the owner
/// of its partition (none when nobody says, or when it is this
/// instance's or `asked`'s, an owner that did not know it). The ledger
/// thread learns the partition.
pub(super) async fn elsewhere(
    s: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    subject: &Subject,
    asked: Option<&Owner>,
) -> Option<Referral> {
    let view = s.ledger.cluster_view();
    let others: Vec<Owner> = view
        .members
        .iter()
        .filter(|m| !m.stale && m.member.id != view.me)
        .filter_map(|m| {
            Some(Owner {
                id: m.member.id.clone(),
                url: m.member.url.clone()?,
            })
        })
        .collect();
    if others.is_empty() {
        return None;
    }
    let target = format!("/v1/cluster/locate?{}", subject.query());
    let asks = others.iter().map(|o| {
        let to = Referral {
            partition: 0,
            owner: o.clone(),
        };
        let target = target.clone();
        async move {
            let out = super::forward::Outgoing {
                to: &to,
                method: Method::GET,
                target: &target,
                content_type: None,
                body: None,
                timed: true,
            };
            let answer = super::forward::send(s, caller, headers, out).await.ok()?;
            if !answer.status().is_success() {
                return None;
            }
            let v: serde_json::Value = answer.json().await.ok()?;
            v["partition"].as_u64().and_then(|p| u32::try_from(p).ok())
        }
    });
    let found: BTreeSet<u32> = futures_util::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .collect();
    // Every instance that holds it holds it in the same partition.
    let p = found.into_iter().next()?;
    s.ledger.metrics.located();
    let learned = subject.clone();
    let _ = s
        .ledger
        .call(move |engine| engine.learn_partition(learned.whose(), p))
        .await;
    let placement = view.placement(&BTreeSet::new())?;
    let owner = placement.owners.get(&p)?.clone();
    if owner.id == view.me || asked.is_some_and(|a| a.url == owner.url) {
        return None;
    }
    Some(Referral {
        partition: p,
        owner,
    })
}

/// Forward a whole request to `to`, and should that owner not know its
/// run or task (`to` was a guess: a run not held here taken for a root),
/// to the owner of the partition the others say it lives in.
pub(super) async fn whole(
    s: &AppState,
    caller: &Caller,
    to: &Referral,
    headers: &HeaderMap,
    (target, body): (&str, Option<axum::body::Bytes>),
    subject: Option<Subject>,
) -> Response {
    let answer = super::forward::whole(s, caller, to, target, headers, body.clone()).await;
    let Some(subject) = subject.filter(|_| answer.status().as_u16() == 422) else {
        return answer;
    };
    let (parts, held) = answer.into_parts();
    let Ok(bytes) = axum::body::to_bytes(held, s.opts.max_body.max(1 << 20)).await else {
        return failure_response(Failure::new(
            Code::NotOwner,
            format!("{to}, whose answer could not be read; ask again in a moment"),
        ));
    };
    let failed = serde_json::from_slice::<Failure>(&bytes).is_ok_and(|f| unknown(&f));
    if failed {
        if let Some(next) = elsewhere(s, caller, headers, &subject, Some(&to.owner)).await {
            return super::forward::whole(s, caller, &next, target, headers, body).await;
        }
    }
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// For a request decided here and answered unknown run or task: the
/// owner elsewhere that holds it, if any instance does.
pub(super) async fn unknown_here(
    s: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    reply: &Reply,
    subject: impl FnOnce() -> Option<Subject>,
) -> Option<Referral> {
    let Reply::Failed(f) = reply else {
        return None;
    };
    if !unknown(f) {
        return None;
    }
    elsewhere(s, caller, headers, &subject()?, None).await
}

/// The ndjson lines answered unknown run or task, here or by the owner
/// they were forwarded to: each forwarded once more to the owner of the
/// partition the others say it lives in, its answer put in its place.
pub(super) async fn lines(
    s: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    raw: &[&[u8]],
    replies: &[Reply],
    texts: &mut [String],
) {
    let mut again = Vec::with_capacity(texts.len());
    let mut any = false;
    for (i, text) in texts.iter().enumerate() {
        let failed = serde_json::from_str::<Failure>(text).is_ok_and(|f| unknown(&f));
        let asked = replies.get(i).and_then(Reply::referral).map(|r| &r.owner);
        let to = match Subject::of_line(raw[i]).filter(|_| failed) {
            Some(subject) => elsewhere(s, caller, headers, &subject, asked).await,
            None => None,
        };
        any |= to.is_some();
        again.push(Reply::Failed(match to {
            Some(to) => super::forward::not_owner(&to),
            None => Failure::new(Code::NotFound, String::new()),
        }));
    }
    if any {
        super::forward::lines(s, caller, headers, raw, &again, texts).await;
    }
}

/// When `f` says run `run` is not known here and another instance holds
/// it: `f` referring there (a run's MCP endpoint).
pub(super) async fn run_held(
    s: &AppState,
    caller: Option<&Caller>,
    run: &str,
    headers: &HeaderMap,
    f: &Failure,
) -> Option<Failure> {
    let caller = caller.filter(|_| !super::forward::is_forwarded(headers))?;
    let reply = Reply::Failed(f.clone());
    let subject = || Some(Subject::Run(run.to_string()));
    let to = unknown_here(s, caller, headers, &reply, subject).await?;
    let mut f = f.clone();
    f.referral = Some(Box::new(to));
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_request_nothing_of_which_was_decided_waits_for_a_claim() {
        let unclaimed = || Reply::Failed(Failure::new(Code::NotOwner, "nobody"));
        let mut referred = Failure::new(Code::NotOwner, "there");
        referred.referral = Some(Box::new(Referral {
            partition: 1,
            owner: Owner {
                id: "b".into(),
                url: "http://b".into(),
            },
        }));
        assert!(all_unclaimed(&[unclaimed(), unclaimed()]));
        assert!(!all_unclaimed(&[]));
        assert!(!all_unclaimed(&[unclaimed(), Reply::Failed(referred)]));
        let unknown_run = Failure::new(Code::UnknownRun, "no");
        assert!(!all_unclaimed(&[
            unclaimed(),
            Reply::Failed(unknown_run.clone())
        ]));
        assert!(unknown(&unknown_run) && unknown(&Failure::new(Code::UnknownTask, "no")));
        assert!(!unknown(&Failure::new(Code::NotOwner, "no")));
    }

    #[test]
    fn a_subject_is_asked_for_with_its_ids_escaped() {
        let s = Subject::of_line(br#"{"op":"get_context","task":"t 1&x","agent":"a"}"#);
        assert_eq!(s, Some(Subject::Task("t 1&x".into())));
        assert_eq!(s.unwrap().query(), "task=t%201%26x");
        let s = Subject::of_line(br#"{"op":"close_run","run":"r-1","status":"failed"}"#).unwrap();
        assert_eq!(s.query(), "run=r-1");
        // What any instance decides, and what is not a request: nothing to find.
        assert_eq!(
            Subject::of_line(br#"{"op":"publish_agent","agent":"a","scope":"s"}"#),
            None
        );
        assert_eq!(Subject::of_line(b"not json"), None);
    }
}
