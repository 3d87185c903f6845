//! Duplicates of an operation in flight (docs/reference.md section 5.3): they wait for its result up to
//! `in_flight_wait` and answer it, replayed; past that, 202 `in-flight` with `Retry-After`.
//! Exactly one request reaches the provider however many agents ask at once.

use std::time::Duration;

use http::StatusCode;

use crate::common::guarded::*;
use crate::common::{Behavior, FakeProvider};

/// Acceptance 3: 30 identical requests at once, a slow provider, one upstream request and
/// one body for all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_concurrent_duplicates_make_one_upstream_request_and_share_its_answer() {
    let provider = FakeProvider::start(Behavior::echo().delay(Duration::from_secs(1))).await;
    let proxy = builder(&provider, "", &refund_route(""))
        .config("[limits]\nin_flight_wait = \"10s\"\n")
        .start()
        .await;
    let id = op_id("wf-many");

    let pending: Vec<_> = (0..30)
        .map(|_| refund_in_background(&proxy, "wf-many", "charge=ch_1&amount=500"))
        .collect();
    let mut answers = Vec::new();
    for task in pending {
        answers.push(task.await.expect("task").expect("answer"));
    }

    assert_eq!(provider.request_count(), 1, "exactly one upstream request");
    assert_eq!(provider.effects(), 1);
    let first = &answers[0].body;
    assert_eq!(answers[0].json()["effect"], 1);
    let mut replayed = 0;
    for answer in &answers {
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
        assert_eq!(&answer.body, first, "every answer carries the same body");
        assert_eq!(answer.header("idem-state"), Some("succeeded"));
        assert_eq!(answer.header("idem-operation-id"), Some(id.as_str()));
        replayed += usize::from(answer.header("idempotent-replayed") == Some("true"));
    }
    assert_eq!(replayed, 29, "one first answer, 29 replays");
}

/// A duplicate still waiting when `in_flight_wait` runs out gets 202 `in-flight` with
/// `Retry-After`; the first request is unharmed and its result is replayed afterwards.
#[tokio::test]
async fn a_duplicate_past_in_flight_wait_is_told_to_retry_later() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done").hold()).await;
    let proxy = builder(&provider, "", &refund_route(""))
        .config("[limits]\nin_flight_wait = \"200ms\"\n")
        .start()
        .await;
    let id = op_id("wf-slow");

    let first = refund_in_background(&proxy, "wf-slow", "amount=500");
    provider.wait_for_requests(1).await;
    let duplicate = refund(&proxy, "wf-slow", "amount=500").await;
    let body = problem(&duplicate, StatusCode::ACCEPTED, "in-flight");
    assert_problem_context(&body, &id, "in_flight");
    assert_op_headers(&duplicate, &id, "in_flight", false);
    let retry_after: u64 = duplicate
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in seconds");
    assert!(retry_after >= 1, "{retry_after}");

    provider.release();
    let first = first.await.expect("task").expect("answer");
    assert_eq!(
        (first.status, first.text()),
        (StatusCode::OK, "done".into())
    );
    let later = refund(&proxy, "wf-slow", "amount=500").await;
    assert_eq!(later.text(), "done");
    assert_op_headers(&later, &id, "succeeded", true);
    assert_eq!(provider.request_count(), 1);
}

/// A duplicate that waits is woken by the result, not by the end of its wait.
#[tokio::test]
async fn a_waiting_duplicate_answers_as_soon_as_the_result_is_recorded() {
    let provider = FakeProvider::start(Behavior::fixed(201, "made").hold()).await;
    let proxy = builder(&provider, "", &refund_route(""))
        .config("[limits]\nin_flight_wait = \"60s\"\n")
        .start()
        .await;

    let first = refund_in_background(&proxy, "wf-wake", "amount=1");
    provider.wait_for_requests(1).await;
    let duplicate = refund_in_background(&proxy, "wf-wake", "amount=1");
    provider.release();
    let started = std::time::Instant::now();
    let duplicate = duplicate.await.expect("task").expect("answer");
    // Not a benchmark: a duplicate that only woke at the end of its wait would take 60 s.
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(
        (duplicate.status, duplicate.text()),
        (StatusCode::CREATED, "made".into())
    );
    let first = first.await.expect("task").expect("answer");
    assert_eq!(first.text(), "made");
    assert_eq!(provider.request_count(), 1);
}
