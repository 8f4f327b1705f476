//! How many refusals of principals that write nothing become trail
//! steps. An auditor or a consumer may not carry out any operation, so
//! every one it sends is refused; were each kept as a step, one body of
//! refused lines would write as many records as it has lines onto the
//! trail of someone else's run. Such a principal has at most one refusal
//! recorded per [`WINDOW_MS`]; the others are refused unrecorded, counted
//! here (and in `/metrics`), and the next recorded one says how many went
//! unrecorded since the last.

use std::collections::BTreeMap;

/// The least time between two recorded refusals of one principal that
/// writes nothing.
pub const WINDOW_MS: u64 = 60_000;

#[derive(Debug, Default)]
pub struct RefusalLimit {
    /// Per principal: when its last recording was tried, and the refusals
    /// not recorded since the last one that was. At most one entry per
    /// principal that writes nothing (auditor, consumer).
    windows: BTreeMap<String, Window>,
    /// Per principal: every refusal left unrecorded, ever.
    unrecorded: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    tried_at: u64,
    pending: u64,
}

impl RefusalLimit {
    /// Whether a refusal of `principal` at `now_ms` is to be recorded:
    /// `Some(n)` with the count of refusals left unrecorded since its last
    /// recorded one, `None` when it is left unrecorded (and counted).
    pub fn admit(&mut self, principal: &str, now_ms: u64) -> Option<u64> {
        match self.windows.get_mut(principal) {
            Some(w) if now_ms.saturating_sub(w.tried_at) < WINDOW_MS => {
                w.pending += 1;
                *self.unrecorded.entry(principal.to_string()).or_default() += 1;
                None
            }
            Some(w) => {
                w.tried_at = now_ms;
                Some(w.pending)
            }
            None => {
                self.windows.insert(
                    principal.to_string(),
                    Window {
                        tried_at: now_ms,
                        pending: 0,
                    },
                );
                Some(0)
            }
        }
    }

    /// What became of a refusal [`admit`](Self::admit) let through: kept
    /// on a trail (the count it carried is settled), or not (the run was
    /// unknown or closed: it is one more left unrecorded).
    pub fn settle(&mut self, principal: &str, recorded: bool) {
        if let Some(w) = self.windows.get_mut(principal) {
            if recorded {
                w.pending = 0;
            } else {
                w.pending += 1;
                *self.unrecorded.entry(principal.to_string()).or_default() += 1;
            }
        }
    }

    /// Refusals left unrecorded, by principal, since the engine opened.
    pub fn unrecorded(&self) -> impl Iterator<Item = (&str, u64)> {
        self.unrecorded.iter().map(|(p, n)| (p.as_str(), *n))
    }
}

/// The message a recorded refusal carries when others went unrecorded
/// before it.
pub fn with_unrecorded(message: &str, unrecorded: u64) -> String {
    match unrecorded {
        0 => message.to_string(),
        n => format!(
            "{message} ({n} more refused since the last recorded, not recorded: at most one a minute is kept for a principal that writes nothing)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_refusal_a_minute_is_recorded_and_the_next_carries_the_count() {
        let mut l = RefusalLimit::default();
        assert_eq!(l.admit("consumer", 1_000), Some(0));
        l.settle("consumer", true);
        for t in 0..4_095 {
            assert_eq!(l.admit("consumer", 1_000 + t), None);
        }
        // Another principal has its own window.
        assert_eq!(l.admit("auditor", 2_000), Some(0));
        l.settle("auditor", true);
        assert_eq!(l.admit("consumer", 1_000 + WINDOW_MS - 1), None);
        assert_eq!(l.admit("consumer", 1_000 + WINDOW_MS), Some(4_096));
        l.settle("consumer", true);
        assert_eq!(l.admit("consumer", 1_000 + WINDOW_MS + 1), None);
        let counted: Vec<_> = l.unrecorded().collect();
        assert_eq!(counted, vec![("consumer", 4_097)]);
    }

    #[test]
    fn a_refusal_that_found_no_open_run_stays_counted() {
        let mut l = RefusalLimit::default();
        assert_eq!(l.admit("consumer", 0), Some(0));
        l.settle("consumer", false);
        assert_eq!(l.admit("consumer", 1), None);
        assert_eq!(l.admit("consumer", WINDOW_MS), Some(2));
        assert_eq!(l.unrecorded().collect::<Vec<_>>(), vec![("consumer", 2)]);
    }

    #[test]
    fn the_message_says_how_many_went_unrecorded() {
        assert_eq!(with_unrecorded("no", 0), "no");
        assert!(with_unrecorded("no", 7).starts_with("no (7 more refused"));
    }
}
