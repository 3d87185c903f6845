//! Headers of a guarded exchange (docs/reference.md sections 4.3 and 6.1): `Idem-Operation-Id` (percent-encoded),
//! `Idem-State` and `Idempotent-Replayed` on every guarded answer and on none that was
//! forwarded unguarded; and the request as the provider sees it: control and hop-by-hop
//! headers gone, `Host` the upstream's.

use http::{Method, StatusCode};

use crate::common::guarded::*;
use crate::common::{Behavior, FakeProvider, route, send, send_h2c};

/// An ID with a space, a non-ASCII character and `%` travels percent-encoded in the header
/// and as is in a problem body.
#[tokio::test]
async fn the_operation_id_header_is_percent_encoded() {
    let provider = FakeProvider::start(Behavior::fixed(200, "ok")).await;
    let routes = route(ROUTE, "POST /v1/refunds", &["{json:/ref}"]);
    let proxy = builder(&provider, "", &routes).start().await;
    let raw = "pay/create_refund/wf 81:café:100%";
    let encoded = "pay/create_refund/wf%2081:caf%C3%A9:100%25";

    let body = |amount: u32| format!(r#"{{"ref": "wf 81:café:100%", "amount": {amount}}}"#);
    let first = refund_with(&proxy, &[JSON], &body(5)).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_op_headers(&first, encoded, "succeeded", false);
    let replay = refund_with(&proxy, &[JSON], &body(5)).await;
    assert_op_headers(&replay, encoded, "succeeded", true);

    let conflict = refund_with(&proxy, &[JSON], &body(6)).await;
    let problem_body = problem(&conflict, StatusCode::CONFLICT, "parameter-mismatch");
    assert_eq!(
        problem_body["operation_id"], raw,
        "the body holds the ID as is"
    );
    assert_op_headers(&conflict, encoded, "succeeded", false);
    assert_eq!(provider.request_count(), 1);
}

/// `Idempotent-Replayed` is also true when the provider itself said it replayed.
#[tokio::test]
async fn a_provider_replay_is_reported_as_replayed() {
    let behavior = Behavior::fixed(200, "ok").header("idempotent-replayed", "true");
    let provider = FakeProvider::start(behavior).await;
    let proxy = start(&provider, "").await;

    let first = refund(&proxy, "wf-1", "amount=5").await;
    assert_op_headers(&first, &op_id("wf-1"), "succeeded", true);
}

/// What the provider receives: the key, the agent's own headers, but no control header, no
/// hop-by-hop header (nor one `Connection` names), and `Host` set for the upstream.
#[tokio::test]
async fn the_dispatched_request_is_cleaned_and_addressed_to_the_upstream() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "").await;
    let headers = [
        (OP_HEADER, "wf-2"),
        ("x-workflow-id", "wf"),
        FORM,
        ("connection", "keep-alive, x-hop"),
        ("x-hop", "1"),
        ("keep-alive", "timeout=5"),
        ("proxy-authorization", "Basic eA=="),
        ("x-agent", "kept"),
    ];
    let resp = refund_with(&proxy, &headers, "amount=5").await;
    assert_eq!(resp.status, StatusCode::OK);

    let sent = &provider.requests()[0];
    assert_eq!(sent.path_and_query, "/v1/refunds");
    assert_eq!(
        sent.header("host"),
        Some(provider.addr().to_string().as_str())
    );
    assert_eq!(sent.header("x-agent"), Some("kept"));
    assert_eq!(&sent.body[..], b"amount=5");
    for gone in [
        "x-operation-id",
        "x-workflow-id",
        "x-hop",
        "keep-alive",
        "proxy-authorization",
    ] {
        assert_eq!(sent.header(gone), None, "{gone} was forwarded");
    }
    let key = opaque_key(&op_id("wf-2"));
    assert_eq!(sent.header("idempotency-key"), Some(key.as_str()));
}

/// A request forwarded unguarded (no route matches, `unmatched = "pass"`) gets none of the
/// operation headers.
#[tokio::test]
async fn an_unguarded_answer_carries_no_operation_headers() {
    let provider = FakeProvider::start(Behavior::fixed(200, "balance")).await;
    let proxy = start(&provider, "").await;

    let resp = send(
        Method::GET,
        &proxy.url("/pay/v1/balance"),
        &[(OP_HEADER, "x")],
        "",
    )
    .await
    .expect("answer");
    assert_eq!(
        (resp.status, resp.text()),
        (StatusCode::OK, "balance".into())
    );
    for name in ["idem-operation-id", "idem-state", "idempotent-replayed"] {
        assert_eq!(resp.header(name), None, "{name} on an unguarded answer");
    }
    assert_eq!(provider.requests()[0].header("idempotency-key"), None);
}

/// Agents speaking h2c get the same guarded answers and replays.
#[tokio::test]
async fn guarded_answers_and_replays_over_h2c() {
    let provider = FakeProvider::start(Behavior::fixed(201, "made")).await;
    let proxy = start(&provider, "").await;
    let headers = [(OP_HEADER, "wf-h2"), FORM];

    let first = send_h2c(Method::POST, &proxy.url(PATH), &headers, "amount=5")
        .await
        .expect("h2c");
    assert_eq!(
        (first.status, first.text()),
        (StatusCode::CREATED, "made".into())
    );
    assert_op_headers(&first, &op_id("wf-h2"), "succeeded", false);
    let again = send_h2c(Method::POST, &proxy.url(PATH), &headers, "amount=5")
        .await
        .expect("h2c");
    assert_eq!(again.body, first.body);
    assert_op_headers(&again, &op_id("wf-h2"), "succeeded", true);
    assert_eq!(provider.request_count(), 1);
}
