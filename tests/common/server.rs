//! A `serve --listen` child process on 127.0.0.1:0 for the tests that
//! talk to the ledger over the network, and clients holding its
//! operator's session token.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Child,
    pub url: String,
    pub stderr: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn base_args(data: &Path, kafka: Option<&(String, String)>) -> Vec<String> {
    let mut a = vec!["--data".to_string(), data.display().to_string()];
    if let Some((brokers, prefix)) = kafka {
        a.extend([
            "--kafka".into(),
            brokers.clone(),
            "--topic-prefix".into(),
            prefix.clone(),
        ]);
    }
    a
}

/// Start a server on any port and wait until it says where it listens.
/// The child is killed and reaped when the returned `Server` is dropped.
pub fn start(data: &Path, kafka: Option<&(String, String)>, extra: &[&str]) -> Server {
    start_with_env(data, kafka, extra, &[])
}

/// [`start`] with variables set in the server's environment.
#[allow(clippy::zombie_processes)]
pub fn start_with_env(
    data: &Path,
    kafka: Option<&(String, String)>,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Server {
    let stderr = data.with_extension(format!("serve-{}.err", std::process::id()));
    let mut c = Command::new(env!("CARGO_BIN_EXE_agentledger"));
    c.envs(env.iter().copied())
        .args(base_args(data, kafka))
        .arg("serve")
        .args(if extra.contains(&"--listen") {
            &[][..]
        } else {
            &["--listen", "127.0.0.1:0"][..]
        })
        .args(if extra.contains(&"--poll-ms") {
            &[][..]
        } else {
            &["--poll-ms", "50"][..]
        })
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap());
    let mut child = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&stderr).unwrap_or_default();
        if let Some(url) = text
            .lines()
            .find_map(|l| l.strip_prefix("agentledger: listening on "))
        {
            let url = url.trim().to_string();
            assert_eq!(
                std::fs::read_to_string(data.join("serve.addr"))
                    .unwrap()
                    .trim(),
                url
            );
            let token = std::fs::read_to_string(data.join("serve.token")).unwrap();
            SESSIONS
                .lock()
                .unwrap()
                .insert(url.clone(), token.trim().to_string());
            return Server { child, url, stderr };
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve did not listen: {text}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The session token (the operator's credential) of each server started,
/// by its URL.
pub static SESSIONS: std::sync::Mutex<std::collections::BTreeMap<String, String>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// The operator's `Authorization` header for the server at `url`.
pub fn bearer(url: &str) -> String {
    let base = url
        .split("/v1/")
        .next()
        .unwrap()
        .replace("wss://", "https://")
        .replace("ws://", "http://");
    format!("Bearer {}", SESSIONS.lock().unwrap()[&base])
}

/// A client that shows the operator's token of the server at `url`.
pub fn http(url: &str) -> reqwest::blocking::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("authorization", bearer(url).parse().unwrap());
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .default_headers(headers)
        .build()
        .unwrap()
}

/// POST one operation as the operator; it must be answered ok.
pub fn post_ok(url: &str, body: serde_json::Value) -> serde_json::Value {
    let v: serde_json::Value = http(url)
        .post(format!("{url}/v1/ops"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(v["ok"], serde_json::json!(true), "{body} -> {v}");
    v
}

/// The runs of `run`'s chain, once it has at least `n` (asked through the
/// server every 20 ms, for at most `within`; the server's log is shown if
/// it never does).
pub fn wait_chain(s: &Server, run: &str, n: usize, within: Duration) -> Vec<String> {
    wait_chain_as(s, None, run, n, within)
}

/// [`wait_chain`] asked with `token` (in a cluster: answered by the
/// chain's owner) rather than the server's session token.
pub fn wait_chain_as(
    s: &Server,
    token: Option<&str>,
    run: &str,
    n: usize,
    within: Duration,
) -> Vec<String> {
    let url = s.url.as_str();
    let deadline = Instant::now() + within;
    loop {
        let asked = match token {
            Some(t) => client()
                .get(format!("{url}/v1/runs/{run}/chain"))
                .bearer_auth(t),
            None => http(url).get(format!("{url}/v1/runs/{run}/chain")),
        };
        let v: serde_json::Value = asked.send().unwrap().json().unwrap();
        let runs: Vec<String> = v["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["run"].as_str().map(str::to_string))
            .collect();
        if runs.len() >= n {
            return runs;
        }
        assert!(
            Instant::now() < deadline,
            "the chain of {run} did not reach {n} runs: {v}\nserve said: {}",
            std::fs::read_to_string(&s.stderr).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A client that shows no credential of its own.
pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// POST one operation with `token`: the status and the answer.
pub fn op(url: &str, token: &str, v: &serde_json::Value) -> (u16, serde_json::Value) {
    let r = client()
        .post(format!("{url}/v1/ops"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(v.to_string())
        .send()
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().unwrap();
    let answer = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{v}: {e}: {text}"));
    (status, answer)
}

/// POST one operation with `token`; it must be answered ok.
pub fn ok(url: &str, token: &str, v: serde_json::Value) -> serde_json::Value {
    let (status, a) = op(url, token, &v);
    assert_eq!(
        (status, &a["ok"]),
        (200, &serde_json::json!(true)),
        "{v} → {a}"
    );
    a
}

/// A ledger token for `principal` with `scopes`, issued by the operator.
pub fn issue(url: &str, principal: &str, scopes: &[&str]) -> String {
    use agentledger::auth::tokens;
    let token = tokens::generate().unwrap();
    post_ok(
        url,
        serde_json::json!({"op":"issue_token","principal":principal,"scopes":scopes,
            "sha256": hex::encode(tokens::hash(&token))}),
    );
    token
}

pub type Socket = tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>>;

/// A WebSocket to `/v1/ws` showing `token` (reads time out after 20 s),
/// or the HTTP status the upgrade was refused with.
pub fn ws_connect(url: &str, token: &str) -> Result<Socket, u16> {
    use tungstenite::client::IntoClientRequest;
    let mut request = format!("{}/v1/ws", url.replacen("http", "ws", 1))
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (ws, _) = match tungstenite::connect(request) {
        Ok(c) => c,
        Err(tungstenite::Error::Http(r)) => return Err(r.status().as_u16()),
        Err(e) => panic!("connecting to {url}: {e}"),
    };
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    }
    Ok(ws)
}

/// The next text message or close frame of a socket.
pub fn ws_next(ws: &mut Socket) -> tungstenite::Message {
    loop {
        match ws.read() {
            Ok(m @ (tungstenite::Message::Text(_) | tungstenite::Message::Close(_))) => return m,
            Ok(_) => continue,
            Err(e) => panic!("the socket ended without a close frame: {e}"),
        }
    }
}

/// Send one JSON message on a socket and read the JSON answer.
pub fn ws_ask(ws: &mut Socket, v: &serde_json::Value) -> serde_json::Value {
    ws.send(tungstenite::Message::text(v.to_string())).unwrap();
    match ws_next(ws) {
        tungstenite::Message::Text(t) => serde_json::from_str(&t).unwrap(),
        other => panic!("{v}: answered {other}"),
    }
}

/// An MCP `initialize` request (JSON-RPC id 1, revision 2025-06-18).
pub fn mcp_initialize() -> serde_json::Value {
    serde_json::json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},
        "clientInfo":{"name":"t","version":"1"}}})
}
