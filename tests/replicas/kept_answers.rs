//! The replay answers each replica keeps in memory (docs/reference.md, several replicas): a
//! replay of a final operation is answered without a query, and what changes such an answer
//! on one replica (a rebind, a prune) reaches the others; a replica that stops hearing of
//! changes answers from the database until it hears again.
//!
//! That a replica answers from memory is shown by locking the table of operations against
//! every read (`LOCK TABLE ops`): a replay that needs the database then waits and fails, one
//! from memory does not.

use std::time::{Duration, Instant};

use http::{Method, StatusCode};

use crate::common::guarded::*;
use crate::common::{Behavior, FakeProvider, Proxy, ProxyBuilder, Replicas, Resp, problem, send};

const LEASE: &str = "1s";
const PATIENCE: Duration = Duration::from_secs(20);
const FIRST: &str = "Bearer sk_test_first_caller";
const OTHER: &str = "Bearer sk_test_other_caller";

fn replica(provider: &FakeProvider, provider_keys: &str, extra: &str) -> ProxyBuilder {
    builder(provider, provider_keys, &refund_route(""))
        .config(&format!("[replicas]\nlease = \"{LEASE}\"\n{extra}"))
}

/// A refund for `wf` as the caller with `authorization`.
async fn as_caller(proxy: &Proxy, wf: &str, authorization: &str) -> Resp {
    let headers = [(OP_HEADER, wf), FORM, ("authorization", authorization)];
    refund_with(proxy, &headers, "amount=500").await
}

async fn rebind(proxy: &Proxy, id: &str) -> Resp {
    let path = format!("/ops/{}/rebind", id.replace('/', "%2F"));
    let body = r#"{"reason":"rotated the API key"}"#.to_owned();
    send(
        Method::POST,
        &proxy.admin_url(&path),
        &[("content-type", "application/json")],
        body,
    )
    .await
    .expect("the admin API answers")
}

/// Completes `wf` through replica 0 as `FIRST`, replays it through replica 1 (which keeps
/// the answer), and shows that replica 1 then answers from memory: with every read of the
/// operations table locked out, its replay is still the stored answer.
async fn kept_by_the_second(replicas: &Replicas, wf: &str) -> Resp {
    let id = op_id(wf);
    let first = as_caller(&replicas[0], wf, FIRST).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    let read = as_caller(&replicas[1], wf, FIRST).await;
    assert_op_headers(&read, &id, "succeeded", true);
    let locked = replicas
        .database()
        .hold("LOCK TABLE ops IN ACCESS EXCLUSIVE MODE");
    let kept = as_caller(&replicas[1], wf, FIRST).await;
    locked.end();
    assert_op_headers(&kept, &id, "succeeded", true);
    assert_eq!(kept.body, first.body, "the stored answer, from memory");
    first
}

/// Asks replica `proxy` for `wf` as `caller` until the answer is `want`, within `PATIENCE`;
/// every answer before must be one `allowed` says yes to.
async fn until_answer(
    proxy: &Proxy,
    wf: &str,
    caller: &str,
    want: StatusCode,
    allowed: impl Fn(&Resp) -> bool,
) -> Resp {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let resp = as_caller(proxy, wf, caller).await;
        if resp.status == want {
            return resp;
        }
        assert!(allowed(&resp), "an answer it must never give: {resp:?}");
        assert!(
            Instant::now() < deadline,
            "never {want}; last {}: {}",
            resp.status,
            resp.text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Rebinds `wf` through replica 0 and has the rotated key adopt it there.
async fn rotate_through_the_first(replicas: &Replicas, wf: &str) {
    let id = op_id(wf);
    let done = rebind(&replicas[0], &id).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.text());
    let adopted = as_caller(&replicas[0], wf, OTHER).await;
    assert_op_headers(&adopted, &id, "succeeded", true);
}

/// Replica 1 refuses the first key for `wf` (every answer before that one `allowed` says yes
/// to) and replays it to the rotated key; nothing was sent again.
async fn rotated_through_the_second(
    replicas: &Replicas,
    provider: &FakeProvider,
    wf: &str,
    allowed: impl Fn(&Resp) -> bool,
) {
    let old = until_answer(&replicas[1], wf, FIRST, StatusCode::FORBIDDEN, allowed);
    problem(&old.await, StatusCode::FORBIDDEN, "principal-mismatch");
    let rotated = as_caller(&replicas[1], wf, OTHER).await;
    assert_op_headers(&rotated, &op_id(wf), "succeeded", true);
    assert_eq!(rotated.text(), "refund-made");
    assert_eq!(provider.request_count(), 1, "nothing sent again");
}

/// A rebind through replica 0, and the rotated key's adoption there, reach replica 1's
/// kept answer: the first key, whose answer replica 1 kept, is then refused through replica 1
/// too (a pure replay: nothing but the kept answer would tell replica 1 otherwise), and the
/// rotated key gets its replay there.
#[tokio::test]
async fn a_rebind_through_one_replica_is_honoured_by_anothers_kept_answer() {
    let provider = FakeProvider::start(Behavior::fixed(200, "refund-made")).await;
    let replicas = Replicas::start(replica(&provider, "", ""), 2).await;
    let first = kept_by_the_second(&replicas, "wf-kept-rebind").await;
    rotate_through_the_first(&replicas, "wf-kept-rebind").await;
    // The change reaches replica 1 as a notification, within moments of its commit: until
    // then its answer may still be the kept replay, never anything else.
    let kept = |r: &Resp| r.status == StatusCode::OK && r.body == first.body;
    rotated_through_the_second(&replicas, &provider, "wf-kept-rebind", kept).await;
}

/// Retention prunes an operation whose answer both replicas keep: each then answers its
/// `410`, not the kept answer.
#[tokio::test]
async fn a_pruned_operation_is_gone_through_every_replica_that_kept_its_answer() {
    let provider = FakeProvider::start(Behavior::fixed(200, "refund-made")).await;
    let keys = "dedupe = \"none\"\nkey_retention = \"200ms\"\ntimeout = \"500ms\"";
    let pruning = replica(&provider, keys, "\n[retention]\ncompleted = \"2s\"\n");
    let replicas = Replicas::start(pruning, 2).await;
    let first = kept_by_the_second(&replicas, "wf-kept-pruned").await;
    let again = as_caller(&replicas[0], "wf-kept-pruned", FIRST).await;
    assert_eq!(again.body, first.body);

    let replayed = |r: &Resp| r.status == StatusCode::OK && r.body == first.body;
    for proxy in replicas.iter() {
        let gone = until_answer(proxy, "wf-kept-pruned", FIRST, StatusCode::GONE, replayed);
        let body = problem(&gone.await, StatusCode::GONE, "operation-expired");
        assert_eq!(body["state"], "succeeded", "{body}");
    }
    assert_eq!(provider.request_count(), 1, "nothing sent again");
}

/// Replica 1 loses every connection to the database, its listening one too, while replica 0
/// rebinds an operation whose answer replica 1 kept: replica 1 never answers from what it
/// kept while it cannot hear, nor after, and adopts the rebind once the database is back.
#[tokio::test]
async fn a_replica_that_stopped_hearing_never_answers_from_what_it_kept_before() {
    let provider = FakeProvider::start(Behavior::fixed(200, "refund-made")).await;
    let replicas = Replicas::start(replica(&provider, "", ""), 2).await;
    kept_by_the_second(&replicas, "wf-kept-deaf").await;

    replicas.relay(1).cut();
    // Cut off: no answer from memory (the database is unavailable).
    let kept = |r: &Resp| r.status == StatusCode::OK;
    let cut = until_answer(
        &replicas[1],
        "wf-kept-deaf",
        FIRST,
        StatusCode::SERVICE_UNAVAILABLE,
        kept,
    );
    problem(
        &cut.await,
        StatusCode::SERVICE_UNAVAILABLE,
        "ledger-unavailable",
    );
    rotate_through_the_first(&replicas, "wf-kept-deaf").await;
    replicas.relay(1).restore();

    // The kept answer (the first key's replay) is never given again: once replica 1 reaches
    // the database, the first key is refused there and the rotated key replayed.
    let unavailable = |r: &Resp| r.status == StatusCode::SERVICE_UNAVAILABLE;
    rotated_through_the_second(&replicas, &provider, "wf-kept-deaf", unavailable).await;
}
