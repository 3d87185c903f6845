//! Reconciliation (docs/reference.md sections 3.4 and 5.5): asking the provider whether the
//! effect of an `unknown` operation happened.
//!
//! This module owns the lookup exchange and what its answer proves: a `found` pointer present
//! in a 200 answer proves the effect (the operation becomes `succeeded` with that JSON as its
//! stored body); a not-found answer (200 without it, or 404) proves absence only once
//! `not_found_final_after` has passed since the last dispatch (the operation is then claimed
//! again for a re-send). Each verdict is written in one ledger update that re-checks the
//! operation is still the `unknown` one the lookup was about, so two replays reconciling at
//! once never both re-send. It never sends the operation itself (the guard does, after
//! `Verdict::Resend`) and never guesses: any other answer leaves the operation `unknown`.
//! A lookup run at once after a `means = "reconcile"` answer (`at_once`) may read that answer
//! and never claims a re-send. A lookup may read the operation's kept first request (opened
//! here with the installation secret, only when a template reads it); its values are never
//! logged or stored. The lookup's URL is built in `uri`.

use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Uri, header};

use crate::app::App;
use crate::claim::{Claimed, claimed};
use crate::clock::Timestamp;
use crate::kept::KeptRequest;
use crate::ledger::{Fences, Permit};
use crate::operation::{
    Event, EventKind, Logged, Operation, RequestChange, ResponseMeta, State, StoredResponse, Write,
};
use crate::policy::{Captures, Provider, Reconcile, Route};
use crate::upstream::{self, SendError};
use crate::wire::{collect_limited, full};

mod uri;

use uri::{First, LookupVars, lookup_uri, reads_request};

/// What a lookup proved.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The effect exists; its body is now the stored response.
    Found(StoredResponse),
    /// Proven absent: the operation was claimed again for this attempt.
    Resend(Claimed),
    /// Nothing proven.
    Unknown,
}

/// What a lookup answer says about the effect.
#[derive(Debug, Clone, PartialEq)]
pub enum Finding {
    /// A 200 whose `found` pointer holds this value (not `null`, `[]` or `{}`).
    Found(serde_json::Value),
    /// A 200 without the pointer (or with `null`, `[]` or `{}` there), or a 404.
    NotFound,
}

/// Why a lookup proved nothing.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("the lookup template cannot be rendered: {0}")]
    Template(String),
    #[error("the lookup URL is not valid: {0}")]
    Uri(#[from] http::uri::InvalidUri),
    #[error(transparent)]
    Send(#[from] SendError),
    #[error("the lookup answered status {0}, which proves neither presence nor absence")]
    Status(u16),
    #[error("the lookup's 200 answer is not readable JSON: {0}")]
    Body(String),
}

/// The operation as the lookup found it; a verdict is written only if it is still this one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    fingerprint: String,
    /// The operation's own key, as every attempt sent it (whatever the policy says today).
    key: String,
    attempts: u32,
    last_dispatched_at: Option<Timestamp>,
}

/// Reconciles the `unknown` operation `id` of `route` (docs/reference.md section 5.5).
///
/// `captures` and `headers` come from the replayed request; of the headers (already cleaned
/// by `upstream::outbound_headers`) only `Authorization` is sent with the lookup, since a real
/// provider needs its API key to answer it. Records `reconcile.started` first; then, in one
/// update that checks the operation is still `unknown` with the same fingerprint: `found`
/// (state `succeeded`, the found JSON stored as a 200 `application/json` response), a final
/// `not_found` (claimed again: `Resend`), or a `not_found` that is too early to count. Every
/// other outcome (no reconcile rule, a template or URL that cannot be built, a connect error,
/// a timeout, another status, unreadable JSON, a ledger failure) is `Unknown` with an info
/// log line. An operation that is no longer `unknown` when the verdict is written is answered
/// as it now stands: its stored response if it `succeeded`, else `Unknown`.
pub async fn run(
    app: &App,
    provider: &Provider,
    route: &Route,
    captures: &Captures,
    id: &str,
    headers: &HeaderMap,
) -> Verdict {
    look(app, provider, route, captures, id, headers, None).await
}

/// Reconciles at once the operation `id` whose attempt the provider just answered with an
/// answer a `means = "reconcile"` rule matched (recorded `unknown` already): the lookup may
/// read that answer as `{answer:/pointer}`, which is held in memory for this only. As `run`,
/// except that a not-found never claims a re-send: right after the provider's own answer it
/// proves nothing, so the operation stays `unknown`.
pub async fn at_once(
    app: &App,
    provider: &Provider,
    route: &Route,
    captures: &Captures,
    id: &str,
    headers: &HeaderMap,
    answer: &serde_json::Value,
) -> Verdict {
    look(app, provider, route, captures, id, headers, Some(answer)).await
}

async fn look(
    app: &App,
    provider: &Provider,
    route: &Route,
    captures: &Captures,
    id: &str,
    headers: &HeaderMap,
    answer: Option<&serde_json::Value>,
) -> Verdict {
    let Some(rule) = &route.reconcile else {
        return Verdict::Unknown;
    };
    let seen = match start(app, id).await {
        Ok(Some(seen)) => seen,
        Ok(None) => return settled(app, id).await,
        Err(e) => {
            tracing::warn!(operation = %Logged(id), error = %e, "reconciliation could not start");
            return Verdict::Unknown;
        }
    };
    let first = match reads_request(rule) {
        true => first_request(app, id).await,
        false => None,
    };
    let names = LookupVars {
        provider: &provider.name,
        route: &route.name,
        id,
        key: &seen.key,
        fingerprint: &seen.fingerprint,
        answer,
        first: first.as_ref(),
    };
    let may_resend = answer.is_none();
    let answer = match lookup_uri(provider, rule, captures, &names) {
        Ok((method, uri)) => lookup(app, provider, rule, method, uri, headers).await,
        Err(e) => Err(e),
    };
    let answer = match answer {
        Ok(answer) => answer,
        Err(e) => {
            tracing::info!(operation = %Logged(id), error = %e, "reconciliation proved nothing; the operation stays unknown");
            return Verdict::Unknown;
        }
    };
    tracing::info!(operation = %Logged(id), found = matches!(answer, Finding::Found(_)), "reconciliation lookup answered");
    crate::crash_point!("reconcile.answered");
    conclude(app, id, seen, rule, answer, may_resend).await
}

/// The operation's kept first request, for templates that read its body or query; `None`
/// when none is kept (erased, or recorded before requests were kept) or it cannot be read.
async fn first_request(app: &App, id: &str) -> Option<First> {
    let sealed = match app.ledger.kept_request(id).await {
        Ok(sealed) => sealed?,
        Err(e) => {
            tracing::warn!(operation = %Logged(id), error = %e, "the kept first request could not be read for the lookup");
            return None;
        }
    };
    let Some(kept) = KeptRequest::open(&app.secret, id, &sealed) else {
        tracing::warn!(operation = %Logged(id), "the kept first request cannot be opened with this installation's secret");
        return None;
    };
    Some(First::of(kept))
}

/// Records `reconcile.started` if the operation is still `unknown`; `None` when it is not.
async fn start(app: &App, id: &str) -> Result<Option<Seen>, crate::ledger::LedgerError> {
    let now = Timestamp::now();
    app.ledger
        .update(id, move |existing| match existing {
            Some(op) if op.state == State::Unknown => {
                let seen = Seen {
                    fingerprint: op.fingerprint.clone(),
                    key: op.idempotency_key.clone(),
                    attempts: op.attempts,
                    last_dispatched_at: op.last_dispatched_at,
                };
                let ev = event(
                    now,
                    EventKind::ReconcileStarted,
                    op.attempts,
                    "asking the provider whether the effect happened".into(),
                );
                (Some(only_events(op, vec![ev])), Some(seen))
            }
            _ => (None, None),
        })
        .await
}

/// Writes the verdict of `answer` in one update that re-checks the operation.
/// The clock is read inside the transaction, so finality is judged at the moment of the write.
async fn conclude(
    app: &App,
    id: &str,
    seen: Seen,
    rule: &Reconcile,
    answer: Finding,
    may_resend: bool,
) -> Verdict {
    let final_after = rule.not_found_final_after;
    let written = match answer {
        Finding::Found(value) => {
            let stored = found_response(&value);
            // Hashed here, not in the closure: that runs on the ledger's single writer thread.
            let meta = stored.meta();
            app.ledger
                .update(id, move |op| {
                    found(op, &seen, stored, meta, Timestamp::now())
                })
                .await
        }
        Finding::NotFound => {
            let fences = Claiming {
                fences: app.ledger.fences(),
                permit: app.ledger.permit(),
            };
            app.ledger
                .update(id, move |op| {
                    let final_after = may_resend.then_some(final_after);
                    not_found(op, &seen, final_after, &fences, Timestamp::now())
                })
                .await
        }
    };
    match written {
        Ok(Some(verdict)) => verdict,
        Ok(None) => settled(app, id).await,
        Err(e) => {
            tracing::warn!(operation = %Logged(id), error = %e, "the reconciliation verdict could not be recorded");
            Verdict::Unknown
        }
    }
}

/// An operation that left `unknown` while we looked: its stored response if it succeeded.
async fn settled(app: &App, id: &str) -> Verdict {
    let Ok(Some(op)) = app.ledger.get(id).await else {
        return Verdict::Unknown;
    };
    if op.state != State::Succeeded {
        return Verdict::Unknown;
    }
    match app.ledger.response(id).await {
        Ok(Some(stored)) => Verdict::Found(stored),
        _ => Verdict::Unknown,
    }
}

/// Sends the lookup within the provider's `timeout` and reads what it proves.
async fn lookup(
    app: &App,
    provider: &Provider,
    rule: &Reconcile,
    method: Method,
    uri: Uri,
    agent_headers: &HeaderMap,
) -> Result<Finding, LookupError> {
    let mut req = Request::new(full(Bytes::new()));
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    if let Some(auth) = agent_headers.get(header::AUTHORIZATION) {
        req.headers_mut()
            .insert(header::AUTHORIZATION, auth.clone());
    }
    req.headers_mut()
        .insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    // A found body is stored and replayed: the same hygiene as a guarded request.
    upstream::forwarding_headers(req.headers_mut(), &app.via, http::Version::HTTP_11, true);
    let max = app.config.limits.max_stored_response;
    let started = Instant::now();
    let exchange = async {
        let resp = app.upstreams.send(&provider.name, req).await?;
        let status = resp.status().as_u16();
        let body = collect_limited(resp.into_body(), max)
            .await
            .map_err(|e| LookupError::Body(e.to_string()))?;
        classify(status, &body, &rule.found)
    };
    let answer = tokio::time::timeout(provider.timeout, exchange).await;
    app.metrics.upstream(&provider.name, started.elapsed());
    answer.unwrap_or(Err(LookupError::Send(SendError::Timeout(provider.timeout))))
}

/// What a lookup answer proves. Pure.
pub fn classify(status: u16, body: &[u8], pointer: &str) -> Result<Finding, LookupError> {
    match status {
        200 => {
            let value: serde_json::Value =
                serde_json::from_slice(body).map_err(|e| LookupError::Body(e.to_string()))?;
            match value.pointer(pointer) {
                Some(found) if !empty(found) => Ok(Finding::Found(found.clone())),
                _ => Ok(Finding::NotFound),
            }
        }
        404 => Ok(Finding::NotFound),
        other => Err(LookupError::Status(other)),
    }
}

/// `null`, `[]` and `{}`: nothing was found (an empty list is no effect).
fn empty(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Null => true,
        serde_json::Value::Array(items) => items.is_empty(),
        serde_json::Value::Object(members) => members.is_empty(),
        _ => false,
    }
}

/// The found JSON as the response every later replay gets.
fn found_response(value: &serde_json::Value) -> StoredResponse {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    StoredResponse {
        status: 200,
        headers,
        body: Bytes::from(value.to_string()),
    }
}

/// The write of a found effect, if the operation is still the one looked up. Pure.
fn found(
    existing: Option<Operation>,
    seen: &Seen,
    stored: StoredResponse,
    meta: ResponseMeta,
    now: Timestamp,
) -> (Option<Write>, Option<Verdict>) {
    let Some(op) = existing.filter(|op| still_unknown(op, seen)) else {
        return (None, None);
    };
    let events = vec![
        event(
            now,
            EventKind::ReconcileFound,
            op.attempts,
            "the provider's lookup found the effect; its answer is now the stored response".into(),
        ),
        event(
            now,
            EventKind::ResultPersisted,
            op.attempts,
            "succeeded".into(),
        ),
    ];
    let op = Operation {
        state: State::Succeeded,
        updated_at: now,
        fence: 0,
        response: Some(meta),
        error: None,
        ..op
    };
    let write = Write {
        op,
        events,
        response: Some(stored.clone()),
        request: RequestChange::Erase,
    };
    (Some(write), Some(Verdict::Found(stored)))
}

/// Where a re-send's claim gets its fencing token, and the permit taken before its
/// transaction (`Claimed::permit`).
struct Claiming {
    fences: Fences,
    permit: Permit,
}

/// The write of a not-found answer: a claim for a re-send once it is final, else only the
/// event. Finality is judged on the record read inside the transaction, counted from the
/// latest moment an earlier attempt could have reached the provider (`maybe_effect_at`), not
/// from its dispatch: a lookup right after a timeout must not miss an attempt still running.
/// A fencing token is taken only for the claim. `final_after = None` (a lookup made at once
/// after the provider's own answer) is never final. Pure but for that token.
fn not_found(
    existing: Option<Operation>,
    seen: &Seen,
    final_after: Option<std::time::Duration>,
    fences: &Claiming,
    now: Timestamp,
) -> (Option<Write>, Option<Verdict>) {
    let Some(op) = existing.filter(|op| still_unknown(op, seen) && same_attempt(op, seen)) else {
        return (None, None);
    };
    let dispatched = op.last_dispatched_at.unwrap_or(op.created_at);
    let reach = op.maybe_effect_at.unwrap_or(dispatched).max(dispatched);
    let waited = now.since(reach);
    let Some(final_after) = final_after else {
        let detail = "not found right after the provider's answer, which proves nothing: \
                      the operation stays unknown"
            .to_string();
        let ev = event(now, EventKind::ReconcileNotFound, op.attempts, detail);
        return (Some(only_events(op, vec![ev])), Some(Verdict::Unknown));
    };
    if waited < final_after {
        let detail = format!(
            "not final yet: {}ms since the last attempt could have reached the provider, final after {}ms",
            waited.as_millis(),
            final_after.as_millis()
        );
        let ev = event(now, EventKind::ReconcileNotFound, op.attempts, detail);
        return (Some(only_events(op, vec![ev])), Some(Verdict::Unknown));
    }
    let attempt = op.attempts + 1;
    let events = vec![
        event(
            now,
            EventKind::ReconcileNotFound,
            op.attempts,
            format!(
                "final: not found {}ms after the last attempt could have reached the provider",
                waited.as_millis()
            ),
        ),
        event(
            now,
            EventKind::Claimed,
            attempt,
            format!("attempt {attempt}: reconciliation proved the effect did not happen"),
        ),
    ];
    let fence = fences.fences.next();
    // Absence is proven for every earlier attempt: the next one starts with a clean slate.
    let op = Operation {
        maybe_effect_at: None,
        ..claimed(op, fence, now)
    };
    let claimed = Claimed {
        fence,
        permit: fences.permit,
        attempt,
        first: false,
        key: op.idempotency_key.clone(),
        placement: op.key_placement.clone(),
    };
    (Some(Write::of(op, events)), Some(Verdict::Resend(claimed)))
}

fn still_unknown(op: &Operation, seen: &Seen) -> bool {
    op.state == State::Unknown && op.fingerprint == seen.fingerprint
}

/// No other attempt was made since the lookup began, so its absence is about the last one.
fn same_attempt(op: &Operation, seen: &Seen) -> bool {
    op.attempts == seen.attempts && op.last_dispatched_at == seen.last_dispatched_at
}

fn only_events(op: Operation, events: Vec<Event>) -> Write {
    Write::of(op, events)
}

fn event(at: Timestamp, kind: EventKind, attempt: u32, detail: String) -> Event {
    Event {
        at,
        kind,
        attempt,
        detail,
    }
}

#[cfg(test)]
mod tests {

    use std::time::Duration;

    use super::*;

    const T0: Timestamp = Timestamp(1_800_000_000_000);

    fn claiming(first: u64) -> Claiming {
        Claiming {
            fences: Fences::starting_at(first),
            permit: Permit::for_tests(),
        }
    }

    #[test]
    fn a_lookup_made_at_once_never_proves_absence() {
        let op = unknown_op();
        let now = T0.plus(Duration::from_secs(3600));
        let fences = claiming(9);
        let (write, verdict) = not_found(Some(op.clone()), &seen(&op), None, &fences, now);
        let write = write.expect("a write");
        assert_eq!(verdict, Some(Verdict::Unknown));
        assert_eq!(kinds(&write), ["reconcile.not_found"]);
        assert_eq!(write.op, op, "still unknown, nothing claimed");
    }

    fn unknown_op() -> Operation {
        Operation {
            idempotency_key: "k3y".into(),
            error: Some("timeout".into()),
            ..Operation::example("pay/refund/wf-1", State::Unknown, T0)
        }
    }

    fn seen(op: &Operation) -> Seen {
        Seen {
            fingerprint: op.fingerprint.clone(),
            key: op.idempotency_key.clone(),
            attempts: op.attempts,
            last_dispatched_at: op.last_dispatched_at,
        }
    }

    fn kinds(write: &Write) -> Vec<&'static str> {
        write.events.iter().map(|e| e.kind.as_str()).collect()
    }

    #[test]
    fn a_present_pointer_in_a_200_is_found() {
        let body = br#"{"data":[{"id":"re_1","amount":5}]}"#;
        let answer = classify(200, body, "/data/0").expect("readable");
        assert_eq!(
            answer,
            Finding::Found(serde_json::json!({"id": "re_1", "amount": 5}))
        );
    }

    #[test]
    fn an_absent_or_null_pointer_and_a_404_are_not_found() {
        for body in [&br#"{"data":[]}"#[..], br#"{"data":[null]}"#, b"{}"] {
            assert_eq!(
                classify(200, body, "/data/0").expect("readable"),
                Finding::NotFound
            );
        }
        for body in [
            &br#"{"data":[]}"#[..],
            br#"{"data":{}}"#,
            br#"{"data":null}"#,
        ] {
            assert_eq!(
                classify(200, body, "/data").expect("readable"),
                Finding::NotFound,
                "an empty list is no effect"
            );
        }
        assert_eq!(
            classify(404, b"not json at all", "/data/0").expect("404"),
            Finding::NotFound
        );
    }

    #[test]
    fn other_statuses_and_unreadable_json_prove_nothing() {
        assert!(matches!(
            classify(500, b"{}", "/data/0"),
            Err(LookupError::Status(500))
        ));
        assert!(matches!(
            classify(201, br#"{"data":[1]}"#, "/data/0"),
            Err(LookupError::Status(201))
        ));
        assert!(matches!(
            classify(200, b"<html>", "/data/0"),
            Err(LookupError::Body(_))
        ));
    }

    #[test]
    fn found_stores_the_json_and_succeeds() {
        let op = unknown_op();
        let stored = found_response(&serde_json::json!({"id": "re_1"}));
        let now = T0.plus(Duration::from_secs(5));
        let (write, verdict) = found(
            Some(op.clone()),
            &seen(&op),
            stored.clone(),
            stored.meta(),
            now,
        );
        let write = write.expect("a write");
        assert_eq!(verdict, Some(Verdict::Found(stored.clone())));
        assert_eq!(kinds(&write), ["reconcile.found", "result.persisted"]);
        assert_eq!(write.op.state, State::Succeeded);
        assert_eq!(write.op.updated_at, now);
        assert_eq!(write.op.error, None);
        assert_eq!(&stored.body[..], br#"{"id":"re_1"}"#);
        assert_eq!(
            stored
                .headers
                .get(header::CONTENT_TYPE)
                .map(|v| v.as_bytes()),
            Some(&b"application/json"[..])
        );
        let meta = write.op.response.expect("response meta");
        assert_eq!((meta.status, meta.body_bytes), (200, 13));
        assert_eq!(meta, stored.meta());
        assert_eq!(write.response, Some(stored));
    }

    #[test]
    fn found_writes_nothing_once_the_operation_moved_on() {
        let op = unknown_op();
        let stored = found_response(&serde_json::json!(1));
        for moved in [
            Operation {
                state: State::InFlight,
                ..op.clone()
            },
            Operation {
                fingerprint: "beef".into(),
                ..op.clone()
            },
        ] {
            let (write, verdict) =
                found(Some(moved), &seen(&op), stored.clone(), stored.meta(), T0);
            assert!(write.is_none());
            assert_eq!(verdict, None);
        }
        let meta = stored.meta();
        assert!(found(None, &seen(&op), stored, meta, T0).0.is_none());
    }

    #[test]
    fn not_found_too_early_only_records_the_event() {
        let op = unknown_op();
        let now = T0.plus(Duration::from_secs(59));
        let (write, verdict) = not_found(
            Some(op.clone()),
            &seen(&op),
            Some(Duration::from_secs(60)),
            &claiming(9),
            now,
        );
        let write = write.expect("a write");
        assert_eq!(verdict, Some(Verdict::Unknown));
        assert_eq!(kinds(&write), ["reconcile.not_found"]);
        assert!(write.events[0].detail.starts_with("not final yet"));
        assert_eq!(write.op, op);
    }

    #[test]
    fn final_not_found_claims_the_next_attempt() {
        let op = unknown_op();
        let now = T0.plus(Duration::from_secs(60));
        let (write, verdict) = not_found(
            Some(op.clone()),
            &seen(&op),
            Some(Duration::from_secs(60)),
            &claiming(9),
            now,
        );
        let write = write.expect("a write");
        let Some(Verdict::Resend(claimed)) = verdict else {
            panic!("a final not-found claims a re-send: {verdict:?}");
        };
        assert_eq!((claimed.fence, claimed.attempt), (9, 2));
        assert_eq!(claimed.key, "k3y", "the operation's own key");
        assert_eq!(kinds(&write), ["reconcile.not_found", "operation.claimed"]);
        assert!(write.events[0].detail.starts_with("final"));
        assert_eq!(write.events[1].attempt, 2);
        assert_eq!(write.op.state, State::InFlight);
        assert_eq!((write.op.fence, write.op.attempts), (9, 2));
        assert_eq!(write.op.first_dispatched_at, Some(T0));
        assert_eq!(write.op.last_dispatched_at, Some(now));
        assert_eq!(write.op.maybe_effect_at, None, "absence proven");
    }

    #[test]
    fn finality_counts_from_when_the_attempt_could_last_have_reached_the_provider() {
        // Dispatched at T0 with a 30 s timeout: it could have reached the provider until T0+30.
        let op = Operation {
            maybe_effect_at: Some(T0.plus(Duration::from_secs(30))),
            ..unknown_op()
        };
        let early = T0.plus(Duration::from_secs(89));
        let final_after = Some(Duration::from_secs(60));
        let fences = claiming(9);
        let (_, verdict) = not_found(Some(op.clone()), &seen(&op), final_after, &fences, early);
        assert_eq!(
            verdict,
            Some(Verdict::Unknown),
            "60 s after dispatch is not enough"
        );
        let late = T0.plus(Duration::from_secs(90));
        let (_, verdict) = not_found(Some(op.clone()), &seen(&op), final_after, &fences, late);
        assert!(matches!(verdict, Some(Verdict::Resend(_))), "{verdict:?}");
    }

    #[test]
    fn not_found_about_an_older_attempt_writes_nothing() {
        let op = unknown_op();
        let now = T0.plus(Duration::from_secs(600));
        let resent = Operation {
            attempts: 2,
            last_dispatched_at: Some(T0.plus(Duration::from_secs(1))),
            ..op.clone()
        };
        let (write, verdict) = not_found(
            Some(resent),
            &seen(&op),
            Some(Duration::from_secs(60)),
            &claiming(9),
            now,
        );
        assert!(write.is_none());
        assert_eq!(verdict, None);
        let claimed_by_another = Operation {
            state: State::InFlight,
            ..op.clone()
        };
        let (write, _) = not_found(
            Some(claimed_by_another),
            &seen(&op),
            Some(Duration::from_secs(60)),
            &claiming(9),
            now,
        );
        assert!(write.is_none());
    }
}
