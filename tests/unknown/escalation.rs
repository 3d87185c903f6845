//! Escalation (issue 4): an operation that enters `unknown` on a compensable or irreversible
//! route whose provider cannot deduplicate, with no reconciliation, is one that only a person
//! can resolve. The proxy logs exactly one warning naming it and the command that resolves
//! it, and counts it in `idemproxy_escalations_total`; replays that are held do not repeat it.

use http::{Method, StatusCode};

use crate::common::{Behavior, FakeProvider, Proxy, Resp, route, send};

async fn refund(proxy: &Proxy, workflow: &str) -> Resp {
    send(
        Method::POST,
        &proxy.url("/pay/v1/refunds"),
        &[("x-workflow-id", workflow)],
        "amount=500",
    )
    .await
    .expect("the proxy answers")
}

/// Lines of the proxy's log at level WARN that mention `text`.
fn warnings_about(proxy: &Proxy, text: &str) -> usize {
    proxy
        .log_text()
        .lines()
        .filter(|line| line.contains("WARN") && line.contains(text))
        .count()
}

#[tokio::test]
async fn an_unresolvable_unknown_warns_once_and_counts() {
    let provider = FakeProvider::start(Behavior::echo().drop_first_response(1)).await;
    let routes = format!(
        "{}effect = \"irreversible\"\n{}effect = \"idempotent\"\n",
        route("refund", "POST /v1/refunds", &["{header:x-workflow-id}"]),
        route("sync", "POST /v1/sync", &["{header:x-workflow-id}"]),
    );
    let proxy = Proxy::builder()
        .policy("pay", &provider.policy("pay", &routes))
        .start()
        .await;

    let first = refund(&proxy, "wf-9").await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.text());
    let held = refund(&proxy, "wf-9").await;
    assert_eq!(held.json()["type"], "urn:idemproxy:outcome-unknown");
    assert_eq!(provider.request_count(), 1, "held, not re-sent");

    let op = "pay/refund/wf-9";
    let lines: Vec<String> = proxy
        .log_text()
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("idemproxy ops resolve"))
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains(op), "{}", lines[0]);

    // An idempotent route's unknown is re-sent by the proxy itself: nothing to escalate.
    provider.set_behavior(Behavior::echo().drop_first_response(1));
    let sync = send(
        Method::POST,
        &proxy.url("/pay/v1/sync"),
        &[("x-workflow-id", "wf-10")],
        "",
    )
    .await
    .expect("the proxy answers");
    assert_eq!(sync.header("idem-state"), Some("unknown"));
    assert_eq!(warnings_about(&proxy, "pay/sync/wf-10"), 0);
    assert_eq!(warnings_about(&proxy, "idemproxy ops resolve"), 1);

    let metrics = send(Method::GET, &proxy.admin_url("/metrics"), &[], "")
        .await
        .expect("the admin API answers");
    assert_eq!(metrics.status, StatusCode::OK);
    let text = metrics.text();
    assert!(
        text.contains(r#"idemproxy_escalations_total{provider="pay",route="refund"} 1"#),
        "{text}"
    );
    assert!(
        !text.contains(r#"idemproxy_escalations_total{provider="pay",route="sync"}"#),
        "{text}"
    );
}

#[tokio::test]
async fn an_operation_orphaned_by_a_crash_is_escalated_at_start() {
    let provider = FakeProvider::start(Behavior::echo().hold()).await;
    let routes = route("refund", "POST /v1/refunds", &["{header:x-workflow-id}"]);
    let mut proxy = Proxy::builder()
        .policy("pay", &provider.policy("pay", &routes))
        .start()
        .await;
    let url = proxy.url("/pay/v1/refunds");
    let pending = tokio::spawn(async move {
        send(
            Method::POST,
            &url,
            &[("x-workflow-id", "wf-crash")],
            "amount=1",
        )
        .await
    });
    provider.wait_for_requests(1).await;
    proxy.kill().await;
    let _ = pending.await;
    assert_eq!(warnings_about(&proxy, "idemproxy ops resolve"), 0);

    proxy.restart().await;
    let lines: Vec<String> = proxy
        .log_text()
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("idemproxy ops resolve"))
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains("pay/refund/wf-crash"), "{}", lines[0]);
    let metrics = send(Method::GET, &proxy.admin_url("/metrics"), &[], "")
        .await
        .expect("the admin API answers");
    assert!(
        metrics
            .text()
            .contains(r#"idemproxy_escalations_total{provider="pay",route="refund"} 1"#),
        "{}",
        metrics.text()
    );
}

/// An operation ID is the agent's text: in the warning it can neither start a line of its own
/// (a forged log line) nor turn the suggested command into another one when pasted into a
/// shell. Control characters are escaped; an ID with anything but plain characters is
/// quoted. Before 2026-12-03 both went into the line as they were.
#[tokio::test]
async fn an_operation_id_can_neither_forge_a_log_line_nor_a_command() {
    let provider = FakeProvider::start(Behavior::echo().drop_first_response(2)).await;
    let routes = route("refund", "POST /v1/refunds", &["{json:/id}"]);
    let proxy = Proxy::builder()
        .policy("pay", &provider.policy("pay", &routes))
        .start()
        .await;
    let json = [("content-type", "application/json")];
    let forged = r#"{"id":"j-1\n2026-12-03T00:00:00Z ERROR idemproxy: FORGED"}"#;
    let pasted = r#"{"id":"o; touch /tmp/idemproxy-pwned #"}"#;
    for body in [forged, pasted] {
        let lost = send(Method::POST, &proxy.url("/pay/v1/refunds"), &json, body)
            .await
            .expect("the proxy answers");
        assert_eq!(lost.status, StatusCode::ACCEPTED, "{}", lost.text());
    }
    let log = proxy.log_text();
    assert!(
        !log.lines().any(|l| l.starts_with("2026-12-03T00:00:00Z")),
        "a forged line:\n{log}"
    );
    assert!(log.contains(r"j-1\n2026"), "escaped in place:\n{log}");
    let command = log
        .lines()
        .find(|l| l.contains("WARN") && l.contains("touch"))
        .unwrap_or_else(|| panic!("no warning for the second ID:\n{log}"));
    assert!(
        command.contains("resolve 'pay/refund/o; touch /tmp/idemproxy-pwned #' --succeeded"),
        "{command}"
    );
}
