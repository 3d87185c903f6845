//! Unknown outcomes (docs/reference.md sections 5.2 and 5.5): a timeout after sending or an unclassified status leaves
//! the operation `unknown`; it is re-sent only when that is safe (`effect = "idempotent"`,
//! or a deduplicating provider inside `key_retention`), otherwise every replay is a 202
//! `outcome-unknown` and nothing is sent.

use std::time::Duration;

use http::StatusCode;
use idemproxy::operation::{EventKind, State};

use crate::common::guarded::*;
use crate::common::{Behavior, FakeProvider};

/// Acceptance 4: a provider that does not deduplicate times out after the request was
/// sent; the replays stay 202 and the provider never sees a second request.
#[tokio::test]
async fn a_timeout_after_sending_is_held_unknown_and_never_resent() {
    let provider =
        FakeProvider::start(Behavior::fixed(200, "late").delay(Duration::from_secs(2))).await;
    let mut proxy = start(&provider, "dedupe = \"none\"\ntimeout = \"300ms\"").await;
    let id = op_id("wf-1");

    let first = refund(&proxy, "wf-1", "amount=500").await;
    let body = problem(&first, StatusCode::ACCEPTED, "outcome-unknown");
    assert_problem_context(&body, &id, "unknown");
    assert_op_headers(&first, &id, "unknown", false);
    assert!(first.header("retry-after").is_some());
    let detail = body["detail"].as_str().unwrap_or_default().to_lowercase();
    assert!(
        !detail.contains("failed"),
        "never 'failed' for an unknown: {detail}"
    );

    for _ in 0..2 {
        let replay = refund(&proxy, "wf-1", "amount=500").await;
        let body = problem(&replay, StatusCode::ACCEPTED, "outcome-unknown");
        assert_problem_context(&body, &id, "unknown");
        assert_op_headers(&replay, &id, "unknown", false);
    }
    assert_eq!(provider.request_count(), 1, "never a second request");

    let stored = ledger(&mut proxy, &id).await;
    assert_eq!(stored.op.state, State::Unknown);
    assert_eq!(stored.op.attempts, 1);
    assert!(stored.has_event(EventKind::Unknown));
}

/// A status no outcome rule covers (500): the agent gets the provider's own 500 marked
/// `Idem-State: unknown`; a replay (dedupe none) is a 202 and nothing is sent.
#[tokio::test]
async fn an_unclassified_status_is_passed_on_first_then_held() {
    let provider =
        FakeProvider::start(Behavior::fixed(500, "provider broke").header("x-from", "provider"))
            .await;
    let proxy = start(&provider, "").await;
    let id = op_id("wf-2");

    let first = refund(&proxy, "wf-2", "amount=500").await;
    assert_eq!(first.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(first.text(), "provider broke", "the provider's own answer");
    assert_eq!(first.header("x-from"), Some("provider"));
    assert_op_headers(&first, &id, "unknown", false);

    let replay = refund(&proxy, "wf-2", "amount=500").await;
    let body = problem(&replay, StatusCode::ACCEPTED, "outcome-unknown");
    assert_problem_context(&body, &id, "unknown");
    assert_eq!(provider.request_count(), 1);
}

/// `effect = "idempotent"` may be re-sent after an unknown outcome even when the provider
/// does not deduplicate; the same key goes again.
#[tokio::test]
async fn an_idempotent_route_is_resent_after_an_unknown_outcome() {
    let provider = FakeProvider::start(Behavior::fixed(503, "busy")).await;
    let routes = refund_route("effect = \"idempotent\"\n");
    let mut proxy = builder(&provider, "dedupe = \"none\"", &routes)
        .start()
        .await;
    let id = op_id("wf-3");

    let first = refund(&proxy, "wf-3", "amount=500").await;
    assert_eq!(first.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_op_headers(&first, &id, "unknown", false);

    provider.set_behavior(Behavior::fixed(200, "set"));
    let second = refund(&proxy, "wf-3", "amount=500").await;
    assert_eq!(
        (second.status, second.text()),
        (StatusCode::OK, "set".into())
    );
    assert_op_headers(&second, &id, "succeeded", false);
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].header("idempotency-key"),
        requests[1].header("idempotency-key")
    );

    let stored = ledger(&mut proxy, &id).await;
    assert_eq!((stored.op.state, stored.op.attempts), (State::Succeeded, 2));
}

/// A connection lost after the request was sent is unknown, and a provider that does not
/// deduplicate is not asked again.
#[tokio::test]
async fn a_connection_lost_after_sending_is_unknown_and_held() {
    let provider = FakeProvider::start(Behavior::fixed(200, "lost").drop_first_response(1)).await;
    let proxy = start(&provider, "dedupe = \"none\"").await;
    let id = op_id("wf-4");

    let first = refund(&proxy, "wf-4", "amount=500").await;
    let body = problem(&first, StatusCode::ACCEPTED, "outcome-unknown");
    assert_problem_context(&body, &id, "unknown");
    assert_eq!(provider.effects(), 1);
    let replay = refund(&proxy, "wf-4", "amount=500").await;
    problem(&replay, StatusCode::ACCEPTED, "outcome-unknown");
    assert_eq!(provider.request_count(), 1);
}
