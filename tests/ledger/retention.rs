//! Retention (docs/reference.md section 5.8, `[retention] completed`) through the real binary: a finished operation
//! is pruned once it is older than `completed` (a succeeded one leaves its tombstone, so a
//! replay is refused 410, never sent again), while `unknown` and `prepared` operations of the
//! same age are kept. (An `in_flight` operation never gets that old: `check` refuses a
//! `completed` shorter than a provider's `key_retention` plus its `timeout`; the ledger's
//! `prune_removes_only_old_completed_operations` shows prune skips one anyway.)

use std::time::Duration;

use http::{Method, StatusCode};
use idemproxy::clock::Timestamp;
use idemproxy::ledger::{Ledger, LedgerOptions};

use crate::common::{Behavior, FakeProvider, Proxy, Resp, problem, route, send};

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

/// Polls `GET /ops/{id}` until the live operation is gone (pruned); returns that answer.
async fn wait_until_pruned(proxy: &Proxy, id: &str) -> Resp {
    let path = format!("/ops/{}", id.replace('/', "%2F"));
    let pruned = async {
        loop {
            let resp = send(Method::GET, &proxy.admin_url(&path), &[], "")
                .await
                .expect("the admin API answers");
            if resp.status != StatusCode::OK {
                return resp;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(15), pruned)
        .await
        .expect("the succeeded operation is pruned within a few retention periods")
}

#[tokio::test]
async fn finished_operations_are_pruned_and_undecided_ones_kept() {
    let pay = FakeProvider::start(Behavior::echo()).await;
    let id = ["{header:x-workflow-id}"];
    let pay_routes = format!(
        "key_retention = \"100ms\"\ntimeout = \"200ms\"\n{}{}approval = \"required\"\n",
        route("refund", "POST /v1/refunds", &id),
        route("payout", "POST /v1/payouts", &id),
    );
    let mut proxy = Proxy::builder()
        .config("[retention]\ncompleted = \"300ms\"\n")
        .policy("pay", &pay.policy("pay", &pay_routes))
        .start()
        .await;

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

    let pruned = wait_until_pruned(&proxy, "pay/refund/wf-done").await;
    problem(&pruned, StatusCode::GONE, "operation-expired");
    let again = post(&proxy, "/pay/v1/refunds", "wf-done").await;
    problem(&again, StatusCode::GONE, "operation-expired");
    assert_eq!(pay.request_count(), 2, "wf-lost and wf-done, each once");

    let lost_again = post(&proxy, "/pay/v1/refunds", "wf-lost").await;
    assert_eq!(lost_again.header("idem-state"), Some("unknown"));
    assert_eq!(pay.request_count(), 2, "the unknown refund is not re-sent");
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
