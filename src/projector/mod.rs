//! The projector: folds log records into the views. It only evolves state
//! from what records say (decisions were made before the record was
//! written), so every replay and rebuild reaches the same views (R1).
//! Applying a record twice changes nothing: trail steps are held by
//! (run, step) and checked against the event id, versions by (agent, number).

pub mod driver;

pub use driver::{project_all, project_partition};

/// How many records the projector folds into one atomic view batch.
pub const PROJECT_BATCH: usize = 2000;

use crate::codec::Record;
use crate::model::*;
use crate::views::{keys, AgentState, RunState, TokenState, TrailPointer, ViewError, ViewTxn};

/// Where a record sits in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub partition: u32,
    pub offset: u64,
}

/// Outcome of applying one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evolved {
    Changed,
    /// The same event was applied before (a duplicate delivery).
    Duplicate,
    /// Another event already holds this trail step: two writers decided for
    /// the same run. Kept out of the views and logged.
    Conflict,
}

/// Apply one ledger or registry record to the batch.
pub fn evolve(txn: &mut ViewTxn<'_>, pos: Position, rec: Record) -> Result<Evolved, ViewError> {
    match &rec.event {
        LedgerEvent::AgentPublished(v) => return evolve_version(txn, v),
        LedgerEvent::TokenIssued(t) => return evolve_token_issued(txn, t, rec.time_ms),
        LedgerEvent::TokenRevoked(t) => return evolve_token_revoked(txn, t, rec.time_ms),
        _ => {}
    }
    let Some(run_id) = rec.event.trail_run().map(str::to_string) else {
        return Ok(Evolved::Changed);
    };
    let run_id = run_id.as_str();
    let mut digest8 = [0u8; 8];
    digest8.copy_from_slice(&rec.body_digest[..8]);
    // Steps of a run arrive in order (one chain, one partition), so a step
    // below the run's next step was seen before: the same record again, or
    // another writer's different decision for that step.
    let seen_before = match &rec.event {
        LedgerEvent::RunOpened(_) => txn.run_exists(run_id)?,
        _ => match txn.run_mut(run_id)? {
            Some(run) => rec.step < run.next_step,
            None => {
                tracing::error!(
                    run = run_id,
                    kind = rec.event.kind(),
                    "record for an unknown run; skipped"
                );
                return Ok(Evolved::Conflict);
            }
        },
    };
    if seen_before {
        let held = txn.trail_step(run_id, rec.step)?;
        if held.is_some_and(|h| h.digest8 == digest8) {
            return Ok(Evolved::Duplicate);
        }
        tracing::error!(
            run = run_id,
            step = rec.step,
            refused = %rec.event_id,
            at = pos.offset,
            "another record already holds this trail step; keeping the first"
        );
        return Ok(Evolved::Conflict);
    }
    let pointer = TrailPointer {
        partition: pos.partition,
        offset: pos.offset,
        digest8,
    };
    // A run's opening step is stored with the run state it creates.
    if !matches!(rec.event, LedgerEvent::RunOpened(_)) {
        txn.set_trail_step(run_id, rec.step, pointer)?;
    }
    let step = rec.step;
    match &rec.event {
        LedgerEvent::AgentPublished(_)
        | LedgerEvent::TokenIssued(_)
        | LedgerEvent::TokenRevoked(_) => {}
        LedgerEvent::RunOpened(e) => {
            txn.insert_run(RunState {
                state: Run::opened(e, step),
                closed_at: None,
                trail: vec![(step, pointer)],
                opened_by: rec.principal.clone(),
            });
            // A root opening its own chain needs no chain write: while it is
            // alone, its chain is read off its run state. (No chain can be
            // stored before its root is opened: joiners take their root from
            // a run that exists, and a second opening was refused above.)
            let lone_root = e.root.as_deref() == Some(e.run.as_str()) && !txn.has_chain(&e.run);
            if let (Some(root), Some(hop), false) = (&e.root, e.hop, lone_root) {
                let chain = txn.chain_mut(root)?;
                if !chain.runs.contains(&e.run) {
                    chain.runs.push(e.run.clone());
                }
                chain.max_hop = chain.max_hop.max(hop);
            }
            return Ok(Evolved::Changed);
        }
        LedgerEvent::RunClosed(e) => {
            txn.put_new(keys::finished(pos.partition, pos.offset), &e.run);
            for a in &e.artifacts {
                hold_content(txn, &a.sha256, crate::views::NEVER)?;
            }
            if let Some(run) = txn.run_mut(&e.run)? {
                run.closed_at = Some((pos.partition, pos.offset));
            }
        }
        LedgerEvent::Context(c) => {
            hold_blob(txn, &c.event)?;
            let key = keys::task(c.event.task());
            let state: Option<crate::context::TaskState> = txn.get(&key)?;
            if let Some(next) = crate::context::evolve(state, &c.event) {
                txn.put(key, &next);
            }
        }
        LedgerEvent::SealedContext(sc) => {
            // The hold on a blob is in clear: the same with or without the
            // key, so views rebuilt after an erasure are the same.
            if let Some((uri, expires_at)) = &sc.hold {
                if let Ok(parsed) = crate::context::parse_context_uri(uri) {
                    hold_content(txn, &parsed.sha256(), *expires_at)?;
                }
            }
            // Folded like a clear one, the state sealed again; without the
            // key (erased) there is nothing to fold.
            let task_key = txn.task_keys().key(&sc.task);
            let opened = task_key
                .as_ref()
                .and_then(|k| crate::erasure::seal::open_record(k, sc).map(|r| (k.clone(), r)));
            if let Some((k, record)) = opened {
                let key = keys::sealed_task(&sc.task);
                let state = txn
                    .get::<(String, Vec<u8>)>(&key)?
                    .and_then(|(_, b)| crate::views::open_task_state(&k, &sc.task, &b));
                if let Some(next) = crate::context::evolve(state, &record.event) {
                    let sealed = crate::views::seal_task_state(&k, &next)?;
                    txn.put(key, &(next.master_run.clone(), sealed));
                }
            }
        }
        LedgerEvent::ContextErased(e) => {
            // The sealed state was ciphertext; without the key it is noise.
            txn.del(keys::sealed_task(&e.task));
            txn.put(keys::erased_task(&e.task), &(e.at, e.master_run.clone()));
        }
        LedgerEvent::RunDispatched(e) => {
            txn.del(keys::finished(e.closed_partition, e.closed_offset));
            let ckey = keys::dispatch_cursor(e.closed_partition);
            let cursor: u64 = txn.get(&ckey)?.unwrap_or(0);
            txn.put(ckey, &cursor.max(e.closed_offset + 1));
        }
        LedgerEvent::ArtifactRead(_)
        | LedgerEvent::ReadRefused(_)
        | LedgerEvent::Forbidden(_)
        | LedgerEvent::ListenerRefused(_) => {}
    }
    // Every later step of a trail moves its run on.
    if let Some(run) = txn.run_mut(run_id)? {
        run.state.evolve(step, &rec.event);
    }
    Ok(Evolved::Changed)
}

/// A blob put in a task is content held until its grant expires.
fn hold_blob(txn: &mut ViewTxn<'_>, event: &crate::context::ContextEvent) -> Result<(), ViewError> {
    if let crate::context::ContextEvent::BlobPut {
        uri, expires_at, ..
    } = event
    {
        if let Ok(parsed) = crate::context::parse_context_uri(uri) {
            hold_content(txn, &parsed.sha256(), *expires_at)?;
        }
    }
    Ok(())
}

/// Note a reference to content that lives until `deadline`: the content
/// stays while any reference to it does.
fn hold_content(txn: &mut ViewTxn<'_>, sha256: &[u8; 32], deadline: u64) -> Result<(), ViewError> {
    let key = keys::content_ref(sha256);
    let held: Option<u64> = txn.get(&key)?;
    if held.is_none_or(|h| h < deadline) {
        txn.put(key, &deadline);
    }
    Ok(())
}

/// A token issued: found by its hash from now on. The first issue of an id
/// stands; a second record for it changes nothing.
fn evolve_token_issued(
    txn: &mut ViewTxn<'_>,
    t: &TokenIssued,
    time_ms: u64,
) -> Result<Evolved, ViewError> {
    let id_key = keys::token_id(&t.id);
    if txn.contains(&id_key)? {
        return Ok(Evolved::Duplicate);
    }
    txn.put(id_key, &t.sha256);
    txn.put(
        keys::token(&t.sha256),
        &TokenState {
            id: t.id.clone(),
            principal: t.principal.clone(),
            scopes: t.scopes.clone(),
            issued_at_ms: time_ms,
            expires_at_ms: t.expires_at_ms,
            revoked_at_ms: None,
        },
    );
    Ok(Evolved::Changed)
}

/// A token revoked: its state says so (kept, so `token list` shows it).
fn evolve_token_revoked(
    txn: &mut ViewTxn<'_>,
    t: &TokenRevoked,
    time_ms: u64,
) -> Result<Evolved, ViewError> {
    // Revoking was decided on views that held the token, and the registry
    // is one partition in order: an unknown id is a record replayed alone.
    let Some(sha) = txn.get::<[u8; 32]>(&keys::token_id(&t.id))? else {
        return Ok(Evolved::Duplicate);
    };
    let key = keys::token(&sha);
    match txn.get::<TokenState>(&key)? {
        Some(mut state) if state.revoked_at_ms.is_none() => {
            state.revoked_at_ms = Some(time_ms);
            txn.put(key, &state);
            Ok(Evolved::Changed)
        }
        _ => Ok(Evolved::Duplicate),
    }
}

fn evolve_version(txn: &mut ViewTxn<'_>, v: &AgentVersion) -> Result<Evolved, ViewError> {
    let vkey = keys::version(&v.agent, v.version);
    if txn.contains(&vkey)? {
        return Ok(Evolved::Duplicate);
    }
    txn.put(vkey, v);
    let akey = keys::agent(&v.agent);
    let current: Option<AgentState> = txn.get(&akey)?;
    if let Some(cur) = &current {
        if cur.current > v.version {
            // An older version arriving late never replaces a newer one.
            return Ok(Evolved::Changed);
        }
        if let Some(old) = txn.get::<AgentVersion>(&keys::version(&v.agent, cur.current))? {
            for ev in &old.listens {
                txn.del(keys::listener(ev, &v.agent));
            }
        }
    }
    for ev in &v.listens {
        txn.put(keys::listener(ev, &v.agent), &());
    }
    txn.put(
        akey,
        &AgentState {
            agent: v.agent.clone(),
            current: v.version,
            scope: v.scope.clone(),
        },
    );
    Ok(Evolved::Changed)
}
