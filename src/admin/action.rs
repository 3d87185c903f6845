//! The operator's writes: `POST /ops/{id}/resolve`, `/re-resolve`, `/approve`, `/reject` and
//! `/rebind`.
//!
//! Each is one `ledger.update` whose closure checks the operation's state inside the write
//! transaction, so two operators (or an operator and an agent) racing on one operation cannot
//! both win. The transitions are pure functions of the stored operation; nothing here sends
//! anything to a provider (an approval only lets the agent's next request through).

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, header};
use serde::Deserialize;

use super::error::AdminError;
use super::view;
use crate::app::App;
use crate::clock::Timestamp;
use crate::operation::{
    Approval, Event, EventKind, Operation, RequestChange, State, StoredResponse, Write,
};
use crate::wire::ProxyBody;

/// The longest operator reason, in bytes; it becomes an event detail and maybe `error`.
pub const MAX_REASON: usize = 2000;

/// What an operator says happened to an `unknown` operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The effect happened; this is the answer replays will return.
    Succeeded {
        response: StoredResponse,
        reason: Option<String>,
    },
    /// The effect did not happen; the next replay sends it again.
    Failed { reason: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResolveBody {
    outcome: String,
    status: Option<u16>,
    headers: Option<BTreeMap<String, String>>,
    body: Option<String>,
    reason: Option<String>,
    /// The provider really answered a 2xx other than 204 with no body (see `stored_response`).
    #[serde(default)]
    empty_body: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ReasonBody {
    reason: Option<String>,
}

fn json<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, AdminError> {
    serde_json::from_slice(bytes).map_err(|e| {
        AdminError::BadRequest(format!("The body is not the JSON this call takes: {e}."))
    })
}

/// A reason as given: trimmed, `None` when blank, an error when over [`MAX_REASON`].
fn reason(given: Option<String>) -> Result<Option<String>, AdminError> {
    let Some(text) = given
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty())
    else {
        return Ok(None);
    };
    if text.len() > MAX_REASON {
        return Err(AdminError::BadRequest(format!(
            "`reason` is {} bytes; at most {MAX_REASON} are allowed.",
            text.len()
        )));
    }
    Ok(Some(text))
}

/// Parses a resolve body. The stored headers lose what a provider's answer would lose too
/// (hop-by-hop, cookies, `redact`, the proxy's own `Idem-*`) and `Content-Length`, which the
/// replay computes from the body.
pub fn parse_resolution(
    bytes: &[u8],
    redact: &[HeaderName],
    max_body: u64,
) -> Result<Resolution, AdminError> {
    let body: ResolveBody = json(bytes)?;
    let why = reason(body.reason)?;
    match body.outcome.as_str() {
        "succeeded" => {
            let said = Said {
                status: body.status,
                headers: body.headers,
                body: body.body,
                empty_body: body.empty_body,
            };
            let response = stored_response(said, redact, max_body)?;
            Ok(Resolution::Succeeded {
                response,
                reason: why,
            })
        }
        "failed"
            if body.status.is_some()
                || body.headers.is_some()
                || body.body.is_some()
                || body.empty_body =>
        {
            Err(AdminError::BadRequest(
                "`status`, `headers`, `body` and `empty_body` are only for `\"outcome\": \"succeeded\"`."
                    .into(),
            ))
        }
        "failed" => match why {
            Some(reason) => Ok(Resolution::Failed { reason }),
            None => Err(AdminError::BadRequest(
                "A failed resolution needs a `reason`: why the effect did not happen.".into(),
            )),
        },
        other => Err(AdminError::BadRequest(format!(
            "`outcome` must be \"succeeded\" or \"failed\", not {other:?}."
        ))),
    }
}

/// What a succeeded resolution says the provider answered.
struct Said {
    status: Option<u16>,
    headers: Option<BTreeMap<String, String>>,
    body: Option<String>,
    empty_body: bool,
}

fn stored_response(
    said: Said,
    redact: &[HeaderName],
    max_body: u64,
) -> Result<StoredResponse, AdminError> {
    let Said {
        status,
        headers,
        body,
        empty_body,
    } = said;
    let status = status.unwrap_or(200);
    if !(200..=599).contains(&status) {
        return Err(AdminError::BadRequest(format!(
            "`status` must be from 200 to 599, not {status}."
        )));
    }
    // Every later replay answers this body: left out, it would be an empty answer the agent's
    // SDK fails to parse. An answer that had no body says so with "".
    let Some(body) = body else {
        return Err(AdminError::BadRequest(
            "A succeeded resolution needs `body`: the provider's answer as its API returned it, \
             which every later replay returns (\"\" for an answer without a body)."
                .into(),
        ));
    };
    // An empty 2xx (other than 204) is replayed to every later caller, whose SDK fails to parse
    // it, and a resolution cannot be taken back: only when the operator says so.
    if body.is_empty() && (200..300).contains(&status) && status != 204 && !empty_body {
        return Err(AdminError::BadRequest(format!(
            "An empty `body` for a {status} answer would be replayed to every later caller, \
             and an SDK that parses the provider's object fails on it. Give the provider's \
             object as `body`, use status 204 for an answer without a body, or add \
             `\"empty_body\": true` (`ops resolve --empty-body`) if the provider really \
             answered {status} with nothing."
        )));
    }
    let body = Bytes::from(body);
    if body.len() as u64 > max_body {
        return Err(AdminError::TooLarge(max_body));
    }
    let mut map = HeaderMap::new();
    for (name, value) in headers.unwrap_or_default() {
        let bad = || AdminError::BadRequest(format!("`headers` has an invalid header {name:?}."));
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
        let value = HeaderValue::from_str(&value).map_err(|_| bad())?;
        map.append(name, value);
    }
    crate::upstream::strip_hop_by_hop(&mut map);
    let own = [
        "idem-operation-id",
        "idem-state",
        "idempotent-replayed",
        "set-cookie2",
    ];
    for name in own.into_iter().map(HeaderName::from_static) {
        map.remove(name);
    }
    for name in [header::SET_COOKIE, header::CONTENT_LENGTH]
        .iter()
        .chain(redact)
    {
        map.remove(name);
    }
    Ok(StoredResponse {
        status,
        headers: map,
        body,
    })
}

/// An approve body: optional, and so is its reason.
pub fn parse_approve(bytes: &[u8]) -> Result<Option<String>, AdminError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    reason(json::<ReasonBody>(bytes)?.reason)
}

/// A reject body: the reason is required, since it becomes the operation's `error`.
pub fn parse_reject(bytes: &[u8]) -> Result<String, AdminError> {
    let given = if bytes.iter().all(u8::is_ascii_whitespace) {
        ReasonBody::default()
    } else {
        json::<ReasonBody>(bytes)?
    };
    reason(given.reason)?.ok_or_else(|| {
        AdminError::BadRequest(
            "Rejecting needs a `reason`; the agent is told it with every later request.".into(),
        )
    })
}

/// A rebind body: the reason is required, since it is the only record of why another
/// caller may now have the operation.
pub fn parse_rebind(bytes: &[u8]) -> Result<String, AdminError> {
    let given = if bytes.iter().all(u8::is_ascii_whitespace) {
        ReasonBody::default()
    } else {
        json::<ReasonBody>(bytes)?
    };
    reason(given.reason)?.ok_or_else(|| {
        AdminError::BadRequest(
            "Rebinding needs a `reason` (e.g. \"rotated the API key\"); it is kept in the history."
                .into(),
        )
    })
}

/// What an update closure returns: the write, and the updated operation or the refusal.
pub type Updated = (Option<Write>, Result<Operation, AdminError>);

fn refuse(err: AdminError) -> Updated {
    (None, Err(err))
}

fn conflict(op: &Operation, detail: String) -> Updated {
    refuse(AdminError::Conflict {
        id: op.id.clone(),
        state: op.state,
        detail,
    })
}

fn commit(
    op: Operation,
    kind: EventKind,
    detail: String,
    now: Timestamp,
    response: Option<StoredResponse>,
) -> Updated {
    let event = Event {
        at: now,
        kind,
        attempt: op.attempts,
        detail,
    };
    // Succeeded or rejected, the operation is never sent again: its kept request goes. One
    // resolved as failed may still be retried, and its retry must repeat the first request.
    let request = match (op.state, op.approval) {
        (State::Succeeded, _) | (_, Approval::Rejected) => RequestChange::Erase,
        _ => RequestChange::Keep,
    };
    let write = Write {
        op: op.clone(),
        events: vec![event],
        response,
        request,
    };
    (Some(write), Ok(op))
}

fn with_reason(text: &str, reason: Option<&str>) -> String {
    match reason {
        Some(r) => format!("{text}: {r}"),
        None => text.to_string(),
    }
}

/// `unknown` -> `succeeded` (the given response stored) or `failed` (`error` = reason).
pub fn resolve(
    existing: Option<Operation>,
    id: &str,
    resolution: Resolution,
    now: Timestamp,
) -> Updated {
    let Some(op) = existing else {
        return refuse(AdminError::NotFound(id.to_string()));
    };
    if op.state != State::Unknown {
        let detail = format!(
            "Operation {id} is {}; only an unknown operation can be resolved.",
            op.state.as_str()
        );
        return conflict(&op, detail);
    }
    let (op, response, what) = resolved(op, resolution, now);
    let detail = format!("an operator resolved it as {what}");
    commit(op, EventKind::OperatorResolved, detail, now, response)
}

/// `op` as `resolution` leaves it at `now`, the response to store, and the outcome in words
/// with the operator's reason (`succeeded (status 200, 14 bytes): seen in the dashboard`).
fn resolved(
    op: Operation,
    resolution: Resolution,
    now: Timestamp,
) -> (Operation, Option<StoredResponse>, String) {
    // An operator's resolution settles what earlier attempts did: a later attempt's failure
    // is then that attempt's alone.
    let base = Operation {
        updated_at: now,
        fence: 0,
        maybe_effect_at: None,
        ..op
    };
    match resolution {
        Resolution::Succeeded { response, reason } => {
            let meta = response.meta();
            let what = format!(
                "succeeded (status {}, {} bytes)",
                meta.status, meta.body_bytes
            );
            let op = Operation {
                state: State::Succeeded,
                response: Some(meta),
                error: None,
                ..base
            };
            (op, Some(response), with_reason(&what, reason.as_deref()))
        }
        Resolution::Failed { reason } => {
            let what = with_reason("failed", Some(&reason));
            // A succeeded resolution's answer is void once corrected to failed: the operation
            // no longer names a response to replay.
            let response = base
                .response
                .clone()
                .filter(|_| base.state != State::Succeeded);
            let op = Operation {
                state: State::Failed,
                error: Some(reason),
                response,
                ..base
            };
            (op, None, what)
        }
    }
}

/// Why `op`, whose last settling event is `last`, cannot be re-resolved: who settled it.
fn settled_by_whom(op: &Operation, last: Option<&Event>) -> String {
    let id = &op.id;
    let state = op.state.as_str();
    let who = match (op.state, last.map(|e| e.kind)) {
        (State::Unknown, _) => {
            return format!(
                "Operation {id} is unknown: nobody has resolved it yet. Resolve it \
                 (`POST /ops/{{id}}/resolve`, `idemproxy ops resolve`); re-resolving only \
                 corrects an operator's resolution."
            );
        }
        (State::Prepared, _) => "it waits for approval and was never sent".to_owned(),
        (State::InFlight, _) => "an attempt of it is in flight".to_owned(),
        (_, Some(EventKind::ReconcileFound)) => {
            "reconciliation found its effect at the provider".to_owned()
        }
        (_, Some(EventKind::OperatorRejected)) => {
            "an operator rejected it before it was sent".to_owned()
        }
        (_, Some(EventKind::ResultPersisted)) => "the provider answered it".to_owned(),
        (_, Some(kind)) => format!("its last settling event is {}", kind.as_str()),
        (_, None) => "its history no longer says who settled it (it was pruned)".to_owned(),
    };
    format!(
        "Operation {id} is {state} and {who}: only an operation an operator resolved (its last \
         settling event operator.resolved or operator.re_resolved) can be re-resolved, never one \
         the provider answered or reconciliation settled."
    )
}

/// An operator's resolution (`succeeded` or `failed`) -> the outcome given now, replacing the
/// stored response (`succeeded`) or voiding it (`failed` after `succeeded`), recorded as
/// `operator.re_resolved` with what changed. Only when the operation's last settling event
/// (`operation::last_settling`) is `operator.resolved` or `operator.re_resolved`: never one
/// the provider answered, reconciliation settled or an operator rejected, nor one re-sent
/// since. `events` is the operation's history (`Ledger::update_seeing_history`).
pub fn re_resolve(
    existing: Option<Operation>,
    events: &[Event],
    id: &str,
    resolution: Resolution,
    now: Timestamp,
) -> Updated {
    let Some(op) = existing else {
        return refuse(AdminError::NotFound(id.to_string()));
    };
    let last = crate::operation::last_settling(events);
    let by_operator = crate::operation::resolved_by_operator(events);
    let settled = matches!(op.state, State::Succeeded | State::Failed);
    if !by_operator || !settled || op.pruned_at.is_some() {
        let detail = settled_by_whom(&op, last);
        return conflict(&op, detail);
    }
    let was = match (&op.state, &op.response) {
        (State::Succeeded, Some(meta)) => format!(
            "succeeded (status {}, {} bytes)",
            meta.status, meta.body_bytes
        ),
        (state, _) => state.as_str().to_owned(),
    };
    let (op, response, now_is) = resolved(op, resolution, now);
    let detail = format!("an operator corrected its resolution from {was} to {now_is}");
    commit(op, EventKind::OperatorReResolved, detail, now, response)
}

/// `prepared` awaiting approval -> approved (still `prepared`; the next request sends it).
pub fn approve(
    existing: Option<Operation>,
    id: &str,
    reason: Option<String>,
    now: Timestamp,
) -> Updated {
    let Some(op) = existing else {
        return refuse(AdminError::NotFound(id.to_string()));
    };
    match (op.state, op.approval) {
        (State::Prepared, Approval::Pending) => {
            let detail = with_reason("approved by an operator", reason.as_deref());
            let op = Operation {
                approval: Approval::Approved,
                updated_at: now,
                ..op
            };
            commit(op, EventKind::OperatorApproved, detail, now, None)
        }
        (State::Prepared, _) => {
            let detail =
                format!("Operation {id} is already approved; the agent's next request sends it.");
            conflict(&op, detail)
        }
        (state, _) => {
            let detail = format!(
                "Operation {id} is {}; only a prepared operation awaiting approval can be approved.",
                state.as_str()
            );
            conflict(&op, detail)
        }
    }
}

/// `prepared` (approved or not) -> `failed` for good, approval rejected, `error` = reason.
pub fn reject(existing: Option<Operation>, id: &str, reason: String, now: Timestamp) -> Updated {
    let Some(op) = existing else {
        return refuse(AdminError::NotFound(id.to_string()));
    };
    if op.state != State::Prepared {
        let detail = format!(
            "Operation {id} is {}; only a prepared operation, not yet sent, can be rejected.",
            op.state.as_str()
        );
        return conflict(&op, detail);
    }
    let detail = with_reason("rejected by an operator", Some(&reason));
    let op = Operation {
        state: State::Failed,
        approval: Approval::Rejected,
        error: Some(reason),
        updated_at: now,
        ..op
    };
    commit(op, EventKind::OperatorRejected, detail, now, None)
}

/// Any state -> the same state bound to no caller: the next request's principal adopts it
/// (docs/reference.md section 12, rotating an API key). Nothing is sent.
pub fn rebind(existing: Option<Operation>, id: &str, reason: String, now: Timestamp) -> Updated {
    let Some(op) = existing else {
        return refuse(AdminError::NotFound(id.to_string()));
    };
    let detail = with_reason(
        "an operator unbound it from its caller; the next caller's credentials adopt it",
        Some(&reason),
    );
    let op = Operation {
        principal: None,
        updated_at: now,
        ..op
    };
    commit(op, EventKind::OperatorRebound, detail, now, None)
}

/// `POST /ops/{id}/resolve`.
pub async fn resolve_op(
    app: &App,
    id: &str,
    body: &[u8],
) -> Result<Response<ProxyBody>, AdminError> {
    let resolution = resolution_for(app, id, body).await?;
    act(
        app,
        id,
        resolution,
        resolve,
        "operator resolved an operation",
    )
    .await
}

/// `POST /ops/{id}/re-resolve`: decided on the operation's history as well
/// (`Ledger::update_seeing_history`).
pub async fn re_resolve_op(
    app: &App,
    id: &str,
    body: &[u8],
) -> Result<Response<ProxyBody>, AdminError> {
    let resolution = resolution_for(app, id, body).await?;
    let owned = id.to_string();
    let now = Timestamp::now();
    let op = app
        .ledger
        .update_seeing_history(id, move |existing, events| {
            re_resolve(existing, events, &owned, resolution.clone(), now)
        })
        .await??;
    tracing::info!(operation = %crate::operation::Logged(&op.id), state = op.state.as_str(), "operator corrected a resolution");
    Ok(view::json_response(&view::operation(&op)))
}

/// The resolution a resolve body gives for operation `id` (404 when there is none).
async fn resolution_for(app: &App, id: &str, body: &[u8]) -> Result<Resolution, AdminError> {
    // The provider's redact list applies to the operator's headers too; its provider never
    // changes, so reading it outside the transaction is safe.
    let op = app
        .ledger
        .get(id)
        .await?
        .ok_or_else(|| AdminError::NotFound(id.to_string()))?;
    let redact = app
        .provider(&op.provider)
        .map(|p| p.redact_headers.clone())
        .unwrap_or_default();
    parse_resolution(body, &redact, app.config.limits.max_stored_response)
}

/// `POST /ops/{id}/approve`.
pub async fn approve_op(
    app: &App,
    id: &str,
    body: &[u8],
) -> Result<Response<ProxyBody>, AdminError> {
    let why = parse_approve(body)?;
    act(app, id, why, approve, "operator approved an operation").await
}

/// `POST /ops/{id}/reject`.
pub async fn reject_op(
    app: &App,
    id: &str,
    body: &[u8],
) -> Result<Response<ProxyBody>, AdminError> {
    let why = parse_reject(body)?;
    act(app, id, why, reject, "operator rejected an operation").await
}

/// `POST /ops/{id}/rebind`.
pub async fn rebind_op(
    app: &App,
    id: &str,
    body: &[u8],
) -> Result<Response<ProxyBody>, AdminError> {
    let why = parse_rebind(body)?;
    act(
        app,
        id,
        why,
        rebind,
        "operator unbound an operation from its caller",
    )
    .await
}

/// One operator action: `apply` (pure) decides and writes in one ledger update, then the
/// operation as it now is is logged (`done`) and answered.
async fn act<A: Send + 'static>(
    app: &App,
    id: &str,
    action: A,
    apply: fn(Option<Operation>, &str, A, Timestamp) -> Updated,
    done: &'static str,
) -> Result<Response<ProxyBody>, AdminError> {
    let owned = id.to_string();
    let now = Timestamp::now();
    let op = app
        .ledger
        .update(id, move |existing| apply(existing, &owned, action, now))
        .await??;
    tracing::info!(operation = %crate::operation::Logged(&op.id), state = op.state.as_str(), "{done}");
    Ok(view::json_response(&view::operation(&op)))
}
