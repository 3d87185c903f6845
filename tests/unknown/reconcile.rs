//! Reconciliation (docs/reference.md sections 3.4 and 5.5) through the real binary: a
//! provider that cannot deduplicate loses the answer to a refund, so the operation is
//! `unknown`; the agent's replay makes the proxy look the refund up instead of guessing.
//! Found -> succeeded with the found JSON; not found too early -> still unknown, nothing
//! re-sent; not found after `not_found_final_after` -> re-sent once; a lookup that fails ->
//! still unknown.

use std::time::Duration;

use http::{Method, StatusCode};
use idemproxy::clock::Timestamp;
use idemproxy::ledger::{Ledger, LedgerOptions};
use idemproxy::operation::Operation;
use sha2::{Digest, Sha256};

use crate::common::{Behavior, FakeProvider, Proxy, Resp, route, send};

const OP: &str = "pay/create_refund/wf-1:refund";

/// The provider's `timeout`: a lost attempt could still reach the provider this long after
/// its dispatch, so "not found" counts only from then.
const TIMEOUT_MS: u64 = 200;

/// Waits until a 100 ms `not_found_final_after` has passed since the first attempt could
/// last have reached the provider.
async fn wait_until_final() {
    tokio::time::sleep(Duration::from_millis(TIMEOUT_MS + 150)).await;
}

/// A refund route of a provider without dedupe, reconciled by a lookup on the key.
fn policy(provider: &FakeProvider, final_after: &str) -> String {
    let route = route(
        "create_refund",
        "POST /v1/refunds",
        &["{header:x-workflow-id}:refund"],
    );
    let reconcile = format!(
        "[route.reconcile]\n\
         lookup = \"GET /v1/refunds?limit=1&metadata[operation]={{key}}\"\n\
         found = \"/data/0\"\n\
         not_found_final_after = \"{final_after}\"\n"
    );
    provider.policy(
        "pay",
        &format!("timeout = \"{TIMEOUT_MS}ms\"\n{route}{reconcile}"),
    )
}

/// The agent's refund request (the same every time it is replayed).
async fn refund(proxy: &Proxy) -> Resp {
    send(
        Method::POST,
        &proxy.url("/pay/v1/refunds"),
        &[
            ("x-workflow-id", "wf-1"),
            ("authorization", "Bearer sk_test_1"),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        "charge=ch_1&amount=500",
    )
    .await
    .expect("the proxy answers")
}

/// A proxy whose first refund was committed by the provider but whose answer was lost.
async fn unknown_refund(final_after: &str) -> (FakeProvider, Proxy) {
    let provider = FakeProvider::start(Behavior::echo().drop_first_response(1)).await;
    let proxy = Proxy::builder()
        .policy("pay", &policy(&provider, final_after))
        .start()
        .await;
    let first = refund(&proxy).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.text());
    assert_eq!(first.header("idem-state"), Some("unknown"));
    assert_eq!(provider.effects(), 1);
    (provider, proxy)
}

fn key() -> String {
    hex::encode(Sha256::digest(OP.as_bytes()))
}

/// The methods of the requests the provider received, in order.
fn methods(provider: &FakeProvider) -> Vec<Method> {
    provider.requests().into_iter().map(|r| r.method).collect()
}

/// Stops the proxy and reads the operation and its event kinds from its ledger.
async fn stop_and_read(proxy: &mut Proxy) -> (Operation, Vec<String>) {
    proxy.terminate().await;
    let opts = LedgerOptions::default();
    let (ledger, _) = Ledger::open(&proxy.ledger_path(), Timestamp::now(), opts)
        .await
        .expect("the ledger opens after the proxy stopped");
    let op = ledger.get(OP).await.expect("read").expect("the operation");
    let events = ledger.events(OP).await.expect("read");
    let kinds = events.iter().map(|e| e.kind.as_str().to_string()).collect();
    (op, kinds)
}

fn assert_outcome_unknown(resp: &Resp) {
    assert_eq!(resp.status, StatusCode::ACCEPTED, "{}", resp.text());
    assert_eq!(resp.json()["type"], "urn:idemproxy:outcome-unknown");
    assert_eq!(resp.header("idem-state"), Some("unknown"));
}

#[tokio::test]
async fn a_found_effect_becomes_the_stored_answer() {
    let (provider, mut proxy) = unknown_refund("1h").await;
    let refund_json = serde_json::json!({"id": "re_1", "amount": 500, "status": "succeeded"});
    provider.set_behavior(Behavior::json(
        200,
        serde_json::json!({"object": "list", "data": [refund_json]}),
    ));

    let replay = refund(&proxy).await;
    assert_eq!(replay.status, StatusCode::OK, "{}", replay.text());
    assert_eq!(replay.json(), refund_json);
    assert_eq!(replay.header("content-type"), Some("application/json"));
    assert_eq!(replay.header("idem-state"), Some("succeeded"));
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.header("idem-operation-id"), Some(OP));

    assert_eq!(methods(&provider), [Method::POST, Method::GET]);
    let lookup = &provider.requests()[1];
    assert_eq!(
        lookup.path_and_query,
        format!("/v1/refunds?limit=1&metadata%5Boperation%5D={}", key())
    );
    assert_eq!(lookup.header("authorization"), Some("Bearer sk_test_1"));
    assert_eq!(lookup.header("x-workflow-id"), None);

    let again = refund(&proxy).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.json(), refund_json);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(provider.request_count(), 2, "answered from the ledger");
    assert!(!proxy.log_text().contains("idemproxy ops resolve"));

    let (op, kinds) = stop_and_read(&mut proxy).await;
    assert_eq!(op.state.as_str(), "succeeded");
    assert_eq!(op.attempts, 1);
    assert_eq!(
        kinds,
        [
            "operation.claimed",
            "provider.requested",
            "operation.unknown",
            "reconcile.started",
            "reconcile.found",
            "result.persisted",
            "operation.replayed",
        ]
    );
}

#[tokio::test]
async fn not_found_too_early_sends_nothing() {
    let (provider, mut proxy) = unknown_refund("1h").await;
    provider.set_behavior(Behavior::fixed(404, "no such refund"));

    assert_outcome_unknown(&refund(&proxy).await);
    assert_eq!(methods(&provider), [Method::POST, Method::GET]);

    let (op, kinds) = stop_and_read(&mut proxy).await;
    assert_eq!((op.state.as_str(), op.attempts), ("unknown", 1));
    assert_eq!(
        kinds[3..],
        ["reconcile.started", "reconcile.not_found"],
        "{kinds:?}"
    );
}

#[tokio::test]
async fn final_not_found_sends_again_once() {
    let (provider, mut proxy) = unknown_refund("100ms").await;
    // The echo's JSON has no `/data/0`: a 200 that proves absence once final.
    provider.set_behavior(Behavior::echo());
    // The rule is about elapsed time since the attempt could last have arrived: wait it out.
    wait_until_final().await;

    let resent = refund(&proxy).await;
    assert_eq!(resent.status, StatusCode::OK, "{}", resent.text());
    assert_eq!(resent.header("idem-state"), Some("succeeded"));
    assert_eq!(resent.header("idempotent-replayed"), Some("false"));
    assert_eq!(resent.json()["method"], "POST");
    assert_eq!(
        methods(&provider),
        [Method::POST, Method::GET, Method::POST]
    );
    let requests = provider.requests();
    let sent_key = |i: usize| requests[i].header("idempotency-key").map(str::to_string);
    assert_eq!(sent_key(0), Some(key()));
    assert_eq!(sent_key(2), sent_key(0), "the same key on every attempt");

    let again = refund(&proxy).await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, resent.body);
    assert_eq!(provider.request_count(), 3);

    let (op, kinds) = stop_and_read(&mut proxy).await;
    assert_eq!((op.state.as_str(), op.attempts), ("succeeded", 2));
    assert_eq!(
        kinds[3..],
        [
            "reconcile.started",
            "reconcile.not_found",
            "operation.claimed",
            "provider.requested",
            "provider.responded",
            "result.persisted",
            "operation.replayed",
        ],
        "{kinds:?}"
    );
}

#[tokio::test]
async fn a_failing_lookup_leaves_the_operation_unknown() {
    let (provider, mut proxy) = unknown_refund("100ms").await;
    provider.set_behavior(Behavior::fixed(500, "lookup broke"));
    wait_until_final().await;

    assert_outcome_unknown(&refund(&proxy).await);
    assert_eq!(methods(&provider), [Method::POST, Method::GET]);

    let (op, kinds) = stop_and_read(&mut proxy).await;
    assert_eq!((op.state.as_str(), op.attempts), ("unknown", 1));
    assert_eq!(kinds[3..], ["reconcile.started"], "{kinds:?}");
}

#[tokio::test]
async fn concurrent_replays_resend_at_most_once() {
    let (provider, mut proxy) = unknown_refund("100ms").await;
    provider.set_behavior(Behavior::echo().hold());
    wait_until_final().await;

    let (a, b) = tokio::join!(
        async {
            let replay = refund(&proxy);
            let both_held = provider.wait_for_requests(3);
            let (resp, ()) = tokio::join!(replay, async {
                both_held.await;
                provider.release();
            });
            resp
        },
        refund(&proxy),
    );
    let posts = methods(&provider)
        .into_iter()
        .filter(|m| *m == Method::POST)
        .count();
    assert_eq!(
        posts,
        2,
        "one original and one re-send: {:?}",
        methods(&provider)
    );
    // The winner answers the provider's own 200; the loser either found the operation
    // claimed (202) or, arriving later, its recorded result (a replay).
    let fresh =
        |r: &Resp| r.status == StatusCode::OK && r.header("idempotent-replayed") == Some("false");
    let loser = |r: &Resp| {
        r.status == StatusCode::ACCEPTED || r.header("idempotent-replayed") == Some("true")
    };
    let ok = (fresh(&a) && loser(&b)) || (fresh(&b) && loser(&a));
    assert!(ok, "{} {} / {} {}", a.status, a.text(), b.status, b.text());

    let (op, _) = stop_and_read(&mut proxy).await;
    assert_eq!((op.state.as_str(), op.attempts), ("succeeded", 2));
}

/// Item 2: the first attempt timed out while the provider was still working on it. A replay
/// right after the timeout looks the refund up and finds nothing yet; that must not count as
/// final, however long ago the operation was claimed, or the refund would be sent twice.
#[tokio::test]
async fn a_lookup_right_after_a_timeout_does_not_resend_while_the_first_may_run() {
    // `not_found_final_after` (100 ms) is shorter than the timeout (200 ms): counted from the
    // claim, it would already be final when the timeout fires.
    let provider = FakeProvider::start(Behavior::echo().hold()).await;
    let proxy = Proxy::builder()
        .policy("pay", &policy(&provider, "100ms"))
        .start()
        .await;
    let first = tokio::spawn({
        let url = proxy.url("/pay/v1/refunds");
        async move {
            let headers = [
                ("x-workflow-id", "wf-1"),
                ("authorization", "Bearer sk_test_1"),
                ("content-type", "application/x-www-form-urlencoded"),
            ];
            send(Method::POST, &url, &headers, "charge=ch_1&amount=500").await
        }
    });
    provider.wait_for_requests(1).await;
    let timed_out = first.await.expect("task").expect("the proxy answers");
    assert_outcome_unknown(&timed_out);

    // Still processing attempt 1 (held); the lookup itself is answered at once: not found.
    provider.set_behavior(Behavior::fixed(404, "no such refund"));
    let replay = refund(&proxy).await;
    assert_outcome_unknown(&replay);
    assert_eq!(
        methods(&provider),
        [Method::POST, Method::GET],
        "looked up, not re-sent"
    );
    provider.release();
}
