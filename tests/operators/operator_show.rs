//! What the operator who must settle an `unknown` operation is shown, against the real binary:
//! `GET /ops/{id}` and `ops show` add the route's `operator_show` fields of the kept request
//! (masked as `approval_show` masks them; by default `approval_show`), for `unknown` and
//! `in_flight` operations, the agents' requests held meanwhile (count, first and last) and
//! the exact `ops resolve` commands, which run as printed. Before 2026-12-04 an unknown
//! operation showed none of them: nothing to decide from.

use http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::shop::start;
use crate::common::{Behavior, FakeProvider, Proxy, Resp, send};

const SHOW: &str = "fingerprint_ignore = [\"metadata[trace]\"]\n\
    operator_show = [\"amount\", \"metadata[trace]\", \"card[cvc]\", \"note\"]\n";

async fn agent(proxy: &Proxy, op: &str) -> Resp {
    let headers = [("x-operation-id", op), ("content-type", "application/json")];
    let body = json!({"amount": 1000, "metadata": {"trace": "t-77"}, "card": {"cvc": "cvc-Q9"}});
    send(
        Method::POST,
        &proxy.url("/shop/v1/things"),
        &headers,
        body.to_string(),
    )
    .await
    .expect("proxy answers")
}

fn want_request() -> Value {
    json!({
        "fields": {"amount": "1000", "metadata[trace]": "[masked]", "card[cvc]": "[masked]"},
        "masked": ["metadata[trace]", "card[cvc]"],
        "missing": ["note"],
    })
}

#[tokio::test]
async fn an_unknown_operation_shows_its_fields_held_retries_and_the_commands_to_settle_it() {
    let provider = FakeProvider::start(Behavior::echo().drop_first_response(1)).await;
    let proxy = start(&provider, SHOW, &[]).await;
    let lost = agent(&proxy, "op-1").await;
    assert_eq!(
        lost.header("idem-state"),
        Some("unknown"),
        "{}",
        lost.text()
    );
    let id = "shop/create/op-1";
    let first = proxy.op_json(id).await;
    assert_eq!(first["operator_request"], want_request(), "{first}");
    assert_eq!(
        first["held_retries"],
        Value::Null,
        "the first answer held nothing"
    );

    for _ in 0..2 {
        let held = agent(&proxy, "op-1").await;
        assert_eq!(held.status, StatusCode::ACCEPTED, "{}", held.text());
    }
    assert_eq!(provider.request_count(), 1, "held: nothing sent again");
    let op = proxy.op_json(id).await;
    let held = &op["held_retries"];
    assert_eq!(held["count"], 2, "{op}");
    assert!(
        held["first_at"].as_str() <= held["last_at"].as_str(),
        "{held}"
    );
    assert_eq!(
        op["resolve_commands"],
        json!([
            "idemproxy ops resolve shop/create/op-1 --succeeded --body-file FILE",
            "idemproxy ops resolve shop/create/op-1 --failed --reason TEXT",
        ])
    );
    assert!(!op.to_string().contains("cvc-Q9") && !op.to_string().contains("t-77"));

    let admin = proxy.admin_url("");
    let (_, table, _) = proxy.run_cli(&["ops", "show", id, "--admin", &admin]).await;
    for line in [
        "held retries         2, first ",
        "the request:",
        "  amount             1000",
        "  card[cvc]          [masked]",
        "  note               (not in the request)",
        "  idemproxy ops resolve shop/create/op-1 --failed --reason TEXT",
    ] {
        assert!(table.contains(line), "{line:?} in:\n{table}");
    }
    // The printed command runs as it is, TEXT given.
    let (status, out, err) = proxy
        .run_cli(&[
            "ops",
            "resolve",
            id,
            "--failed",
            "--reason",
            "not at the provider",
            "--admin",
            &admin,
        ])
        .await;
    assert!(status.success(), "{out}{err}");
    let settled = proxy.op_json(id).await;
    assert_eq!(settled["state"], "failed");
    for gone in ["operator_request", "held_retries", "resolve_commands"] {
        assert!(settled.get(gone).is_none(), "{gone}: {settled}");
    }
}

/// An attempt still in flight shows the same fields, and no command: it cannot be resolved.
#[tokio::test]
async fn an_in_flight_operation_shows_its_fields() {
    let provider = FakeProvider::start(Behavior::echo().hold()).await;
    let proxy = start(&provider, SHOW, &[]).await;
    let slow = tokio::spawn({
        let url = proxy.url("/shop/v1/things");
        async move {
            let headers = [
                ("x-operation-id", "op-2"),
                ("content-type", "application/json"),
            ];
            let body =
                json!({"amount": 1000, "metadata": {"trace": "t-77"}, "card": {"cvc": "cvc-Q9"}});
            send(Method::POST, &url, &headers, body.to_string()).await
        }
    });
    let id = "shop/create/op-2";
    provider.wait_for_requests(1).await;
    let op = proxy.op_json(id).await;
    assert_eq!(op["operator_request"], want_request(), "{op}");
    assert_eq!(op["state"], "in_flight");
    assert!(op.get("resolve_commands").is_none(), "{op}");
    provider.release();
    let sent = slow.await.expect("the agent's task").expect("an answer");
    assert_eq!(sent.status, StatusCode::OK);
}
