//! Following the `published` topic for the network: a cursor over its
//! partitions that is also the event id a client resumes from, and the
//! filters a consumer may ask for. Shared by the SSE stream and the
//! WebSocket `subscribe`.

use crate::codes::{Code, Refusal};
use crate::log::{Log, LogError};
use crate::model::Topic;
use serde::Deserialize;
use serde_json::Value;
use std::time::Duration;

/// Where a reader stands: the next offset of every partition of the
/// `published` topic. Written as the offsets joined by `.` (`"12"` with
/// one partition, `"4.0.9"` with three): the id of an event is the cursor
/// just past it, so resuming from it repeats and loses nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor(pub Vec<u64>);

/// Why a cursor cannot be followed, or the topic read.
#[derive(Debug, thiserror::Error)]
pub enum CursorError {
    #[error("{0:?} is not a cursor (offsets joined by \".\", or beginning or end)")]
    NotACursor(String),
    #[error("cursor {cursor:?} names {named} partitions; the published topic has {partitions}")]
    Partitions {
        cursor: String,
        named: usize,
        partitions: u32,
    },
    #[error("cursor {cursor:?} is past the end of the published topic (partition {partition} holds {end} events, the cursor is at {at}); was it from another ledger? resume from beginning or end")]
    PastTheEnd {
        cursor: String,
        partition: usize,
        end: u64,
        at: u64,
    },
    #[error(transparent)]
    Log(#[from] LogError),
}

impl Cursor {
    /// Parse a cursor of `partitions` offsets, or `beginning` / `end`.
    pub fn parse(text: &str, log: &dyn Log) -> Result<Cursor, CursorError> {
        let parts = log.partitions(Topic::Published);
        match text.trim() {
            "beginning" => Ok(Cursor(vec![0; parts as usize])),
            "end" => Ok(Cursor::end(log)?),
            t => {
                let offsets: Vec<u64> = t
                    .split('.')
                    .map(|o| o.parse::<u64>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| CursorError::NotACursor(t.to_owned()))?;
                if offsets.len() != parts as usize {
                    return Err(CursorError::Partitions {
                        cursor: t.to_owned(),
                        named: offsets.len(),
                        partitions: parts,
                    });
                }
                // Past the end, events published later would be skipped
                // unseen (a cursor from another or a reset ledger): refused.
                let end = Cursor::end(log)?;
                if let Some((p, (at, e))) = offsets
                    .iter()
                    .zip(&end.0)
                    .enumerate()
                    .find(|(_, (at, e))| at > e)
                {
                    return Err(CursorError::PastTheEnd {
                        cursor: t.to_owned(),
                        partition: p,
                        end: *e,
                        at: *at,
                    });
                }
                Ok(Cursor(offsets))
            }
        }
    }

    /// The end of every partition: only events published from now on.
    pub fn end(log: &dyn Log) -> Result<Cursor, LogError> {
        (0..log.partitions(Topic::Published))
            .map(|p| log.end_offset(Topic::Published, p))
            .collect::<Result<_, _>>()
            .map(Cursor)
    }

    pub fn id(&self) -> String {
        self.0
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(".")
    }
}

/// Which published events a reader wants.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    /// Only events whose artifacts carry `area:` labels, every one of
    /// them inside this scope (the scope itself or below it).
    #[serde(default)]
    pub scope: Option<String>,
    /// Only events of this name.
    #[serde(default)]
    pub event: Option<String>,
}

impl Filter {
    /// Why the filter cannot be followed: a scope that names no place
    /// (`invalid_scope`), an event that is no name (`invalid_name`).
    pub fn check(&self) -> Result<(), Refusal> {
        if let Some(scope) = self.scope.as_deref() {
            if !crate::model::scope::valid_scope(scope) {
                return Err(Refusal::new(
                    Code::InvalidScope,
                    format!(
                        "scope {:?} is not a scope (segments of letters, digits, -_., never . or ..)",
                        scope.chars().take(100).collect::<String>()
                    ),
                ));
            }
        }
        if let Some(event) = self.event.as_deref() {
            if !crate::model::ids::valid_name(event) {
                return Err(Refusal::new(
                    Code::InvalidName,
                    format!(
                        "event {:?} is not a name",
                        event.chars().take(100).collect::<String>()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether `e` passes: a CloudEvent (`type`, `data.artifacts`), or an
    /// event a ledger published before CloudEvents (`event`, `artifacts`),
    /// which the topic still holds.
    pub fn admits(&self, e: &Value) -> bool {
        let cloud = e["specversion"].is_string();
        if let Some(name) = &self.event {
            let kind = if cloud { &e["type"] } else { &e["event"] };
            if kind.as_str() != Some(name.as_str()) {
                return false;
            }
        }
        if let Some(scope) = &self.scope {
            let inside = |label: &str| {
                label
                    .strip_prefix("area:")
                    .is_some_and(|area| crate::model::scope::scope_within(area, scope))
            };
            let artifacts = if cloud {
                &e["data"]["artifacts"]
            } else {
                &e["artifacts"]
            };
            // Every area the event's data belongs to must lie inside the
            // scope (R9 holds listeners to the same): one label inside is
            // not enough, or a close labelled with another tenant's area
            // would reach that tenant's feed.
            let mut areas = artifacts
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a["labels"].as_array())
                .flatten()
                .filter_map(|l| l.as_str())
                .filter(|l| l.starts_with("area:"))
                .peekable();
            if areas.peek().is_none() || !areas.all(inside) {
                return false;
            }
        }
        true
    }
}

/// One published event and the cursor just past it.
#[derive(Debug, Clone)]
pub struct Published {
    pub id: String,
    pub json: String,
}

/// The events after `cursor` that `filter` admits (the cursor moves past
/// every event read, admitted or not). Waits up to `wait` when there are
/// none yet. Blocking: call from a blocking thread.
pub fn next_batch(
    log: &dyn Log,
    cursor: &mut Cursor,
    filter: &Filter,
    wait: Duration,
) -> Result<Vec<Published>, LogError> {
    for attempt in 0..2 {
        let mut out = Vec::new();
        let mut read_any = false;
        for p in 0..cursor.0.len() {
            let records = log.read(Topic::Published, p as u32, cursor.0[p], 256)?;
            for r in records {
                read_any = true;
                cursor.0[p] = r.offset + 1;
                let Ok(v) = serde_json::from_slice::<Value>(&r.payload) else {
                    tracing::warn!(
                        partition = p,
                        offset = r.offset,
                        "a published record is not JSON; skipped"
                    );
                    continue;
                };
                if filter.admits(&v) {
                    out.push(Published {
                        id: cursor.id(),
                        json: String::from_utf8_lossy(&r.payload).into_owned(),
                    });
                }
            }
        }
        if read_any || attempt == 1 || cursor.0.is_empty() {
            return Ok(out);
        }
        // Wait on the first partition's tail; the others are read on wake.
        log.wait_beyond(Topic::Published, 0, cursor.0[0], wait)?;
    }
    Ok(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn filters_read_cloudevents_and_the_events_published_before_them() {
        let f = Filter {
            scope: Some("acme/platform".into()),
            event: Some("code.ready".into()),
        };
        let arts = json!([{"labels": ["area:acme/platform/web"]}]);
        let cloud =
            json!({"specversion": "1.0", "type": "code.ready", "data": {"artifacts": arts}});
        let old = json!({"schema": "agentledger.published_event.v1", "event": "code.ready", "artifacts": arts});
        assert!(f.admits(&cloud) && f.admits(&old));
        let other =
            json!({"specversion": "1.0", "type": "review.done", "data": {"artifacts": arts}});
        let outside =
            json!({"event": "code.ready", "artifacts": [{"labels": ["area:acme/platformer"]}]});
        assert!(!f.admits(&other) && !f.admits(&outside));
    }

    #[test]
    fn a_scope_admits_an_event_only_when_every_area_it_carries_is_inside() {
        let f = Filter {
            scope: Some("acme".into()),
            event: None,
        };
        let event = |labels: Value| json!({"specversion": "1.0", "type": "x", "data": {"artifacts": labels}});
        assert!(f.admits(&event(
            json!([{"labels": ["area:acme/a", "untrusted"]}, {"labels": ["area:acme"]}])
        )));
        // Labelled with another tenant's area too, on the same or another artifact.
        assert!(!f.admits(&event(
            json!([{"labels": ["area:acme/a", "area:zeta/secret"]}])
        )));
        assert!(!f.admits(&event(
            json!([{"labels": ["area:acme/a"]}, {"labels": ["area:zeta"]}])
        )));
        // Nothing says whose it is.
        assert!(!f.admits(&event(json!([]))));
        assert!(!f.admits(&event(json!([{"labels": ["untrusted"]}]))));
    }

    #[test]
    fn a_cursor_past_the_end_of_the_topic_is_refused_not_followed() {
        use crate::log::embedded::{EmbeddedConfig, EmbeddedLog};
        let d = tempfile::tempdir().unwrap();
        let log = EmbeddedLog::open(d.path(), &EmbeddedConfig::default()).unwrap();
        let parts = log.partitions(Topic::Published) as usize;
        log.append(Topic::Published, &[(b"k".to_vec(), b"{}".to_vec())])
            .unwrap();
        let end = Cursor::end(&log).unwrap();
        assert_eq!(Cursor::parse(&end.id(), &log).unwrap(), end);
        assert_eq!(
            Cursor::parse("beginning", &log).unwrap(),
            Cursor(vec![0; parts])
        );
        let mut past = end.0.clone();
        past[0] += 2;
        let e = Cursor::parse(&Cursor(past).id(), &log)
            .unwrap_err()
            .to_string();
        assert!(e.contains("past the end"), "{e}");
        let huge = vec![u64::MAX.to_string(); parts].join(".");
        assert!(Cursor::parse(&huge, &log)
            .unwrap_err()
            .to_string()
            .contains("past the end"));
    }
}
