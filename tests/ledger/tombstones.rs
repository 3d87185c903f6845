//! Tombstones (docs/reference.md section 5.8, `[retention] tombstones`) through the real binary: a succeeded or
//! operator-rejected operation pruned by `[retention] completed` is refused 410
//! `operation-expired` for `tombstones`, and nothing is sent, across restarts; a plainly failed
//! one leaves no tombstone; an expired tombstone frees the ID; and `check` refuses a
//! `completed` shorter than a provider's `key_retention` plus its `timeout`.

use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::json;

use crate::common::guarded::*;
use crate::common::{Behavior, FakeProvider, Proxy, Resp, policy, problem, send};

/// The issue's setup: no provider deduplication, and a key retention plus timeout (700ms)
/// that fits inside `completed = "1s"`.
const KEYS: &str = "dedupe = \"none\"\nkey_retention = \"200ms\"\ntimeout = \"500ms\"";
const RETENTION: &str = "[retention]\ncompleted = \"1s\"\n";

async fn start_with(provider: &FakeProvider, retention: &str, route_extra: &str) -> Proxy {
    builder(provider, KEYS, &refund_route(route_extra))
        .config(retention)
        .start()
        .await
}

async fn admin(proxy: &Proxy, method: Method, path: &str, body: &str) -> Resp {
    let json = [("content-type", "application/json")];
    send(method, &proxy.admin_url(path), &json, body.to_string())
        .await
        .expect("the admin API answers")
}

fn show_path(id: &str) -> String {
    format!("/ops/{}", id.replace('/', "%2F"))
}

/// Polls `GET /ops/{id}` until it answers other than `from` (the retention sweep acted);
/// returns that answer. Bounded: several retention periods.
async fn await_change(proxy: &Proxy, id: &str, from: StatusCode) -> Resp {
    let changed = async {
        loop {
            let resp = admin(proxy, Method::GET, &show_path(id), "").await;
            if resp.status != from {
                return resp;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), changed)
        .await
        .unwrap_or_else(|_| panic!("GET /ops/{id} still answers {from} after 20s"))
}

/// Asserts the tombstone's 410 problem: its state and when it was pruned.
fn assert_expired(resp: &Resp, id: &str, state: &str) {
    let body = problem(resp, StatusCode::GONE, "operation-expired");
    assert_problem_context(&body, id, state);
    assert!(body["pruned_at"].as_str().is_some(), "{body}");
    assert_next(
        &body,
        "stop",
        &["it is never sent again", "Do not retry it"],
    );
    assert_op_headers(resp, id, state, false);
}

#[tokio::test]
async fn a_pruned_refund_is_refused_410_and_never_sent_again() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start_with(&provider, RETENTION, "").await;
    let id = op_id("wf-1");
    let first = refund(&proxy, "wf-1", "amount=500").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());

    let pruned = await_change(&proxy, &id, StatusCode::OK).await;
    let replay = refund(&proxy, "wf-1", "amount=500").await;
    assert_eq!(
        provider.request_count(),
        1,
        "the refund is never sent again"
    );
    assert_expired(&replay, &id, "succeeded");
    assert_expired(&pruned, &id, "succeeded");
    // Any request for that ID: other parameters are refused the same way.
    let other = refund(&proxy, "wf-1", "amount=999").await;
    assert_expired(&other, &id, "succeeded");
    assert_eq!(
        provider.request_count(),
        1,
        "the refund is never sent again"
    );

    let listed = admin(&proxy, Method::GET, "/ops", "").await;
    assert_eq!(
        listed.json()["ops"],
        json!([]),
        "GET /ops lists live operations only"
    );
}

/// A replay read once is answered from memory afterwards; pruning must still reach it: the
/// replay after the prune is refused 410, not answered with the remembered 200.
#[tokio::test]
async fn a_refund_replayed_before_it_is_pruned_is_refused_410_after() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start_with(&provider, RETENTION, "").await;
    let id = op_id("wf-1");
    let first = refund(&proxy, "wf-1", "amount=500").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    for _ in 0..3 {
        let replay = refund(&proxy, "wf-1", "amount=500").await;
        assert_eq!(replay.status, StatusCode::OK, "{}", replay.text());
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    }

    let pruned = await_change(&proxy, &id, StatusCode::OK).await;
    assert_expired(&pruned, &id, "succeeded");
    let replay = refund(&proxy, "wf-1", "amount=500").await;
    assert_expired(&replay, &id, "succeeded");
    assert_eq!(provider.request_count(), 1, "sent once");
}

/// An operation an operator rebound (bound to no caller, for the next one to adopt) and that
/// was then pruned: its tombstone is bound to no one too, and is refused 410 like any other,
/// never taken for something to bring up to date (which wrote to the tombstone, failed, and
/// answered 503).
#[tokio::test]
async fn a_rebound_refund_pruned_later_is_refused_410() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start_with(&provider, RETENTION, "").await;
    let id = op_id("wf-r");
    let first = refund(&proxy, "wf-r", "amount=500").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    let path = format!("{}/rebind", show_path(&id));
    let rebound = admin(
        &proxy,
        Method::POST,
        &path,
        r#"{"reason":"rotated the key"}"#,
    )
    .await;
    assert_eq!(rebound.status, StatusCode::OK, "{}", rebound.text());

    let pruned = await_change(&proxy, &id, StatusCode::OK).await;
    assert_expired(&pruned, &id, "succeeded");
    let replay = refund(&proxy, "wf-r", "amount=500").await;
    assert_expired(&replay, &id, "succeeded");
    let other = refund(&proxy, "wf-r", "amount=999").await;
    assert_expired(&other, &id, "succeeded");
    assert_eq!(provider.request_count(), 1, "sent once");
}

#[tokio::test]
async fn the_410_survives_a_restart() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut proxy = start_with(&provider, RETENTION, "").await;
    let id = op_id("wf-2");
    refund(&proxy, "wf-2", "amount=500").await;
    let pruned = await_change(&proxy, &id, StatusCode::OK).await;
    assert_eq!(pruned.status, StatusCode::GONE, "{}", pruned.text());

    proxy.restart().await;
    let replay = refund(&proxy, "wf-2", "amount=500").await;
    assert_expired(&replay, &id, "succeeded");
    assert_expired(
        &admin(&proxy, Method::GET, &show_path(&id), "").await,
        &id,
        "succeeded",
    );
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn a_pruned_rejected_operation_is_refused_410() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start_with(&provider, RETENTION, "approval = \"required\"\n").await;
    let id = op_id("wf-3");
    let gated = refund(&proxy, "wf-3", "amount=500").await;
    problem(&gated, StatusCode::ACCEPTED, "awaiting-approval");
    let reject = format!("{}/reject", show_path(&id));
    let rejected = admin(&proxy, Method::POST, &reject, r#"{"reason":"no"}"#).await;
    assert_eq!(rejected.status, StatusCode::OK, "{}", rejected.text());

    let pruned = await_change(&proxy, &id, StatusCode::OK).await;
    assert_expired(&pruned, &id, "failed");
    let replay = refund(&proxy, "wf-3", "amount=500").await;
    assert_expired(&replay, &id, "failed");
    // An operator acting on the pruned operation gets the same 410.
    let again = admin(&proxy, Method::POST, &reject, r#"{"reason":"again"}"#).await;
    assert_expired(&again, &id, "failed");
    let rebind = format!("{}/rebind", show_path(&id));
    let rebound = admin(&proxy, Method::POST, &rebind, r#"{"reason":"rotated"}"#).await;
    assert_expired(&rebound, &id, "failed");
    assert_eq!(
        provider.request_count(),
        0,
        "a rejected refund is never sent"
    );
}

#[tokio::test]
async fn a_pruned_plainly_failed_operation_may_be_sent_again() {
    let provider = FakeProvider::start(Behavior::fixed(402, "declined")).await;
    let proxy = start_with(&provider, RETENTION, "").await;
    let id = op_id("wf-4");
    let declined = refund(&proxy, "wf-4", "amount=500").await;
    assert_eq!(declined.header("idem-state"), Some("failed"));

    let pruned = await_change(&proxy, &id, StatusCode::OK).await;
    problem(&pruned, StatusCode::NOT_FOUND, "not-found");
    provider.set_behavior(Behavior::echo());
    let again = refund(&proxy, "wf-4", "amount=500").await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text());
    assert_op_headers(&again, &id, "succeeded", false);
    assert_eq!(provider.request_count(), 2);
}

#[tokio::test]
async fn a_tombstone_past_its_retention_frees_the_id() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let retention = "[retention]\ncompleted = \"1s\"\ntombstones = \"1s\"\n";
    let proxy = start_with(&provider, retention, "").await;
    let id = op_id("wf-5");
    refund(&proxy, "wf-5", "amount=500").await;
    let pruned = await_change(&proxy, &id, StatusCode::OK).await;
    assert_expired(&pruned, &id, "succeeded");

    let gone = await_change(&proxy, &id, StatusCode::GONE).await;
    problem(&gone, StatusCode::NOT_FOUND, "not-found");
    let anew = refund(&proxy, "wf-5", "amount=500").await;
    assert_eq!(anew.status, StatusCode::OK, "{}", anew.text());
    assert_op_headers(&anew, &id, "succeeded", false);
    assert_eq!(
        provider.request_count(),
        2,
        "a new operation under the freed ID"
    );
}

#[tokio::test]
async fn check_refuses_completed_shorter_than_key_retention_plus_timeout() {
    // The default key_retention is 24h, far beyond `completed`.
    let text = policy("pay", "http://127.0.0.1:9", &refund_route(""));
    let dir = Proxy::builder()
        .config(RETENTION)
        .policy("pay", &text)
        .write();
    let config = dir.config_path().to_string_lossy().into_owned();
    let (status, stdout, stderr) = dir.run_cli(&["check", "-c", &config]).await;
    assert!(!status.success(), "{status:?}\n{stdout}");
    let line = stderr
        .lines()
        .find(|l| l.contains("proxy.toml") && l.contains("retention.completed"))
        .unwrap_or_else(|| panic!("no line naming proxy.toml: retention.completed in:\n{stderr}"));
    for part in ["policies/pay.toml", "key_retention", "timeout", "raise"] {
        assert!(line.contains(part), "{part:?} missing from: {line}");
    }
}
