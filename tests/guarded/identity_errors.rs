//! Requests whose operation cannot be identified (docs/reference.md sections 4 and 6): 422 `missing-operation-id`
//! naming the absent parts per template, 422 `invalid-operation-id` over 512 bytes, 400
//! `invalid-body`, 413 `body-too-large`; and `on_missing_id = "pass"`, which forwards
//! unguarded. Nothing is sent for a refusal.

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::BodyExt;

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider, route};

/// Two templates: the first from a header, the second from another header and a form field.
fn two_templates(extra: &str) -> String {
    let ids = [
        "{header:x-operation-id}",
        "{header:x-workflow-id}:{form:charge}:refund",
    ];
    format!("{}{extra}", route(ROUTE, "POST /v1/refunds", &ids))
}

#[tokio::test]
async fn no_applicable_template_is_a_422_listing_the_missing_parts_per_template() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = builder(&provider, "", &two_templates("")).start().await;

    let none = refund_with(&proxy, &[FORM], "amount=500").await;
    let body = problem(
        &none,
        StatusCode::UNPROCESSABLE_ENTITY,
        "missing-operation-id",
    );
    let expected = serde_json::json!([
        ["header:x-operation-id"],
        ["header:x-workflow-id", "form:charge"]
    ]);
    assert_eq!(body["missing"], expected);
    assert_eq!(
        (body["provider"].clone(), body["route"].clone()),
        (PROVIDER.into(), ROUTE.into())
    );
    assert_eq!(
        none.header("idem-operation-id"),
        None,
        "no operation, no ID"
    );

    let empty_charge = [("x-workflow-id", "wf-9"), ("x-operation-id", ""), FORM];
    let partly = refund_with(&proxy, &empty_charge, "amount=500&charge=").await;
    let body = problem(
        &partly,
        StatusCode::UNPROCESSABLE_ENTITY,
        "missing-operation-id",
    );
    assert_eq!(
        body["missing"],
        serde_json::json!([["header:x-operation-id"], ["form:charge"]])
    );

    let second = refund_with(&proxy, &[("x-workflow-id", "wf-9"), FORM], "charge=ch_1").await;
    assert_eq!(second.status, StatusCode::OK, "the second template applies");
    assert_eq!(
        second.header("idem-operation-id"),
        Some("pay/create_refund/wf-9:ch_1:refund")
    );
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn on_missing_id_pass_forwards_unguarded_marked_unguarded() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let routes = refund_route("on_missing_id = \"pass\"\n");
    let proxy = builder(&provider, "", &routes).start().await;

    for n in 1..=2 {
        let resp = refund_with(&proxy, &[FORM, ("x-workflow-id", "wf-1")], "amount=500").await;
        assert_eq!(resp.status, StatusCode::OK);
        assert_eq!(resp.header("idem-state"), Some("unguarded"));
        assert_eq!(resp.header("idem-operation-id"), None);
        assert_eq!(resp.header("idempotent-replayed"), None);
        assert_eq!(
            resp.json()["effect"],
            n,
            "each one is sent: nothing guards it"
        );
        let echoed = &resp.json()["headers"];
        assert!(
            echoed.get("x-workflow-id").is_none(),
            "control headers never forwarded"
        );
    }
    let guarded = refund(&proxy, "wf-2", "amount=500").await;
    assert_eq!(
        guarded.header("idem-state"),
        Some("succeeded"),
        "with an ID it is guarded"
    );
}

#[tokio::test]
async fn an_operation_id_over_512_bytes_is_a_422() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "").await;
    // "pay/create_refund/" is 18 bytes: 494 more fit exactly, 495 do not.
    let fits = "x".repeat(512 - 18);
    let over = "x".repeat(512 - 17);

    let resp = refund(&proxy, &over, "amount=500").await;
    let body = problem(
        &resp,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-operation-id",
    );
    assert_eq!(body["provider"], PROVIDER);
    assert_eq!(provider.request_count(), 0);
    let resp = refund(&proxy, &fits, "amount=500").await;
    assert_eq!(resp.status, StatusCode::OK, "512 bytes is allowed");
}

#[tokio::test]
async fn a_json_part_on_a_form_body_or_a_non_scalar_is_a_400() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let routes = route(ROUTE, "POST /v1/refunds", &["{json:/ref}"]);
    let proxy = builder(&provider, "", &routes).start().await;

    let form = refund_with(&proxy, &[FORM], "ref=r1").await;
    let body = problem(&form, StatusCode::BAD_REQUEST, "invalid-body");
    assert_eq!(body["route"], ROUTE);
    let object = refund_with(&proxy, &[JSON], r#"{"ref": {"nested": 1}}"#).await;
    problem(&object, StatusCode::BAD_REQUEST, "invalid-body");
    let broken = refund_with(&proxy, &[JSON], r#"{"ref": "r1""#).await;
    problem(&broken, StatusCode::BAD_REQUEST, "invalid-body");
    assert_eq!(provider.request_count(), 0);

    let json = refund_with(&proxy, &[JSON], r#"{"ref": 7, "amount": 500}"#).await;
    assert_eq!(json.status, StatusCode::OK);
    assert_eq!(
        json.header("idem-operation-id"),
        Some("pay/create_refund/7")
    );
}

#[tokio::test]
async fn a_body_over_max_request_body_is_a_413_declared_or_streamed() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = builder(&provider, "", &refund_route(""))
        .config("[limits]\nmax_request_body = \"1 KiB\"\n")
        .start()
        .await;
    let big = format!("amount=500&note={}", "n".repeat(1024));

    let declared = refund(&proxy, "wf-big", &big).await;
    let body = problem(&declared, StatusCode::PAYLOAD_TOO_LARGE, "body-too-large");
    assert_eq!(body["provider"], PROVIDER);
    assert_eq!(body["route"], ROUTE);
    assert_eq!(
        declared.header("idem-operation-id"),
        None,
        "the body was never read"
    );

    let chunks = big
        .into_bytes()
        .chunks(100)
        .map(Bytes::copy_from_slice)
        .collect::<Vec<_>>();
    let frames = futures_util::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, std::convert::Infallible>(http_body::Frame::data(c))),
    );
    let streamed = http_body_util::StreamBody::new(frames).boxed();
    let headers = [(OP_HEADER, "wf-big"), FORM];
    let resp = common::send_with(
        &common::client(),
        Method::POST,
        &proxy.url(PATH),
        &headers,
        streamed,
    )
    .await
    .expect("answer");
    problem(&resp, StatusCode::PAYLOAD_TOO_LARGE, "body-too-large");
    assert_eq!(provider.request_count(), 0);

    let small = refund(&proxy, "wf-big", "amount=500").await;
    assert_eq!(
        small.status,
        StatusCode::OK,
        "nothing was recorded for the refused body"
    );
}

/// A query value that is not UTF-8 once percent-decoded counts as absent, as a header's does:
/// `?id=%FF` and `?id=%FE` are two different values that have no text, and would otherwise both
/// render as U+FFFD, one operation ID for two intents. Before 2026-12-03 they did.
#[tokio::test]
async fn a_query_value_that_is_not_utf8_is_absent_from_an_operation_id() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let routes = route(ROUTE, "POST /v1/refunds", &["{query:id}"]);
    let proxy = builder(&provider, "", &routes).start().await;
    for raw in ["%FF", "%FE", "ok%C3"] {
        let url = proxy.url(&format!("{PATH}?id={raw}"));
        let resp = common::send(Method::POST, &url, &[FORM], "amount=500".to_string())
            .await
            .expect("the proxy answers");
        let body = problem(
            &resp,
            StatusCode::UNPROCESSABLE_ENTITY,
            "missing-operation-id",
        );
        assert_eq!(body["missing"], serde_json::json!([["query:id"]]), "{raw}");
    }
    let url = proxy.url(&format!("{PATH}?id=caf%C3%A9"));
    let resp = common::send(Method::POST, &url, &[FORM], "amount=500".to_string())
        .await
        .expect("the proxy answers");
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    assert_eq!(
        resp.header("idem-operation-id"),
        Some(op_id("caf%C3%A9").as_str())
    );
    assert_eq!(
        provider.request_count(),
        1,
        "only the readable one was sent"
    );
}
