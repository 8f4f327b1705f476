//! `agentledger witness`: a witness following a ledger over HTTP. Each
//! round reads the list of logs, and for each the latest signed
//! checkpoint; checks the ledger's signature, then (with
//! `audit::witness::judge`) that it extends the checkpoint cosigned last
//! for that log, by a consistency proof computed here from the tiles the
//! ledger serves — the ledger is not trusted for the proof, only for the
//! hashes, which the proof checks against both roots. Only then is the new
//! checkpoint remembered (the state file, written before the cosignature
//! leaves) and cosigned.

use super::args::Cli;
use super::remote::Server;
use agentledger::audit::merkle::consistency_proof;
use agentledger::audit::note::{origin, CheckpointBody, KeyKind, SignerKey, VerifierKey};
use agentledger::audit::tiles::{index_path, TileError, TileNodes, TileSource, TILE_WIDTH};
use agentledger::audit::witness::{judge, Seen};
use agentledger::model::Topic;
use anyhow::{Context, Result};
use base64::Engine as _;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub struct Args<'a> {
    pub key: &'a PathBuf,
    pub log: &'a str,
    pub ledger_key: &'a str,
    pub state: &'a PathBuf,
    pub once: bool,
    pub interval: Duration,
}

/// What the witness remembers, by log origin.
type State = BTreeMap<String, Seen>;

fn load(path: &PathBuf) -> Result<State> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .with_context(|| format!("--state {}: not a witness state file", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::new()),
        Err(e) => Err(e).with_context(|| format!("reading --state {}", path.display())),
    }
}

/// Written whole and renamed into place: a crash leaves the old state or
/// the new, never half of one.
fn save(path: &PathBuf, state: &State) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let text = serde_json::to_string_pretty(state).unwrap_or_default();
    agentledger::log::private_files::write(&tmp, text)
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing --state {}", path.display()))
}

/// A log's tiles as the ledger serves them, for a tree of `size` leaves.
struct ServedTiles<'a> {
    server: &'a Server,
    prefix: String,
    size: u64,
    name: (Topic, u32),
}

impl TileSource for ServedTiles<'_> {
    fn tile(&self, level: u8, index: u64, _width: u64) -> Result<Option<Vec<u8>>, TileError> {
        // The width the tree of `size` leaves gives this tile, so the
        // path names exactly one immutable tile.
        let at_level = self.size >> (8 * u32::from(level));
        let width = at_level.saturating_sub(index * TILE_WIDTH).min(TILE_WIDTH);
        let mut path = format!("{}tile/{level}/{}", self.prefix, index_path(index));
        if width < TILE_WIDTH {
            path.push_str(&format!(".p/{width}"));
        }
        self.server.fetch(&path).map_err(|e| TileError::Fetch {
            level,
            index,
            why: format!("{e:#}"),
        })
    }
    fn log_name(&self) -> (Topic, u32) {
        self.name
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub fn run(cli: &Cli, a: &Args<'_>) -> Result<i32> {
    let text = std::fs::read_to_string(a.key)
        .with_context(|| format!("reading --key {}", a.key.display()))?;
    let key =
        SignerKey::parse(&text).map_err(|e| anyhow::anyhow!("--key {}: {e}", a.key.display()))?;
    if key.kind() != KeyKind::Witness {
        anyhow::bail!(
            "--key {}: a checkpoint key; a witness cosigns with its own (`agentledger key generate --witness`)",
            a.key.display()
        );
    }
    let ledger = super::audit::verifier_key(a.ledger_key)?;
    if ledger.kind() != KeyKind::Checkpoint {
        anyhow::bail!("--ledger-key: a witness's key, not the ledger's checkpoint key");
    }
    let server = super::remote::connect(cli, a.log)?;
    let mut state = load(a.state)?;
    loop {
        let refused = round(&server, &key, &ledger, &mut state, a.state)?;
        if a.once {
            return Ok(i32::from(refused > 0));
        }
        std::thread::sleep(a.interval);
    }
}

/// One pass over every log; how many were refused.
fn round(
    server: &Server,
    key: &SignerKey,
    ledger: &VerifierKey,
    state: &mut State,
    state_path: &PathBuf,
) -> Result<usize> {
    let logs: Value =
        serde_json::from_slice(&server.fetch("/v1/log")?.context(
            "the server lists no logs (GET /v1/log: 404); is it an agentledger server?",
        )?)
        .context("GET /v1/log: not JSON")?;
    let mut refused = 0;
    for l in logs.as_array().into_iter().flatten() {
        let (Some(topic), Some(partition), Some(prefix)) = (
            l["topic"].as_str(),
            l["partition"].as_u64(),
            l["prefix"].as_str(),
        ) else {
            continue;
        };
        let Some(t) = Topic::ALL.into_iter().find(|t| t.name() == topic) else {
            continue;
        };
        let partition = partition as u32;
        let Some(note) = server.fetch(&format!("{prefix}checkpoint"))? else {
            continue; // Nothing signed yet.
        };
        let note = String::from_utf8_lossy(&note).into_owned();
        let want = origin(ledger.name(), t, partition);
        let outcome = witness_one(
            server,
            key,
            ledger,
            state,
            state_path,
            &note,
            &want,
            prefix,
            (t, partition),
        );
        match outcome {
            Ok(Some(line)) => {
                // The ledger's own signature and this witness's line only:
                // others' lines served with the note are not ours to post.
                let own = ledger_signed_only(&note, ledger.name());
                let (status, said) =
                    server.post_text(&format!("{prefix}cosignatures"), format!("{own}{line}"))?;
                if status != 200 {
                    anyhow::bail!(
                        "the ledger did not take the cosignature of {want}: HTTP {status}: {said}"
                    );
                }
                let size = state.get(&want).map_or(0, |s| s.size);
                // The note as cosigned: what an auditor takes from the
                // witness, not from the ledger, to `verify --since`.
                outln!(
                    "{}",
                    json!({"origin": want, "size": size, "cosigned": true, "note": format!("{own}{line}")})
                );
            }
            Ok(None) => {}
            Err(why) => {
                refused += 1;
                eprintln!("agentledger: witness refuses {want}: {why}");
                outln!(
                    "{}",
                    json!({"origin": want, "cosigned": false, "refused": why.to_string()})
                );
            }
        }
    }
    Ok(refused)
}

/// The cosignature line for the log's checkpoint `note`, if it is to be
/// cosigned (`None` when already cosigned as it is), or why not.
#[allow(clippy::too_many_arguments)]
fn witness_one(
    server: &Server,
    key: &SignerKey,
    ledger: &VerifierKey,
    state: &mut State,
    state_path: &PathBuf,
    note: &str,
    want: &str,
    prefix: &str,
    name: (Topic, u32),
) -> Result<Option<String>> {
    let text = ledger
        .open(note)
        .map_err(|e| anyhow::anyhow!("the checkpoint: {e}"))?;
    let body = CheckpointBody::parse(text)?;
    if body.origin != want {
        anyhow::bail!("the checkpoint is of {}, not {want}", body.origin);
    }
    let seen = state.get(want);
    if seen.is_some_and(|s| s.size == body.size) && already_cosigned(key, note) {
        judge(seen, &body, |_| Err("unused".into()))?;
        return Ok(None);
    }
    judge(seen, &body, |old| {
        let nodes = TileNodes::new(ServedTiles {
            server,
            prefix: prefix.to_owned(),
            size: body.size,
            name,
        });
        consistency_proof(&nodes, old, body.size)?
            .ok_or_else(|| "no proof between those sizes".into())
    })?;
    state.insert(
        want.to_owned(),
        Seen {
            size: body.size,
            root: base64::engine::general_purpose::STANDARD.encode(body.root),
        },
    );
    save(state_path, state).map_err(|e| anyhow::anyhow!("{e:#}"))?;
    Ok(Some(key.cosign(text, now_secs())?))
}

/// The note already carries this witness's valid cosignature.
fn already_cosigned(key: &SignerKey, note: &str) -> bool {
    key.verifier().cosigned(note).is_ok()
}

/// `note` with only the signature lines of `ledger` (the checkpoint key's
/// name): the text a witness cosigns, as the ledger signed it.
fn ledger_signed_only(note: &str, ledger: &str) -> String {
    match agentledger::audit::note::split(note) {
        Ok((text, lines)) => {
            let own: String = lines
                .iter()
                .filter(|(name, _)| *name == ledger)
                .map(|(name, sig)| format!("\u{2014} {name} {sig}\n"))
                .collect();
            format!("{text}\n{own}")
        }
        Err(_) => note.to_owned(),
    }
}
