//! Auditor commands: verify (the log or an export), checkpoint, export.

use super::args::Cli;
use super::open::open_engine;
use agentledger::audit::verify::verify_export_trusting;
use agentledger::queries::{self, Query};
use anyhow::{Context, Result};
use serde_json::json;

/// `verify`: 0 clean, 1 mismatch, 2 unable to read.
/// A verifier key given as its text, or as a file holding it.
pub fn verifier_key(given: &str) -> Result<agentledger::audit::note::VerifierKey> {
    use agentledger::audit::note::VerifierKey;
    match VerifierKey::parse(given) {
        Ok(k) => Ok(k),
        // A signing key given by mistake is a secret: never echoed.
        Err(_) if given.trim_start().starts_with("PRIVATE+KEY") => Err(anyhow::anyhow!(
            "--key: that is a private signing key, not shown here; give the verifier key `agentledger key show` prints"
        )),
        Err(e) => match std::fs::read(given) {
            Ok(bytes) => {
                let text = String::from_utf8(bytes)
                    .map_err(|_| anyhow::anyhow!("--key {given}: the file is not UTF-8 text"))?;
                if text.trim_start().starts_with("PRIVATE+KEY") {
                    anyhow::bail!("--key {given}: the file holds a private signing key; give the verifier key `agentledger key show` prints");
                }
                VerifierKey::parse(&text).map_err(|e| anyhow::anyhow!("--key {given}: {e}"))
            }
            Err(_) => Err(anyhow::anyhow!(
                "--key {:?}: {e} (give the key as `agentledger key show` prints it, or a file holding it)",
                given.chars().take(100).collect::<String>()
            )),
        },
    }
}

/// What `verify` was asked.
pub struct VerifyAsked<'a> {
    pub export: Option<&'a std::path::Path>,
    pub key: Option<&'a str>,
    pub since: Option<&'a std::path::Path>,
    pub witness_keys: &'a [String],
    pub witnesses: Option<usize>,
    pub all_witnessed: bool,
    pub published: bool,
    pub require_attested: bool,
}

pub fn verify(cli: &Cli, asked: VerifyAsked<'_>) -> Result<i32> {
    let VerifyAsked {
        export,
        key,
        since,
        witness_keys,
        witnesses,
        all_witnessed,
        published,
        require_attested,
    } = asked;
    let key = key.map(verifier_key).transpose()?;
    let since = since
        .map(|old| {
            std::fs::read_to_string(old).with_context(|| format!("reading {}", old.display()))
        })
        .transpose()?;
    let trust = match &key {
        Some(k) => Some(
            agentledger::audit::signed::Trust::new(
                k.clone(),
                witness_keys
                    .iter()
                    .map(|w| verifier_key(w))
                    .collect::<Result<Vec<_>>>()?,
                witnesses,
            )
            .map_err(|why| anyhow::anyhow!("--witness-key: {why}"))?
            .requiring_all_witnessed(all_witnessed),
        ),
        None => None,
    };
    if let Some(path) = export {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let report = verify_export_trusting(&text, trust.as_ref())
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let subject = format!("export {}", path.display());
        return super::inspect::print(&queries::verify_said(
            &report,
            &[],
            &subject,
            cli.json,
            require_attested,
        ));
    }
    if let Some(server) = super::remote::server_for(cli)? {
        if since.is_some() {
            anyhow::bail!(
                "verify --since reads the log itself; stop the server on this data dir, or run it where the log is readable"
            );
        }
        return super::inspect::print(&server.verify(
            cli.json,
            trust.as_ref(),
            published,
            require_attested,
        )?);
    }
    let (_lock, log) = super::open::open_log_read_only(cli)?;
    let total = agentledger::rebuild::projected_records(log.as_ref())?;
    let bar = super::rebuild::progress_bar(cli, total, "verifying");
    let said = queries::verify(
        log.as_ref(),
        cli.json,
        &|n| bar.inc(n),
        trust.as_ref(),
        since.as_deref(),
        published,
        require_attested,
    )?;
    bar.finish_and_clear();
    super::inspect::print(&said)
}

pub fn checkpoint(cli: &Cli) -> Result<i32> {
    let mut engine = open_engine(cli)?;
    let written = engine.checkpoint(true)?;
    if cli.json {
        // One object whatever was written, with each log's current signed
        // note (what an auditor keeps for a later `verify --since`).
        let mut notes = Vec::new();
        for topic in agentledger::audit::checkpoint::CHAINED_TOPICS {
            for partition in 0..engine.log().partitions(topic) {
                if let Some(note) = engine.views().checkpoint_note(topic, partition)? {
                    notes
                        .push(json!({"topic": topic.name(), "partition": partition, "note": note}));
                }
            }
        }
        let written: Vec<_> = written
            .iter()
            .map(|cp| json!({"topic": cp.topic, "partition": cp.partition, "from": cp.from, "to": cp.to, "head": cp.head}))
            .collect();
        outln!(
            "{}",
            json!({"ok": true, "written": written, "notes": notes})
        );
        return Ok(0);
    }
    for cp in &written {
        if cp.from == cp.to {
            outln!(
                "{}/{} signed at {} (records checkpointed before, now under the key)",
                cp.topic,
                cp.partition,
                cp.to
            );
        } else {
            outln!(
                "{}/{}: records {} to {} checkpointed, chain head {}",
                cp.topic,
                cp.partition,
                cp.from,
                cp.to - 1,
                cp.head
            );
        }
    }
    if written.is_empty() {
        outln!("every record is already attested by a checkpoint");
    }
    Ok(0)
}

pub fn export(
    cli: &Cli,
    run: Option<&str>,
    chain: Option<&str>,
    as_of: Option<u64>,
    out: Option<&std::path::Path>,
) -> Result<i32> {
    let q = Query::Export {
        run: run.map(str::to_string),
        chain: chain.map(str::to_string),
        as_of,
    };
    let said = match super::remote::server_for(cli)? {
        Some(server) => server.query(&q, true)?,
        None => {
            let mut engine = open_engine(cli)?;
            queries::answer(&mut engine, &q, true)?
        }
    };
    let Some(path) = out else {
        return super::inspect::print(&said);
    };
    if said.failure.is_some() {
        return super::inspect::print(&said);
    }
    std::fs::write(path, &said.out).with_context(|| format!("writing {}", path.display()))?;
    if !cli.json {
        let count = |kind: &str| {
            said.out
                .lines()
                .filter(|l| l.starts_with(&format!("{{\"type\":\"{kind}\"")))
                .count()
        };
        outln!(
            "exported {} records with {} covering checkpoints",
            count("record"),
            count("checkpoint")
        );
    }
    Ok(0)
}

/// A new key's file (mode 0600, its directory made private if new).
fn write_key_file(path: &std::path::Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        agentledger::log::private_files::create_dir_all(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    agentledger::log::private_files::write(path, format!("{text}\n"))
        .with_context(|| format!("writing {}", path.display()))
}

/// `key generate` / `key show`.
pub fn key(cli: &Cli, command: &super::families::KeyCommand) -> Result<i32> {
    use agentledger::audit::note::{KeyKind, SignerKey};
    let place = |witness: bool, file: &Option<std::path::PathBuf>| match (file, witness) {
        (Some(f), _) => f.clone(),
        (None, true) => cli.data.join("witness.key"),
        (None, false) => super::open::checkpoint_key_path(cli),
    };
    let what = |witness: bool| {
        if witness {
            "witness key"
        } else {
            "checkpoint key"
        }
    };
    match command {
        super::families::KeyCommand::Generate { seal: true, .. } => {
            let path = super::open::seal_key_path(cli);
            if path.exists() {
                anyhow::bail!(
                    "{} exists: a seal key is never replaced silently (every task key shared on Kafka is wrapped with it)",
                    path.display()
                );
            }
            let key = agentledger::erasure::TaskKey::generate()
                .map_err(|e| anyhow::anyhow!("randomness: {e}"))?;
            write_key_file(&path, &key.to_text())?;
            eprintln!(
                "agentledger: seal key written to {} (mode 0600; copy it to every instance of this ledger, keep it secret)",
                path.display()
            );
            outln!("{}", key.fingerprint());
            Ok(0)
        }
        super::families::KeyCommand::Show { seal: true, .. } => {
            let path = super::open::seal_key_path(cli);
            let text = std::fs::read_to_string(&path).with_context(|| {
                format!(
                    "reading the seal key {} (make one with `agentledger key generate --seal`)",
                    path.display()
                )
            })?;
            let key = agentledger::erasure::TaskKey::from_text(&text)
                .with_context(|| format!("the seal key {} is not 64 hex digits", path.display()))?;
            outln!("{}", key.fingerprint());
            Ok(0)
        }
        super::families::KeyCommand::Generate {
            name,
            witness,
            key_file,
            ..
        } => {
            let path = place(*witness, key_file);
            if path.exists() {
                anyhow::bail!(
                    "{} exists: a {} is never replaced silently (move it away first)",
                    path.display(),
                    what(*witness)
                );
            }
            let name = match name {
                Some(n) => n.clone(),
                None => {
                    let mut b = [0u8; 4];
                    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("randomness: {e}"))?;
                    format!("agentledger-{}", hex::encode(b))
                }
            };
            let kind = if *witness {
                KeyKind::Witness
            } else {
                KeyKind::Checkpoint
            };
            let key = SignerKey::generate_kind(&name, kind)
                .map_err(|e| anyhow::anyhow!("--name: {e}"))?;
            write_key_file(&path, &key.to_text())?;
            eprintln!(
                "agentledger: {} written to {} (mode 0600; keep it secret and backed up)",
                what(*witness),
                path.display()
            );
            outln!("{}", key.verifier());
            Ok(0)
        }
        super::families::KeyCommand::Show {
            witness, key_file, ..
        } => {
            let path = place(*witness, key_file);
            let text = std::fs::read_to_string(&path).with_context(|| {
                format!(
                    "reading the {} {} (make one with `agentledger key generate{}`)",
                    what(*witness),
                    path.display(),
                    if *witness { " --witness" } else { "" }
                )
            })?;
            let key = SignerKey::parse(&text)
                .map_err(|e| anyhow::anyhow!("the key {}: {e}", path.display()))?;
            outln!("{}", key.verifier());
            Ok(0)
        }
    }
}

/// `proof inclusion|consistency`: 0 with the proof printed, 1 when the
/// sizes asked for do not exist.
pub fn proof(
    cli: &Cli,
    what: &super::families::ProofCommand,
    topic: &str,
    partition: u32,
    size: Option<u64>,
) -> Result<i32> {
    use agentledger::audit::checkpoint::{leaf_hashes, CHAINED_TOPICS};
    use agentledger::audit::merkle::{Gathering, Wanted};
    use base64::Engine as _;
    let b64 = |h: &[u8; 32]| base64::engine::general_purpose::STANDARD.encode(h);
    let Some(t) = CHAINED_TOPICS.into_iter().find(|t| t.name() == topic) else {
        anyhow::bail!("--topic {topic:?}: proofs are of ledger or registry partitions");
    };
    if super::remote::server_for(cli)?.is_some() {
        anyhow::bail!("proof reads the log itself; stop the server on this data dir first");
    }
    let (_lock, log) = super::open::open_log_read_only(cli)?;
    if partition >= log.partitions(t) {
        anyhow::bail!(
            "--partition {partition}: {topic} has {} partitions",
            log.partitions(t)
        );
    }
    let end = log.end_offset(t, partition)?;
    let size = size.unwrap_or(end);
    if size > end {
        eprintln!("agentledger: {topic}/{partition} holds {end} records, fewer than --size {size}");
        return Ok(1);
    }
    let want = match what {
        super::families::ProofCommand::Inclusion { offset } => Wanted::Inclusion {
            index: *offset,
            size,
        },
        super::families::ProofCommand::Consistency { old } => {
            Wanted::Consistency { old: *old, size }
        }
    };
    // Straight from the records, memory O(log n) (the tiles a server keeps
    // are derived data; this answers for the log itself).
    let mut tree = Gathering::new(&[want]);
    leaf_hashes(log.as_ref(), t, partition, 0, size, &mut |h| tree.push(h))?;
    let root = tree.root_at(size).unwrap_or_default();
    let (kind, at, proof) = match what {
        super::families::ProofCommand::Inclusion { offset } => {
            ("inclusion", *offset, tree.inclusion(*offset, size))
        }
        super::families::ProofCommand::Consistency { old } => {
            ("consistency", *old, tree.consistency(*old, size))
        }
    };
    let Some(proof) = proof else {
        eprintln!("agentledger: no {kind} proof for {at} in a tree of {size} records");
        return Ok(1);
    };
    let hashes: Vec<String> = proof.iter().map(b64).collect();
    let mut out = json!({"topic": topic, "partition": partition, "tree_size": size,
                         "root": b64(&root), "hashes": hashes});
    match what {
        super::families::ProofCommand::Inclusion { .. } => out["leaf_index"] = json!(at),
        super::families::ProofCommand::Consistency { .. } => {
            out["old_size"] = json!(at);
            out["old_root"] = json!(b64(&tree.root_at(at).unwrap_or_default()));
        }
    }
    outln!("{out}");
    Ok(0)
}
