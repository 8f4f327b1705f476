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

/// Decide `lines`, each a request made by the grant beside it (callers
/// of one group may differ) within the span beside it, if any (its
/// records name it: see [`Engine::within_span`]), in order as one commit group, then run `then`
/// inside the same group (the serve loop's dispatch sweep) unless an
/// operation found the log failing. After a machine failure the remaining
/// lines are not applied and say why.
pub fn reply_group<'g, T>(
    engine: &mut Engine,
    lines: impl IntoIterator<Item = (&'g Grant, Option<SpanRef>, Line)>,
    then: Option<impl FnOnce(&mut Engine) -> T>,
) -> Group<T> {
    let mut stopped: Option<String> = None;
    let mut answered = Vec::new();
    engine.begin_group();
    for (i, (grant, span, line)) in lines.into_iter().enumerate() {
        engine.group_op(Some(i));
        let a = match (line, &stopped) {
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
                    stopped = Some(f.error.message.clone());
                }
                Answered { reply, op, machine }
            }
        };
        answered.push(a);
    }
    engine.group_op(None);
    let then = match (then, &stopped) {
        (Some(f), None) => Some(f(engine)),
        _ => None,
    };
    let durable = engine.end_group().map(|end| {
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
        then,
        durable,
    }
}
