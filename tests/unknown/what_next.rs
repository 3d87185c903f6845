//! The `outcome-unknown` answer says what the agent's next identical request will meet
//! (docs/reference.md section 6.2): a provider that deduplicates on the key, still inside
//! `key_retention`, or an idempotent route -> `retry_same` (it is re-sent); a route with a
//! lookup -> `retry_same` (the provider is asked); otherwise `wait` (held for an operator).
//! Never "failed", and never an invitation to a new operation ID.

use http::StatusCode;

use crate::common::guarded::*;
use crate::common::{Behavior, FakeProvider};

const MADE: &str = "We cannot yet confirm whether this create_refund was made.";

/// The first answer of a refund whose response is lost, and its `detail`, checked for the
/// words every unknown shares.
async fn lost(keys: &str, routes: &str, behavior: Behavior) -> (FakeProvider, serde_json::Value) {
    let provider = FakeProvider::start(behavior.drop_first_response(1)).await;
    let proxy = builder(&provider, keys, routes).start().await;
    let first = refund(&proxy, "wf-1", "amount=500").await;
    let body = problem(&first, StatusCode::ACCEPTED, "outcome-unknown");
    let detail = body["detail"].as_str().unwrap_or_default().to_lowercase();
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or_default()
            .starts_with(MADE),
        "{body}"
    );
    assert!(
        !detail.contains("fail"),
        "never 'failed' for an unknown: {detail}"
    );
    let again = refund(&proxy, "wf-1", "amount=500").await;
    (
        provider,
        serde_json::json!({"first": body, "again": again.json(), "status": again.status.as_u16()}),
    )
}

#[tokio::test]
async fn a_deduplicating_provider_inside_the_key_window_says_retry_same() {
    let behavior = Behavior::echo().dedupe_on_header("idempotency-key");
    let (provider, seen) = lost("dedupe = \"key\"", &refund_route(""), behavior).await;
    assert_next(
        &seen["first"],
        "retry_same",
        &[
            "Retry the same request unchanged: it is re-sent with the same idempotency key and takes effect at most once.",
        ],
    );
    assert_eq!(
        seen["status"], 200,
        "the retry is re-sent and answered: {seen}"
    );
    assert_eq!(provider.effects(), 1, "one refund");
}

#[tokio::test]
async fn a_provider_that_cannot_deduplicate_says_wait() {
    let (provider, seen) = lost("dedupe = \"none\"", &refund_route(""), Behavior::echo()).await;
    let held = [
        "It is held until it is resolved",
        "do not retry it under a new operation ID.",
    ];
    assert_next(&seen["first"], "wait", &held);
    assert_next(&seen["again"], "wait", &held);
    assert_eq!(provider.request_count(), 1, "nothing re-sent");
}

/// A deduplicating provider whose window a re-send could miss is held like one that cannot.
#[tokio::test]
async fn a_closed_key_window_says_wait() {
    let keys = "dedupe = \"key\"\nkey_retention = \"1s\"\ntimeout = \"1s\"";
    let behavior = Behavior::echo().dedupe_on_header("idempotency-key");
    let (provider, seen) = lost(keys, &refund_route(""), behavior).await;
    assert_next(&seen["first"], "wait", &["It is held until it is resolved"]);
    assert_eq!(provider.request_count(), 1, "nothing re-sent");
}

#[tokio::test]
async fn an_idempotent_route_says_retry_same() {
    let routes = refund_route("effect = \"idempotent\"\n");
    let (_provider, seen) = lost("", &routes, Behavior::echo()).await;
    assert_next(
        &seen["first"],
        "retry_same",
        &["it is re-sent", "idempotent"],
    );
    assert_eq!(seen["status"], 200, "{seen}");
}

/// A route with a lookup: the next request asks the provider; while it finds nothing (and
/// "not found" is not final yet), the answer still says to retry the same request.
#[tokio::test]
async fn a_route_with_a_lookup_says_retry_same() {
    let lookup = "[route.reconcile]\nlookup = \"GET /v1/refunds?key={key}\"\nfound = \"/data/0\"\n\
                  not_found_final_after = \"1h\"\n";
    let routes = format!("{}{lookup}", refund_route(""));
    let provider = FakeProvider::start(Behavior::echo().drop_first_response(1)).await;
    let proxy = builder(&provider, "timeout = \"200ms\"", &routes)
        .start()
        .await;
    let first = refund(&proxy, "wf-1", "amount=500").await;
    let body = problem(&first, StatusCode::ACCEPTED, "outcome-unknown");
    let words = [
        "the proxy asks the provider whether it was made",
        "Do not retry it under a new operation ID.",
    ];
    assert_next(&body, "retry_same", &words);
    provider.set_behavior(Behavior::fixed(404, "no such refund"));
    let again = refund(&proxy, "wf-1", "amount=500").await;
    let body = problem(&again, StatusCode::ACCEPTED, "outcome-unknown");
    assert_next(&body, "retry_same", &words);
}
