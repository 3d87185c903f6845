//! The settler (docs/reference.md section 5.5): settles `unknown` operations in the background, so an agent
//! whose SDK took a 202 for success, and never retries, still finds the result on its next
//! replay.
//!
//! Every `TICK` it walks the `unknown` operations and asks the same pure `decide` an agent's
//! replay would: where a re-send is allowed (a deduplicating provider inside `key_retention`,
//! with the margin for the send itself, or an idempotent route) it claims and re-sends the
//! kept first request with the operation's own key; where the route has a lookup it runs the
//! reconciliation; otherwise it leaves the operation to an operator. It leaves an operation
//! alone for its first two seconds as `unknown` (the agent's own retry goes first) and then
//! backs off per operation (1 s, 2 s, 4 s … up to `LONGEST`). The claim transaction is the same as an agent's, so a
//! settler and an agent racing on one operation never both send.
//!
//! Credentials never enter the ledger: the settler sends the headers of the operation's last
//! request, held in memory only (`Credentials`, lost at a restart), or the policy's
//! `settle_headers` read from the environment; with neither it does nothing.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;
use tokio::time::{Instant, MissedTickBehavior};

use crate::app::{App, Live};
use crate::claim::{Actor, Ask, Claimed, Step, claim};
use crate::clock::Timestamp;
use crate::decide::{Decision, Intent, Rules, decide};
use crate::dispatch::{self, NotBuilt};
use crate::fingerprint::{Fingerprint, LEGACY, Legacy};
use crate::kept::KeptRequest;
use crate::ledger::Filter;
use crate::operation::{Operation, State};
use crate::policy::{Provider, Route};

/// How often the settler looks for work.
const TICK: Duration = Duration::from_millis(500);
/// The first back-off after an action on an operation; it doubles up to `LONGEST`.
const FIRST: Duration = Duration::from_secs(1);
const LONGEST: Duration = Duration::from_secs(300);
/// How long an operation has been `unknown` before the settler acts: the agent's own retry,
/// which usually comes at once, goes first.
const QUIET: Duration = Duration::from_secs(2);
/// Unknown operations read per ledger page.
const PAGE: usize = 200;
/// What the settler did with one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Resent,
    Reconciled,
    /// Nothing allowed or nothing to send with: left for the agent or an operator.
    Left,
}

/// Settles the unknown operations until `stop` resolves, each pass with the current app
/// (the policies of the last reload).
pub async fn run(live: Arc<Live>, stop: impl Future) {
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut backoff: HashMap<String, (Duration, Instant)> = HashMap::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = ticker.tick() => pass(&live.current(), &mut backoff).await,
        }
    }
}

/// One walk over the unknown operations.
async fn pass(app: &Arc<App>, backoff: &mut HashMap<String, (Duration, Instant)>) {
    let filter = Filter {
        state: Some(State::Unknown),
        ..Filter::default()
    };
    let mut after: Option<String> = None;
    let mut seen = HashSet::new();
    // Taken before the first page is read: an operation whose caller's headers are remembered
    // after it may have turned unknown after its page was read, unseen here but not settled.
    let listed = app.credentials.mark();
    loop {
        let page = match app.ledger.list(&filter, PAGE, after.as_deref()).await {
            Ok(page) => page,
            Err(e) => {
                tracing::debug!(error = %e, "the settler could not list unknown operations");
                return;
            }
        };
        for op in page.ops {
            seen.insert(op.id.clone());
            let quiet = Timestamp::now().since(op.updated_at) >= QUIET;
            let due = backoff
                .get(&op.id)
                .is_none_or(|(_, at)| Instant::now() >= *at);
            if !(quiet && due) {
                continue;
            }
            let action = settle(app, op.clone()).await;
            // Nothing it may do yet is looked at again later, less and less often.
            let wait = match (action, backoff.get(&op.id)) {
                (_, Some((last, _))) => (*last * 2).min(LONGEST),
                (Action::Left, None) => FIRST * 4,
                (_, None) => FIRST,
            };
            backoff.insert(op.id, (wait, Instant::now() + wait));
        }
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    // Operations that left `unknown` need no back-off, nor their caller's headers.
    backoff.retain(|id, _| seen.contains(id));
    app.credentials.keep_only(listed, |id| seen.contains(id));
}

/// Settles one unknown operation if the rules allow and credentials are at hand.
async fn settle(app: &Arc<App>, op: Operation) -> Action {
    let Some((provider, route)) = route_of(app, &op) else {
        return Action::Left;
    };
    // Recorded by an older version (bound to no caller, or unkeyed): only a caller's own
    // request can bring it up to date.
    let Some(principal) = op.principal.clone() else {
        return Action::Left;
    };
    if op.fingerprint.starts_with(LEGACY) {
        return Action::Left;
    }
    let legacy = Legacy::default();
    let intent = Intent {
        fingerprint: &op.fingerprint,
        fields: &op.fields,
        principal: &principal,
        legacy: &legacy,
    };
    let rules = Rules::of(provider, route);
    match decide(Some(&op), intent, rules, Timestamp::now()) {
        Decision::Resend(_) => resend(app, provider, route, op).await,
        Decision::Reconcile => reconcile(app, provider, route, op).await,
        _ => Action::Left,
    }
}

fn route_of<'a>(app: &'a App, op: &Operation) -> Option<(&'a Provider, &'a Route)> {
    let provider = app.provider(&op.provider)?;
    let route = provider.routes.iter().find(|r| r.name == op.route)?;
    Some((provider, route))
}

/// The caller's headers from memory, else the policy's `settle_headers`, else none.
fn headers_for(app: &App, provider: &Provider, id: &str) -> Option<HeaderMap> {
    if let Some(headers) = app.credentials.get(id) {
        return Some(headers);
    }
    if provider.settle_headers.is_empty() {
        return None;
    }
    let mut headers = HeaderMap::new();
    for (name, template) in &provider.settle_headers {
        let value = match template.expand() {
            Ok(value) => value,
            Err(var) => {
                tracing::warn!(provider = %provider.name, variable = %var, "settle_headers names an unset environment variable; the settler waits for the agent");
                return None;
            }
        };
        headers.insert(name.clone(), http::HeaderValue::from_str(&value).ok()?);
    }
    // The same hygiene an agent's guarded request gets (Via, identity encoding).
    crate::upstream::forwarding_headers(&mut headers, &app.via, http::Version::HTTP_11, true);
    Some(headers)
}

/// Claims the next attempt (the same transaction an agent's replay runs) and re-sends the
/// kept first request.
async fn resend(app: &Arc<App>, provider: &Provider, route: &Route, op: Operation) -> Action {
    let Some(headers) = headers_for(app, provider, &op.id) else {
        return Action::Left;
    };
    let Some(kept) = kept(app, &op.id).await else {
        return Action::Left;
    };
    let ask = Ask {
        id: op.id.clone(),
        key: op.idempotency_key.clone(),
        placement: op
            .key_placement
            .clone()
            .unwrap_or_else(|| provider.key.clone()),
        fingerprint: Fingerprint {
            hex: op.fingerprint.clone(),
            fields: op.fields.clone(),
            legacy: Legacy::default(),
        },
        principal: op.principal.clone().unwrap_or_default(),
        first: None,
        actor: Actor::Settler,
    };
    match claim(app, provider, route, ask).await {
        Ok(Step::Dispatch(claimed)) => {
            send(app, provider, &op, kept, headers, claimed).await;
            Action::Resent
        }
        _ => Action::Left,
    }
}

/// Runs the route's lookup; a proven absence claims a re-send of the kept request.
async fn reconcile(app: &Arc<App>, provider: &Provider, route: &Route, op: Operation) -> Action {
    let Some(headers) = headers_for(app, provider, &op.id) else {
        return Action::Left;
    };
    // Without the kept request a proven absence could not be re-sent: leave it to the agent.
    let Some(kept) = kept(app, &op.id).await else {
        return Action::Left;
    };
    let captures = captures(provider, route, &kept).unwrap_or_default();
    let verdict = crate::reconcile::run(app, provider, route, &captures, &op.id, &headers).await;
    app.metrics
        .settler(&provider.name, &route.name, "reconciled");
    if let crate::reconcile::Verdict::Resend(claimed) = verdict {
        send(app, provider, &op, kept, headers, claimed).await;
    }
    Action::Reconciled
}

async fn kept(app: &App, id: &str) -> Option<KeptRequest> {
    let sealed = app.ledger.kept_request(id).await.ok()??;
    KeptRequest::open(&app.secret, id, &sealed)
}

/// The route's captures, from the kept request's path below the upstream's base path.
fn captures(
    provider: &Provider,
    route: &Route,
    kept: &KeptRequest,
) -> Option<crate::policy::Captures> {
    let path = kept.path_and_query.split('?').next()?;
    let rel = crate::path::below(path, &provider.upstream.base_path)?;
    route.matcher.matches(&kept.method, rel)
}

/// Sends the claimed attempt on the proxy's background tracker, so shutdown lets it finish.
async fn send(
    app: &Arc<App>,
    provider: &Provider,
    op: &Operation,
    kept: KeptRequest,
    headers: HeaderMap,
    claimed: Claimed,
) {
    let placement = claimed.placement.as_ref().unwrap_or(&provider.key);
    let outgoing = kept
        .resend(provider, headers, &claimed.key, Some(placement))
        .map_err(NotBuilt::from);
    let exchange = dispatch::Exchange {
        route: op.route.clone(),
        id: op.id.clone(),
        fence: claimed.fence,
        permit: claimed.permit,
        attempt: claimed.attempt,
        outgoing,
        by_settler: true,
    };
    app.metrics.settler(&provider.name, &op.route, "resent");
    crate::crash_point!("settle.resend");
    let task_app = app.clone();
    let provider_name = provider.name.clone();
    let done = app.background.spawn(async move {
        if let Some(provider) = task_app.provider(&provider_name) {
            dispatch::run(&task_app, provider, exchange).await;
        }
    });
    let _ = done.await;
}
