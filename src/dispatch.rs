//! One claimed attempt: send it to the provider, classify the answer, record it, answer.
//!
//! It runs on the task `guard` detaches from the agent's connection (tracked by
//! `App::background`), so it finishes and is recorded even when the agent hangs up: an
//! agent's timeout must never turn a known outcome into an unknown one. The result is written only by
//! the owner of the claim (its fencing token); the agent gets its answer only after that
//! commit.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::BodyExt;

use crate::app::App;
use crate::clock::Timestamp;
use crate::decide::{Rules, unknown_next};
use crate::kept::{Outgoing, Unbuildable};
use crate::ledger::{LedgerError, Permit};
use crate::operation::{
    Event, EventKind, Logged, Operation, RequestChange, State, StoredResponse, Write,
};
use crate::policy::rule::{self, Classified, Means};
use crate::policy::{Effect, Protocol, Provider};
use crate::problem::{Context, Problem, Unknown};
use crate::upstream::{self, Gate, Refusal, SendError};
use crate::wire::{BoxError, ProxyBody, Unbuffered, collect_limited, full};

/// A claimed attempt of an operation of the provider `run` is given.
pub struct Exchange {
    pub route: String,
    pub id: String,
    pub fence: u64,
    /// Taken before the claim: checked right before the first byte (`fetch`).
    pub permit: Permit,
    pub attempt: u32,
    /// The request to send; `Err` when it could not be built (nothing is sent, and the
    /// attempt is recorded as never having reached the provider).
    pub outgoing: Result<Outgoing, NotBuilt>,
    /// Who sent it, for the `provider.requested` event ("settler" for the proxy's own).
    pub by_settler: bool,
}

/// Why the request of a claimed attempt was not built.
#[derive(Debug, thiserror::Error)]
pub enum NotBuilt {
    #[error(transparent)]
    Request(#[from] Unbuildable),
    /// The kept first request could not be read.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// The last check of an attempt claimed under `permit` before its first byte: within its
/// deadline, and still this replica's to send.
fn gate(app: &App, permit: &Permit, timeout: std::time::Duration) -> Gate {
    let (ledger, permit) = (app.ledger.clone(), *permit);
    let deadline = permit.since + timeout;
    Arc::new(move || {
        if Instant::now() >= deadline {
            return Err(Refusal::Deadline(timeout));
        }
        ledger.may_send(&permit).map_err(Refusal::Ledger)
    })
}

/// What came back from the provider.
struct Fetched {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    /// The body was over `max_stored_response` and was dropped.
    truncated: bool,
    /// An MCP tool's `text/event-stream` answer as read up to its JSON-RPC response (`body`):
    /// what its first caller gets, notifications included; never stored.
    transcript: Option<Bytes>,
}

/// Sends a claimed attempt, records its result, and returns the agent's answer with the state
/// the operation is in after it. The caller runs it detached from the agent's connection (see
/// `guard`), so it always ends recorded.
pub async fn run(app: &App, provider: &Provider, ex: Exchange) -> (Response<ProxyBody>, State) {
    let mut ctx = Context {
        operation_id: Some(ex.id.clone()),
        provider: Some(provider.name.clone()),
        route: Some(ex.route.clone()),
        state: Some(State::InFlight),
    };
    let sent_at = Timestamp::now();
    let started = Instant::now();
    let fetched = match &ex.outgoing {
        Ok(outgoing) => {
            let fetched = fetch(app, provider, outgoing, &ex.permit).await;
            app.metrics.upstream(&provider.name, started.elapsed());
            fetched
        }
        Err(why) => Err(SendError::Connect(format!(
            "the request could not be built: {why}"
        ))),
    };
    let record = Record::of(provider, &ex, sent_at, &fetched);
    let means = record.means;
    crate::crash_point!("dispatch.before_result_commit");
    let recorded = persist(app, provider, &ex, record).await;
    // Wake duplicates waiting on this operation; they re-read the ledger. No receiver: fine.
    let done = || {
        let _ = app.completions.send(Arc::from(ex.id.as_str()));
    };
    let (state, unknown) = match recorded {
        Ok(Persisted::Written(recorded)) => {
            crate::crash_point!("dispatch.after_result_commit");
            if let Some(op) = &recorded.unknown {
                app.escalate(op);
            }
            (recorded.state, recorded.unknown)
        }
        Ok(Persisted::Superseded(now)) => {
            done();
            tracing::warn!(operation = %Logged(&ex.id), "a newer claim owns this operation; this attempt's result was not written");
            return Box::pin(superseded(app, provider, &ex, now, ctx)).await;
        }
        Err(e) => {
            done();
            tracing::error!(operation = %Logged(&ex.id), error = %e, "the provider answered but the ledger could not record it");
            // Nobody will finish this claim: the ledger makes it `unknown` as soon as it can.
            app.ledger.abandon(&ex.id, ex.fence);
            ctx.state = Some(State::Unknown);
            let problem = Problem::OutcomeUnknown(unknown_case(provider, &ex, None));
            return (crate::answer::refusal(problem, &ctx), State::Unknown);
        }
    };
    // A `reconcile` rule's lookup runs before duplicates wake, so they see its verdict.
    let found = match (&fetched, means, state) {
        // Boxed: the lookup's future is most of this one's size, which the detached task
        // that runs every attempt would otherwise carry (and copy) for this rare branch.
        (Ok(answer), Means::Reconcile, State::Unknown) => {
            Box::pin(reconcile_at_once(app, provider, &ex, &answer.body)).await
        }
        _ => None,
    };
    done();
    if let Some(stored) = found {
        let answer = crate::answer::replay(stored, &ctx.with_state(State::Succeeded));
        return (answer, State::Succeeded);
    }
    ctx.state = Some(state);
    let answer = match fetched {
        // The provider is still at work on this key: a retry later gets its result.
        Ok(_) if means == Means::Pending => crate::answer::refusal(Problem::InFlight, &ctx),
        Ok(answer) => first_answer(answer, &ctx),
        // Safe to retry only if no attempt of the operation may have taken effect.
        Err(SendError::Connect(why)) if state == State::Failed => {
            crate::answer::refusal(Problem::UpstreamUnreachable(why), &ctx)
        }
        Err(_) => {
            let case = unknown_case(provider, &ex, unknown.as_ref());
            crate::answer::refusal(Problem::OutcomeUnknown(case), &ctx)
        }
    };
    (answer, state)
}

/// What the agent's next request for the operation of this attempt, now `unknown` and
/// recorded as `op`, will meet (`None`: it could not be read; then nothing is promised about
/// the provider's key window).
fn unknown_case(provider: &Provider, ex: &Exchange, op: Option<&Operation>) -> Unknown {
    let Some(route) = provider.routes.iter().find(|r| r.name == ex.route) else {
        return Unknown::Held;
    };
    let rules = Rules::of(provider, route);
    match op {
        Some(op) if op.state == State::Unknown => unknown_next(op, rules, Timestamp::now()),
        _ if rules.effect == Effect::Idempotent => Unknown::Idempotent,
        _ if rules.reconcile => Unknown::LookedUp,
        _ => Unknown::Held,
    }
}

/// Looks up at once the effect of an attempt whose answer a `means = "reconcile"` rule
/// matched (already recorded `unknown`), that answer readable by the lookup as
/// `{answer:/pointer}` (in memory only). The found response, if the lookup proved the effect.
async fn reconcile_at_once(
    app: &App,
    provider: &Provider,
    ex: &Exchange,
    body: &Bytes,
) -> Option<StoredResponse> {
    let route = provider.routes.iter().find(|r| r.name == ex.route)?;
    route.reconcile.as_ref()?;
    let outgoing = ex.outgoing.as_ref().ok()?;
    let captures = crate::path::below(outgoing.uri.path(), &provider.upstream.base_path)
        .and_then(|rel| route.matcher.matches(&outgoing.method, rel))
        .unwrap_or_default();
    let answer = serde_json::from_slice(body).unwrap_or(serde_json::Value::Null);
    let headers = &outgoing.headers;
    let verdict =
        crate::reconcile::at_once(app, provider, route, &captures, &ex.id, headers, &answer).await;
    match verdict {
        crate::reconcile::Verdict::Found(stored) => Some(stored),
        _ => None,
    }
}

/// Sends and reads the whole answer within the provider's `timeout`. Nothing is written
/// once the attempt is past its deadline (its claim plus that `timeout`) or its claim's
/// permit no longer holds (`Ledger::may_send`): both are checked when the connection is ready.
async fn fetch(
    app: &App,
    provider: &Provider,
    outgoing: &Outgoing,
    permit: &Permit,
) -> Result<Fetched, SendError> {
    let max = app.config.limits.max_stored_response;
    let gate = gate(app, permit, provider.timeout);
    let exchange = async {
        let resp = app
            .upstreams
            .send_gated(&provider.name, outgoing.request(), gate)
            .await?;
        crate::crash_point!("dispatch.after_send");
        let (parts, body) = resp.into_parts();
        let streamed = provider.protocol == Protocol::Mcp && is_event_stream(&parts.headers);
        let read = match streamed {
            true => read_events(body, max, &outgoing.body).await,
            false => collect_limited(body, max).await.map(|body| (body, None)),
        };
        let (body, transcript, truncated) = match read {
            Ok((body, transcript)) => (body, transcript, false),
            Err(Unbuffered::TooLarge) => (Bytes::new(), None, true),
            Err(Unbuffered::Broken(why)) => return Err(SendError::Lost(why)),
        };
        let mut headers = parts.headers;
        upstream::strip_hop_by_hop(&mut headers);
        headers.remove(header::CONTENT_LENGTH);
        Ok(Fetched {
            status: parts.status,
            headers,
            body,
            truncated,
            transcript,
        })
    };
    match tokio::time::timeout(provider.timeout, exchange).await {
        Ok(result) => result,
        Err(_) => Err(SendError::Timeout(provider.timeout)),
    }
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// An MCP tool's event stream, read until the JSON-RPC response to the request (`sent`, the
/// body as sent, names its `id`), within `max` bytes in all: that response, and the stream as
/// read up to it. A stream that ends first is lost (the tool may have run).
async fn read_events(
    mut body: upstream::ProviderBody,
    max: u64,
    sent: &[u8],
) -> Result<(Bytes, Option<Bytes>), Unbuffered> {
    let id = crate::jsonrpc::request_id(sent).unwrap_or(serde_json::Value::Null);
    let mut events = crate::jsonrpc::EventStream::default();
    let mut read = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Unbuffered::Broken(e.to_string()))?;
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        read += chunk.len() as u64;
        if read > max {
            return Err(Unbuffered::TooLarge);
        }
        if let Some(response) = events.feed(&chunk, &id) {
            return Ok((response, Some(events.transcript())));
        }
    }
    Err(Unbuffered::Broken(
        "the event stream ended before the tool's response".into(),
    ))
}

/// What an attempt writes to the ledger.
struct Record {
    /// What the answer means; `state` is what the ledger records for it.
    means: Means,
    state: State,
    response: Option<StoredResponse>,
    error: Option<String>,
    request_id: Option<String>,
    events: Vec<Event>,
}

impl Record {
    fn of(
        provider: &Provider,
        ex: &Exchange,
        sent_at: Timestamp,
        fetched: &Result<Fetched, SendError>,
    ) -> Record {
        let now = Timestamp::now();
        let event = |at, kind, detail: String| Event {
            at,
            kind,
            attempt: ex.attempt,
            detail,
        };
        match fetched {
            Ok(answer) => {
                let status = answer.status.as_u16();
                let classify = match provider.protocol {
                    Protocol::Mcp => rule::classify_tool,
                    Protocol::Http => rule::classify,
                };
                let classified =
                    classify(&provider.rules, &provider.outcomes, status, &answer.body);
                let state = match classified.means {
                    Means::Succeeded => State::Succeeded,
                    Means::Failed => State::Failed,
                    Means::Unknown | Means::Pending | Means::Reconcile => State::Unknown,
                };
                let mut events = vec![
                    event(sent_at, EventKind::ProviderRequested, sent(ex)),
                    event(
                        now,
                        EventKind::ProviderResponded,
                        format!("status {status}"),
                    ),
                ];
                if state == State::Unknown {
                    events.push(event(
                        now,
                        EventKind::Unknown,
                        unknown_detail(status, classified),
                    ));
                }
                events.push(event(
                    now,
                    EventKind::ResultPersisted,
                    state.as_str().to_string(),
                ));
                Record {
                    means: classified.means,
                    state,
                    response: Some(stored(provider, answer)),
                    error: answer.truncated.then(|| {
                        "the response body was over max_stored_response and was not stored"
                            .to_string()
                    }),
                    request_id: request_id(provider, &answer.headers),
                    events,
                }
            }
            Err(SendError::Connect(why)) => Record {
                means: Means::Failed,
                state: State::Failed,
                response: None,
                error: Some(format!("the provider could not be reached: {why}")),
                request_id: None,
                events: vec![event(
                    now,
                    EventKind::ResultPersisted,
                    "failed: never connected, nothing was sent".into(),
                )],
            },
            Err(e) => Record {
                means: Means::Unknown,
                state: State::Unknown,
                response: None,
                error: Some(e.to_string()),
                request_id: None,
                events: vec![
                    event(sent_at, EventKind::ProviderRequested, sent(ex)),
                    event(now, EventKind::Unknown, e.to_string()),
                ],
            },
        }
    }

    /// The `provider.answered_late` event of this attempt's answer, if the provider answered,
    /// for when a newer claim keeps it from being written: its status and the provider's
    /// request ID; the answer itself is not stored.
    fn late_event(&self, attempt: u32) -> Option<Event> {
        let status = self.response.as_ref()?.status;
        let id = match &self.request_id {
            Some(id) => format!(", provider request ID {id}"),
            None => String::new(),
        };
        Some(Event {
            at: Timestamp::now(),
            kind: EventKind::AnsweredLate,
            attempt,
            detail: format!(
                "the provider answered attempt {attempt} (status {status}{id}) after another \
                 replica had taken the operation over; that answer was not stored, and the \
                 provider may have acted on both attempts"
            ),
        })
    }
}

/// Why an answer left the operation `unknown`, for its `operation.unknown` event.
fn unknown_detail(status: u16, classified: Classified) -> String {
    let Some(i) = classified.rule else {
        return format!("status {status} proves neither success nor failure");
    };
    match classified.means {
        Means::Pending => format!(
            "status {status}, rule {i}: the provider is still processing a request with this key, so the effect may yet happen"
        ),
        Means::Reconcile => {
            format!("status {status}, rule {i}: the effect is looked up with the route's lookup")
        }
        _ => format!("status {status}, rule {i}: it proves neither success nor failure"),
    }
}

/// The `provider.requested` detail: which attempt, and who sent it.
fn sent(ex: &Exchange) -> String {
    match ex.by_settler {
        true => format!("attempt {} sent by the settler", ex.attempt),
        false => format!("attempt {} sent", ex.attempt),
    }
}

/// The answer as it will be stored and replayed: no cookies, nothing redacted.
fn stored(provider: &Provider, answer: &Fetched) -> StoredResponse {
    let mut headers = answer.headers.clone();
    for name in [
        header::SET_COOKIE,
        header::HeaderName::from_static("set-cookie2"),
    ] {
        headers.remove(name);
    }
    for name in &provider.redact_headers {
        headers.remove(name);
    }
    for name in ["idem-operation-id", "idem-state", "idempotent-replayed"] {
        headers.remove(name);
    }
    if provider.protocol == Protocol::Mcp {
        // A replay answers another exchange, in its own session if any, with the response as
        // JSON (taken out of the stream when the server streamed).
        headers.remove("mcp-session-id");
        if answer.transcript.is_some() {
            let json = HeaderValue::from_static("application/json");
            headers.insert(header::CONTENT_TYPE, json);
        }
    }
    StoredResponse {
        status: answer.status.as_u16(),
        headers,
        body: answer.body.clone(),
    }
}

fn request_id(provider: &Provider, headers: &HeaderMap) -> Option<String> {
    let value = headers
        .get(provider.request_id_header.as_ref()?)?
        .to_str()
        .ok()?;
    Some(value.chars().take(200).collect())
}

/// What `persist` wrote: the state, and the operation when it is left `unknown` (for
/// `App::escalate`), copied on the writer thread only then.
struct Recorded {
    state: State,
    unknown: Option<Operation>,
}

/// What became of an attempt's result.
enum Persisted {
    Written(Recorded),
    /// A newer claim owns the operation (another replica orphaned this one's claim while
    /// its lease had lapsed): the result was not written, only, if the provider answered, a
    /// `provider.answered_late` event. The operation as it now is.
    Superseded(Option<Operation>),
}

/// Writes the result, only if this attempt still owns the claim; else only the event of a
/// late answer, which an operator must see: the provider may have acted on this attempt as
/// well as on the one that superseded it.
async fn persist(
    app: &App,
    provider: &Provider,
    ex: &Exchange,
    record: Record,
) -> Result<Persisted, crate::ledger::LedgerError> {
    let fence = ex.fence;
    let timeout = provider.timeout;
    // Hashed here, not in the closure: that runs on the ledger's single writer thread.
    let meta = record.response.as_ref().map(StoredResponse::meta);
    let late = record.late_event(ex.attempt);
    app.ledger
        .update(&ex.id, move |existing| match existing {
            Some(op) if op.fence == fence && op.state == State::InFlight => {
                let now = Timestamp::now();
                let write = settle(op, record, meta, timeout, now);
                let state = write.op.state;
                let unknown = (state == State::Unknown).then(|| write.op.clone());
                (Some(write), Persisted::Written(Recorded { state, unknown }))
            }
            Some(op) => {
                let seen = Persisted::Superseded(Some(op.clone()));
                (late.map(|ev| Write::of(op, vec![ev])), seen)
            }
            None => (None, Persisted::Superseded(None)),
        })
        .await
}

/// The answer of an attempt whose result a newer claim kept from being written: the
/// operation's stored answer if it has `succeeded` since, else `outcome-unknown` with the
/// state it is in now (`unknown` if it could not be read).
async fn superseded(
    app: &App,
    provider: &Provider,
    ex: &Exchange,
    now: Option<Operation>,
    mut ctx: Context,
) -> (Response<ProxyBody>, State) {
    let state = now.as_ref().map_or(State::Unknown, |op| op.state);
    ctx.state = Some(state);
    let id = ctx.operation_id.as_deref().unwrap_or_default();
    if state == State::Succeeded
        && let Ok(Some(stored)) = app.ledger.response(id).await
    {
        return (crate::answer::replay(stored, &ctx), state);
    }
    let case = unknown_case(provider, ex, now.as_ref());
    (
        crate::answer::refusal(Problem::OutcomeUnknown(case), &ctx),
        state,
    )
}

/// The write of an attempt's result on the operation `op` that it claimed. Pure.
///
/// An attempt that ended unknown marks the operation as one whose effect may have happened,
/// as late as it could have reached the provider. Once so marked, a later attempt's failure
/// proves only that *that* attempt did nothing: the operation stays `unknown` (key retention
/// still counted from the first dispatch) until reconciliation or an operator settles it.
fn settle(
    op: Operation,
    mut record: Record,
    meta: Option<crate::operation::ResponseMeta>,
    timeout: std::time::Duration,
    now: Timestamp,
) -> Write {
    let dispatched = op.last_dispatched_at.unwrap_or(op.created_at);
    let mut maybe_effect_at = op.maybe_effect_at;
    let state = match record.state {
        State::Unknown => {
            maybe_effect_at = Some(now.max(dispatched.plus(timeout)));
            State::Unknown
        }
        State::Failed if maybe_effect_at.is_some() => {
            let why = record.error.take().unwrap_or_else(|| "it failed".into());
            let detail = format!(
                "attempt {} did nothing ({why}), but an earlier attempt may have taken effect: the operation stays unknown",
                op.attempts
            );
            record
                .events
                .retain(|e| e.kind != EventKind::ResultPersisted);
            record.events.push(Event {
                at: now,
                kind: EventKind::Unknown,
                attempt: op.attempts,
                detail: detail.clone(),
            });
            record.events.push(Event {
                at: now,
                kind: EventKind::ResultPersisted,
                attempt: op.attempts,
                detail: State::Unknown.as_str().into(),
            });
            record.error = Some(detail);
            State::Unknown
        }
        state => state,
    };
    let request = match state {
        State::Succeeded => RequestChange::Erase,
        _ => RequestChange::Keep,
    };
    let op = Operation {
        state,
        updated_at: now,
        fence: 0,
        response: meta,
        error: record.error,
        maybe_effect_at,
        provider_request_id: record.request_id.or(op.provider_request_id),
        ..op
    };
    Write {
        op,
        events: record.events,
        response: record.response,
        request,
    }
}

/// The provider's own answer, with the operation's headers.
fn first_answer(answer: Fetched, ctx: &Context) -> Response<ProxyBody> {
    let mut resp = Response::new(full(answer.transcript.unwrap_or(answer.body)));
    *resp.status_mut() = answer.status;
    *resp.headers_mut() = answer.headers;
    crate::answer::op_headers(&mut resp, ctx, false);
    resp
}

/// `on_missing_id = "pass"`: sends the buffered request unguarded and streams the answer back.
pub async fn unguarded(app: &App, provider: &Provider, outgoing: Outgoing) -> Response<ProxyBody> {
    let mut resp = stream(app, provider, outgoing.request())
        .await
        .unwrap_or_else(|problem| {
            problem.into_response(&Context {
                provider: Some(provider.name.clone()),
                ..Context::default()
            })
        });
    resp.headers_mut()
        .insert("idem-state", HeaderValue::from_static("unguarded"));
    resp
}

/// Sends a request unguarded and streams the answer back, or the problem to answer instead
/// (its context, only needed then, is the caller's). `timeout` bounds the wait for the
/// response head, not the download.
///
/// Not an `async fn`: the exchange's future is mapped where it is, so a pass-through's future
/// holds no copy of the request beside the one the exchange holds.
pub fn stream(
    app: &App,
    provider: &Provider,
    out: Request<ProxyBody>,
) -> impl Future<Output = Result<Response<ProxyBody>, Problem>> {
    let sending = app
        .upstreams
        .send_within(&provider.name, out, provider.timeout);
    futures_util::FutureExt::map(sending, streamed)
}

/// What `stream` answers for the exchange's outcome.
fn streamed(
    sent: Result<Response<upstream::ProviderBody>, SendError>,
) -> Result<Response<ProxyBody>, Problem> {
    match sent {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            upstream::strip_hop_by_hop(&mut parts.headers);
            Ok(Response::from_parts(
                parts,
                body.map_err(BoxError::from).boxed(),
            ))
        }
        Err(SendError::Connect(why)) => Err(Problem::UpstreamUnreachable(why)),
        Err(e) => Err(Problem::UpstreamBroken(e.to_string())),
    }
}
