//! The JSON-lines interface (STDIO): one operation per line in, one answer
//! per line out, in the protocol every transport shares
//! ([`crate::protocol`]). A bad line is answered and skipped; every other
//! line still applies.

mod strict;

use crate::codes::Code;
use crate::engine::Engine;
use crate::protocol::{self, Failure, OpError, Reply};
use serde_json::Value;
use std::io::{BufRead, Write};

/// Longest line `apply` accepts, without its line end; longer lines are
/// answered `line_too_long` without being held in memory whole.
pub use crate::model::limits::MAX_LINE_BYTES;

/// Totals of an `apply` session.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ApplySummary {
    pub lines: u64,
    pub ok: u64,
    pub refused: u64,
    /// A machine failure (IO, corrupt log): applying stopped there.
    pub failed: bool,
}

/// Parse one line strictly: UTF-8 throughout (`malformed_json`, never a
/// lossy replacement), JSON, and no object with a key twice
/// (`invalid_request`: which of two values was meant cannot be known).
pub fn parse_line(line: &[u8]) -> Result<Value, Failure> {
    let text = std::str::from_utf8(line).map_err(|e| {
        Failure::new(
            Code::MalformedJson,
            format!(
                "line is not valid UTF-8 (byte {} starts an invalid sequence)",
                e.valid_up_to()
            ),
        )
    })?;
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Failure::new(Code::MalformedJson, format!("line is not JSON: {e}")))?;
    serde_json::from_str::<strict::NoDuplicateKeys>(text)
        .map_err(|e| Failure::new(Code::InvalidRequest, format!("{e}")))?;
    Ok(value)
}

/// Answer one line. Returns the reply and whether the failure (if any) was
/// the machine's rather than the caller's.
pub fn apply_line(engine: &mut Engine, line: &[u8]) -> (Reply, bool) {
    match parse_line(line) {
        Ok(v) => protocol::reply(engine, &v),
        Err(failure) => (Reply::Failed(failure), false),
    }
}

/// Apply one request's JSON and answer it as JSON (a refusal is the
/// error): the whole protocol for callers that hold a [`Value`].
pub fn apply_value(engine: &mut Engine, v: &Value) -> Result<Value, OpError> {
    let request = protocol::parse_request(v)?;
    let done = protocol::answer(engine, &request)?;
    Ok(serde_json::to_value(&done).expect("answers serialise"))
}

/// Read one line whose content (without `\n` or `\r\n`) is at most `max`
/// bytes. `Ok(None)` at end of input; `Ok(Some(Err(len)))` for a line that
/// was too long (consumed and dropped, never held whole).
fn read_bounded_line(
    input: &mut impl BufRead,
    max: usize,
) -> std::io::Result<Option<Result<Vec<u8>, usize>>> {
    let mut buf = Vec::new();
    // Bytes of the line before its `\n`, and whether any was read at all.
    let mut total = 0usize;
    let mut any = false;
    let mut last = None;
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        any = true;
        let (used, content, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, i, true),
            None => (chunk.len(), chunk.len(), false),
        };
        // Keep up to max + 1 bytes: room for a `\r` after a full line.
        let room = max.saturating_add(1).saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..content.min(room)]);
        if content > 0 {
            last = Some(chunk[content - 1]);
        }
        total += content;
        input.consume(used);
        if done {
            break;
        }
    }
    if !any {
        return Ok(None);
    }
    let cr = usize::from(last == Some(b'\r'));
    if total - cr > max {
        return Ok(Some(Err(total)));
    }
    buf.truncate(total - cr);
    Ok(Some(Ok(buf)))
}

/// Input whose already-read bytes can be looked at without blocking: lines
/// already there are decided together, and a caller who writes one line
/// and waits for its answer gets it at once.
pub trait ReadAhead: BufRead {
    fn buffered(&self) -> &[u8];
}

impl<R: std::io::Read> ReadAhead for std::io::BufReader<R> {
    fn buffered(&self) -> &[u8] {
        self.buffer()
    }
}

impl ReadAhead for &[u8] {
    fn buffered(&self) -> &[u8] {
        self
    }
}

/// Most lines `apply` decides in one commit group.
pub const MAX_GROUP_LINES: usize = 4096;

/// Apply every line of `input`, writing one answer line each to `output`.
/// Lines already read ahead are decided as one commit group (one sync per
/// partition for all of them) and answered once it is durable.
pub fn apply_stream(
    engine: &mut Engine,
    input: &mut impl ReadAhead,
    output: &mut impl Write,
    max_line: usize,
) -> std::io::Result<ApplySummary> {
    apply_stream_as(
        engine,
        &crate::auth::Grant::operator(),
        input,
        output,
        max_line,
    )
}

/// [`apply_stream`] with every line a request made by `grant`.
pub fn apply_stream_as(
    engine: &mut Engine,
    grant: &crate::auth::Grant,
    input: &mut impl ReadAhead,
    output: &mut impl Write,
    max_line: usize,
) -> std::io::Result<ApplySummary> {
    apply_stream_with(input, output, max_line, MAX_GROUP_LINES, |lines| {
        let lines = lines.into_iter().map(|l| (grant, None, l));
        let group = protocol::reply_group(engine, lines, None::<fn(&mut Engine)>);
        Ok(group
            .answered
            .into_iter()
            .map(|a| (a.reply, a.machine))
            .collect())
    })
}

pub use crate::protocol::Line;

/// Read `input` a line at a time and hand over, at once, up to `batch`
/// lines: the first, and those after it already read ahead (a line not
/// yet arrived is not waited for). Have `answer` reply to them (each reply
/// with whether it was the machine's failure), and write the replies in
/// order. Stops after a machine failure.
pub fn apply_stream_with(
    input: &mut impl ReadAhead,
    output: &mut impl Write,
    max_line: usize,
    batch: usize,
    mut answer: impl FnMut(Vec<Line>) -> std::io::Result<Vec<(Reply, bool)>>,
) -> std::io::Result<ApplySummary> {
    let mut summary = ApplySummary::default();
    let mut ended = false;
    while !ended {
        let mut lines = Vec::new();
        while lines.len() < batch.max(1) {
            if !lines.is_empty() && !input.buffered().contains(&b'\n') {
                break;
            }
            let Some(line) = read_bounded_line(input, max_line)? else {
                ended = true;
                break;
            };
            lines.push(match line {
                Err(len) => Err(Failure::new(
                    Code::LineTooLong,
                    format!("line of {len} bytes exceeds the limit of {max_line} bytes"),
                )),
                Ok(l) if l.iter().all(u8::is_ascii_whitespace) => continue,
                Ok(l) => parse_line(&l),
            });
        }
        if lines.is_empty() {
            continue;
        }
        for (reply, machine) in answer(lines)? {
            summary.lines += 1;
            if reply.is_ok() {
                summary.ok += 1;
            } else {
                summary.refused += 1;
            }
            serde_json::to_writer(&mut *output, &reply)?;
            output.write_all(b"\n")?;
            if machine {
                summary.failed = true;
                output.flush()?;
                return Ok(summary);
            }
        }
        output.flush()?;
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(data: &[u8], max: usize) -> Vec<Result<Vec<u8>, usize>> {
        let mut r = std::io::BufReader::with_capacity(3, data);
        std::iter::from_fn(|| read_bounded_line(&mut r, max).unwrap()).collect()
    }

    #[test]
    fn bounded_lines() {
        assert_eq!(
            lines(b"short\n0123456789abcdef\nlast", 8),
            vec![Ok(b"short".to_vec()), Err(16), Ok(b"last".to_vec())]
        );
    }

    #[test]
    fn the_line_limit_counts_content_without_its_line_end() {
        // Exactly the limit: with \n, with \r\n, and at the end of input.
        assert_eq!(lines(b"12345678\n", 8), vec![Ok(b"12345678".to_vec())]);
        assert_eq!(lines(b"12345678\r\n", 8), vec![Ok(b"12345678".to_vec())]);
        assert_eq!(lines(b"12345678", 8), vec![Ok(b"12345678".to_vec())]);
        // One byte over, however the line ends.
        assert_eq!(lines(b"123456789\n", 8), vec![Err(9)]);
        assert_eq!(lines(b"123456789\r\n", 8), vec![Err(10)]);
        assert_eq!(lines(b"123456789", 8), vec![Err(9)]);
        assert_eq!(lines(b"1234567\r9", 8), vec![Err(9)]);
        assert_eq!(lines(b"\n\n", 8), vec![Ok(vec![]), Ok(vec![])]);
    }

    #[test]
    fn the_largest_limit_there_is_reads_lines_whole() {
        // `max + 1` once wrapped to 0 here, and every line came out empty.
        assert_eq!(
            lines(b"{\"op\":\"x\"}\nlast", usize::MAX),
            vec![Ok(b"{\"op\":\"x\"}".to_vec()), Ok(b"last".to_vec())]
        );
    }

    #[test]
    fn lines_that_are_not_utf8_or_repeat_a_key_are_refused() {
        let code = |line: &[u8]| parse_line(line).unwrap_err().error.code.as_str();
        assert_eq!(code(b"{\"op\":\"x\xc3\x28y\"}"), "malformed_json");
        assert_eq!(code(b"{\"run\":\"r3\",\"run\":\"r4\"}"), "invalid_request");
        assert_eq!(code(b"{\"a\":{\"b\":1,\"b\":2}}"), "invalid_request");
        assert_eq!(code(b"[{\"b\":1,\"b\":2}]"), "invalid_request");
        assert_eq!(code(b"{\"op\":"), "malformed_json");
        assert!(parse_line(b"{\"a\":{\"b\":1},\"c\":{\"b\":2}}").is_ok());
        assert!(parse_line("{\"op\":\"caf\u{e9}\"}".as_bytes()).is_ok());
    }
}
