//! A ledger that cannot record (docs/reference.md section 5.7): 503 `ledger-unavailable`, and nothing is
//! sent, because a request the proxy could not claim durably must never leave.
//! `IDEMPROXY_FAIL=ledger.commit` makes every ledger write fail.

use http::StatusCode;

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider};

#[tokio::test]
async fn an_unwritable_ledger_answers_503_and_sends_nothing() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = builder(&provider, "", &refund_route(""))
        .env("IDEMPROXY_FAIL", "ledger.commit")
        .start()
        .await;
    let id = op_id("wf-down");

    for _ in 0..2 {
        let resp = refund(&proxy, "wf-down", "amount=500").await;
        let body = problem(&resp, StatusCode::SERVICE_UNAVAILABLE, "ledger-unavailable");
        assert_eq!(body["operation_id"], id.as_str(), "{body}");
        assert_eq!(body["provider"], PROVIDER);
        assert_eq!(body["route"], ROUTE);
        assert_eq!(resp.header("idem-operation-id"), Some(id.as_str()));
        assert_eq!(resp.header("idempotent-replayed"), Some("false"));
        // The state could not be read or written: none is claimed, in header or body.
        assert_eq!(resp.header("idem-state"), None);
        assert!(body.get("state").is_none(), "{body}");
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("nothing was sent"), "{detail}");
    }
    assert_eq!(provider.request_count(), 0, "the provider got nothing");

    // Unguarded traffic does not touch the ledger and still flows.
    let resp = common::send(http::Method::GET, &proxy.url("/pay/v1/balance"), &[], "")
        .await
        .expect("answer");
    assert_eq!(resp.status, StatusCode::OK);
    assert_eq!(provider.request_count(), 1);
}
