//! Slots shared by every caller with a cap on what one caller holds: a
//! global count (`--max-in-flight`, `--max-streams`) and below it a share
//! for each caller, so one tenant sending as fast as it can leaves room
//! for the others. A caller is its credential as the edge knows it: the
//! principal of a JWT or client certificate, a ledger token's hash; the
//! server's own session (the operator) has no share of its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Why a slot was not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// Every slot is taken.
    All(usize),
    /// The caller holds its share already.
    Share(usize),
}

#[derive(Clone)]
pub struct Shares {
    all: Arc<Semaphore>,
    max: usize,
    per_caller: usize,
    /// Slots held, by caller; an entry lives while its caller holds one,
    /// so there are never more entries than slots.
    held: Arc<Mutex<HashMap<String, usize>>>,
}

/// A slot held until dropped.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    caller: Option<String>,
    held: Arc<Mutex<HashMap<String, usize>>>,
}

impl Shares {
    /// `max` slots in all, at most `per_caller` of them for one caller
    /// (both at least one).
    pub fn new(max: usize, per_caller: usize) -> Self {
        let max = max.max(1);
        Shares {
            all: Arc::new(Semaphore::new(max)),
            max,
            per_caller: per_caller.clamp(1, max),
            held: Arc::default(),
        }
    }

    /// A slot for `caller` (`None`: no share of its own to keep to).
    pub fn take(&self, caller: Option<&str>) -> Result<Slot, Full> {
        let permit = self
            .all
            .clone()
            .try_acquire_owned()
            .map_err(|_| Full::All(self.max))?;
        if let Some(c) = caller {
            let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            let n = held.entry(c.to_string()).or_default();
            if *n >= self.per_caller {
                return Err(Full::Share(self.per_caller));
            }
            *n += 1;
        }
        Ok(Slot {
            _permit: permit,
            caller: caller.map(str::to_string),
            held: self.held.clone(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Some(c) = &self.caller else { return };
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(c) {
            *n -= 1;
            if *n == 0 {
                held.remove(c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_caller_holds_at_most_its_share_and_leaves_room_for_others() {
        let s = Shares::new(4, 2);
        let a1 = s.take(Some("a")).unwrap();
        let _a2 = s.take(Some("a")).unwrap();
        assert_eq!(s.take(Some("a")).err(), Some(Full::Share(2)));
        let _b1 = s.take(Some("b")).unwrap();
        let _op = s.take(None).unwrap();
        assert_eq!(s.take(Some("c")).err(), Some(Full::All(4)));
        drop(a1);
        let _a3 = s.take(Some("a")).unwrap();
        assert_eq!(s.held.lock().unwrap().len(), 2);
    }

    #[test]
    fn entries_go_with_their_last_slot() {
        let s = Shares::new(8, 8);
        for i in 0..100 {
            let _ = s.take(Some(&format!("c{i}"))).unwrap();
        }
        assert!(s.held.lock().unwrap().is_empty());
        assert_eq!(s.all.available_permits(), 8);
    }
}
