//! Long-running commands: `serve` (projector, dispatcher and checkpoints in
//! a loop) and `subscribe` (follow the `published` topic as JSON lines).

use super::{open_engine, Cli};
use agentledger::error::LedgerError;
use agentledger::log::Topic;
use anyhow::{bail, Result};
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
}

pub fn serve(cli: &Cli, opts: &ServeOptions, shutdown: Arc<AtomicBool>) -> Result<i32> {
    let poll = opts.poll;
    let mut engine = open_engine(cli)?;
    let mut member = engine.log().join(&opts.group)?;
    let mut last_sweep: Option<Instant> = None;
    eprintln!(
        "agentledger serving {} as {}; stop with ctrl-c or SIGTERM",
        engine.log().describe(),
        member.describe()
    );
    let mut last_report = Instant::now();
    let (mut opened, mut walked) = (0u64, 0u64);
    let mut owned_before = None;
    while !shutdown.load(Ordering::SeqCst) {
        let owned = member.owned()?;
        if owned_before.as_ref() != Some(&owned) {
            eprintln!(
                "agentledger: dispatching ledger partitions {:?}",
                owned.iter().collect::<Vec<_>>()
            );
            owned_before = Some(owned.clone());
        }
        engine.catch_up(&|_| {})?;
        let a = match engine.dispatch_partitions(&|p| owned.contains(&p)) {
            Ok(a) => a,
            // Another instance dispatched the same run first (this one was
            // too slow to notice its partition had moved): its records
            // stand, ours were kept out of the views. Carry on.
            Err(LedgerError::Refused(r)) if r.code == agentledger::codes::Code::Conflict => {
                tracing::warn!("{}", r.message);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        engine.checkpoint(false)?;
        if last_sweep.is_none_or(|t| t.elapsed() >= opts.gc_interval) {
            match engine.sweep_content(opts.gc_grace) {
                Ok(r) if r.removed > 0 => tracing::info!(
                    removed = r.removed,
                    bytes = r.removed_bytes,
                    "content no live reference holds was removed"
                ),
                Ok(_) => {}
                Err(e) => tracing::warn!("sweeping the content store: {e}"),
            }
            last_sweep = Some(Instant::now());
        }
        opened += a.opened.len() as u64;
        walked += a.dispatched_runs;
        if a.dispatched_runs == 0 {
            std::thread::sleep(poll);
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            tracing::info!(opened, dispatched_runs = walked, "serve progress");
            last_report = Instant::now();
        }
    }
    drop(member);
    engine.flush()?;
    eprintln!("agentledger: stopped cleanly ({walked} finished runs dispatched, {opened} listeners opened)");
    Ok(0)
}

/// Follow the `published` topic, one JSON object per line on stdout.
pub fn subscribe(
    cli: &Cli,
    from_beginning: bool,
    max: Option<u64>,
    idle_exit: Option<Duration>,
    shutdown: Arc<AtomicBool>,
) -> Result<i32> {
    let engine = super::open_engine_read_only(cli)?;
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
