//! Replaying an operation (docs/reference.md section 5.3): a lost answer recovered from a deduplicating provider
//! with the same key, a succeeded operation answered from the ledger, and a failed one
//! (provider refusal or no connection) sent again as its next attempt with the same key.

use http::StatusCode;
use idemproxy::operation::State;

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider};

/// Acceptance 1: the provider commits, then the answer is lost; the replay is re-sent with
/// the same key, the provider answers from its own store, and the effect happens once.
#[tokio::test]
async fn a_lost_answer_is_recovered_with_the_same_key_and_one_effect() {
    let behavior = Behavior::echo()
        .dedupe_on_header("idempotency-key")
        .drop_first_response(1);
    let provider = FakeProvider::start(behavior).await;
    let proxy = start(&provider, "dedupe = \"key\"").await;
    let id = op_id("wf-1");

    let lost = refund(&proxy, "wf-1", "charge=ch_1&amount=500").await;
    let body = problem(&lost, StatusCode::ACCEPTED, "outcome-unknown");
    assert_problem_context(&body, &id, "unknown");
    assert_op_headers(&lost, &id, "unknown", false);
    assert_eq!(provider.effects(), 1, "the provider did commit the effect");

    let recovered = refund(&proxy, "wf-1", "charge=ch_1&amount=500").await;
    assert_eq!(recovered.status, StatusCode::OK, "{}", recovered.text());
    assert_eq!(recovered.header("x-fake-effect"), Some("1"));
    assert_eq!(recovered.json()["effect"], 1, "the original result");
    assert_op_headers(&recovered, &id, "succeeded", true);
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let key = opaque_key(&id);
    for request in &requests {
        assert_eq!(request.header("idempotency-key"), Some(key.as_str()));
    }
    assert_eq!(provider.effects(), 1);

    let again = refund(&proxy, "wf-1", "charge=ch_1&amount=500").await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.body, recovered.body, "the ledger's copy");
    assert_eq!(again.header("x-fake-effect"), Some("1"));
    assert_op_headers(&again, &id, "succeeded", true);
    assert_eq!(provider.request_count(), 2, "answered without the provider");
}

/// A succeeded operation is answered from the ledger: same status, headers and body, with
/// `Idempotent-Replayed: true`, and nothing is sent.
#[tokio::test]
async fn a_succeeded_operation_is_replayed_from_the_ledger() {
    let answer = serde_json::json!({"id": "re_1", "amount": 500});
    let behavior = Behavior::json(201, answer.clone()).header("x-provider-note", "kept");
    let provider = FakeProvider::start(behavior).await;
    let proxy = start(&provider, "").await;
    let id = op_id("wf-2");

    let first = refund(&proxy, "wf-2", "amount=500").await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(first.json(), answer);
    assert_op_headers(&first, &id, "succeeded", false);

    let replayed = refund(&proxy, "wf-2", "amount=500").await;
    assert_eq!(replayed.status, StatusCode::CREATED);
    assert_eq!(replayed.body, first.body);
    assert_eq!(replayed.header("content-type"), Some("application/json"));
    assert_eq!(replayed.header("x-provider-note"), Some("kept"));
    assert_op_headers(&replayed, &id, "succeeded", true);
    assert_eq!(provider.request_count(), 1);
}

/// A definitive refusal (400) is `failed`; the next replay is attempt 2 with the same key.
#[tokio::test]
async fn a_failed_operation_is_sent_again_as_the_next_attempt_with_the_same_key() {
    let refusal = serde_json::json!({"error": "card_declined"});
    let provider = FakeProvider::start(Behavior::json(400, refusal.clone())).await;
    let mut proxy = start(&provider, "").await;
    let id = op_id("wf-3");

    let first = refund(&proxy, "wf-3", "amount=500").await;
    assert_eq!(
        first.status,
        StatusCode::BAD_REQUEST,
        "the provider's own answer"
    );
    assert_eq!(first.json(), refusal);
    assert_op_headers(&first, &id, "failed", false);

    provider.set_behavior(Behavior::json(200, serde_json::json!({"id": "re_3"})));
    let second = refund(&proxy, "wf-3", "amount=500").await;
    assert_eq!(second.status, StatusCode::OK);
    assert_eq!(second.json()["id"], "re_3");
    assert_op_headers(&second, &id, "succeeded", false);

    let requests = provider.requests();
    assert_eq!(requests.len(), 2, "the failed operation was sent again");
    let key = opaque_key(&id);
    assert!(
        requests
            .iter()
            .all(|r| r.header("idempotency-key") == Some(key.as_str()))
    );
    let stored = ledger(&mut proxy, &id).await;
    assert_eq!(stored.op.state, State::Succeeded);
    assert_eq!(stored.op.attempts, 2);
}

/// Never connected: `failed` and 502 `upstream-unreachable` (safe to retry); the next
/// replay dispatches again, here to a provider that has come up on that port.
#[tokio::test]
async fn an_unreachable_provider_is_failed_502_and_the_replay_dispatches() {
    let addr = closed_port().await;
    let text = common::policy(
        PROVIDER,
        &format!("http://{addr}"),
        &refund_route("effect = \"irreversible\""),
    );
    let proxy = common::Proxy::builder()
        .policy(PROVIDER, &text)
        .start()
        .await;
    let id = op_id("wf-4");

    let first = refund(&proxy, "wf-4", "amount=500").await;
    let body = problem(&first, StatusCode::BAD_GATEWAY, "upstream-unreachable");
    assert_problem_context(&body, &id, "failed");
    assert_op_headers(&first, &id, "failed", false);

    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("the provider comes up on the same port");
    let upstream = tokio::spawn(answer_once(listener));
    let second = refund(&proxy, "wf-4", "amount=500").await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.text());
    assert_eq!(second.text(), "made");
    assert_op_headers(&second, &id, "succeeded", false);
    let request = upstream.await.expect("the provider task");
    assert!(request.starts_with("post /v1/refunds "), "{request}");
    assert!(
        request.contains(&format!("idempotency-key: {}", opaque_key(&id))),
        "{request}"
    );
}

/// A one-shot HTTP/1.1 provider on a given listener: reads one request head and body
/// (the test's body is short and sent with Content-Length), answers 200 "made" and
/// returns the request text (header names lowercased by the proxy's client).
async fn answer_once(listener: tokio::net::TcpListener) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut stream, _) = listener.accept().await.expect("the proxy connects");
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    while !request.ends_with(b"amount=500") {
        let n = stream.read(&mut buf).await.expect("read the request");
        assert!(n > 0, "the proxy closed before sending the whole request");
        request.extend_from_slice(&buf[..n]);
    }
    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\nmade";
    stream.write_all(answer).await.expect("answer");
    String::from_utf8_lossy(&request).to_lowercase()
}
