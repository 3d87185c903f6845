//! The operation's answers: a stored response replayed, a refusal, and the `Idem-*` headers
//! every guarded answer carries (docs/reference.md section 6.1).
//!
//! It sits below the request path (`guard`, `dispatch`) and the admin API, which all answer
//! in these shapes; it never reads the ledger and never decides anything.

use http::{HeaderName, HeaderValue, Response};

use crate::identity;
use crate::operation::StoredResponse;
use crate::problem::{Context, Problem};
use crate::wire::{ProxyBody, full};

/// A stored response, replayed.
pub fn replay(stored: StoredResponse, ctx: &Context) -> Response<ProxyBody> {
    let mut resp = Response::new(full(stored.body));
    *resp.status_mut() = http::StatusCode::from_u16(stored.status).unwrap_or(http::StatusCode::OK);
    *resp.headers_mut() = stored.headers;
    op_headers(&mut resp, ctx, true);
    resp
}

/// A problem answer with the operation's headers when the operation is known.
pub fn refusal(problem: Problem, ctx: &Context) -> Response<ProxyBody> {
    let mut resp = problem.into_response(ctx);
    op_headers(&mut resp, ctx, false);
    resp
}

// Named once rather than parsed from text at each answer.
const OPERATION_ID: HeaderName = HeaderName::from_static("idem-operation-id");
const STATE: HeaderName = HeaderName::from_static("idem-state");
const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// `Idem-Operation-Id`, `Idem-State`, `Idempotent-Replayed` (docs/reference.md section 6.1).
pub fn op_headers(resp: &mut Response<ProxyBody>, ctx: &Context, replayed: bool) {
    let Some(id) = &ctx.operation_id else { return };
    let headers = resp.headers_mut();
    headers.insert(OPERATION_ID, identity::header_value(id));
    if let Some(state) = ctx.state {
        headers.insert(STATE, HeaderValue::from_static(state.as_str()));
    }
    let provider_said = || {
        headers
            .get(&REPLAYED)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
    };
    let value = if replayed || provider_said() {
        "true"
    } else {
        "false"
    };
    headers.insert(REPLAYED, HeaderValue::from_static(value));
}
