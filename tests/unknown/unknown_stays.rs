//! Once an attempt may have taken effect, the operation stays under the unknown rules (docs/reference.md sections
//! 5.2 and 5.5): a later attempt that fails (the provider refuses it, or cannot be reached) proves only
//! that *that* attempt did nothing, so it never turns the operation `failed`, and a replay past
//! the key's retention is held, never sent with a key the provider has forgotten.

use std::time::Duration;

use http::StatusCode;
use idemproxy::operation::{EventKind, State};

use crate::common::guarded::*;
use crate::common::{Behavior, FakeProvider};

/// Item 1: attempt 1 times out after the provider committed it; the retry inside the window
/// is refused with a 429; a replay after the window closes must be held, not sent again.
#[tokio::test]
async fn a_refused_retry_does_not_erase_an_earlier_unknown_attempt() {
    let behavior = Behavior::echo()
        .dedupe_on_header("idempotency-key")
        .delay(Duration::from_millis(900));
    let provider = FakeProvider::start(behavior).await;
    let keys = "dedupe = \"key\"\nkey_retention = \"1500ms\"\ntimeout = \"300ms\"";
    let mut proxy = start(&provider, keys).await;
    let id = op_id("wf-1");

    let lost = refund(&proxy, "wf-1", "amount=500").await;
    problem(&lost, StatusCode::ACCEPTED, "outcome-unknown");
    provider.wait_for_effects(1).await;

    provider.set_behavior(Behavior::fixed(429, "slow down"));
    let refused = refund(&proxy, "wf-1", "amount=500").await;
    assert_eq!(
        refused.status,
        StatusCode::TOO_MANY_REQUESTS,
        "the provider's own answer"
    );
    assert_op_headers(&refused, &id, "unknown", false);

    // The window: 1500 ms from the first dispatch, less the 300 ms a re-send may take. (The
    // settler may re-send inside it too; those get the 429 as well and prove nothing either.)
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let sent_in_window = provider.request_count();
    provider.set_behavior(Behavior::echo());
    let held = refund(&proxy, "wf-1", "amount=500").await;
    let body = problem(&held, StatusCode::ACCEPTED, "outcome-unknown");
    assert_problem_context(&body, &id, "unknown");
    assert_eq!(
        provider.request_count(),
        sent_in_window,
        "never sent with a forgotten key"
    );

    let stored = ledger(&mut proxy, &id).await;
    assert_eq!(stored.op.state, State::Unknown);
    assert_eq!(stored.op.attempts as usize, sent_in_window);
    let last = stored
        .events
        .iter()
        .rev()
        .find(|e| e.kind == EventKind::Unknown);
    let detail = last.map(|e| e.detail.as_str()).unwrap_or_default();
    assert!(
        detail.contains("earlier attempt may have taken effect"),
        "{detail}"
    );
}

/// Item 1: after an unknown attempt the provider cannot be reached; the agent is told the
/// outcome is unknown (202), never "unreachable, safe to retry" (502).
#[tokio::test]
async fn a_connect_failure_after_an_unknown_attempt_is_outcome_unknown() {
    let behavior = Behavior::echo()
        .dedupe_on_header("idempotency-key")
        .drop_first_response(1);
    let provider = FakeProvider::start(behavior).await;
    let mut proxy = start(&provider, "dedupe = \"key\"").await;
    let id = op_id("wf-2");

    let lost = refund(&proxy, "wf-2", "amount=500").await;
    problem(&lost, StatusCode::ACCEPTED, "outcome-unknown");
    drop(provider);

    let retry = refund(&proxy, "wf-2", "amount=500").await;
    let body = problem(&retry, StatusCode::ACCEPTED, "outcome-unknown");
    assert_problem_context(&body, &id, "unknown");
    assert_op_headers(&retry, &id, "unknown", false);

    let stored = ledger(&mut proxy, &id).await;
    assert_eq!(stored.op.state, State::Unknown);
    assert!(stored.op.attempts >= 2, "{}", stored.op.attempts);
}

/// The counterpart: with no earlier unknown attempt, a connect failure is a definitive
/// failure (nothing was sent) and the answer says it is safe to retry.
#[tokio::test]
async fn a_first_connect_failure_is_still_unreachable_and_failed() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "dedupe = \"key\"").await;
    drop(provider);
    let first = refund(&proxy, "wf-3", "amount=500").await;
    problem(&first, StatusCode::BAD_GATEWAY, "upstream-unreachable");
    assert_op_headers(&first, &op_id("wf-3"), "failed", false);
}

/// Item 2 (the margin): a re-send decided shortly before the key's retention closes could
/// reach the provider after it; with `timeout` longer than what is left, it is held.
#[tokio::test]
async fn a_resend_that_could_land_after_the_key_window_is_held() {
    let behavior = Behavior::echo()
        .dedupe_on_header("idempotency-key")
        .drop_first_response(1);
    let provider = FakeProvider::start(behavior).await;
    let keys = "dedupe = \"key\"\nkey_retention = \"1s\"\ntimeout = \"1s\"";
    let proxy = start(&provider, keys).await;

    let lost = refund(&proxy, "wf-4", "amount=500").await;
    problem(&lost, StatusCode::ACCEPTED, "outcome-unknown");
    // Inside the 1 s window, but a re-send now may take 1 s: it could land past it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = refund(&proxy, "wf-4", "amount=500").await;
    problem(&held, StatusCode::ACCEPTED, "outcome-unknown");
    assert_eq!(provider.request_count(), 1);
}
