//! The ledger as a network service (`serve --listen`): one thread owns the
//! engine and runs the serve loop ([`ledger`]); tokio and axum carry the
//! same protocol as `apply` over HTTP, WebSocket and SSE ([`http`]);
//! published events are followed by cursor ([`events`]); counters for
//! Prometheus ([`metrics`]); the log as C2SP tlog tiles ([`tlog`]); the
//! auditor's HTML pages ([`pages`]); spans exported live as runs close
//! ([`otlp`]).

mod access;
mod answer;
pub mod cluster;
pub mod events;
mod forward;
pub mod intake;
pub mod ledger;
mod ledger_thread;
mod locate;
mod mcp;
pub mod metrics;
mod operate;
mod ops;
pub mod otlp;
pub mod pages;
mod reads;
mod routes;
mod shares;
mod socket;
mod state;
mod streams;
mod tail;
pub mod tlog;
pub mod tls;
pub mod ws_frames;
mod ws_upgrade;

use crate::engine::Engine;
use crate::error::LedgerError;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use answer::status_of;
pub use ledger::{LoopOptions, Summary};
pub use routes::router;
pub use state::{AppState, HttpOptions};
pub use tls::{ClientIdentity, TlsError, TlsFiles};

/// The file in the data dir that names the address a running server
/// listens on; the CLI finds the server through it.
pub fn addr_file(data: &Path) -> PathBuf {
    data.join("serve.addr")
}

/// The file in the data dir that holds a running server's session token:
/// showing it as `Authorization: Bearer` makes a request the operator's.
/// Made anew at each start, readable only by the data dir's owner (who is
/// the operator anyway), removed at shutdown; the CLI uses it to go
/// through the server.
pub fn token_file(data: &Path) -> PathBuf {
    data.join("serve.token")
}

/// Why a server could not run: the ledger's failure, or a certificate
/// the listener cannot use.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// How a server stopped.
#[derive(Debug)]
pub enum Stopped {
    /// Everything finished: the ledger thread flushed and left.
    Cleanly(Summary),
    /// The shutdown timeout passed with the ledger thread (or the span
    /// exporter) still waiting, typically on Kafka brokers that are gone;
    /// the caller exits without it. What was acknowledged is in the log
    /// already: nothing is lost but the leaving itself.
    Late(Duration),
}

/// The process is to stop: `on_ready` once the engine has opened (say
/// what serves), `on_listening` with the bound address (port 0 picks
/// one), and within `shutdown_timeout` of `shutdown` being set, the
/// return.
pub struct Signals<'a> {
    pub shutdown: Arc<AtomicBool>,
    pub shutdown_timeout: Duration,
    pub on_ready: Box<dyn FnOnce() + 'a>,
    pub on_listening: Box<dyn FnOnce(&str) + 'a>,
}

/// Run the serve loop until `shutdown` is set; with `listen`, answer the
/// network too. Graceful: the listener closes first, requests in flight
/// are answered, then the engine is flushed, all within the shutdown
/// timeout; past it, [`Stopped::Late`] is returned without waiting more.
pub fn run(
    open: impl FnOnce() -> Result<Engine, LedgerError> + Send + 'static,
    loop_opts: LoopOptions,
    listen: Option<(SocketAddr, HttpOptions)>,
    data: &Path,
    signals: Signals<'_>,
) -> Result<Stopped, ServeError> {
    let Signals {
        shutdown,
        shutdown_timeout,
        on_ready,
        on_listening,
    } = signals;
    let metrics = Arc::new(metrics::Metrics::new());
    let stop_ledger = Arc::new(AtomicBool::new(false));
    let exporter = loop_opts.otlp.clone();
    let poll = loop_opts.poll;
    let (handle, thread) = ledger_thread::start(open, loop_opts, metrics, stop_ledger.clone())?;
    on_ready();
    let stop_otlp = Arc::new(AtomicBool::new(false));
    let otlp = exporter.map(|e| otlp::follow(handle.clone(), e, poll, stop_otlp.clone()));
    let stop_at = Arc::new(std::sync::OnceLock::new());
    let served = match listen {
        None => {
            while !shutdown.load(Ordering::SeqCst) && !thread.is_finished() {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = stop_at.set(std::time::Instant::now());
            drop(handle);
            Ok(())
        }
        Some((addr, opts)) => listen_until(
            handle,
            addr,
            opts,
            data,
            Until {
                shutdown,
                stop_at: stop_at.clone(),
                // The ledger thread's flush comes after the connections:
                // a part of the time is kept for it.
                grace: shutdown_timeout - (shutdown_timeout / 4).min(Duration::from_secs(1)),
            },
            on_listening,
        ),
    };
    let deadline = *stop_at.get_or_init(std::time::Instant::now) + shutdown_timeout;
    // The exporter's last look needs the ledger thread: stop it first.
    stop_otlp.store(true, Ordering::SeqCst);
    if let Some(t) = otlp {
        if !finished_by(&t, deadline) {
            return Ok(Stopped::Late(shutdown_timeout));
        }
        let _ = t.join();
    }
    stop_ledger.store(true, Ordering::SeqCst);
    if !finished_by(&thread, deadline) {
        tracing::warn!(
            "the ledger thread did not finish within the shutdown timeout ({} ms); leaving without it",
            shutdown_timeout.as_millis()
        );
        return Ok(Stopped::Late(shutdown_timeout));
    }
    let summary = thread
        .join()
        .map_err(|_| LedgerError::Internal("the ledger thread panicked"))??;
    served?;
    Ok(Stopped::Cleanly(summary))
}

/// Whether `thread` finishes before `deadline`.
fn finished_by<T>(thread: &std::thread::JoinHandle<T>, deadline: std::time::Instant) -> bool {
    while !thread.is_finished() {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// When the listener stops: `shutdown` set (its moment kept in
/// `stop_at`), connections then given `grace` to finish.
struct Until {
    shutdown: Arc<AtomicBool>,
    stop_at: Arc<std::sync::OnceLock<std::time::Instant>>,
    grace: Duration,
}

fn listen_until(
    handle: ledger::LedgerHandle,
    addr: SocketAddr,
    opts: HttpOptions,
    data: &Path,
    until: Until,
    on_listening: impl FnOnce(&str),
) -> Result<(), ServeError> {
    let Until {
        shutdown,
        stop_at,
        grace,
    } = until;
    // A certificate that cannot be used is said before anything listens.
    let tls = match &opts.tls {
        Some(files) => Some(tls::server_config(files)?),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("agentledger-http")
        .build()
        .map_err(|e| LedgerError::io("starting the async runtime", e))?;
    let (stopping, stopping_rx) = tokio::sync::watch::channel(false);
    // The ledger thread ended on its own (it failed): stop serving too.
    let ledger_ended = handle.ended.clone();
    let session = crate::auth::tokens::generate().map_err(|e| {
        LedgerError::io(
            "making the session token",
            std::io::Error::other(e.to_string()),
        )
    })?;
    let token_path = token_file(data);
    // A fresh file, so that it is created 0600 whatever was there before.
    let _ = std::fs::remove_file(&token_path);
    crate::log::private_files::write(&token_path, format!("{session}\n"))
        .map_err(|e| LedgerError::io(format!("writing {}", token_path.display()), e))?;
    let mut opts = opts;
    // Answers must be out before connections are closed.
    opts.stop_answering_after = grace - (grace / 4).min(Duration::from_millis(500));
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| LedgerError::io(format!("listening on {addr}"), e))?;
        let bound = listener
            .local_addr()
            .map_err(|e| LedgerError::io("reading the bound address", e))?;
        // The address it listens on is a name it is reached by (a wildcard
        // address is not: those names come from --allowed-host).
        if !bound.ip().is_unspecified() {
            opts.allowed_hosts.push(bound.ip().to_string());
        }
        // So is the name the other instances reach it by: they forward
        // MCP requests there.
        if let Some(host) = opts
            .advertise
            .as_deref()
            .and_then(|a| reqwest::Url::parse(a).ok())
            .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_string()))
        {
            opts.allowed_hosts.push(host);
        }
        let url = format!("{}://{bound}", if tls.is_some() { "https" } else { "http" });
        handle
            .cluster
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .advertise = opts
            .advertise
            .clone()
            .or_else(|| (!bound.ip().is_unspecified()).then(|| url.clone()));
        let state = AppState::new(handle, opts, stopping_rx, &session);
        let file = addr_file(data);
        let tmp = file.with_extension("addr.tmp");
        crate::log::private_files::write(&tmp, format!("{url}\n"))
            .and_then(|_| std::fs::rename(&tmp, &file))
            .map_err(|e| LedgerError::io(format!("writing {}", file.display()), e))?;
        on_listening(&url);
        let app = router(state);
        let signal = {
            let stop_at = stop_at.clone();
            async move {
                while !shutdown.load(Ordering::SeqCst) && !ledger_ended.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let _ = stop_at.set(std::time::Instant::now());
                stopping.send_replace(true);
            }
        };
        let served = intake::serve(listener, app, signal, intake::max_connections(), tls, grace)
            .await
            .map_err(|e| LedgerError::io("serving HTTP", e));
        let _ = std::fs::remove_file(&file);
        served
    });
    let _ = std::fs::remove_file(&token_path);
    served?;
    // Streams and sockets still open end on their own (they watch
    // `stopping`); do not wait for them past the shutdown timeout.
    let left = stop_at.get().map_or(grace, |at| {
        (*at + grace).saturating_duration_since(std::time::Instant::now())
    });
    runtime.shutdown_timeout(left.min(Duration::from_secs(1)));
    Ok(())
}
