//! Everything the proxy refuses or cannot do, and the one place it becomes an answer.
//!
//! `Problem` is the request path's error type, grouped by whose fault it is. `into_response`
//! turns it into an RFC 9457 `application/problem+json` answer (docs/reference.md section 6) with the
//! operation's headers when the operation is known. Its `detail` and `next` (what to do after
//! it) are `problem::words`.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Map, Value, json};

use crate::clock::Timestamp;
use crate::operation::State;
use crate::wire::{ProxyBody, full};

mod words;

/// Why a request was not (or not fully) carried out.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Problem {
    // The client's request cannot be routed or read.
    #[error("no provider is mounted at this path")]
    NoMount,
    #[error("no provider is configured for host {0}")]
    NoHost(String),
    #[error("this request matches no route of the provider, which rejects unmatched requests")]
    RouteNotAllowed,
    #[error("CONNECT is not supported")]
    ConnectNotSupported,
    #[error("the request body is over {limit} bytes")]
    BodyTooLarge { limit: u64 },
    #[error("{0}")]
    InvalidBody(String),
    #[error("no operation_id template applies")]
    MissingOperationId { missing: Vec<Vec<String>> },
    #[error("the operation ID is {len} bytes, over 512")]
    InvalidOperationId { len: usize },

    // The operation's state says no (or not yet).
    #[error("the operation was first made with other parameters")]
    ParameterMismatch { fields: Vec<String> },
    #[error("the outcome is unknown")]
    OutcomeUnknown(Unknown),
    #[error("the operation is still in flight")]
    InFlight,
    #[error("the operation awaits approval")]
    AwaitingApproval,
    #[error("an operator rejected the operation")]
    OperationRejected { reason: Option<String> },
    #[error("the operation was completed and pruned")]
    OperationExpired { pruned_at: Timestamp },

    // The provider's or ours.
    #[error("the provider could not be reached: {0}")]
    UpstreamUnreachable(String),
    #[error("the exchange with the provider broke: {0}")]
    UpstreamBroken(String),
    #[error("the ledger cannot record: {0}")]
    LedgerUnavailable(String),

    // Request spellings and forwarding refused before anything is sent (issue 7).
    #[error("the request path {0}")]
    InvalidPath(String),
    /// A request an unguarded route takes that a guarded route listed after it matches too,
    /// as written: the policy's order would leave it unguarded.
    #[error(
        "the request matches the guarded route `{guarded}` after the unguarded route `{taken}`"
    )]
    ShadowedRoute { taken: String, guarded: String },
    #[error("the request method {0}")]
    InvalidMethod(String),
    #[error("the request already passed through this proxy")]
    LoopDetected,
    #[error("several providers' upstreams are {0}")]
    AmbiguousHost(String),
    /// Inside an intercepted CONNECT tunnel to `tunnel`, a request naming another host.
    #[error("a request for {named} inside the tunnel to {tunnel}")]
    Misdirected { tunnel: String, named: String },
    // Inbound limits: the client's pace, or everyone's load.
    #[error("the request body was not complete within {after:?}")]
    BodyTimeout { after: Duration },
    #[error("too many request bodies are being buffered")]
    Overloaded,
    // The caller's: the operation is another principal's.
    #[error("the operation belongs to another caller")]
    PrincipalMismatch,
}

/// What the agent's next identical request for an `unknown` operation will meet (decided by
/// `decide::unknown_next`), so its `outcome-unknown` says what to do and never invites a new
/// operation ID for an effect that may have happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unknown {
    /// The provider deduplicates on the key and still remembers it: re-sent with the same key.
    Deduplicated,
    /// The route's effect is idempotent: re-sent.
    Idempotent,
    /// The route has a lookup: the provider is asked whether the effect happened.
    LookedUp,
    /// Nothing may be sent: held until an operator resolves it.
    Held,
}

/// The `next` member: what a program does with the answer (docs/reference.md section 6.2),
/// decided from what the proxy will do with the next identical request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// Send the same request again, after `Retry-After` where given.
    RetrySame,
    /// Held for a person: asking again only polls.
    Wait,
    /// This operation ID is spent for these parameters; a new intent needs a new one.
    NewOperation,
    /// The request itself is wrong.
    FixRequest,
    /// Refused for good.
    Stop,
}

impl Advice {
    pub fn as_str(self) -> &'static str {
        match self {
            Advice::RetrySame => "retry_same",
            Advice::Wait => "wait",
            Advice::NewOperation => "new_operation",
            Advice::FixRequest => "fix_request",
            Advice::Stop => "stop",
        }
    }
}

/// Every short problem name (`kind`), for policies that name problems.
pub const KINDS: &[&str] = &[
    "no-route",
    "route-not-allowed",
    "connect-not-supported",
    "body-too-large",
    "invalid-body",
    "missing-operation-id",
    "invalid-operation-id",
    "parameter-mismatch",
    "outcome-unknown",
    "in-flight",
    "awaiting-approval",
    "operation-rejected",
    "operation-expired",
    "upstream-unreachable",
    "upstream-error",
    "ledger-unavailable",
    "invalid-path",
    "invalid-method",
    "loop-detected",
    "body-timeout",
    "overloaded",
    "principal-mismatch",
    "misdirected",
];

/// The RFC 9457 members and the proxy's own: a policy may never add or change them.
pub const KEPT_MEMBERS: &[&str] = &[
    "type",
    "title",
    "status",
    "detail",
    "next",
    "instance",
    "operation_id",
    "provider",
    "route",
    "state",
    "differing_fields",
    "missing",
    "pruned_at",
];

/// What is known about the operation a problem concerns.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub operation_id: Option<String>,
    pub provider: Option<String>,
    pub route: Option<String>,
    pub state: Option<State>,
}

impl Context {
    /// The same context in another state.
    pub fn with_state(&self, state: State) -> Context {
        Context {
            state: Some(state),
            ..self.clone()
        }
    }
}

/// How long a client is told to wait before replaying a pending operation.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

/// How long a client is told to wait after a 503 `overloaded` (buffers free up quickly).
pub const OVERLOADED_RETRY_AFTER: Duration = Duration::from_secs(1);

impl Problem {
    pub fn status(&self) -> StatusCode {
        match self {
            Problem::NoMount => StatusCode::NOT_FOUND,
            Problem::NoHost(_) | Problem::RouteNotAllowed | Problem::OperationRejected { .. } => {
                StatusCode::FORBIDDEN
            }
            Problem::ConnectNotSupported => StatusCode::NOT_IMPLEMENTED,
            Problem::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Problem::InvalidBody(_) => StatusCode::BAD_REQUEST,
            Problem::MissingOperationId { .. } | Problem::InvalidOperationId { .. } => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            Problem::ParameterMismatch { .. } => StatusCode::CONFLICT,
            Problem::OutcomeUnknown(_) | Problem::InFlight | Problem::AwaitingApproval => {
                StatusCode::ACCEPTED
            }
            Problem::UpstreamUnreachable(_) | Problem::UpstreamBroken(_) => StatusCode::BAD_GATEWAY,
            Problem::LedgerUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Problem::InvalidPath(_) | Problem::ShadowedRoute { .. } | Problem::InvalidMethod(_) => {
                StatusCode::BAD_REQUEST
            }
            Problem::LoopDetected => StatusCode::LOOP_DETECTED,
            Problem::AmbiguousHost(_) => StatusCode::FORBIDDEN,
            Problem::Misdirected { .. } => StatusCode::MISDIRECTED_REQUEST,
            Problem::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Problem::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            Problem::OperationExpired { .. } => StatusCode::GONE,
            Problem::PrincipalMismatch => StatusCode::FORBIDDEN,
        }
    }

    /// The `urn:idemproxy:` type suffix.
    pub fn kind(&self) -> &'static str {
        match self {
            Problem::NoMount | Problem::NoHost(_) => "no-route",
            Problem::RouteNotAllowed => "route-not-allowed",
            Problem::ConnectNotSupported => "connect-not-supported",
            Problem::BodyTooLarge { .. } => "body-too-large",
            Problem::InvalidBody(_) => "invalid-body",
            Problem::MissingOperationId { .. } => "missing-operation-id",
            Problem::InvalidOperationId { .. } => "invalid-operation-id",
            Problem::ParameterMismatch { .. } => "parameter-mismatch",
            Problem::OutcomeUnknown(_) => "outcome-unknown",
            Problem::InFlight => "in-flight",
            Problem::AwaitingApproval => "awaiting-approval",
            Problem::OperationRejected { .. } => "operation-rejected",
            Problem::UpstreamUnreachable(_) => "upstream-unreachable",
            Problem::UpstreamBroken(_) => "upstream-error",
            Problem::LedgerUnavailable(_) => "ledger-unavailable",
            Problem::InvalidPath(_) | Problem::ShadowedRoute { .. } => "invalid-path",
            Problem::InvalidMethod(_) => "invalid-method",
            Problem::LoopDetected => "loop-detected",
            Problem::AmbiguousHost(_) => "no-route",
            Problem::Misdirected { .. } => "misdirected",
            Problem::BodyTimeout { .. } => "body-timeout",
            Problem::Overloaded => "overloaded",
            Problem::OperationExpired { .. } => "operation-expired",
            Problem::PrincipalMismatch => "principal-mismatch",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Problem::NoMount | Problem::NoHost(_) => "No route",
            Problem::RouteNotAllowed => "Route not allowed",
            Problem::ConnectNotSupported => "CONNECT not supported",
            Problem::BodyTooLarge { .. } => "Body too large",
            Problem::InvalidBody(_) => "Invalid body",
            Problem::MissingOperationId { .. } => "Missing operation ID",
            Problem::InvalidOperationId { .. } => "Invalid operation ID",
            Problem::ParameterMismatch { .. } => "Parameter mismatch",
            Problem::OutcomeUnknown(_) => "Outcome unknown",
            Problem::InFlight => "In flight",
            Problem::AwaitingApproval => "Awaiting approval",
            Problem::OperationRejected { .. } => "Operation rejected",
            Problem::UpstreamUnreachable(_) => "Upstream unreachable",
            Problem::UpstreamBroken(_) => "Upstream error",
            Problem::LedgerUnavailable(_) => "Ledger unavailable",
            Problem::InvalidPath(_) | Problem::ShadowedRoute { .. } => "Invalid path",
            Problem::InvalidMethod(_) => "Invalid method",
            Problem::LoopDetected => "Loop detected",
            Problem::AmbiguousHost(_) => "No route",
            Problem::Misdirected { .. } => "Misdirected request",
            Problem::BodyTimeout { .. } => "Body timeout",
            Problem::Overloaded => "Overloaded",
            Problem::OperationExpired { .. } => "Operation expired",
            Problem::PrincipalMismatch => "Principal mismatch",
        }
    }

    fn extensions(&self, body: &mut Map<String, Value>) {
        match self {
            Problem::ParameterMismatch { fields } => {
                body.insert("differing_fields".into(), json!(fields));
            }
            Problem::MissingOperationId { missing } => {
                body.insert("missing".into(), json!(missing));
            }
            Problem::OperationExpired { pruned_at } => {
                body.insert("pruned_at".into(), json!(pruned_at.to_rfc3339()));
            }
            _ => {}
        }
    }

    /// The problem+json answer. Operation headers are the caller's (see `proxy`).
    pub fn into_response(self, ctx: &Context) -> Response<ProxyBody> {
        let status = self.status();
        let mut body = Map::new();
        body.insert(
            "type".into(),
            json!(format!("urn:idemproxy:{}", self.kind())),
        );
        body.insert("title".into(), json!(self.title()));
        body.insert("status".into(), json!(status.as_u16()));
        body.insert("detail".into(), json!(self.detail(ctx)));
        body.insert("next".into(), json!(self.next().as_str()));
        let known = [
            ("operation_id", ctx.operation_id.as_deref()),
            ("provider", ctx.provider.as_deref()),
            ("route", ctx.route.as_deref()),
            ("state", ctx.state.map(State::as_str)),
        ];
        for (k, v) in known {
            if let Some(v) = v {
                body.insert(k.into(), json!(v));
            }
        }
        self.extensions(&mut body);
        let retry_after = self.retry_after();
        let bytes = Bytes::from(Value::Object(body.clone()).to_string());
        let mut resp = Response::new(full(bytes));
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(after) = retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(after.as_secs()));
        }
        resp.extensions_mut().insert(Own {
            kind: self.kind(),
            pending: self.is_pending(),
            body,
            retry_after,
        });
        resp
    }

    /// The answers that mean "not yet": the provider's `pending_status` applies to them.
    pub fn is_pending(&self) -> bool {
        matches!(
            self,
            Problem::OutcomeUnknown(_) | Problem::InFlight | Problem::AwaitingApproval
        )
    }

    /// The `Retry-After` the answer carries, if any.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            _ if self.is_pending() => Some(RETRY_AFTER),
            Problem::Overloaded => Some(OVERLOADED_RETRY_AFTER),
            _ => None,
        }
    }
}

/// Carried in the extensions of every problem answer, so the answer can be shaped for the
/// provider's SDK where it leaves the proxy (`shape`) without parsing its body again. Never
/// sent on the wire.
#[derive(Debug, Clone)]
pub struct Own {
    /// The short type name: `parameter-mismatch`.
    pub kind: &'static str,
    /// One of the answers `pending_status` applies to.
    pub pending: bool,
    /// The problem+json object as sent.
    pub body: Map<String, Value>,
    pub retry_after: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed() {
        let all = [
            Problem::NoMount,
            Problem::NoHost("h".into()),
            Problem::RouteNotAllowed,
            Problem::ConnectNotSupported,
            Problem::BodyTooLarge { limit: 1 },
            Problem::InvalidBody("b".into()),
            Problem::MissingOperationId { missing: vec![] },
            Problem::InvalidOperationId { len: 600 },
            Problem::ParameterMismatch { fields: vec![] },
            Problem::OutcomeUnknown(Unknown::Held),
            Problem::InFlight,
            Problem::AwaitingApproval,
            Problem::OperationRejected { reason: None },
            Problem::OperationExpired {
                pruned_at: Timestamp(1),
            },
            Problem::UpstreamUnreachable("u".into()),
            Problem::UpstreamBroken("u".into()),
            Problem::LedgerUnavailable("l".into()),
            Problem::InvalidPath("p".into()),
            Problem::ShadowedRoute {
                taken: "t".into(),
                guarded: "g".into(),
            },
            Problem::InvalidMethod("m".into()),
            Problem::LoopDetected,
            Problem::AmbiguousHost("h".into()),
            Problem::Misdirected {
                tunnel: "t:443".into(),
                named: "n".into(),
            },
            Problem::BodyTimeout {
                after: Duration::from_secs(1),
            },
            Problem::Overloaded,
            Problem::PrincipalMismatch,
        ];
        for problem in all {
            assert!(KINDS.contains(&problem.kind()), "{}", problem.kind());
        }
    }
}
