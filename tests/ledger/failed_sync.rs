//! A batch of the ledger's writer is durable once redb's own durable commit of it has
//! returned (one `fdatasync` of the ledger file), and nobody is answered before. So what a
//! SIGKILLed proxy answered survives the kill, and a commit whose `fdatasync` fails leaves
//! its claim undurable: its request is never sent, and the ledger breaks (once) and reopens
//! from what the disk holds.

use http::StatusCode;

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider, Proxy};

const OPERATIONS: usize = 16;

/// Refunds `wf-log-0..OPERATIONS` at once; each must be answered 200.
async fn refund_all(proxy: &Proxy) {
    let pending: Vec<_> = (0..OPERATIONS)
        .map(|n| refund_in_background(proxy, &format!("wf-log-{n}"), "amount=100"))
        .collect();
    for task in pending {
        let answer = task.await.expect("task").expect("answer");
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    }
}

/// Each refund replays from the ledger (nothing sent again).
async fn assert_all_replayed(proxy: &Proxy, provider: &FakeProvider) {
    for n in 0..OPERATIONS {
        let rendered = format!("wf-log-{n}");
        let replay = refund(proxy, &rendered, "amount=100").await;
        assert_eq!(replay.status, StatusCode::OK, "{}", replay.text());
        assert_op_headers(&replay, &op_id(&rendered), "succeeded", true);
    }
    assert_eq!(provider.request_count(), OPERATIONS, "nothing sent twice");
    assert_eq!(provider.effects(), OPERATIONS);
}

#[tokio::test]
async fn answers_given_before_a_kill_survive_it() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut proxy = builder(&provider, "", &refund_route("")).start().await;
    refund_all(&proxy).await;
    assert!(!proxy.kill().await.success(), "killed by SIGKILL");
    proxy.restart().await;
    assert_all_replayed(&proxy, &provider).await;
    assert!(!proxy.kill().await.success());
    proxy.restart().await;
    assert_all_replayed(&proxy, &provider).await;
}

/// Runs the proxy under strace when `FAIL_SYNC_OF` names a file: from the `FAIL_FROM`th
/// `fdatasync` of that file (the ledger) on, each thread's calls really fail with `EIO`
/// (strace injects it into the system call and counts per thread; `FAIL_UNTIL` the last one
/// failed, empty: every later one; every other system call is the kernel's own). Without it,
/// the proxy as is.
const SYNCS_FAIL: &str = r#"
if [ -n "$FAIL_SYNC_OF" ]; then
  command -v strace >/dev/null || { echo "this test needs strace (apt-get install strace)" >&2; exit 3; }
  exec strace -f -qq --seccomp-bpf -o /dev/null -e trace=fdatasync \
    -e inject=fdatasync:error=EIO:when=$FAIL_FROM$FAIL_UNTIL -P "$FAIL_SYNC_OF" -- "$0" "$@"
fi
exec "$0" "$@""#;

/// A proxy whose writer thread's `fdatasync`s of the ledger fail from the fourth on (the
/// fourth only with `once`, else every one): the start-up write (another thread) and the
/// warm-up operation's three durable commits (its claim, its dispatch, its result) are the
/// kernel's own, so the next claim's commit is the first to fail.
async fn proxy_whose_syncs_fail(provider: &FakeProvider, config: &str, once: bool) -> Proxy {
    let bin = env!("CARGO_BIN_EXE_idemproxy");
    let mut proxy = builder(provider, config, &refund_route(""))
        .bin("sh", &["-c", SYNCS_FAIL, bin])
        .start()
        .await;
    // The first start created the ledger; the injection starts with the next.
    proxy.set_env("FAIL_SYNC_OF", &proxy.ledger_path().display().to_string());
    proxy.set_env("FAIL_FROM", "4");
    proxy.set_env("FAIL_UNTIL", if once { "" } else { "+" });
    proxy.restart().await;
    let warm = refund(&proxy, "wf-warm", "amount=1").await;
    assert_eq!(warm.status, StatusCode::OK, "{warm:?}");
    proxy
}

/// Nothing outlives the test: the process the harness started is strace, and a tracer's
/// death only detaches its tracee, which would serve on with nobody to stop it.
async fn stop_traced(proxy: Proxy) {
    let tracer = proxy.pid().expect("the proxy runs");
    let traced = common::process::descendants(tracer);
    assert_eq!(traced.len(), 1, "strace traces one process: {traced:?}");
    drop(proxy);
    for pid in traced {
        if !common::process::gone_within(pid, std::time::Duration::from_secs(10)).await {
            common::process::signal(pid, "KILL");
            panic!("the proxy {pid} outlived strace, its parent");
        }
    }
}

/// A ledger that cannot be synced leaves the claim undurable, so its request is never sent:
/// the agent gets `503 ledger-unavailable`, and so does every later one while the syncs fail.
#[tokio::test]
async fn a_ledger_that_cannot_be_synced_sends_nothing() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = proxy_whose_syncs_fail(&provider, "", false).await;
    let resp = refund(&proxy, "wf-unsynced", "amount=500").await;
    let body = problem(&resp, StatusCode::SERVICE_UNAVAILABLE, "ledger-unavailable");
    assert_next(
        &body,
        "retry_same",
        &["nothing was sent", "Retry the same request"],
    );
    for n in 0..4 {
        let again = refund(&proxy, &format!("wf-unsynced-{n}"), "amount=5").await;
        assert_eq!(again.status, StatusCode::SERVICE_UNAVAILABLE, "{again:?}");
    }
    assert_eq!(
        provider.request_count(),
        1,
        "the provider got the warm-up only"
    );
    let log = proxy.log_text();
    assert!(log.contains("Input/output error"), "{log}");
    // Broken as by any storage error, logged once.
    assert_eq!(log.matches(common::LEDGER_BROKE).count(), 1, "{log}");
    stop_traced(proxy).await;
}

/// A real failed `fdatasync` of the ledger (EIO from the kernel's call, injected by strace):
/// the claim is not durable, so its request is never sent and the agent is told so (`503`,
/// "nothing was sent ... retry later"). When the ledger can write again, the agent's retry is
/// sent, once, and succeeds: the claim that never left is not taken for an attempt whose
/// outcome is unknown (which, at a provider that cannot deduplicate, would hold the retry
/// for a person although nothing was ever sent). Its history says what happened.
#[tokio::test]
async fn a_claim_whose_sync_failed_is_sent_once_when_the_agent_retries() {
    let provider = FakeProvider::start(Behavior::fixed(200, "refunded")).await;
    let proxy = proxy_whose_syncs_fail(&provider, "dedupe = \"none\"", true).await;

    let refused = refund(&proxy, "wf-eio", "amount=500").await;
    let body = problem(
        &refused,
        StatusCode::SERVICE_UNAVAILABLE,
        "ledger-unavailable",
    );
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("nothing was sent"), "{detail}");
    assert_eq!(
        provider.request_count(),
        1,
        "the provider got the warm-up only"
    );
    assert!(
        proxy.log_text().contains("Input/output error"),
        "the real error is logged: {}",
        proxy.log_text()
    );

    proxy.until_healthy().await;
    // Settled as what it was: an attempt that never left, nothing of which can have taken
    // effect.
    let settled = proxy.op_json(&op_id("wf-eio")).await;
    assert_eq!(settled["state"], "failed", "{settled}");
    assert_eq!(settled["attempts"], 1, "{settled}");
    let retried = refund(&proxy, "wf-eio", "amount=500").await;
    assert_eq!(
        retried.status,
        StatusCode::OK,
        "{retried:?}\n{}",
        proxy.log_text()
    );
    assert_eq!(retried.text(), "refunded");
    assert_op_headers(&retried, &op_id("wf-eio"), "succeeded", false);
    assert_eq!(provider.request_count(), 2, "sent once, on the retry");
    let again = refund(&proxy, "wf-eio", "amount=500").await;
    assert_op_headers(&again, &op_id("wf-eio"), "succeeded", true);
    assert_eq!(provider.request_count(), 2, "never twice");

    let op = proxy.op_json(&op_id("wf-eio")).await;
    let events = op["events"].as_array().expect("events");
    let details: Vec<&str> = events
        .iter()
        .map(|e| e["detail"].as_str().unwrap_or_default())
        .collect();
    assert!(
        details.iter().any(|d| d.contains("nothing was sent")),
        "the history tells of the attempt that never left: {op}"
    );
    assert_eq!(
        op["attempts"], 2,
        "the refused attempt and the sent one: {op}"
    );

    stop_traced(proxy).await;
}

/// A sync that fails while the writer is busy with many writes breaks the ledger once, and
/// nothing is sent.
#[tokio::test]
async fn a_sync_failing_under_concurrent_writes_breaks_the_ledger_once() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = proxy_whose_syncs_fail(&provider, "", false).await;
    let ids: Vec<String> = (0..48).map(|n| format!("wf-busy-{n}")).collect();
    let answers =
        futures_util::future::join_all(ids.iter().map(|id| refund(&proxy, id, "amount=5"))).await;
    for resp in &answers {
        assert_eq!(resp.status, StatusCode::SERVICE_UNAVAILABLE, "{resp:?}");
    }
    assert_eq!(
        provider.request_count(),
        1,
        "the provider got the warm-up only"
    );
    let log = proxy.log_text();
    assert_eq!(log.matches(common::LEDGER_BROKE).count(), 1, "{log}");
    stop_traced(proxy).await;
}

/// A write-ahead log an earlier build kept beside the ledger (`<ledger>.wal`) may hold answers
/// the file lacks, and this build cannot replay it: the start is refused, naming the log and
/// what to do, and nothing is sent. Once it is gone, the ledger starts with what it holds.
#[tokio::test]
async fn a_log_left_by_an_earlier_build_refuses_the_start() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut proxy = builder(&provider, "", &refund_route("")).start().await;
    refund_all(&proxy).await;
    assert!(proxy.terminate().await.success(), "a graceful stop");
    let mut name = proxy.ledger_path().into_os_string();
    name.push(".wal");
    let wal = std::path::PathBuf::from(name);
    std::fs::write(&wal, b"IDEMWAL1").expect("an earlier build's log");

    let (status, log) = proxy.restart_expect_failure().await;
    assert!(!status.success(), "{log}");
    assert!(
        log.contains(&wal.display().to_string()) && log.contains("earlier idemproxy"),
        "the refusal names the log and why: {log}"
    );

    std::fs::remove_file(&wal).expect("delete the log");
    proxy.restart().await;
    assert_all_replayed(&proxy, &provider).await;
}
