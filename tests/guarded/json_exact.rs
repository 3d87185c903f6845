//! JSON bodies kept as sent (issue 7 item 14): with `key_json_field` the provider receives
//! every number exactly as the agent wrote it (big integers, exponents), numbers fingerprint
//! as written, and a JSON body with a duplicate object key is refused (400 `invalid-body`)
//! before anything is claimed or sent, because the fingerprint cannot know which of the two
//! values a provider would act on.

use http::StatusCode;

use crate::common::guarded::*;
use crate::common::raw;
use crate::common::{Behavior, FakeProvider, Proxy};

const SQUARE_KEYS: &str = "dedupe = \"key\"\nkey_json_field = \"/idempotency_key\"";

/// A Square-like provider: the key goes into the JSON body.
async fn square(provider: &FakeProvider) -> Proxy {
    start(provider, SQUARE_KEYS).await
}

fn json_refund(rendered: &str) -> [(&str, &str); 2] {
    [(OP_HEADER, rendered), JSON]
}

#[tokio::test]
async fn the_provider_receives_the_exact_number_texts() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = square(&provider).await;
    let body = r#"{"amount": 12345678901234567890123, "x": 1e2, "f": -0.10, "n": [1.0, 2E-3]}"#;
    let resp = refund_with(&proxy, &json_refund("wf-big"), body).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    let sent = String::from_utf8_lossy(&provider.requests()[0].body).into_owned();
    let key = opaque_key(&op_id("wf-big"));
    // Byte for byte as sent, the key appended to the object.
    let expected = format!(
        "{},\"idempotency_key\":\"{key}\"}}",
        &body[..body.len() - 1]
    );
    assert_eq!(sent, expected);
}

#[tokio::test]
async fn big_numbers_differing_in_their_last_digit_are_a_conflict() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = square(&provider).await;
    let first = r#"{"amount": 12345678901234567890123}"#;
    let other = r#"{"amount": 12345678901234567890124}"#;
    let resp = refund_with(&proxy, &json_refund("wf-digit"), first).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    let resp = refund_with(&proxy, &json_refund("wf-digit"), other).await;
    let body = problem(&resp, StatusCode::CONFLICT, "parameter-mismatch");
    assert_eq!(body["differing_fields"], serde_json::json!(["amount"]));
    // The same text again is a replay.
    let again = refund_with(&proxy, &json_refund("wf-digit"), first).await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn an_exponent_and_its_decimal_are_different_texts() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = square(&provider).await;
    let resp = refund_with(&proxy, &json_refund("wf-exp"), r#"{"x": 1e2}"#).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    let resp = refund_with(&proxy, &json_refund("wf-exp"), r#"{"x": 100.0}"#).await;
    problem(&resp, StatusCode::CONFLICT, "parameter-mismatch");
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn duplicate_object_keys_are_refused_and_nothing_is_sent() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut proxy = square(&provider).await;
    for (rendered, body) in [
        ("wf-dup", r#"{"a":1,"a":2}"#),
        ("wf-dup-nested", r#"{"m":{"k":1,"k":1}}"#),
        ("wf-dup-escaped", r#"[{"b":true,"\u0062":false}]"#),
    ] {
        let resp = refund_with(&proxy, &json_refund(rendered), body).await;
        let problem = problem(&resp, StatusCode::BAD_REQUEST, "invalid-body");
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("more than once"), "{problem}");
    }
    assert_eq!(provider.request_count(), 0);
    raw::unclaimed(&mut proxy, &[&op_id("wf-dup"), &op_id("wf-dup-nested")]).await;
}

/// The refusal holds on a route whose key goes into a header too: the body is still what
/// the fingerprint says the provider acts on.
#[tokio::test]
async fn duplicate_keys_are_refused_with_a_header_key() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "").await;
    let resp = refund_with(&proxy, &json_refund("wf-h"), r#"{"a":1,"a":1}"#).await;
    problem(&resp, StatusCode::BAD_REQUEST, "invalid-body");
    let ok = refund_with(&proxy, &json_refund("wf-h"), r#"{"a":1,"b":{"a":1}}"#).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text());
    assert_eq!(provider.request_count(), 1);
}
