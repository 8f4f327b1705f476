//! What every route shares: the limits of the network face
//! (`HttpOptions`) and the state handed to each handler (`AppState`): the
//! ledger's handle, the caller shares and body budget, and whether the
//! server is stopping.

use super::ledger::{Gone, LedgerHandle};
use super::shares::Shares;
use crate::auth::assertion::ClusterKey;
use crate::auth::{jwt, tokens};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Semaphore};

/// Limits of the network face.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Largest request body (and WebSocket message): the line limit.
    pub max_body: usize,
    /// Longest wait for an answer before `504 timeout`.
    pub timeout: Duration,
    /// Requests answered at once; past it `503 overloaded` with
    /// `Retry-After`.
    pub max_in_flight: usize,
    /// Of those, what one caller may have answered at once.
    pub max_in_flight_per_caller: usize,
    /// Event streams (SSE, subscribed sockets) followed at once; past it
    /// `503 overloaded`.
    pub max_streams: usize,
    /// Of those, what one caller may follow at once.
    pub max_streams_per_caller: usize,
    /// Serve HTTPS with this certificate and key.
    pub tls: Option<super::TlsFiles>,
    /// Accept JWTs from this identity provider besides the ledger's own
    /// tokens.
    pub jwt: Option<Arc<jwt::JwtConfig>>,
    /// Bytes all request bodies in flight (and WebSocket messages being
    /// assembled) may hold together; past it `503 overloaded`. At least
    /// `max_body`.
    pub body_budget: usize,
    /// Once the server stops, how long a request may still wait for the
    /// ledger's answer before it is answered 503 `shutting_down` (set
    /// from `--shutdown-timeout`, within the time connections get).
    pub stop_answering_after: Duration,
    /// Keep cosignatures only of these witnesses (each verified); none
    /// given: any well-formed line, within a bound per checkpoint.
    pub witnesses: Vec<crate::audit::note::VerifierKey>,
    /// Names the MCP endpoints answer in the Host header besides loopback
    /// ones (DNS-rebinding protection): the bound address, and the names
    /// the server is reached by (`--allowed-host`).
    pub allowed_hosts: Vec<String>,
    /// Where the other instances reach this one (`--advertise`); by
    /// default the address it listens on, unless a wildcard.
    pub advertise: Option<String>,
    /// The secret the instances of a cluster share: a caller whose
    /// credential cannot be passed on is forwarded with an assertion
    /// made with it (`auth::assertion`), and such assertions are accepted.
    pub cluster_key: Option<Arc<ClusterKey>>,
    /// Trusted besides the system's roots when forwarding to another
    /// instance over HTTPS (`--tls-ca`).
    pub peer_ca: Option<reqwest::Certificate>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            max_body: crate::model::limits::MAX_LINE_BYTES,
            timeout: Duration::from_secs(30),
            max_in_flight: 256,
            max_in_flight_per_caller: 128,
            max_streams: crate::model::limits::MAX_STREAMS,
            max_streams_per_caller: crate::model::limits::MAX_STREAMS / 2,
            body_budget: crate::model::limits::BODY_BUDGET_BYTES,
            stop_answering_after: Duration::from_secs(3),
            tls: None,
            jwt: None,
            witnesses: Vec::new(),
            allowed_hosts: Vec::new(),
            advertise: None,
            cluster_key: None,
            peer_ca: None,
        }
    }
}

/// What every request handler shares. Cloned for each request by every
/// layer that takes it (axum's `State`), so it is one pointer: cloning the
/// fields themselves (a channel sender, a watch receiver, six `Arc`s) per
/// layer per request was measurable at 64 clients.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

pub struct Shared {
    pub(super) ledger: LedgerHandle,
    /// SHA-256 of this server's session token: whoever shows it is the
    /// operator (it is written into the data dir, readable only by the
    /// data dir's owner).
    pub(super) session: [u8; 32],
    /// Requests being answered (`--max-in-flight`), shared by caller.
    pub(super) slots: Shares,
    /// One permit a byte of `body_budget`: held by each body being read.
    pub(super) bodies: Arc<Semaphore>,
    /// Ledger tokens the ledger thread vouched for lately: a body is read
    /// only for a caller known to be one, and asking the ledger thread
    /// before every body would double its work.
    pub(super) vouched:
        Arc<std::sync::Mutex<std::collections::HashMap<[u8; 32], std::time::Instant>>>,
    pub(super) opts: Arc<HttpOptions>,
    /// Set when the server shuts down: streams end, sockets close.
    pub(super) stopping: watch::Receiver<bool>,
    /// Event streams followed at once, shared by caller.
    pub(super) streams: Shares,
    /// How requests are forwarded to other instances: no redirects
    /// followed, `--tls-ca` trusted.
    pub(super) peers: reqwest::Client,
}

impl AppState {
    /// `session_token` authenticates as the operator (see
    /// [`crate::server::token_file`]); every other bearer token is looked
    /// up in the views.
    pub fn new(
        ledger: LedgerHandle,
        opts: HttpOptions,
        stopping: watch::Receiver<bool>,
        session_token: &str,
    ) -> Self {
        AppState(Arc::new(Shared {
            ledger,
            session: tokens::hash(session_token),
            slots: Shares::new(opts.max_in_flight, opts.max_in_flight_per_caller),
            streams: Shares::new(opts.max_streams, opts.max_streams_per_caller),
            bodies: Arc::new(Semaphore::new(opts.body_budget.max(opts.max_body))),
            vouched: Arc::default(),
            peers: peer_client(opts.peer_ca.as_ref()),
            opts: Arc::new(opts),
            stopping,
        }))
    }
}

/// The client instances forward with: no redirects followed, the
/// request timeout applied per request.
fn peer_client(ca: Option<&reqwest::Certificate>) -> reqwest::Client {
    let mut b = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    if let Some(ca) = ca {
        b = b.add_root_certificate(ca.clone());
    }
    b.build().unwrap_or_else(|e| {
        tracing::warn!(
            "the forwarding client could not be built as configured ({e}); using the default"
        );
        reqwest::Client::new()
    })
}

impl AppState {
    /// Whether the server is stopping.
    pub(super) fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Resolves once the server stops (or whoever would say so is gone).
    pub(super) async fn stopped(&self) {
        let mut stopping = self.stopping.clone();
        let _ = stopping.wait_for(|stopping| *stopping).await;
    }

    /// `call` within the request timeout (else `Err`, answered `timeout`)
    /// and, once the server stops, within the time kept for answers (else
    /// `Gone`, answered 503 `shutting_down`): a ledger that cannot finish
    /// (Kafka gone) does not leave requests to be cut off unanswered.
    pub(super) async fn in_time<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, Gone>>,
    ) -> Result<Result<T, Gone>, tokio::time::error::Elapsed> {
        let cut = async {
            self.stopped().await;
            tokio::time::sleep(self.opts.stop_answering_after).await;
        };
        tokio::select! {
            r = tokio::time::timeout(self.opts.timeout, call) => r,
            () = cut => Ok(Err(Gone)),
        }
    }
}
