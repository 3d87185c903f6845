//! Group commit (issue 8): concurrent fresh operations share durable commits, and sharing
//! weakens nothing: each request is sent only once its claim is durable, each answer only
//! once its result is, and every provider effect happens exactly once.

use http::{Method, StatusCode};
use idemproxy::operation::State;

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider};

const OPERATIONS: usize = 64;

/// The value of the unlabelled sample `name` in a Prometheus text exposition.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// 64 fresh operations at once need 128 durable writes (a claim and a result each). The
/// provider holds every request until all 64 have arrived, so the 64 results reach the
/// writer together: group commit must record them in far fewer commits than writes. The
/// bound (< 100) is not a timing claim: even with every claim committed alone, it holds
/// only if the results shared their commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_fresh_operations_share_durable_commits() {
    let provider = FakeProvider::start(Behavior::echo().hold()).await;
    let mut proxy = start(&provider, "").await;

    let pending: Vec<_> = (0..OPERATIONS)
        .map(|n| refund_in_background(&proxy, &format!("wf-gc-{n}"), "amount=100"))
        .collect();
    // Each request reached the provider, so each claim was durable first.
    provider.wait_for_requests(OPERATIONS).await;
    provider.release();
    for task in pending {
        let answer = task.await.expect("task").expect("answer");
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
        assert_eq!(answer.header("idem-state"), Some("succeeded"));
    }

    let metrics = common::send(Method::GET, &proxy.admin_url("/metrics"), &[], "")
        .await
        .expect("the admin API answers");
    let text = metrics.text();
    let commits = sample(&text, "idemproxy_ledger_commits_total")
        .unwrap_or_else(|| panic!("no idemproxy_ledger_commits_total in /metrics:\n{text}"));
    let batches = sample(&text, "idemproxy_ledger_batch_size_count")
        .unwrap_or_else(|| panic!("no idemproxy_ledger_batch_size histogram:\n{text}"));
    let jobs = sample(&text, "idemproxy_ledger_batch_size_sum").expect("a histogram sum");
    assert!(
        commits < 100.0,
        "{commits} commits for {} durable writes:\n{text}",
        2 * OPERATIONS
    );
    eprintln!("{commits} commits, {jobs} jobs");
    assert_eq!(batches, commits, "one batch size per commit");
    assert!(jobs >= (2 * OPERATIONS) as f64, "{jobs} jobs committed");

    assert_eq!(provider.request_count(), OPERATIONS);
    assert_eq!(provider.effects(), OPERATIONS, "each effect exactly once");
    for n in 0..OPERATIONS {
        let stored = ledger(&mut proxy, &op_id(&format!("wf-gc-{n}"))).await;
        assert_eq!(stored.op.state, State::Succeeded, "wf-gc-{n}");
        assert_eq!(stored.op.attempts, 1, "wf-gc-{n}");
    }
}
