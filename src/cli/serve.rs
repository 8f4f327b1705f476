//! Long-running commands: `serve` (projector, dispatcher and checkpoints in
//! a loop) and `subscribe` (follow the `published` topic as JSON lines).

use super::{open_engine, Cli};
use agentledger::log::Topic;
use anyhow::{bail, Result};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which ledger partitions an instance dispatches: `i/n` owns every
/// partition `p` with `p % n == i`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    pub index: u32,
    pub of: u32,
}

impl std::str::FromStr for Share {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (i, n) = s.split_once('/').ok_or("expected INDEX/COUNT, e.g. 0/2")?;
        let index: u32 = i.parse().map_err(|_| format!("{i:?} is not a number"))?;
        let of: u32 = n.parse().map_err(|_| format!("{n:?} is not a number"))?;
        if of == 0 || index >= of {
            return Err(format!("{s}: need 0 <= INDEX < COUNT"));
        }
        Ok(Share { index, of })
    }
}

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

pub fn serve(
    cli: &Cli,
    share: Option<Share>,
    poll: Duration,
    shutdown: Arc<AtomicBool>,
) -> Result<i32> {
    let mut engine = open_engine(cli)?;
    let owned = move |p: u32| share.is_none_or(|s| p % s.of == s.index);
    eprintln!(
        "agentledger serving {} ({}); stop with ctrl-c or SIGTERM",
        engine.log().describe(),
        match share {
            Some(s) => format!("dispatching ledger partitions p % {} == {}", s.of, s.index),
            None => "dispatching every ledger partition".into(),
        }
    );
    let mut last_report = Instant::now();
    let (mut opened, mut walked) = (0u64, 0u64);
    while !shutdown.load(Ordering::SeqCst) {
        engine.catch_up(&|_| {})?;
        let a = engine.dispatch_partitions(&owned)?;
        engine.checkpoint(false)?;
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
    let engine = open_engine(cli)?;
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
