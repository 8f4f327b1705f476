//! Scopes are paths like `acme/platform`; `acme` is an ancestor of it.

/// True when `scope` is `ancestor` itself or lies below it.
/// `acme` contains `acme/platform` but not `acmex`.
pub fn scope_within(scope: &str, ancestor: &str) -> bool {
    if ancestor.is_empty() {
        return false;
    }
    scope == ancestor
        || (scope.len() > ancestor.len()
            && scope.starts_with(ancestor)
            && scope.as_bytes()[ancestor.len()] == b'/')
}

/// The label every run and artifact of an agent in `scope` carries.
pub fn area_label(scope: &str) -> String {
    format!("area:{scope}")
}

/// The scope named by an `area:` label, if the label is one.
pub fn area_of_label(label: &str) -> Option<&str> {
    label.strip_prefix("area:")
}

/// A scope is a non-empty `/`-separated path of at most
/// [`crate::model::limits::MAX_SCOPE_BYTES`] bytes, of non-empty segments made of
/// letters, digits, `-`, `_` and `.`; a segment is never `.` or `..`, so a
/// scope names one place (`acme/../etc` is not `etc`).
pub fn valid_scope(scope: &str) -> bool {
    !scope.is_empty()
        && scope.len() <= crate::model::limits::MAX_SCOPE_BYTES
        && scope.split('/').all(|seg| {
            !seg.is_empty()
                && seg != "."
                && seg != ".."
                && seg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestry() {
        assert!(scope_within("acme/platform", "acme"));
        assert!(scope_within("acme", "acme"));
        assert!(!scope_within("acmex", "acme"));
        assert!(!scope_within("acme", "acme/platform"));
        assert!(!scope_within("acme/finance", "acme/platform"));
    }

    #[test]
    fn validity() {
        assert!(valid_scope("acme/platform"));
        assert!(!valid_scope(""));
        assert!(!valid_scope("acme//x"));
        assert!(!valid_scope("acme/pl atform"));
        assert!(!valid_scope("acme/../etc"));
        assert!(!valid_scope("./acme"));
        assert!(valid_scope("acme/v1.2"));
    }
}
