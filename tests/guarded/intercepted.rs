//! The guarded protocol through an intercepted CONNECT tunnel (docs/reference.md section
//! 6.3): a client that only knows HTTPS_PROXY and the proxy's CA sends the provider's own URL
//! (`https://localhost:PORT/v1/refunds`, its upstream), and gets what the plain path gives:
//! a lost answer recovered with one effect, a changed retry refused with 409, an unknown
//! outcome held, ledger replays, over HTTP/1.1 and h2; and the plain path and the tunnel are
//! one operation. The same assertions as `replay`, `conflict` and `unknown`, by the same
//! helpers.

use http::{Method, StatusCode};

use crate::common::guarded::*;
use crate::common::tunnel::{Ca, Through, intercepting};
use crate::common::{Behavior, FakeProvider, Proxy};

/// A TLS provider behind a proxy with `[intercept]`: the guarded `create_refund` route.
async fn start_intercepting(provider: &FakeProvider, keys: &str, ca: &Ca) -> Proxy {
    intercepting(builder(provider, keys, &refund_route("")), ca, &[])
        .start()
        .await
}

/// A client of the provider's own host (`localhost`, the fake's certificate name) through
/// the proxy.
fn through<'a>(proxy: &Proxy, provider: &FakeProvider, ca: &'a Ca, h2: bool) -> Through<'a> {
    Through {
        proxy: proxy.proxy_addr(),
        ca,
        host: "localhost",
        port: provider.addr().port(),
        h2,
    }
}

async fn refund_through(client: &Through<'_>, rendered: &str, body: &str) -> crate::common::Resp {
    client
        .send(
            Method::POST,
            "/v1/refunds",
            &[(OP_HEADER, rendered), FORM],
            body,
        )
        .await
}

#[tokio::test]
async fn a_lost_answer_through_the_tunnel_is_recovered_with_one_effect() {
    let behavior = Behavior::echo()
        .dedupe_on_header("idempotency-key")
        .drop_first_response(1);
    let provider = FakeProvider::start_tls(behavior).await;
    let ca = Ca::new();
    let proxy = start_intercepting(&provider, "dedupe = \"key\"", &ca).await;
    let client = through(&proxy, &provider, &ca, false);
    let id = op_id("wf-1");

    let lost = refund_through(&client, "wf-1", "charge=ch_1&amount=500").await;
    let body = problem(&lost, StatusCode::ACCEPTED, "outcome-unknown");
    assert_problem_context(&body, &id, "unknown");
    assert_op_headers(&lost, &id, "unknown", false);
    assert_eq!(provider.effects(), 1, "the provider did commit the effect");

    let recovered = refund_through(&client, "wf-1", "charge=ch_1&amount=500").await;
    assert_eq!(recovered.status, StatusCode::OK, "{}", recovered.text());
    assert_eq!(recovered.json()["effect"], 1, "the original result");
    assert_op_headers(&recovered, &id, "succeeded", true);
    let key = opaque_key(&id);
    for request in provider.requests() {
        assert_eq!(request.header("idempotency-key"), Some(key.as_str()));
    }

    let again = refund_through(&client, "wf-1", "charge=ch_1&amount=500").await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.body, recovered.body, "the ledger's copy");
    assert_op_headers(&again, &id, "succeeded", true);
    assert_eq!(provider.request_count(), 2, "answered without the provider");
    assert_eq!(provider.effects(), 1);
}

#[tokio::test]
async fn a_changed_retry_through_the_tunnel_is_a_409_and_nothing_is_sent() {
    let provider = FakeProvider::start_tls(Behavior::echo()).await;
    let ca = Ca::new();
    let proxy = start_intercepting(&provider, "", &ca).await;
    let client = through(&proxy, &provider, &ca, false);
    let id = op_id("wf-2");

    let first = refund_through(&client, "wf-2", "charge=ch_1&amount=500").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    let changed = refund_through(&client, "wf-2", "charge=ch_1&amount=9999").await;
    let body = problem(&changed, StatusCode::CONFLICT, "parameter-mismatch");
    assert_eq!(body["differing_fields"], serde_json::json!(["amount"]));
    assert_problem_context(&body, &id, "succeeded");
    assert_eq!(provider.request_count(), 1, "the provider was not called");
}

#[tokio::test]
async fn an_unknown_outcome_through_the_tunnel_is_held_and_never_sent_again() {
    // No dedupe: nothing may be re-sent once the answer is lost.
    let provider = FakeProvider::start_tls(Behavior::echo().drop_first_response(1)).await;
    let ca = Ca::new();
    let proxy = start_intercepting(&provider, "", &ca).await;
    let client = through(&proxy, &provider, &ca, false);
    let id = op_id("wf-3");

    let lost = refund_through(&client, "wf-3", "amount=500").await;
    let body = problem(&lost, StatusCode::ACCEPTED, "outcome-unknown");
    assert_problem_context(&body, &id, "unknown");
    assert_next(&body, "wait", &["It is held until it is resolved"]);
    let again = refund_through(&client, "wf-3", "amount=500").await;
    let body = problem(&again, StatusCode::ACCEPTED, "outcome-unknown");
    assert_next(&body, "wait", &[]);
    assert_eq!(provider.request_count(), 1, "held: never sent again");
    assert_eq!(provider.effects(), 1);
}

#[tokio::test]
async fn h2_inside_the_tunnel_is_replayed_from_the_ledger() {
    let provider = FakeProvider::start_tls(Behavior::echo()).await;
    let ca = Ca::new();
    let proxy = start_intercepting(&provider, "", &ca).await;
    let client = through(&proxy, &provider, &ca, true);
    let id = op_id("wf-4");

    let first = refund_through(&client, "wf-4", "amount=500").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    assert_op_headers(&first, &id, "succeeded", false);
    let replayed = refund_through(&client, "wf-4", "amount=500").await;
    assert_eq!(replayed.status, StatusCode::OK);
    assert_eq!(replayed.body, first.body);
    assert_op_headers(&replayed, &id, "succeeded", true);
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn the_plain_path_and_the_tunnel_are_one_operation() {
    let provider = FakeProvider::start_tls(Behavior::echo()).await;
    let ca = Ca::new();
    let proxy = start_intercepting(&provider, "", &ca).await;
    let id = op_id("wf-5");

    let plain = refund(&proxy, "wf-5", "amount=500").await;
    assert_eq!(plain.status, StatusCode::OK, "{}", plain.text());
    let client = through(&proxy, &provider, &ca, false);
    let tunnelled = refund_through(&client, "wf-5", "amount=500").await;
    assert_eq!(tunnelled.status, StatusCode::OK);
    assert_eq!(tunnelled.body, plain.body);
    assert_op_headers(&tunnelled, &id, "succeeded", true);
    let changed = refund_through(&client, "wf-5", "amount=9").await;
    problem(&changed, StatusCode::CONFLICT, "parameter-mismatch");
    assert_eq!(provider.request_count(), 1);
}
