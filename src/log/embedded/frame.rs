//! The embedded log's record frame on disk (length, CRC-32C, key, payload),
//! the scan of a segment that tells a torn tail from damage, and the torn
//! tail a read-only open leaves in place.

use super::HEADER;
use super::MAX_FRAME_BYTES;
use std::path::PathBuf;

pub(super) fn frame_crc(body: &[u8]) -> u32 {
    crc32fast::hash(body)
}

pub(super) fn encode_frame(key: &[u8], payload: &[u8], out: &mut Vec<u8>) {
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
pub(super) enum Scan {
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

pub(super) fn scan_frame(buf: &[u8], pos: usize) -> Scan {
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
pub(super) fn parse_frame(buf: &[u8]) -> Option<(&[u8], &[u8])> {
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
