//! Retried tool calls: a client or framework that lost an answer sends the
//! call again, and must get the first answer back rather than a second
//! decision (`run_closed` for a second close). What identifies a call, and
//! the answers kept for it.

use rmcp::model::CallToolResult;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// The `_meta` key a client may give a tool call's idempotency key under
/// (where no session ties a retry to the first call).
pub const IDEMPOTENCY_KEY: &str = "agentledger/idempotencyKey";

/// Tool results already given, so that a call retried after its answer
/// was lost (clients and frameworks retry) gets that answer again rather
/// than a second decision (`run_closed` for a second close). At most
/// `cap` are kept, the oldest forgotten first.
pub struct Answered {
    cap: usize,
    kept: Mutex<(HashMap<String, CallToolResult>, VecDeque<String>)>,
}

impl Answered {
    pub fn new(cap: usize) -> Answered {
        Answered {
            cap,
            kept: Mutex::new((HashMap::new(), VecDeque::new())),
        }
    }

    /// What a call of identity `key` was answered, if it was.
    pub fn get(&self, key: &str) -> Option<CallToolResult> {
        self.kept.lock().ok()?.0.get(key).cloned()
    }

    /// Remember the answer to the call of identity `key`.
    pub fn put(&self, key: String, result: &CallToolResult) {
        let Ok(mut kept) = self.kept.lock() else {
            return;
        };
        let (map, order) = &mut *kept;
        if map.insert(key.clone(), result.clone()).is_none() {
            order.push_back(key);
        }
        while order.len() > self.cap {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }
}

/// The identity of a tool call for retries: the caller and run it is for,
/// then the client's idempotency key if it gave one, else the JSON-RPC
/// id within its session. `None` when neither ties a retry to it.
pub fn call_identity(
    who: &str,
    run: &str,
    session: Option<&str>,
    id: &rmcp::model::RequestId,
    meta: Option<&rmcp::model::RequestMetaObject>,
) -> Option<String> {
    let key = meta
        .and_then(|m| m.0 .0.get(IDEMPOTENCY_KEY))
        .and_then(Value::as_str);
    match (key, session) {
        (Some(k), _) => Some(format!("{who}\u{0}{run}\u{0}key\u{0}{k}")),
        (None, Some(s)) => Some(format!("{who}\u{0}{run}\u{0}session\u{0}{s}\u{0}{id}")),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock;

    #[test]
    fn answers_kept_for_retries_are_bounded_oldest_first() {
        let kept = Answered::new(2);
        let r = |t: &str| CallToolResult::success(vec![ContentBlock::text(t.to_string())]);
        kept.put("a".into(), &r("1"));
        kept.put("b".into(), &r("2"));
        kept.put("a".into(), &r("1"));
        kept.put("c".into(), &r("3"));
        assert!(kept.get("a").is_none(), "the oldest is forgotten");
        assert!(kept.get("b").is_some() && kept.get("c").is_some());
    }

    #[test]
    fn a_call_without_a_session_or_key_has_no_identity() {
        let id = rmcp::model::RequestId::Number(7);
        assert_eq!(call_identity("agent:a", "r", None, &id, None), None);
        let s = call_identity("agent:a", "r", Some("s1"), &id, None).unwrap();
        let other = call_identity("agent:b", "r", Some("s1"), &id, None).unwrap();
        assert_ne!(s, other, "another caller's call is another call");
    }
}
