//! Command-line interface: global options, one file per command family.

/// `println!` that returns the write's error instead of panicking: a reader
/// that went away (`trail --json | head`) ends the command quietly.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

mod audit;
mod demo;
mod inspect;
mod remote;
mod serve;
mod tokens;
mod witness;

use agentledger::apply::{apply_stream_as, apply_stream_with, MAX_LINE_BYTES};
use agentledger::engine::{DataDir, Engine, EngineOptions};
use agentledger::log::embedded::EmbeddedLog;
use agentledger::log::kafka::{KafkaLog, KafkaSecurity, Password, SaslLogin, SaslMechanism};
use agentledger::log::kafka_config::KafkaConfig;
use agentledger::log::Log;
use agentledger::queries::{PictureFormat, Query};
use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::io::{BufReader, Write};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "agentledger",
    version,
    about = "Event-sourced ledger for multi-agent systems"
)]
pub struct Cli {
    /// Data directory of the embedded log and the views.
    #[arg(
        long,
        global = true,
        default_value = "./agentledger-data",
        env = "AGENTLEDGER_DATA"
    )]
    pub data: PathBuf,
    /// Kafka bootstrap servers; without it the embedded log is used.
    #[arg(long, global = true, env = "AGENTLEDGER_KAFKA")]
    pub kafka: Option<String>,
    /// Prefix of every topic name.
    #[arg(long, global = true, default_value = "")]
    pub topic_prefix: String,
    /// Seconds to wait for Kafka before giving up with an error.
    #[arg(long, global = true, default_value_t = 30)]
    pub kafka_timeout: u64,
    /// Speak TLS to the Kafka brokers, trusting the system's certificate
    /// authorities (or --kafka-tls-ca).
    #[arg(long, global = true)]
    pub kafka_tls: bool,
    /// A PEM file of the certificate authority that signs the Kafka
    /// brokers' certificates (implies --kafka-tls).
    #[arg(long, global = true, env = "AGENTLEDGER_KAFKA_TLS_CA")]
    pub kafka_tls_ca: Option<PathBuf>,
    /// SASL mechanism to log in to the brokers with: scram-sha-512
    /// (default), scram-sha-256 or plain (plain only over TLS).
    #[arg(
        long,
        global = true,
        env = "AGENTLEDGER_KAFKA_SASL_MECHANISM",
        requires = "kafka_user"
    )]
    pub kafka_sasl_mechanism: Option<SaslMechanism>,
    /// SASL user name on the Kafka brokers (with --kafka-password-file).
    #[arg(
        long,
        global = true,
        env = "AGENTLEDGER_KAFKA_USER",
        requires = "kafka_password_file"
    )]
    pub kafka_user: Option<String>,
    /// A file whose first line is the SASL password (a file, so that the
    /// password never shows in the process list).
    #[arg(
        long,
        global = true,
        env = "AGENTLEDGER_KAFKA_PASSWORD_FILE",
        requires = "kafka_user"
    )]
    pub kafka_password_file: Option<PathBuf>,
    /// Seal each task's context records with a key of its own, erased
    /// when the task's context expires or is forgotten: on, off, or auto
    /// (on the embedded log; on Kafka, on when a seal key is there — the
    /// task keys are then shared by every instance holding it — else off,
    /// where keys would live with one instance only).
    #[arg(
        long,
        global = true,
        default_value = "auto",
        env = "AGENTLEDGER_SEAL_CONTEXT"
    )]
    pub seal_context: SealContext,
    /// How long a task's context (its key) lives, in seconds.
    #[arg(long, global = true, default_value_t = agentledger::engine::DEFAULT_CONTEXT_TTL_MS / 1000)]
    pub context_ttl_secs: u64,
    /// The ledger's name in the CloudEvents it publishes (`source` =
    /// agentledger/<ledger id>/<agent>). Default: the checkpoint key's
    /// name, else `local`. Every instance of one ledger should give the same.
    #[arg(long, global = true, env = "AGENTLEDGER_LEDGER_ID")]
    pub ledger_id: Option<String>,
    /// Memory the views' page cache may take, in MiB. Default: a
    /// sixteenth of the machine's memory, 64 to 256 MiB.
    #[arg(long, global = true, env = "AGENTLEDGER_CACHE_MB", value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub cache_mb: Option<u64>,
    /// Partitions of the ledger topic when it is created.
    #[arg(long, global = true, default_value_t = 4)]
    pub ledger_partitions: u32,
    /// Replication factor of the topics when they are created (Kafka).
    #[arg(long, global = true, default_value_t = 1)]
    pub replication: u16,
    /// On Kafka, how many milliseconds old the views may be when an
    /// operation is decided (catching up asks the broker for its offsets).
    /// Another writer's records are never lost either way; a lost race for
    /// the same step is answered `conflict`. 0 = catch up before every one.
    #[arg(long, global = true, default_value_t = 100)]
    pub max_staleness_ms: u64,
    /// The fleet's seal key (made by `key generate --seal`; the same file
    /// on every instance of one ledger on Kafka): task keys are shared
    /// between instances wrapped with it. Without it, <data>/seal.key when
    /// that exists.
    #[arg(long, global = true, env = "AGENTLEDGER_SEAL_KEY")]
    pub seal_key: Option<PathBuf>,
    /// The key that signs checkpoints (made by `key generate`); without
    /// it, <data>/checkpoint.key when that exists.
    #[arg(long, global = true, env = "AGENTLEDGER_CHECKPOINT_KEY")]
    pub checkpoint_key: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Go through the agentledger server at this URL (e.g.
    /// http://127.0.0.1:8700). Without it, a server that owns the data dir
    /// is found through <data>/serve.addr.
    #[arg(long, global = true, env = "AGENTLEDGER_SERVER")]
    pub server: Option<String>,
    /// A PEM file of the certificate authority to trust when going
    /// through a server over HTTPS (besides the system's).
    #[arg(long, global = true, env = "AGENTLEDGER_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// A file holding the bearer token to show the server (the token may
    /// also be given in AGENTLEDGER_TOKEN). Without either, the session
    /// token a server on this data dir wrote to <data>/serve.token is used.
    #[arg(long, global = true)]
    pub token_file: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

/// `--as PRINCIPAL [--scope SCOPE]…`: the operator acting as another
/// principal, for scripting and tests, on the data dir itself.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ActingAs {
    /// Act as this principal (operator, platform:NAME, agent:NAME,
    /// auditor, consumer): what it may not do is refused `forbidden`, and
    /// what it writes is recorded as its.
    #[arg(long = "as", value_name = "PRINCIPAL")]
    pub principal: Option<String>,
    /// A scope granted to the principal of `--as` (platforms need one;
    /// repeatable).
    #[arg(long = "scope", value_name = "SCOPE", requires = "principal")]
    pub scopes: Vec<String>,
}

impl ActingAs {
    /// The grant acted with: the operator's without `--as`.
    pub fn grant(&self) -> Result<agentledger::auth::Grant> {
        Ok(match &self.principal {
            None => agentledger::auth::Grant::operator(),
            Some(p) => agentledger::auth::Grant::new(
                p.parse().map_err(|e| anyhow::anyhow!("--as: {e}"))?,
                self.scopes.clone(),
            )
            .map_err(|e| anyhow::anyhow!("--as {p}: {e}"))?,
        })
    }

    /// `--as` acts on the data dir; through a server, identities come from
    /// credentials.
    fn refuse_through(&self, server: &remote::Server) -> Result<()> {
        if self.principal.is_some() {
            anyhow::bail!(
                "--as acts on the data dir itself; a server is running on it ({}), \
                 and its callers' identities come from their credentials",
                server.url()
            );
        }
        Ok(())
    }

    /// For a command that reads the ledger: `Some(exit code)` when the
    /// principal may not read (said on stderr), before anything is opened.
    pub fn may_read(&self, cli: &Cli) -> Result<Option<i32>> {
        if self.principal.is_none() {
            return Ok(None);
        }
        let grant = self.grant()?;
        if let Some(server) = remote::server_for(cli)? {
            self.refuse_through(&server)?;
        }
        use agentledger::auth::{authorize, Action, Facts, Subject};
        Ok(
            match authorize(&grant, Action::Read(&Subject::Whole), &Facts::default()) {
                Ok(()) => None,
                Err(forbidden) => {
                    eprintln!("agentledger: forbidden: {forbidden}");
                    Some(1)
                }
            },
        )
    }
}

impl Command {
    /// Who a command that reads the ledger acts as.
    fn reads_as(&self) -> Option<&ActingAs> {
        match self {
            Command::Trail { acting, .. }
            | Command::Stats { acting, .. }
            | Command::Verify { acting, .. }
            | Command::Export { acting, .. }
            | Command::Chain { acting, .. }
            | Command::Agent { acting, .. }
            | Command::Status { acting } => Some(acting),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SealContext {
    Auto,
    On,
    Off,
}

#[derive(Subcommand)]
pub enum ProofCommand {
    /// The inclusion proof of the record at OFFSET.
    Inclusion { offset: u64 },
    /// The consistency proof from the tree of OLD records.
    Consistency { old: u64 },
}

#[derive(Subcommand)]
pub enum KeyCommand {
    /// Make a new Ed25519 checkpoint key at --checkpoint-key (default
    /// <data>/checkpoint.key); refuses to replace one.
    Generate {
        /// The key's name, which also names the ledger in checkpoint
        /// origins (agentledger/NAME/ledger/0); a witness's should be a
        /// URL-like name (witness.example/w1). Default: agentledger-<random>.
        #[arg(long)]
        name: Option<String>,
        /// A witness's key (C2SP cosignature/v1), kept at --key-file
        /// (default <data>/witness.key), for `agentledger witness`.
        #[arg(long)]
        witness: bool,
        /// Where to write the key (default: the checkpoint key's place, or
        /// <data>/witness.key with --witness).
        #[arg(long)]
        key_file: Option<PathBuf>,
        /// The fleet's seal key instead (at --seal-key, default
        /// <data>/seal.key): 32 random bytes that wrap the task keys
        /// instances share on Kafka. Copy the file to every instance.
        #[arg(long, conflicts_with_all = ["witness", "name", "key_file"])]
        seal: bool,
    },
    /// Print the verifier key (name+id+key) that `verify --key` (or, of a
    /// witness key, `verify --witness-key`) takes.
    Show {
        /// Show the witness key (<data>/witness.key unless --key-file).
        #[arg(long)]
        witness: bool,
        #[arg(long)]
        key_file: Option<PathBuf>,
        /// Show the seal key's fingerprint (never the key): the same on
        /// every instance that shares task keys.
        #[arg(long, conflicts_with_all = ["witness", "key_file"])]
        seal: bool,
    },
}

// Parsed once per process: `serve`'s many flags cost nothing worth boxing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum Command {
    /// Apply JSON-lines operations from a file or `-` (stdin).
    Apply {
        file: String,
        /// Longest accepted line in bytes.
        #[arg(long, default_value_t = MAX_LINE_BYTES)]
        max_line_bytes: usize,
        #[command(flatten)]
        acting: ActingAs,
    },
    /// Show the trail of a run (or of its whole chain).
    Trail {
        run: String,
        #[arg(long)]
        chain: bool,
        #[command(flatten)]
        acting: ActingAs,
        /// Show the trail as it stood at a ledger offset (a number) or a
        /// time (RFC 3339, e.g. 2026-12-02T10:00:00Z, or Unix milliseconds
        /// followed by "ms").
        #[arg(long)]
        as_of: Option<String>,
        /// Write the run (with --chain, its chain) as OpenTelemetry GenAI
        /// spans to FILE, OTLP/JSON (`-` for stdout), instead of the trail.
        #[arg(long, value_name = "FILE", conflicts_with = "as_of")]
        otlp: Option<PathBuf>,
    },
    /// Context-exchange totals of a task: bytes inline vs behind references.
    Stats {
        task: String,
        #[command(flatten)]
        acting: ActingAs,
    },
    /// Recompute every digest and hash chain from the log (or check an
    /// export file alone); exit 0 clean, 1 mismatch, 2 unable to read.
    Verify {
        #[arg(long)]
        export: Option<PathBuf>,
        /// Also check the checkpoints this verifier key signed (as `key
        /// show` prints it, or a file holding it): every record must lie
        /// under a signed checkpoint whose Merkle root matches the log.
        #[arg(long, env = "AGENTLEDGER_VERIFIER_KEY")]
        key: Option<String>,
        /// Also prove that today's log extends the one this older signed
        /// checkpoint (a file holding its note) attested: nothing
        /// rewritten, nothing removed (RFC 9162 consistency proof; needs
        /// --key; every other check of `verify --key` runs as well).
        #[arg(long, requires = "key", conflicts_with = "export")]
        since: Option<PathBuf>,
        /// Require cosignatures by this witness (its key as `key show
        /// --witness` prints it, or a file holding it); repeatable. Each
        /// log must have a checkpoint cosigned by --witnesses of them, and
        /// every cosigned checkpoint must be one this log has; with
        /// --export, every record must be proven under a checkpoint of the
        /// export that --witnesses of them cosigned.
        #[arg(long, requires = "key")]
        witness_key: Vec<String>,
        /// How many of the witness keys must have cosigned (default: all).
        #[arg(long, requires = "witness_key")]
        witnesses: Option<usize>,
        /// Refuse records past each log's newest witnessed checkpoint
        /// (without it they are counted as attested by the ledger's key
        /// alone): a log's own files can hide newer cosignatures, so an
        /// auditor who needs every record witnessed asks for it.
        #[arg(long, requires = "witness_key")]
        all_witnessed: bool,
        /// Also hold every event of the `published` topic (derived data no
        /// checkpoint covers) against the ledger's records: each must be
        /// one a run's close published, as the dispatcher builds it, and
        /// every event of a dispatched run must be there. Decodes every
        /// ledger record.
        #[arg(long, conflicts_with = "export")]
        published: bool,
        #[command(flatten)]
        acting: ActingAs,
    },
    /// Write checkpoints now, covering every record of the log.
    Checkpoint,
    /// Witness a ledger: follow each of its logs at --log (a `serve
    /// --listen` URL), check every new signed checkpoint is consistent
    /// with the last one cosigned (RFC 9162 proof from the served tiles),
    /// and hand back a C2SP cosignature. Refuses, and says why, a ledger
    /// that rolled back, forked or rewrote its history. One JSON line per
    /// log and round on stdout. Needs a reader's token (--token-file or
    /// AGENTLEDGER_TOKEN).
    Witness {
        /// The witness's key (`key generate --witness`).
        #[arg(long)]
        key: PathBuf,
        /// The ledger's URL (http://HOST:PORT).
        #[arg(long)]
        log: String,
        /// The ledger's verifier key (`key show` on the ledger), or a file
        /// holding it: only checkpoints it signed are cosigned.
        #[arg(long)]
        ledger_key: String,
        /// Where the witness remembers the checkpoint it last cosigned per
        /// log (JSON; made if missing). Keep it: it is what catches a fork.
        #[arg(long)]
        state: PathBuf,
        /// One round, then exit: 0 if every log was cosigned, 1 if one was
        /// refused.
        #[arg(long)]
        once: bool,
        /// Milliseconds between rounds.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
    },
    /// RFC 9162 proofs from a partition's Merkle tree, as JSON (hashes in
    /// base64), for transparency-log clients: `proof inclusion OFFSET` in
    /// the tree of `--size` records, `proof consistency OLD` from the tree
    /// of OLD records to the one of `--size` (default: the log's end).
    Proof {
        #[command(subcommand)]
        what: ProofCommand,
        /// The topic: ledger or registry.
        #[arg(long, default_value = "ledger", global = true)]
        topic: String,
        #[arg(long, default_value_t = 0, global = true)]
        partition: u32,
        /// The tree size to prove in (default: every record of the partition).
        #[arg(long, global = true)]
        size: Option<u64>,
    },
    /// Export a run's or a chain's records with their covering checkpoints.
    Export {
        #[arg(long, conflicts_with = "chain")]
        run: Option<String>,
        #[arg(long)]
        chain: Option<String>,
        /// Only records at or before this ledger offset.
        #[arg(long)]
        as_of: Option<u64>,
        /// Write to a file instead of stdout.
        #[arg(long, short)]
        out: Option<PathBuf>,
        #[command(flatten)]
        acting: ActingAs,
    },
    /// Show the runs of a run's chain with their hops, or draw the chain
    /// (`--format svg > chain.svg`, `--format dot | dot -Tpng`).
    Chain {
        run: String,
        /// text (or --json), or a picture: dot (Graphviz) or svg.
        #[arg(long, value_parser = ["text", "json", "dot", "svg"])]
        format: Option<String>,
        #[command(flatten)]
        acting: ActingAs,
    },
    /// Show an agent's versions and their loop warnings.
    Agent {
        name: String,
        #[command(flatten)]
        acting: ActingAs,
    },
    /// Rebuild every view from the log.
    Rebuild,
    /// Remove from the content store the bytes no live reference holds (an
    /// artifact's reference never expires; a task's blob grant expires at
    /// its TTL). `serve` runs this sweep on its own.
    Gc {
        /// Leave bytes written less than this many seconds ago: the ledger
        /// record naming them may not be projected yet.
        #[arg(long, default_value_t = DEFAULT_GC_GRACE_SECS)]
        grace_secs: u64,
    },
    /// Log ends, projected offsets, lag, dispatcher cursors and view sizes.
    Status {
        #[command(flatten)]
        acting: ActingAs,
    },
    /// Run the projector, the dispatcher and checkpoints continuously until
    /// ctrl-c or SIGTERM.
    Serve {
        /// Consumer group shared by the instances serving one ledger (on
        /// Kafka): its coordinator hands each instance some ledger
        /// partitions (whole chains) to dispatch, and moves them when an
        /// instance joins, stops or dies. The embedded log has one instance.
        #[arg(long, default_value = "agentledger-serve")]
        group: String,
        /// Milliseconds to wait when there is nothing to do.
        #[arg(long, default_value_t = 200)]
        poll_ms: u64,
        /// Seconds between sweeps of the content store (see `gc`).
        #[arg(long, default_value_t = 300)]
        gc_interval_secs: u64,
        /// Grace period of the sweep in seconds (see `gc --grace-secs`).
        #[arg(long, default_value_t = DEFAULT_GC_GRACE_SECS)]
        gc_grace_secs: u64,
        /// Checkpoint (and sign, with a checkpoint key) every partition's
        /// new records at least this often, besides every 1024 records.
        #[arg(long, default_value_t = 1000)]
        checkpoint_ms: u64,
        /// Export each run as OpenTelemetry GenAI spans to this OTLP/HTTP
        /// collector as it closes (e.g. http://127.0.0.1:4318; /v1/traces
        /// is added to a base URL).
        #[arg(long, value_name = "URL", env = "AGENTLEDGER_OTLP_ENDPOINT")]
        otlp_endpoint: Option<String>,
        /// auto: dispatch every finished run as soon as it closes (and on
        /// Kafka, as soon as another writer closes one); manual: only when
        /// a client sends `dispatch`, whose answer names every listener
        /// opened (for platforms that start agents from it).
        #[arg(long, default_value = "auto", value_parser = ["auto", "manual"])]
        dispatch: String,
        /// Answer the network at this address (e.g. 127.0.0.1:8700; port 0
        /// picks one): POST /v1/ops, GET /v1/ws, GET /v1/events, the reads,
        /// /metrics, /healthz, /readyz. The bound address is printed and
        /// written to <data>/serve.addr.
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Milliseconds a request may wait for its answer (then 504).
        #[arg(long, default_value_t = 30_000)]
        request_timeout_ms: u64,
        /// Requests answered at once; more get 503 with Retry-After.
        #[arg(long, default_value_t = 256)]
        max_in_flight: usize,
        /// Requests one caller (a token, or a JWT's or client
        /// certificate's principal) may have answered at once, so that one
        /// tenant leaves room for the others; more get 503 with
        /// Retry-After. Default: half of --max-in-flight.
        #[arg(long)]
        max_in_flight_per_caller: Option<usize>,
        /// Largest request body and WebSocket message, in bytes.
        #[arg(long, default_value_t = MAX_LINE_BYTES)]
        max_body_bytes: usize,
        /// Bytes all request bodies being read (and WebSocket messages
        /// being assembled) may hold together, at least --max-body-bytes;
        /// past it a request gets 503 with Retry-After instead of being read.
        #[arg(long, default_value_t = agentledger::limits::BODY_BUDGET_BYTES)]
        body_budget_bytes: usize,
        /// Event streams (SSE, subscribed WebSockets) followed at once;
        /// more get 503.
        #[arg(long, default_value_t = agentledger::limits::MAX_STREAMS)]
        max_streams: usize,
        /// Event streams one caller may follow at once. Default: half of
        /// --max-streams.
        #[arg(long)]
        max_streams_per_caller: Option<usize>,
        /// Seconds from SIGTERM (or ctrl-c) to exit, at most, whatever
        /// the log does: requests in flight are answered meanwhile; past
        /// it the server exits with code 2 without waiting for the log
        /// (Kafka brokers that are gone), losing nothing acknowledged.
        #[arg(long, default_value = "5", value_parser = seconds)]
        shutdown_timeout: std::time::Duration,
        /// Serve HTTPS (rustls): the certificate chain, PEM, leaf first.
        #[arg(long, requires = "tls_key", requires = "listen")]
        tls_cert: Option<PathBuf>,
        /// The certificate's private key, PEM.
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// mTLS: client certificates signed by a CA of this PEM file
        /// authenticate as the principal their URI SAN names
        /// (agentledger:agent:hotel, agentledger:platform:acme?scope=acme/travel);
        /// clients without one still show a bearer token.
        #[arg(long, requires = "tls_cert")]
        client_ca: Option<PathBuf>,
        /// Accept JWTs signed by the keys of this JWKS file (EdDSA, ES256,
        /// RS256) besides the ledger's own tokens.
        #[arg(long, requires_all = ["jwt_issuer", "jwt_audience", "listen"])]
        jwt_jwks: Option<PathBuf>,
        /// The `iss` a JWT must carry.
        #[arg(long, requires = "jwt_jwks")]
        jwt_issuer: Option<String>,
        /// The `aud` a JWT must carry.
        #[arg(long, requires = "jwt_jwks")]
        jwt_audience: Option<String>,
        /// The claim that names the principal (e.g. agent:hotel).
        #[arg(long, default_value = "sub")]
        jwt_principal_claim: String,
        /// Keep cosignatures posted to the ledger only from this witness
        /// (its key as `key show --witness` prints it, or a file holding
        /// it), each verified; repeatable. Without it, any well-formed
        /// cosignature line is kept, at most 64 per checkpoint.
        #[arg(long, requires = "listen")]
        witness_key: Vec<String>,
    },
    /// Follow the agent events actually published, as JSON lines.
    Subscribe {
        #[arg(long)]
        from_beginning: bool,
        /// Stop after this many events.
        #[arg(long)]
        max: Option<u64>,
        /// Stop after this many seconds without a new event.
        #[arg(long)]
        idle_exit: Option<u64>,
    },
    /// Bearer tokens for the network face (serve --listen): issue, list,
    /// revoke.
    /// The checkpoint key: `key generate` makes one (kept outside the log,
    /// mode 0600); `key show` prints its verifier key for auditors.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    Token {
        #[command(subcommand)]
        command: tokens::TokenCommand,
    },
    /// Print the JSON Schema (2020-12) of every operation and its reply
    /// (what `schemas/ops.json` holds).
    Schema,
    /// Play the seed scenarios end to end on a fresh data dir.
    Demo {
        /// Where the demo keeps its data (wiped at start if a previous demo made it).
        #[arg(long, default_value = "./agentledger-demo")]
        dir: PathBuf,
    },
}

/// Default grace period of content sweeps, in seconds.
const DEFAULT_GC_GRACE_SECS: u64 = 600;

/// Exit codes: 0 ok, 1 something refused or malformed, 2 usage or IO.
pub fn run() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    quiet_sled_panics();
    match run_command(cli) {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => 0,
        Err(e) => {
            eprintln!("agentledger: {}", error_text(&e));
            2
        }
    }
}

/// A number of seconds (fractions allowed), as a duration.
fn seconds(s: &str) -> Result<std::time::Duration, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .and_then(|n| std::time::Duration::try_from_secs_f64(n).ok())
        .filter(|d| *d <= std::time::Duration::from_secs(3600))
        .ok_or_else(|| format!("{s:?} is not a number of seconds from 0 to 3600"))
}

/// The error and its causes on one line, each said once: many errors print
/// their cause in their own message too, and `{:#}` would repeat it.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let msg = cause.to_string();
        if text.contains(&msg) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&msg);
    }
    text
}

/// Whoever read our output went away (`trail --json | head`): the command
/// ends quietly, as Unix tools do.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// sled panics on some kinds of damage to the views; the engine catches
/// that, sets the views aside and projects them again, and says so. Its
/// panic message is then one short line instead of a report of a crash.
fn quiet_sled_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let in_sled = info.location().is_some_and(|l| l.file().contains("/sled-"));
        if in_sled {
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            eprintln!("agentledger: the views store (sled) failed: {msg}");
        } else {
            default(info);
        }
    }));
}

/// Where the checkpoint key is: `--checkpoint-key`, else
/// `<data>/checkpoint.key`.
pub fn checkpoint_key_path(cli: &Cli) -> PathBuf {
    cli.checkpoint_key
        .clone()
        .unwrap_or_else(|| cli.data.join("checkpoint.key"))
}

/// The checkpoint key, if there is one where it is looked for.
fn signer(cli: &Cli) -> Result<Option<std::sync::Arc<agentledger::audit::note::SignerKey>>> {
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
fn seal_key(cli: &Cli) -> Result<Option<std::sync::Arc<agentledger::erasure::TaskKey>>> {
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
fn reading_options(cli: &Cli) -> Result<EngineOptions> {
    options_for(cli, false)
}

fn options_for(cli: &Cli, signing: bool) -> Result<EngineOptions> {
    if let Some(mb) = cli.cache_mb {
        agentledger::views::set_cache_bytes(mb << 20);
    }
    let seal_key = seal_key(cli)?;
    let mut o = EngineOptions {
        signer: if signing { signer(cli)? } else { None },
        seal_context: match cli.seal_context {
            SealContext::On => true,
            SealContext::Off => false,
            SealContext::Auto => cli.kafka.is_none() || seal_key.is_some(),
        },
        seal_key,
        context_ttl_ms: cli.context_ttl_secs.saturating_mul(1000),
        ledger: cli.ledger_id.clone(),
        ..EngineOptions::default()
    };
    o.embedded.topic_prefix = cli.topic_prefix.clone();
    o.embedded.ledger_partitions = cli.ledger_partitions;
    o.writer = format!(
        "agentledger-{}/{}",
        env!("CARGO_PKG_VERSION"),
        std::process::id()
    );
    // On the embedded log catching up is a look at an in-memory offset.
    if cli.kafka.is_some() {
        o.max_staleness = std::time::Duration::from_millis(cli.max_staleness_ms);
    }
    Ok(o)
}

/// TLS and SASL towards the brokers, as the flags ask; the password file is
/// read here, so that a missing one is named before anything connects.
fn kafka_security(cli: &Cli) -> Result<KafkaSecurity> {
    let sasl = match (&cli.kafka_user, &cli.kafka_password_file) {
        (Some(user), Some(file)) => Some(SaslLogin {
            mechanism: cli
                .kafka_sasl_mechanism
                .unwrap_or(SaslMechanism::ScramSha512),
            user: user.clone(),
            password: Password::from_file(file)?,
        }),
        _ => None,
    };
    Ok(KafkaSecurity {
        tls: cli.kafka_tls || cli.kafka_tls_ca.is_some(),
        tls_ca: cli.kafka_tls_ca.clone(),
        sasl,
    })
}

pub fn kafka_config(cli: &Cli) -> Result<Option<KafkaConfig>> {
    let Some(brokers) = &cli.kafka else {
        return Ok(None);
    };
    let security = kafka_security(cli)?;
    Ok(Some(KafkaConfig {
        brokers: brokers.clone(),
        topic_prefix: cli.topic_prefix.clone(),
        ledger_partitions: cli.ledger_partitions,
        replication_factor: cli.replication,
        min_insync_replicas: (cli.replication >= 3).then_some(2),
        timeout: std::time::Duration::from_secs(cli.kafka_timeout.max(1)),
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

/// Bytes `apply` reads ahead of the line it is on.
const APPLY_READ_AHEAD: usize = 1 << 20;

fn run_command(cli: Cli) -> Result<i32> {
    agentledger::model::ids::check_topic_prefix(&cli.topic_prefix)
        .map_err(|e| anyhow::anyhow!("--topic-prefix: {e}"))?;
    if cli.data.exists() && !cli.data.is_dir() {
        anyhow::bail!(
            "--data {}: that is a file, not a directory (the data dir holds the log, the views and the keys)",
            cli.data.display()
        );
    }
    if let Some(acting) = cli.command.reads_as() {
        if let Some(code) = acting.may_read(&cli)? {
            return Ok(code);
        }
    }
    match &cli.command {
        Command::Apply {
            file,
            max_line_bytes,
            acting,
        } => {
            let grant = acting.grant()?;
            // Read ahead generously: the lines already read are decided
            // as one commit group.
            let source: Box<dyn std::io::Read> = if file == "-" {
                Box::new(std::io::stdin())
            } else {
                if std::path::Path::new(file).is_dir() {
                    anyhow::bail!("apply {file}: that is a directory, not a file of JSON lines (or - for stdin)");
                }
                Box::new(std::fs::File::open(file).with_context(|| format!("opening {file}"))?)
            };
            let mut input = BufReader::with_capacity(APPLY_READ_AHEAD, source);
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            let summary = if let Some(server) = remote::server_for(&cli)? {
                acting.refuse_through(&server)?;
                // Through a server: the lines read ahead go in one body.
                apply_stream_with(&mut input, &mut out, *max_line_bytes, 256, |lines| {
                    server.ops(lines)
                })
                .context("reading input, asking the server or writing answers")?
            } else {
                let mut engine = open_engine(&cli)?;
                let summary =
                    apply_stream_as(&mut engine, &grant, &mut input, &mut out, *max_line_bytes)
                        .context("reading input or writing answers")?;
                engine.flush()?;
                summary
            };
            out.flush()?;
            Ok(if summary.failed {
                2
            } else if summary.refused > 0 {
                1
            } else {
                0
            })
        }
        Command::Trail {
            run,
            chain,
            otlp: Some(file),
            ..
        } => inspect::write_to(
            &cli,
            Query::Trace {
                run: run.clone(),
                chain: *chain,
            },
            file,
        ),
        Command::Trail {
            run, chain, as_of, ..
        } => inspect::ask(
            &cli,
            Query::Trail {
                run: run.clone(),
                chain: *chain,
                as_of: as_of.clone(),
            },
        ),
        Command::Stats { task, .. } => inspect::ask(&cli, Query::Stats { task: task.clone() }),
        Command::Verify {
            export,
            key,
            since,
            witness_key,
            witnesses,
            all_witnessed,
            published,
            ..
        } => audit::verify(
            &cli,
            audit::VerifyAsked {
                export: export.as_deref(),
                key: key.as_deref(),
                since: since.as_deref(),
                witness_keys: witness_key,
                witnesses: *witnesses,
                all_witnessed: *all_witnessed,
                published: *published,
            },
        ),
        Command::Checkpoint => audit::checkpoint(&cli),
        Command::Proof {
            what,
            topic,
            partition,
            size,
        } => audit::proof(&cli, what, topic, *partition, *size),
        Command::Export {
            run,
            chain,
            as_of,
            out,
            ..
        } => audit::export(
            &cli,
            run.as_deref(),
            chain.as_deref(),
            *as_of,
            out.as_deref(),
        ),
        Command::Chain { run, format, .. } => {
            let run = run.clone();
            let q = match format.as_deref().and_then(PictureFormat::parse) {
                Some(format) => Query::Picture { run, format },
                None => Query::Chain { run },
            };
            inspect::ask_with(&cli, q, cli.json || format.as_deref() == Some("json"))
        }
        Command::Agent { name, .. } => inspect::ask(&cli, Query::Agent { name: name.clone() }),
        Command::Status { .. } => inspect::ask(&cli, Query::Status),
        Command::Rebuild => rebuild(&cli),
        Command::Demo { dir } => demo::run(dir),
        Command::Token { command } => tokens::run(&cli, command),
        Command::Key { command } => audit::key(&cli, command),
        Command::Witness {
            key,
            log,
            ledger_key,
            state,
            once,
            interval_ms,
        } => witness::run(
            &cli,
            &witness::Args {
                key,
                log,
                ledger_key,
                state,
                once: *once,
                interval: std::time::Duration::from_millis((*interval_ms).max(10)),
            },
        ),
        Command::Schema => {
            outln!(
                "{}",
                agentledger::protocol::schema::document_text().trim_end()
            );
            Ok(0)
        }
        Command::Gc { grace_secs } => gc(&cli, *grace_secs),
        Command::Serve {
            max_body_bytes,
            body_budget_bytes,
            ..
        } if body_budget_bytes < max_body_bytes => anyhow::bail!(
            "--body-budget-bytes {body_budget_bytes} is less than --max-body-bytes {max_body_bytes}: one body could never be read"
        ),
        Command::Serve {
            max_in_flight,
            max_in_flight_per_caller: Some(per),
            ..
        } if per > max_in_flight || *per == 0 => anyhow::bail!(
            "--max-in-flight-per-caller {per} is not within 1 to --max-in-flight {max_in_flight}"
        ),
        Command::Serve {
            max_streams,
            max_streams_per_caller: Some(per),
            ..
        } if per > max_streams || *per == 0 => anyhow::bail!(
            "--max-streams-per-caller {per} is not within 1 to --max-streams {max_streams}"
        ),
        Command::Serve {
            group,
            poll_ms,
            gc_interval_secs,
            gc_grace_secs,
            checkpoint_ms,
            otlp_endpoint,
            dispatch,
            listen,
            request_timeout_ms,
            max_in_flight,
            max_in_flight_per_caller,
            max_body_bytes,
            body_budget_bytes,
            max_streams,
            max_streams_per_caller,
            shutdown_timeout,
            tls_cert,
            tls_key,
            client_ca,
            jwt_jwks,
            jwt_issuer,
            jwt_audience,
            jwt_principal_claim,
            witness_key,
        } => serve::serve(
            &cli,
            &serve::ServeOptions {
                group: group.clone(),
                poll: std::time::Duration::from_millis(*poll_ms),
                gc_interval: std::time::Duration::from_secs(*gc_interval_secs),
                gc_grace: std::time::Duration::from_secs(*gc_grace_secs),
                checkpoint_every: std::time::Duration::from_millis(*checkpoint_ms),
                otlp_endpoint: otlp_endpoint.clone(),
                dispatch: dispatch == "auto",
                listen: *listen,
                shutdown_timeout: *shutdown_timeout,
                http: agentledger::server::HttpOptions {
                    max_body: *max_body_bytes,
                    timeout: std::time::Duration::from_millis(*request_timeout_ms),
                    max_in_flight: *max_in_flight,
                    max_in_flight_per_caller: max_in_flight_per_caller
                        .unwrap_or(max_in_flight.div_ceil(2)),
                    max_streams: *max_streams,
                    max_streams_per_caller: max_streams_per_caller
                        .unwrap_or(max_streams.div_ceil(2)),
                    body_budget: *body_budget_bytes,
                    // Set from --shutdown-timeout by the server.
                    stop_answering_after: *shutdown_timeout,
                    tls: tls_cert.clone().zip(tls_key.clone()).map(|(cert, key)| {
                        agentledger::server::TlsFiles {
                            cert,
                            key,
                            client_ca: client_ca.clone(),
                        }
                    }),
                    jwt: match jwt_jwks {
                        Some(file) => Some(std::sync::Arc::new(
                            agentledger::auth::jwt::JwtConfig::load(
                                file,
                                jwt_issuer.as_deref().unwrap_or_default(),
                                jwt_audience.as_deref().unwrap_or_default(),
                                jwt_principal_claim,
                            )?,
                        )),
                        None => None,
                    },
                    witnesses: witness_key
                        .iter()
                        .map(|w| {
                            let k = audit::verifier_key(w)?;
                            if k.kind() != agentledger::audit::note::KeyKind::Witness {
                                anyhow::bail!("--witness-key {w:?} is not a witness key (`key show --witness` prints one)");
                            }
                            Ok(k)
                        })
                        .collect::<Result<Vec<_>>>()?,
                },
            },
            serve::shutdown_flag(),
        ),
        Command::Subscribe {
            from_beginning,
            max,
            idle_exit,
        } => serve::subscribe(
            &cli,
            *from_beginning,
            *max,
            idle_exit.map(std::time::Duration::from_secs),
            serve::shutdown_flag(),
        ),
    }
}

fn gc(cli: &Cli, grace_secs: u64) -> Result<i32> {
    let mut engine = open_engine(cli)?;
    let r = engine.sweep_content(std::time::Duration::from_secs(grace_secs))?;
    engine.flush()?;
    if cli.json {
        let mut answer = serde_json::json!({"ok": true, "examined": r.examined, "kept": r.kept,
            "in_grace": r.in_grace, "removed": r.removed, "removed_bytes": r.removed_bytes});
        if let Some(s) = &r.shared {
            answer["shared"] = serde_json::json!({"examined": s.examined, "removed": s.removed});
        }
        outln!("{answer}");
    } else {
        outln!(
            "content store: {} blobs, {} held by live references, {} unreferenced but newer than {grace_secs}s; removed {} ({} bytes)",
            r.examined, r.kept, r.in_grace, r.removed, r.removed_bytes
        );
        if let Some(s) = &r.shared {
            outln!(
                "shared content (blobs topic): {} blobs, {} no live reference holds ended with tombstones",
                s.examined, s.removed
            );
        }
    }
    Ok(0)
}

fn rebuild(cli: &Cli) -> Result<i32> {
    // A server owns the data dir: build beside its live views instead.
    if let Some(server) = remote::server_for(cli)? {
        return rebuild_through(cli, &server);
    }
    let dd = DataDir::new(&cli.data);
    let _lock = dd.lock()?;
    let opts = options(cli)?;
    let log: Box<dyn Log> = match kafka_config(cli)? {
        Some(k) => Box::new(KafkaLog::connect(&k)?),
        None => Box::new(EmbeddedLog::open(dd.log(), &opts.embedded)?),
    };
    let log = log.as_ref();
    let total = agentledger::rebuild::projected_records(log)?;
    let bar = progress_bar(cli, total, "rebuilding");
    let started = std::time::Instant::now();
    let report = agentledger::rebuild::rebuild_views(&dd, log, &|n| bar.inc(n))?;
    bar.finish_and_clear();
    print_rebuild(
        cli,
        report.records,
        started.elapsed().as_secs_f64(),
        &report.digest,
        report.previous_digest.as_deref(),
    )?;
    Ok(0)
}

/// `rebuild` while a server owns the data dir: ask it to build fresh
/// views beside the live ones, follow the build, and print what the
/// offline rebuild prints once the server swapped them in.
fn rebuild_through(cli: &Cli, server: &remote::Server) -> Result<i32> {
    use agentledger::rebuild::beside::{RebuildState, RebuildStatus};
    let status_of = |body: &[u8]| -> Result<RebuildStatus> {
        let v: serde_json::Value = serde_json::from_slice(body)
            .with_context(|| format!("the server answered {:?}", String::from_utf8_lossy(body)))?;
        serde_json::from_value(v["rebuild"].clone())
            .with_context(|| format!("the server answered {v} (no rebuild)"))
    };
    let (code, text) = server.post_text("/v1/rebuild", String::new())?;
    if code != 200 {
        let why = serde_json::from_str::<agentledger::protocol::Failure>(&text)
            .map(|f| f.error.message)
            .unwrap_or(text);
        anyhow::bail!(
            "the server at {} did not start the rebuild (HTTP {code}): {why}",
            server.url()
        );
    }
    let first = status_of(text.as_bytes())?;
    let bar = progress_bar(cli, first.total, "rebuilding beside the live views");
    let mut st = first.clone();
    while st.state == RebuildState::Running {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let body = server
            .fetch("/v1/rebuild")?
            .context("the server no longer answers /v1/rebuild")?;
        st = status_of(&body)?;
        if st.id != first.id || st.started_at_ms != first.started_at_ms {
            anyhow::bail!("the server restarted while rebuilding; run rebuild again");
        }
        bar.set_position(st.projected);
    }
    bar.finish_and_clear();
    match st.state {
        RebuildState::Failed => anyhow::bail!(
            "the rebuild failed on the server: {}; the live views are unchanged",
            st.error.as_deref().unwrap_or("no reason given")
        ),
        _ => {
            let digest = st.digest.clone().unwrap_or_default();
            print_rebuild(
                cli,
                st.projected,
                st.seconds,
                &digest,
                st.previous_digest.as_deref(),
            )?;
            Ok(0)
        }
    }
}

/// What a rebuild prints: records, time, and both digests.
fn print_rebuild(
    cli: &Cli,
    records: u64,
    secs: f64,
    digest: &str,
    previous: Option<&str>,
) -> Result<()> {
    let same = previous.map(|d| d == digest);
    if cli.json {
        outln!(
            "{}",
            serde_json::json!({"ok": true, "records": records, "seconds": secs,
                "digest": digest, "previous_digest": previous, "identical": same})
        );
    } else {
        outln!(
            "rebuilt views from {} records in {:.2}s ({:.0} records/s)",
            records,
            secs,
            records as f64 / secs.max(1e-9)
        );
        outln!("views digest  {digest}");
        match (previous, same) {
            (Some(d), Some(true)) => outln!("live digest   {d} (identical)"),
            (Some(d), _) => outln!(
                "live digest   {d} (DIFFERENT: the live views had drifted and were replaced)"
            ),
            (None, _) => outln!("live digest   (no readable live views to compare)"),
        }
    }
    Ok(())
}

/// A progress bar on stderr for long work (indicatif hides it when stderr
/// is not a terminal); hidden with --json.
pub fn progress_bar(cli: &Cli, total: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{what} {{bar:40}} {{pos}}/{{len}} records ({{per_sec}}, eta {{eta}})"
        ))
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    if cli.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar
}
