//! The ledger protocol for guarded routes (docs/reference.md section 5.3), step by step.
//!
//! `handle` reads top to bottom: read the body, identify the operation, decide in one ledger
//! transaction, then dispatch, replay, wait or refuse. Nothing reaches the provider unless its
//! claim is committed first. From the claim on, the work runs detached from the agent's
//! connection (the claim and its attempt together; the exchange itself lives in `dispatch`),
//! so an agent that hangs up never leaves an operation claimed and unsent, nor an answer
//! unrecorded.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response, header};
use hyper::body::Incoming;
use tokio::sync::broadcast;

use crate::answer::{refusal, replay};
use crate::app::App;
use crate::budget::{self, Reservation, Unread};
use crate::claim::{self, Actor, Ask, Claimed, NO_FIELDS, NO_LEGACY, Probe, Step, claim};
use crate::clock::Timestamp;
use crate::decide::{Rules, unknown_next};
use crate::dispatch::{self, NotBuilt};
use crate::kept::Outgoing;
use crate::kept::{KeptRequest, Unbuildable, place_key};
use crate::operation::{Operation, State, StoredResponse};
use crate::policy::{Captures, Provider, Route};
use crate::problem::{Context, Problem, Unknown};
use crate::wire::ProxyBody;

mod identify;

use identify::{Named, identify};

/// Where a request goes: the provider, the route-relative path and the matched route.
pub struct Target<'a> {
    pub provider: &'a Provider,
    pub rel_path: String,
    pub route: Option<(&'a Route, Captures)>,
}

/// An answer and the `outcome` label it counts under.
pub type Answer = (Response<ProxyBody>, &'static str);

/// A guarded request whose body has been read: identified, or let through unguarded.
enum Identity {
    Op(Box<Named>),
    /// No template applies and `on_missing_id = "pass"`.
    Pass(Box<Outgoing>),
}

/// A guarded request whose operation is identified: what its claim is asked (the key a new
/// operation gets, placed where today's policy says, its fingerprint, principal and kept
/// first request), built once and moved into the claim, and the requests it may send.
struct Identified {
    ask: Ask,
    requests: Requests,
}

/// The requests an identified operation may send.
struct Requests {
    id: String,
    /// The request as it came, cleaned, without a key: the base of a re-send whose first
    /// request is no longer kept, and the source of the caller's headers for any re-send.
    plain: Outgoing,
    /// The request with the new key in place: what attempt 1 sends.
    first: Outgoing,
}

/// A request whose body has been buffered (step 1), its bytes reserved in the
/// buffered-bytes budget until the request is done.
pub struct Read {
    pub parts: Parts,
    pub bytes: Bytes,
    pub reserved: Reservation,
}

/// Serves one request on `route`, a guarded route matched by `target`.
pub async fn handle(
    app: &Arc<App>,
    target: &Target<'_>,
    route: &Route,
    captures: &Captures,
    req: Request<Incoming>,
) -> Answer {
    match read_body(app, req).await {
        Ok(read) => handle_read(app, target, route, captures, read).await,
        Err(problem) => refused(target, route, problem, Context::default()),
    }
}

/// `handle` for a request whose body was read to find its route (an MCP tool call).
pub async fn handle_read(
    app: &Arc<App>,
    target: &Target<'_>,
    route: &Route,
    captures: &Captures,
    read: Read,
) -> Answer {
    // The provider and the route are named in refusals only: `run` fills in the rest.
    let mut ctx = Context::default();
    match run(app, target, route, captures, read, &mut ctx).await {
        Ok(answer) => answer,
        Err(problem) => refused(target, route, problem, ctx),
    }
}

fn refused(target: &Target<'_>, route: &Route, problem: Problem, mut ctx: Context) -> Answer {
    ctx.provider = Some(target.provider.name.clone());
    ctx.route = Some(route.name.clone());
    if matches!(problem, Problem::LedgerUnavailable(_)) {
        // The state could not be read now (docs/reference.md section 6.1): not the one a
        // waiting duplicate read before the ledger went away.
        ctx.state = None;
    }
    let outcome = outcome_of(&problem);
    (refusal(problem, &ctx), outcome)
}

async fn run(
    app: &Arc<App>,
    target: &Target<'_>,
    route: &Route,
    captures: &Captures,
    read: Read,
    ctx: &mut Context,
) -> Result<Answer, Problem> {
    let provider = target.provider;
    // The body's bytes stay reserved in the buffered-bytes budget until the request is done.
    let Read {
        parts,
        bytes,
        reserved: _reserved,
    } = read;
    let named = match identify(app, provider, route, target, captures, parts, bytes)? {
        Identity::Op(named) => *named,
        Identity::Pass(outgoing) => {
            return Ok((
                Box::pin(dispatch::unguarded(app, provider, *outgoing)).await,
                "passthrough",
            ));
        }
    };
    ctx.operation_id = Some(named.id.clone());
    let probe = Probe {
        id: &named.id,
        fingerprint: &named.hex,
        fields: &NO_FIELDS,
        legacy: &NO_LEGACY,
        principal: &named.principal,
        actor: Actor::Agent,
    };
    // Nothing is written for these, so nothing is lost if the agent leaves: no detached task.
    match claim::answer_from_snapshot(app, provider, route, &probe).await {
        Some(Step::Replay(stored)) => {
            ctx.state = Some(State::Succeeded);
            return Ok((replay(stored, ctx), "replayed"));
        }
        Some(Step::Refuse(problem, state)) => {
            ctx.state = Some(state);
            return Err(problem);
        }
        _ => {}
    }
    let op = named.complete(app, provider, route, target)?;
    let names = RouteByName {
        provider: provider.name.clone(),
        route: route.name.clone(),
        captures: captures.clone(),
    };
    let caller = op.requests.plain.headers.clone();
    let next = detached(app, names, op).await?;
    if next.leaves_this_caller_unknown() {
        // For the settler, which may re-send or look it up with these (memory only).
        let id = ctx.operation_id.as_deref().unwrap_or_default();
        if let Next::Refuse(Problem::OutcomeUnknown(_), _) = &next {
            app.held.note(id, Timestamp::now());
        }
        app.credentials.remember(id, caller);
    }
    match next {
        Next::Sent(resp, _) => Ok((resp, "forwarded")),
        Next::Replay(stored) => Ok((
            replay(stored, &ctx.with_state(State::Succeeded)),
            "replayed",
        )),
        Next::Wait => Box::pin(wait(app, Rules::of(provider, route), ctx)).await,
        Next::Refuse(problem, state) => {
            ctx.state = Some(state);
            Err(problem)
        }
    }
}

impl Next {
    /// Whether the operation is left `unknown` for this request's caller: its attempt ended
    /// unknown, or it was told to wait as the operation's own caller. Never a refusal of
    /// another caller or other parameters (`403`, `409`): the settler must not act with the
    /// credentials of a caller the operation is not bound to.
    fn leaves_this_caller_unknown(&self) -> bool {
        match self {
            Next::Sent(_, state) => *state == State::Unknown,
            Next::Refuse(problem, state) => *state == State::Unknown && problem.is_pending(),
            Next::Replay(_) | Next::Wait => false,
        }
    }
}

/// The route a detached task works for, by name (the task cannot borrow the request's).
struct RouteByName {
    provider: String,
    route: String,
    captures: Captures,
}

impl RouteByName {
    fn lookup<'a>(&self, app: &'a App) -> Result<(&'a Provider, &'a Route), Problem> {
        let provider = app.provider(&self.provider);
        let route = provider.and_then(|p| p.routes.iter().find(|r| r.name == self.route));
        match (provider, route) {
            (Some(provider), Some(route)) => Ok((provider, route)),
            // The configuration is immutable while serving; this cannot happen.
            _ => Err(Problem::LedgerUnavailable(
                "the route is not configured".into(),
            )),
        }
    }
}

/// What is left for the handler once the claim (and any attempt it allowed) is done.
enum Next {
    /// An attempt ran: the provider's answer, or the problem it ended in, and the state the
    /// operation is in after it.
    Sent(Response<ProxyBody>, State),
    Replay(StoredResponse),
    Wait,
    Refuse(Problem, State),
}

/// Steps 2 and 3 on a task of `App::background`, detached from the agent's connection.
///
/// hyper drops the handler's future when the agent hangs up, and a ledger update runs to
/// its commit once polled: were the claim awaited here, an agent leaving during the commit
/// would leave the operation `in_flight` with nothing sent, refusing every replay as
/// `in-flight` and, after a restart, holding it as `unknown`. So the claim and the attempt
/// it allows (or the reconciliation it asks for) run together, to their end.
///
/// Spawned when called, not when first polled: the task's future (claim and attempt, a few
/// KB) is built on this function's stack and boxed, so the handler's own future, allocated
/// and copied for every guarded request, only holds the receiver. Boxed, because tokio moves
/// a task's future by value into its cell and writes its stage over whole several times in
/// the task's life: each a block copy of the future's size, a pointer's once boxed.
fn detached(
    app: &Arc<App>,
    names: RouteByName,
    op: Identified,
) -> impl Future<Output = Result<Next, Problem>> + use<> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task_app = app.clone();
    app.background.spawn(Box::pin(async move {
        let _ = tx.send(claim_and_send(&task_app, &names, op).await);
    }));
    async move {
        rx.await.unwrap_or_else(|_| {
            Err(Problem::LedgerUnavailable(
                "the claim ended without an answer".into(),
            ))
        })
    }
}

async fn claim_and_send(
    app: &Arc<App>,
    names: &RouteByName,
    op: Identified,
) -> Result<Next, Problem> {
    let (provider, route) = names.lookup(app)?;
    let Identified { ask, requests } = op;
    match claim(app, provider, route, ask).await? {
        Step::Dispatch(claimed) => {
            let (resp, state) = send(app, provider, names, requests, claimed).await;
            Ok(Next::Sent(resp, state))
        }
        // Boxed, a rare branch: its lookup would otherwise nearly double the task's future.
        Step::Reconcile => Box::pin(reconcile(app, provider, route, names, requests)).await,
        Step::Replay(stored) => Ok(Next::Replay(stored)),
        Step::Wait => Ok(Next::Wait),
        Step::Refuse(problem, state) => Ok(Next::Refuse(problem, state)),
    }
}

/// Step 2 (b): an unknown operation the provider may be asked about.
async fn reconcile(
    app: &Arc<App>,
    provider: &Provider,
    route: &Route,
    names: &RouteByName,
    op: Requests,
) -> Result<Next, Problem> {
    let verdict = crate::reconcile::run(
        app,
        provider,
        route,
        &names.captures,
        &op.id,
        &op.plain.headers,
    )
    .await;
    Ok(match verdict {
        crate::reconcile::Verdict::Found(stored) => Next::Replay(stored),
        crate::reconcile::Verdict::Resend(claimed) => {
            let (resp, state) = send(app, provider, names, op, claimed).await;
            Next::Sent(resp, state)
        }
        // Not found yet: the next request asks again.
        crate::reconcile::Verdict::Unknown => {
            Next::Refuse(Problem::OutcomeUnknown(Unknown::LookedUp), State::Unknown)
        }
    })
}

/// Step 3: the claimed attempt, sent and recorded by `dispatch`.
async fn send(
    app: &Arc<App>,
    provider: &Provider,
    names: &RouteByName,
    op: Requests,
    claimed: Claimed,
) -> (Response<ProxyBody>, State) {
    let outgoing = match claimed.first {
        true => Ok(op.first),
        // Boxed, as a re-send is rare: reading the kept request would otherwise make every
        // first attempt's future larger.
        false => Box::pin(resend_request(app, provider, &op.id, op.plain, &claimed)).await,
    };
    let exchange = dispatch::Exchange {
        route: names.route.clone(),
        id: op.id,
        fence: claimed.fence,
        permit: claimed.permit,
        attempt: claimed.attempt,
        outgoing,
        by_settler: false,
    };
    dispatch::run(app, provider, exchange).await
}

/// A later attempt of operation `id`: its kept first request (method, path, query, body)
/// with the caller's current `headers` and the operation's own key where it first went; if
/// nothing is kept (an operation recorded before requests were kept), the current request
/// with the operation's own key.
pub async fn resend_request(
    app: &App,
    provider: &Provider,
    id: &str,
    plain: Outgoing,
    claimed: &Claimed,
) -> Result<Outgoing, NotBuilt> {
    let placement = claimed.placement.as_ref().unwrap_or(&provider.key);
    let sealed = app.ledger.kept_request(id).await?;
    let outgoing = match sealed {
        Some(sealed) => match KeptRequest::open(&app.secret, id, &sealed) {
            Some(kept) => kept.resend(provider, plain.headers, &claimed.key, Some(placement)),
            None => Err(Unbuildable::Sealed),
        },
        None => place_key(plain, &claimed.key, placement),
    };
    Ok(outgoing?)
}

/// Step 1: the body, buffered up to `max_request_body` within `body_timeout`, its bytes
/// reserved in `max_buffered`.
pub async fn read_body(app: &App, req: Request<Incoming>) -> Result<Read, Problem> {
    let limits = &app.config.limits;
    let (limit, after) = (limits.max_request_body, limits.inbound.body_timeout);
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let (parts, body) = req.into_parts();
    let read_limits = budget::BodyLimits {
        declared,
        max: limit,
        timeout: after,
    };
    let (bytes, reserved) =
        budget::read(&app.budget, body, read_limits)
            .await
            .map_err(|unread| match unread {
                Unread::TooLarge => Problem::BodyTooLarge { limit },
                Unread::Overloaded => Problem::Overloaded,
                Unread::TimedOut => Problem::BodyTimeout { after },
                Unread::Broken(_) => {
                    Problem::InvalidBody("the request body could not be read to its end".into())
                }
            })?;
    if parts.version == http::Version::HTTP_2 {
        // hyper ends an HTTP/2 body at a `RST_STREAM(NO_ERROR)` as if it were complete (a
        // server's way to stop an upload early), so a client's reset mid-body reads as a
        // short body. One turn back to hyper lets it see the reset and drop this request
        // before anything of it is claimed; a stream that ended properly goes on.
        tokio::task::yield_now().await;
    }
    Ok(Read {
        parts,
        bytes,
        reserved,
    })
}

/// Why a request whose form body carries `_method` is refused.
pub(crate) const OVERRIDDEN_BY_FORM: &str = "is overridden by the `_method` form field";

/// How often a duplicate re-reads a shared ledger, where another replica may record the
/// result without this process hearing of it.
const SHARED_POLL: Duration = Duration::from_millis(75);

/// A duplicate of an in-flight operation waits for its result, up to `in_flight_wait`: it
/// re-reads the ledger when this process records an attempt of it, and with a shared ledger
/// also every `SHARED_POLL`.
async fn wait(app: &App, rules: Rules, ctx: &mut Context) -> Result<Answer, Problem> {
    let id = ctx.operation_id.clone().unwrap_or_default();
    let deadline = tokio::time::Instant::now() + app.config.limits.in_flight_wait;
    let poll = app.ledger.shared().then_some(SHARED_POLL);
    let mut completions = app.completions.subscribe();
    loop {
        let op = app
            .ledger
            .get(&id)
            .await
            .map_err(|e| Problem::LedgerUnavailable(e.to_string()))?
            .ok_or_else(|| Problem::LedgerUnavailable("the operation vanished".into()))?;
        ctx.state = Some(op.state);
        if op.state != State::InFlight {
            return settled(app, &op, rules, ctx).await;
        }
        if !finished(&mut completions, &id, deadline, poll).await {
            return Err(Problem::InFlight);
        }
    }
}

/// Waits until an attempt of `id` may have been recorded (its completion, completions missed
/// by falling behind, or `poll` elapsed); `false` once `deadline` passes first.
async fn finished(
    completions: &mut broadcast::Receiver<Arc<str>>,
    id: &str,
    deadline: tokio::time::Instant,
    poll: Option<Duration>,
) -> bool {
    let until = match poll {
        Some(every) => deadline.min(tokio::time::Instant::now() + every),
        None => deadline,
    };
    loop {
        match tokio::time::timeout_at(until, completions.recv()).await {
            Ok(Ok(done)) if &*done == id => return true,
            Ok(Ok(_)) => {}
            Ok(Err(broadcast::error::RecvError::Lagged(_))) => return true,
            Ok(Err(broadcast::error::RecvError::Closed)) => return false,
            Err(_) => return until < deadline,
        }
    }
}

/// The answer for an operation that finished while we waited.
async fn settled(
    app: &App,
    op: &Operation,
    rules: Rules,
    ctx: &Context,
) -> Result<Answer, Problem> {
    // A stored response belongs to the last attempt only if the operation says it has one.
    let stored = match op.response {
        Some(_) => app
            .ledger
            .response(&op.id)
            .await
            .map_err(|e| Problem::LedgerUnavailable(e.to_string()))?,
        None => None,
    };
    match (op.state, stored) {
        (State::Succeeded | State::Failed, Some(stored)) => Ok((replay(stored, ctx), "replayed")),
        (State::Failed, None) => Err(Problem::UpstreamUnreachable(
            op.error
                .clone()
                .unwrap_or_else(|| "the provider could not be reached".into()),
        )),
        (State::Prepared, _) => Err(Problem::AwaitingApproval),
        _ => Err(Problem::OutcomeUnknown(unknown_next(
            op,
            rules,
            Timestamp::now(),
        ))),
    }
}

/// The metrics outcome of a refusal.
fn outcome_of(problem: &Problem) -> &'static str {
    match problem {
        Problem::ParameterMismatch { .. } => "conflict",
        Problem::OutcomeUnknown(_) | Problem::InFlight | Problem::AwaitingApproval => "pending",
        Problem::UpstreamUnreachable(_) | Problem::UpstreamBroken(_) => "forwarded",
        _ => "rejected",
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn soon() -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_millis(200)
    }

    #[tokio::test]
    async fn a_waiter_wakes_for_its_own_operation_only() {
        let (tx, mut rx) = broadcast::channel::<Arc<str>>(8);
        tx.send(Arc::from("p/r/other")).unwrap();
        tx.send(Arc::from("p/r/mine")).unwrap();
        assert!(finished(&mut rx, "p/r/mine", soon(), None).await);
        tx.send(Arc::from("p/r/other")).unwrap();
        assert!(
            !finished(&mut rx, "p/r/mine", soon(), None).await,
            "others' completions time out"
        );
    }

    #[tokio::test]
    async fn a_waiter_that_fell_behind_rereads() {
        let (tx, mut rx) = broadcast::channel::<Arc<str>>(2);
        for _ in 0..5 {
            tx.send(Arc::from("p/r/other")).unwrap();
        }
        assert!(
            finished(&mut rx, "p/r/mine", soon(), None).await,
            "missed completions may be its own"
        );
    }
}
