//! The values flags take beyond numbers and paths: how context is sealed,
//! and durations in seconds.

use anyhow::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SealContext {
    Auto,
    On,
    Off,
}

/// A number of seconds (fractions allowed), as a duration.
pub(super) fn seconds(s: &str) -> Result<std::time::Duration, NotSeconds> {
    s.trim()
        .parse::<f64>()
        .ok()
        .and_then(|n| std::time::Duration::try_from_secs_f64(n).ok())
        .filter(|d| *d <= std::time::Duration::from_secs(3600))
        .ok_or_else(|| NotSeconds(s.to_owned()))
}

/// A flag's value that is not a number of seconds `seconds` takes.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a number of seconds from 0 to 3600")]
pub(super) struct NotSeconds(String);
