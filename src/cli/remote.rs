//! The CLI through a running server: while `serve --listen` owns the data
//! dir, `trail`, `chain`, `agent`, `stats`, `status` and `apply` find it
//! through `<data>/serve.addr` (or `--server URL`) and ask it, printing
//! exactly what they print from the data dir.

use super::args::Cli;
use agentledger::apply::Line;
use agentledger::protocol::{Answer, Done, Failure, Reply, True};
use agentledger::queries::{Query, Said};
use anyhow::{bail, Context, Result};
use std::time::Duration;

pub struct Server {
    base: String,
    client: reqwest::blocking::Client,
    /// The bearer token every request shows.
    token: Option<String>,
}

/// The token to show the server: `AGENTLEDGER_TOKEN`, else the file
/// `--token-file` names, else the session token a server on this data
/// dir wrote (the operator's).
fn token_for(cli: &Cli) -> Result<Option<String>> {
    if let Ok(t) = std::env::var("AGENTLEDGER_TOKEN") {
        if !t.trim().is_empty() {
            return Ok(Some(t.trim().to_string()));
        }
    }
    let (file, named) = match &cli.token_file {
        Some(f) => (f.clone(), true),
        None => (agentledger::server::token_file(&cli.data), false),
    };
    match std::fs::read_to_string(&file) {
        Ok(t) => Ok(Some(t.trim().to_string())),
        Err(e) if named => {
            Err(e).with_context(|| format!("reading --token-file {}", file.display()))
        }
        Err(_) => Ok(None),
    }
}

/// Why a server did not answer its health check.
#[derive(Debug, thiserror::Error)]
enum Unhealthy {
    /// The request failed: the error and each of its causes.
    #[error("{0}")]
    Unreachable(String),
    #[error("HTTP {0}")]
    Status(reqwest::StatusCode),
}

/// The server to go through: `--server`, or the one named in
/// `serve.addr` if it answers (a server killed outright leaves the file
/// behind; then the data dir is used directly).
pub fn server_for(cli: &Cli) -> Result<Option<Server>> {
    let token = token_for(cli)?;
    if let Some(url) = &cli.server {
        let s = Server::new(url, token, cli.tls_ca.as_deref())?;
        if let Err(why) = s.health() {
            bail!("--server {url}: no agentledger server answers there: {why}");
        }
        return Ok(Some(s));
    }
    let file = agentledger::server::addr_file(&cli.data);
    let Ok(text) = std::fs::read_to_string(&file) else {
        return Ok(None);
    };
    let s = Server::new(text.trim(), token, cli.tls_ca.as_deref())?;
    match s.health() {
        Ok(()) => Ok(Some(s)),
        // Something answers TLS there but is not trusted: the server is
        // alive, and the data dir is its.
        Err(why) if s.base.starts_with("https://") && !why.to_string().contains("refused") => {
            bail!(
            "the server at {} (from {}) did not answer: {why}; trust its certificate with --tls-ca",
            s.base,
            file.display()
        )
        }
        Err(_) => Ok(None),
    }
}

/// A server named by URL (a ledger a witness follows), with the token
/// and CA the global flags give.
pub fn connect(cli: &Cli, url: &str) -> Result<Server> {
    let s = Server::new(url, token_for(cli)?, cli.tls_ca.as_deref())?;
    if let Err(why) = s.health() {
        bail!("{url}: no agentledger server answers there: {why}");
    }
    Ok(s)
}

impl Server {
    /// The body at `path`; `None` when the server says 404.
    pub fn fetch(&self, path: &str) -> Result<Option<Vec<u8>>> {
        let r = self
            .get(path)
            .send()
            .with_context(|| format!("GET {}{path}", self.base))?;
        let status = r.status();
        let body = r
            .bytes()
            .with_context(|| format!("GET {}{path}", self.base))?;
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            bail!(
                "GET {}{path}: HTTP {status}: {}",
                self.base,
                String::from_utf8_lossy(&body).trim()
            );
        }
        Ok(Some(body.to_vec()))
    }

    /// POST `body` as text to `path`: the status and the answer.
    pub fn post_text(&self, path: &str, body: String) -> Result<(u16, String)> {
        let r = self
            .authorized(self.client.post(format!("{}{path}", self.base)))
            .header("content-type", "text/plain; charset=utf-8")
            .body(body)
            .send()
            .with_context(|| format!("POST {}{path}", self.base))?;
        let status = r.status().as_u16();
        Ok((status, r.text().unwrap_or_default()))
    }

    /// A request to `path` showing the token, for what no method here
    /// asks (the MCP relay's messages).
    pub fn request(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::blocking::RequestBuilder {
        self.authorized(self.client.request(method, format!("{}{path}", self.base)))
    }

    /// Where the server answers.
    pub fn url(&self) -> &str {
        &self.base
    }

    fn new(url: &str, token: Option<String>, ca: Option<&std::path::Path>) -> Result<Server> {
        let mut builder = reqwest::blocking::Client::builder().timeout(Duration::from_secs(120));
        if let Some(ca) = ca {
            let pem =
                std::fs::read(ca).with_context(|| format!("reading --tls-ca {}", ca.display()))?;
            let cert = reqwest::Certificate::from_pem(&pem)
                .with_context(|| format!("--tls-ca {}: not a PEM certificate", ca.display()))?;
            builder = builder.add_root_certificate(cert);
        }
        let client = builder.build().context("making an HTTP client")?;
        Ok(Server {
            base: url.trim_end_matches('/').to_string(),
            client,
            token,
        })
    }

    fn get(&self, path: &str) -> reqwest::blocking::RequestBuilder {
        self.authorized(self.client.get(format!("{}{path}", self.base)))
    }

    fn authorized(
        &self,
        r: reqwest::blocking::RequestBuilder,
    ) -> reqwest::blocking::RequestBuilder {
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    /// Whether the server answers its health check, and if not why (the
    /// whole chain of causes: a TLS failure says which).
    fn health(&self) -> std::result::Result<(), Unhealthy> {
        let r = self
            .client
            .get(format!("{}/healthz", self.base))
            .timeout(Duration::from_secs(2))
            .send()
            .map_err(|e| {
                let mut text = e.to_string();
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    text.push_str(&format!(": {c}"));
                    cause = c.source();
                }
                Unhealthy::Unreachable(text)
            })?;
        if r.status().is_success() {
            Ok(())
        } else {
            Err(Unhealthy::Status(r.status()))
        }
    }

    /// Ask a read-only question.
    pub fn query(&self, q: &Query, json: bool) -> Result<Said> {
        let enc = agentledger::encode::path_segment;
        let mut params = vec![("format", if json { "json" } else { "text" }.to_string())];
        let path = match q {
            Query::Trail { run, chain, as_of } => {
                params.push(("chain", chain.to_string()));
                if let Some(a) = as_of {
                    params.push(("as_of", a.clone()));
                }
                format!("/v1/runs/{}/trail", enc(run))
            }
            Query::Chain { run } => format!("/v1/runs/{}/chain", enc(run)),
            Query::Trace { run, chain } => {
                params.push(("chain", chain.to_string()));
                format!("/v1/runs/{}/trace", enc(run))
            }
            Query::Picture { run, format } => {
                params[0].1 = format.as_str().to_string();
                format!("/v1/runs/{}/chain", enc(run))
            }
            Query::Agent { name } => format!("/v1/agents/{}", enc(name)),
            Query::Stats { task } => format!("/v1/tasks/{}/stats", enc(task)),
            Query::Status => "/v1/status".to_string(),
            Query::Tokens => "/v1/tokens".to_string(),
            Query::Export { run, chain, as_of } => {
                for (k, v) in [
                    ("run", run.clone()),
                    ("chain", chain.clone()),
                    ("as_of", as_of.map(|a| a.to_string())),
                ] {
                    if let Some(v) = v {
                        params.push((k, v));
                    }
                }
                "/v1/export".to_string()
            }
        };
        let r = self
            .get(&path)
            .query(&params)
            .send()
            .with_context(|| format!("asking the server at {}", self.base))?;
        self.said(r)
    }

    /// `verify` of the log the server writes.
    pub fn verify(
        &self,
        json: bool,
        trust: Option<&agentledger::audit::signed::Trust>,
        published: bool,
        require_attested: bool,
    ) -> Result<Said> {
        let mut q = vec![("format", (if json { "json" } else { "text" }).to_string())];
        if published {
            q.push(("published", "true".to_string()));
        }
        if require_attested {
            q.push(("require_attested", "true".to_string()));
        }
        if let Some(t) = trust {
            q.push(("key", t.key.to_string()));
            if !t.witnesses.is_empty() {
                let keys: Vec<String> = t.witnesses.iter().map(|w| w.to_string()).collect();
                q.push(("witness_keys", keys.join(",")));
                q.push(("witnesses", t.need.to_string()));
                if t.all_witnessed {
                    q.push(("all_witnessed", "true".to_string()));
                }
            }
        }
        let r = self
            .get("/v1/verify")
            .query(&q)
            .timeout(Duration::from_secs(24 * 3600))
            .send()
            .with_context(|| format!("asking the server at {}", self.base))?;
        self.said(r)
    }

    fn said(&self, r: reqwest::blocking::Response) -> Result<Said> {
        let ok = r.status().is_success();
        let exit = r
            .headers()
            .get("x-agentledger-exit")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<i32>().ok());
        let body = r.text().context("reading the server's answer")?;
        if ok {
            return Ok(Said {
                out: body,
                failure: None,
                unclean: exit == Some(1),
            });
        }
        let failure: Failure =
            serde_json::from_str(&body).with_context(|| format!("the server answered {body:?}"))?;
        Ok(Said {
            out: String::new(),
            failure: Some(failure),
            unclean: false,
        })
    }

    /// Answer request lines through `POST /v1/ops` (ndjson, in order).
    pub fn ops(&self, lines: Vec<Line>) -> std::io::Result<Vec<(Reply, bool)>> {
        fn io(e: impl std::fmt::Display) -> std::io::Error {
            std::io::Error::other(e.to_string())
        }
        let mut body = String::new();
        let mut ops = Vec::new();
        for v in lines.iter().flatten() {
            body.push_str(&v.to_string());
            body.push('\n');
            ops.push(v["op"].as_str().unwrap_or("").to_string());
        }
        let mut answered = Vec::new();
        if !ops.is_empty() {
            let r = self
                .authorized(self.client.post(format!("{}/v1/ops", self.base)))
                .header("content-type", "application/x-ndjson")
                .body(body)
                .send()
                .map_err(io)?;
            let ndjson = r
                .headers()
                .get("content-type")
                .is_some_and(|t| t.as_bytes().starts_with(b"application/x-ndjson"));
            let text = r.text().map_err(io)?;
            if ndjson {
                for (line, op) in text.lines().filter(|l| !l.trim().is_empty()).zip(&ops) {
                    answered.push(reply_of(op, line).map_err(io)?);
                }
            } else {
                // One failure for the whole body (too large, overloaded,
                // shutting down) answers every line of it.
                let f: Failure = serde_json::from_str(&text)
                    .map_err(|e| io(format!("the server answered {text:?}: {e}")))?;
                answered = vec![Reply::Failed(f); ops.len()];
            }
            if answered.len() != ops.len() {
                return Err(io("the server answered fewer lines than it was sent"));
            }
        }
        let mut answered = answered.into_iter();
        let mut out = Vec::with_capacity(lines.len());
        for l in lines {
            let reply = match l {
                Err(f) => Reply::Failed(f),
                Ok(_) => answered.next().expect("counted above"),
            };
            let machine = matches!(&reply, Reply::Failed(f) if !f.error.code.is_refusal());
            out.push((reply, machine));
        }
        Ok(out)
    }
}

/// A reply line of operation `op`, read back into its type.
fn reply_of(op: &str, line: &str) -> Result<Reply> {
    let mut v: serde_json::Value = serde_json::from_str(line)
        .map_err(|e| anyhow::anyhow!("the server answered {line:?}: {e}"))?;
    if v["ok"] != serde_json::json!(true) {
        return serde_json::from_value::<Failure>(v)
            .map(Reply::Failed)
            .map_err(|e| anyhow::anyhow!("the server's reply is not an answer: {e}"));
    }
    let follow_up_failed = v
        .as_object_mut()
        .and_then(|o| o.remove("follow_up_failed"))
        .map(serde_json::from_value)
        .transpose()?
        .unwrap_or_default();
    Ok(Reply::Done(Done {
        ok: True,
        answer: Answer::from_value(op, v)?,
        follow_up_failed,
    }))
}
