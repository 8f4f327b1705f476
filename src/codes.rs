//! The stable code of every answer that is not ok: one enum for the chain
//! rules, the context rules, the request parser and the machine's own
//! failures, serialised as the snake_case string scripts match on.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! codes {
    ($( $(#[$doc:meta])* $variant:ident = $text:literal, )*) => {
        /// A refusal or failure code. The string (`as_str`, serde) is the
        /// contract; the variant name may change.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Code {
            $( $(#[$doc])* $variant, )*
        }

        impl Code {
            /// Every code, in declaration order.
            pub const ALL: &'static [Code] = &[$( Code::$variant, )*];

            /// The stable snake_case spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Code::$variant => $text, )*
                }
            }

            /// The code a spelling names, if any.
            pub fn parse(s: &str) -> Option<Code> {
                match s {
                    $( $text => Some(Code::$variant), )*
                    _ => None,
                }
            }
        }
    };
}

impl schemars::JsonSchema for Code {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Code".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let all: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        schemars::json_schema!({"type": "string", "enum": all})
    }
}

codes! {
    // The request itself.
    /// Not UTF-8, or not JSON.
    MalformedJson = "malformed_json",
    /// JSON of the wrong shape: a missing or mistyped field, a key twice.
    InvalidRequest = "invalid_request",
    UnknownOp = "unknown_op",
    LineTooLong = "line_too_long",
    InvalidName = "invalid_name",
    InvalidScope = "invalid_scope",
    InvalidLabel = "invalid_label",
    /// A run would carry more labels than `limits::MAX_LABELS_PER_RUN`.
    TooManyLabels = "too_many_labels",
    /// A count over one of `limits`.
    LimitExceeded = "limit_exceeded",
    /// Bytes over a size limit (a record, an artifact, a blob).
    TooLarge = "too_large",
    // Agents, runs and artifacts (R1–R10).
    UnknownAgent = "unknown_agent",
    UnknownRun = "unknown_run",
    RunExists = "run_exists",
    RunClosed = "run_closed",
    /// R8: a content ref where an artifact name belongs.
    RefNotAllowed = "ref_not_allowed",
    NotInContract = "not_in_contract",
    NoContract = "no_contract",
    BudgetExhausted = "budget_exhausted",
    /// The content store has no bytes for an artifact (another instance's).
    ContentUnavailable = "content_unavailable",
    /// Another writer decided the same step first.
    Conflict = "conflict",
    // Tasks and contexts (R11–R15).
    UnknownTask = "unknown_task",
    InvalidContext = "invalid_context",
    SchemaUnavailable = "schema_unavailable",
    NotYourContext = "not_your_context",
    NotMaster = "not_master",
    DependencyPending = "dependency_pending",
    SubtaskOutstanding = "subtask_outstanding",
    DuplicateSubtask = "duplicate_subtask",
    TaskExists = "task_exists",
    UnknownSubtask = "unknown_subtask",
    AlreadyReturned = "already_returned",
    AlreadyEvaluated = "already_evaluated",
    NotReturned = "not_returned",
    DigestMismatch = "digest_mismatch",
    Expired = "expired",
    NotGranted = "not_granted",
    BadUri = "bad_uri",
    UnknownBlob = "unknown_blob",
    BlobMissing = "blob_missing",
    MediaTypeMismatch = "media_type_mismatch",
    // Identity.
    /// No credential, or one that is unknown, revoked or expired (HTTP 401).
    Unauthenticated = "unauthenticated",
    /// The caller is known but may not do what it asked (HTTP 403).
    Forbidden = "forbidden",
    /// `revoke_token` names a token never issued.
    UnknownToken = "unknown_token",
    // The machine's failures, not the caller's.
    LogError = "log_error",
    /// Another process holds the data dir.
    DataDirInUse = "data_dir_in_use",
    IoError = "io_error",
    CorruptRecord = "corrupt_record",
    ViewError = "view_error",
    ContentStoreError = "content_store_error",
    InternalError = "internal_error",
    // The network face.
    /// No such resource (a tile not held yet, a log without a signed
    /// checkpoint): HTTP 404.
    NotFound = "not_found",
    /// More requests at once than the server answers; retry after a
    /// moment (HTTP 503 with `Retry-After`).
    Overloaded = "overloaded",
    /// No answer in time; the operation may still be carried out.
    Timeout = "timeout",
    /// The server is stopping.
    ShuttingDown = "shutting_down",
    /// The instance asked does not decide the chain's ledger partition
    /// (ownership moved while the request was forwarded, or the owner
    /// could not be reached); ask again in a moment (HTTP 503 with
    /// `Retry-After`).
    NotOwner = "not_owner",
}

impl Code {
    /// The caller's doing (a refusal), as opposed to the machine's failure.
    pub fn is_refusal(self) -> bool {
        !matches!(
            self,
            Code::LogError
                | Code::DataDirInUse
                | Code::IoError
                | Code::CorruptRecord
                | Code::ViewError
                | Code::ContentStoreError
                | Code::InternalError
                | Code::SchemaUnavailable
                | Code::Overloaded
                | Code::Timeout
                | Code::ShuttingDown
        )
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Code {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_spelled_once_and_serialises_as_spelled() {
        let mut seen = std::collections::BTreeSet::new();
        for &c in Code::ALL {
            assert!(seen.insert(c.as_str()), "{c} twice");
            assert_eq!(
                serde_json::to_value(c).unwrap(),
                serde_json::json!(c.as_str())
            );
            assert_eq!(Code::parse(c.as_str()), Some(c));
            assert!(c
                .as_str()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_'));
        }
        assert_eq!(Code::parse("nope"), None);
    }
}

/// A refusal: the request was understood but the ledger will not do it.
/// The code is stable (scripts match on it); the message is for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub code: Code,
    pub message: String,
}

impl Refusal {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}
