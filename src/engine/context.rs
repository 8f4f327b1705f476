//! Context exchange (IETF draft; R11–R15) in the ledger: every exchange and
//! every refusal of one is a step in the trail of the task's master run.
//! The decisions are the pure functions of `crate::context`.

use super::{Decided, Engine};
use crate::codes::Code;
use crate::codes::Refusal;
use crate::context::{
    self, ContextAccounting, ContextError, ContextEvent, Layer1, Mode, Outcome, TaskState,
};
use crate::error::{LedgerError, Result};
use crate::model::*;
use serde_json::Value;

/// What `send_context` answers.
#[derive(Debug, Clone, PartialEq)]
pub struct SendAnswer {
    pub subtask: String,
    pub agent: String,
    pub accounting: ContextAccounting,
}

/// Totals of a task's exchanges (`agentledger stats`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskStats {
    pub subtasks: usize,
    pub inline_bytes: u64,
    pub referenced_bytes: u64,
    pub est_tokens_saved: u64,
    pub refusals: usize,
}

/// The name of a task's sealed blobs' directory: a hash of its id.
fn key_tag(task: &str) -> String {
    hex::encode(<sha2::Sha256 as sha2::Digest>::digest(task.as_bytes()))
}

/// What a sealed blob is bound to: its task and its plaintext digest.
fn blob_aad(task: &str, sha: &[u8; 32]) -> Vec<u8> {
    crate::erasure::seal::aad("blob", task, &hex::encode(sha))
}

fn refusal(e: &ContextError) -> LedgerError {
    Refusal::new(e.code(), e.to_string()).into()
}

impl Engine {
    pub fn task(&self, task: &str) -> Result<TaskState> {
        if let Some(state) = self.views.task(task)? {
            return Ok(state);
        }
        if let Some(at) = self.views.task_erased_at(task)? {
            return Err(Refusal::new(
                Code::Expired,
                format!(
                    "task {task:?}: its context was erased at {}",
                    crate::model::time::rfc3339_ms(at)
                ),
            )
            .into());
        }
        if self.views.sealed_task_master(task)?.is_some() {
            return Err(Refusal::new(
                Code::Expired,
                format!("task {task:?}: its context was erased (its key is gone)"),
            )
            .into());
        }
        Err(Refusal::new(Code::UnknownTask, format!("no task {task:?} in the ledger")).into())
    }

    /// Erase a task's context now: its key deleted first (that is the
    /// erasure), then the erasure recorded in the master run's trail. Says
    /// whether it was erased now, and when it was.
    pub fn forget_task(&mut self, task: &str) -> Result<(bool, u64)> {
        if !ids::valid_name(task) {
            let shown: String = task.chars().take(128).collect();
            return Err(refusal(&ContextError::InvalidName {
                what: "task id",
                name: shown,
            }));
        }
        if let Some(at) = self.views.task_erased_at(task)? {
            return Ok((false, at));
        }
        let Some(master_run) = self.views.sealed_task_master(task)? else {
            return Err(match self.views.task(task)? {
                Some(_) => Refusal::new(
                    Code::InvalidRequest,
                    format!(
                        "task {task:?} is not sealed (opened with --seal-context off): its context cannot be erased"
                    ),
                ),
                None => Refusal::new(Code::UnknownTask, format!("no task {task:?} in the ledger")),
            }
            .into());
        };
        let now = self.now_ms();
        self.erase(task, &master_run, now, false)?;
        Ok((true, now))
    }

    /// Delete the task's key, then record that it is gone.
    fn erase(&mut self, task: &str, master_run: &str, at: u64, expired: bool) -> Result<()> {
        if let Some(keys) = &self.keys {
            keys.forget(task)?;
        }
        // Unreadable already; gone too.
        self.store.drop_sealed(&key_tag(task))?;
        let run = self.existing_run(master_run)?;
        let step = run.next_step;
        self.commit(vec![Decided::step(
            &run,
            step,
            LedgerEvent::ContextErased(ContextErased {
                task: task.to_owned(),
                master_run: master_run.to_owned(),
                at,
                expired,
            }),
        )])?;
        Ok(())
    }

    /// Erase the context of every task whose time to live has run out;
    /// how many were.
    pub fn erase_expired_tasks(&mut self) -> Result<usize> {
        let Some(keys) = self.keys.clone() else {
            return Ok(0);
        };
        let now = self.now_ms();
        let expired = keys.expired(now)?;
        let mut n = 0;
        for e in expired {
            match self.views.sealed_task_master(&e.task)? {
                Some(master) if self.views.task_erased_at(&e.task)?.is_none() => {
                    self.erase(&e.task, &master, e.expires_at.min(now), true)?;
                }
                // A key with no sealed state here (another instance's
                // task, or erased already): the key goes all the same.
                _ => {
                    keys.forget(&e.task)?;
                    self.store.drop_sealed(&key_tag(&e.task))?;
                }
            }
            n += 1;
        }
        Ok(n)
    }

    /// Record a context event in the master run's trail: sealed with its
    /// task's key when the task has one.
    fn record_context(&mut self, master_run: &str, event: ContextEvent) -> Result<()> {
        let run = self.existing_run(master_run)?;
        let step = run.next_step;
        let record = ContextRecord {
            master_run: master_run.to_string(),
            event,
        };
        let key = self
            .keys
            .as_ref()
            .and_then(|k| crate::erasure::TaskKeys::key(k.as_ref(), record.event.task()));
        let body = match key {
            Some(key) => LedgerEvent::SealedContext(
                crate::erasure::seal::seal_record(&key, &record)
                    .map_err(|_| LedgerError::Internal("sealing a context record"))?,
            ),
            None => LedgerEvent::Context(Box::new(record)),
        };
        self.commit(vec![Decided::step(&run, step, body)])?;
        Ok(())
    }

    /// The master run of a task whose context is erased (or sealed with a
    /// key that is gone).
    fn erased_master(&self, task: &str) -> Result<Option<String>> {
        if let Some((_, master)) = self.views.task_erased(task)? {
            return Ok(Some(master));
        }
        if self.views.task(task)?.is_none() {
            return Ok(self.views.sealed_task_master(task)?);
        }
        Ok(None)
    }

    /// The task's key, when its context is sealed and not erased.
    fn task_key(&self, task: &str) -> Option<crate::erasure::TaskKey> {
        self.keys
            .as_ref()
            .and_then(|k| crate::erasure::TaskKeys::key(k.as_ref(), task))
    }

    /// The bytes of a task's blob as stored (opened with the task's key
    /// when sealed), unchecked: the caller compares the digest.
    fn blob_bytes(&self, task: &str, uri: &str) -> Option<Vec<u8>> {
        match self.task_key(task) {
            Some(key) => {
                let sealed = self.store.read_sealed(&key_tag(task), uri)?;
                let sha = context::parse_context_uri(uri).ok()?.sha256();
                // Bytes that do not open are damaged: handed on as they
                // are, their digest cannot match (never "missing").
                Some(key.open(&blob_aad(task, &sha), &sealed).unwrap_or(sealed))
            }
            None => self.store.read_raw(uri),
        }
    }

    /// Where a task's blob lies on disk (sealed or not); tests tamper with it.
    pub fn blob_file(&self, task: &str, uri: &str) -> Result<std::path::PathBuf> {
        Ok(match self.task_key(task) {
            Some(_) => self.store.sealed_path(&key_tag(task), uri)?,
            None => self.store.blob_path(uri)?,
        })
    }

    /// Make the task's key before its first record, when context is sealed.
    fn make_task_key(&mut self, task: &str) -> Result<()> {
        if !self.opts.seal_context {
            return Ok(());
        }
        if let Some(keys) = &self.keys {
            let until = self.now_ms().saturating_add(self.opts.context_ttl_ms);
            keys.create(task, until)?;
        }
        Ok(())
    }

    /// Record a decision, or the refusal of it (the draft asks for an audit
    /// trail of both), and answer accordingly.
    fn decided(
        &mut self,
        state: &TaskState,
        op: &str,
        agent: Option<&str>,
        d: Result<ContextEvent, ContextError>,
    ) -> Result<ContextEvent> {
        match d {
            Ok(ev) => {
                self.record_context(&state.master_run, ev.clone())?;
                Ok(ev)
            }
            Err(e) => self.refuse(state, op, agent, e),
        }
    }

    /// Record a refusal in the master run's trail and return it.
    fn refuse<T>(
        &mut self,
        state: &TaskState,
        op: &str,
        agent: Option<&str>,
        e: ContextError,
    ) -> Result<T> {
        let now = self.now_ms();
        self.record_context(
            &state.master_run,
            ContextEvent::refused(&state.task, op, &e, agent, now),
        )?;
        Err(refusal(&e))
    }

    /// Open a task run by `master_run`. A refusal is a step of that run
    /// when it exists (an unknown run has no trail to hold it).
    pub fn open_task(&mut self, task: &str, master_run: &str, task_context: &Value) -> Result<()> {
        let run = self.existing_run(master_run)?;
        let existing = self.views.task(task)?;
        let d = if !ids::valid_name(task) {
            Err(ContextError::InvalidName {
                what: "task id",
                name: task.chars().take(128).collect(),
            })
        } else if !run.is_open() {
            Err(ContextError::RunClosed {
                run: master_run.to_string(),
            })
        } else if let Some(master) = self.erased_master(task)? {
            // An erased task's id is not reused: its trail and its erasure
            // name it, and forgetting must reach what is opened under it.
            Err(ContextError::TaskExists {
                task: task.to_string(),
                master,
            })
        } else {
            context::decide_open(
                existing.as_ref(),
                task,
                master_run,
                task_context,
                self.now_ms(),
            )
        };
        match d {
            Ok(ev) => {
                self.make_task_key(task)?;
                self.record_context(master_run, ev)
            }
            Err(e) => {
                let shown: String = task.chars().take(128).collect();
                let now = self.now_ms();
                self.record_context(
                    master_run,
                    ContextEvent::refused(&shown, "open_task", &e, Some(master_run), now),
                )?;
                Err(refusal(&e))
            }
        }
    }

    /// The task, and whether its master run is still open (a closed one
    /// ends the task's operations).
    fn task_and_master(&self, task: &str) -> Result<(TaskState, bool)> {
        let state = self.task(task)?;
        let open = self.existing_run(&state.master_run)?.is_open();
        Ok((state, open))
    }

    pub fn update_task(&mut self, task: &str, run: &str, task_context: &Value) -> Result<()> {
        let (state, open) = self.task_and_master(task)?;
        let d = context::require_open_master(&state, open)
            .and_then(|_| context::decide_update_task(&state, run, task_context, self.now_ms()));
        self.decided(&state, "update_task", Some(run), d)
            .map(|_| ())
    }

    /// Store content by reference for this task (R15): bytes to the content
    /// store, digest, media type and expiry to the ledger.
    pub fn put_blob(
        &mut self,
        task: &str,
        content: &[u8],
        media_type: &str,
        ttl_s: u64,
    ) -> Result<(String, String, u64)> {
        let (state, open) = self.task_and_master(task)?;
        if let Err(e) = context::require_open_master(&state, open) {
            return self.refuse(&state, "put_blob", None, e);
        }
        let now = self.now_ms();
        let ev = context::decide_put_blob(&state, content, media_type, ttl_s, now);
        match self.task_key(task) {
            Some(key) => {
                if content.len() > crate::model::limits::MAX_BLOB_BYTES {
                    return Err(crate::content::store::StoreError::TooLarge {
                        size: content.len(),
                    }
                    .into());
                }
                let sha: [u8; 32] = sha2::Digest::finalize(sha2::Digest::chain_update(
                    <sha2::Sha256 as sha2::Digest>::new(),
                    content,
                ))
                .into();
                let sealed = key
                    .seal_deterministic(&blob_aad(task, &sha), content)
                    .map_err(|_| LedgerError::Internal("sealing a blob"))?;
                self.store.put_sealed(&key_tag(task), &sha, &sealed)?;
            }
            None => {
                self.store.put(content)?;
            }
        }
        self.record_context(&state.master_run, ev.clone())?;
        match ev {
            ContextEvent::BlobPut {
                uri, digest, size, ..
            } => Ok((uri, digest, size)),
            _ => Err(LedgerError::Internal(
                "put_blob decided another kind of event",
            )),
        }
    }

    /// The master run `run` sends one agent's AgentContext as a new subtask
    /// (R11, R12).
    pub fn send_context(
        &mut self,
        task: &str,
        run: &str,
        mode: Mode,
        agent_context: &Value,
    ) -> Result<SendAnswer> {
        let (state, open) = self.task_and_master(task)?;
        let d = context::require_open_master(&state, open)
            .and_then(|_| context::decide_send(&state, run, mode, agent_context, self.now_ms()));
        match self.decided(&state, "send_context", Some(run), d)? {
            ContextEvent::ContextSent {
                subtask,
                agent,
                context: ctx,
                ..
            } => {
                let accounting = context::account(&ctx, |uri| state.blob_size(uri));
                Ok(SendAnswer {
                    subtask,
                    agent,
                    accounting,
                })
            }
            _ => Err(LedgerError::Internal(
                "send_context decided another kind of event",
            )),
        }
    }

    /// An agent's own current context (R11); asking as anyone else is
    /// refused and recorded.
    pub fn get_context(&mut self, task: &str, agent: &str) -> Result<(String, Value)> {
        let (state, open) = self.task_and_master(task)?;
        let got = context::require_open_master(&state, open)
            .and_then(|_| context::get_context(&state, agent));
        match got {
            Ok((sub, ctx)) => Ok((
                sub.id.clone(),
                serde_json::to_value(ctx).unwrap_or(Value::Null),
            )),
            Err(e) => self.refuse(&state, "get_context", Some(agent), e),
        }
    }

    /// Resolve a reference (R15): granted, not expired, digest checked.
    pub fn get_blob(&mut self, task: &str, agent: &str, uri: &str) -> Result<(Vec<u8>, String)> {
        let (state, open) = self.task_and_master(task)?;
        let bytes = self.blob_bytes(task, uri);
        let actual = bytes.as_deref().map(context::sha256_hex);
        let d = context::require_open_master(&state, open).and_then(|_| {
            context::decide_blob_read(&state, agent, uri, actual.as_deref(), self.now_ms())
        });
        match self.decided(&state, "get_blob", Some(agent), d)? {
            ContextEvent::BlobRead { digest, .. } => Ok((bytes.unwrap_or_default(), digest)),
            _ => Err(LedgerError::Internal(
                "get_blob decided another kind of event",
            )),
        }
    }

    /// The agent returns its updated context; layer one is computed (R13,
    /// R14), with every ContextURI it cites as evidence or trace resolved
    /// against the task's content.
    pub fn return_context(
        &mut self,
        task: &str,
        agent: &str,
        agent_context: &Value,
    ) -> Result<(String, Layer1)> {
        let (state, open) = self.task_and_master(task)?;
        let now = self.now_ms();
        let this = &*self;
        let resolve = |uri: &str| -> Option<String> {
            if let Err(e) = context::parse_context_uri(uri) {
                return Some(e.to_string());
            }
            let Some(meta) = state.blobs.get(uri) else {
                return Some("no content was put for it in this task".into());
            };
            if now >= meta.expires_at {
                return Some(format!(
                    "its content expired at {}",
                    crate::model::time::rfc3339_ms(meta.expires_at)
                ));
            }
            match this.blob_bytes(task, uri) {
                Some(b) if context::sha256_hex(&b) == meta.digest.trim_start_matches("sha256:") => {
                    None
                }
                Some(_) => Some(format!("its content no longer matches {}", meta.digest)),
                None => Some(format!("no content is stored for {uri}")),
            }
        };
        let d = context::require_open_master(&state, open)
            .and_then(|_| context::decide_return(&state, agent, agent_context, &resolve, now));
        match self.decided(&state, "return_context", Some(agent), d)? {
            ContextEvent::ContextReturned {
                subtask, layer1, ..
            } => Ok((subtask, layer1)),
            _ => Err(LedgerError::Internal(
                "return_context decided another kind of event",
            )),
        }
    }

    /// The master run's decision, layer two (R13).
    pub fn evaluate(
        &mut self,
        task: &str,
        run: &str,
        subtask: &str,
        outcome: Outcome,
        reason: &str,
    ) -> Result<()> {
        let (state, open) = self.task_and_master(task)?;
        let d = context::require_open_master(&state, open).and_then(|_| {
            context::decide_evaluate(&state, run, subtask, outcome, reason, self.now_ms())
        });
        self.decided(&state, "evaluate", Some(run), d).map(|_| ())
    }

    /// Totals over a task's subtasks: bytes inline vs behind references.
    pub fn task_stats(&self, task: &str) -> Result<TaskStats> {
        let state = self.task(task)?;
        let mut stats = TaskStats::default();
        for s in &state.subtasks {
            let a = context::account(&s.sent, |uri| state.blob_size(uri));
            stats.subtasks += 1;
            stats.inline_bytes += a.inline_bytes;
            stats.referenced_bytes += a.referenced_bytes;
            stats.est_tokens_saved += a.est_tokens_saved;
        }
        for step in self.trail(&state.master_run, false)? {
            if let LedgerEvent::Context(c) = &step.event {
                if matches!(&c.event, ContextEvent::Refused { task: t, .. } if t == task) {
                    stats.refusals += 1;
                }
            }
        }
        Ok(stats)
    }
}
