//! What a verification finds: the first record or checkpoint that does
//! not match, and the report `verify` prints — the log's, an export's and
//! what a key's signatures and the witnesses attest. Plain data, shared by
//! every verifier in this folder.

use serde::Serialize;

/// A record (or checkpoint) that does not match what was attested.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    pub what: String,
    pub expected: String,
    pub found: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every field may come from the log or an export under audit:
        // escaped, so none can forge a line or drive the terminal.
        use crate::encode::text;
        write!(
            f,
            "{}/{}@{}: {}: expected {}, found {}",
            text(&self.topic),
            self.partition,
            self.offset,
            text(&self.what),
            text(&self.expected),
            text(&self.found)
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    pub records: u64,
    pub checkpoints: u64,
    /// Records attested by at least one checkpoint.
    pub covered: u64,
    /// The first mismatch of each partition that has one, in log order.
    pub mismatches: Vec<Mismatch>,
    /// What a verifier key's signatures attest (`verify --key`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signed: Option<SignedSummary>,
    /// Whether the log extends an older signed checkpoint (`verify
    /// --since`); a log that does not also has a mismatch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<Since>,
    /// Published events held against the ledger (`verify --published`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published: Option<u64>,
}

impl VerifyReport {
    pub fn first(&self) -> Option<&Mismatch> {
        self.mismatches.first()
    }
    pub fn clean(&self) -> bool {
        self.mismatches.is_empty()
    }
}

pub(crate) fn mismatch(
    topic: &str,
    partition: u32,
    offset: u64,
    what: impl Into<String>,
    expected: impl Into<String>,
    found: impl Into<String>,
) -> Mismatch {
    Mismatch {
        topic: topic.to_string(),
        partition,
        offset,
        what: what.into(),
        expected: expected.into(),
        found: found.into(),
    }
}

/// The mismatch naming a record whose body does not match its envelope.
pub(super) fn broken_body(
    topic: &str,
    partition: u32,
    offset: u64,
    e: crate::codec::CodecError,
) -> Mismatch {
    mismatch(
        topic,
        partition,
        offset,
        "record body does not match its digest",
        "a record whose body matches its digest",
        e.to_string(),
    )
}

/// What the signatures of one key attest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SignedSummary {
    /// The verifier key checked against.
    pub key: String,
    /// Checkpoints whose note that key signed (one per size).
    pub signed_checkpoints: u64,
    /// Checkpoints whose note carries no signature line of that key's
    /// name: another key's (one it replaced, say). They attest nothing to
    /// this key and are no fault; a line of its name that does not verify
    /// is.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub other_keys: u64,
    /// Records under a signed checkpoint whose root matched.
    pub attested: u64,
    /// What the witnesses required cosigned, when some are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub witnessed: Option<WitnessedSummary>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How far each log is witnessed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WitnessedSummary {
    /// The witness keys given.
    pub witnesses: Vec<String>,
    /// Cosignatures required of them per checkpoint.
    pub required: usize,
    /// Records under a checkpoint that enough of them cosigned.
    pub witnessed: u64,
    /// Records past each log's newest checkpoint that enough of them
    /// cosigned: attested by the ledger's key alone.
    pub unwitnessed: u64,
    /// Per log: the largest checkpoint cosigned by enough witnesses.
    pub logs: Vec<WitnessedLog>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WitnessedLog {
    pub log: String,
    pub size: u64,
    pub by: Vec<String>,
}

/// What `verify --since` found: the old checkpoint, the newest the log's
/// key signed for the same partition, and the RFC 9162 proof between them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Since {
    pub origin: String,
    pub old_size: u64,
    pub new_size: u64,
    /// Base64 hashes of the consistency proof from `old_size` to `new_size`.
    pub proof: Vec<String>,
    /// Why the log does not extend the old checkpoint, if it does not.
    pub fault: Option<String>,
}
