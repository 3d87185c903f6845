//! Every re-send repeats the first attempt (docs/reference.md section 5.3): after an unknown outcome, a failure or an
//! approval, the provider receives the first attempt's method, path, query and body byte for
//! byte, whatever the retry carried in fields the fingerprint ignores; and it carries the key
//! (and key placement) stored with the operation, whatever the policy says after a restart.

use http::{Method, StatusCode};

use crate::common::guarded::*;
use crate::common::{Behavior, FakeProvider, Recorded, send};

/// A refund route whose fingerprint ignores the trace id (a new trace id is not a new intent).
fn traced_route(extra: &str) -> String {
    refund_route(&format!(
        "fingerprint_ignore = [\"metadata[trace_id]\"]\n{extra}"
    ))
}

fn body_text(r: &Recorded) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// Item 0: the retry after a lost answer carries another trace id; the re-send carries the
/// first one, so a provider that compares parameters on a reused key sees the same request.
#[tokio::test]
async fn a_resend_after_an_unknown_repeats_the_first_body_not_the_retrys() {
    let behavior = Behavior::echo()
        .dedupe_on_header("idempotency-key")
        .drop_first_response(1);
    let provider = FakeProvider::start(behavior).await;
    let proxy = builder(&provider, "dedupe = \"key\"", &traced_route(""))
        .start()
        .await;
    let id = op_id("wf-1");

    let lost = refund(&proxy, "wf-1", "amount=500&metadata[trace_id]=t1").await;
    problem(&lost, StatusCode::ACCEPTED, "outcome-unknown");
    let retry = refund(&proxy, "wf-1", "amount=500&metadata[trace_id]=t2").await;
    assert_eq!(retry.status, StatusCode::OK, "{}", retry.text());
    assert_op_headers(&retry, &id, "succeeded", true);

    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(body_text(&requests[1]), "amount=500&metadata[trace_id]=t1");
    assert_eq!(requests[1].body, requests[0].body, "byte-identical");
    assert_eq!(requests[1].path_and_query, requests[0].path_and_query);
    assert_eq!(
        requests[1].header("idempotency-key"),
        requests[0].header("idempotency-key")
    );
    assert_eq!(provider.effects(), 1);
}

/// Item 0 with the key in the JSON body (Square): the re-send is the first body with the key
/// already in it, byte for byte, although the retry reworded an ignored field.
#[tokio::test]
async fn a_resend_repeats_the_first_json_body_with_its_key() {
    let behavior = Behavior::echo()
        .dedupe_on_json("/idempotency_key")
        .drop_first_response(1);
    let provider = FakeProvider::start(behavior).await;
    let keys = "dedupe = \"key\"\nkey_json_field = \"/idempotency_key\"";
    let routes = refund_route("fingerprint_ignore = [\"note\"]\n");
    let proxy = builder(&provider, keys, &routes).start().await;

    let first = r#"{"amount":500,"note":"first try"}"#;
    let lost = refund_with(&proxy, &[(OP_HEADER, "wf-j"), JSON], first).await;
    problem(&lost, StatusCode::ACCEPTED, "outcome-unknown");
    let retry_body = r#"{"amount":500,"note":"second try"}"#;
    let retry = refund_with(&proxy, &[(OP_HEADER, "wf-j"), JSON], retry_body).await;
    assert_eq!(retry.status, StatusCode::OK, "{}", retry.text());

    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].body, requests[0].body, "byte-identical");
    assert!(body_text(&requests[1]).contains("first try"));
    assert_eq!(provider.effects(), 1);
}

/// Item 0 after an approval: the operator approved what the first request asked; the agent's
/// next request (another trace id) sends exactly that.
#[tokio::test]
async fn an_approved_operation_sends_the_request_that_was_approved() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let routes = traced_route("approval = \"required\"\n");
    let proxy = builder(&provider, "", &routes).start().await;
    let id = op_id("wf-a");

    let asked = refund(&proxy, "wf-a", "amount=700&metadata[trace_id]=asked").await;
    problem(&asked, StatusCode::ACCEPTED, "awaiting-approval");
    let approve = proxy.admin_url(&format!("/ops/{}/approve", id.replace('/', "%2F")));
    let approved = send(
        Method::POST,
        &approve,
        &[("content-type", "application/json")],
        r#"{"reason":"checked"}"#,
    )
    .await
    .expect("admin answers");
    assert_eq!(approved.status, StatusCode::OK, "{}", approved.text());

    let sent = refund(&proxy, "wf-a", "amount=700&metadata[trace_id]=later").await;
    assert_eq!(sent.status, StatusCode::OK, "{}", sent.text());
    let requests = provider.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        body_text(&requests[0]),
        "amount=700&metadata[trace_id]=asked"
    );
}

/// Item 0 after a definitive failure: the retry of a failed operation is sent again, and
/// it too repeats the first attempt.
#[tokio::test]
async fn a_resend_after_a_failure_repeats_the_first_body() {
    let provider = FakeProvider::start(Behavior::fixed(429, "slow down")).await;
    let proxy = builder(&provider, "dedupe = \"key\"", &traced_route(""))
        .start()
        .await;

    let refused = refund(&proxy, "wf-f", "amount=500&metadata[trace_id]=t1").await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    provider.set_behavior(Behavior::echo());
    let retry = refund(&proxy, "wf-f", "amount=500&metadata[trace_id]=t2").await;
    assert_eq!(retry.status, StatusCode::OK, "{}", retry.text());
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].body, requests[0].body);
}

/// Item 3: the policy's key format changes between restarts; the retry of an operation sent
/// before the change carries the key it was first sent with, in the same header.
#[tokio::test]
async fn a_policy_edit_does_not_change_the_key_of_an_operation_already_sent() {
    let behavior = Behavior::echo()
        .dedupe_on_header("idempotency-key")
        .drop_first_response(1);
    let provider = FakeProvider::start(behavior).await;
    let mut proxy = builder(&provider, "dedupe = \"key\"", &refund_route(""))
        .start()
        .await;
    let id = op_id("wf-k");

    let lost = refund(&proxy, "wf-k", "amount=500").await;
    problem(&lost, StatusCode::ACCEPTED, "outcome-unknown");

    let edited = builder_policy(
        &provider,
        "dedupe = \"key\"\nkey_format = \"plain\"\nkey_header = \"X-Other-Key\"",
    );
    std::fs::write(proxy.dir().path().join("policies/pay.toml"), edited).expect("edit policy");
    let stopped = proxy.terminate().await;
    assert!(stopped.success());
    proxy.restart().await;

    let retry = refund(&proxy, "wf-k", "amount=500").await;
    assert_eq!(retry.status, StatusCode::OK, "{}", retry.text());
    assert_op_headers(&retry, &id, "succeeded", true);
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].header("idempotency-key"),
        Some(opaque_key(&id).as_str())
    );
    assert_eq!(
        requests[1].header("idempotency-key"),
        Some(opaque_key(&id).as_str()),
        "the stored key, in the stored header"
    );
    assert_eq!(requests[1].header("x-other-key"), None);
    assert_eq!(provider.effects(), 1);

    // A new operation follows the edited policy.
    let fresh = refund(&proxy, "wf-k2", "amount=500").await;
    assert_eq!(fresh.status, StatusCode::OK);
    let last = provider.requests().pop().expect("sent");
    assert_eq!(last.header("x-other-key"), Some(op_id("wf-k2").as_str()));
}

/// The `pay` policy text with these `[provider]` keys and the plain refund route.
fn builder_policy(provider: &FakeProvider, keys: &str) -> String {
    provider.policy(PROVIDER, &format!("{keys}\n{}", refund_route("")))
}

/// Item 0 after an operator resolved an unknown operation as failed: the agent may retry it,
/// and the retry repeats the first request (an operator's "failed" can be wrong; the provider
/// may still hold the key with the first parameters).
#[tokio::test]
async fn a_resend_after_an_operators_failed_resolution_repeats_the_first_body() {
    let provider = FakeProvider::start(Behavior::echo().drop_first_response(1)).await;
    let proxy = builder(&provider, "dedupe = \"none\"", &traced_route(""))
        .start()
        .await;
    let id = op_id("wf-r");

    let lost = refund(&proxy, "wf-r", "amount=500&metadata[trace_id]=t1").await;
    problem(&lost, StatusCode::ACCEPTED, "outcome-unknown");
    let resolve = proxy.admin_url(&format!("/ops/{}/resolve", id.replace('/', "%2F")));
    let resolved = send(
        Method::POST,
        &resolve,
        &[("content-type", "application/json")],
        r#"{"outcome":"failed","reason":"checked the dashboard"}"#,
    )
    .await
    .expect("admin answers");
    assert_eq!(resolved.status, StatusCode::OK, "{}", resolved.text());

    let retry = refund(&proxy, "wf-r", "amount=500&metadata[trace_id]=t2").await;
    assert_eq!(retry.status, StatusCode::OK, "{}", retry.text());
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(body_text(&requests[1]), "amount=500&metadata[trace_id]=t1");
    assert_eq!(requests[1].body, requests[0].body);
}
