//! The ledger as a network service (`serve --listen`): one thread owns the
//! engine and runs the serve loop ([`ledger`]); tokio and axum carry the
//! same protocol as `apply` over HTTP, WebSocket and SSE ([`http`]);
//! published events are followed by cursor ([`events`]); counters for
//! Prometheus ([`metrics`]); the log as C2SP tlog tiles ([`tlog`]); the
//! auditor's HTML pages ([`pages`]); spans exported live as runs close
//! ([`otlp`]).

pub mod events;
pub mod http;
pub mod intake;
pub mod ledger;
pub mod metrics;
pub mod otlp;
pub mod pages;
mod shares;
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

pub use http::HttpOptions;
pub use ledger::{LoopOptions, Summary};
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

/// Run the serve loop until `shutdown` is set; with `listen`, answer the
/// network too. `on_listening` is told the bound address (port 0 picks
/// one). Graceful: the listener closes first, requests in flight are
/// answered, then the engine is flushed.
pub fn run(
    open: impl FnOnce() -> Result<Engine, LedgerError> + Send + 'static,
    loop_opts: LoopOptions,
    listen: Option<(SocketAddr, HttpOptions)>,
    data: &Path,
    shutdown: Arc<AtomicBool>,
    on_listening: impl FnOnce(&str),
) -> Result<Summary, LedgerError> {
    let metrics = Arc::new(metrics::Metrics::new());
    let stop_ledger = Arc::new(AtomicBool::new(false));
    let exporter = loop_opts.otlp.clone();
    let poll = loop_opts.poll;
    let (handle, thread) = ledger::start(open, loop_opts, metrics, stop_ledger.clone())?;
    let stop_otlp = Arc::new(AtomicBool::new(false));
    let otlp = exporter.map(|e| otlp::follow(handle.clone(), e, poll, stop_otlp.clone()));
    let served = match listen {
        None => {
            while !shutdown.load(Ordering::SeqCst) && !thread.is_finished() {
                std::thread::sleep(Duration::from_millis(50));
            }
            drop(handle);
            Ok(())
        }
        Some((addr, opts)) => listen_until(handle, addr, opts, data, shutdown, on_listening),
    };
    // The exporter's last look needs the ledger thread: stop it first.
    stop_otlp.store(true, Ordering::SeqCst);
    if let Some(t) = otlp {
        let _ = t.join();
    }
    stop_ledger.store(true, Ordering::SeqCst);
    let summary = thread
        .join()
        .map_err(|_| LedgerError::Internal("the ledger thread panicked"))??;
    served?;
    Ok(summary)
}

fn listen_until(
    handle: ledger::LedgerHandle,
    addr: SocketAddr,
    opts: HttpOptions,
    data: &Path,
    shutdown: Arc<AtomicBool>,
    on_listening: impl FnOnce(&str),
) -> Result<(), LedgerError> {
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
    let stopping = Arc::new(AtomicBool::new(false));
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
    crate::private_files::write(&token_path, format!("{session}\n"))
        .map_err(|e| LedgerError::io(format!("writing {}", token_path.display()), e))?;
    let state = http::AppState::new(handle, opts, stopping.clone(), &session);
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| LedgerError::io(format!("listening on {addr}"), e))?;
        let bound = listener
            .local_addr()
            .map_err(|e| LedgerError::io("reading the bound address", e))?;
        let file = addr_file(data);
        let tmp = file.with_extension("addr.tmp");
        let url = format!("{}://{bound}", if tls.is_some() { "https" } else { "http" });
        crate::private_files::write(&tmp, format!("{url}\n"))
            .and_then(|_| std::fs::rename(&tmp, &file))
            .map_err(|e| LedgerError::io(format!("writing {}", file.display()), e))?;
        on_listening(&url);
        let app = http::router(state);
        let signal = {
            let stopping = stopping.clone();
            async move {
                while !shutdown.load(Ordering::SeqCst) && !ledger_ended.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                stopping.store(true, Ordering::SeqCst);
            }
        };
        let served = intake::serve(listener, app, signal, intake::max_connections(), tls)
            .await
            .map_err(|e| LedgerError::io("serving HTTP", e));
        let _ = std::fs::remove_file(&file);
        served
    });
    let _ = std::fs::remove_file(&token_path);
    served?;
    // Streams and sockets still open end on their own (they watch
    // `stopping`); do not wait for them.
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}
