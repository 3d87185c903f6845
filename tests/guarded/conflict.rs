//! Same operation, other parameters (docs/reference.md sections 5.3 and 6): 409 `parameter-mismatch` naming the fields
//! that differ, never their values, and nothing sent; the same parameters written another
//! way (JSON key order, form field order) are the same intent.

use http::StatusCode;

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider};

/// Acceptance 2: the amount changed under the same operation ID.
#[tokio::test]
async fn a_changed_amount_is_a_409_naming_amount_and_nothing_is_sent() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "").await;
    let id = op_id("wf-1");

    let first = refund(&proxy, "wf-1", "charge=ch_1&amount=500").await;
    assert_eq!(first.status, StatusCode::OK);

    let changed = refund(&proxy, "wf-1", "charge=ch_1&amount=9999").await;
    let body = problem(&changed, StatusCode::CONFLICT, "parameter-mismatch");
    assert_eq!(body["differing_fields"], serde_json::json!(["amount"]));
    assert_problem_context(&body, &id, "succeeded");
    assert_op_headers(&changed, &id, "succeeded", false);
    assert!(
        !changed.text().contains("9999") && !changed.text().contains("500"),
        "a conflict names fields, never values: {}",
        changed.text()
    );
    assert_eq!(provider.request_count(), 1, "the provider was not called");

    let original = refund(&proxy, "wf-1", "charge=ch_1&amount=500").await;
    assert_eq!(original.status, StatusCode::OK, "the operation is unharmed");
    assert_eq!(original.body, first.body);
    assert_eq!(provider.request_count(), 1);
}

/// A conflict on an operation that is still in flight is refused too, without waiting.
#[tokio::test]
async fn a_conflict_on_an_in_flight_operation_is_refused_at_once() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done").hold()).await;
    let proxy = start(&provider, "").await;
    let id = op_id("wf-2");

    let pending = refund_in_background(&proxy, "wf-2", "amount=500&currency=usd");
    provider.wait_for_requests(1).await;
    let changed = refund(&proxy, "wf-2", "amount=500&currency=eur").await;
    let body = problem(&changed, StatusCode::CONFLICT, "parameter-mismatch");
    assert_eq!(body["differing_fields"], serde_json::json!(["currency"]));
    assert_problem_context(&body, &id, "in_flight");

    provider.release();
    let done = pending.await.expect("task").expect("answer");
    assert_eq!(done.text(), "done");
    assert_eq!(provider.request_count(), 1);
}

/// JSON compares by value and forms as sets of fields: reordering is a replay, not a 409.
#[tokio::test]
async fn the_same_parameters_in_another_order_are_the_same_intent() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done")).await;
    let proxy = start(&provider, "").await;

    let json = |body: &str| {
        let proxy = &proxy;
        let body = body.to_string();
        async move { refund_with(proxy, &[(OP_HEADER, "wf-json"), JSON], &body).await }
    };
    let first = json(r#"{"amount": 500, "meta": {"a": 1, "b": 2}}"#).await;
    assert_eq!(first.status, StatusCode::OK);
    let reordered = json(r#"{"meta":{"b":2,"a":1},"amount":500}"#).await;
    assert_eq!(reordered.header("idempotent-replayed"), Some("true"));
    let nested = json(r#"{"meta":{"b":3,"a":1},"amount":500}"#).await;
    let body = problem(&nested, StatusCode::CONFLICT, "parameter-mismatch");
    assert_eq!(body["differing_fields"], serde_json::json!(["meta[b]"]));

    let form = refund(&proxy, "wf-form", "a=1&b=2").await;
    assert_eq!(form.status, StatusCode::OK);
    let swapped = refund(&proxy, "wf-form", "b=2&a=1").await;
    assert_eq!(swapped.header("idempotent-replayed"), Some("true"));
    assert_eq!(provider.request_count(), 2);
}

/// A query parameter left out of the fingerprint, named either way `fingerprint_ignore` names
/// it: bare (`trace`, a body field or a query parameter) or `query:trace` (the query only,
/// the way `differing_fields` names it). A new trace is a replay; a new `limit` is a 409. Before
/// 2026-12-03 `query:trace` was accepted and left nothing out.
#[tokio::test]
async fn a_query_parameter_left_out_by_either_spelling_is_not_a_new_intent() {
    for ignore in ["trace", "query:trace"] {
        let provider = FakeProvider::start(Behavior::fixed(200, "done")).await;
        let route = refund_route(&format!("fingerprint_ignore = [\"{ignore}\"]\n"));
        let proxy = builder(&provider, "", &route).start().await;
        let post = |query: &str| {
            let url = proxy.url(&format!("{PATH}?{query}"));
            async move {
                common::send(
                    http::Method::POST,
                    &url,
                    &[(OP_HEADER, "wf-q"), FORM],
                    "amount=500".to_string(),
                )
                .await
                .expect("the proxy answers")
            }
        };
        let first = post("limit=1&trace=t1").await;
        assert_eq!(first.status, StatusCode::OK, "{ignore}: {}", first.text());
        let retraced = post("limit=1&trace=t2").await;
        assert_eq!(
            retraced.status,
            StatusCode::OK,
            "{ignore}: {}",
            retraced.text()
        );
        assert_eq!(
            retraced.header("idempotent-replayed"),
            Some("true"),
            "{ignore}"
        );
        let changed = post("limit=2&trace=t3").await;
        let body = problem(&changed, StatusCode::CONFLICT, "parameter-mismatch");
        assert_eq!(
            body["differing_fields"],
            serde_json::json!(["query:limit"]),
            "{ignore}"
        );
        assert_eq!(provider.request_count(), 1, "{ignore}");
    }
}

/// Two bodies with no parameter between them but of another kind (none, and `{}`) are two
/// intents, and the 409 names `body`: the one part of a request no parameter's hash covers.
/// Before 2026-12-03 `differing_fields` was empty and the detail read "differing: )".
#[tokio::test]
async fn bodies_of_another_kind_without_parameters_differ_in_body() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done")).await;
    let proxy = start(&provider, "").await;
    let empty = refund_with(&proxy, &[(OP_HEADER, "wf-kind"), JSON], "").await;
    assert_eq!(empty.status, StatusCode::OK, "{}", empty.text());
    let object = refund_with(&proxy, &[(OP_HEADER, "wf-kind"), JSON], "{}").await;
    let body = problem(&object, StatusCode::CONFLICT, "parameter-mismatch");
    assert_eq!(
        body["differing_fields"],
        serde_json::json!(["body"]),
        "{body}"
    );
    assert!(
        !body["detail"].as_str().unwrap_or_default().contains(": )"),
        "{body}"
    );
    assert_eq!(provider.request_count(), 1);
}
