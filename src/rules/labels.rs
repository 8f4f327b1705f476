//! R9: labels travel with data. A run carries `area:<its agent's scope>`,
//! the labels of everything it read and those its close adds; what it
//! publishes carries all of its run's labels.

use crate::model::scope::{area_label, area_of_label, scope_within};
use crate::model::ArtifactRef;

/// Sorted union of label lists.
pub fn union(lists: &[&[String]]) -> Vec<String> {
    let mut v: Vec<String> = lists.iter().flat_map(|l| l.iter().cloned()).collect();
    v.sort();
    v.dedup();
    v
}

/// Labels of a run as it opens: its own area.
pub fn opening_labels(scope: &str) -> Vec<String> {
    vec![area_label(scope)]
}

/// A run's labels after reading an artifact.
pub fn after_read(run_labels: &[String], artifact: &ArtifactRef) -> Vec<String> {
    union(&[run_labels, &artifact.labels])
}

/// Labels of a run at close, and so of every artifact it publishes.
pub fn at_close(run_labels: &[String], close_labels: &[String]) -> Vec<String> {
    union(&[run_labels, close_labels])
}

/// The `area:` scopes a listener in `listener_scope` may not receive: those
/// of the exposed artifacts that its scope neither equals nor is an ancestor
/// of. Empty means the barrier lets the event through. No approval lifts it.
pub fn scope_barrier(listener_scope: &str, exposed: &[ArtifactRef]) -> Vec<String> {
    let mut blocked: Vec<String> = exposed
        .iter()
        .flat_map(|a| a.labels.iter())
        .filter_map(|l| area_of_label(l))
        .filter(|area| !scope_within(area, listener_scope))
        .map(str::to_string)
        .collect();
    blocked.sort();
    blocked.dedup();
    blocked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn art(labels: &[&str]) -> ArtifactRef {
        ArtifactRef {
            name: "a".into(),
            sha256: [0x00; 32],
            size: 1,
            source_run: "r".into(),
            labels: labels.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn r9_untrusted_propagates_through_reads_and_close() {
        let run = opening_labels("acme/finance");
        let after = after_read(&run, &art(&["area:acme/platform", "untrusted"]));
        assert!(after.contains(&"untrusted".to_string()));
        let closed = at_close(&after, &["reviewed".to_string()]);
        assert_eq!(
            closed,
            vec![
                "area:acme/finance",
                "area:acme/platform",
                "reviewed",
                "untrusted"
            ]
        );
    }

    #[test]
    fn r9_scope_barrier_blocks_sibling_scope_but_not_ancestor() {
        let exposed = [art(&["area:acme/platform"])];
        assert_eq!(
            scope_barrier("acme/finance", &exposed),
            vec!["acme/platform"]
        );
        assert!(scope_barrier("acme/platform", &exposed).is_empty());
        assert!(scope_barrier("acme", &exposed).is_empty());
        assert_eq!(
            scope_barrier("acme/platform/sub", &exposed),
            vec!["acme/platform"]
        );
    }
}
