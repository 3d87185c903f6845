//! `pending_status`: the "not yet" answers (`outcome-unknown`, `in-flight`,
//! `awaiting-approval`) use the provider's `pending_status` instead of 202, in the status
//! line and in the body's `status`, still with `Retry-After`; other problems keep theirs, and
//! `check` allows only 202, 409, 425, 429 and 503.

use http::StatusCode;

use crate::common::guarded::*;
use crate::common::{self, Behavior, FakeProvider, Proxy};

const UNAVAILABLE: StatusCode = StatusCode::SERVICE_UNAVAILABLE;

/// A pending problem at `status`, with its `Retry-After` and the operation's headers.
fn assert_pending(resp: &common::Resp, status: StatusCode, kind: &str, state: &str) {
    let body = problem(resp, status, kind);
    assert_eq!(resp.header("retry-after"), Some("5"), "{body}");
    assert_eq!(resp.header("idem-state"), Some(state), "{body}");
    assert_eq!(body["state"], state, "{body}");
}

#[tokio::test]
async fn an_unknown_outcome_is_answered_with_the_pending_status() {
    let provider = FakeProvider::start(Behavior::echo().drop_first_response(1)).await;
    let proxy = start(&provider, "pending_status = 503").await;

    let first = refund(&proxy, "wf-lost", "amount=500").await;
    assert_pending(&first, UNAVAILABLE, "outcome-unknown", "unknown");
    // The same words and `next` as at 202: only the status differs.
    assert_next(&first.json(), "wait", &["It is held until it is resolved"]);
    let replay = refund(&proxy, "wf-lost", "amount=500").await;
    assert_pending(&replay, UNAVAILABLE, "outcome-unknown", "unknown");
    assert_eq!(provider.request_count(), 1, "nothing re-sent");

    let changed = refund(&proxy, "wf-lost", "amount=900").await;
    problem(&changed, StatusCode::CONFLICT, "parameter-mismatch");
    assert_eq!(changed.header("retry-after"), None);
}

#[tokio::test]
async fn a_duplicate_still_in_flight_is_answered_with_the_pending_status() {
    let provider = FakeProvider::start(Behavior::echo().hold()).await;
    let proxy = builder(&provider, "pending_status = 429", &refund_route(""))
        .config("[limits]\nin_flight_wait = \"20ms\"")
        .start()
        .await;
    let first = refund_in_background(&proxy, "wf-held", "amount=500");
    provider.wait_for_requests(1).await;

    let duplicate = refund(&proxy, "wf-held", "amount=500").await;
    assert_pending(
        &duplicate,
        StatusCode::TOO_MANY_REQUESTS,
        "in-flight",
        "in_flight",
    );
    provider.release();
    let first = first.await.expect("task").expect("answer");
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
}

#[tokio::test]
async fn an_operation_awaiting_approval_is_answered_with_the_pending_status() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let routes = refund_route("approval = \"required\"\n");
    let proxy = builder(&provider, "pending_status = 425", &routes)
        .start()
        .await;
    let resp = refund(&proxy, "wf-approve", "amount=500").await;
    assert_pending(
        &resp,
        StatusCode::TOO_EARLY,
        "awaiting-approval",
        "prepared",
    );
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test]
async fn without_pending_status_the_answers_stay_202() {
    let provider = FakeProvider::start(Behavior::echo().drop_first_response(1)).await;
    let proxy = start(&provider, "").await;
    let first = refund(&proxy, "wf-lost", "amount=500").await;
    assert_pending(&first, StatusCode::ACCEPTED, "outcome-unknown", "unknown");
}

#[tokio::test]
async fn check_allows_only_the_pending_statuses() {
    for (value, ok) in [
        ("500", false),
        ("200", false),
        ("\"503\"", false),
        ("202", true),
        ("409", true),
        ("425", true),
        ("429", true),
        ("503", true),
    ] {
        let keys = format!("pending_status = {value}");
        let text = common::policy("pay", "https://pay.example.com", &keys);
        let dir = Proxy::builder().policy("pay", &text).write();
        let config = dir.config_path().to_string_lossy().into_owned();
        let (status, _, stderr) = dir.run_cli(&["check", "-c", &config]).await;
        assert_eq!(status.success(), ok, "{value}: {stderr}");
        if !ok {
            assert!(
                stderr.contains("policies/pay.toml: provider.pending_status:")
                    && stderr.contains("202 (the default), 409, 425, 429 or 503"),
                "{value}: {stderr}"
            );
        }
    }
}

/// Item 3 of issue 31: `check` warns (exit 0, a `warning:` line, errors are not so marked) for
/// every provider with guarded routes whose pending answers stay at 202, naming the SDKs that
/// take a 2xx for success and the fix; not for one at 503, nor one with no guarded route.
#[tokio::test]
async fn check_warns_for_every_guarded_provider_left_at_202() {
    let guarded = |name: &str, keys: &str| {
        let route = common::route("create", "POST /things", &["{header:x-operation-id}"]);
        common::policy(
            name,
            &format!("https://{name}.example.com"),
            &format!("{keys}\n{route}"),
        )
    };
    let reads = "[[route]]\nname = \"list\"\nmatch = \"GET /things\"\neffect = \"read_only\"\n";
    let dir = Proxy::builder()
        .policy("left", &guarded("left", ""))
        .policy("explicit", &guarded("explicit", "pending_status = 202"))
        .policy("fixed", &guarded("fixed", "pending_status = 503"))
        .policy(
            "reads",
            &common::policy("reads", "https://reads.example.com", reads),
        )
        .write();
    let config = dir.config_path().to_string_lossy().into_owned();
    let (status, _, stderr) = dir.run_cli(&["check", "-c", &config]).await;
    assert!(status.success(), "a warning, not an error: {stderr}");
    let warned: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("provider.pending_status"))
        .collect();
    assert_eq!(warned.len(), 2, "{stderr}");
    for (line, file) in warned.iter().zip(["explicit", "left"]) {
        let at = format!("policies/{file}.toml: provider.pending_status: 202");
        assert!(
            line.starts_with("warning: ") && line.contains(&at),
            "{line}"
        );
        for words in [
            "stripe-python",
            "gocardless-pro",
            "pending_status = 503",
            "Retry-After",
        ] {
            assert!(line.contains(words), "{words}: {line}");
        }
    }
}
