//! A crash while a request is at the provider (docs/reference.md section 5.7): the proxy is SIGKILLed while the
//! provider holds the request; on restart the operation is `unknown` (event
//! `operation.orphaned`), and a replay then recovers it (deduplicating provider: same key,
//! one effect) or holds it (202, nothing sent).

use http::StatusCode;
use idemproxy::operation::{EventKind, State};

use crate::common::guarded::*;
use crate::common::{Behavior, FakeProvider, Proxy};

/// Sends the refund, waits until the provider holds it, SIGKILLs the proxy, restarts it,
/// and checks in the ledger file that the restarted proxy made the operation `unknown`.
/// Returns with the proxy running again and the first request still held.
async fn crash_while_held(provider: &FakeProvider, proxy: &mut Proxy, rendered: &str) {
    let id = op_id(rendered);
    let pending = refund_in_background(proxy, rendered, "amount=500");
    provider.wait_for_requests(1).await;
    assert!(!proxy.kill().await.success(), "killed by SIGKILL");
    let lost = pending.await.expect("task");
    assert!(
        lost.is_err(),
        "the agent's connection died with the proxy: {lost:?}"
    );

    proxy.restart().await;
    let stored = ledger(proxy, &id).await;
    assert_eq!(
        stored.orphaned_on_open, 0,
        "the restarted proxy already orphaned it"
    );
    assert_eq!(stored.op.state, State::Unknown);
    assert!(stored.has_event(EventKind::Orphaned), "{:?}", stored.events);
    proxy.restart().await;
}

#[tokio::test]
async fn after_a_crash_a_deduplicating_provider_is_asked_again_with_the_same_key() {
    let held = Behavior::echo().dedupe_on_header("idempotency-key").hold();
    let provider = FakeProvider::start(held).await;
    let mut proxy = start(&provider, "dedupe = \"key\"").await;
    let id = op_id("wf-crash-1");
    crash_while_held(&provider, &mut proxy, "wf-crash-1").await;

    // The provider goes on with the orphaned request: the effect happens after all.
    provider.release();
    provider.wait_for_effects(1).await;

    let replay = refund(&proxy, "wf-crash-1", "amount=500").await;
    assert_eq!(replay.status, StatusCode::OK, "{}", replay.text());
    assert_eq!(
        replay.header("x-fake-effect"),
        Some("1"),
        "the original effect"
    );
    assert_op_headers(&replay, &id, "succeeded", true);
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let key = opaque_key(&id);
    assert!(
        requests
            .iter()
            .all(|r| r.header("idempotency-key") == Some(key.as_str()))
    );
    assert_eq!(provider.effects(), 1);

    let again = refund(&proxy, "wf-crash-1", "amount=500").await;
    assert_eq!(again.body, replay.body);
    assert_eq!(provider.request_count(), 2, "answered from the ledger");
}

#[tokio::test]
async fn after_a_crash_a_provider_that_does_not_deduplicate_is_not_asked_again() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done").hold()).await;
    let mut proxy = start(&provider, "dedupe = \"none\"").await;
    let id = op_id("wf-crash-2");
    crash_while_held(&provider, &mut proxy, "wf-crash-2").await;

    for _ in 0..2 {
        let replay = refund(&proxy, "wf-crash-2", "amount=500").await;
        let body = problem(&replay, StatusCode::ACCEPTED, "outcome-unknown");
        assert_problem_context(&body, &id, "unknown");
        assert_op_headers(&replay, &id, "unknown", false);
    }
    assert_eq!(provider.request_count(), 1, "nothing sent after the crash");
}

/// The contrast: a graceful stop (SIGTERM) lets the exchange at the provider finish; the
/// agent gets its answer, the result is recorded, and nothing is left to orphan.
#[tokio::test]
async fn a_graceful_stop_finishes_and_records_the_exchange_in_flight() {
    let slow = Behavior::fixed(201, "made").delay(std::time::Duration::from_millis(500));
    let provider = FakeProvider::start(slow).await;
    let mut proxy = start(&provider, "").await;
    let id = op_id("wf-stop");

    let pending = refund_in_background(&proxy, "wf-stop", "amount=500");
    provider.wait_for_effects(1).await;
    assert!(proxy.terminate().await.success(), "a clean exit");
    let answer = pending
        .await
        .expect("task")
        .expect("the agent still gets its answer");
    assert_eq!(
        (answer.status, answer.text()),
        (StatusCode::CREATED, "made".into())
    );

    let stored = ledger(&mut proxy, &id).await;
    assert_eq!(stored.op.state, State::Succeeded);
    assert_eq!(stored.orphaned_on_open, 0);
    assert!(!stored.has_event(EventKind::Orphaned));
}
