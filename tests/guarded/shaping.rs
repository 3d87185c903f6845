//! `[[provider.answer]]`: the proxy's own problem answers shaped for the provider's SDK, the
//! first entry naming the problem adding headers and body members (with placeholders), the
//! RFC 9457 members and the proxy's own always kept, sent as `application/json` where the entry
//! asks; the provider's answers and replays are never shaped, and `check` refuses what would
//! change what the proxy promises.

use http::StatusCode;

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider, Proxy};

const SHAPES: &str = r#"
[[provider.answer]]
problems = ["parameter-mismatch"]
headers  = { "Stripe-Should-Retry" = "false" }
body     = { error = { type = "idempotency_error", message = "{detail}", code = "{problem}" } }

[[provider.answer]]
problems = ["outcome-unknown", "in-flight", "awaiting-approval"]
headers  = { "x-should-retry" = "true", "retry-after-ms" = "{retry_after_ms}" }
body     = { retry = { after = "{retry_after}", status = "{status}", note = "{status} s" } }

[[provider.answer]]
problems = ["*"]
headers  = { "x-shaped" = "{problem} {operation_id}" }
"#;

async fn shaped_proxy(provider: &FakeProvider, keys: &str) -> Proxy {
    builder(provider, &format!("{keys}\n{SHAPES}"), &refund_route(""))
        .start()
        .await
}

#[tokio::test]
async fn a_parameter_mismatch_carries_the_sdks_envelope_and_keeps_the_problem() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = shaped_proxy(&provider, "").await;
    let first = refund(&proxy, "wf-1", "amount=500").await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.header("stripe-should-retry"),
        None,
        "the provider's answer"
    );
    let replay = refund(&proxy, "wf-1", "amount=500").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.header("x-shaped"), None, "a replay is never shaped");

    let changed = refund(&proxy, "wf-1", "amount=900").await;
    let body = problem(&changed, StatusCode::CONFLICT, "parameter-mismatch");
    assert_eq!(changed.header("stripe-should-retry"), Some("false"));
    assert_eq!(
        changed.header("x-shaped"),
        None,
        "only the first entry applies"
    );
    assert_problem_context(&body, &op_id("wf-1"), "succeeded");
    assert_eq!(body["differing_fields"], serde_json::json!(["amount"]));
    let detail = body["detail"].as_str().expect("detail");
    assert!(detail.contains("other parameters"), "{detail}");
    assert_eq!(body["error"]["type"], "idempotency_error");
    assert_eq!(body["error"]["message"], detail);
    assert_eq!(body["error"]["code"], "parameter-mismatch");
    assert_op_headers(&changed, &op_id("wf-1"), "succeeded", false);
}

#[tokio::test]
async fn pending_answers_carry_retry_hints_with_numbers_where_asked() {
    let provider = FakeProvider::start(Behavior::echo().drop_first_response(1)).await;
    let proxy = shaped_proxy(&provider, "pending_status = 503").await;
    let lost = refund(&proxy, "wf-2", "amount=500").await;
    let body = problem(&lost, StatusCode::SERVICE_UNAVAILABLE, "outcome-unknown");
    assert_eq!(lost.header("retry-after"), Some("5"));
    assert_eq!(lost.header("retry-after-ms"), Some("5000"));
    assert_eq!(lost.header("x-should-retry"), Some("true"));
    assert_eq!(
        body["retry"],
        serde_json::json!({"after": 5, "status": 503, "note": "503 s"})
    );
    assert_eq!(body["status"], 503);
}

/// A placeholder this answer has no value for leaves its header out; an entry with `"*"`
/// shapes problems answered before the operation is known too.
#[tokio::test]
async fn every_problem_of_the_provider_can_be_shaped_and_absent_values_leave_headers_out() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = shaped_proxy(&provider, "").await;
    let missing = refund_with(&proxy, &[FORM], "amount=500").await;
    problem(
        &missing,
        StatusCode::UNPROCESSABLE_ENTITY,
        "missing-operation-id",
    );
    assert_eq!(missing.header("x-shaped"), None, "no operation ID to name");

    let ok = builder(
        &provider,
        "[[provider.answer]]\nproblems = [\"*\"]\nheaders = { \"x-shaped\" = \"{problem}\" }",
        &refund_route(""),
    )
    .start()
    .await;
    let missing = refund_with(&ok, &[FORM], "amount=500").await;
    assert_eq!(missing.header("x-shaped"), Some("missing-operation-id"));
    assert_eq!(provider.request_count(), 0);
}

/// `content_type = "application/json"` changes the media type of the problems its entry names,
/// and nothing else: the same RFC 9457 object, the other problems and the provider's answers
/// as they were.
#[tokio::test]
async fn an_entry_may_send_its_problems_as_application_json_with_the_same_body() {
    let provider = FakeProvider::start(
        Behavior::fixed(200, r#"{"id":"re_1"}"#).header("content-type", "application/vnd.pay+json"),
    )
    .await;
    let shapes = r#"
[[provider.answer]]
problems     = ["parameter-mismatch"]
content_type = "application/json"
body         = { message = "{detail}" }

[[provider.answer]]
problems     = ["*"]
content_type = "application/problem+json"
body         = { message = "{detail}" }
"#;
    let proxy = builder(&provider, shapes, &refund_route("")).start().await;
    let first = refund(&proxy, "wf-j", "amount=500").await;
    assert_eq!(
        first.header("content-type"),
        Some("application/vnd.pay+json")
    );
    let replay = refund(&proxy, "wf-j", "amount=500").await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        replay.header("content-type"),
        Some("application/vnd.pay+json")
    );

    let changed = refund(&proxy, "wf-j", "amount=900").await;
    assert_eq!(changed.header("content-type"), Some("application/json"));
    let body = changed.json();
    assert_eq!(changed.status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["type"], "urn:idemproxy:parameter-mismatch");
    assert_eq!(body["status"], 409);
    assert!(body["title"].is_string(), "{body}");
    assert_problem_context(&body, &op_id("wf-j"), "succeeded");
    assert_eq!(body["differing_fields"], serde_json::json!(["amount"]));
    assert_eq!(body["message"], body["detail"]);
    assert_op_headers(&changed, &op_id("wf-j"), "succeeded", false);

    let missing = refund_with(&proxy, &[FORM], "amount=500").await;
    let body = problem(
        &missing,
        StatusCode::UNPROCESSABLE_ENTITY,
        "missing-operation-id",
    );
    assert_eq!(body["message"], body["detail"], "the default, written out");
    assert_eq!(provider.request_count(), 1);
}

/// Runs `check` with this `[[provider.answer]]` body; returns success and stderr.
async fn check(answer: &str) -> (bool, String) {
    let text = common::policy(
        "pay",
        "https://pay.example.com",
        &format!("\n[[provider.answer]]\n{answer}\n"),
    );
    let dir = Proxy::builder().policy("pay", &text).write();
    let config = dir.config_path().to_string_lossy().into_owned();
    let (status, _, stderr) = dir.run_cli(&["check", "-c", &config]).await;
    (status.success(), stderr)
}

#[tokio::test]
async fn check_refuses_shapes_that_would_change_what_the_proxy_promises() {
    let p = "problems = [\"in-flight\"]\n";
    let cases: [(String, &[&str]); 11] = [
        (
            format!("{p}body = {{ detail = \"x\" }}"),
            &["answer[0].body.detail", "kept"],
        ),
        (
            format!("{p}body = {{ differing_fields = [] }}"),
            &["body.differing_fields"],
        ),
        (
            format!("{p}headers = {{ \"Content-Type\" = \"text/plain\" }}"),
            &["headers.Content-Type"],
        ),
        (
            format!("{p}headers = {{ \"Idem-State\" = \"x\" }}"),
            &["proxy's own"],
        ),
        (
            format!("{p}headers = {{ \"connection\" = \"close\" }}"),
            &["hop-by-hop"],
        ),
        (
            format!("{p}headers = {{ \"x-n\" = 5 }}"),
            &["headers.x-n", "not a string"],
        ),
        (
            format!("{p}headers = {{ \"x-d\" = \"{{detial}}\" }}"),
            &["unknown placeholder"],
        ),
        (
            format!("{p}content_type = \"text/plain\""),
            &["answer[0].content_type", "\"application/json\""],
        ),
        (
            format!("{p}content_type = \"application/problem+json; charset=utf-8\""),
            &["answer[0].content_type", "unknown value"],
        ),
        (
            "problems = [\"in-fligth\"]".into(),
            &["answer[0].problems[0]", "in-flight"],
        ),
        (
            "headers = { \"x\" = \"y\" }".into(),
            &["answer[0].problems", "missing"],
        ),
    ];
    for (answer, parts) in cases {
        let (ok, stderr) = check(&answer).await;
        assert!(!ok, "{answer} was accepted");
        let line = stderr
            .lines()
            .find(|l| l.contains("policies/pay.toml: provider.answer"));
        let line = line.unwrap_or_else(|| panic!("{answer}: no error line in {stderr}"));
        for part in parts {
            assert!(line.contains(part), "{answer}: {part} missing from {line}");
        }
    }
    let (ok, stderr) = check(&format!(
        "{p}body = {{ error = {{ detail = \"{{detail}}\" }} }}"
    ))
    .await;
    assert!(ok, "nested members may take any name: {stderr}");
}
