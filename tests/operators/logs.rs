//! Request logs: one line per request naming provider, route, the route's path, the
//! operation ID, the outcome, status and duration, as text
//! or (`--log-format json`) one JSON object per line; never a header value or a body, even
//! at the most verbose filter.

use http::{Method, StatusCode};

use crate::common::{Behavior, FakeProvider, Proxy, route, send};

const SECRET_HEADER: &str = "Bearer sk_test_secret123";
const SECRET_BODY: &str = "secret_body_value";

/// A provider with a guarded route and `extra` set on the proxy (bin args, env).
async fn start(json: bool) -> (FakeProvider, Proxy) {
    let provider = FakeProvider::start(Behavior::fixed(200, "done")).await;
    let refund = route(
        "create_refund",
        "POST /v1/refunds",
        &["{header:x-operation-id}"],
    );
    let mut builder = Proxy::builder()
        .env("IDEMPROXY_LOG", "trace")
        .policy("acme", &provider.policy("acme", &refund));
    if json {
        builder = builder.bin(env!("CARGO_BIN_EXE_idemproxy"), &["--log-format", "json"]);
    }
    (provider, builder.start().await)
}

/// One guarded and one unguarded request, both carrying the secrets.
async fn send_secrets(proxy: &Proxy) {
    let auth = [("authorization", SECRET_HEADER), ("x-operation-id", "op-1")];
    let guarded = send(
        Method::POST,
        &proxy.url("/acme/v1/refunds"),
        &auth,
        SECRET_BODY,
    )
    .await
    .expect("answer");
    assert_eq!(guarded.status, StatusCode::OK, "{}", guarded.text());
    let plain = send(
        Method::PUT,
        &proxy.url("/acme/v1/other"),
        &auth[..1],
        SECRET_BODY,
    )
    .await
    .expect("answer");
    assert_eq!(plain.status, StatusCode::OK, "{}", plain.text());
}

fn assert_no_secrets(log: &str) {
    assert!(
        !log.contains("sk_test_secret123"),
        "the log holds a header value:\n{log}"
    );
    assert!(
        !log.contains(SECRET_BODY),
        "the log holds a request body:\n{log}"
    );
}

#[tokio::test]
async fn text_logs_one_line_per_request_without_secrets() {
    let (_provider, proxy) = start(false).await;
    send_secrets(&proxy).await;
    let log = proxy.log_text();
    assert_no_secrets(&log);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(" request ")).collect();
    assert_eq!(lines.len(), 2, "one line per request:\n{log}");
    let guarded = ["acme", "create_refund", "status=200", "ms="];
    assert!(guarded.iter().all(|p| lines[0].contains(p)), "{}", lines[0]);
    let plain = ["acme", "status=200", "ms="];
    assert!(plain.iter().all(|p| lines[1].contains(p)), "{}", lines[1]);
}

#[tokio::test]
async fn json_logs_parse_line_by_line_and_name_the_request() {
    let (_provider, proxy) = start(true).await;
    send_secrets(&proxy).await;
    let log = proxy.log_text();
    assert_no_secrets(&log);
    let events: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let requests: Vec<_> = events
        .iter()
        .filter(|e| e["message"] == "request")
        .collect();
    assert_eq!(requests.len(), 2, "one line per request:\n{log}");
    assert_eq!(requests[0]["provider"], "acme");
    assert_eq!(requests[0]["route"], "create_refund");
    for event in &requests {
        assert_eq!(event["status"], 200, "{event}");
        assert!(event["ms"].is_u64(), "a duration in ms: {event}");
    }
    // The guarded line names the operation, the route's path and the outcome, so it can be
    // matched with the operation the admin API (and `ops show`) shows.
    let guarded = requests[0];
    assert_eq!(guarded["path"], "/v1/refunds", "{guarded}");
    assert_eq!(guarded["outcome"], "forwarded", "{guarded}");
    let id = guarded["operation"].as_str().expect("an operation ID");
    assert_eq!(id, "acme/create_refund/op-1");
    let admin = proxy.admin_url(&format!("/ops/{}", id.replace('/', "%2F")));
    let op = send(Method::GET, &admin, &[], "").await.expect("admin");
    assert_eq!(op.json()["operation_id"], id);
    assert_eq!(requests[1]["operation"], "-", "unguarded: {}", requests[1]);
    assert_eq!(requests[1]["path"], "-", "unmatched: {}", requests[1]);
    assert_eq!(requests[1]["outcome"], "passthrough");
}

/// Logs are never worth an answer: with stderr unwritable (a full disk, `/dev/full`) the
/// proxy keeps serving, and an attempt whose outcome is unknown is recorded and answered as
/// such, every warning about it lost. Before 2026-12-03 the logging library reported its own
/// write failure with a print that panicked: the process died right after its ready line,
/// and a task that logged mid-attempt died before its answer.
#[tokio::test]
async fn an_unwritable_stderr_loses_log_lines_and_nothing_else() {
    let provider = FakeProvider::start(Behavior::echo().drop_first_response(1)).await;
    let refund = route(
        "create_refund",
        "POST /v1/refunds",
        &["{header:x-operation-id}"],
    );
    let script = "exec \"$0\" \"$@\" 2>/dev/full";
    let proxy = Proxy::builder()
        .env("IDEMPROXY_LOG", "debug")
        .policy("acme", &provider.policy("acme", &refund))
        .bin("sh", &["-c", script, env!("CARGO_BIN_EXE_idemproxy")])
        .start()
        .await;
    let post = |op: &'static str| {
        let url = proxy.url("/acme/v1/refunds");
        async move {
            send(
                Method::POST,
                &url,
                &[("x-operation-id", op)],
                "amount=1".to_string(),
            )
            .await
            .expect("the proxy still answers")
        }
    };
    let lost = post("op-lost").await;
    assert_eq!(lost.status, StatusCode::ACCEPTED, "{}", lost.text());
    assert_eq!(lost.header("idem-state"), Some("unknown"));
    let made = post("op-made").await;
    assert_eq!(made.status, StatusCode::OK, "{}", made.text());
    assert_eq!(
        proxy.op_state("acme/create_refund/op-lost").await,
        "unknown"
    );
    assert_eq!(provider.request_count(), 2);
}
