//! Request lines decided as one commit group: in order, each seeing the
//! decisions before it, made durable together with one sync per partition,
//! and answered only after that. `apply` and the server both answer this
//! way, so an operation's answer never depends on how it arrived.

use crate::auth::Grant;
use crate::codec::SpanRef;
use crate::codes::Code;
use crate::engine::Engine;
use crate::error::LedgerError;
use crate::protocol::{reply_as, Failure, Reply};
use serde_json::Value;

/// One request line as received: its JSON, or the failure its bytes
/// already are (malformed, too long).
pub type Line = Result<Value, Failure>;

/// One line's answer, once its group has ended.
#[derive(Debug)]
pub struct Answered {
    pub reply: Reply,
    /// The operation named by the line (for metrics), when it named one.
    pub op: Option<String>,
    /// The failure is the machine's (the log failed), not the caller's.
    pub machine: bool,
}

/// What a group did.
#[derive(Debug)]
pub struct Group<T> {
    /// One answer per line, in order.
    pub answered: Vec<Answered>,
    /// What `then` returned, when it ran.
    pub then: Option<T>,
    /// Whether the group's records were made durable; when not, no
    /// operation of it was answered ok, and the log must not be trusted
    /// with more.
    pub durable: Result<(), LedgerError>,
}

/// A group decided: its answers as decided, waiting for the group's
/// records to be made durable (see [`Decided::seal`], [`Decided::land`]).
#[derive(Debug)]
pub struct Decided<T> {
    answered: Vec<Answered>,
    then: Option<T>,
    sealed: Option<Result<(), LedgerError>>,
    /// Why the lines after a machine failure are not applied.
    stopped: Option<String>,
}

/// Run `then` (the serve loop's dispatch sweep) and decide `lines`, each
/// a request made by the grant beside it (callers of one group may
/// differ) within the span beside it, if any (its records name it: see
/// [`Engine::within_span`]), in order as one commit group. After a machine
/// failure the remaining lines are not applied and say why.
///
/// `then` runs first: what it writes stands on records made durable by
/// earlier groups only (the closes it dispatches), so the group's records
/// sync in one phase (see `log::embedded`'s `Phasing`); after the lines,
/// its events would stand on their closes and need one more round.
pub fn reply_group<'g, T>(
    engine: &mut Engine,
    lines: impl IntoIterator<Item = (&'g Grant, Option<SpanRef>, Line)>,
    then: Option<impl FnOnce(&mut Engine) -> T>,
) -> Group<T> {
    let mut decided = decide_group(engine, lines, then);
    decided.seal(engine, false);
    let group = decided.land(engine);
    engine.after_groups();
    group
}

/// [`reply_group`]'s first half: begin the group, run `then` and decide
/// the lines; nothing is durable or answered yet.
pub fn decide_group<'g, T>(
    engine: &mut Engine,
    lines: impl IntoIterator<Item = (&'g Grant, Option<SpanRef>, Line)>,
    then: Option<impl FnOnce(&mut Engine) -> T>,
) -> Decided<T> {
    engine.begin_group();
    let mut decided = Decided {
        answered: Vec::new(),
        then: then.map(|f| f(engine)),
        sealed: None,
        stopped: None,
    };
    decided.decide_more(engine, lines);
    decided
}

impl<T> Decided<T> {
    /// How many lines the group has decided.
    pub fn len(&self) -> usize {
        self.answered.len()
    }

    /// Whether the group has decided no line.
    pub fn is_empty(&self) -> bool {
        self.answered.is_empty()
    }

    /// Decide more lines in the same group, after the ones before (the
    /// serve loop's, while the group before syncs). Not once sealed.
    pub fn decide_more<'g>(
        &mut self,
        engine: &mut Engine,
        lines: impl IntoIterator<Item = (&'g Grant, Option<SpanRef>, Line)>,
    ) {
        let stopped = &mut self.stopped;
        let answered = &mut self.answered;
        for (grant, span, line) in lines {
            engine.group_op(Some(answered.len()));
            let a = decide_line(engine, stopped, (grant, span, line));
            answered.push(a);
        }
        engine.group_op(None);
    }

    /// Hand the group's records to the log and start their sync, on the
    /// engine's sync thread when `background` (see
    /// [`Engine::seal_group`]): the next group may then be decided before
    /// this one lands, and must be sealed after.
    pub fn seal(&mut self, engine: &mut Engine, background: bool) {
        self.sealed = Some(engine.seal_group(background));
    }

    /// Wait until the group's records are durable and answer it.
    pub fn land(mut self, engine: &mut Engine) -> Group<T> {
        let durable = match self.sealed.take() {
            Some(Ok(())) => engine.group_synced(),
            Some(Err(e)) => Err(e),
            None => Err(LedgerError::Internal(
                "a commit group landed before it was sealed",
            )),
        };
        self.answer(durable)
    }

    /// Answer a group that will never be sealed: the one before it could
    /// not be made durable (`why`), and it may stand on that one.
    pub fn abandon(self, why: &LedgerError) -> Group<T> {
        let why = LedgerError::Log(crate::log::LogError::Unavailable(format!(
            "decided after a group whose records could not be made durable ({why})"
        )));
        self.answer(Err(why))
    }

    fn answer(self, durable: Result<crate::engine::GroupEnd, LedgerError>) -> Group<T> {
        let mut answered = self.answered;
        let durable = durable.map(|end| {
            // Checked once acknowledged (a pipelined group): what the log
            // holds of these operations is not what they answered.
            for (i, e) in end.changed {
                if let Some(a) = answered.get_mut(i) {
                    let machine = !e.is_refusal();
                    let failure = crate::protocol::OpError::Ledger(e).failure();
                    a.reply = Reply::Failed(failure);
                    a.machine = machine;
                }
            }
        });
        if let Err(e) = &durable {
            for a in &mut answered {
                if a.reply.is_ok() {
                    a.reply = Reply::Failed(Failure::new(
                        Code::LogError,
                        format!("the operation's records could not be made durable: {e}"),
                    ));
                    a.machine = true;
                }
            }
        }
        Group {
            answered,
            then: self.then,
            durable,
        }
    }
}

/// Decide one line of a group; after a machine failure (`stopped`) lines
/// are not applied and say why.
fn decide_line(
    engine: &mut Engine,
    stopped: &mut Option<String>,
    (grant, span, line): (&Grant, Option<SpanRef>, Line),
) -> Answered {
    match (line, &*stopped) {
        (_, Some(why)) => Answered {
            reply: Reply::Failed(Failure::new(
                Code::LogError,
                format!("not applied: an earlier operation failed: {why}"),
            )),
            op: None,
            machine: true,
        },
        (Err(failure), None) => Answered {
            reply: Reply::Failed(failure),
            op: None,
            machine: false,
        },
        (Ok(v), None) => {
            let op = v["op"].as_str().map(str::to_string);
            engine.within_span(span);
            let (reply, machine) = reply_as(engine, grant, &v);
            engine.within_span(None);
            if let (true, Reply::Failed(f)) = (machine, &reply) {
                *stopped = Some(f.error.message.clone());
            }
            Answered { reply, op, machine }
        }
    }
}
