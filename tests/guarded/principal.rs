//! Principals (docs/reference.md section 4): an operation is bound to a keyed hash of its caller's
//! `principal_headers` (`Authorization` always among them). Another caller asking for the
//! same operation, with the same or other parameters, gets 403 `principal-mismatch`: nothing
//! is replayed, nothing is sent, no field is named; the first caller still gets its replay.
//! An operator's rebind (after a key rotation) lets the next caller's key adopt it.

use http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider, Proxy, Resp};

const FIRST: &str = "Bearer sk_test_first_caller";
const OTHER: &str = "Bearer sk_test_other_caller";

/// A refund of `body` for `wf` with these extra headers.
async fn as_caller(proxy: &Proxy, wf: &str, extra: &[(&str, &str)], body: &str) -> Resp {
    let mut headers = vec![(OP_HEADER, wf), FORM];
    headers.extend_from_slice(extra);
    refund_with(proxy, &headers, body).await
}

/// Asserts the 403 of another principal: no field named, nothing replayed.
fn assert_mismatch(resp: &Resp, id: &str) {
    let body = problem(resp, StatusCode::FORBIDDEN, "principal-mismatch");
    assert_eq!(body["operation_id"], id, "{body}");
    assert!(body.get("differing_fields").is_none(), "{body}");
    assert!(!resp.text().contains("refund-made"), "nothing replayed");
    assert_eq!(
        resp.header("idempotent-replayed"),
        Some("false"),
        "{resp:?}"
    );
}

/// Item 9: another API key, and no `Authorization` at all, with the same operation ID get a
/// 403, with the same parameters as with others (checked before the fingerprint); the
/// provider sees one request; the first caller still gets its replay.
#[tokio::test]
async fn another_caller_gets_403_and_nothing_whatever_its_parameters() {
    let provider = FakeProvider::start(Behavior::fixed(200, "refund-made")).await;
    let mut proxy = start(&provider, "dedupe = \"key\"").await;
    let id = op_id("wf-p1");
    let first = as_caller(&proxy, "wf-p1", &[("authorization", FIRST)], "amount=500").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());

    let other = as_caller(&proxy, "wf-p1", &[("authorization", OTHER)], "amount=500").await;
    assert_mismatch(&other, &id);
    let anonymous = as_caller(&proxy, "wf-p1", &[], "amount=500").await;
    assert_mismatch(&anonymous, &id);
    let other_params = as_caller(&proxy, "wf-p1", &[("authorization", OTHER)], "amount=900").await;
    assert_mismatch(&other_params, &id);
    assert_eq!(provider.request_count(), 1, "the provider saw nothing more");

    let replay = as_caller(&proxy, "wf-p1", &[("authorization", FIRST)], "amount=500").await;
    assert_eq!(replay.status, StatusCode::OK);
    assert_eq!(replay.text(), "refund-made");
    assert_op_headers(&replay, &id, "succeeded", true);
    let conflict = as_caller(&proxy, "wf-p1", &[("authorization", FIRST)], "amount=900").await;
    problem(&conflict, StatusCode::CONFLICT, "parameter-mismatch");
    assert_eq!(provider.request_count(), 1);

    let stored = ledger(&mut proxy, &id).await;
    let principal = stored.op.principal.expect("the operation is bound");
    assert!(!principal.contains("sk_test"), "a keyed hash, not the key");
}

/// An operation made without `Authorization` is bound to "no credentials": a caller that
/// sends some is another principal.
#[tokio::test]
async fn no_authorization_is_a_principal_too() {
    let provider = FakeProvider::start(Behavior::fixed(200, "refund-made")).await;
    let proxy = start(&provider, "").await;
    let id = op_id("wf-p2");
    let first = as_caller(&proxy, "wf-p2", &[], "amount=500").await;
    assert_eq!(first.status, StatusCode::OK);
    let keyed = as_caller(&proxy, "wf-p2", &[("authorization", FIRST)], "amount=500").await;
    assert_mismatch(&keyed, &id);
    let again = as_caller(&proxy, "wf-p2", &[], "amount=500").await;
    assert_op_headers(&again, &id, "succeeded", true);
    assert_eq!(provider.request_count(), 1);
}

/// `principal_headers = ["stripe-account"]`: the same key on behalf of another connected
/// account is another principal.
#[tokio::test]
async fn principal_headers_bind_the_connected_account_too() {
    let provider = FakeProvider::start(Behavior::fixed(200, "refund-made")).await;
    let proxy = start(&provider, "principal_headers = [\"stripe-account\"]").await;
    let id = op_id("wf-p3");
    let acct = |a: &'static str| [("authorization", FIRST), ("stripe-account", a)];
    let first = as_caller(&proxy, "wf-p3", &acct("acct_1"), "amount=500").await;
    assert_eq!(first.status, StatusCode::OK);
    let other = as_caller(&proxy, "wf-p3", &acct("acct_2"), "amount=500").await;
    assert_mismatch(&other, &id);
    let same = as_caller(&proxy, "wf-p3", &acct("acct_1"), "amount=500").await;
    assert_op_headers(&same, &id, "succeeded", true);
    let other_key = [("authorization", OTHER), ("stripe-account", "acct_1")];
    let other_key = as_caller(&proxy, "wf-p3", &other_key, "amount=500").await;
    assert_mismatch(&other_key, &id);
    assert_eq!(provider.request_count(), 1);
}

async fn rebind(proxy: &Proxy, id: &str, body: &str) -> Resp {
    let path = format!("/ops/{}/rebind", id.replace('/', "%2F"));
    common::send(
        Method::POST,
        &proxy.admin_url(&path),
        &[("content-type", "application/json")],
        body.to_string(),
    )
    .await
    .expect("the admin API answers")
}

/// Key rotation: after `POST /ops/{id}/rebind` the next caller's key adopts the operation
/// (and gets its replay), and the old key is then the other principal; `idemproxy ops
/// rebind` does the same from the command line. Each rebind is an `operator.rebound` event.
#[tokio::test]
async fn rebind_lets_the_rotated_key_through() {
    let provider = FakeProvider::start(Behavior::fixed(200, "refund-made")).await;
    let proxy = start(&provider, "").await;
    let id = op_id("wf-p4");
    let first = as_caller(&proxy, "wf-p4", &[("authorization", FIRST)], "amount=500").await;
    assert_eq!(first.status, StatusCode::OK);
    let rotated = as_caller(&proxy, "wf-p4", &[("authorization", OTHER)], "amount=500").await;
    assert_mismatch(&rotated, &id);

    let no_reason = rebind(&proxy, &id, "{}").await;
    assert_eq!(
        no_reason.status,
        StatusCode::BAD_REQUEST,
        "{}",
        no_reason.text()
    );
    let unknown = rebind(&proxy, &op_id("wf-none"), r#"{"reason":"x"}"#).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND, "{}", unknown.text());
    let done = rebind(&proxy, &id, r#"{"reason":"rotated the API key"}"#).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.text());
    assert_eq!(done.json()["operation_id"], id);

    let adopted = as_caller(&proxy, "wf-p4", &[("authorization", OTHER)], "amount=500").await;
    assert_op_headers(&adopted, &id, "succeeded", true);
    assert_eq!(adopted.text(), "refund-made");
    let old = as_caller(&proxy, "wf-p4", &[("authorization", FIRST)], "amount=500").await;
    assert_mismatch(&old, &id);

    let admin = format!("http://{}", proxy.admin_addr());
    let args = [
        "ops",
        "rebind",
        &id,
        "--reason",
        "rotated back",
        "--admin",
        &admin,
    ];
    let (status, out, err) = proxy.run_cli(&args).await;
    assert!(status.success(), "{out}{err}");
    let back = as_caller(&proxy, "wf-p4", &[("authorization", FIRST)], "amount=500").await;
    assert_op_headers(&back, &id, "succeeded", true);
    assert_eq!(provider.request_count(), 1, "rebinding never sends");

    let show = common::send(
        Method::GET,
        &proxy.admin_url(&format!("/ops/{}", id.replace('/', "%2F"))),
        &[],
        "",
    )
    .await
    .expect("the admin API answers");
    let events: Vec<Value> = show.json()["events"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let rebound: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == json!("operator.rebound"))
        .collect();
    assert_eq!(rebound.len(), 2, "{events:?}");
    assert!(
        rebound[0]["detail"]
            .as_str()
            .unwrap_or("")
            .contains("rotated the API key")
    );
}

/// A `principal_headers` entry that is no header name is a config error naming the file, the
/// key and the entry; the proxy does not start.
#[tokio::test]
async fn a_bad_principal_header_is_a_config_error() {
    let provider = FakeProvider::start(Behavior::fixed(200, "refund-made")).await;
    let keys = "principal_headers = [\"stripe-account\", \"not a header\"]";
    let (status, log) = builder(&provider, keys, &refund_route(""))
        .start_expect_failure()
        .await;
    assert!(!status.success());
    let line = log
        .lines()
        .find(|l| l.contains("principal_headers[1]"))
        .unwrap_or_else(|| panic!("no line names the key:\n{log}"));
    assert!(line.contains("pay.toml"), "{line}");
}
