//! Write-behind for the views: committed view changes wait here briefly and
//! reach sled together, in one batch. An operation on Kafka is answered
//! after the broker's acknowledgement; a sled batch per operation on top of
//! that round trip cost a quarter of the ingest rate, while one batch every
//! few milliseconds costs little (sled's price is per batch far more than
//! per key, and a run rewritten by consecutive operations is written once).
//!
//! Every read of the views looks here first, so no reader can tell the
//! difference. What is lost if the process dies before a flush is exactly
//! what sled itself loses before its own fsync: view changes whose offsets
//! were not written either, so the projector applies those records again.
//! Each flush carries whole commits (the buffer only ever holds complete
//! ones), so views on disk always sit at a commit boundary.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::time::{Duration, Instant};

/// One key's latest value; `None` removes it.
pub(crate) type Change = (Vec<u8>, Option<Vec<u8>>);

/// When buffered changes go to sled.
#[derive(Debug, Clone, Copy)]
pub struct FlushPolicy {
    /// Oldest a buffered change may get before the next commit flushes.
    pub max_age: Duration,
    /// Most keys held; a commit that reaches it flushes.
    pub max_keys: usize,
}

impl Default for FlushPolicy {
    fn default() -> Self {
        Self {
            max_age: Duration::from_millis(20),
            max_keys: 4096,
        }
    }
}

#[derive(Default)]
pub(crate) struct Buffer {
    changes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    oldest: Option<Instant>,
}

impl Buffer {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// What the buffer says of a key: `Some(None)` means removed.
    pub fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.changes.get(key).map(|v| v.as_deref())
    }

    pub fn absorb(&mut self, changes: impl IntoIterator<Item = Change>) {
        self.oldest.get_or_insert_with(Instant::now);
        self.changes.extend(changes);
    }

    pub fn due(&self, policy: &FlushPolicy) -> bool {
        self.changes.len() >= policy.max_keys
            || self.oldest.is_some_and(|t| t.elapsed() >= policy.max_age)
    }

    /// Everything buffered, as one sled batch; the buffer is left empty.
    pub fn take_batch(&mut self) -> sled::Batch {
        self.oldest = None;
        let mut batch = sled::Batch::default();
        for (k, v) in std::mem::take(&mut self.changes) {
            match v {
                Some(v) => batch.insert(k, v),
                None => batch.remove(k),
            }
        }
        batch
    }

    /// The buffered changes inside a key range, in key order.
    pub fn range(&self, range: (Bound<Vec<u8>>, Bound<Vec<u8>>)) -> Vec<Change> {
        self.changes
            .range(range)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// Sled's entries in a range overlaid with the buffered changes of that
/// range: a buffered value replaces sled's, a buffered removal hides it.
pub struct Merged<I: Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>> {
    stored: std::iter::Peekable<I>,
    buffered: std::iter::Peekable<std::vec::IntoIter<Change>>,
}

impl<I: Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>> Merged<I> {
    pub fn new(stored: I, buffered: Vec<Change>) -> Self {
        Self {
            stored: stored.peekable(),
            buffered: buffered.into_iter().peekable(),
        }
    }
}

impl<I: Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>> Iterator for Merged<I> {
    type Item = sled::Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let stored_first = match (self.stored.peek(), self.buffered.peek()) {
                (None, None) => return None,
                (Some(Err(_)), _) => true,
                (Some(Ok((sk, _))), Some((bk, _))) => sk.as_ref() < bk.as_slice(),
                (Some(Ok(_)), None) => true,
                (None, Some(_)) => false,
            };
            if stored_first {
                return self
                    .stored
                    .next()
                    .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())));
            }
            let (key, value) = self.buffered.next()?;
            if matches!(self.stored.peek(), Some(Ok((sk, _))) if sk.as_ref() == key.as_slice()) {
                self.stored.next();
            }
            if let Some(value) = value {
                return Some(Ok((key, value)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(keys: &[(&str, &str)]) -> Vec<sled::Result<(sled::IVec, sled::IVec)>> {
        keys.iter()
            .map(|(k, v)| {
                Ok((
                    sled::IVec::from(k.as_bytes()),
                    sled::IVec::from(v.as_bytes()),
                ))
            })
            .collect()
    }

    fn merged(s: &[(&str, &str)], b: &[(&str, Option<&str>)]) -> Vec<(String, String)> {
        let buffered = b
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
            .collect();
        Merged::new(stored(s).into_iter(), buffered)
            .map(|r| {
                let (k, v) = r.unwrap();
                (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap())
            })
            .collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn buffered_values_replace_insert_and_hide_stored_ones_in_key_order() {
        let got = merged(
            &[("a", "1"), ("c", "3"), ("e", "5"), ("g", "7")],
            &[
                ("b", Some("2")),
                ("c", Some("33")),
                ("e", None),
                ("h", Some("8")),
                ("z", None),
            ],
        );
        assert_eq!(
            got,
            pairs(&[("a", "1"), ("b", "2"), ("c", "33"), ("g", "7"), ("h", "8")])
        );
        assert_eq!(merged(&[], &[("x", None)]), pairs(&[]));
        assert_eq!(merged(&[("x", "1")], &[]), pairs(&[("x", "1")]));
    }

    #[test]
    fn a_stored_error_is_passed_on() {
        let s = vec![Err(sled::Error::Unsupported("boom".into()))];
        let mut m = Merged::new(s.into_iter(), vec![(b"a".to_vec(), Some(b"1".to_vec()))]);
        assert!(m.next().unwrap().is_err());
        assert_eq!(m.next().unwrap().unwrap().0, b"a".to_vec());
    }

    #[test]
    fn the_buffer_is_due_by_size_or_age() {
        let mut b = Buffer::default();
        let policy = FlushPolicy {
            max_age: Duration::from_secs(3600),
            max_keys: 2,
        };
        assert!(!b.due(&policy));
        b.absorb([(b"a".to_vec(), Some(vec![1]))]);
        assert!(!b.due(&policy));
        b.absorb([(b"b".to_vec(), None)]);
        assert!(b.due(&policy));
        assert_eq!(b.get(b"b"), Some(None));
        assert_eq!(b.get(b"a"), Some(Some(&[1u8][..])));
        let _ = b.take_batch();
        assert!(b.is_empty() && !b.due(&policy));
        let young = FlushPolicy {
            max_age: Duration::ZERO,
            max_keys: 100,
        };
        b.absorb([(b"c".to_vec(), Some(vec![]))]);
        assert!(b.due(&young));
    }
}
