//! Replays that never wait for the writer (issue 8): a replay of a `succeeded` operation is a
//! read and an answer. Replays are counted in memory and written coalesced (count, first and
//! last replay time per operation, shown as `replays` by `GET /ops/{id}`), never one event
//! per replay, and a replay is answered while the ledger cannot write at all.

use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::Value;

use crate::common::guarded::*;
use crate::common::{Behavior, FakeProvider, Proxy, send};

/// How long a test waits for the coalesced replay counts to reach the ledger (they are
/// written about once a second).
const FLUSH_WAIT: Duration = Duration::from_secs(20);

async fn show(proxy: &Proxy, id: &str) -> Value {
    let path = format!("/ops/{}", id.replace('/', "%2F"));
    let resp = send(Method::GET, &proxy.admin_url(&path), &[], "")
        .await
        .expect("admin answers");
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    resp.json()
}

/// Polls `GET /ops/{id}` until its `replays.count` is `count`; the operation as then shown.
async fn await_replays(proxy: &Proxy, id: &str, count: u64) -> Value {
    let deadline = tokio::time::Instant::now() + FLUSH_WAIT;
    loop {
        let op = show(proxy, id).await;
        if op["replays"]["count"].as_u64() == Some(count) {
            return op;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "replays never reached {count}: {}",
            op["replays"]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn commits(proxy: &Proxy) -> f64 {
    let resp = send(Method::GET, &proxy.admin_url("/metrics"), &[], "")
        .await
        .expect("metrics answer");
    let name = "idemproxy_ledger_commit_seconds_count";
    resp.text()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn assert_replayed(proxy: &Proxy, id: &str, body: &str) {
    let replay = refund(proxy, "wf-poll", "amount=500").await;
    assert_eq!(replay.status, StatusCode::CREATED, "{}", replay.text());
    assert_eq!(replay.text(), body);
    assert_op_headers(&replay, id, "succeeded", true);
}

async fn succeeded(provider: &FakeProvider, proxy: &Proxy) -> String {
    let first = refund(proxy, "wf-poll", "amount=500").await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text());
    assert_eq!(provider.request_count(), 1);
    first.text()
}

/// An agent polling a result 200 times: 200 answers from the ledger, a count of 200 with the
/// first and last replay times, one `operation.replayed` event (not 200), and far fewer
/// commits than replays.
#[tokio::test]
async fn two_hundred_replays_are_counted_not_written_one_by_one() {
    let provider = FakeProvider::start(Behavior::fixed(201, "refunded")).await;
    let proxy = start(&provider, "").await;
    let id = op_id("wf-poll");
    let body = succeeded(&provider, &proxy).await;
    let events_before = show(&proxy, &id).await["events"]
        .as_array()
        .map_or(0, Vec::len);
    let commits_before = commits(&proxy).await;

    for _ in 0..200 {
        assert_replayed(&proxy, &id, &body).await;
    }
    assert_eq!(provider.request_count(), 1, "nothing sent again");

    let op = await_replays(&proxy, &id, 200).await;
    let (first, last) = (&op["replays"]["first_at"], &op["replays"]["last_at"]);
    let (first, last) = (first.as_str().unwrap_or(""), last.as_str().unwrap_or(""));
    assert!(
        first.ends_with('Z') && last.ends_with('Z'),
        "{}",
        op["replays"]
    );
    assert!(first <= last, "{}", op["replays"]);
    assert!(op["updated_at"].as_str() <= Some(first), "{op}");
    let events = op["events"].as_array().cloned().unwrap_or_default();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(events.len(), events_before + 1, "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"operation.replayed"));
    let commits_after = commits(&proxy).await;
    assert!(
        commits_after - commits_before < 100.0,
        "replays are not written one by one: {commits_before} -> {commits_after} commits"
    );
}

/// A replay needs no write: with every ledger write failing, a succeeded operation is still
/// answered from the ledger, again and again, while a new operation is refused (503).
#[tokio::test]
async fn a_replay_is_answered_while_the_ledger_cannot_write() {
    let provider = FakeProvider::start(Behavior::fixed(201, "refunded")).await;
    let mut proxy = start(&provider, "").await;
    let id = op_id("wf-poll");
    let body = succeeded(&provider, &proxy).await;

    proxy.set_env("IDEMPROXY_FAIL", "ledger.commit");
    proxy.restart().await;
    for _ in 0..20 {
        assert_replayed(&proxy, &id, &body).await;
    }
    let fresh = refund(&proxy, "wf-new", "amount=500").await;
    problem(
        &fresh,
        StatusCode::SERVICE_UNAVAILABLE,
        "ledger-unavailable",
    );
    assert_eq!(provider.request_count(), 1, "nothing sent");
}

/// Replays noted just before a graceful stop are written by the stop (within
/// `shutdown_grace`): after a restart the count is all of them.
#[tokio::test]
async fn a_graceful_stop_writes_the_replays_it_counted() {
    let provider = FakeProvider::start(Behavior::fixed(201, "refunded")).await;
    let mut proxy = start(&provider, "").await;
    let id = op_id("wf-poll");
    let body = succeeded(&provider, &proxy).await;
    for _ in 0..5 {
        assert_replayed(&proxy, &id, &body).await;
    }
    proxy.restart().await;
    let op = show(&proxy, &id).await;
    assert_eq!(op["replays"]["count"], 5, "{}", op["replays"]);
}

/// A crash (SIGKILL) may lose replay counts not yet written, never a state or an answer:
/// after it the operation is `succeeded` and replays the same body.
#[tokio::test]
async fn a_crash_loses_at_most_replay_counts() {
    let provider = FakeProvider::start(Behavior::fixed(201, "refunded")).await;
    let mut proxy = start(&provider, "").await;
    let id = op_id("wf-poll");
    let body = succeeded(&provider, &proxy).await;
    for _ in 0..5 {
        assert_replayed(&proxy, &id, &body).await;
    }
    proxy.kill().await;
    proxy.restart().await;
    assert_replayed(&proxy, &id, &body).await;
    let op = show(&proxy, &id).await;
    assert_eq!(op["state"], "succeeded");
    assert_eq!(provider.request_count(), 1, "nothing sent again");
    let count = await_replays_at_least(&proxy, &id, 1).await;
    assert!(count <= 6, "{count}");
}

/// Polls until `replays.count` is at least `min`; that count.
async fn await_replays_at_least(proxy: &Proxy, id: &str, min: u64) -> u64 {
    let deadline = tokio::time::Instant::now() + FLUSH_WAIT;
    loop {
        let count = show(proxy, id).await["replays"]["count"].as_u64();
        if let Some(count) = count.filter(|c| *c >= min) {
            return count;
        }
        assert!(tokio::time::Instant::now() < deadline, "replays: {count:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
