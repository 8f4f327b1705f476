//! `agentledger token issue|list|revoke`: bearer tokens for the network
//! face. A token is made here, printed once, and only its SHA-256 goes to
//! the ledger (through the server that owns the data dir, or into the data
//! dir itself).

use super::args::Cli;
use super::families::TokenCommand;
use super::inspect;
use super::open::open_engine;
use super::remote;
use agentledger::protocol::{Answer, Reply};
use agentledger::queries::Query;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

/// `30d`, `12h`, `90m`, `3600s` or a plain number of seconds.
pub fn parse_duration_s(text: &str) -> Result<u64> {
    let t = text.trim();
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let n: u64 = digits
        .parse()
        .with_context(|| format!("--expires {text:?}: expected a number and s, m, h or d"))?;
    let per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => bail!("--expires {text:?}: the unit is one of s, m, h, d"),
    };
    n.checked_mul(per)
        .with_context(|| format!("--expires {text:?} is too long"))
}

/// Carry out one operation through the server, or on the data dir.
fn one_op(cli: &Cli, op: Value) -> Result<Reply> {
    if let Some(server) = remote::server_for(cli)? {
        let mut replies = server
            .ops(vec![Ok(op)])
            .with_context(|| format!("asking the server at {}", server.url()))?;
        return Ok(replies.remove(0).0);
    }
    let mut engine = open_engine(cli)?;
    let (reply, _) = agentledger::protocol::reply(&mut engine, &op);
    engine.flush()?;
    Ok(reply)
}

fn refused(reply: Reply) -> Result<i32> {
    if let Reply::Failed(f) = reply {
        eprintln!("agentledger: {}: {}", f.error.code, f.error.message);
        return Ok(if f.error.code.is_refusal() { 1 } else { 2 });
    }
    Ok(0)
}

pub fn run(cli: &Cli, command: &TokenCommand) -> Result<i32> {
    match command {
        TokenCommand::List => inspect::ask(cli, Query::Tokens),
        TokenCommand::Revoke { id } => {
            let reply = one_op(cli, json!({"op": "revoke_token", "id": id}))?;
            if reply.is_ok() {
                if cli.json {
                    outln!("{}", json!({"id": id, "revoked": true}));
                } else {
                    outln!("revoked {id}");
                }
            }
            refused(reply)
        }
        TokenCommand::Issue {
            principal,
            scopes,
            expires,
        } => {
            let expires_in_s = expires.as_deref().map(parse_duration_s).transpose()?;
            let token = agentledger::auth::tokens::generate()
                .map_err(|e| anyhow::anyhow!("the system's random generator failed: {e}"))?;
            let mut op = json!({
                "op": "issue_token",
                "sha256": hex::encode(agentledger::auth::tokens::hash(&token)),
                "principal": principal,
                "scopes": scopes,
            });
            if let Some(s) = expires_in_s {
                op["expires_in_s"] = json!(s);
            }
            let reply = one_op(cli, op)?;
            let Reply::Done(done) = &reply else {
                return refused(reply);
            };
            let Answer::IssueToken(issued) = &done.answer else {
                bail!("the ledger answered issue_token with another kind of answer");
            };
            let expires_at = issued
                .expires_at_ms
                .map(agentledger::model::time::rfc3339_ms);
            if cli.json {
                outln!(
                    "{}",
                    json!({
                        "id": issued.id,
                        "token": token,
                        "principal": issued.principal,
                        "scopes": issued.scopes,
                        "expires_at": expires_at,
                    })
                );
            } else {
                outln!("{token}");
                eprintln!(
                    "agentledger: token {} for {}{}{}; it is shown only now (the ledger keeps its SHA-256)",
                    issued.id,
                    issued.principal,
                    if issued.scopes.is_empty() {
                        String::new()
                    } else {
                        format!(" in {}", issued.scopes.join(", "))
                    },
                    match &expires_at {
                        Some(at) => format!(", until {at}"),
                        None => String::new(),
                    }
                );
            }
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duration_s;

    #[test]
    fn durations_read_with_their_units() {
        assert_eq!(parse_duration_s("30d").unwrap(), 30 * 86_400);
        assert_eq!(parse_duration_s("12h").unwrap(), 12 * 3600);
        assert_eq!(parse_duration_s("90m").unwrap(), 5400);
        assert_eq!(parse_duration_s("45").unwrap(), 45);
        for bad in ["", "d", "3w", "-1d", "99999999999999999999d"] {
            assert!(parse_duration_s(bad).is_err(), "{bad}");
        }
    }
}
