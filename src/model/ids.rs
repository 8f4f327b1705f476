//! Deterministic ids. Every id the engine makes is a digest of what it names,
//! so a decision replayed after a crash yields the same id and deduplicates.

use sha2::{Digest, Sha256};

fn digest_hex(parts: &[&str], len: usize) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    let full = hex::encode(h.finalize());
    full[..len].to_string()
}

/// Id of the `step`-th trail step of `run`: unique per step, the same on every replay.
pub fn step_event_id(run: &str, step: u32) -> String {
    format!("ev-{}", digest_hex(&["step", run, &step.to_string()], 24))
}

/// Id of an agent event a run publishes when it closes.
pub fn agent_event_id(run: &str, event: &str) -> String {
    format!("ae-{}", digest_hex(&["emit", run, event], 24))
}

/// Id of the record that publishes version `version` of `agent`.
pub fn agent_version_event_id(agent: &str, version: u32) -> String {
    format!(
        "av-{}",
        digest_hex(&["agent", agent, &version.to_string()], 24)
    )
}

/// Run id of the listener `agent` opened by the agent event `event_id` (R3:
/// deterministic, so a second delivery finds the run already open).
pub fn listener_run_id(event_id: &str, agent: &str) -> String {
    format!("run-{}", digest_hex(&["listener", event_id, agent], 16))
}

/// How a run remembers a listener its event did not open (R3: a second
/// delivery records nothing twice).
pub fn refused_listener_key(event_id: &str, agent: &str) -> String {
    format!("{event_id}/{agent}")
}

/// The log key of a run's records: its chain root, so a chain stays in one
/// partition and in order; a run without a chain (R6) keys on itself.
pub fn chain_key<'a>(root: Option<&'a str>, run: &'a str) -> &'a str {
    root.unwrap_or(run)
}

/// Ids users give (runs, agents, tasks) are short, printable and unambiguous.
pub fn valid_name(name: &str) -> bool {
    // `.` and `..` alone name places in paths (a page's URL, a file a
    // name may one day be part of): never a run, agent or task.
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

/// A topic prefix names directories under `--data` and Kafka topics: only
/// what both accept (letters, digits, `.`, `_`, `-`; at most 100 bytes), and
/// never `.` or `..` alone, so it cannot lead out of the data dir.
/// A topic prefix that names no safe place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "topic prefix {0:?} may hold only letters, digits, '.', '_' and '-' (at most 100), \
     and may not be '.' or '..'"
)]
pub struct InvalidTopicPrefix(pub String);

pub fn check_topic_prefix(prefix: &str) -> Result<(), InvalidTopicPrefix> {
    let ok = prefix.len() <= 100
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && prefix != "."
        && prefix != "..";
    if ok {
        Ok(())
    } else {
        Err(InvalidTopicPrefix(prefix.chars().take(120).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned: listener runs found again on a redelivery (R3) and trail
    /// steps recognised on replay depend on these staying what logs hold.
    #[test]
    fn ids_are_pinned_to_what_logs_already_hold() {
        assert_eq!(
            listener_run_id("ae-5f428a5fa12764aac286d467", "reviewer"),
            LISTENER
        );
        assert_eq!(step_event_id("r1", 0), STEP);
        assert_eq!(agent_event_id("r1", "code.ready"), EMIT);
        assert_eq!(agent_version_event_id("reviewer", 2), VERSION);
    }

    const LISTENER: &str = "run-fbc3e83d36c16fe3";
    const STEP: &str = "ev-06f5cdfc4bc39861625216ec";
    const EMIT: &str = "ae-5f428a5fa12764aac286d467";
    const VERSION: &str = "av-ac73b78e16f3fc008d37a8f7";

    #[test]
    fn ids_are_deterministic_and_distinct() {
        assert_eq!(listener_run_id("e1", "a"), listener_run_id("e1", "a"));
        assert_ne!(listener_run_id("e1", "a"), listener_run_id("e1", "b"));
        assert_ne!(listener_run_id("e1a", ""), listener_run_id("e1", "a"));
        assert_ne!(step_event_id("r", 1), step_event_id("r", 2));
    }
}
