//! Long-running commands: `serve` (projector, dispatcher and checkpoints in
//! a loop) and `subscribe` (follow the `published` topic as JSON lines).

use super::args::Cli;
use agentledger::error::LedgerError;
use agentledger::model::Topic;
use anyhow::{bail, Context, Result};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Set on SIGINT/SIGTERM: long-running commands finish the step they are in
/// and exit cleanly.
pub fn shutdown_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    if let Err(e) = ctrlc::set_handler(move || f.store(true, Ordering::SeqCst)) {
        tracing::warn!("cannot install the signal handler: {e}; stop with SIGKILL");
    }
    flag
}

/// What `serve` is told on the command line.
pub struct ServeOptions {
    pub group: String,
    pub poll: Duration,
    pub gc_interval: Duration,
    pub gc_grace: Duration,
    pub checkpoint_every: Duration,
    /// On Kafka: how long the views of a partition not owned are kept.
    pub drop_views_after: Duration,
    pub otlp_endpoint: Option<String>,
    pub dispatch: bool,
    pub listen: Option<std::net::SocketAddr>,
    pub http: agentledger::server::HttpOptions,
    /// From SIGTERM to exit, at most.
    pub shutdown_timeout: Duration,
}

/// The engine `serve` opens, on its own thread.
fn opener(
    cli: &Cli,
    drop_views_after: Duration,
) -> Result<impl FnOnce() -> Result<agentledger::Engine, LedgerError> + Send + 'static> {
    let data = cli.data.clone();
    let kafka = super::open::kafka_config(cli)?;
    let mut opts = super::open::options(cli)?;
    // On Kafka the instances share the ledger partitions (a group): each
    // projects its own only.
    opts.scoped = kafka.is_some();
    opts.drop_views_after = drop_views_after;
    Ok(move || match kafka {
        Some(k) => agentledger::Engine::open_kafka(&data, &k, opts),
        None => agentledger::Engine::open_embedded(&data, opts),
    })
}

pub fn serve(cli: &Cli, opts: &ServeOptions, shutdown: Arc<AtomicBool>) -> Result<i32> {
    // A collector URL that cannot be used is said before anything starts.
    let otlp = match &opts.otlp_endpoint {
        Some(url) => {
            let e = agentledger::trace::otlp::LiveExporter::new(
                url,
                super::open::options(cli)?.ledger_name(),
                Duration::from_secs(10),
            )?;
            eprintln!(
                "agentledger: exporting runs as OpenTelemetry spans to {} as they close",
                e.endpoint()
            );
            Some(Arc::new(e))
        }
        None => None,
    };
    let loop_opts = agentledger::server::LoopOptions {
        otlp,
        dispatch: opts.dispatch,
        group: opts.group.clone(),
        poll: opts.poll,
        gc_interval: opts.gc_interval,
        gc_grace: opts.gc_grace,
        checkpoint_every: opts.checkpoint_every,
        say: Arc::new(|what: &str| eprintln!("agentledger: {what}")),
    };
    let where_ = match &cli.kafka.brokers {
        Some(k) => format!("the ledger on Kafka at {k}"),
        None => format!("the ledger in {}", cli.data.display()),
    };
    let stopped = agentledger::server::run(
        opener(cli, opts.drop_views_after)?,
        loop_opts,
        opts.listen.map(|a| (a, opts.http.clone())),
        &cli.data,
        agentledger::server::Signals {
            shutdown,
            shutdown_timeout: opts.shutdown_timeout,
            // Said once the data dir is ours (another server may hold it).
            on_ready: Box::new(|| {
                eprintln!("agentledger serving {where_}; stop with ctrl-c or SIGTERM")
            }),
            on_listening: Box::new(|url| eprintln!("agentledger: listening on {url}")),
        },
    )
    .with_context(|| format!("serving {where_}"))?;
    match stopped {
        agentledger::server::Stopped::Cleanly(summary) => {
            eprintln!(
                "agentledger: stopped cleanly ({} finished runs dispatched, {} listeners opened, {} operations answered)",
                summary.dispatched_runs, summary.opened, summary.ops
            );
            Ok(0)
        }
        agentledger::server::Stopped::Late(waited) => {
            eprintln!(
                "agentledger: stopped without finishing: the ledger did not finish within --shutdown-timeout {} s (is its log reachable?); what was acknowledged is in the log, nothing else was",
                waited.as_secs_f64()
            );
            Ok(2)
        }
    }
}

/// Follow the `published` topic, one JSON object per line on stdout.
pub fn subscribe(
    cli: &Cli,
    from_beginning: bool,
    max: Option<u64>,
    idle_exit: Option<Duration>,
    shutdown: Arc<AtomicBool>,
) -> Result<i32> {
    let engine = super::open::open_engine_read_only(cli)?;
    let log = engine.log().clone();
    let parts = log.partitions(Topic::Published);
    if parts == 0 {
        bail!("the log has no published topic");
    }
    let mut next: Vec<u64> = (0..parts)
        .map(|p| {
            if from_beginning {
                Ok(0)
            } else {
                log.end_offset(Topic::Published, p)
            }
        })
        .collect::<Result<_, _>>()?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut printed = 0u64;
    let mut idle_since = Instant::now();
    while !shutdown.load(Ordering::SeqCst) {
        let mut got = false;
        for p in 0..parts {
            for r in log.read(Topic::Published, p, next[p as usize], 512)? {
                out.write_all(&r.payload)?;
                out.write_all(b"\n")?;
                next[p as usize] = r.offset + 1;
                printed += 1;
                got = true;
                if max.is_some_and(|m| printed >= m) {
                    out.flush()?;
                    return Ok(0);
                }
            }
        }
        out.flush()?;
        if got {
            idle_since = Instant::now();
            continue;
        }
        if idle_exit.is_some_and(|d| idle_since.elapsed() >= d) {
            break;
        }
        // Wait on the first partition's tail; others are polled on wake.
        log.wait_beyond(Topic::Published, 0, next[0], Duration::from_millis(200))?;
    }
    Ok(0)
}
