//! The command line as clap reads it: the global options (data dir,
//! Kafka, sealing, a server to go through), every subcommand and its
//! flags, and the parsers of their values. Holds no behaviour.

use super::families::{KeyCommand, ProofCommand, TokenCommand};
pub use super::kafka_args::KafkaArgs;
use super::values::{advertised_url, seconds, SealContext};
use agentledger::apply::MAX_LINE_BYTES;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "agentledger",
    version,
    about = "Event-sourced ledger for multi-agent systems",
    after_help = "Examples:\n  agentledger demo\n  agentledger --data ./agentledger-demo trail dev-0 --chain\n  agentledger --data ./agentledger-demo verify\n\nEach command's --help has its own; docs/ has the rest."
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
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// Seal each task's context records with a key of its own, erased
    /// when the task's context expires or is forgotten: on, off, or auto
    /// (on the embedded log; on Kafka, on when a seal key is there — the
    /// task keys are then shared by every instance holding it — else off,
    /// where keys would live with one instance only).
    #[arg(
        long,
        global = true,
        default_value = "auto",
        env = "AGENTLEDGER_SEAL_CONTEXT",
        help_heading = "Keys and sealing"
    )]
    pub seal_context: SealContext,
    /// How long a task's context (its key) lives, in seconds.
    #[arg(long, global = true, default_value_t = agentledger::engine::DEFAULT_CONTEXT_TTL_MS / 1000, help_heading = "Keys and sealing")]
    pub context_ttl_secs: u64,
    /// The ledger's name in the CloudEvents it publishes (`source` =
    /// agentledger/<ledger id>/<agent>). Default: the checkpoint key's
    /// name, else `local`. Every instance of one ledger should give the same.
    #[arg(
        long,
        global = true,
        env = "AGENTLEDGER_LEDGER_ID",
        help_heading = "Keys and sealing"
    )]
    pub ledger_id: Option<String>,
    /// Memory the views' page cache may take, in MiB. Default: a
    /// sixteenth of the machine's memory, 64 to 256 MiB.
    #[arg(long, global = true, env = "AGENTLEDGER_CACHE_MB", value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub cache_mb: Option<u64>,
    /// Partitions of the ledger topic when it is created.
    #[arg(long, global = true, default_value_t = 4, help_heading = "Kafka")]
    pub ledger_partitions: u32,
    /// Replication factor of the topics when they are created (Kafka).
    #[arg(long, global = true, default_value_t = 1, help_heading = "Kafka")]
    pub replication: u16,
    /// On Kafka, how many milliseconds old the views may be when an
    /// operation is decided (catching up asks the broker for its offsets).
    /// Another writer's records are never lost either way; a lost race for
    /// the same step is answered `conflict`. 0 = catch up before every one.
    #[arg(long, global = true, default_value_t = 100, help_heading = "Kafka")]
    pub max_staleness_ms: u64,
    /// The fleet's seal key (made by `key generate --seal`; the same file
    /// on every instance of one ledger on Kafka): task keys are shared
    /// between instances wrapped with it. Without it, <data>/seal.key when
    /// that exists.
    #[arg(
        long,
        global = true,
        env = "AGENTLEDGER_SEAL_KEY",
        help_heading = "Keys and sealing"
    )]
    pub seal_key: Option<PathBuf>,
    /// The key that signs checkpoints (made by `key generate`); without
    /// it, <data>/checkpoint.key when that exists.
    #[arg(
        long,
        global = true,
        env = "AGENTLEDGER_CHECKPOINT_KEY",
        help_heading = "Keys and sealing"
    )]
    pub checkpoint_key: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Go through the agentledger server at this URL (e.g.
    /// http://127.0.0.1:8700). Without it, a server that owns the data dir
    /// is found through <data>/serve.addr.
    #[arg(
        long,
        global = true,
        env = "AGENTLEDGER_SERVER",
        help_heading = "Through a server"
    )]
    pub server: Option<String>,
    /// A PEM file of the certificate authority to trust when going
    /// through a server over HTTPS (besides the system's).
    #[arg(
        long,
        global = true,
        env = "AGENTLEDGER_TLS_CA",
        help_heading = "Through a server"
    )]
    pub tls_ca: Option<PathBuf>,
    /// A file holding the bearer token to show the server (the token may
    /// also be given in AGENTLEDGER_TOKEN). Without either, the session
    /// token a server on this data dir wrote to <data>/serve.token is used.
    #[arg(long, global = true, help_heading = "Through a server")]
    pub token_file: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
    /// Whether `--data` (or AGENTLEDGER_DATA) was given, not defaulted.
    #[arg(skip)]
    pub data_given: bool,
}

/// `--as PRINCIPAL [--scope SCOPE]…`: the operator acting as another
/// principal, for scripting and tests, on the data dir itself.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ActingAs {
    /// Act as this principal (operator, platform:NAME, agent:NAME,
    /// auditor, consumer): what it may not do is refused `forbidden`, and
    /// every record it writes names it.
    #[arg(long = "as", value_name = "PRINCIPAL")]
    pub principal: Option<String>,
    /// A scope granted to the principal of `--as` (platforms need one;
    /// repeatable).
    #[arg(long = "scope", value_name = "SCOPE", requires = "principal")]
    pub scopes: Vec<String>,
}

impl Command {
    /// Who a command that reads the ledger acts as.
    pub(super) fn reads_as(&self) -> Option<&ActingAs> {
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

// Parsed once per process: `serve`'s many flags cost nothing worth boxing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum Command {
    /// Apply JSON-lines operations from a file or `-` (stdin).
    #[command(
        after_help = "Examples:\n  echo '{\"op\":\"publish_agent\",\"agent\":\"a1\",\"scope\":\"acme/x\"}' | agentledger --data ./ledger apply -\n  echo '{\"op\":\"open_run\",\"run\":\"r1\",\"agent\":\"a1\"}' | agentledger --data ./ledger apply --as platform:acme --scope acme/x -"
    )]
    Apply {
        /// The operations, one JSON object per line; `-` reads stdin.
        file: String,
        /// Longest accepted line in bytes.
        #[arg(long, default_value_t = MAX_LINE_BYTES)]
        max_line_bytes: usize,
        #[command(flatten)]
        acting: ActingAs,
    },
    /// Show the trail of a run (or of its whole chain).
    #[command(
        after_help = "Examples:\n  agentledger --data ./agentledger-demo trail dev-0 --chain\n  agentledger --data ./agentledger-demo --json trail dev-0\n  agentledger --data ./agentledger-demo trail dev-0 --otlp -"
    )]
    Trail {
        /// The run whose trail to show.
        run: String,
        /// The trail of the run's whole chain, from its root, instead.
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
    #[command(
        after_help = "Examples:\n  agentledger --data ./agentledger-demo stats tour\n  agentledger --data ./agentledger-demo --json stats doctor"
    )]
    Stats {
        /// The task (its TaskID).
        task: String,
        #[command(flatten)]
        acting: ActingAs,
    },
    /// Recompute every digest and hash chain from the log (or check an
    /// export file alone); exit 0 clean, 1 mismatch, 2 unable to read.
    #[command(
        after_help = "Examples:\n  agentledger --data ./agentledger-demo verify\n  agentledger --data ./agentledger-demo export --chain dev-0 --out dev-0.jsonl && agentledger verify --export dev-0.jsonl"
    )]
    Verify {
        /// Check this export file (`agentledger export`) alone, offline,
        /// instead of the log: its records against the checkpoints and
        /// proofs it carries.
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
        /// Fail (exit 1) when any record lies under no checkpoint: without
        /// it such records are counted and said, and the log is clean if
        /// every digest and chain head matches.
        #[arg(long)]
        require_attested: bool,
        #[command(flatten)]
        acting: ActingAs,
    },
    /// Write checkpoints now, covering every record of the log.
    #[command(
        after_help = "Examples:\n  agentledger --data ./agentledger-demo checkpoint\n  agentledger --data ./agentledger-demo --json checkpoint"
    )]
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
        /// The partition of the topic.
        #[arg(long, default_value_t = 0, global = true)]
        partition: u32,
        /// The tree size to prove in (default: every record of the partition).
        #[arg(long, global = true)]
        size: Option<u64>,
    },
    /// Export a run's or a chain's records with their covering checkpoints.
    #[command(
        after_help = "Examples:\n  agentledger --data ./agentledger-demo export --chain dev-0 --out dev-0.jsonl\n  agentledger --data ./agentledger-demo export --run dev-0"
    )]
    Export {
        /// The run to export.
        #[arg(long, conflicts_with = "chain")]
        run: Option<String>,
        /// The chain to export, by its root run (or any run of it).
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
    #[command(
        after_help = "Examples:\n  agentledger --data ./agentledger-demo chain dev-0\n  agentledger --data ./agentledger-demo chain dev-0 --format svg > chain.svg"
    )]
    Chain {
        /// A run of the chain (its root or any other).
        run: String,
        /// text (or --json), or a picture: dot (Graphviz) or svg.
        #[arg(long, value_parser = ["text", "json", "dot", "svg"])]
        format: Option<String>,
        #[command(flatten)]
        acting: ActingAs,
    },
    /// Show an agent's versions and their loop warnings.
    #[command(
        after_help = "Examples:\n  agentledger --data ./agentledger-demo agent developer\n  agentledger --data ./agentledger-demo --json agent reviewer"
    )]
    Agent {
        /// The agent's name.
        name: String,
        #[command(flatten)]
        acting: ActingAs,
    },
    /// Rebuild every view from the log.
    #[command(after_help = "Examples:\n  agentledger --data ./agentledger-demo rebuild")]
    Rebuild,
    /// Remove from the content store the bytes no live reference holds (an
    /// artifact's reference never expires; a task's blob grant expires at
    /// its TTL). `serve` runs this sweep on its own.
    #[command(
        after_help = "Examples:\n  agentledger --data ./agentledger-demo gc\n  agentledger --data ./agentledger-demo gc --grace-secs 0"
    )]
    Gc {
        /// Leave bytes written less than this many seconds ago: the ledger
        /// record naming them may not be projected yet.
        #[arg(long, default_value_t = DEFAULT_GC_GRACE_SECS)]
        grace_secs: u64,
    },
    /// Log ends, projected offsets, lag, dispatcher cursors and view sizes.
    #[command(
        after_help = "Examples:\n  agentledger --data ./agentledger-demo status\n  agentledger --data ./agentledger-demo --json status"
    )]
    Status {
        #[command(flatten)]
        acting: ActingAs,
    },
    /// Run the projector, the dispatcher and checkpoints continuously until
    /// ctrl-c or SIGTERM.
    #[command(
        after_help = "Examples:\n  agentledger --data ./agentledger-demo serve --listen 127.0.0.1:0        # until ctrl-c or SIGTERM"
    )]
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
        /// On Kafka: drop the views of a ledger partition this instance
        /// has not owned for this many seconds (kept meanwhile, should it
        /// come back, as in a rolling restart).
        #[arg(long, default_value_t = 600)]
        drop_views_after_secs: u64,
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
        #[arg(long, default_value_t = agentledger::model::limits::BODY_BUDGET_BYTES)]
        body_budget_bytes: usize,
        /// Event streams (SSE, subscribed WebSockets) followed at once,
        /// and MCP sessions held at once; more get 503.
        #[arg(long, default_value_t = agentledger::model::limits::MAX_STREAMS)]
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
        /// A name the server is reached by (a DNS name, or an address when
        /// it listens on all of them): its MCP endpoints answer a Host
        /// header naming it; repeatable. Loopback names and the address
        /// it listens on are always answered.
        #[arg(long, value_name = "NAME", requires = "listen")]
        allowed_host: Vec<String>,
        /// The URL the other instances reach this one by (`GET
        /// /v1/cluster`); default: http(s):// and the address it listens
        /// on, unless that is a wildcard address.
        #[arg(long, value_name = "URL", requires = "listen", value_parser = advertised_url)]
        advertise: Option<String>,
        /// A file holding a secret every instance of the cluster shares
        /// (32 bytes or more; `openssl rand -hex 32`): requests of callers
        /// whose credential cannot be passed on (a client certificate,
        /// this instance's session token) are forwarded to the owner of
        /// their chain with an assertion made with it. Another instance's
        /// certificate is trusted by --tls-ca besides the system's roots.
        #[arg(long, value_name = "FILE", requires = "listen")]
        cluster_key: Option<PathBuf>,
    },
    /// Follow the agent events actually published, as JSON lines.
    #[command(
        after_help = "Examples:\n  agentledger --data ./agentledger-demo subscribe --from-beginning --max 3"
    )]
    Subscribe {
        /// Start from the first event published, not from now.
        #[arg(long)]
        from_beginning: bool,
        /// Stop after this many events.
        #[arg(long)]
        max: Option<u64>,
        /// Stop after this many seconds without a new event.
        #[arg(long)]
        idle_exit: Option<u64>,
    },
    /// The checkpoint key, a witness's key or the fleet's seal key:
    /// `key generate` makes one (kept outside the log, mode 0600); `key
    /// show` prints its verifier key for auditors.
    #[command(
        after_help = "Examples:\n  agentledger --data ./ledger key generate --name ledger.example/l1\n  agentledger --data ./ledger key show"
    )]
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// Bearer tokens for the network face (serve --listen): issue, list,
    /// revoke.
    #[command(
        after_help = "Examples:\n  agentledger --data ./agentledger-demo token issue --principal auditor --expires 1h\n  agentledger --data ./agentledger-demo token list"
    )]
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Print the JSON Schema (2020-12) of every operation and its reply
    /// (what `schemas/ops.json` holds).
    #[command(after_help = "Examples:\n  agentledger schema > ops.json")]
    Schema,
    /// Serve a run's governed tools as an MCP server on stdin/stdout (logs
    /// on stderr), for agent frameworks that start MCP servers themselves;
    /// relayed with --token-file's token where a server owns the ledger.
    #[command(
        after_help = "Examples:\n  agentledger --data ./agentledger-demo mcp --run run-6313df716f9a1aab   # the demo's incident responder"
    )]
    Mcp(super::families::McpArgs),
    /// Play the seed scenarios end to end on a fresh data dir.
    #[command(after_help = "Examples:\n  agentledger demo\n  agentledger --data ./my-demo demo")]
    Demo {
        /// Where the demo keeps its data (wiped at start if a previous demo
        /// made it); `--data` names it too. Default: ./agentledger-demo.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// Default grace period of content sweeps, in seconds.
pub(super) const DEFAULT_GC_GRACE_SECS: u64 = 600;

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every subcommand and argument below `cmd` that says nothing of
    /// itself.
    fn silent(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                out.push(format!("{path}: argument {id} has no help"));
            }
        }
        for sub in cmd.get_subcommands() {
            let name = format!("{path} {}", sub.get_name());
            if sub.get_about().is_none() && sub.get_long_about().is_none() {
                out.push(format!("{name}: no description"));
            }
            silent(sub, &name, out);
        }
    }

    #[test]
    fn every_command_and_argument_says_what_it_is_for() {
        let mut out = Vec::new();
        silent(&Cli::command(), "agentledger", &mut out);
        assert!(out.is_empty(), "{}", out.join("\n"));
    }

    #[test]
    fn the_global_flags_are_grouped_by_what_they_are_for() {
        let cli = Cli::command();
        for arg in cli.get_arguments() {
            let name = arg.get_id().as_str();
            let heading = arg.get_help_heading();
            if name.starts_with("kafka") || name == "topic_prefix" {
                assert_eq!(heading, Some("Kafka"), "{name}");
            }
            if name.starts_with("seal") || name == "checkpoint_key" {
                assert_eq!(heading, Some("Keys and sealing"), "{name}");
            }
        }
    }
}
