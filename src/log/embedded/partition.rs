//! One partition of the embedded log: its segment files, appends that
//! sync in groups, and reads planned over the segments without holding
//! the writer.

use super::frame::{encode_frame, parse_frame, scan_segment, TornTail};
use super::MAX_FRAME_BYTES;
use super::{poisoned, Access};
use crate::log::{LogError, LogRecord, RecordRef};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

pub(super) struct Segment {
    pub(super) base: u64,
    pub(super) path: PathBuf,
    pub(super) file: Arc<File>,
    /// File position of each record's frame.
    pub(super) positions: Vec<u64>,
    pub(super) len: u64,
}

pub(super) struct PartState {
    pub(super) segments: Vec<Segment>,
    /// The offset of the next record written to a segment file.
    pub(super) next_offset: u64,
    /// Frames of a sealed group's later phases, given offsets (from
    /// `next_offset` on) but held by the group until the phases before
    /// them are durable (see `Partition::write_held`).
    pub(super) held: u64,
    /// Frames of a commit group given offsets (after the held ones) but
    /// not written yet: they reach the file when the group is sealed (see
    /// `Partition::flush`).
    pub(super) deferred: Vec<Chunk>,
}

/// Encoded frames of one phase of a commit group (see
/// `EmbeddedLog::append`), waiting for their turn to be written.
#[derive(Default)]
pub(super) struct Chunk {
    pub(super) phase: u32,
    buf: Vec<u8>,
    /// Where each frame starts in `buf`.
    rel: Vec<u64>,
}

impl Chunk {
    fn frames(&self) -> u64 {
        self.rel.len() as u64
    }

    fn push(&mut self, key: &[u8], payload: &[u8]) {
        self.rel.push(self.buf.len() as u64);
        encode_frame(key, payload, &mut self.buf);
    }

    /// The frames of `chunks` one after another, as one chunk.
    fn joined(chunks: Vec<Chunk>) -> Chunk {
        let mut all = Chunk::default();
        for c in chunks {
            let base = all.buf.len() as u64;
            all.rel.extend(c.rel.iter().map(|r| base + r));
            all.buf.extend_from_slice(&c.buf);
        }
        all
    }
}

pub(super) struct Partition {
    pub(super) label: String,
    pub(super) dir: PathBuf,
    /// Opened by a reader that must change nothing (auditor and status
    /// commands): appends are refused and a torn tail is left in place.
    pub(super) read_only: bool,
    pub(super) state: Mutex<PartState>,
    /// Offsets below this are fsynced and visible to readers.
    pub(super) synced: Mutex<u64>,
    /// Held by whoever syncs, so that concurrent appenders share one sync
    /// and readers asking for `synced` never wait for a disk.
    pub(super) syncing: Mutex<()>,
    pub(super) synced_cv: Condvar,
    pub(super) roll_bytes: u64,
    /// The log's count of fdatasync calls (see `Log::syncs`).
    pub(super) syncs: Arc<std::sync::atomic::AtomicU64>,
    /// Every sync of the log in order: (partition, records durable).
    #[cfg(test)]
    pub(super) journal: Arc<Mutex<Vec<(String, u64)>>>,
}

pub(super) fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| LogError::io(format!("fsync directory {}", dir.display()), e))
}

pub(super) fn segment_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(format!("{base:020}.seg"))
}

pub(super) fn open_segment_file(path: &Path, read_only: bool) -> Result<File, LogError> {
    let mut o = crate::log::private_files::options();
    o.read(true);
    if !read_only {
        o.append(true).create(true);
    }
    o.open(path)
        .map_err(|e| LogError::io(format!("open segment {}", path.display()), e))
}

impl Partition {
    pub(super) fn open(
        dir: PathBuf,
        label: String,
        roll_bytes: u64,
        access: Access,
        attested_end: &dyn Fn() -> Option<u64>,
    ) -> Result<(Self, Option<TornTail>), LogError> {
        let read_only = access == Access::ReadOnly;
        let mut left_torn = None;
        if read_only && !dir.exists() {
            return Ok((Self::empty(dir, label, roll_bytes), None));
        }
        if !read_only {
            crate::log::private_files::create_dir_all(&dir)
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
                    if let Some(end) = attested_end().filter(|&end| end > first) {
                        return Err(LogError::Corrupt(format!(
                            "{} at byte {pos} (record offset {first}): {why}; a checkpoint attests {label} up to offset {}, so it was durable before: this is damage, not a torn tail from a crash, and nothing was cut (restore the segment from a copy)",
                            path.display(),
                            end - 1
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
                syncing: Mutex::new(()),
                synced_cv: Condvar::new(),
                state: Mutex::new(PartState {
                    segments,
                    next_offset,
                    held: 0,
                    deferred: Vec::new(),
                }),
                roll_bytes,
                syncs: Default::default(),
                #[cfg(test)]
                journal: Default::default(),
            },
            left_torn,
        ))
    }

    /// A partition with no records that a read-only open found no files of.
    pub(super) fn empty(dir: PathBuf, label: String, roll_bytes: u64) -> Self {
        Self {
            label,
            dir,
            read_only: true,
            synced: Mutex::new(0),
            syncing: Mutex::new(()),
            synced_cv: Condvar::new(),
            state: Mutex::new(PartState {
                segments: Vec::new(),
                next_offset: 0,
                held: 0,
                deferred: Vec::new(),
            }),
            roll_bytes,
            syncs: Default::default(),
            #[cfg(test)]
            journal: Default::default(),
        }
    }

    /// Append frames: written and synced before returning, or, with
    /// `defer` (inside a commit group: the group's phase), given their
    /// offsets now and written only when the group is sealed
    /// ([`Partition::flush`], [`Partition::write_held`]) — so that a group
    /// being decided while the one before it syncs writes nothing that
    /// sync could make durable ahead of its premises in other partitions.
    pub(super) fn append(
        &self,
        frames: &[(Vec<u8>, Vec<u8>)],
        defer: Option<u32>,
    ) -> Result<Vec<u64>, LogError> {
        if self.read_only {
            return Err(LogError::ReadOnly(self.label.clone()));
        }
        for (k, p) in frames {
            let size = k.len() + p.len();
            if size > MAX_FRAME_BYTES {
                return Err(LogError::TooLarge {
                    size,
                    limit: MAX_FRAME_BYTES,
                });
            }
        }
        let mut st = self.state.lock().map_err(|_| poisoned(&self.label))?;
        let first = st.next_offset + st.held + st.deferred.iter().map(Chunk::frames).sum::<u64>();
        if let Some(phase) = defer {
            if st.deferred.last().is_none_or(|c| c.phase != phase) {
                st.deferred.push(Chunk {
                    phase,
                    ..Chunk::default()
                });
            }
            if let Some(chunk) = st.deferred.last_mut() {
                for (k, p) in frames {
                    chunk.push(k, p);
                }
            }
            return Ok((first..first + frames.len() as u64).collect());
        }
        if st.held > 0 {
            // Written now, these would take the offsets the held frames
            // were given.
            return Err(LogError::Unavailable(format!(
                "{}: an append outside a commit group while a sealed group's records wait to be written",
                self.label
            )));
        }
        // Frames deferred before this one come first in the file.
        let mut all = Chunk::joined(std::mem::take(&mut st.deferred));
        for (k, p) in frames {
            all.push(k, p);
        }
        let (end, file) = self.write_locked(&mut st, &all.buf, &all.rel)?;
        drop(st);
        self.sync_through(end, &file)?;
        Ok((first..end).collect())
    }

    /// Write the deferred frames of a group's first phase (its seal) and
    /// hand over the later phases' ones, to be written by
    /// [`Partition::write_held`] once the phases before them are durable.
    /// Returns where the written records end and the file holding the
    /// last of them, for [`Partition::sync_through`] (`None` when
    /// everything written is synced already), and the later chunks. On a
    /// failed write the deferred frames are dropped: their group cannot
    /// be answered ok.
    pub(super) fn flush(&self) -> Result<Flushed, LogError> {
        let mut st = self.state.lock().map_err(|_| poisoned(&self.label))?;
        if st.held > 0 {
            return Err(LogError::Unavailable(format!(
                "{}: records of an earlier commit group were never written (its sync failed); reopen the log",
                self.label
            )));
        }
        let mut later = std::mem::take(&mut st.deferred);
        let first = match later.first() {
            Some(c) if c.phase == 0 => Some(later.remove(0)),
            _ => None,
        };
        let written = match first {
            None => {
                let end = st.next_offset;
                st.segments.last().map(|s| (end, s.file.clone()))
            }
            Some(c) => Some(self.write_locked(&mut st, &c.buf, &c.rel)?),
        };
        st.held += later.iter().map(Chunk::frames).sum::<u64>();
        drop(st);
        let due = match written {
            Some((end, file)) if self.visible_end()? < end => Some((end, file)),
            _ => None,
        };
        Ok((due, later))
    }

    /// Write a held chunk of a sealed group (see [`Partition::flush`]),
    /// once the phases before it are durable. Returns where the records
    /// end and the file they are in, for [`Partition::sync_through`].
    pub(super) fn write_held(&self, chunk: &Chunk) -> Result<(u64, Arc<File>), LogError> {
        let mut st = self.state.lock().map_err(|_| poisoned(&self.label))?;
        st.held = st.held.saturating_sub(chunk.frames());
        self.write_locked(&mut st, &chunk.buf, &chunk.rel)
    }

    /// Write encoded frames at the end of the last segment (rolling to a
    /// new one first when they would overfill it). Returns the offset after
    /// them and the file they are in.
    fn write_locked(
        &self,
        st: &mut PartState,
        buf: &[u8],
        rel: &[u64],
    ) -> Result<(u64, Arc<File>), LogError> {
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
        let seg = st
            .segments
            .last_mut()
            .ok_or_else(|| poisoned(&self.label))?;
        let start = seg.len;
        (&*seg.file).write_all(buf).map_err(|e| {
            // A partial write leaves a tail the next open cuts; make this
            // process forget it too by truncating back.
            let _ = seg.file.set_len(start);
            LogError::io(format!("append to {}", seg.path.display()), e)
        })?;
        seg.positions.extend(rel.iter().map(|r| start + r));
        seg.len += buf.len() as u64;
        let file = seg.file.clone();
        st.next_offset += rel.len() as u64;
        Ok((st.next_offset, file))
    }

    /// Group commit: whoever holds the sync lock syncs everything written
    /// so far. May run on another thread than the appends.
    pub(super) fn sync_through(&self, end: u64, file: &Arc<File>) -> Result<(), LogError> {
        let _one = self.syncing.lock().map_err(|_| poisoned(&self.label))?;
        if self.visible_end()? >= end {
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
        #[cfg(test)]
        if let Ok(mut j) = self.journal.lock() {
            j.push((self.label.clone(), written));
        }
        // A roll since our write sealed (and synced) our segment; what was
        // written after it is in the active one.
        if let Some(active) = active.filter(|a| !Arc::ptr_eq(a, file)) {
            active
                .sync_data()
                .map_err(|e| LogError::io(format!("fsync {}", self.label), e))?;
        }
        let mut synced = self.synced.lock().map_err(|_| poisoned(&self.label))?;
        *synced = (*synced).max(written);
        self.synced_cv.notify_all();
        Ok(())
    }

    pub(super) fn visible_end(&self) -> Result<u64, LogError> {
        Ok(*self.synced.lock().map_err(|_| poisoned(&self.label))?)
    }

    /// What to read for `[from, from + max)`: per segment its file, path,
    /// first offset, record positions and the byte where the last one ends.
    /// Taken under the lock; the reading happens outside it.
    pub(super) fn read_plan(&self, from: u64, max: usize) -> Result<Vec<ReadSpan>, LogError> {
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
    pub(super) fn visit_plan(
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

    pub(super) fn read(&self, from: u64, max: usize) -> Result<Vec<LogRecord>, LogError> {
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

    pub(super) fn scan(
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

/// What a seal did to a partition (see [`Partition::flush`]): where its
/// written records end and their file, when they need a sync, and the
/// chunks held for later phases.
pub(super) type Flushed = (Option<(u64, Arc<File>)>, Vec<Chunk>);

/// One segment's share of a read (see `read_plan`).
pub(super) struct ReadSpan {
    pub(super) file: Arc<File>,
    pub(super) path: PathBuf,
    pub(super) first: u64,
    pub(super) positions: Vec<u64>,
    pub(super) byte_end: u64,
}
