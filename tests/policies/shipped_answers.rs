//! The proxy's own answers through the shipped policies, as each provider's SDK reads them:
//! the policy file as shipped (only its `upstream` pointed at a fake provider) must answer a
//! parameter mismatch in the provider's error envelope with the proxy's detail and a "do not
//! retry" signal, and an unknown outcome with a status no SDK takes for success plus the
//! retry headers its SDK honours. What the SDKs then do is proven on the SDK test suite; this
//! file proves the policies say what docs/policies.md claims.

use http::{Method, StatusCode};

use crate::common::{Behavior, FakeProvider, Proxy, problem, send};

/// `policies/{name}.toml` as shipped, its upstream replaced by `upstream`.
fn shipped(name: &str, upstream: &str) -> String {
    let path = format!("{}/policies/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("the shipped policy");
    let table: toml::Table = text.parse().expect("valid TOML");
    let original = table["provider"]["upstream"].as_str().expect("an upstream");
    text.replacen(&format!("\"{original}\""), &format!("\"{upstream}\""), 1)
}

async fn start_shipped(name: &str, provider: &FakeProvider) -> Proxy {
    Proxy::builder()
        .policy(name, &shipped(name, &provider.url()))
        .start()
        .await
}

const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");
const JSON: (&str, &str) = ("content-type", "application/json");

#[tokio::test]
async fn stripe_gets_a_mismatch_in_its_envelope_and_is_told_not_to_retry() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start_shipped("stripe", &provider).await;
    let url = proxy.url("/stripe/v1/refunds");
    let headers = [
        FORM,
        ("authorization", "Bearer sk_test_1"),
        ("x-operation-id", "r-1"),
    ];

    let first = send(Method::POST, &url, &headers, "charge=ch_1&amount=500").await;
    assert_eq!(first.unwrap().status, StatusCode::OK);
    let changed = send(Method::POST, &url, &headers, "charge=ch_1&amount=900").await;
    let changed = changed.unwrap();
    let body = problem(&changed, StatusCode::CONFLICT, "parameter-mismatch");
    assert_eq!(changed.header("stripe-should-retry"), Some("false"));
    assert_eq!(body["error"]["type"], "idempotency_error");
    assert_eq!(
        body["error"]["message"], body["detail"],
        "the detail is the message"
    );
    assert_eq!(body["differing_fields"], serde_json::json!(["amount"]));
    assert_eq!(
        provider.request_count(),
        1,
        "nothing was sent for the mismatch"
    );
}

#[tokio::test]
async fn increase_gets_an_unknown_outcome_as_a_503_its_sdk_waits_on() {
    let provider = FakeProvider::start(Behavior::echo().drop_first_response(1)).await;
    let proxy = start_shipped("increase", &provider).await;
    let url = proxy.url("/increase/account_transfers");
    let headers = [
        JSON,
        ("authorization", "Bearer k"),
        ("x-operation-id", "t-1"),
    ];
    let transfer = r#"{"account_id":"a_1","destination_account_id":"a_2","amount":100}"#;

    let lost = send(Method::POST, &url, &headers, transfer).await.unwrap();
    let body = problem(&lost, StatusCode::SERVICE_UNAVAILABLE, "outcome-unknown");
    assert_eq!(lost.header("x-should-retry"), Some("true"));
    let seconds: u64 = lost.header("retry-after").unwrap().parse().unwrap();
    let millis: u64 = lost.header("retry-after-ms").unwrap().parse().unwrap();
    assert_eq!(millis, seconds * 1000, "{body}");
}

#[tokio::test]
async fn gocardless_gets_a_mismatch_its_sdk_raises_with_the_detail() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start_shipped("gocardless", &provider).await;
    let url = proxy.url("/gocardless/payments");
    let headers = [
        JSON,
        ("authorization", "Bearer k"),
        ("x-operation-id", "p-1"),
    ];
    let payment = |amount: u32| {
        format!(
            r#"{{"payments":{{"amount":{amount},"currency":"GBP","links":{{"mandate":"MD1"}}}}}}"#
        )
    };

    let first = send(Method::POST, &url, &headers, payment(100)).await;
    assert_eq!(first.unwrap().status, StatusCode::OK);
    let changed = send(Method::POST, &url, &headers, payment(200))
        .await
        .unwrap();
    let body = problem(&changed, StatusCode::CONFLICT, "parameter-mismatch");
    let error = &body["error"];
    assert_eq!(
        error["type"], "invalid_api_usage",
        "a type the SDK maps to an exception"
    );
    assert_eq!(error["message"], body["detail"]);
    assert_eq!(error["code"], 409, "a number, as GoCardless sends it");
    assert_eq!(provider.request_count(), 1);
}

/// The same effect under every path its API accepts is guarded: Twilio's Messages resource
/// with `.json`, `.xml` or no suffix, GitHub's issues by `owner/repo` or by repository ID.
/// Before 2026-12-03 only `.json` and `owner/repo` were, and the other spellings went
/// through unguarded (`unmatched = "pass"`): an SMS or an issue per retry.
#[tokio::test]
async fn every_spelling_of_a_shipped_effect_is_guarded() {
    let provider = FakeProvider::start(Behavior::fixed(201, "{}")).await;
    let twilio = start_shipped("twilio", &provider).await;
    for suffix in [".json", ".xml", ""] {
        let url = twilio.url(&format!("/twilio/2010-04-01/Accounts/AC1/Messages{suffix}"));
        let headers = [
            FORM,
            ("x-operation-id", "sms-1"),
            ("authorization", "Basic QUM="),
        ];
        let resp = send(Method::POST, &url, &headers, "To=%2B1555&Body=hi")
            .await
            .expect("the proxy answers");
        assert!(
            resp.header("idem-operation-id").is_some(),
            "Messages{suffix} is guarded"
        );
    }
    let github = start_shipped("github", &provider).await;
    for (path, op) in [
        ("/github/repositories/42/issues", "i-1"),
        ("/github/repositories/42/issues/7/comments", "c-1"),
    ] {
        let headers = [
            JSON,
            ("x-operation-id", op),
            ("authorization", "Bearer ghp_1"),
        ];
        let resp = send(
            Method::POST,
            &github.url(path),
            &headers,
            r#"{"title":"t","body":"b"}"#,
        )
        .await
        .expect("the proxy answers");
        assert!(
            resp.header("idem-operation-id").is_some(),
            "{path} is guarded"
        );
    }
}
