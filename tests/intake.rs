//! What a connection may cost `serve --listen` before a handler runs,
//! with raw sockets: a body declared over the limit is refused before it
//! is read, a body that never arrives is answered 408, headers that never
//! finish are dropped and do not keep SIGTERM from stopping the server,
//! and past the connection cap a client is told 503 at once while the
//! descriptors the content store needs stay free.

mod common;

use common::server::{http, start, SESSIONS};
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn host_port(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

/// Send `head` (and nothing more) and read what comes back until the
/// server closes or `wait` passes.
fn send_and_read(addr: &str, head: &str, wait: Duration) -> (String, Duration) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let t = Instant::now();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    (String::from_utf8_lossy(&out).into_owned(), t.elapsed())
}

fn token(url: &str) -> String {
    SESSIONS.lock().unwrap()[url].clone()
}

#[test]
fn bodies_over_the_limit_or_too_slow_are_answered_without_waiting_for_them() {
    let d = tempfile::tempdir().unwrap();
    let s = start(d.path(), None, &["--request-timeout-ms", "700"]);
    let addr = host_port(&s.url);
    let auth = format!("Authorization: Bearer {}\r\n", token(&s.url));
    // Declared over the limit, body never sent: refused at once.
    let (got, took) = send_and_read(
        &addr,
        &format!("POST /v1/ops HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 5000000\r\n\r\n"),
        Duration::from_secs(20),
    );
    assert!(got.starts_with("HTTP/1.1 413"), "{got}");
    assert!(
        got.contains("line_too_long") && got.contains("5000000"),
        "{got}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    // Declared within the limit, half sent: 408 once the timeout passes.
    let (got, took) = send_and_read(
        &addr,
        &format!("POST /v1/ops HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 17\r\n\r\n{{\"op\":"),
        Duration::from_secs(20),
    );
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("\"code\":\"timeout\""), "{got}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    // The server answers as before.
    let r = http(&s.url)
        .post(format!("{}/v1/ops", s.url))
        .body(json!({"op":"dispatch"}).to_string())
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

#[test]
fn headers_that_never_finish_neither_hold_a_connection_nor_keep_sigterm_waiting() {
    let d = tempfile::tempdir().unwrap();
    let mut s = start(d.path(), None, &[]);
    let addr = host_port(&s.url);
    // Dropped once the header timeout passes.
    let (got, took) = send_and_read(
        &addr,
        "GET /healthz HTTP/1.1\r\nHost: x\r\n",
        Duration::from_secs(40),
    );
    assert!(!got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(
        took < agentledger::server::intake::HEADER_TIMEOUT + Duration::from_secs(5),
        "held {took:?}"
    );
    // A client in the middle of its headers when SIGTERM comes: the
    // server stops within its grace all the same.
    let mut slow = TcpStream::connect(&addr).unwrap();
    slow.write_all(b"POST /v1/ops HTTP/1.1\r\nHost: x\r\nContent-Le")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
    let deadline = t + agentledger::server::intake::SHUTDOWN_GRACE + Duration::from_secs(10);
    loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            assert!(status.success(), "{status:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "serve still running after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(slow);
}

/// `serve` with 100 descriptors (the cap leaves 64 of them to the
/// ledger) and `extra` flags: the child and the URL it listens on.
fn serve_with_100_descriptors(
    data: &std::path::Path,
    extra: &[&str],
) -> (std::process::Child, String) {
    let stderr = data.with_extension("serve.err");
    let child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 100 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_agentledger"))
        .args(["--data"])
        .arg(data)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let url = loop {
        let text = std::fs::read_to_string(&stderr).unwrap_or_default();
        if let Some(u) = text
            .lines()
            .find_map(|l| l.strip_prefix("agentledger: listening on "))
        {
            break u.trim().to_string();
        }
        assert!(Instant::now() < deadline, "serve did not listen: {text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    (child, url)
}

#[test]
fn past_the_connection_cap_clients_are_told_so_and_the_store_keeps_its_descriptors() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let stderr = data.with_extension("serve.err");
    let (mut child, url) = serve_with_100_descriptors(&data, &[]);
    let token = std::fs::read_to_string(data.join("serve.token")).unwrap();
    let addr = host_port(&url);
    let post = |s: &mut TcpStream, body: &str| -> String {
        let req = format!(
            "POST /v1/ops HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            token.trim(),
            body.len()
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let n = s.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    // A client connected before the crowd, kept alive.
    let mut kept = TcpStream::connect(&addr).unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let got = post(
        &mut kept,
        &json!({"op":"publish_agent","agent":"dev","scope":"acme/p",
            "emits":[{"event":"e","context":"c","artifacts":["x"]}]})
        .to_string(),
    );
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    // A crowd of sockets that say nothing, all at once (each is dropped
    // once the header timeout passes).
    let crowd: Vec<TcpStream> = (0..60)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    let mut refused = 0;
    for c in &crowd {
        let mut c = c;
        c.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut buf = [0u8; 512];
        if let Ok(n) = c.read(&mut buf) {
            let got = String::from_utf8_lossy(&buf[..n]).into_owned();
            if n > 0 {
                assert!(got.starts_with("HTTP/1.1 503"), "{got}");
                assert!(got.contains("overloaded"), "{got}");
                refused += 1;
            }
        }
    }
    assert!(refused > 0, "no connection past the cap was told so");
    // The kept connection still gets its work done, files and all.
    for (i, body) in [
        json!({"op":"open_run","run":"r1","agent":"dev"}),
        json!({"op":"close_run","run":"r1","status":"succeeded","artifacts":{"x":"bytes of x"}}),
    ]
    .iter()
    .enumerate()
    {
        let got = post(&mut kept, &body.to_string());
        assert!(got.starts_with("HTTP/1.1 200"), "{i}: {got}");
    }
    drop(crowd);
    let text = std::fs::read_to_string(&stderr).unwrap_or_default();
    assert!(!text.contains("Too many open files"), "{text}");
    let _ = child.kill();
    let _ = child.wait();
}

/// Who sends a body is known before it is read: without a credential, with
/// one that is not a token, or with a token the ledger does not know or has
/// revoked, the answer is 401 at once, however large the body declared
/// (5,000 lines' worth, or over the limit) and though none of it was sent.
#[test]
fn a_body_is_read_only_for_a_caller_the_ledger_accepts() {
    let d = tempfile::tempdir().unwrap();
    let s = start(d.path(), None, &[]);
    let addr = host_port(&s.url);
    let revoked = common::server::issue(&s.url, "platform:acme", &["acme"]);
    common::server::post_ok(
        &s.url,
        json!({"op":"revoke_token","id": agentledger::auth::tokens::id_of(&agentledger::auth::tokens::hash(&revoked))}),
    );
    let unknown = agentledger::auth::tokens::generate().unwrap();
    for (who, auth) in [
        ("none", String::new()),
        ("not bearer", "Authorization: Basic eDp5\r\n".to_string()),
        ("unknown", format!("Authorization: Bearer {unknown}\r\n")),
        ("revoked", format!("Authorization: Bearer {revoked}\r\n")),
    ] {
        for declared in [5_000 * 100, 4 * 1024 * 1024, 50_000_000] {
            let (got, took) = send_and_read(
                &addr,
                &format!("POST /v1/ops HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/x-ndjson\r\nContent-Length: {declared}\r\n\r\n"),
                Duration::from_secs(20),
            );
            assert!(got.starts_with("HTTP/1.1 401"), "{who} {declared}: {got}");
            assert!(got.contains("unauthenticated"), "{who} {declared}: {got}");
            assert!(took < Duration::from_secs(5), "{who} {declared}: {took:?}");
        }
    }
}

/// Bodies being read share one budget: with room for two, a third sender
/// is answered 503 `overloaded` with `Retry-After` at once, without its
/// body being read; once the first two are done, bodies are read again.
#[test]
fn bodies_in_flight_share_one_budget() {
    let d = tempfile::tempdir().unwrap();
    let s = start(
        d.path(),
        None,
        &[
            "--max-body-bytes",
            "100000",
            "--body-budget-bytes",
            "200000",
            "--request-timeout-ms",
            "20000",
        ],
    );
    let addr = host_port(&s.url);
    let auth = format!("Authorization: Bearer {}\r\n", token(&s.url));
    let op = json!({"op":"dispatch"}).to_string();
    let head = |len: usize| {
        format!("POST /v1/ops HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: {len}\r\n\r\n")
    };
    // Two senders declare 100,000 bytes each and stall one byte short.
    let padded = |len: usize| format!("{op}{}", " ".repeat(len - op.len()));
    let mut stalled = Vec::new();
    for _ in 0..2 {
        let mut c = TcpStream::connect(&addr).unwrap();
        let body = padded(100_000);
        c.write_all(head(100_000).as_bytes()).unwrap();
        c.write_all(&body.as_bytes()[..99_999]).unwrap();
        stalled.push((c, body));
    }
    std::thread::sleep(Duration::from_millis(300));
    // A third, even a small one, is refused at once.
    let (got, took) = send_and_read(&addr, &head(op.len()), Duration::from_secs(10));
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    assert!(got.to_ascii_lowercase().contains("retry-after: 1"), "{got}");
    assert!(
        got.contains("overloaded") && got.contains("--body-budget-bytes"),
        "{got}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    // A chunked body past the budget is refused as well.
    let (got, _) = send_and_read(
        &addr,
        &format!(
            "POST /v1/ops HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{op}\r\n0\r\n\r\n",
            op.len()
        ),
        Duration::from_secs(10),
    );
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    // The first two finish and are answered; the budget is free again.
    for (mut c, body) in stalled {
        c.write_all(&body.as_bytes()[99_999..]).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = [0u8; 12];
        c.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"HTTP/1.1 200", "{}", String::from_utf8_lossy(&buf));
    }
    let a: serde_json::Value = http(&s.url)
        .post(format!("{}/v1/ops", s.url))
        .header("content-type", "application/json")
        .body(op.clone())
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(a["ok"], json!(true), "{a}");
}

#[test]
fn a_body_budget_below_the_body_limit_is_refused_at_start() {
    let d = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentledger"))
        .args([
            "--data",
            d.path().to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--max-body-bytes", "1000", "--body-budget-bytes", "999"])
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--body-budget-bytes 999") && err.contains("--max-body-bytes 1000"),
        "{err}"
    );
}

type Socket = tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>;

/// Send the first `len` bytes of a text message, `{"op":"dispatch"}` and
/// spaces, as a fragment that is not its last.
fn begin_message(ws: &mut Socket, len: usize) {
    use tungstenite::protocol::frame::{coding::OpCode, Frame};
    let op = br#"{"op":"dispatch"}"#;
    let mut first = op.to_vec();
    first.resize(len, b' ');
    let frame = Frame::message(
        first,
        OpCode::Data(tungstenite::protocol::frame::coding::Data::Text),
        false,
    );
    ws.send(tungstenite::Message::Frame(frame)).unwrap();
}

/// The last fragment of the message `begin_message` began.
fn end_message(ws: &mut Socket) {
    use tungstenite::protocol::frame::{coding::OpCode, Frame};
    let frame = Frame::message(
        b"  ".to_vec(),
        OpCode::Data(tungstenite::protocol::frame::coding::Data::Continue),
        true,
    );
    ws.send(tungstenite::Message::Frame(frame)).unwrap();
}

fn closed_with(ws: &mut Socket, code: u16, says: &str) {
    match common::server::ws_next(ws) {
        tungstenite::Message::Close(Some(f)) => {
            assert_eq!(u16::from(f.code), code, "{f:?}");
            assert!(f.reason.contains(says), "{f:?}");
        }
        other => panic!("not closed: {other}"),
    }
}

/// A WebSocket message is held to the time a request body may take: one
/// begun and never finished ends its socket (1008, saying why) soon after
/// the request timeout, while a socket that sends whole messages slowly
/// stays open.
#[test]
fn an_unfinished_websocket_message_is_ended_in_time() {
    let d = tempfile::tempdir().unwrap();
    let s = start(d.path(), None, &["--request-timeout-ms", "1500"]);
    let t = token(&s.url);
    let mut stalled = common::server::ws_connect(&s.url, &t).unwrap();
    let mut slow = common::server::ws_connect(&s.url, &t).unwrap();
    let began = Instant::now();
    begin_message(&mut stalled, 100_000);
    for _ in 0..3 {
        let a = common::server::ws_ask(&mut slow, &json!({"op":"dispatch"}));
        assert_eq!(a["ok"], json!(true), "{a}");
        std::thread::sleep(Duration::from_millis(1200));
    }
    closed_with(&mut stalled, 1008, "not finished within 1500 ms");
    assert!(
        began.elapsed() < Duration::from_secs(8),
        "{:?}",
        began.elapsed()
    );
    let a = common::server::ws_ask(&mut slow, &json!({"op":"dispatch"}));
    assert_eq!(a["ok"], json!(true), "{a}");
}

/// Messages being assembled share the body budget with request bodies:
/// with room for two, a third socket's unfinished message closes it 1013
/// (try again later), an HTTP body meanwhile is 503, and the two finish
/// and are answered.
#[test]
fn unfinished_websocket_messages_share_the_body_budget() {
    let d = tempfile::tempdir().unwrap();
    let s = start(
        d.path(),
        None,
        &[
            "--max-body-bytes",
            "100000",
            "--body-budget-bytes",
            "200000",
            "--request-timeout-ms",
            "20000",
        ],
    );
    let t = token(&s.url);
    let mut sockets: Vec<Socket> = (0..3)
        .map(|_| common::server::ws_connect(&s.url, &t).unwrap())
        .collect();
    for ws in &mut sockets[..2] {
        begin_message(ws, 80_000);
    }
    std::thread::sleep(Duration::from_millis(500));
    begin_message(&mut sockets[2], 80_000);
    closed_with(&mut sockets[2], 1013, "--body-budget-bytes");
    let r = http(&s.url)
        .post(format!("{}/v1/ops", s.url))
        .header("content-type", "application/json")
        .body(" ".repeat(60_000) + r#"{"op":"dispatch"}"#)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    for ws in &mut sockets[..2] {
        end_message(ws);
        match common::server::ws_next(ws) {
            tungstenite::Message::Text(a) => assert!(a.contains("\"ok\":true"), "{a}"),
            other => panic!("{other}"),
        }
    }
}

/// The HTTPS listener goes through the same intake: past the cap a TLS
/// client is told 503 `overloaded` over TLS (it used to fail to connect
/// once the descriptors ran out), and a client already connected carries on.
#[test]
fn over_tls_too_past_the_connection_cap_clients_are_told_so() {
    let d = tempfile::tempdir().unwrap();
    let ca = common::tls::TestCa::new();
    let (cert, key) = ca.server(d.path(), "server");
    let data = d.path().join("data");
    let (mut child, url) = serve_with_100_descriptors(
        &data,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    assert!(url.starts_with("https://"), "{url}");
    let token = std::fs::read_to_string(data.join("serve.token")).unwrap();
    let client = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap())
        .timeout(Duration::from_secs(20))
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    let publish = |agent: &str| {
        client
            .post(format!("{url}/v1/ops"))
            .bearer_auth(token.trim())
            .header("content-type", "application/json")
            .body(json!({"op":"publish_agent","agent":agent,"scope":"acme/p"}).to_string())
            .send()
    };
    // Connected before the crowd (and kept alive in the client's pool).
    assert_eq!(publish("dev").unwrap().status(), 200);
    let addr = url.trim_start_matches("https://").to_string();
    let crowd: Vec<TcpStream> = (0..60)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let fresh = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap())
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let r = fresh
        .get(format!("{url}/healthz"))
        .send()
        .expect("a TLS client past the cap is answered, not cut off");
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let said = r.text().unwrap();
    assert!(
        said.contains("overloaded") && said.contains("connections open already"),
        "{said}"
    );
    // The kept connection still gets its work done.
    assert_eq!(publish("dev2").unwrap().status(), 200);
    drop(crowd);
    let text = std::fs::read_to_string(data.with_extension("serve.err")).unwrap_or_default();
    assert!(!text.contains("Too many open files"), "{text}");
    let _ = child.kill();
    let _ = child.wait();
}

/// A second `serve` on a data dir another one holds says so, and only
/// so: it never claims to be serving.
#[test]
fn a_second_server_on_a_held_data_dir_fails_without_claiming_to_serve() {
    let d = tempfile::tempdir().unwrap();
    let _first = start(d.path(), None, &[]);
    let out = Command::new(env!("CARGO_BIN_EXE_agentledger"))
        .args(["--data"])
        .arg(d.path())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("in use"), "{err}");
    assert!(!err.contains("agentledger serving"), "{err}");
    assert!(!err.contains("listening on"), "{err}");
}

/// On SIGTERM an open WebSocket — quiet or subscribed — is told 1001
/// (going away) with a reason, and does not hold the exit for the whole
/// shutdown timeout.
#[test]
fn sockets_are_told_the_server_is_going_away_and_do_not_hold_its_exit() {
    use common::server::{ws_ask, ws_connect, ws_next};
    let d = tempfile::tempdir().unwrap();
    let mut s = start(d.path(), None, &["--shutdown-timeout", "30"]);
    let token = SESSIONS.lock().unwrap()[&s.url].clone();
    let mut quiet = ws_connect(&s.url, &token).unwrap();
    let mut subscribed = ws_connect(&s.url, &token).unwrap();
    let a = ws_ask(&mut subscribed, &json!({"op":"subscribe"}));
    assert_eq!(a["subscribed"], json!(true), "{a}");
    let t = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
    for ws in [&mut quiet, &mut subscribed] {
        match ws_next(ws) {
            tungstenite::Message::Close(Some(f)) => {
                assert_eq!(u16::from(f.code), 1001, "{f:?}");
                assert!(f.reason.contains("shutting down"), "{f:?}");
            }
            other => panic!("not a close frame: {other:?}"),
        }
    }
    loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            assert!(status.success(), "{status:?}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the sockets held the exit"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A WebSocket keeps the place of the connection it was upgraded from:
/// sockets count under the connection cap (they used to leave it once
/// upgraded, so any number could be held open).
#[test]
fn websockets_count_under_the_connection_cap() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let (mut child, url) = serve_with_100_descriptors(&data, &[]);
    let token = std::fs::read_to_string(data.join("serve.token")).unwrap();
    let mut open = Vec::new();
    let mut refused = 0;
    for _ in 0..60 {
        match common::server::ws_connect(&url, token.trim()) {
            Ok(ws) => open.push(ws),
            Err(503) => refused += 1,
            Err(other) => panic!("upgrade answered {other}"),
        }
    }
    // 100 descriptors leave 36 connections.
    assert_eq!(open.len(), 36, "{refused} refused");
    assert_eq!(refused, 24);
    // One closed makes room for one more.
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    while common::server::ws_connect(&url, token.trim()).is_err() {
        assert!(
            Instant::now() < deadline,
            "the closed socket's place never came back"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Too many header fields, or too many bytes of them, are refused 431
/// with the answer object saying which limit (the parser used to answer
/// an empty 431 itself); far too many (past the parser's 256) get the
/// parser's bare 431; requests within the limits are served.
#[test]
fn too_many_headers_are_refused_with_the_answer_object() {
    let d = tempfile::tempdir().unwrap();
    let s = start(d.path(), None, &[]);
    let addr = host_port(&s.url);
    let many = |n: usize, value: &str| -> String {
        let fields: String = (0..n)
            .map(|i| format!("X-Field-{i}: {value}\r\n"))
            .collect();
        format!("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{fields}\r\n")
    };
    let (got, _) = send_and_read(&addr, &many(3000, "v"), Duration::from_secs(10));
    assert!(
        got.starts_with("HTTP/1.1 431"),
        "{}",
        &got[..got.len().min(200)]
    );
    for (head, says) in [
        (many(101, "v"), "header fields; the limit is 100"),
        (many(250, "v"), "header fields; the limit is 100"),
        (many(2, &"v".repeat(40 * 1024)), "bytes; the limit is 65536"),
    ] {
        let (got, _) = send_and_read(&addr, &head, Duration::from_secs(10));
        assert!(
            got.starts_with("HTTP/1.1 431"),
            "{}",
            &got[..got.len().min(200)]
        );
        let body = got.split("\r\n\r\n").nth(1).unwrap_or_default();
        let v: serde_json::Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!(v["error"]["code"], "limit_exceeded", "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(says),
            "{v}"
        );
    }
    let (got, _) = send_and_read(&addr, &many(90, "v"), Duration::from_secs(10));
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
}
