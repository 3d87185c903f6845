//! `key_length`: the opaque key (lowercase hex sha256 of the operation ID) cut to that many
//! characters, wherever it goes (a header or a JSON body field), the same on every attempt;
//! `check` refuses a length outside 32..64 and any `key_length` on a plain key, and the
//! shipped Square policy sends keys Square accepts (at most 45 characters).

use http::StatusCode;

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider, Proxy};

/// A header key is the first `key_length` characters of the full opaque key, and a re-send
/// after a lost answer carries exactly the same short key.
#[tokio::test]
async fn a_short_key_goes_into_the_header_and_stays_the_same_on_a_resend() {
    let provider = FakeProvider::start(
        Behavior::echo()
            .dedupe_on_header("idempotency-key")
            .drop_first_response(1),
    )
    .await;
    let proxy = start(&provider, "dedupe = \"key\"\nkey_length = 40").await;
    let full = opaque_key(&op_id("wf-short"));

    let first = refund(&proxy, "wf-short", "amount=500").await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.text());
    let again = refund(&proxy, "wf-short", "amount=500").await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text());

    let sent: Vec<String> = provider
        .requests()
        .iter()
        .map(|r| r.header("idempotency-key").unwrap_or_default().to_string())
        .collect();
    assert_eq!(sent, [&full[..40], &full[..40]]);
    assert_eq!(
        provider.effects(),
        1,
        "the provider deduplicated the re-send"
    );
}

/// A key in the JSON body is cut the same way.
#[tokio::test]
async fn a_short_key_goes_into_the_json_body() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let keys = "key_json_field = \"/idempotency_key\"\nkey_length = 45";
    let proxy = start(&provider, keys).await;
    let headers = [(OP_HEADER, "wf-json"), JSON];
    let resp = refund_with(&proxy, &headers, r#"{"amount":500}"#).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());

    let body: serde_json::Value =
        serde_json::from_slice(&provider.requests()[0].body).expect("JSON sent");
    let full = opaque_key(&op_id("wf-json"));
    assert_eq!(body["idempotency_key"], &full[..45]);
    assert_eq!(body["amount"], 500);
}

/// Runs `check` on a one-provider config with these `[provider]` keys.
async fn check(keys: &str) -> (bool, String) {
    let text = common::policy("pay", "https://pay.example.com", keys);
    let dir = Proxy::builder().policy("pay", &text).write();
    let config = dir.config_path().to_string_lossy().into_owned();
    let (status, _, stderr) = dir.run_cli(&["check", "-c", &config]).await;
    (status.success(), stderr)
}

#[tokio::test]
async fn check_refuses_lengths_outside_32_to_64_and_plain_keys_that_would_be_cut() {
    for bad in ["key_length = 31", "key_length = 65", "key_length = \"45\""] {
        let (ok, stderr) = check(bad).await;
        assert!(!ok, "{bad} was accepted");
        assert!(
            stderr.contains("policies/pay.toml: provider.key_length:")
                && stderr.contains("32 to 64"),
            "{bad}: {stderr}"
        );
    }
    let (ok, stderr) = check("key_format = \"plain\"\nkey_length = 45").await;
    assert!(!ok, "a plain key cannot be cut");
    assert!(
        stderr.contains("provider.key_length") && stderr.contains("key_format = \"opaque\""),
        "{stderr}"
    );
    for good in [
        "key_length = 32",
        "key_length = 64",
        "key_format = \"plain\"",
    ] {
        let (ok, stderr) = check(good).await;
        assert!(ok, "{good}: {stderr}");
    }
}

/// The shipped Square policy: its payments and refunds accept keys of at most 45 characters.
#[test]
fn the_shipped_square_policy_sends_45_character_keys() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("proxy.toml");
    let config = idemproxy::config::load(&path).expect("the shipped config loads");
    let square = config
        .providers
        .iter()
        .find(|p| p.name == "square")
        .expect("a square policy");
    assert_eq!(square.key_length, 45);
}
