//! Correcting an operator's resolution (`POST /ops/{id}/re-resolve`, `idemproxy ops
//! re-resolve`), against the real binary: the new outcome replaces the stored answer in one
//! write recorded as `operator.re_resolved` (what changed, never a value), notified as a
//! resolution is; refused (409, with who settled it) for an operation the provider answered,
//! reconciliation settled or an operator rejected, or one re-sent since; shown by the admin
//! JSON, `ops show` and the event stream like any other kind. Before 2026-12-04 there was no way to
//! correct a resolution: a second resolve is refused, so an empty body resolved as `200` broke
//! the operation for good.

use http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::webhook::{FakeWebhook, Hook};
use crate::common::{Behavior, FakeProvider, Proxy, Resp, problem, route, send};

/// `shop/create` keyed on `x-operation-id`; `config` goes into proxy.toml.
async fn start(provider: &FakeProvider, config: &str) -> Proxy {
    let create = route("create", "POST /v1/things", &["{header:x-operation-id}"]);
    Proxy::builder()
        .policy("shop", &provider.policy("shop", &create))
        .config(config)
        .start()
        .await
}

async fn agent(proxy: &Proxy, op: &str) -> Resp {
    let url = proxy.url("/shop/v1/things");
    send(Method::POST, &url, &[("x-operation-id", op)], "amount=5")
        .await
        .expect("proxy answers")
}

async fn post(proxy: &Proxy, id: &str, action: &str, body: Value) -> Resp {
    let url = proxy.admin_url(&format!("/ops/{}/{action}", id.replace('/', "%2F")));
    let headers = [("content-type", "application/json")];
    send(Method::POST, &url, &headers, body.to_string())
        .await
        .expect("admin answers")
}

/// An `unknown` operation: the provider acts and its answer is lost.
async fn unknown_op(proxy: &Proxy, provider: &FakeProvider, op: &str) -> String {
    provider.set_behavior(Behavior::fixed(200, "first").drop_first_response(1));
    let lost = agent(proxy, op).await;
    assert_eq!(
        lost.header("idem-state"),
        Some("unknown"),
        "{}",
        lost.text()
    );
    format!("shop/create/{op}")
}

fn kinds(op: &Value) -> Vec<String> {
    op["events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["kind"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn detail_of(op: &Value, kind: &str) -> String {
    let events = op["events"].as_array().cloned().unwrap_or_default();
    let event = events.iter().rev().find(|e| e["kind"] == kind);
    event.map_or_else(String::new, |e| {
        e["detail"].as_str().unwrap_or_default().into()
    })
}

/// The issue's case: an empty `200` resolved with `empty_body` is corrected to the provider's
/// object; replays answer the new body at once, nothing is sent, and the correction is one
/// `operator.re_resolved` event saying what changed (sizes and statuses, never the body).
#[tokio::test]
async fn an_operator_corrects_an_empty_body_they_resolved() {
    let hook = FakeWebhook::start(Hook::Status(204)).await;
    let provider = FakeProvider::start(Behavior::echo()).await;
    let notify = format!("[notify]\nwebhook = \"{}\"\n", hook.url());
    let proxy = start(&provider, &notify).await;
    let id = unknown_op(&proxy, &provider, "op-1").await;

    let empty = json!({"outcome": "succeeded", "status": 200, "body": "", "empty_body": true});
    let resolved = post(&proxy, &id, "resolve", empty).await;
    assert_eq!(resolved.status, StatusCode::OK, "{}", resolved.text());
    assert_eq!(agent(&proxy, "op-1").await.text(), "");

    // A second resolve is still refused: only `re-resolve` corrects.
    let again = json!({"outcome": "succeeded", "status": 200, "body": "{}"});
    problem(
        &post(&proxy, &id, "resolve", again).await,
        StatusCode::CONFLICT,
        "conflict",
    );

    let object = r#"{"id":"th_1","object":"thing"}"#;
    let body = json!({"outcome": "succeeded", "status": 201, "body": object,
        "headers": {"content-type": "application/json"}, "reason": "found it in the dashboard"});
    let corrected = post(&proxy, &id, "re-resolve", body).await;
    assert_eq!(corrected.status, StatusCode::OK, "{}", corrected.text());
    let op = corrected.json();
    assert_eq!(
        (&op["state"], &op["response"]["status"]),
        (&json!("succeeded"), &json!(201))
    );

    let replay = agent(&proxy, "op-1").await;
    assert_eq!(
        (replay.status, replay.text()),
        (StatusCode::CREATED, object.to_owned())
    );
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.header("content-type"), Some("application/json"));
    assert_eq!(provider.request_count(), 1, "correcting sends nothing");

    let shown = proxy.op_json(&id).await;
    let events = kinds(&shown);
    assert_eq!(
        events
            .iter()
            .filter(|k| *k == "operator.re_resolved")
            .count(),
        1
    );
    let detail = detail_of(&shown, "operator.re_resolved");
    assert!(
        detail.contains("succeeded (status 200, 0 bytes)")
            && detail.contains("succeeded (status 201, 30 bytes)")
            && detail.contains("found it in the dashboard"),
        "{detail}"
    );
    assert!(
        !detail.contains("th_1"),
        "no body value in the history: {detail}"
    );

    // Corrected again, to failed: the operator's answer is void, the next request sends it.
    let failed = json!({"outcome": "failed", "reason": "that was another refund"});
    let corrected = post(&proxy, &id, "re-resolve", failed).await;
    assert_eq!(corrected.status, StatusCode::OK, "{}", corrected.text());
    assert_eq!(corrected.json()["response"], Value::Null);
    let response = proxy.admin_url(&format!("/ops/{}/response", id.replace('/', "%2F")));
    let none = send(Method::GET, &response, &[], "")
        .await
        .expect("admin answers");
    problem(&none, StatusCode::NOT_FOUND, "not-found");

    // Notified as resolutions are: resolved, then each correction.
    let got = hook.wait_for(4).await;
    let events: Vec<String> = got.iter().map(|r| r.json()["event"].to_string()).collect();
    assert_eq!(
        events,
        [
            r#""needs_operator""#,
            r#""resolved""#,
            r#""re_resolved""#,
            r#""re_resolved""#
        ]
    );
    assert_eq!(got[3].json()["state"], "failed");

    let sent = agent(&proxy, "op-1").await;
    assert_eq!(sent.status, StatusCode::OK, "{}", sent.text());
    assert_eq!(
        provider.request_count(),
        2,
        "failed: the next request sent it again"
    );

    // Re-sent since: the provider's answer settled it now, so no correction any more.
    let late = json!({"outcome": "failed", "reason": "x"});
    let refused = post(&proxy, &id, "re-resolve", late).await;
    problem(&refused, StatusCode::CONFLICT, "conflict");
    let why = refused.json()["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(why.contains("the provider answered it"), "{why}");
    assert_eq!(refused.json()["state"], "succeeded");
}

/// Only an operator's resolution may be corrected: an operation the provider answered, one
/// still unknown, one an operator rejected, and an unknown ID are refused, each saying why,
/// with nothing written.
#[tokio::test]
async fn only_an_operators_resolution_can_be_corrected() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "").await;
    let body = json!({"outcome": "succeeded", "status": 200, "body": "{}"});

    assert_eq!(agent(&proxy, "answered").await.status, StatusCode::OK);
    let answered = "shop/create/answered";
    let refused = post(&proxy, answered, "re-resolve", body.clone()).await;
    problem(&refused, StatusCode::CONFLICT, "conflict");
    let why = refused.json()["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        why.contains("the provider answered it") && why.contains("never one the provider answered"),
        "{why}"
    );

    let unknown = unknown_op(&proxy, &provider, "held").await;
    let refused = post(&proxy, &unknown, "re-resolve", body.clone()).await;
    problem(&refused, StatusCode::CONFLICT, "conflict");
    let why = refused.json()["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(why.contains("Resolve it"), "{why}");
    assert_eq!(proxy.op_state(&unknown).await, "unknown");

    let nobody = post(&proxy, "shop/create/nobody", "re-resolve", body.clone()).await;
    problem(&nobody, StatusCode::NOT_FOUND, "not-found");
    let wrong = post(&proxy, answered, "re-resolve", json!({"outcome": "maybe"})).await;
    problem(&wrong, StatusCode::BAD_REQUEST, "bad-request");
    for id in [answered, unknown.as_str()] {
        assert!(!kinds(&proxy.op_json(id).await).contains(&"operator.re_resolved".to_owned()));
    }
}

/// `idemproxy ops re-resolve` takes the flags of `ops resolve`; `ops show` lists the new kind.
#[tokio::test]
async fn ops_re_resolve_takes_the_flags_of_resolve() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "").await;
    let id = unknown_op(&proxy, &provider, "op-cli").await;
    let admin = proxy.admin_url("");
    let failed = ["--failed", "--reason", "nothing at the provider"];
    let mut args = vec!["ops", "resolve", id.as_str()];
    args.extend_from_slice(&failed);
    args.extend_from_slice(&["--admin", &admin]);
    let (status, out, err) = proxy.run_cli(&args).await;
    assert!(status.success(), "{out}{err}");

    let file = proxy.dir().path().join("object.json");
    std::fs::write(&file, r#"{"id":"th_9"}"#).expect("body file");
    let file = file.to_string_lossy().into_owned();
    let (status, out, err) = proxy
        .run_cli(&[
            "ops",
            "re-resolve",
            &id,
            "--succeeded",
            "--body-file",
            &file,
            "--header",
            "content-type: application/json",
            "--reason",
            "it was there after all",
            "--admin",
            &admin,
        ])
        .await;
    assert!(status.success(), "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("state") && l.ends_with("succeeded")),
        "{out}"
    );
    assert_eq!(agent(&proxy, "op-cli").await.text(), r#"{"id":"th_9"}"#);
    assert_eq!(provider.request_count(), 1);

    // Refused: exit 1 with the problem's words.
    let (status, _, err) = proxy
        .run_cli(&[
            "ops",
            "re-resolve",
            "shop/create/none",
            "--failed",
            "--reason",
            "x",
            "--admin",
            &admin,
        ])
        .await;
    assert_eq!(status.code(), Some(1), "{err}");

    let (_, shown, _) = proxy
        .run_cli(&["ops", "show", &id, "--admin", &admin])
        .await;
    assert!(shown.contains("operator.re_resolved"), "{shown}");
}
