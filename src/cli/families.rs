//! The subcommands of the command families (`proof`, `key`, `token`) and
//! the arguments of `mcp`. Holds no behaviour.

use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum ProofCommand {
    /// The inclusion proof of the record at OFFSET.
    Inclusion {
        /// The record's offset in the partition (its leaf index).
        offset: u64,
    },
    /// The consistency proof from the tree of OLD records.
    Consistency {
        /// The size of the older tree, in records.
        old: u64,
    },
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
        /// The key file to show (default: the checkpoint key's place, or
        /// <data>/witness.key with --witness).
        #[arg(long)]
        key_file: Option<PathBuf>,
        /// Show the seal key's fingerprint (never the key): the same on
        /// every instance that shares task keys.
        #[arg(long, conflicts_with_all = ["witness", "key_file"])]
        seal: bool,
    },
}

#[derive(Subcommand)]
pub enum TokenCommand {
    /// Make a token for a principal and print it once (stdout; what it
    /// grants goes to stderr). The ledger keeps only its SHA-256.
    Issue {
        /// operator, platform:NAME, agent:NAME, auditor or consumer.
        #[arg(long)]
        principal: String,
        /// A scope granted (platforms need one; limits a consumer's
        /// events). Repeatable.
        #[arg(long = "scope", value_name = "SCOPE")]
        scopes: Vec<String>,
        /// How long it authenticates: e.g. 3600s, 90m, 12h, 30d; never
        /// expires without it.
        #[arg(long)]
        expires: Option<String>,
    },
    /// Every token issued: id, principal, scopes, state (never a token).
    List,
    /// Withdraw a token by its id (as `list` shows it); every instance
    /// refuses it once it has caught up (its staleness bound).
    Revoke {
        /// The token's id, `tok_…` (never the token itself).
        id: String,
    },
}

#[derive(Args)]
pub struct McpArgs {
    /// The run whose tools are served: its agent reads what the run's
    /// trigger event exposes, by name, and closes it.
    #[arg(long)]
    pub run: String,
}
