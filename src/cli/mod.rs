//! Command-line interface: global options, one file per command family.

/// `println!` that returns the write's error instead of panicking: a reader
/// that went away (`trail --json | head`) ends the command quietly.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

mod args;
mod audit;
mod demo;
mod families;
mod inspect;
mod kafka_args;
mod mcp;
mod mcp_relay;
mod open;
mod rebuild;
mod remote;
mod serve;
mod tokens;
mod values;
mod witness;

use agentledger::apply::{apply_stream_as, apply_stream_with};
use agentledger::queries::{PictureFormat, Query};
use anyhow::{Context, Result};
use args::{ActingAs, Cli, Command};
use clap::{CommandFactory, FromArgMatches};
use open::open_engine;
use rebuild::{gc, rebuild};
use std::io::{BufReader, Write};
use std::path::Path;

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

/// Exit codes: 0 ok, 1 something refused or malformed, 2 usage or IO.
pub fn run() -> i32 {
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m).map(|cli| (cli, m)));
    let cli = match parsed {
        Ok((mut cli, matches)) => {
            cli.data_given = data_given(&matches);
            cli
        }
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let demo_hint = !cli.data_given && demo::made(Path::new(demo::DEFAULT_DIR));
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
            use agentledger::{error::LedgerError, log::LogError};
            let nothing_here = e.chain().any(|c| {
                matches!(c.downcast_ref::<LogError>(), Some(LogError::NoLedger(_)))
                    || matches!(
                        c.downcast_ref::<LedgerError>(),
                        Some(LedgerError::Log(LogError::NoLedger(_)))
                    )
            });
            if nothing_here && demo_hint {
                eprintln!(
                    "agentledger: {}; the demo's ledger is in {dir}: give --data {dir}",
                    error_text(&e),
                    dir = demo::DEFAULT_DIR
                );
            } else {
                eprintln!("agentledger: {}", error_text(&e));
            }
            2
        }
    }
}

/// Whether `--data` was given on the command line or in the environment
/// (anywhere on the line: it is global), not left to its default.
fn data_given(matches: &clap::ArgMatches) -> bool {
    use clap::parser::ValueSource;
    let mut m = Some(matches);
    while let Some(here) = m {
        if matches!(
            here.value_source("data"),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            return true;
        }
        m = here.subcommand().map(|(_, sub)| sub);
    }
    false
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

/// Bytes `apply` reads ahead of the line it is on.
const APPLY_READ_AHEAD: usize = 1 << 20;

fn run_command(cli: Cli) -> Result<i32> {
    agentledger::model::ids::check_topic_prefix(&cli.kafka.topic_prefix)
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
            require_attested,
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
                require_attested: *require_attested,
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
        Command::Demo { dir } => {
            let dir = match (dir, cli.data_given) {
                (Some(d), true) if *d != cli.data => anyhow::bail!(
                    "demo: --dir {} and --data {} name two different dirs; give one",
                    d.display(),
                    cli.data.display()
                ),
                (Some(d), _) => d.clone(),
                (None, true) => cli.data.clone(),
                (None, false) => std::path::PathBuf::from(demo::DEFAULT_DIR),
            };
            demo::run(&dir)
        }
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
        Command::Mcp(a) => mcp::serve_stdio(&cli, &a.run),
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
            drop_views_after_secs,
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
            allowed_host,
            advertise,
            cluster_key,
        } => serve::serve(
            &cli,
            &serve::ServeOptions {
                group: group.clone(),
                poll: std::time::Duration::from_millis(*poll_ms),
                gc_interval: std::time::Duration::from_secs(*gc_interval_secs),
                gc_grace: std::time::Duration::from_secs(*gc_grace_secs),
                drop_views_after: std::time::Duration::from_secs(*drop_views_after_secs),
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
                    allowed_hosts: allowed_host.clone(),
                    advertise: advertise.clone(),
                    cluster_key: match cluster_key {
                        Some(file) => Some(std::sync::Arc::new(
                            agentledger::auth::assertion::ClusterKey::load(file)
                                .context("--cluster-key")?,
                        )),
                        None => None,
                    },
                    peer_ca: match &cli.tls_ca {
                        Some(ca) => Some(
                            std::fs::read(ca)
                                .ok()
                                .and_then(|pem| reqwest::Certificate::from_pem(&pem).ok())
                                .with_context(|| {
                                    format!("--tls-ca {}: not a readable PEM certificate", ca.display())
                                })?,
                        ),
                        None => None,
                    },
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
