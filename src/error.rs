//! Typed errors of the library. Each refusal a user can cause has a stable
//! snake_case code; the binary turns them into answers and exit codes.

use crate::codes::{Code, Refusal};
use crate::log::LogError;
use crate::rules::decide::{DecideError, StateError};

/// Everything that can go wrong inside the engine.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("log: {0}")]
    Log(LogError),
    #[error("codec: {0}")]
    Codec(#[from] crate::codec::CodecError),
    #[error("views: {0}")]
    Views(#[from] crate::views::ViewError),
    #[error("content store: {0}")]
    Store(crate::content::store::StoreError),
    /// Another process holds the data directory.
    #[error("data dir {0} is in use by another agentledger process")]
    DataDirInUse(std::path::PathBuf),
    /// A file or directory of the data dir could not be made, moved or
    /// written.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A record the log serves whole (its frame checks) does not decode:
    /// damage the checksum did not catch, or a forgery.
    #[error("record {topic}/{partition}@{offset} cannot be decoded: {source} (run `agentledger verify`)")]
    Undecodable {
        topic: crate::model::Topic,
        partition: u32,
        offset: u64,
        #[source]
        source: crate::codec::CodecError,
    },
    /// A record the views point to is not in the log.
    #[error("{topic}/{partition}@{offset} is missing from the log (the views point to it; run `agentledger verify`)")]
    MissingRecord {
        topic: crate::model::Topic,
        partition: u32,
        offset: u64,
    },
    /// A task's key (see `crate::erasure`) cannot be made, read or deleted.
    #[error(transparent)]
    Keys(#[from] crate::erasure::keys::KeyError),
    /// The Merkle tiles (derived data) cannot be read or written.
    #[error(transparent)]
    Tiles(#[from] crate::audit::tiles::TileError),
    /// A thread of the engine's own failed (a bug).
    #[error("internal: {0}")]
    Internal(&'static str),
}

impl From<DecideError> for LedgerError {
    fn from(e: DecideError) -> Self {
        match e {
            DecideError::Refused(r) => LedgerError::Refused(r),
            DecideError::State(StateError::Inconsistent(why)) => {
                LedgerError::Views(crate::views::ViewError::Inconsistent(why))
            }
            // The engine decides over the views: their reader's errors
            // are view errors.
            DecideError::State(StateError::Unreadable(e)) => {
                match e.downcast::<crate::views::ViewError>() {
                    Ok(v) => LedgerError::Views(*v),
                    Err(_) => LedgerError::Internal("a decision's state reader failed"),
                }
            }
        }
    }
}

impl LedgerError {
    /// An IO failure on the data dir, saying what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        LedgerError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Bytes over a size limit are the caller's fault: a refusal naming the
/// limit, after which the next operation applies.
impl From<LogError> for LedgerError {
    fn from(e: LogError) -> Self {
        match e {
            LogError::TooLarge { .. } => Refusal::new(Code::TooLarge, e.to_string()).into(),
            e => LedgerError::Log(e),
        }
    }
}

impl From<crate::content::store::StoreError> for LedgerError {
    fn from(e: crate::content::store::StoreError) -> Self {
        match e {
            crate::content::store::StoreError::TooLarge { .. } => {
                Refusal::new(Code::TooLarge, e.to_string()).into()
            }
            // The cluster holding the shared content is the log's: its
            // failures are the log's (503, retry).
            crate::content::store::StoreError::Shared(e) => e.into(),
            e => LedgerError::Store(e),
        }
    }
}

impl LedgerError {
    /// The stable code of a refusal, or a generic code for internal failures.
    pub fn code(&self) -> Code {
        match self {
            LedgerError::Refused(r) => r.code,
            LedgerError::Log(_) => Code::LogError,
            LedgerError::Codec(_) => Code::CorruptRecord,
            LedgerError::Views(_) | LedgerError::Tiles(_) => Code::ViewError,
            LedgerError::Store(_) => Code::ContentStoreError,
            LedgerError::DataDirInUse(_) => Code::DataDirInUse,
            LedgerError::Io { .. } | LedgerError::Keys(_) => Code::IoError,
            LedgerError::Undecodable { .. } | LedgerError::MissingRecord { .. } => {
                Code::CorruptRecord
            }
            LedgerError::Internal(_) => Code::InternalError,
        }
    }

    /// True when the error is the caller's (a refusal), not the machine's.
    pub fn is_refusal(&self) -> bool {
        matches!(self, LedgerError::Refused(_))
    }
}

pub type Result<T, E = LedgerError> = std::result::Result<T, E>;
