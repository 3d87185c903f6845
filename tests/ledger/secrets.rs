//! What the ledger and the logs never hold (docs/reference.md section 10): request headers (an agent's bearer
//! token, its cookies, fingerprinted headers), request body values, `Set-Cookie` and
//! redacted response headers. The proxy runs with `IDEMPROXY_LOG=debug`.

use http::StatusCode;

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider};

const BEARER: &str = "sk_test_51LeakCanaryBearerToken";
const COOKIE: &str = "session=LeakCanaryCookie";
const ACCOUNT: &str = "acct_LeakCanaryAccount";
const CVC: &str = "LeakCanaryCvc4242";
const SET_COOKIE: &str = "provider_session=LeakCanarySetCookie";
const REDACTED: &str = "LeakCanaryRedactedHeader";
/// Response bodies are stored (replay needs them): the control that the file is readable.
const ANSWER: &str = "refund-made-LeakCanaryControl";

/// Acceptance 7, and every other secret a guarded exchange carries: across a first answer,
/// a replay and a conflict, none of them reaches the ledger file or the log.
#[tokio::test]
async fn secrets_appear_nowhere_in_the_ledger_file_or_the_logs() {
    let behavior = Behavior::fixed(200, ANSWER)
        .header("set-cookie", SET_COOKIE)
        .header("x-provider-secret", REDACTED);
    let provider = FakeProvider::start(behavior).await;
    let routes = refund_route("fingerprint_headers = [\"x-account\"]\n");
    let keys = "redact_headers = [\"x-provider-secret\"]";
    let mut proxy = builder(&provider, keys, &routes).start().await;
    let id = op_id("wf-secret");

    let authorization = format!("Bearer {BEARER}");
    let send_refund = |cvc: String| {
        let authorization = authorization.clone();
        let proxy = &proxy;
        async move {
            let body = format!("amount=500&card_cvc={cvc}");
            let h = [
                (OP_HEADER, "wf-secret"),
                FORM,
                ("authorization", authorization.as_str()),
                ("cookie", COOKIE),
                ("x-account", ACCOUNT),
            ];
            refund_with(proxy, &h, &body).await
        }
    };
    let first = send_refund(CVC.to_string()).await;
    assert_eq!(
        (first.status, first.text()),
        (StatusCode::OK, ANSWER.into())
    );
    let replay = send_refund(CVC.to_string()).await;
    assert_op_headers(&replay, &id, "succeeded", true);
    assert_eq!(
        replay.header("set-cookie"),
        None,
        "never stored, so never replayed"
    );
    assert_eq!(replay.header("x-provider-secret"), None);
    let conflict = send_refund(format!("{CVC}0")).await;
    problem(&conflict, StatusCode::CONFLICT, "parameter-mismatch");

    let sent = &provider.requests()[0];
    assert_eq!(
        sent.header("authorization"),
        Some(authorization.as_str()),
        "forwarded"
    );
    let stored = ledger(&mut proxy, &id).await;
    let file = std::fs::read(proxy.ledger_path()).expect("ledger file");
    let file = String::from_utf8_lossy(&file);
    assert!(
        file.contains(ANSWER),
        "the response body is stored (control)"
    );
    assert!(file.contains(&id), "the operation ID is stored (control)");
    assert!(
        stored.op.fields.contains_key("header:x-account"),
        "fingerprinted, hashed"
    );
    let log = proxy.log_text();
    assert!(log.contains("DEBUG"), "debug logging was on:\n{log}");
    for secret in [BEARER, COOKIE, ACCOUNT, CVC, SET_COOKIE, REDACTED] {
        assert!(!file.contains(secret), "{secret} is in the ledger file");
        assert!(!log.contains(secret), "{secret} is in the log:\n{log}");
    }
}

/// A CVC (1,000 possible values) and a card number whose first six and last four digits
/// are known (a million possible values): the ledger file holds one hash per field and the
/// admin API shows the fingerprint, so anyone holding either could try every value.
const LOW_CVC: &str = "123";
const CARD: &str = "4242421234564242";

/// Item 8: with the formulas of the unkeyed versions (`guarded::unkeyed`), no possible CVC
/// or card number matches a hash in the ledger file, in the operation read back from it,
/// or in the admin API's view of the operation.
#[tokio::test]
async fn low_entropy_values_cannot_be_guessed_back_from_the_ledger_or_the_admin_api() {
    let provider = FakeProvider::start(Behavior::fixed(200, ANSWER)).await;
    let mut proxy = start(&provider, "").await;
    let id = op_id("wf-low");
    let body = format!("amount=500&card[number]={CARD}&card[cvc]={LOW_CVC}");
    let first = refund(&proxy, "wf-low", &body).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    let admin_path = format!("/ops/{}", id.replace('/', "%2F"));
    let admin = common::send(http::Method::GET, &proxy.admin_url(&admin_path), &[], "")
        .await
        .expect("the admin API answers");
    assert_eq!(admin.status, StatusCode::OK, "{}", admin.text());

    let stored = ledger(&mut proxy, &id).await;
    assert!(
        stored.op.fields.contains_key("card[cvc]"),
        "a hash per field is kept (control)"
    );
    let file = std::fs::read(proxy.ledger_path()).expect("ledger file");
    let mut seen = hex_runs(&file);
    seen.extend(hex_runs(&admin.body));
    seen.extend(stored.op.fields.values().cloned());
    seen.insert(stored.op.fingerprint.clone());

    let cvc = (0..1000)
        .map(|n| format!("{n:03}"))
        .find(|cvc| seen.contains(&unkeyed::field(cvc)));
    assert_eq!(cvc, None, "the CVC was guessed back from a field hash");
    let number = (0..1_000_000)
        .map(|n| format!("424242{n:06}4242"))
        .find(|number| seen.contains(&unkeyed::field(number)));
    assert_eq!(
        number, None,
        "the card number was guessed back from a field hash"
    );
    let by_fingerprint = (0..1000).map(|n| format!("{n:03}")).find(|cvc| {
        let pairs = [
            ("amount", "500"),
            ("card[cvc]", cvc),
            ("card[number]", CARD),
        ];
        seen.contains(&unkeyed::fingerprint("POST", "/v1/refunds", &pairs))
    });
    assert_eq!(
        by_fingerprint, None,
        "the CVC was guessed back from the fingerprint"
    );
}

/// Every run of lowercase hex digits in `bytes` that is as long as a field hash (16) or a
/// fingerprint (64).
fn hex_runs(bytes: &[u8]) -> std::collections::HashSet<String> {
    bytes
        .split(|b| !(b.is_ascii_digit() || (b'a'..=b'f').contains(b)))
        .filter(|run| run.len() == 16 || run.len() == 64)
        .map(|run| String::from_utf8_lossy(run).into_owned())
        .collect()
}
