//! Opening what a command works on from the global options: the
//! embedded log or Kafka, the engine's options, the checkpoint and seal
//! keys.

use super::args::Cli;
use super::values::SealContext;
use agentledger::engine::{DataDir, Engine, EngineOptions};
use agentledger::log::embedded::EmbeddedLog;
use agentledger::log::kafka::KafkaConfig;
use agentledger::log::kafka::{KafkaLog, KafkaSecurity, Password, SaslLogin, SaslMechanism};
use agentledger::log::Log;
use anyhow::{Context, Result};
use std::path::PathBuf;

/// Where the checkpoint key is: `--checkpoint-key`, else
/// `<data>/checkpoint.key`.
pub fn checkpoint_key_path(cli: &Cli) -> PathBuf {
    cli.checkpoint_key
        .clone()
        .unwrap_or_else(|| cli.data.join("checkpoint.key"))
}

/// The checkpoint key, if there is one where it is looked for.
pub(super) fn signer(
    cli: &Cli,
) -> Result<Option<std::sync::Arc<agentledger::audit::note::SignerKey>>> {
    let path = checkpoint_key_path(cli);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && cli.checkpoint_key.is_none() => {
            return Ok(None)
        }
        Err(e) => anyhow::bail!("reading the checkpoint key {}: {e}", path.display()),
    };
    // Named without its content: the file is a secret.
    let key = agentledger::audit::note::SignerKey::parse(&text)
        .map_err(|e| anyhow::anyhow!("the checkpoint key {}: {e}", path.display()))?;
    if key.kind() != agentledger::audit::note::KeyKind::Checkpoint {
        anyhow::bail!(
            "the checkpoint key {} is a witness's key (it cosigns, it cannot sign checkpoints)",
            path.display()
        );
    }
    Ok(Some(std::sync::Arc::new(key)))
}

/// Where the fleet's seal key is: `--seal-key`, else `<data>/seal.key`.
pub fn seal_key_path(cli: &Cli) -> PathBuf {
    cli.seal_key
        .clone()
        .unwrap_or_else(|| cli.data.join("seal.key"))
}

/// The fleet's seal key, when there is one.
pub(super) fn seal_key(cli: &Cli) -> Result<Option<std::sync::Arc<agentledger::erasure::TaskKey>>> {
    let path = seal_key_path(cli);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && cli.seal_key.is_none() => {
            return Ok(None)
        }
        Err(e) => anyhow::bail!("reading the seal key {}: {e}", path.display()),
    };
    let key = agentledger::erasure::TaskKey::from_text(&text).with_context(|| {
        format!(
            "the seal key {} is not 64 hex digits (make one with `agentledger key generate --seal`)",
            path.display()
        )
    })?;
    Ok(Some(std::sync::Arc::new(key)))
}

pub fn options(cli: &Cli) -> Result<EngineOptions> {
    options_for(cli, true)
}

/// The options of a command that only reads: it signs nothing, so the
/// checkpoint key is not loaded (a damaged one does not stop an audit).
pub(super) fn reading_options(cli: &Cli) -> Result<EngineOptions> {
    options_for(cli, false)
}

pub(super) fn options_for(cli: &Cli, signing: bool) -> Result<EngineOptions> {
    if let Some(mb) = cli.cache_mb {
        agentledger::views::db::set_cache_bytes(mb << 20);
    }
    let seal_key = seal_key(cli)?;
    let mut o = EngineOptions {
        signer: if signing { signer(cli)? } else { None },
        seal_context: match cli.seal_context {
            SealContext::On => true,
            SealContext::Off => false,
            SealContext::Auto => cli.kafka.brokers.is_none() || seal_key.is_some(),
        },
        seal_key,
        context_ttl_ms: cli.context_ttl_secs.saturating_mul(1000),
        ledger: cli.ledger_id.clone(),
        ..EngineOptions::default()
    };
    o.embedded.topic_prefix = cli.kafka.topic_prefix.clone();
    o.embedded.ledger_partitions = cli.ledger_partitions;
    o.writer = format!(
        "agentledger-{}/{}",
        env!("CARGO_PKG_VERSION"),
        std::process::id()
    );
    // On the embedded log catching up is a look at an in-memory offset.
    if cli.kafka.brokers.is_some() {
        o.max_staleness = std::time::Duration::from_millis(cli.max_staleness_ms);
    }
    Ok(o)
}

/// TLS and SASL towards the brokers, as the flags ask; the password file is
/// read here, so that a missing one is named before anything connects.
pub(super) fn kafka_security(cli: &Cli) -> Result<KafkaSecurity> {
    let sasl = match (&cli.kafka.kafka_user, &cli.kafka.kafka_password_file) {
        (Some(user), Some(file)) => Some(SaslLogin {
            mechanism: cli
                .kafka
                .kafka_sasl_mechanism
                .unwrap_or(SaslMechanism::ScramSha512),
            user: user.clone(),
            password: Password::from_file(file)?,
        }),
        _ => None,
    };
    Ok(KafkaSecurity {
        tls: cli.kafka.kafka_tls || cli.kafka.kafka_tls_ca.is_some(),
        tls_ca: cli.kafka.kafka_tls_ca.clone(),
        sasl,
    })
}

pub fn kafka_config(cli: &Cli) -> Result<Option<KafkaConfig>> {
    let Some(brokers) = &cli.kafka.brokers else {
        return Ok(None);
    };
    let security = kafka_security(cli)?;
    Ok(Some(KafkaConfig {
        brokers: brokers.clone(),
        topic_prefix: cli.kafka.topic_prefix.clone(),
        ledger_partitions: cli.ledger_partitions,
        replication_factor: cli.replication,
        min_insync_replicas: (cli.replication >= 3).then_some(2),
        timeout: std::time::Duration::from_secs(cli.kafka.kafka_timeout.max(1)),
        group_protocol: cli.kafka.kafka_group_protocol,
        security,
        ..KafkaConfig::default()
    }))
}

pub fn open_engine(cli: &Cli) -> Result<Engine> {
    match kafka_config(cli)? {
        Some(k) => Engine::open_kafka(&cli.data, &k, options(cli)?).with_context(|| {
            format!(
                "opening the ledger on Kafka at {} (views in {})",
                k.brokers,
                cli.data.display()
            )
        }),
        None => Engine::open_embedded(&cli.data, options(cli)?)
            .with_context(|| format!("opening the ledger in {}", cli.data.display())),
    }
}

/// The engine for a command that only reads the ledger: on the embedded
/// log the log is opened read-only (a torn tail is reported, never cut).
pub fn open_engine_read_only(cli: &Cli) -> Result<Engine> {
    match kafka_config(cli)? {
        Some(_) => open_engine(cli),
        None => Engine::open_embedded_read_only(&cli.data, reading_options(cli)?)
            .with_context(|| format!("opening the ledger in {}", cli.data.display())),
    }
}

/// The log alone, for reading it (`verify`): read-only on the embedded
/// log, with the data dir's lock held so that no writer appends meanwhile.
pub fn open_log_read_only(cli: &Cli) -> Result<(Option<std::fs::File>, Box<dyn Log>)> {
    let opts = reading_options(cli)?;
    Ok(match kafka_config(cli)? {
        Some(k) => (
            None,
            Box::new(
                KafkaLog::connect(&k).with_context(|| format!("connecting to {}", k.brokers))?,
            ),
        ),
        None => {
            let dd = DataDir::new(&cli.data);
            let log = EmbeddedLog::open_read_only(dd.log(), &opts.embedded)
                .with_context(|| format!("opening the ledger in {}", cli.data.display()))?;
            (Some(dd.lock()?), Box::new(log))
        }
    })
}
