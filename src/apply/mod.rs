//! The JSON-lines interface: one operation per line in, one answer per line
//! out. A bad line is answered and skipped; every other line still applies.

pub mod ops;
pub use ops as ops_json;

pub use ops::apply_value;

use crate::engine::Engine;
use serde_json::{json, Value};
use std::io::{BufRead, Write};

/// Longest line `apply` accepts; longer lines are answered `line_too_long`
/// without being held in memory whole.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// The error answer of a line.
pub fn error_answer(code: &str, message: impl Into<String>) -> Value {
    json!({"ok": false, "error": {"code": code, "message": message.into()}})
}

/// Totals of an `apply` session.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ApplySummary {
    pub lines: u64,
    pub ok: u64,
    pub refused: u64,
    /// A machine failure (IO, corrupt log): applying stopped there.
    pub failed: bool,
}

/// Answer one line. Returns the answer and whether the failure (if any) was
/// the machine's rather than the caller's.
pub fn apply_line(engine: &mut Engine, line: &str) -> (Value, bool) {
    let value: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => {
            return (
                error_answer("malformed_json", format!("line is not JSON: {e}")),
                false,
            )
        }
    };
    match apply_value(engine, &value) {
        Ok(answer) => (answer, false),
        Err(e) => {
            let machine = matches!(&e, ops::OpError::Ledger(le) if !le.is_refusal());
            (error_answer(e.code(), e.to_string()), machine)
        }
    }
}

/// Read one line of at most `max` bytes. `Ok(None)` at end of input;
/// `Ok(Some(Err(len)))` for a line that was too long (consumed and dropped).
fn read_bounded_line(
    input: &mut impl BufRead,
    max: usize,
) -> std::io::Result<Option<Result<String, usize>>> {
    let mut buf = Vec::new();
    let mut total = 0usize;
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            if total == 0 {
                return Ok(None);
            }
            break;
        }
        let (used, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if total + used <= max + 1 {
            buf.extend_from_slice(&chunk[..used]);
        }
        total += used;
        input.consume(used);
        if done {
            break;
        }
    }
    if total > max + 1 {
        return Ok(Some(Err(total)));
    }
    while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        buf.pop();
    }
    Ok(Some(Ok(String::from_utf8_lossy(&buf).into_owned())))
}

/// Apply every line of `input`, writing one answer line each to `output`.
pub fn apply_stream(
    engine: &mut Engine,
    input: &mut impl BufRead,
    output: &mut impl Write,
    max_line: usize,
) -> std::io::Result<ApplySummary> {
    let mut summary = ApplySummary::default();
    while let Some(line) = read_bounded_line(input, max_line)? {
        let (answer, machine) = match line {
            Err(len) => (
                error_answer(
                    "line_too_long",
                    format!("line of {len} bytes exceeds the limit of {max_line} bytes"),
                ),
                false,
            ),
            Ok(l) if l.trim().is_empty() => continue,
            Ok(l) => apply_line(engine, &l),
        };
        summary.lines += 1;
        if answer["ok"] == json!(true) {
            summary.ok += 1;
        } else {
            summary.refused += 1;
        }
        serde_json::to_writer(&mut *output, &answer)?;
        output.write_all(b"\n")?;
        output.flush()?;
        if machine {
            summary.failed = true;
            break;
        }
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_lines() {
        let data = b"short\n0123456789abcdef\nlast";
        let mut r = std::io::BufReader::with_capacity(4, &data[..]);
        assert_eq!(
            read_bounded_line(&mut r, 8).unwrap(),
            Some(Ok("short".into()))
        );
        assert!(matches!(
            read_bounded_line(&mut r, 8).unwrap(),
            Some(Err(_))
        ));
        assert_eq!(
            read_bounded_line(&mut r, 8).unwrap(),
            Some(Ok("last".into()))
        );
        assert_eq!(read_bounded_line(&mut r, 8).unwrap(), None);
    }
}
