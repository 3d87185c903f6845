//! `next` and the words of every problem (docs/reference.md section 6.2): each answer says
//! what happened and what to do next, as the proxy will treat the next identical request:
//! `retry_same`, `wait`, `new_operation`, `fix_request` or `stop`. (The `outcome-unknown`
//! cases: tests/unknown/what_next.rs.)

use http::{Method, StatusCode};

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider, Proxy};

const NEW_ID: &str = "Do not retry it under a new operation ID.";

#[tokio::test]
async fn a_request_the_proxy_cannot_read_says_fix_request() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = builder(&provider, "", &refund_route(""))
        .config("[limits]\nmax_request_body = \"64 B\"")
        .start()
        .await;

    let missing = refund_with(&proxy, &[FORM], "amount=500").await;
    let body = problem(
        &missing,
        StatusCode::UNPROCESSABLE_ENTITY,
        "missing-operation-id",
    );
    assert_next(
        &body,
        "fix_request",
        &["Send the parts listed in `missing`"],
    );
    let long = "x".repeat(600);
    let too_long = refund(&proxy, &long, "amount=500").await;
    let body = problem(
        &too_long,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-operation-id",
    );
    assert_next(&body, "fix_request", &["Use a shorter identifier"]);
    let large = refund(&proxy, "wf-large", &format!("memo={}", "m".repeat(100))).await;
    let body = problem(&large, StatusCode::PAYLOAD_TOO_LARGE, "body-too-large");
    assert_next(&body, "fix_request", &["Send a smaller body"]);
    let nowhere = common::send(Method::POST, &proxy.url("/nowhere"), &[], String::new()).await;
    let body = problem(&nowhere.expect("answer"), StatusCode::NOT_FOUND, "no-route");
    assert_next(&body, "fix_request", &["Point your client at"]);
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test]
async fn other_parameters_under_a_spent_id_say_new_operation() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "").await;
    let first = refund(&proxy, "wf-m", "amount=500").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    let changed = refund(&proxy, "wf-m", "amount=900").await;
    let body = problem(&changed, StatusCode::CONFLICT, "parameter-mismatch");
    assert_next(
        &body,
        "new_operation",
        &[
            "send it unchanged",
            "for a new intent, use a new operation ID",
        ],
    );
}

#[tokio::test]
async fn a_duplicate_in_flight_says_retry_same() {
    let provider = FakeProvider::start(Behavior::echo().hold()).await;
    let proxy = builder(&provider, "", &refund_route(""))
        .config("[limits]\nin_flight_wait = \"20ms\"")
        .start()
        .await;
    let first = refund_in_background(&proxy, "wf-f", "amount=500");
    provider.wait_for_requests(1).await;
    let duplicate = refund(&proxy, "wf-f", "amount=500").await;
    let body = problem(&duplicate, StatusCode::ACCEPTED, "in-flight");
    assert_next(
        &body,
        "retry_same",
        &[
            "Retry the same request unchanged",
            "Do not retry it under a new operation ID",
        ],
    );
    provider.release();
    let first = first.await.expect("task").expect("answer");
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
}

#[tokio::test]
async fn approval_says_wait_and_a_rejection_says_stop() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = builder(&provider, "", &refund_route("approval = \"required\"\n"))
        .start()
        .await;
    let waiting = refund(&proxy, "wf-a", "amount=500").await;
    let body = problem(&waiting, StatusCode::ACCEPTED, "awaiting-approval");
    assert_next(&body, "wait", &["approves or rejects", NEW_ID]);

    let path = format!("/ops/{}/reject", op_id("wf-a").replace('/', "%2F"));
    let json = [("content-type", "application/json")];
    let reason = r#"{"reason":"not this customer"}"#.to_string();
    let rejected = common::send(Method::POST, &proxy.admin_url(&path), &json, reason).await;
    assert_eq!(rejected.expect("admin").status, StatusCode::OK);
    let refused = refund(&proxy, "wf-a", "amount=500").await;
    let body = problem(&refused, StatusCode::FORBIDDEN, "operation-rejected");
    assert_next(
        &body,
        "stop",
        &["not this customer", "under this operation ID or a new one"],
    );
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test]
async fn another_callers_operation_and_an_unlisted_route_say_stop() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "unmatched = \"reject\"").await;
    let mine = [(OP_HEADER, "wf-p"), FORM, ("authorization", "Bearer sk_1")];
    assert_eq!(
        refund_with(&proxy, &mine, "amount=5").await.status,
        StatusCode::OK
    );
    let theirs = [(OP_HEADER, "wf-p"), FORM, ("authorization", "Bearer sk_2")];
    let other = refund_with(&proxy, &theirs, "amount=5").await;
    let body = problem(&other, StatusCode::FORBIDDEN, "principal-mismatch");
    assert_next(
        &body,
        "stop",
        &["Do not retry it under another operation ID"],
    );

    let url = proxy.url("/pay/v1/other");
    let unlisted = common::send(Method::POST, &url, &[], String::new()).await;
    let body = problem(
        &unlisted.expect("answer"),
        StatusCode::FORBIDDEN,
        "route-not-allowed",
    );
    assert_next(&body, "stop", &["refused until an operator adds a route"]);
}

#[tokio::test]
async fn an_unreachable_provider_says_retry_same() {
    let addr = closed_port().await;
    let text = common::policy(PROVIDER, &format!("http://{addr}"), &refund_route(""));
    let proxy = Proxy::builder().policy(PROVIDER, &text).start().await;
    let first = refund(&proxy, "wf-u", "amount=500").await;
    let body = problem(&first, StatusCode::BAD_GATEWAY, "upstream-unreachable");
    assert_next(
        &body,
        "retry_same",
        &["Nothing was sent", "send the same request unchanged"],
    );
}
