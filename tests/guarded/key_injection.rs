//! The idempotency key (docs/reference.md section 4): derived from the operation ID alone (`opaque`: lowercase
//! hex sha256 of its bytes; `plain`: the ID itself), sent on every guarded request into
//! `key_header` or `key_json_field`, replacing whatever key the client sent, and never part
//! of the fingerprint.

use http::StatusCode;

use crate::common::guarded::*;
use crate::common::{Behavior, FakeProvider};

/// The default: `Idempotency-Key`, opaque; the client's own key is replaced, and a client
/// that sends another key for the same operation is replaying, not conflicting.
#[tokio::test]
async fn key_header_is_the_sha256_of_the_operation_id_and_replaces_the_clients() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "").await;
    let id = op_id("wf-81:ch_1:refund:2");

    let with_key = |client_key: &'static str| {
        let proxy = &proxy;
        async move {
            let headers = [
                (OP_HEADER, "wf-81:ch_1:refund:2"),
                FORM,
                ("idempotency-key", client_key),
            ];
            refund_with(proxy, &headers, "amount=500").await
        }
    };
    let first = with_key("client-chosen-1").await;
    assert_eq!(first.status, StatusCode::OK);
    let sent = provider.requests()[0].clone();
    let key = opaque_key(&id);
    assert_eq!(key.len(), 64);
    assert!(
        key.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_eq!(sent.header("idempotency-key"), Some(key.as_str()));
    assert_eq!(sent.headers.get_all("idempotency-key").iter().count(), 1);

    let other_key = with_key("client-chosen-2").await;
    assert_eq!(
        other_key.status,
        StatusCode::OK,
        "the client's key is not a parameter"
    );
    assert_eq!(other_key.header("idempotent-replayed"), Some("true"));
    assert_eq!(provider.request_count(), 1);
}

/// `key_header` names another header; `key_format = "plain"` sends the operation ID.
#[tokio::test]
async fn plain_keys_go_into_the_named_header() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let keys = "key_header = \"X-Request-Key\"\nkey_format = \"plain\"";
    let proxy = start(&provider, keys).await;

    let resp = refund(&proxy, "wf-plain", "amount=500").await;
    assert_eq!(resp.status, StatusCode::OK);
    let sent = &provider.requests()[0];
    assert_eq!(
        sent.header("x-request-key"),
        Some(op_id("wf-plain").as_str())
    );
    assert_eq!(sent.header("idempotency-key"), None);
}

/// `key_json_field`: the key goes into the JSON body at that pointer (no header), the
/// client's value there is replaced and left out of the fingerprint, the rest is kept.
#[tokio::test]
async fn key_json_field_is_injected_into_the_body_and_left_out_of_the_fingerprint() {
    let provider = FakeProvider::start(Behavior::echo().dedupe_on_json("/idempotency_key")).await;
    let keys = "dedupe = \"key\"\nkey_json_field = \"/idempotency_key\"";
    let proxy = start(&provider, keys).await;
    let id = op_id("wf-json");
    let key = opaque_key(&id);

    let body = |client_key: &str| {
        format!(r#"{{"amount_money": {{"amount": 500}}, "idempotency_key": "{client_key}"}}"#)
    };
    let headers = [(OP_HEADER, "wf-json"), JSON];
    let first = refund_with(&proxy, &headers, &body("client-1")).await;
    assert_eq!(first.status, StatusCode::OK);
    let sent = &provider.requests()[0];
    let sent_body: serde_json::Value = serde_json::from_slice(&sent.body).expect("JSON sent");
    assert_eq!(
        sent_body,
        serde_json::json!({"amount_money": {"amount": 500}, "idempotency_key": key})
    );
    assert_eq!(
        sent.header("idempotency-key"),
        None,
        "the field replaces the header"
    );

    let replay = refund_with(&proxy, &headers, &body("client-2")).await;
    assert_eq!(
        replay.header("idempotent-replayed"),
        Some("true"),
        "{}",
        replay.text()
    );
    assert_eq!(provider.request_count(), 1);

    let not_json = refund_with(&proxy, &[(OP_HEADER, "wf-form"), FORM], "amount=500").await;
    let refused = problem(&not_json, StatusCode::BAD_REQUEST, "invalid-body");
    // The operation was identified: the key is what could not be placed (until 2026-12-03
    // the detail said the operation ID could not be read).
    let detail = refused["detail"].as_str().unwrap_or_default();
    assert!(
        !detail.contains("operation ID could not be read"),
        "{detail}"
    );
    assert!(detail.contains("key"), "{detail}");
    assert_eq!(provider.request_count(), 1);
}

/// The key is the same on every attempt and across restarts: it comes from the ID alone.
#[tokio::test]
async fn the_key_is_the_same_on_every_attempt_and_after_a_restart() {
    let provider = FakeProvider::start(Behavior::fixed(400, "declined")).await;
    let mut proxy = start(&provider, "").await;

    refund(&proxy, "wf-again", "amount=500").await;
    proxy.restart().await;
    refund(&proxy, "wf-again", "amount=500").await;
    let requests = provider.requests();
    assert_eq!(requests.len(), 2, "a failed operation is sent again");
    let key = opaque_key(&op_id("wf-again"));
    assert!(
        requests
            .iter()
            .all(|r| r.header("idempotency-key") == Some(key.as_str()))
    );
}
