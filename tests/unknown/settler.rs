//! The settler (docs/reference.md section 5.5): an `unknown` operation whose agent never comes back is settled by
//! the proxy itself, so the agent's next replay (or an operator) finds the result. It re-sends
//! the kept first request with the same key where the rules allow a re-send, or runs the
//! route's lookup; it sends only with credentials held in memory from the operation's last
//! request, or from the policy's `settle_headers` (read from the environment).

use std::time::Duration;

use http::{Method, StatusCode};
use idemproxy::operation::EventKind;

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider, Proxy, send};

async fn paid_refund(proxy: &Proxy, rendered: &str) -> common::Resp {
    let headers = [
        (OP_HEADER, rendered),
        FORM,
        ("authorization", "Bearer sk_agent"),
    ];
    refund_with(proxy, &headers, "amount=500&charge=ch_1").await
}

/// The agent took the 202 for an answer and never retries; the settler re-sends the kept
/// request with the same key and the caller's credentials (from memory), and the agent's
/// eventual replay is answered from the ledger.
#[tokio::test]
async fn an_unknown_operation_is_resent_by_the_settler() {
    let behavior = Behavior::echo()
        .dedupe_on_header("idempotency-key")
        .drop_first_response(1);
    let provider = FakeProvider::start(behavior).await;
    let mut proxy = start(&provider, "dedupe = \"key\"").await;
    let id = op_id("wf-s1");

    let lost = paid_refund(&proxy, "wf-s1").await;
    problem(&lost, StatusCode::ACCEPTED, "outcome-unknown");
    provider.wait_for_requests(2).await;
    proxy.until_state(&id, "succeeded").await;

    let requests = provider.requests();
    assert_eq!(requests[1].body, requests[0].body, "the kept first request");
    assert_eq!(
        requests[1].header("idempotency-key"),
        requests[0].header("idempotency-key")
    );
    assert_eq!(requests[1].header("authorization"), Some("Bearer sk_agent"));
    assert_eq!(provider.effects(), 1);

    let metrics = send(Method::GET, &proxy.admin_url("/metrics"), &[], "")
        .await
        .expect("metrics");
    let resent = r#"idemproxy_settler_actions_total{provider="pay",route="create_refund",action="resent"} 1"#;
    assert!(metrics.text().contains(resent), "{}", metrics.text());

    let replay = paid_refund(&proxy, "wf-s1").await;
    assert_eq!(replay.status, StatusCode::OK);
    assert_op_headers(&replay, &id, "succeeded", true);
    assert_eq!(provider.request_count(), 2);

    let stored = ledger(&mut proxy, &id).await;
    let by_settler = stored
        .events
        .iter()
        .any(|e| e.kind == EventKind::ProviderRequested && e.detail.contains("settler"));
    assert!(by_settler, "{:?}", stored.events);
}

/// After a crash the callers' credentials are gone (they were never written): the settler
/// uses the policy's `settle_headers`, whose value comes from the environment.
#[tokio::test]
async fn after_a_restart_the_settler_uses_settle_headers_from_the_environment() {
    let behavior = Behavior::echo().dedupe_on_header("idempotency-key").hold();
    let provider = FakeProvider::start(behavior).await;
    let keys =
        "dedupe = \"key\"\nsettle_headers = { authorization = \"Bearer ${PAY_SETTLE_KEY}\" }";
    let mut proxy = builder(&provider, keys, &refund_route(""))
        .env("PAY_SETTLE_KEY", "sk_from_env")
        .start()
        .await;
    let id = op_id("wf-s2");

    let pending = refund_in_background(&proxy, "wf-s2", "amount=500");
    provider.wait_for_requests(1).await;
    assert!(!proxy.kill().await.success(), "killed by SIGKILL");
    let _ = pending.await;
    provider.release();
    provider.wait_for_effects(1).await;

    proxy.restart().await;
    provider.wait_for_requests(2).await;
    proxy.until_state(&id, "succeeded").await;
    let requests = provider.requests();
    assert_eq!(
        requests[1].header("authorization"),
        Some("Bearer sk_from_env")
    );
    assert_eq!(requests[1].body, requests[0].body);
    assert_eq!(provider.effects(), 1);
    assert!(
        !proxy.log_text().contains("sk_from_env"),
        "the credential is never logged"
    );
}

/// With neither credentials in memory nor `settle_headers`, the settler sends nothing: the
/// operation waits for the agent's next request.
#[tokio::test]
async fn without_credentials_the_settler_waits_for_the_agent() {
    let behavior = Behavior::echo().dedupe_on_header("idempotency-key").hold();
    let provider = FakeProvider::start(behavior).await;
    let mut proxy = start(&provider, "dedupe = \"key\"").await;
    let id = op_id("wf-s3");

    let pending = refund_in_background(&proxy, "wf-s3", "amount=500");
    provider.wait_for_requests(1).await;
    assert!(!proxy.kill().await.success());
    let _ = pending.await;
    provider.release();
    proxy.restart().await;

    // Past the settler's quiet time (2 s as unknown), several of its passes (every 500 ms).
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(proxy.op_state(&id).await, "unknown");
    assert_eq!(
        provider.request_count(),
        1,
        "nothing sent without credentials"
    );

    let replay = refund(&proxy, "wf-s3", "amount=500").await;
    assert_eq!(replay.status, StatusCode::OK, "{}", replay.text());
    assert_op_headers(&replay, &id, "succeeded", true);
}

/// A caller refused `403 principal-mismatch` (another API key, another account) is not the
/// operation's caller: the settler never acts with its credentials. Before 2026-12-03 a refusal
/// of an `unknown` operation handed them to the settler, which re-sent the first caller's
/// request under the second caller's key: a second effect, in another account.
#[tokio::test]
async fn the_settler_never_uses_the_credentials_of_a_caller_it_refused() {
    let behavior = Behavior::echo().dedupe_on_header("idempotency-key").hold();
    let provider = FakeProvider::start(behavior).await;
    let mut proxy = start(&provider, "dedupe = \"key\"").await;
    let id = op_id("wf-s4");

    let pending = refund_in_background(&proxy, "wf-s4", "amount=500");
    provider.wait_for_requests(1).await;
    assert!(!proxy.kill().await.success());
    let _ = pending.await;
    provider.release();
    proxy.restart().await;
    assert_eq!(proxy.op_state(&id).await, "unknown");

    let other = [
        (OP_HEADER, "wf-s4"),
        FORM,
        ("authorization", "Bearer sk_other_account"),
    ];
    let refused = refund_with(&proxy, &other, "amount=500").await;
    problem(&refused, StatusCode::FORBIDDEN, "principal-mismatch");

    // Past the settler's quiet time (2 s as unknown), several of its passes (every 500 ms).
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let sent_with: Vec<Option<String>> = provider
        .requests()
        .iter()
        .map(|r| r.header("authorization").map(str::to_string))
        .collect();
    assert_eq!(
        sent_with,
        [None],
        "only the first caller's attempt was sent"
    );
    assert_eq!(proxy.op_state(&id).await, "unknown");
}

/// A provider that cannot deduplicate but can be asked: the settler runs the lookup, which
/// finds the refund, and the operation succeeds with the found body without any replay.
#[tokio::test]
async fn the_settler_reconciles_an_operation_it_may_not_resend() {
    let provider = FakeProvider::start(Behavior::echo().drop_first_response(1)).await;
    let routes = refund_route(
        "[route.reconcile]\n\
         lookup = \"GET /v1/refunds?metadata[operation]={key}\"\n\
         found = \"/data/0\"\n",
    );
    let proxy = builder(&provider, "dedupe = \"none\"", &routes)
        .start()
        .await;
    let id = op_id("wf-s4");

    let lost = paid_refund(&proxy, "wf-s4").await;
    problem(&lost, StatusCode::ACCEPTED, "outcome-unknown");
    provider.set_behavior(Behavior::json(
        200,
        serde_json::json!({"data": [{"id": "re_1", "amount": 500}]}),
    ));
    proxy.until_state(&id, "succeeded").await;
    let requests = provider.requests();
    assert_eq!(requests[1].method, Method::GET);
    assert!(requests[1].path_and_query.contains(&opaque_key(&id)));
    assert_eq!(requests[1].header("authorization"), Some("Bearer sk_agent"));

    let replay = paid_refund(&proxy, "wf-s4").await;
    assert_eq!(replay.status, StatusCode::OK);
    assert_eq!(replay.json()["id"], "re_1");
    assert_eq!(
        provider.request_count(),
        2,
        "the refund itself was never re-sent"
    );
}

/// An operation that becomes `unknown` while the settler is busy with another keeps its
/// caller's credentials for the settler's next pass. Until 2026-12-05 the end of each pass
/// forgot the credentials of every operation its listing had not seen, so one that became
/// `unknown` during a pass (here: while the settler's re-send of another waits out a 3 s
/// timeout) lost them and stayed `unknown`, never re-sent, until its agent came back (found by
/// bench/soak.sh: about one unknown operation in ten under a steady trickle).
#[tokio::test]
async fn an_operation_that_turns_unknown_during_a_settler_pass_is_settled_too() {
    let held = Behavior::echo().dedupe_on_header("idempotency-key").hold();
    let slow = FakeProvider::start(held.clone()).await;
    let fast = FakeProvider::start(held).await;
    let fast_policy = fast.policy(
        "fast",
        &format!(
            "dedupe = \"key\"\ntimeout = \"300ms\"\n{}",
            common::route("charge", "POST /v1/charges", &["{header:x-operation-id}"])
        ),
    );
    let proxy = builder(
        &slow,
        "dedupe = \"key\"\ntimeout = \"3s\"",
        &refund_route(""),
    )
    .policy("fast", &fast_policy)
    .start()
    .await;

    // A: unknown after 3 s; the settler's re-send of it then holds its pass for 3 s more.
    let first = paid_refund(&proxy, "wf-s-busy").await;
    problem(&first, StatusCode::ACCEPTED, "outcome-unknown");
    slow.wait_for_requests(2).await;

    // B turns unknown while that pass runs; its provider answers from now on.
    let charge = send(
        Method::POST,
        &proxy.url("/fast/v1/charges"),
        &[
            (OP_HEADER, "ch-busy"),
            FORM,
            ("authorization", "Bearer sk_agent"),
        ],
        "amount=700".to_string(),
    )
    .await
    .expect("the proxy answers");
    problem(&charge, StatusCode::ACCEPTED, "outcome-unknown");
    fast.set_behavior(Behavior::echo().dedupe_on_header("idempotency-key"));

    let id = "fast/charge/ch-busy";
    proxy.until_state(id, "succeeded").await;
    let requests = fast.requests();
    assert_eq!(
        requests.len(),
        2,
        "one attempt by the agent, one by the settler"
    );
    assert_eq!(
        requests[1].header("idempotency-key"),
        requests[0].header("idempotency-key")
    );
    assert_eq!(requests[1].header("authorization"), Some("Bearer sk_agent"));
    slow.release();
}
