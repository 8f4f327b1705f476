//! `agentledger mcp --run RUN` where a server owns the ledger: each
//! JSON-RPC message read on stdin is POSTed to the run's endpoint on that
//! server (`/v1/runs/{run}/mcp`) with the token, and what it answers is
//! written to stdout, one message a line. The server authenticates,
//! decides and keeps the session; this only carries messages between the
//! two transports, so a framework that starts MCP servers as subprocesses
//! reaches a ledger it cannot open itself.

use super::remote::Server;
use anyhow::{bail, Context, Result};
use reqwest::blocking::Response;
use reqwest::Method;
use serde_json::{json, Value};
use std::io::{BufRead, Read, Write};

/// The HTTP headers that carry an MCP session across requests.
const SESSION: &str = "mcp-session-id";
const VERSION: &str = "mcp-protocol-version";

/// What the relay knows of the session it carries.
#[derive(Default)]
struct Carried {
    session: Option<String>,
    version: Option<String>,
    /// The client's `initialize` and `notifications/initialized`, to begin
    /// the session again where the server no longer holds it (it was idle
    /// past the server's limit, or the server restarted): the client on
    /// stdin still holds it.
    handshake: Vec<String>,
}

pub(super) fn relay(server: &Server, run: &str) -> Result<i32> {
    let path = format!("/v1/runs/{}/mcp", agentledger::encode::path_segment(run));
    admitted(server, &path)?;
    tracing::info!(endpoint = %format!("{}{path}", server.url()), "relaying MCP from stdin/stdout");
    let mut carried = Carried::default();
    let mut stdin = std::io::stdin().lock();
    while let Some(line) = next_message(&mut stdin)? {
        let answers = match line {
            Message::Line(line) if line.trim().is_empty() => continue,
            Message::Line(line) => exchange(server, &path, &line, &mut carried),
            Message::TooLong => vec![json!({"jsonrpc": "2.0", "id": null, "error": {
                "code": -32600,
                "message": format!("invalid request: a message longer than {MAX_MESSAGE_BYTES} bytes (not sent)")}})
            .to_string()],
            Message::NotUtf8(at) => vec![json!({"jsonrpc": "2.0", "id": null, "error": {
                "code": -32700,
                "message": format!("parse error: the message is not UTF-8 (byte {at}); JSON-RPC messages are UTF-8 JSON (not sent)")}})
            .to_string()],
        };
        for answer in answers {
            let mut out = std::io::stdout().lock();
            // A client that went away ends the relay.
            if writeln!(out, "{answer}").and_then(|_| out.flush()).is_err() {
                return Ok(0);
            }
        }
    }
    if let Some(id) = &carried.session {
        // Ending the session frees its place on the server at once.
        let _ = server
            .request(Method::DELETE, &path)
            .header(SESSION, id)
            .send();
    }
    Ok(0)
}

/// The most one message read on stdin may be: what the endpoint takes.
const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// One message read on stdin.
enum Message {
    Line(String),
    /// Longer than [`MAX_MESSAGE_BYTES`]: read past, never held whole.
    TooLong,
    /// Not UTF-8 (the offset of its first bad byte): JSON it cannot be.
    NotUtf8(usize),
}

/// The next line on `input` (without its end), `None` at its end. A line
/// longer than the endpoint takes is skipped without being held in
/// memory; one that is not UTF-8 is said to be, and the next one read.
fn next_message(input: &mut impl BufRead) -> Result<Option<Message>> {
    let mut line = Vec::new();
    let read = input
        .by_ref()
        .take(MAX_MESSAGE_BYTES as u64 + 1)
        .read_until(b'\n', &mut line)
        .context("reading stdin")?;
    if read == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') && line.len() > MAX_MESSAGE_BYTES {
        // Skip the rest of it, a buffer at a time.
        loop {
            let buf = input.fill_buf().context("reading stdin")?;
            if buf.is_empty() {
                break;
            }
            match buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    input.consume(i + 1);
                    break;
                }
                None => {
                    let n = buf.len();
                    input.consume(n);
                }
            }
        }
        return Ok(Some(Message::TooLong));
    }
    while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        line.pop();
    }
    Ok(Some(match String::from_utf8(line) {
        Ok(l) => Message::Line(l),
        Err(e) => Message::NotUtf8(e.utf8_error().valid_up_to()),
    }))
}

/// Whether the server lets this token use the run's endpoint: asked
/// before the client starts, so that a wrong token or run ends the
/// process with the server's reason rather than a failed handshake.
fn admitted(server: &Server, path: &str) -> Result<()> {
    let r = server
        .request(Method::GET, path)
        .header("accept", "text/event-stream")
        .send()
        .with_context(|| format!("asking {}{path}", server.url()))?;
    let status = r.status();
    if matches!(status.as_u16(), 401 | 403 | 404) {
        let body: Value = r.json().unwrap_or(Value::Null);
        let why = body["error"]["message"]
            .as_str()
            .unwrap_or("no reason given")
            .to_string();
        let hint = match status.as_u16() {
            401 => " (give the agent's token with --token-file or AGENTLEDGER_TOKEN)",
            _ => "",
        };
        bail!("{}{path}: HTTP {status}: {why}{hint}", server.url());
    }
    Ok(())
}

/// POST `line` in the session carried.
fn post(server: &Server, path: &str, line: &str, carried: &Carried) -> Result<Response> {
    let mut request = server
        .request(Method::POST, path)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(line.to_string());
    if let Some(s) = &carried.session {
        request = request.header(SESSION, s);
    }
    if let Some(v) = &carried.version {
        request = request.header(VERSION, v);
    }
    request
        .send()
        .with_context(|| format!("the server at {} did not answer", server.url()))
}

/// Begin the session again with the client's own handshake; whether the
/// server took it.
fn renew(server: &Server, path: &str, carried: &mut Carried) -> bool {
    carried.session = None;
    let handshake = carried.handshake.clone();
    for line in &handshake {
        match post(server, path, line, carried).and_then(|r| answered(r, carried)) {
            Ok(answers) => answers.iter().for_each(|a| remember_version(a, carried)),
            Err(e) => {
                tracing::warn!("beginning the MCP session again: {e:#}");
                return false;
            }
        }
    }
    tracing::info!("the server no longer held the MCP session: began it again");
    carried.session.is_some()
}

/// POST one message; the messages to write back (none for a notification
/// the server accepted).
fn exchange(server: &Server, path: &str, line: &str, carried: &mut Carried) -> Vec<String> {
    let message: Option<Value> = serde_json::from_str(line).ok();
    let id = message.as_ref().and_then(|m| m.get("id")).cloned();
    let method = message.as_ref().and_then(|m| m["method"].as_str());
    match method {
        Some("initialize") => carried.handshake = vec![line.to_string()],
        Some("notifications/initialized") => carried.handshake.push(line.to_string()),
        _ => {}
    }
    let mut sent = post(server, path, line, carried);
    let lost = |r: &Result<Response>| {
        r.as_ref()
            .is_ok_and(|r| r.status() == reqwest::StatusCode::NOT_FOUND)
    };
    if lost(&sent) && carried.session.is_some() && carried.handshake.len() == 2 {
        // Only once: a session the server forgets again is its answer.
        if renew(server, path, carried) {
            sent = post(server, path, line, carried);
        }
    }
    let answers = sent.and_then(|r| answered(r, carried));
    match answers {
        Ok(answers) => answers
            .into_iter()
            .map(|mut a| {
                // The server answers a message it could not read with id
                // null; the client knows the message by its id.
                if a.get("id").is_some_and(Value::is_null) && id.is_some() {
                    a["id"] = id.clone().unwrap_or(Value::Null);
                }
                remember_version(&a, carried);
                a.to_string()
            })
            .collect(),
        Err(e) => {
            let why = format!("{e:#}");
            tracing::warn!("{why}");
            match id {
                Some(id) => vec![json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32603, "message": why}})
                .to_string()],
                None => Vec::new(),
            }
        }
    }
}

/// The protocol version an `initialize` result names: later requests say
/// it in their header.
fn remember_version(answer: &Value, carried: &mut Carried) {
    if let Some(v) = answer["result"]["protocolVersion"].as_str() {
        carried.version = Some(v.to_string());
    }
}

/// The JSON-RPC messages in an answer: its JSON body, the `data` of each
/// event of an SSE body, or a refusal made one.
fn answered(r: Response, carried: &mut Carried) -> Result<Vec<Value>> {
    let status = r.status();
    if let Some(s) = r.headers().get(SESSION).and_then(|v| v.to_str().ok()) {
        carried.session = Some(s.to_string());
    }
    let sse = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"));
    let body = r.text().context("reading the answer")?;
    if status.as_u16() == 202 || body.trim().is_empty() && status.is_success() {
        return Ok(Vec::new());
    }
    if sse {
        return Ok(body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect());
    }
    match serde_json::from_str::<Value>(&body) {
        Ok(v) if v.get("jsonrpc").is_some() => Ok(vec![v]),
        Ok(v) => bail!(
            "HTTP {status}: {}",
            v["error"]["message"].as_str().unwrap_or(body.trim())
        ),
        Err(_) => bail!("HTTP {status}: {}", body.trim()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_past_the_limit_is_skipped_and_the_next_one_read() {
        let mut input = Vec::new();
        input.extend(std::iter::repeat_n(b'x', MAX_MESSAGE_BYTES + 10));
        input.extend(b"\n{\"id\":1}\r\n\n");
        let mut r = std::io::BufReader::new(&input[..]);
        assert!(matches!(
            next_message(&mut r).unwrap(),
            Some(Message::TooLong)
        ));
        assert!(
            matches!(next_message(&mut r).unwrap(), Some(Message::Line(l)) if l == "{\"id\":1}")
        );
        assert!(matches!(next_message(&mut r).unwrap(), Some(Message::Line(l)) if l.is_empty()));
        assert!(next_message(&mut r).unwrap().is_none());
    }

    #[test]
    fn a_message_that_is_not_utf8_is_said_to_be_and_the_next_one_read() {
        let input = b"{\"id\":\xff1}\n{\"id\":2}\n";
        let mut r = std::io::BufReader::new(&input[..]);
        assert!(matches!(
            next_message(&mut r).unwrap(),
            Some(Message::NotUtf8(6))
        ));
        assert!(
            matches!(next_message(&mut r).unwrap(), Some(Message::Line(l)) if l == "{\"id\":2}")
        );
        assert!(next_message(&mut r).unwrap().is_none());
    }

    #[test]
    fn a_message_exactly_at_the_limit_is_read() {
        let mut input = vec![b'y'; MAX_MESSAGE_BYTES];
        input.push(b'\n');
        let mut r = std::io::BufReader::new(&input[..]);
        assert!(
            matches!(next_message(&mut r).unwrap(), Some(Message::Line(l)) if l.len() == MAX_MESSAGE_BYTES)
        );
    }
}
