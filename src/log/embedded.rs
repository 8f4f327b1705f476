//! The embedded log: our own append-only segment files, no server.
//!
//! Layout: `<dir>/<prefix><topic>/<partition>/<base offset>.seg`. A frame is
//! `u32 LE len | u32 LE crc32 | u32 LE key len | key | payload`, where `len`
//! counts everything after the crc and the crc covers the same bytes.
//!
//! Durability: `append` writes its frames and returns only after an fsync
//! that covers them. Concurrent appenders share fsyncs (group commit): one
//! caller syncs for every frame written before it, so throughput under load
//! is not one fsync per record. Readers never see a record before it is
//! synced. On open, a torn tail (a frame cut short or failing its checksum
//! at the end of the last segment, as a crash mid-write leaves it) is cut
//! off and logged; a bad frame followed by good ones is corruption, not a
//! tear, and opening fails naming the file and position, cutting nothing.

use super::{partition_for_key, Log, LogError, LogRecord, RecordRef};
use crate::model::Topic;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const HEADER: usize = 8;
/// Largest frame the log accepts (key + payload).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;
const SEGMENT_ROLL_BYTES: u64 = 128 * 1024 * 1024;

/// Partition counts of a new embedded log.
#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    pub topic_prefix: String,
    pub ledger_partitions: u32,
    pub segment_roll_bytes: u64,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        Self {
            topic_prefix: String::new(),
            ledger_partitions: 4,
            segment_roll_bytes: SEGMENT_ROLL_BYTES,
        }
    }
}

struct Segment {
    base: u64,
    path: PathBuf,
    file: Arc<File>,
    /// File position of each record's frame.
    positions: Vec<u64>,
    len: u64,
}

struct PartState {
    segments: Vec<Segment>,
    next_offset: u64,
}

struct Partition {
    label: String,
    dir: PathBuf,
    /// Opened by a reader that must change nothing (auditor and status
    /// commands): appends are refused and a torn tail is left in place.
    read_only: bool,
    state: Mutex<PartState>,
    /// Offsets below this are fsynced and visible to readers.
    synced: Mutex<u64>,
    synced_cv: Condvar,
    roll_bytes: u64,
    /// The log's count of fdatasync calls (see `Log::syncs`).
    syncs: Arc<std::sync::atomic::AtomicU64>,
}

pub struct EmbeddedLog {
    dir: PathBuf,
    topics: BTreeMap<Topic, Vec<Partition>>,
    /// Inside a group (`Log::begin_group`): appends are written but made
    /// durable — and visible — only by `end_group`, with one fdatasync per
    /// partition written for the whole group.
    grouping: std::sync::atomic::AtomicBool,
    /// fdatasync calls made for appends, shared with every partition.
    syncs: Arc<std::sync::atomic::AtomicU64>,
    /// Torn tails a read-only open found and left in place.
    torn: Vec<TornTail>,
}

fn frame_crc(body: &[u8]) -> u32 {
    crc32fast::hash(body)
}

fn encode_frame(key: &[u8], payload: &[u8], out: &mut Vec<u8>) {
    let len = (4 + key.len() + payload.len()) as u32;
    let start = out.len();
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(payload);
    let crc = frame_crc(&out[start + HEADER..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// What scanning a frame at a position found.
enum Scan {
    Good {
        next: u64,
    },
    /// `torn`: what a crash mid-append leaves (a frame cut short, or space
    /// the file system allocated but never filled); anything else is damage.
    Bad {
        why: String,
        torn: bool,
    },
    End,
}

fn scan_frame(buf: &[u8], pos: usize) -> Scan {
    if pos == buf.len() {
        return Scan::End;
    }
    if buf.len() - pos < HEADER + 4 {
        return Scan::Bad {
            why: format!(
                "{} stray bytes where a frame header should be",
                buf.len() - pos
            ),
            torn: true,
        };
    }
    let len = u32::from_le_bytes(buf[pos..pos + 4].try_into().unwrap_or_default()) as usize;
    let crc = u32::from_le_bytes(buf[pos + 4..pos + 8].try_into().unwrap_or_default());
    if !(4..=MAX_FRAME_BYTES + 4).contains(&len) {
        return Scan::Bad {
            why: format!("frame length {len} is impossible"),
            torn: buf[pos..].iter().all(|b| *b == 0),
        };
    }
    if buf.len() - pos - HEADER < len {
        return Scan::Bad {
            why: format!(
                "frame of {len} bytes runs past the end of the file ({} left)",
                buf.len() - pos - HEADER
            ),
            torn: true,
        };
    }
    let body = &buf[pos + HEADER..pos + HEADER + len];
    if frame_crc(body) != crc {
        return Scan::Bad {
            why: "frame checksum does not match".into(),
            torn: body.iter().all(|b| *b == 0),
        };
    }
    let key_len = u32::from_le_bytes(body[0..4].try_into().unwrap_or_default()) as usize;
    if key_len > len - 4 {
        return Scan::Bad {
            why: format!("key length {key_len} exceeds the frame"),
            torn: false,
        };
    }
    Scan::Good {
        next: (pos + HEADER + len) as u64,
    }
}

/// What [`scan_segment`] found in a segment's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentScan {
    /// Where each whole frame before the first bad one starts.
    pub frames: Vec<u64>,
    /// The first bytes that are not a whole frame, if any.
    pub bad: Option<BadFrame>,
}

/// Bytes of a segment that are not a whole frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadFrame {
    pub at: u64,
    pub why: String,
    /// What a crash mid-append leaves (a frame cut short, or space the file
    /// system allocated but never filled) with no whole frame after it: at
    /// the end of the last segment, cut on open. Otherwise it is damage.
    pub torn: bool,
}

/// Read a segment's bytes as frames: the frame decoder of the embedded
/// log, for any bytes (a damaged or hostile file gives a [`BadFrame`],
/// never a panic).
pub fn scan_segment(buf: &[u8]) -> SegmentScan {
    let mut frames = Vec::new();
    let mut pos = 0usize;
    loop {
        match scan_frame(buf, pos) {
            Scan::End => return SegmentScan { frames, bad: None },
            Scan::Good { next } => {
                frames.push(pos as u64);
                pos = next as usize;
            }
            Scan::Bad { why, torn } => {
                let torn = torn
                    && !(pos + 1..buf.len())
                        .any(|p| matches!(scan_frame(buf, p), Scan::Good { .. }));
                return SegmentScan {
                    frames,
                    bad: Some(BadFrame {
                        at: pos as u64,
                        why,
                        torn,
                    }),
                };
            }
        }
    }
}

/// The (key, payload) of the frame at the start of `buf`, if it is whole
/// and its checksum matches.
fn parse_frame(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(buf.get(0..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(buf.get(4..8)?.try_into().ok()?);
    let body = buf.get(HEADER..HEADER + len)?;
    if frame_crc(body) != crc {
        return None;
    }
    let key_len = u32::from_le_bytes(body.get(0..4)?.try_into().ok()?) as usize;
    let key = body.get(4..4 + key_len)?;
    let payload = body.get(4 + key_len..)?;
    Some((key, payload))
}

fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| LogError::io(format!("fsync directory {}", dir.display()), e))
}

fn segment_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(format!("{base:020}.seg"))
}

fn open_segment_file(path: &Path, read_only: bool) -> Result<File, LogError> {
    let mut o = crate::private_files::options();
    o.read(true);
    if !read_only {
        o.append(true).create(true);
    }
    o.open(path)
        .map_err(|e| LogError::io(format!("open segment {}", path.display()), e))
}

/// How a partition is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// A writer: creates what is missing and cuts a torn tail.
    Write,
    /// A reader that changes nothing.
    ReadOnly,
}

impl Partition {
    fn open(
        dir: PathBuf,
        label: String,
        roll_bytes: u64,
        access: Access,
        may_cut: &dyn Fn(u64) -> Result<(), String>,
    ) -> Result<(Self, Option<TornTail>), LogError> {
        let read_only = access == Access::ReadOnly;
        let mut left_torn = None;
        if read_only && !dir.exists() {
            return Ok((Self::empty(dir, label, roll_bytes), None));
        }
        if !read_only {
            crate::private_files::create_dir_all(&dir)
                .map_err(|e| LogError::io(format!("create {}", dir.display()), e))?;
        }
        let mut bases: Vec<u64> = fs::read_dir(&dir)
            .map_err(|e| LogError::io(format!("list {}", dir.display()), e))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().to_string();
                name.strip_suffix(".seg")
                    .and_then(|b| b.parse::<u64>().ok())
            })
            .collect();
        bases.sort_unstable();
        if bases.is_empty() {
            if read_only {
                return Ok((Self::empty(dir, label, roll_bytes), None));
            }
            bases.push(0);
            let path = segment_path(&dir, 0);
            open_segment_file(&path, false)?;
            sync_dir(&dir)?;
        }
        let mut segments = Vec::with_capacity(bases.len());
        let mut next_offset = bases[0];
        let count = bases.len();
        for (i, base) in bases.into_iter().enumerate() {
            let path = segment_path(&dir, base);
            if base != next_offset {
                return Err(LogError::Corrupt(format!(
                    "{}: segment starts at offset {base} but the previous one ends at {next_offset}",
                    path.display()
                )));
            }
            let buf = fs::read(&path)
                .map_err(|e| LogError::io(format!("read segment {}", path.display()), e))?;
            let last = i + 1 == count;
            let scanned = scan_segment(&buf);
            let positions = scanned.frames;
            let mut pos = buf.len();
            if let Some(bad) = scanned.bad {
                pos = bad.at as usize;
                let why = bad.why;
                // A tear only ever affects the end of the last segment: if a
                // good frame follows the bad one, this is damage in the
                // middle of the log and cutting would lose data.
                if !last || !bad.torn {
                    return Err(LogError::Corrupt(format!(
                        "{} at byte {pos} (record offset {}): {why}; this is damage, not a torn tail from a crash, so nothing was cut",
                        path.display(),
                        base + positions.len() as u64
                    )));
                }
                if read_only {
                    tracing::warn!(
                        segment = %path.display(),
                        position = pos,
                        bytes = buf.len() - pos,
                        "torn tail: {why}; left in place (opened read-only; \
                         the next writer to open the log cuts it)"
                    );
                    left_torn = Some(TornTail {
                        partition: label.clone(),
                        segment: path.clone(),
                        at_byte: pos as u64,
                        bytes: (buf.len() - pos) as u64,
                        why,
                    });
                } else {
                    let first = base + positions.len() as u64;
                    if let Err(attested) = may_cut(first) {
                        return Err(LogError::Corrupt(format!(
                            "{} at byte {pos} (record offset {first}): {why}; {attested}, so it was durable before: this is damage, not a torn tail from a crash, and nothing was cut (restore the segment from a copy)",
                            path.display()
                        )));
                    }
                    tracing::warn!(
                        segment = %path.display(),
                        position = pos,
                        cut_bytes = buf.len() - pos,
                        "torn tail after a crash: {why}; cutting it"
                    );
                    let f = OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .map_err(|e| LogError::io(format!("open {}", path.display()), e))?;
                    f.set_len(pos as u64)
                        .and_then(|_| f.sync_all())
                        .map_err(|e| {
                            LogError::io(format!("cut torn tail of {}", path.display()), e)
                        })?;
                }
            }
            next_offset = base + positions.len() as u64;
            let file = open_segment_file(&path, read_only)?;
            segments.push(Segment {
                base,
                path,
                file: Arc::new(file),
                positions,
                len: pos as u64,
            });
        }
        Ok((
            Self {
                label,
                dir,
                read_only,
                synced: Mutex::new(next_offset),
                synced_cv: Condvar::new(),
                state: Mutex::new(PartState {
                    segments,
                    next_offset,
                }),
                roll_bytes,
                syncs: Default::default(),
            },
            left_torn,
        ))
    }

    /// A partition with no records that a read-only open found no files of.
    fn empty(dir: PathBuf, label: String, roll_bytes: u64) -> Self {
        Self {
            label,
            dir,
            read_only: true,
            synced: Mutex::new(0),
            synced_cv: Condvar::new(),
            state: Mutex::new(PartState {
                segments: Vec::new(),
                next_offset: 0,
            }),
            roll_bytes,
            syncs: Default::default(),
        }
    }

    fn append(&self, frames: &[(Vec<u8>, Vec<u8>)], sync: bool) -> Result<Vec<u64>, LogError> {
        if self.read_only {
            return Err(LogError::ReadOnly(self.label.clone()));
        }
        let mut buf = Vec::new();
        let mut rel = Vec::with_capacity(frames.len());
        for (k, p) in frames {
            let size = k.len() + p.len();
            if size > MAX_FRAME_BYTES {
                return Err(LogError::TooLarge {
                    size,
                    limit: MAX_FRAME_BYTES,
                });
            }
            rel.push(buf.len() as u64);
            encode_frame(k, p, &mut buf);
        }
        let (offsets, my_end, file) = {
            let mut st = self.state.lock().map_err(|_| poisoned(&self.label))?;
            let needs_roll = st
                .segments
                .last()
                .map(|s| s.len > 0 && s.len + buf.len() as u64 > self.roll_bytes)
                .unwrap_or(true);
            if needs_roll {
                if let Some(s) = st.segments.last() {
                    s.file
                        .sync_all()
                        .map_err(|e| LogError::io(format!("fsync {}", s.path.display()), e))?;
                }
                let base = st.next_offset;
                let path = segment_path(&self.dir, base);
                let file = open_segment_file(&path, false)?;
                sync_dir(&self.dir)?;
                st.segments.push(Segment {
                    base,
                    path,
                    file: Arc::new(file),
                    positions: Vec::new(),
                    len: 0,
                });
            }
            let first = st.next_offset;
            let st = &mut *st;
            let seg = st
                .segments
                .last_mut()
                .ok_or_else(|| poisoned(&self.label))?;
            let start = seg.len;
            (&*seg.file).write_all(&buf).map_err(|e| {
                // A partial write leaves a tail the next open cuts; make this
                // process forget it too by truncating back.
                let _ = seg.file.set_len(start);
                LogError::io(format!("append to {}", seg.path.display()), e)
            })?;
            seg.positions.extend(rel.iter().map(|r| start + r));
            seg.len += buf.len() as u64;
            let file = seg.file.clone();
            st.next_offset += frames.len() as u64;
            let offsets: Vec<u64> = (first..st.next_offset).collect();
            (offsets, st.next_offset, file)
        };
        if sync {
            self.sync_through(my_end, &file)?;
        }
        Ok(offsets)
    }

    /// Make everything written so far durable and visible (the end of a
    /// group).
    fn sync_written(&self) -> Result<(), LogError> {
        let (written, file) = {
            let st = self.state.lock().map_err(|_| poisoned(&self.label))?;
            (st.next_offset, st.segments.last().map(|s| s.file.clone()))
        };
        match file {
            Some(file) if self.visible_end()? < written => self.sync_through(written, &file),
            _ => Ok(()),
        }
    }

    /// Group commit: whoever holds the lock syncs everything written so far.
    fn sync_through(&self, end: u64, file: &Arc<File>) -> Result<(), LogError> {
        let mut synced = self.synced.lock().map_err(|_| poisoned(&self.label))?;
        if *synced >= end {
            return Ok(());
        }
        let (written, active) = {
            let st = self.state.lock().map_err(|_| poisoned(&self.label))?;
            (st.next_offset, st.segments.last().map(|s| s.file.clone()))
        };
        file.sync_data()
            .map_err(|e| LogError::io(format!("fsync {}", self.label), e))?;
        self.syncs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A roll since our write sealed (and synced) our segment; what was
        // written after it is in the active one.
        if let Some(active) = active.filter(|a| !Arc::ptr_eq(a, file)) {
            active
                .sync_data()
                .map_err(|e| LogError::io(format!("fsync {}", self.label), e))?;
        }
        *synced = (*synced).max(written);
        self.synced_cv.notify_all();
        Ok(())
    }

    fn visible_end(&self) -> Result<u64, LogError> {
        Ok(*self.synced.lock().map_err(|_| poisoned(&self.label))?)
    }

    /// What to read for `[from, from + max)`: per segment its file, path,
    /// first offset, record positions and the byte where the last one ends.
    /// Taken under the lock; the reading happens outside it.
    fn read_plan(&self, from: u64, max: usize) -> Result<Vec<ReadSpan>, LogError> {
        let end = self.visible_end()?;
        if from >= end || max == 0 {
            return Ok(Vec::new());
        }
        let want_end = end.min(from.saturating_add(max as u64));
        let mut plan = Vec::new();
        let st = self.state.lock().map_err(|_| poisoned(&self.label))?;
        for seg in &st.segments {
            let seg_end = seg.base + seg.positions.len() as u64;
            if seg_end <= from || seg.base >= want_end {
                continue;
            }
            let lo = from.max(seg.base);
            let hi = want_end.min(seg_end);
            let positions: Vec<u64> =
                seg.positions[(lo - seg.base) as usize..(hi - seg.base) as usize].to_vec();
            let byte_end = if hi == seg_end {
                seg.len
            } else {
                seg.positions[(hi - seg.base) as usize]
            };
            plan.push(ReadSpan {
                file: seg.file.clone(),
                path: seg.path.clone(),
                first: lo,
                positions,
                byte_end,
            });
        }
        Ok(plan)
    }

    /// Read a plan's records into `buf` (reused between calls) and hand each
    /// to `visit` as slices of it; stops when `visit` breaks. Returns the
    /// offset after the last record visited.
    fn visit_plan(
        plan: Vec<ReadSpan>,
        buf: &mut Vec<u8>,
        visit: &mut dyn FnMut(RecordRef<'_>) -> ControlFlow<()>,
    ) -> Result<Option<u64>, LogError> {
        let mut last = None;
        for span in plan {
            let Some(&start) = span.positions.first() else {
                continue;
            };
            buf.clear();
            buf.resize((span.byte_end - start) as usize, 0);
            span.file
                .read_exact_at(buf, start)
                .map_err(|e| LogError::io(format!("read {}", span.path.display()), e))?;
            for (i, pos) in span.positions.iter().enumerate() {
                let at = (pos - start) as usize;
                let offset = span.first + i as u64;
                let (key, payload) = parse_frame(&buf[at..]).ok_or_else(|| {
                    LogError::Corrupt(format!(
                        "{} at byte {pos} (record offset {offset}): frame checksum does not match",
                        span.path.display()
                    ))
                })?;
                last = Some(offset);
                if visit(RecordRef {
                    offset,
                    key,
                    payload,
                })
                .is_break()
                {
                    return Ok(last);
                }
            }
        }
        Ok(last)
    }

    fn read(&self, from: u64, max: usize) -> Result<Vec<LogRecord>, LogError> {
        let plan = self.read_plan(from, max)?;
        let mut out = Vec::with_capacity(plan.iter().map(|s| s.positions.len()).sum());
        Self::visit_plan(plan, &mut Vec::new(), &mut |r| {
            out.push(LogRecord {
                partition: 0,
                offset: r.offset,
                key: r.key.to_vec(),
                payload: r.payload.to_vec(),
            });
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    fn scan(
        &self,
        from: u64,
        max: usize,
        visit: &mut dyn FnMut(RecordRef<'_>) -> ControlFlow<()>,
    ) -> Result<u64, LogError> {
        thread_local! {
            // One read buffer per thread, kept between calls: a fresh one per
            // call would cost page faults on every pass over the log.
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let plan = self.read_plan(from, max)?;
        BUF.with(|b| {
            let mut buf = b.borrow_mut();
            let last = Self::visit_plan(plan, &mut buf, visit)?;
            Ok(last.map_or(from, |o| o + 1))
        })
    }
}

/// One segment's share of a read (see `read_plan`).
struct ReadSpan {
    file: Arc<File>,
    path: PathBuf,
    first: u64,
    positions: Vec<u64>,
    byte_end: u64,
}

fn poisoned(label: &str) -> LogError {
    LogError::Unavailable(format!("{label}: a writer panicked while holding the lock"))
}

/// A torn tail found by a read-only open and left in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// `topic/partition`.
    pub partition: String,
    pub segment: PathBuf,
    pub at_byte: u64,
    pub bytes: u64,
    pub why: String,
}

impl std::fmt::Display for TornTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: torn tail of {} bytes at byte {} of {} ({}); not cut, nothing past it is read",
            self.partition,
            self.bytes,
            self.at_byte,
            self.segment.display(),
            self.why
        )
    }
}

/// Where the checkpoints on the topic end, per (topic, partition): the
/// offset after the last record some checkpoint attests. Records below it
/// were durable before their checkpoint was written, so a bad frame there
/// is damage, never a crash's tear. Read only when a tail is to be cut;
/// a checkpoint record that does not parse attests nothing here.
fn attested_ends(checkpoints: &[Partition]) -> BTreeMap<(String, u32), u64> {
    #[derive(serde::Deserialize)]
    struct Span {
        topic: String,
        partition: u32,
        to: u64,
    }
    let mut ends: BTreeMap<(String, u32), u64> = BTreeMap::new();
    for part in checkpoints {
        let mut at = 0;
        loop {
            let mut seen = 0u64;
            let after = part.scan(at, 256, &mut |r| {
                seen += 1;
                if let Ok(span) = serde_json::from_slice::<Span>(r.payload) {
                    let e = ends.entry((span.topic, span.partition)).or_default();
                    *e = (*e).max(span.to);
                }
                std::ops::ControlFlow::Continue(())
            });
            match after {
                Ok(a) if seen > 0 && a > at => at = a,
                _ => break,
            }
        }
    }
    ends
}

/// The name of the file holding a topic's partition count.
const PARTITIONS_FILE: &str = "partitions";

/// How many partitions a topic has: fixed when it is created and written
/// beside them, so a directory added or lost later is named rather than
/// taken as another partition count (which would move chains to other
/// partitions, or drop one's records unseen). A topic from before the
/// file counts its directories, which must then run 0, 1, … without a gap.
fn partition_count(
    tdir: &Path,
    topic: Topic,
    config: &EmbeddedConfig,
    access: Access,
) -> Result<u32, LogError> {
    let mut existing: Vec<u32> = match fs::read_dir(tdir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
            .collect(),
        Err(_) => Vec::new(),
    };
    existing.sort_unstable();
    let file = tdir.join(PARTITIONS_FILE);
    let recorded = match fs::read_to_string(&file) {
        Ok(t) => Some(
            t.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    LogError::Corrupt(format!(
                        "{}: not a partition count: {:?}",
                        file.display(),
                        t.chars().take(40).collect::<String>()
                    ))
                })?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(LogError::io(format!("read {}", file.display()), e)),
    };
    let count = match recorded {
        Some(n) => n,
        None if existing.is_empty() => match topic {
            Topic::Ledger => config.ledger_partitions.max(1),
            _ => 1,
        },
        None => existing.last().map_or(1, |m| m + 1),
    };
    let want: Vec<u32> = (0..count).collect();
    let fresh = existing.is_empty() && recorded.is_none();
    if !fresh && existing != want {
        let missing: Vec<u32> = want
            .iter()
            .filter(|p| !existing.contains(p))
            .copied()
            .collect();
        let extra: Vec<u32> = existing
            .iter()
            .filter(|p| !want.contains(p))
            .copied()
            .collect();
        return Err(LogError::Corrupt(format!(
            "{}: the topic has {count} partitions{}, but {}{}; nothing was opened (restore or remove the directories named)",
            tdir.display(),
            if recorded.is_some() { format!(" ({})", file.display()) } else { String::new() },
            if missing.is_empty() { String::new() } else { format!("partition directories {missing:?} are missing") },
            if extra.is_empty() { String::new() } else { format!("{}directories {extra:?} are not its partitions", if missing.is_empty() { "" } else { " and " }) },
        )));
    }
    if access == Access::Write && recorded.is_none() {
        crate::private_files::create_dir_all(tdir)
            .map_err(|e| LogError::io(format!("create {}", tdir.display()), e))?;
        let tmp = tdir.join(format!("{PARTITIONS_FILE}.tmp"));
        crate::private_files::write(&tmp, format!("{count}\n"))
            .and_then(|_| File::open(&tmp).and_then(|f| f.sync_all()))
            .and_then(|_| fs::rename(&tmp, &file))
            .map_err(|e| LogError::io(format!("write {}", file.display()), e))?;
        sync_dir(tdir)?;
    }
    Ok(count)
}

impl EmbeddedLog {
    /// Open (or create) the embedded log in `dir`. The partition count of a
    /// topic is fixed when the topic is first created and read back after.
    /// A torn tail is cut (see the module comment).
    pub fn open(dir: impl AsRef<Path>, config: &EmbeddedConfig) -> Result<Self, LogError> {
        Self::open_as(dir.as_ref(), config, Access::Write)
    }

    /// Open an existing embedded log to read it only: nothing is created,
    /// cut or appended (appends answer [`LogError::ReadOnly`]). A torn tail
    /// is reported by [`EmbeddedLog::torn_tails`] and left for the next
    /// writer to cut, so an audit never changes what it audits.
    pub fn open_read_only(
        dir: impl AsRef<Path>,
        config: &EmbeddedConfig,
    ) -> Result<Self, LogError> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(LogError::NoLedger(dir.display().to_string()));
        }
        Self::open_as(dir, config, Access::ReadOnly)
    }

    /// Torn tails found and left in place by a read-only open.
    pub fn torn_tails(&self) -> &[TornTail] {
        &self.torn
    }

    fn open_as(dir: &Path, config: &EmbeddedConfig, access: Access) -> Result<Self, LogError> {
        crate::model::ids::check_topic_prefix(&config.topic_prefix)
            .map_err(|e| LogError::Config(e.to_string()))?;
        let dir = dir.to_path_buf();
        if access == Access::Write {
            crate::private_files::create_dir_all(&dir)
                .map_err(|e| LogError::io(format!("create {}", dir.display()), e))?;
        }
        let mut torn = Vec::new();
        let mut topics: BTreeMap<Topic, Vec<Partition>> = BTreeMap::new();
        let syncs: Arc<std::sync::atomic::AtomicU64> = Default::default();
        // The checkpoints first: a tail of a ledger or registry partition
        // that a checkpoint attests is not cut as a tear (see `attested`).
        let order = std::iter::once(Topic::Checkpoints)
            .chain(Topic::ALL.into_iter().filter(|t| *t != Topic::Checkpoints));
        let attested: std::cell::OnceCell<BTreeMap<(String, u32), u64>> =
            std::cell::OnceCell::new();
        for topic in order {
            let tdir = dir.join(format!("{}{}", config.topic_prefix, topic.name()));
            let count = partition_count(&tdir, topic, config, access)?;
            let mut parts = Vec::with_capacity(count as usize);
            for p in 0..count {
                let may_cut = |first: u64| -> Result<(), String> {
                    if topic == Topic::Checkpoints {
                        return Ok(());
                    }
                    let ends = attested.get_or_init(|| {
                        attested_ends(topics.get(&Topic::Checkpoints).map_or(&[][..], |v| v))
                    });
                    match ends.get(&(topic.name().to_string(), p)) {
                        Some(&to) if to > first => Err(format!(
                            "a checkpoint attests {}/{p} up to offset {}",
                            topic.name(),
                            to - 1
                        )),
                        _ => Ok(()),
                    }
                };
                let (part, tail) = Partition::open(
                    tdir.join(p.to_string()),
                    format!("{}/{}", topic.name(), p),
                    config.segment_roll_bytes,
                    access,
                    &may_cut,
                )?;
                let mut part = part;
                part.syncs = syncs.clone();
                parts.push(part);
                torn.extend(tail);
            }
            topics.insert(topic, parts);
        }
        if access == Access::Write {
            sync_dir(&dir)?;
        }
        Ok(Self {
            dir,
            topics,
            torn,
            grouping: Default::default(),
            syncs,
        })
    }

    fn partition(&self, topic: Topic, partition: u32) -> Result<&Partition, LogError> {
        self.topics
            .get(&topic)
            .and_then(|p| p.get(partition as usize))
            .ok_or(LogError::NoSuchPartition { topic, partition })
    }
}

/// The order a group's partitions are made durable in, so that a crash
/// between two syncs never leaves a record durable whose premise is not:
/// agent versions before the runs that name them, published events before
/// the ledger's note that they were published, the ledger before the
/// checkpoints that cover it.
const SYNC_ORDER: [Topic; 4] = [
    Topic::Registry,
    Topic::Published,
    Topic::Ledger,
    Topic::Checkpoints,
];

impl Log for EmbeddedLog {
    fn partitions(&self, topic: Topic) -> u32 {
        self.topics.get(&topic).map(|p| p.len() as u32).unwrap_or(0)
    }

    fn begin_group(&self) {
        self.grouping
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn syncs(&self) -> u64 {
        self.syncs.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn end_group(&self) -> Result<(), LogError> {
        self.grouping
            .store(false, std::sync::atomic::Ordering::SeqCst);
        for topic in SYNC_ORDER {
            for p in self.topics.get(&topic).into_iter().flatten() {
                p.sync_written()?;
            }
        }
        Ok(())
    }

    fn append(
        &self,
        topic: Topic,
        records: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<Vec<(u32, u64)>, LogError> {
        let n = self.partitions(topic);
        // Group by partition, keeping each partition's records in call order.
        let mut by_part: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, (k, _)) in records.iter().enumerate() {
            by_part.entry(partition_for_key(k, n)).or_default().push(i);
        }
        let mut out = vec![(0u32, 0u64); records.len()];
        for (p, idxs) in by_part {
            let frames: Vec<(Vec<u8>, Vec<u8>)> =
                idxs.iter().map(|&i| records[i].clone()).collect();
            let grouping = self.grouping.load(std::sync::atomic::Ordering::SeqCst);
            let offsets = self.partition(topic, p)?.append(&frames, !grouping)?;
            for (i, off) in idxs.into_iter().zip(offsets) {
                out[i] = (p, off);
            }
        }
        Ok(out)
    }

    fn read(
        &self,
        topic: Topic,
        partition: u32,
        from: u64,
        max: usize,
    ) -> Result<Vec<LogRecord>, LogError> {
        let mut recs = self.partition(topic, partition)?.read(from, max)?;
        for r in &mut recs {
            r.partition = partition;
        }
        Ok(recs)
    }

    fn scan(
        &self,
        topic: Topic,
        partition: u32,
        from: u64,
        max: usize,
        visit: &mut dyn FnMut(RecordRef<'_>) -> ControlFlow<()>,
    ) -> Result<u64, LogError> {
        self.partition(topic, partition)?.scan(from, max, visit)
    }

    fn end_offset(&self, topic: Topic, partition: u32) -> Result<u64, LogError> {
        self.partition(topic, partition)?.visible_end()
    }

    fn wait_beyond(
        &self,
        topic: Topic,
        partition: u32,
        offset: u64,
        timeout: Duration,
    ) -> Result<u64, LogError> {
        let part = self.partition(topic, partition)?;
        let deadline = Instant::now() + timeout;
        let mut synced = part.synced.lock().map_err(|_| poisoned(&part.label))?;
        while *synced <= offset {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let (g, _) = part
                .synced_cv
                .wait_timeout(synced, deadline - now)
                .map_err(|_| poisoned(&part.label))?;
            synced = g;
        }
        Ok(*synced)
    }

    fn describe(&self) -> String {
        format!("embedded log at {}", self.dir.display())
    }

    fn torn_tails(&self) -> Vec<String> {
        self.torn.iter().map(ToString::to_string).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &Path) -> EmbeddedLog {
        EmbeddedLog::open(dir, &EmbeddedConfig::default()).unwrap()
    }

    fn open_err(r: Result<EmbeddedLog, LogError>) -> String {
        match r {
            Err(e) => e.to_string(),
            Ok(_) => panic!("opened"),
        }
    }

    #[test]
    fn a_group_syncs_every_topic_premises_first() {
        let at = |t: Topic| SYNC_ORDER.iter().position(|x| *x == t).unwrap();
        for t in Topic::ALL {
            assert!(SYNC_ORDER.contains(&t), "{t:?} is never synced");
        }
        assert!(at(Topic::Registry) < at(Topic::Ledger));
        assert!(at(Topic::Published) < at(Topic::Ledger));
        assert!(at(Topic::Ledger) < at(Topic::Checkpoints));
    }

    fn seg0(dir: &Path) -> PathBuf {
        dir.join("registry/0").join(format!("{:020}.seg", 0))
    }

    #[test]
    fn append_read_reopen() {
        let d = tempfile::tempdir().unwrap();
        let log = open(d.path());
        let recs: Vec<_> = (0..10)
            .map(|i| (b"k".to_vec(), format!("v{i}").into_bytes()))
            .collect();
        let pos = log.append(Topic::Registry, &recs).unwrap();
        assert_eq!(pos.last(), Some(&(0, 9)));
        drop(log);
        let log = open(d.path());
        let got = log.read(Topic::Registry, 0, 3, 100).unwrap();
        assert_eq!(got.len(), 7);
        assert_eq!(got[0].offset, 3);
        assert_eq!(got[0].payload, b"v3");
        assert_eq!(log.end_offset(Topic::Registry, 0).unwrap(), 10);
    }

    #[test]
    fn torn_tail_is_cut_and_never_served() {
        let d = tempfile::tempdir().unwrap();
        let log = open(d.path());
        log.append(Topic::Registry, &[(b"k".to_vec(), b"one".to_vec())])
            .unwrap();
        log.append(Topic::Registry, &[(b"k".to_vec(), b"two".to_vec())])
            .unwrap();
        drop(log);
        // Simulate a crash mid-write: half of a third frame.
        let mut frame = Vec::new();
        encode_frame(b"k", b"three-three-three", &mut frame);
        let mut f = OpenOptions::new()
            .append(true)
            .open(seg0(d.path()))
            .unwrap();
        f.write_all(&frame[..frame.len() / 2]).unwrap();
        drop(f);
        let log = open(d.path());
        assert_eq!(log.end_offset(Topic::Registry, 0).unwrap(), 2);
        let got = log.read(Topic::Registry, 0, 0, 10).unwrap();
        assert_eq!(got.len(), 2);
        // The log keeps working after the cut.
        log.append(Topic::Registry, &[(b"k".to_vec(), b"three".to_vec())])
            .unwrap();
        drop(log);
        let log = open(d.path());
        let got = log.read(Topic::Registry, 0, 0, 10).unwrap();
        assert_eq!(got[2].payload, b"three");
    }

    /// Three registry records, a checkpoint attesting the first
    /// `attested`, and the last frame then cut short as a tear would cut
    /// it; the segment and its length after the cut.
    fn torn_after_checkpoint(dir: &Path, attested: u64) -> (PathBuf, u64) {
        let log = open(dir);
        for i in 0..3 {
            log.append(
                Topic::Registry,
                &[(b"k".to_vec(), format!("rec{i}").into_bytes())],
            )
            .unwrap();
        }
        let cp = serde_json::json!({"topic":"registry","partition":0,"from":0,"to":attested});
        log.append(
            Topic::Checkpoints,
            &[(b"registry/0".to_vec(), cp.to_string().into_bytes())],
        )
        .unwrap();
        drop(log);
        let seg = seg0(dir);
        let len = std::fs::metadata(&seg).unwrap().len() - 3;
        OpenOptions::new()
            .write(true)
            .open(&seg)
            .unwrap()
            .set_len(len)
            .unwrap();
        (seg, len)
    }

    #[test]
    fn a_tail_a_checkpoint_attests_is_damage_not_a_tear() {
        let d = tempfile::tempdir().unwrap();
        let (seg, len) = torn_after_checkpoint(d.path(), 3);
        let m = open_err(EmbeddedLog::open(d.path(), &EmbeddedConfig::default()));
        assert!(
            m.contains("a checkpoint attests registry/0 up to offset 2"),
            "{m}"
        );
        assert!(m.contains("record offset 2"), "{m}");
        assert_eq!(
            std::fs::metadata(&seg).unwrap().len(),
            len,
            "nothing was cut"
        );
        // Read-only, the intact records are still there to read.
        let ro = EmbeddedLog::open_read_only(d.path(), &EmbeddedConfig::default()).unwrap();
        assert_eq!(ro.end_offset(Topic::Registry, 0).unwrap(), 2);
        // A tear past what the checkpoints attest is cut as before.
        let d2 = tempfile::tempdir().unwrap();
        torn_after_checkpoint(d2.path(), 2);
        assert_eq!(open(d2.path()).end_offset(Topic::Registry, 0).unwrap(), 2);
    }

    #[test]
    fn a_partition_directory_added_or_lost_is_named_not_counted() {
        let d = tempfile::tempdir().unwrap();
        let config = EmbeddedConfig::default();
        let log = open(d.path());
        let n = log.partitions(Topic::Ledger);
        log.append(Topic::Ledger, &[(b"chain-a".to_vec(), b"r".to_vec())])
            .unwrap();
        drop(log);
        assert_eq!(
            std::fs::read_to_string(d.path().join("ledger/partitions")).unwrap(),
            format!("{n}\n")
        );
        // A stray directory: not a fifth partition.
        let stray = d.path().join(format!("ledger/{n}"));
        std::fs::create_dir(&stray).unwrap();
        let m = open_err(EmbeddedLog::open(d.path(), &config));
        assert!(
            m.contains(&format!("directories [{n}] are not its partitions")),
            "{m}"
        );
        let m = open_err(EmbeddedLog::open_read_only(d.path(), &config));
        assert!(m.contains("are not its partitions"), "{m}");
        std::fs::remove_dir(&stray).unwrap();
        // A lost one: not one partition fewer.
        let last = d.path().join(format!("ledger/{}", n - 1));
        let moved = d.path().join("moved");
        std::fs::rename(&last, &moved).unwrap();
        let m = open_err(EmbeddedLog::open(d.path(), &config));
        assert!(
            m.contains(&format!("partition directories [{}] are missing", n - 1)),
            "{m}"
        );
        std::fs::rename(&moved, &last).unwrap();
        assert_eq!(open(d.path()).partitions(Topic::Ledger), n);
        // A log from before the count was kept: counted once, then kept.
        std::fs::remove_file(d.path().join("ledger/partitions")).unwrap();
        assert_eq!(open(d.path()).partitions(Topic::Ledger), n);
        assert!(d.path().join("ledger/partitions").exists());
    }

    #[test]
    fn damage_in_the_middle_is_an_error_not_a_cut() {
        let d = tempfile::tempdir().unwrap();
        let log = open(d.path());
        for i in 0..3 {
            log.append(
                Topic::Registry,
                &[(b"k".to_vec(), format!("rec{i}").into_bytes())],
            )
            .unwrap();
        }
        drop(log);
        let path = seg0(d.path());
        let mut bytes = fs::read(&path).unwrap();
        let len_before = bytes.len();
        bytes[HEADER + 6] ^= 0xff; // inside the first frame's body
        fs::write(&path, &bytes).unwrap();
        let err = EmbeddedLog::open(d.path(), &EmbeddedConfig::default())
            .err()
            .expect("corruption must fail the open");
        let msg = err.to_string();
        assert!(msg.contains("record offset 0"), "{msg}");
        assert_eq!(fs::read(&path).unwrap().len(), len_before, "nothing cut");
    }

    #[test]
    fn damaged_last_record_is_not_mistaken_for_a_tear() {
        let d = tempfile::tempdir().unwrap();
        let log = open(d.path());
        log.append(Topic::Registry, &[(b"k".to_vec(), b"only-record".to_vec())])
            .unwrap();
        drop(log);
        let path = seg0(d.path());
        let mut bytes = fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 2] ^= 0x01;
        fs::write(&path, &bytes).unwrap();
        assert!(EmbeddedLog::open(d.path(), &EmbeddedConfig::default()).is_err());
        assert_eq!(fs::read(&path).unwrap().len(), n);
    }

    #[test]
    fn zero_filled_tail_is_a_tear() {
        let d = tempfile::tempdir().unwrap();
        let log = open(d.path());
        log.append(Topic::Registry, &[(b"k".to_vec(), b"kept".to_vec())])
            .unwrap();
        drop(log);
        let path = seg0(d.path());
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[0u8; 4096]).unwrap();
        drop(f);
        let log = open(d.path());
        assert_eq!(log.end_offset(Topic::Registry, 0).unwrap(), 1);
    }

    #[test]
    fn segments_roll_and_read_across() {
        let d = tempfile::tempdir().unwrap();
        let cfg = EmbeddedConfig {
            segment_roll_bytes: 200,
            ..Default::default()
        };
        let log = EmbeddedLog::open(d.path(), &cfg).unwrap();
        for i in 0..50 {
            log.append(
                Topic::Registry,
                &[(b"k".to_vec(), format!("value-{i:04}").into_bytes())],
            )
            .unwrap();
        }
        drop(log);
        let log = EmbeddedLog::open(d.path(), &cfg).unwrap();
        let got = log.read(Topic::Registry, 0, 0, 1000).unwrap();
        assert_eq!(got.len(), 50);
        for (i, r) in got.iter().enumerate() {
            assert_eq!(r.offset, i as u64);
            assert_eq!(r.payload, format!("value-{i:04}").into_bytes());
        }
        assert!(fs::read_dir(d.path().join("registry/0")).unwrap().count() > 2);
    }

    #[test]
    fn same_key_same_partition_in_order() {
        let d = tempfile::tempdir().unwrap();
        let log = open(d.path());
        let recs: Vec<_> = (0..20)
            .map(|i| (format!("chain-{}", i % 3).into_bytes(), vec![i as u8]))
            .collect();
        let pos = log.append(Topic::Ledger, &recs).unwrap();
        // FNV-1a of the key, pinned: placement must not change between
        // builds, or a chain would be split across partitions.
        let expected = [3u32, 0, 1];
        for (i, (p, _)) in pos.iter().enumerate() {
            assert_eq!(*p, expected[i % 3], "chain-{}", i % 3);
        }
        for (chain, &p) in expected.iter().enumerate() {
            let got: Vec<u8> = log
                .read(Topic::Ledger, p, 0, 100)
                .unwrap()
                .into_iter()
                .filter(|r| r.key == format!("chain-{chain}").into_bytes())
                .map(|r| r.payload[0])
                .collect();
            let want: Vec<u8> = (0..20u8).filter(|i| *i as usize % 3 == chain).collect();
            assert_eq!(got, want, "chain-{chain} in append order");
        }
    }

    #[test]
    fn concurrent_appends_all_land() {
        let d = tempfile::tempdir().unwrap();
        let log = Arc::new(open(d.path()));
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        log.append(Topic::Registry, &[(b"k".to_vec(), vec![t, i])])
                            .unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(log.end_offset(Topic::Registry, 0).unwrap(), 200);
        assert_eq!(log.read(Topic::Registry, 0, 0, 1000).unwrap().len(), 200);
    }
}
