//! Retention (SPEC 2 `[retention] completed`) through the real binary: a finished operation
//! is forgotten once it is older than `completed` (a replay then acts anew), while `unknown`,
//! `prepared` and `in_flight` operations of the same age are kept.

mod common;

use std::time::Duration;

use common::{Behavior, FakeProvider, Proxy, Resp, route, send};
use http::{Method, StatusCode};
use idemproxy::clock::Timestamp;
use idemproxy::ledger::{Ledger, LedgerOptions};

async fn post(proxy: &Proxy, path: &str, workflow: &str) -> Resp {
    send(
        Method::POST,
        &proxy.url(path),
        &[
            ("x-workflow-id", workflow),
            ("content-type", "application/json"),
        ],
        r#"{"amount":500}"#,
    )
    .await
    .expect("the proxy answers")
}

/// Replays `workflow` until the proxy sends it to the provider again (its record was pruned).
async fn wait_until_forgotten(proxy: &Proxy, workflow: &str) -> Resp {
    let forgotten = async {
        loop {
            let resp = post(proxy, "/pay/v1/refunds", workflow).await;
            if resp.header("idempotent-replayed") == Some("false") {
                return resp;
            }
            assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(15), forgotten)
        .await
        .expect("the succeeded operation is pruned within a few retention periods")
}

#[tokio::test]
async fn finished_operations_are_pruned_and_undecided_ones_kept() {
    let pay = FakeProvider::start(Behavior::echo()).await;
    let held = FakeProvider::start(Behavior::echo().hold()).await;
    let id = ["{header:x-workflow-id}"];
    let pay_routes = format!(
        "{}{}approval = \"required\"\n",
        route("refund", "POST /v1/refunds", &id),
        route("payout", "POST /v1/payouts", &id),
    );
    let mut proxy = Proxy::builder()
        .config("[retention]\ncompleted = \"300ms\"\n")
        .policy("pay", &pay.policy("pay", &pay_routes))
        .policy(
            "slow",
            &held.policy("slow", &route("refund", "POST /v1/refunds", &id)),
        )
        .start()
        .await;

    // In flight for the whole test: the provider holds it until the end.
    let url = proxy.url("/slow/v1/refunds");
    let in_flight = tokio::spawn(async move {
        send(Method::POST, &url, &[("x-workflow-id", "wf-slow")], "{}")
            .await
            .expect("the proxy answers")
    });
    held.wait_for_requests(1).await;
    // Unknown: committed, answer lost.
    pay.set_behavior(Behavior::echo().drop_first_response(1));
    let lost = post(&proxy, "/pay/v1/refunds", "wf-lost").await;
    assert_eq!(lost.status, StatusCode::ACCEPTED, "{}", lost.text());
    pay.set_behavior(Behavior::echo());
    // Prepared: waiting for an approval that never comes.
    let gated = post(&proxy, "/pay/v1/payouts", "wf-gated").await;
    assert_eq!(gated.header("idem-state"), Some("prepared"));
    // Succeeded last, so every other operation is older when it is pruned.
    let done = post(&proxy, "/pay/v1/refunds", "wf-done").await;
    assert_eq!(done.header("idem-state"), Some("succeeded"));

    let again = wait_until_forgotten(&proxy, "wf-done").await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(pay.request_count(), 3, "wf-lost, wf-done, and wf-done anew");

    held.release();
    // Had its in-flight record been pruned, its result could not be recorded (202).
    let finished = in_flight.await.expect("request task");
    assert_eq!(finished.status, StatusCode::OK, "{}", finished.text());
    assert_eq!(finished.header("idem-state"), Some("succeeded"));
    let lost_again = post(&proxy, "/pay/v1/refunds", "wf-lost").await;
    assert_eq!(lost_again.header("idem-state"), Some("unknown"));
    assert_eq!(pay.request_count(), 3, "the unknown refund is not re-sent");
    assert!(
        proxy.log_text().contains("pruned"),
        "an info line per sweep that pruned"
    );

    proxy.terminate().await;
    let opts = LedgerOptions::default();
    let (ledger, _) = Ledger::open(&proxy.ledger_path(), Timestamp::now(), opts)
        .await
        .expect("the ledger opens after the proxy stopped");
    for (id, state) in [
        ("pay/refund/wf-lost", "unknown"),
        ("pay/payout/wf-gated", "prepared"),
    ] {
        let op = ledger.get(id).await.expect("read");
        assert_eq!(op.map(|op| op.state.as_str()), Some(state), "{id}");
        assert!(!ledger.events(id).await.expect("read").is_empty(), "{id}");
    }
}
