//! Key retention (docs/reference.md section 5.5): a deduplicating provider only remembers a key for
//! `key_retention` from the first claim; past it, an unknown operation is held (202), never
//! re-sent, because the provider could no longer recognise the repeat.

use std::time::Duration;

use http::StatusCode;

use crate::common::guarded::*;
use crate::common::{Behavior, FakeProvider};

/// Acceptance 6: the answer is lost after longer than `key_retention` ("200ms"), so the
/// replay finds the retention passed: held, not re-sent.
#[tokio::test]
async fn past_key_retention_an_unknown_operation_is_held_not_resent() {
    // The effect commits, then the provider waits 400 ms and drops the answer: by the time
    // the proxy records `unknown`, the key's 200 ms retention has run out. No sleep needed.
    let behavior = Behavior::echo()
        .dedupe_on_header("idempotency-key")
        .delay(Duration::from_millis(400))
        .drop_first_response(1);
    let provider = FakeProvider::start(behavior).await;
    let proxy = start(&provider, "dedupe = \"key\"\nkey_retention = \"200ms\"").await;
    let id = op_id("wf-old");

    let lost = refund(&proxy, "wf-old", "amount=500").await;
    problem(&lost, StatusCode::ACCEPTED, "outcome-unknown");

    let replay = refund(&proxy, "wf-old", "amount=500").await;
    let body = problem(&replay, StatusCode::ACCEPTED, "outcome-unknown");
    assert_problem_context(&body, &id, "unknown");
    assert_op_headers(&replay, &id, "unknown", false);
    assert!(replay.header("retry-after").is_some());
    assert_eq!(provider.request_count(), 1, "not re-sent");
}

/// The counterpart: inside `key_retention` the same lost answer is recovered by a re-send.
#[tokio::test]
async fn inside_key_retention_an_unknown_operation_is_resent_with_the_same_key() {
    let behavior = Behavior::echo()
        .dedupe_on_header("idempotency-key")
        .drop_first_response(1);
    let provider = FakeProvider::start(behavior).await;
    let proxy = start(&provider, "dedupe = \"key\"\nkey_retention = \"1h\"").await;
    let id = op_id("wf-new");

    let lost = refund(&proxy, "wf-new", "amount=500").await;
    problem(&lost, StatusCode::ACCEPTED, "outcome-unknown");
    let replay = refund(&proxy, "wf-new", "amount=500").await;
    assert_eq!(replay.status, StatusCode::OK);
    assert_op_headers(&replay, &id, "succeeded", true);
    assert_eq!(provider.request_count(), 2);
    assert_eq!(provider.effects(), 1);
}
