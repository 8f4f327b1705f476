//! How a failure is answered over HTTP: the status of each code and the
//! JSON envelope, shared by every route.

use super::ledger::Gone;
use crate::codes::Code;
use crate::protocol::{Failure, Reply};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::time::Duration;

/// The HTTP status of a failure: 400 for requests that are not well
/// formed, 401 without a valid credential, 403 when the caller may not,
/// 409 when the ledger already holds what the request would create, 422
/// for other refusals, 413 over a size limit, 503 when the
/// log cannot be used (or the server is overloaded), 504 on timeout, 500
/// for damage.
pub fn status_of(code: Code) -> StatusCode {
    use Code::*;
    match code {
        MalformedJson | InvalidRequest | UnknownOp | InvalidName | InvalidScope | InvalidLabel => {
            StatusCode::BAD_REQUEST
        }
        LineTooLong | TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        RunExists | RunClosed | TaskExists | DuplicateSubtask | AlreadyReturned
        | AlreadyEvaluated | Conflict => StatusCode::CONFLICT,
        LogError | IoError | DataDirInUse | Overloaded | ShuttingDown | NotOwner => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        Timeout => StatusCode::GATEWAY_TIMEOUT,
        Unauthenticated => StatusCode::UNAUTHORIZED,
        Forbidden => StatusCode::FORBIDDEN,
        NotFound => StatusCode::NOT_FOUND,
        CorruptRecord | ViewError | ContentStoreError | InternalError | SchemaUnavailable => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

/// The header that carries the CLI's exit code for an answer.
pub const EXIT_HEADER: &str = "x-agentledger-exit";

/// Whether a failure with this code says to ask again in a moment
/// (answered with `Retry-After`).
pub(super) fn retryable(code: Code) -> bool {
    matches!(code, Code::Overloaded | Code::ShuttingDown | Code::NotOwner)
}

/// Tell the caller to ask again in a second.
pub(super) fn ask_again(r: &mut Response) {
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
}

/// One operation's reply as a JSON answer: the status its code maps to,
/// `Retry-After` when it says to ask again.
pub(super) fn reply_response(reply: &Reply) -> Response {
    let (status, retry) = match reply {
        Reply::Done(_) => (StatusCode::OK, false),
        Reply::Failed(f) => (status_of(f.error.code), retryable(f.error.code)),
    };
    let mut r = json_response(status, reply_text(reply));
    if retry {
        ask_again(&mut r);
    }
    r
}

pub(super) fn json_response(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

pub(super) fn failure_response(f: Failure) -> Response {
    let status = status_of(f.error.code);
    let retry = retryable(f.error.code);
    let challenge = f.error.code == Code::Unauthenticated;
    let mut r = json_response(
        status,
        serde_json::to_string(&f).expect("failures serialise"),
    );
    if retry {
        ask_again(&mut r);
    }
    if challenge {
        // RFC 6750: say which scheme would be accepted.
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"agentledger\""),
        );
    }
    r
}

pub(super) fn with_status(status: StatusCode, f: Failure) -> Response {
    let mut r = failure_response(f);
    *r.status_mut() = status;
    r
}

pub(super) fn gone() -> Response {
    failure_response(Failure::new(Code::ShuttingDown, Gone.to_string()))
}

pub(super) fn timeout_failure(after: Duration) -> Failure {
    Failure::new(
        Code::Timeout,
        format!(
            "no answer within {} ms; the operation may still be carried out — read the trail before retrying",
            after.as_millis()
        ),
    )
}

pub(super) fn timed_out(after: Duration) -> Response {
    failure_response(timeout_failure(after))
}

pub(super) fn reply_text(r: &Reply) -> String {
    serde_json::to_string(r).expect("replies serialise")
}
