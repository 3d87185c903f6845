//! Reloading proxy.toml and the policies while serving (docs/reference.md, "Reload"): SIGHUP,
//! `POST /admin/reload` and `idemproxy reload` apply a configuration that passes `check` to new
//! requests, refuse one that does not (or that changes what only a restart can) and keep the
//! running one; operations already recorded keep their stored key. Every signal that stops the
//! process leaves a log line.

use http::{Method, StatusCode};
use serde_json::Value;

use crate::common::guarded::{
    FORM, OP_HEADER, PATH, PROVIDER, assert_op_headers, op_id, opaque_key, refund, refund_route,
};
use crate::common::raw::log_line;
use crate::common::{Behavior, FakeProvider, Proxy, Resp, problem, send};

const TOKEN: &str = "t0k-reload";

/// The `pay` policy for `provider` with these `[provider]` keys and `routes`.
fn pay(provider: &FakeProvider, keys: &str, routes: &str) -> String {
    provider.policy(PROVIDER, &format!("{keys}\n{routes}"))
}

/// Rewrites `policies/pay.toml` of the running proxy.
fn edit_policy(proxy: &Proxy, text: &str) {
    std::fs::write(proxy.dir().path().join("policies/pay.toml"), text).expect("edit the policy");
}

/// `POST /admin/reload` as an operator sends it (JSON, the token when given).
async fn reload(proxy: &Proxy, token: Option<&str>) -> Resp {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("content-type", "application/json")];
    if let Some(b) = &bearer {
        headers.push(("authorization", b.as_str()));
    }
    send(
        Method::POST,
        &proxy.admin_url("/admin/reload"),
        &headers,
        "{}",
    )
    .await
    .expect("admin answers")
}

/// Sends SIGHUP and waits for its `n`th reload line (applied or refused) in the log.
async fn hangup(proxy: &Proxy, n: usize) -> String {
    proxy.signal("HUP");
    let needle = "reload #";
    let want = format!("{needle}{n} ");
    log_line(proxy, &want).await
}

/// Two POSTs on the guarded path with one operation ID: how many reached the provider.
async fn twice(proxy: &Proxy, provider: &FakeProvider, rendered: &str) -> (Resp, Resp, usize) {
    let before = provider.requests().len();
    let first = refund(proxy, rendered, "amount=5").await;
    let second = refund(proxy, rendered, "amount=5").await;
    (first, second, provider.requests().len() - before)
}

#[tokio::test]
async fn sighup_with_no_change_keeps_serving_and_logs_the_reload() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut proxy = Proxy::builder()
        .policy(PROVIDER, &pay(&provider, "", &refund_route("")))
        .start()
        .await;
    let before = refund(&proxy, "wf-1", "amount=5").await;
    assert_eq!(before.status, StatusCode::OK, "{}", before.text());

    let log = hangup(&proxy, 1).await;
    assert!(log.contains("nothing changed"), "{log}");
    assert!(proxy.running(), "SIGHUP must not stop the proxy:\n{log}");
    let replay = refund(&proxy, "wf-1", "amount=5").await;
    assert_op_headers(&replay, &op_id("wf-1"), "succeeded", true);
    assert_eq!(provider.effects(), 1);

    let status = proxy.terminate().await;
    assert!(status.success(), "exit status {status:?}");
    let log = proxy.log_text();
    assert!(log.contains("SIGTERM"), "a stop says which signal:\n{log}");
}

#[tokio::test]
async fn a_reload_adds_a_route_that_then_guards() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = Proxy::builder()
        .policy(PROVIDER, &pay(&provider, "", ""))
        .start()
        .await;
    // No route yet: the path passes unguarded, each request reaches the provider.
    let (first, second, sent) = twice(&proxy, &provider, "wf-2").await;
    assert_eq!(sent, 2, "{} / {}", first.text(), second.text());
    assert_eq!(first.header("idem-operation-id"), None);

    edit_policy(&proxy, &pay(&provider, "", &refund_route("")));
    let resp = reload(&proxy, None).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    let body: Value = resp.json();
    assert_eq!(body["outcome"], "applied", "{body}");
    assert_eq!(body["providers"]["changed"], serde_json::json!([PROVIDER]));
    assert_eq!(body["providers"]["added"], serde_json::json!([]));

    let (first, second, sent) = twice(&proxy, &provider, "wf-2").await;
    assert_eq!(sent, 1, "the new route guards: {}", second.text());
    assert_op_headers(&first, &op_id("wf-2"), "succeeded", false);
    assert_op_headers(&second, &op_id("wf-2"), "succeeded", true);
    let log = log_line(&proxy, "reload #1 ").await;
    assert!(log.contains("admin API"), "{log}");
}

#[tokio::test]
async fn a_broken_edit_is_refused_and_the_old_route_still_works() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = Proxy::builder()
        .policy(PROVIDER, &pay(&provider, "", &refund_route("")))
        .start()
        .await;
    edit_policy(
        &proxy,
        &pay(&provider, "dedupe = \"sometimes\"", &refund_route("")),
    );

    let log = hangup(&proxy, 1).await;
    assert!(log.contains("refused"), "{log}");
    assert!(log.contains("policies/pay.toml: provider.dedupe"), "{log}");

    let resp = reload(&proxy, None).await;
    let body = problem(&resp, StatusCode::UNPROCESSABLE_ENTITY, "reload-refused");
    let errors = body["errors"].as_array().expect("errors").clone();
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().unwrap().contains("dedupe")),
        "{body}"
    );

    let (status, stdout, stderr) = proxy
        .run_cli(&["reload", "--admin", &proxy.admin_url("")])
        .await;
    assert!(
        !status.success(),
        "a refusal is a failure: {stdout}{stderr}"
    );
    assert!(
        format!("{stdout}{stderr}").contains("dedupe"),
        "{stdout}{stderr}"
    );

    let (first, second, sent) = twice(&proxy, &provider, "wf-3").await;
    assert_eq!(sent, 1, "the running route still guards");
    assert_op_headers(&first, &op_id("wf-3"), "succeeded", false);
    assert_op_headers(&second, &op_id("wf-3"), "succeeded", true);
}

#[tokio::test]
async fn a_listener_or_ledger_change_is_refused_with_restart_to_apply() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = Proxy::builder()
        .policy(PROVIDER, &pay(&provider, "", &refund_route("")))
        .start()
        .await;
    let toml = proxy.dir().config_path();
    let text = std::fs::read_to_string(&toml).expect("proxy.toml");
    let moved = text.replacen("listen = \"127.0.0.1:0\"", "listen = \"127.0.0.1:1\"", 1);
    assert_ne!(moved, text);
    std::fs::write(&toml, moved).expect("edit proxy.toml");

    let resp = reload(&proxy, None).await;
    let body = problem(&resp, StatusCode::UNPROCESSABLE_ENTITY, "reload-refused");
    let errors = body["errors"].to_string();
    assert!(
        errors.contains("listen") && errors.contains("restart to apply"),
        "{body}"
    );
    assert!(
        !errors.contains("admin_listen"),
        "only what changed is named: {body}"
    );

    let ok = refund(&proxy, "wf-4", "amount=5").await;
    assert_eq!(
        ok.status,
        StatusCode::OK,
        "the proxy still serves where it was"
    );

    let elsewhere: Vec<String> = text
        .lines()
        .map(|l| match l.starts_with("ledger") {
            true => "ledger = \"elsewhere.redb\"".to_string(),
            false => l.to_string(),
        })
        .collect();
    std::fs::write(&toml, elsewhere.join("\n")).expect("edit proxy.toml");
    let resp = reload(&proxy, None).await;
    let body = problem(&resp, StatusCode::UNPROCESSABLE_ENTITY, "reload-refused");
    let errors = body["errors"].to_string();
    assert!(errors.contains("ledger: restart to apply"), "{body}");
    let replay = refund(&proxy, "wf-4", "amount=5").await;
    assert_op_headers(&replay, &op_id("wf-4"), "succeeded", true);
}

/// As for a restart (tests/guarded/resend.rs): an operation sent before the policy changed its
/// key format and header is re-sent, after a reload, with the key and header it was first
/// sent with; a new operation follows the new policy.
#[tokio::test]
async fn an_operation_recorded_before_a_reload_keeps_its_key() {
    let behavior = Behavior::echo()
        .dedupe_on_header("idempotency-key")
        .drop_first_response(1);
    let provider = FakeProvider::start(behavior).await;
    let proxy = Proxy::builder()
        .policy(
            PROVIDER,
            &pay(&provider, "dedupe = \"key\"", &refund_route("")),
        )
        .start()
        .await;
    let id = op_id("wf-k");
    let lost = refund(&proxy, "wf-k", "amount=500").await;
    problem(&lost, StatusCode::ACCEPTED, "outcome-unknown");

    let keys = "dedupe = \"key\"\nkey_format = \"plain\"\nkey_header = \"X-Other-Key\"";
    edit_policy(&proxy, &pay(&provider, keys, &refund_route("")));
    let resp = reload(&proxy, None).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());

    let retry = refund(&proxy, "wf-k", "amount=500").await;
    assert_eq!(retry.status, StatusCode::OK, "{}", retry.text());
    assert_op_headers(&retry, &id, "succeeded", true);
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].header("idempotency-key"),
        Some(opaque_key(&id).as_str()),
        "the stored key, in the stored header"
    );
    assert_eq!(requests[1].header("x-other-key"), None);
    assert_eq!(requests[1].body, requests[0].body);

    let fresh = refund(&proxy, "wf-k2", "amount=500").await;
    assert_eq!(fresh.status, StatusCode::OK);
    let last = provider.requests().pop().expect("sent");
    assert_eq!(last.header("x-other-key"), Some(op_id("wf-k2").as_str()));
}

/// A request in flight when the configuration changes finishes on the one it started with
/// (its route removed meanwhile), and is recorded; the next request follows the new one.
#[tokio::test]
async fn a_request_in_flight_finishes_on_the_configuration_it_started_with() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done").hold()).await;
    let proxy = Proxy::builder()
        .policy(PROVIDER, &pay(&provider, "", &refund_route("")))
        .start()
        .await;
    let url = proxy.url(PATH);
    let in_flight = tokio::spawn(async move {
        send(Method::POST, &url, &[(OP_HEADER, "wf-5"), FORM], "amount=5").await
    });
    provider.wait_for_requests(1).await;

    edit_policy(&proxy, &pay(&provider, "", ""));
    let resp = reload(&proxy, None).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    provider.release();
    let done = in_flight.await.expect("task").expect("answered");
    assert_op_headers(&done, &op_id("wf-5"), "succeeded", false);
    assert_eq!(proxy.op_state(&op_id("wf-5")).await, "succeeded");

    let after = refund(&proxy, "wf-5", "amount=5").await;
    assert_eq!(after.header("idem-operation-id"), None, "unguarded now");
    assert_eq!(provider.requests().len(), 2);
}

#[tokio::test]
async fn reload_follows_the_admin_rules_and_is_counted() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = Proxy::builder()
        .policy(PROVIDER, &pay(&provider, "", &refund_route("")))
        .env("IDEMPROXY_ADMIN_TOKEN", TOKEN)
        .start()
        .await;
    problem(
        &reload(&proxy, None).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    let url = proxy.admin_url("/admin/reload");
    let bearer = format!("Bearer {TOKEN}");
    let plain = send(Method::POST, &url, &[("authorization", &bearer)], "{}")
        .await
        .expect("admin answers");
    problem(
        &plain,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported-media-type",
    );
    let foreign = [
        ("authorization", bearer.as_str()),
        ("content-type", "application/json"),
        ("origin", "http://evil.example"),
    ];
    let resp = send(Method::POST, &url, &foreign, "{}")
        .await
        .expect("answers");
    problem(&resp, StatusCode::FORBIDDEN, "foreign-origin");
    let get = send(Method::GET, &url, &[("authorization", &bearer)], "")
        .await
        .expect("answers");
    problem(&get, StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed");

    let ok = reload(&proxy, Some(TOKEN)).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text());
    assert_eq!(ok.json()["outcome"], "unchanged");
    let (status, stdout, stderr) = proxy
        .run_cli(&["reload", "--admin", &proxy.admin_url("")])
        .await;
    assert!(status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("unchanged"), "{stdout}");

    let metrics = send(
        Method::GET,
        &proxy.admin_url("/metrics"),
        &[("authorization", &bearer)],
        "",
    )
    .await
    .expect("metrics");
    let text = metrics.text();
    assert!(
        text.contains("idemproxy_reloads_total{outcome=\"unchanged\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("idemproxy_reloads_total{outcome=\"refused\"} 0"),
        "{text}"
    );
}

#[tokio::test]
async fn sigint_stops_gracefully_with_a_log_line() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let mut proxy = Proxy::builder()
        .policy(PROVIDER, &pay(&provider, "", &refund_route("")))
        .start()
        .await;
    proxy.signal("INT");
    let log = log_line(&proxy, "SIGINT").await;
    assert!(log.contains("stopping"), "{log}");
    let status = proxy.exited().await;
    assert!(status.success(), "exit status {status:?}");
}

/// With a PostgreSQL ledger, a provider timeout longer than the longest one the proxy started
/// with is "restart to apply" (the orphan sweep counts on it); a shorter one is taken.
#[tokio::test]
async fn with_a_postgresql_ledger_a_longer_timeout_needs_a_restart() {
    let database = crate::common::Database::create();
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = Proxy::builder()
        .ledger_url(&database.url())
        .env(
            "IDEMPROXY_SECRET",
            &crate::common::database::random_secret(),
        )
        .policy(
            PROVIDER,
            &pay(&provider, "timeout = \"5s\"", &refund_route("")),
        )
        .start()
        .await;

    edit_policy(
        &proxy,
        &pay(&provider, "timeout = \"50s\"", &refund_route("")),
    );
    let resp = reload(&proxy, None).await;
    let body = problem(&resp, StatusCode::UNPROCESSABLE_ENTITY, "reload-refused");
    let errors = body["errors"].to_string();
    assert!(
        errors.contains("provider.timeout") && errors.contains("restart to apply"),
        "{body}"
    );

    edit_policy(
        &proxy,
        &pay(&provider, "timeout = \"2s\"", &refund_route("")),
    );
    let resp = reload(&proxy, None).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    assert_eq!(
        resp.json()["providers"]["changed"],
        serde_json::json!([PROVIDER])
    );
}
