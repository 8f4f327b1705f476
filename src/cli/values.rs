//! The values flags take beyond numbers and paths: how context is sealed,
//! durations in seconds, and the URL an instance advertises.

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

/// An `http://` or `https://` URL with a host and nothing that is not
/// printable ASCII: the others are told it as it is, and reach this
/// instance by it.
pub(super) fn advertised_url(s: &str) -> Result<String, NotAUrl> {
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"));
    let host = rest.map(|r| r.split(['/', '?', '#']).next().unwrap_or_default());
    match host {
        Some(h)
            if !h.is_empty() && !h.starts_with(':') && s.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            Ok(s.trim_end_matches('/').to_string())
        }
        _ => Err(NotAUrl(s.to_owned())),
    }
}

/// A flag's value that is not a URL `advertised_url` takes.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not an http:// or https:// URL with a host")]
pub(super) struct NotAUrl(String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advertised_url_is_http_or_https_with_a_host() {
        for ok in [
            "http://10.0.0.7:7000",
            "https://ledger-1.example:8443/",
            "http://[::1]:80",
        ] {
            assert!(advertised_url(ok).is_ok(), "{ok}");
        }
        assert_eq!(advertised_url("http://a:1/").unwrap(), "http://a:1");
        for bad in [
            "",
            "ledger-1:7000",
            "ftp://a",
            "http://",
            "http://:80",
            "http://a b",
            "https://\u{e9}.example",
            "http://a\n",
        ] {
            let e = advertised_url(bad).unwrap_err().to_string();
            assert!(
                e.contains("is not an http:// or https:// URL"),
                "{bad:?}: {e}"
            );
        }
    }
}
