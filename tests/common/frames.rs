//! The embedded log's segment frames, read and written whole, as a forger
//! with the files would: `u32 LE length`, `u32 LE crc32`, then `u32 LE key
//! length`, key, payload — the checksums always fresh.

use std::path::Path;

pub fn read_frames(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let buf = std::fs::read(path).unwrap_or_default();
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 12 <= buf.len() {
        let len = u32::from_le_bytes(buf[pos..pos + 4].try_into().unwrap()) as usize;
        let body = &buf[pos + 8..pos + 8 + len];
        let klen = u32::from_le_bytes(body[0..4].try_into().unwrap()) as usize;
        out.push((body[4..4 + klen].to_vec(), body[4 + klen..].to_vec()));
        pos += 8 + len;
    }
    out
}

pub fn write_frames(path: &Path, frames: &[(Vec<u8>, Vec<u8>)]) {
    let mut buf = Vec::new();
    for (k, p) in frames {
        let mut body = (k.len() as u32).to_le_bytes().to_vec();
        body.extend_from_slice(k);
        body.extend_from_slice(p);
        buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
        buf.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        buf.extend_from_slice(&body);
    }
    std::fs::write(path, buf).unwrap();
}
