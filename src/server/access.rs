//! Who a request comes from and what it may do, at the edge: the bearer
//! credential or client certificate (`Asked`), the session token, tokens
//! the ledger thread vouched for, the policy asked on the ledger thread,
//! and the per-caller slots a request is answered in.

use super::answer::{failure_response, gone, timed_out, timeout_failure};
use super::ledger::{grant_of, Caller, Gone};
use super::shares::{Full, Slot};
use super::state::AppState;
use super::tls::ClientIdentity;
use crate::auth::{assertion, authorize, jwt, tokens, Action, Facts, Subject};
use crate::codes::Code;
use crate::protocol::Failure;
use crate::queries::{self, Query};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// Who a request comes from, by its `Authorization: Bearer` header: the
/// operator when it shows the session token, else a token the ledger
/// thread looks up. No header, or not a bearer one: 401.
pub(super) fn caller(s: &AppState, asked: &Asked) -> Result<Caller, Failure> {
    if let Some(assertion) = asked.get(assertion::HEADER) {
        return asserted(s, asked, assertion);
    }
    let value = asked
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or(""));
    let unauthenticated =
        |u: crate::auth::Unauthenticated| Failure::new(Code::Unauthenticated, u.0);
    // A bearer token speaks for this request; a client certificate for
    // every request of its connection that shows none.
    if let (None, Some(ClientIdentity(identity))) = (value, &asked.client) {
        return identity
            .clone()
            .map(|(grant, lapses)| Caller::Granted(grant, lapses))
            .map_err(unauthenticated);
    }
    let token = tokens::bearer_token(value).map_err(unauthenticated)?;
    if let Some(jwt) = s.opts.jwt.as_ref().filter(|_| jwt::looks_like_jwt(token)) {
        let (grant, lapses) = jwt.verify_until(token).map_err(unauthenticated)?;
        return Ok(Caller::Granted(Arc::new(grant), Some(lapses)));
    }
    match tokens::hash(token) {
        sha if same_secret(&sha, &s.session) => Ok(Caller::Operator),
        sha => Ok(Caller::Token(sha)),
    }
}

/// The caller another instance vouched for, forwarding its request here
/// (see `auth::assertion`): taken only on a forwarded request, with this
/// instance's `--cluster-key`, for the path asked.
fn asserted(s: &AppState, asked: &Asked, value: &HeaderValue) -> Result<Caller, Failure> {
    let refused = |why: String| Failure::new(Code::Unauthenticated, why);
    let Some(key) = s.opts.cluster_key.as_deref() else {
        return Err(refused(
            "a cluster assertion was shown, but this instance has no --cluster-key; give every instance of the cluster the same one".into(),
        ));
    };
    if !super::forward::is_forwarded(asked) {
        return Err(refused(
            "a cluster assertion is taken only on a request another instance forwarded".into(),
        ));
    }
    let a = assertion::verify(
        key,
        value.to_str().unwrap_or(""),
        asked.target(),
        super::ledger::wall_clock_ms(),
    )
    .map_err(|u| refused(u.0))?;
    Ok(match a.grant.principal {
        crate::auth::Principal::Operator => Caller::Operator,
        _ => Caller::Granted(Arc::new(a.grant), a.lapses),
    })
}

/// Whether a forwarded request's body is the one its assertion was made
/// for (a request without an assertion: yes).
pub(super) fn body_asserted(s: &AppState, asked: &Asked, body: &[u8]) -> Result<(), Failure> {
    let (Some(value), Some(key)) = (asked.get(assertion::HEADER), s.opts.cluster_key.as_deref())
    else {
        return Ok(());
    };
    let a = assertion::verify(
        key,
        value.to_str().unwrap_or(""),
        asked.target(),
        super::ledger::wall_clock_ms(),
    )
    .map_err(|u| Failure::new(Code::Unauthenticated, u.0))?;
    if a.body == assertion::body_digest(body) {
        Ok(())
    } else {
        Err(Failure::new(
            Code::Unauthenticated,
            "the cluster assertion was made for another body",
        ))
    }
}

/// How long the ledger thread's word that a token is valid is taken at
/// the edge before a body is read (the operation is authenticated on the
/// ledger thread again whatever this says).
pub(super) const VOUCHED_FOR: Duration = Duration::from_secs(1);

/// Ledger tokens remembered as vouched for, at most.
pub(super) const VOUCHED_MAX: usize = 4096;

/// Who sends a request, from its headers alone: refused `unauthenticated`
/// before its body is read unless its credential is one the ledger
/// accepts (a JWT or client certificate that verified, the session token,
/// or a ledger token the ledger thread knows and has not revoked).
pub(super) async fn vouch(s: &AppState, asked: &Asked) -> Result<(), Failure> {
    let sha = match caller(s, asked)? {
        Caller::Operator | Caller::Granted(..) => return Ok(()),
        Caller::Token(sha) => sha,
    };
    let fresh = |at: &std::time::Instant| at.elapsed() < VOUCHED_FOR;
    if s.vouched
        .lock()
        .map(|m| m.get(&sha).is_some_and(fresh))
        .unwrap_or(false)
    {
        return Ok(());
    }
    match ask_grant(s, Caller::Token(sha)).await {
        Ok(Ok(())) => {
            if let Ok(mut m) = s.vouched.lock() {
                if m.len() >= VOUCHED_MAX {
                    m.retain(|_, at| fresh(at));
                }
                if m.len() < VOUCHED_MAX {
                    m.insert(sha, std::time::Instant::now());
                }
            }
            Ok(())
        }
        Ok(Err(f)) => Err(f),
        Err(unanswered) => Err(unanswered),
    }
}

/// Whether the ledger thread grants `caller` anything, within the
/// request timeout: the outer error says it did not answer (shutting
/// down, or too slow).
pub(super) async fn ask_grant(
    s: &AppState,
    caller: Caller,
) -> Result<Result<(), Failure>, Failure> {
    let call = s
        .ledger
        .call(move |engine| grant_of(engine, &caller).map(|_| ()));
    match s.in_time(call).await {
        Ok(Ok(granted)) => Ok(granted),
        Ok(Err(Gone)) => Err(Failure::new(Code::ShuttingDown, Gone.to_string())),
        Err(_) => Err(Failure::new(
            Code::Timeout,
            format!("no answer within {} ms", s.opts.timeout.as_millis()),
        )),
    }
}

/// Compare two hashes in time that does not depend on where they differ.
pub(super) fn same_secret(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// A request's headers and the principal its connection's client
/// certificate names (mTLS), if it showed one: what `caller` needs.
pub struct Asked {
    headers: HeaderMap,
    client: Option<ClientIdentity>,
    /// The path and query asked for (a read forwarded to the owner of its
    /// chain asks the same).
    uri: axum::http::Uri,
}

impl Asked {
    /// The request with HTTP Basic credentials read as a bearer token (the
    /// password; the user name is ignored): how a browser, challenged
    /// with Basic, shows the token.
    pub(super) fn basic_as_bearer(mut self) -> Asked {
        use base64::Engine as _;
        let token = self
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, rest) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("basic").then_some(rest.trim())
            })
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|up| up.split_once(':').map(|(_, p)| p.to_string()));
        if let Some(t) = token.and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok()) {
            self.headers.insert(header::AUTHORIZATION, t);
        }
        self
    }
}

impl Asked {
    /// The path and query of the request.
    pub(super) fn target(&self) -> &str {
        self.uri.path_and_query().map_or("/", |p| p.as_str())
    }
}

impl std::ops::Deref for Asked {
    type Target = HeaderMap;

    fn deref(&self) -> &HeaderMap {
        &self.headers
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Asked {
    type Rejection = Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Infallible> {
        Ok(Asked::of(parts))
    }
}

impl Asked {
    /// What `caller` needs of a request, from its head.
    pub(super) fn of(parts: &axum::http::request::Parts) -> Asked {
        Asked {
            uri: parts.uri.clone(),
            headers: parts.headers.clone(),
            client: parts
                .extensions
                .get::<Option<ClientIdentity>>()
                .cloned()
                .flatten(),
        }
    }
}

/// What a caller asks for beyond operations.
#[derive(Debug, Clone)]
pub(super) enum Permit {
    /// The read routes, `/metrics` and `/v1/verify`.
    Read,
    /// The published events, limited to a scope when given.
    Events(Option<String>),
}

/// Check on the ledger thread (where the tokens' views are) that `caller`
/// may do `what`: 401 for a token unknown, revoked or expired, 403 when
/// its principal may not.
pub(super) async fn permit(s: &AppState, caller: Caller, what: Permit) -> Result<(), Failure> {
    let call = s.ledger.call(move |engine| -> Result<(), Failure> {
        let grant = grant_of(engine, &caller)?;
        let action = match &what {
            Permit::Read => Action::Read(&Subject::Whole),
            Permit::Events(scope) => Action::Events {
                scope: scope.as_deref(),
            },
        };
        authorize(&grant, action, &Facts::default())
            .map_err(|f| Failure::new(Code::Forbidden, f.to_string()))
    });
    match s.in_time(call).await {
        Ok(Ok(result)) => result,
        Ok(Err(Gone)) => Err(Failure::new(Code::ShuttingDown, Gone.to_string())),
        Err(_) => Err(timeout_failure(s.opts.timeout)),
    }
}

/// `caller` and `permit` in one: the response to send instead when the
/// request may not go on.
pub(super) async fn admitted(
    s: &AppState,
    headers: &Asked,
    what: Permit,
) -> Result<Caller, Response> {
    let c = caller(s, headers).map_err(failure_response)?;
    permit(s, c.clone(), what).await.map_err(failure_response)?;
    Ok(c)
}

/// A slot for answering one request of `caller`, or the 503 that says
/// which bound it met.
pub(super) fn request_slot(s: &AppState, caller: &Caller) -> Result<Slot, Failure> {
    s.slots.take(caller.share().as_deref()).map_err(|full| {
        Failure::new(
            Code::Overloaded,
            match full {
                Full::All(max) => {
                    format!("the server is answering {max} requests already; retry shortly")
                }
                Full::Share(per) => format!(
                    "this caller has {per} requests being answered already (--max-in-flight-per-caller); retry shortly"
                ),
            },
        )
    })
}

/// Run `f` for a reader of the whole ledger in one job of the ledger
/// thread: the caller's token checked and its grant held to the policy
/// first, within a slot and the timeout.
pub(super) async fn read_job<T: Send + 'static>(
    s: &AppState,
    caller: Caller,
    f: impl FnOnce(&mut crate::engine::Engine) -> Result<T, Failure> + Send + 'static,
) -> Result<T, Response> {
    read_job_about(s, caller, |_| Ok(Subject::Whole), f).await
}

/// [`read_job`] for a read about what `subject` says (the scopes of the
/// runs, chain, agent or task it names), found on the ledger thread
/// before the policy decides.
pub(super) async fn read_job_about<T: Send + 'static>(
    s: &AppState,
    caller: Caller,
    subject: impl FnOnce(&crate::engine::Engine) -> Result<Subject, Failure> + Send + 'static,
    f: impl FnOnce(&mut crate::engine::Engine) -> Result<T, Failure> + Send + 'static,
) -> Result<T, Response> {
    let _slot = request_slot(s, &caller).map_err(failure_response)?;
    let call = s.ledger.call(move |engine| -> Result<T, Failure> {
        let grant = grant_of(engine, &caller)?;
        let subject = subject(engine)?;
        authorize(&grant, Action::Read(&subject), &Facts::default())
            .map_err(|f| Failure::new(Code::Forbidden, f.to_string()))?;
        f(engine)
    });
    match s.in_time(call).await {
        Ok(Ok(Ok(t))) => Ok(t),
        Ok(Ok(Err(f))) => Err(failure_response(f)),
        Ok(Err(Gone)) => Err(gone()),
        Err(_) => Err(timed_out(s.opts.timeout)),
    }
}

/// The subject of a question, for [`read_job_about`].
pub(super) fn subject_of(
    q: &Query,
) -> impl FnOnce(&crate::engine::Engine) -> Result<Subject, Failure> + Send + 'static {
    let q = q.clone();
    move |engine| queries::subject(engine, &q).map_err(|e| Failure::new(e.code(), e.to_string()))
}
