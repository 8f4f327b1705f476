//! R9: labels travel with data. A run carries `area:<its agent's scope>`,
//! the labels of everything it read and those its close adds; what it
//! publishes carries all of its run's labels.

use crate::codes::Code;
use crate::codes::Refusal;
use crate::model::limits::{MAX_LABELS_PER_RUN, MAX_LABEL_BYTES};
use crate::model::scope::{area_label, area_of_label, scope_within};
use crate::model::ArtifactRef;

/// Characters that change how text around them reads without being seen:
/// bidirectional overrides and isolates, zero-width characters, and the
/// other invisible format characters. A label holding one could show as
/// another label (`untrusted` vs `un\u{200B}trusted`) in a trail.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}'
        | '\u{FFA0}' | '\u{FFF0}'..='\u{FFFB}' | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0000}'..='\u{E0FFF}')
}

/// Whether a string shows as what it is: no control, white space or
/// invisible characters.
pub fn plainly_visible(s: &str) -> bool {
    !s.chars()
        .any(|c| c.is_control() || c.is_whitespace() || invisible(c))
}

/// A label a caller adds: 1 to [`MAX_LABEL_BYTES`] bytes that show as what
/// they are (`invalid_label` otherwise).
pub fn check_label(label: &str) -> Result<(), Refusal> {
    let why = if label.is_empty() {
        "is empty"
    } else if label.len() > MAX_LABEL_BYTES {
        "is too long"
    } else if !plainly_visible(label) {
        "holds white space, a control character or an invisible character"
    } else {
        return Ok(());
    };
    Err(Refusal::new(
        Code::InvalidLabel,
        format!(
            "label {:?} {why} (labels are 1 to {MAX_LABEL_BYTES} bytes of visible characters)",
            label.chars().take(MAX_LABEL_BYTES).collect::<String>()
        ),
    ))
}

/// A run may carry at most [`MAX_LABELS_PER_RUN`] labels
/// (`too_many_labels`): every artifact it publishes carries all of them.
pub fn check_label_count(labels: &[String], what: &str) -> Result<(), Refusal> {
    if labels.len() > MAX_LABELS_PER_RUN {
        return Err(Refusal::new(
            Code::TooManyLabels,
            format!(
                "{what} would give the run {} labels; a run carries at most {MAX_LABELS_PER_RUN}",
                labels.len()
            ),
        ));
    }
    Ok(())
}

/// Sorted union of label lists.
pub use crate::model::label_union as union;

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
