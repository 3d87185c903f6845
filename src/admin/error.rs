//! The admin API's refusals and the one place they become problem+json answers.
//!
//! Same RFC 9457 shape as the request path's `problem` (type `urn:idemproxy:...`, title,
//! status, detail), with the operation's ID and state when known. It never echoes a token or
//! a request body back.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Map, Value, json};

use crate::operation::State;
use crate::wire::{ProxyBody, full};

/// Why an admin call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    // The caller's fault.
    #[error("a valid admin token is required")]
    Unauthorized,
    #[error("{0}")]
    BadRequest(String),
    #[error("the request body is over {0} bytes")]
    TooLarge(u64),
    #[error("the request body did not arrive within {0:?}")]
    BodyTimeout(std::time::Duration),
    #[error("no such path")]
    NoPath(String),
    #[error("method not allowed")]
    Method(&'static str),
    #[error("a request from a web page of another origin")]
    ForeignOrigin,
    #[error("a request addressed to a host name")]
    ForeignHost,
    #[error("a POST that is not application/json")]
    NotJson,

    // The operation's state says no.
    #[error("no operation {0}")]
    NotFound(String),
    #[error("the operation has no stored response")]
    NoResponse(String),
    #[error("{detail}")]
    Conflict {
        id: String,
        state: State,
        detail: String,
    },

    /// A reload refused: every reason, one line each.
    #[error("the configuration was not reloaded")]
    Reload(Vec<String>),

    // Ours.
    #[error("the ledger cannot answer: {0}")]
    Ledger(String),
}

impl AdminError {
    pub fn status(&self) -> StatusCode {
        match self {
            AdminError::Unauthorized => StatusCode::UNAUTHORIZED,
            AdminError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AdminError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            AdminError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            AdminError::NoPath(_) | AdminError::NotFound(_) | AdminError::NoResponse(_) => {
                StatusCode::NOT_FOUND
            }
            AdminError::Method(_) => StatusCode::METHOD_NOT_ALLOWED,
            AdminError::ForeignOrigin => StatusCode::FORBIDDEN,
            AdminError::ForeignHost => StatusCode::MISDIRECTED_REQUEST,
            AdminError::NotJson => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            AdminError::Conflict { .. } => StatusCode::CONFLICT,
            AdminError::Reload(_) => StatusCode::UNPROCESSABLE_ENTITY,
            AdminError::Ledger(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The `urn:idemproxy:` type suffix and the title.
    fn kind(&self) -> (&'static str, &'static str) {
        match self {
            AdminError::Unauthorized => ("unauthorized", "Unauthorized"),
            AdminError::BadRequest(_) => ("bad-request", "Bad request"),
            AdminError::TooLarge(_) => ("body-too-large", "Body too large"),
            AdminError::BodyTimeout(_) => ("body-timeout", "Body timeout"),
            AdminError::NoPath(_) | AdminError::NotFound(_) | AdminError::NoResponse(_) => {
                ("not-found", "Not found")
            }
            AdminError::Method(_) => ("method-not-allowed", "Method not allowed"),
            AdminError::ForeignOrigin => ("foreign-origin", "Foreign origin"),
            AdminError::ForeignHost => ("misdirected", "Misdirected request"),
            AdminError::NotJson => ("unsupported-media-type", "Unsupported media type"),
            AdminError::Conflict { .. } => ("conflict", "Conflict"),
            AdminError::Reload(_) => ("reload-refused", "Reload refused"),
            AdminError::Ledger(_) => ("ledger-unavailable", "Ledger unavailable"),
        }
    }

    fn detail(&self) -> String {
        match self {
            AdminError::Unauthorized => "This admin API needs `Authorization: Bearer <token>` \
                with the value of IDEMPROXY_ADMIN_TOKEN."
                .into(),
            AdminError::BadRequest(why) => why.clone(),
            AdminError::TooLarge(limit) => {
                format!("The request body is larger than {limit} bytes.")
            }
            AdminError::BodyTimeout(after) => format!(
                "The request body did not arrive within {after:?} (`limits.body_timeout`); \
                 nothing was done."
            ),
            AdminError::NoPath(path) => format!(
                "No admin endpoint at {path}. An operation ID in a path is percent-encoded, \
                 its `/` as %2F: /ops/stripe%2Fcreate_refund%2Fwf-81."
            ),
            AdminError::Method(allow) => format!("This endpoint only answers {allow}."),
            AdminError::ForeignOrigin => "The admin API does not answer web pages of other \
                origins: a request with an `Origin` header must come from the admin listener's \
                own origin (http:// and the address it was sent to). Use `idemproxy ops` or a \
                client that sends no `Origin`."
                .into(),
            AdminError::ForeignHost => "Without IDEMPROXY_ADMIN_TOKEN the admin API only \
                answers requests addressed to an IP address or `localhost` (a host name could \
                be a DNS-rebinding web page). Use http://127.0.0.1:PORT, or set \
                IDEMPROXY_ADMIN_TOKEN to reach it by name."
                .into(),
            AdminError::NotJson => "An admin POST needs `Content-Type: application/json` (a \
                web page cannot send that to another origin without the browser asking first)."
                .into(),
            AdminError::NotFound(id) => format!("There is no operation {id}."),
            AdminError::NoResponse(id) => format!("Operation {id} has no stored response."),
            AdminError::Conflict { detail, .. } => detail.clone(),
            AdminError::Reload(errors) => format!(
                "The configuration was not reloaded; the proxy keeps running on the one it had. \
                 Fix what `errors` names (`idemproxy check` shows the same), then reload again: {}",
                errors.join("; ")
            ),
            AdminError::Ledger(why) => format!("The ledger cannot answer right now ({why})."),
        }
    }

    /// The problem+json answer.
    pub fn into_response(self) -> Response<ProxyBody> {
        let status = self.status();
        let (kind, title) = self.kind();
        let mut body = Map::new();
        body.insert("type".into(), json!(format!("urn:idemproxy:{kind}")));
        body.insert("title".into(), json!(title));
        body.insert("status".into(), json!(status.as_u16()));
        body.insert("detail".into(), json!(self.detail()));
        match &self {
            AdminError::NotFound(id) | AdminError::NoResponse(id) => {
                body.insert("operation_id".into(), json!(id));
            }
            AdminError::Conflict { id, state, .. } => {
                body.insert("operation_id".into(), json!(id));
                body.insert("state".into(), json!(state.as_str()));
            }
            AdminError::Reload(errors) => {
                body.insert("errors".into(), json!(errors));
            }
            _ => {}
        }
        let mut resp = Response::new(full(Bytes::from(Value::Object(body).to_string())));
        *resp.status_mut() = status;
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        match self {
            AdminError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            AdminError::Method(allow) => {
                headers.insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            _ => {}
        }
        resp
    }
}

impl From<crate::ledger::LedgerError> for AdminError {
    fn from(e: crate::ledger::LedgerError) -> Self {
        match e {
            crate::ledger::LedgerError::BadCursor => AdminError::BadRequest(
                "`after` is not a cursor this proxy gave out; use the `next` of an earlier page."
                    .into(),
            ),
            other => AdminError::Ledger(other.to_string()),
        }
    }
}
