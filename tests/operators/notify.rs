//! Notifications (`[notify]`): one signed POST per event that needs or settles a person,
//! carrying no request value, header value or secret; a webhook that is down never slows
//! the proxy (the queue is bounded, drops are counted); the periodic summary; `check` and
//! `serve` on the table's mistakes.

use std::time::Duration;

use http::{Method, StatusCode};

use crate::common::webhook::{FakeWebhook, Hook, Received};
use crate::common::{Behavior, FakeProvider, Proxy, ProxyBuilder, Resp, route, send};

const SECRET_VAR: &str = "IDEMPROXY_NOTIFY_SECRET";
const SECRET: &str = "whsec_test_signing_secret";
const AUTH: &str = "Bearer sk_live_TOPSECRET42";
/// Request values that must never reach a notification.
const AMOUNT: &str = "987654321";
const NOTE: &str = "private-note-value";

/// `shop` with `create` (irreversible, no dedupe, no lookup: an unknown needs a person) and
/// `gated` (approval required), notifying `hook` with `extra` [notify] keys.
fn builder(provider: &FakeProvider, hook: &str, extra: &str) -> ProxyBuilder {
    let routes = format!(
        "{}{}approval = \"required\"\n",
        route("create", "POST /v1/things", &["{header:x-operation-id}"]),
        route("gated", "POST /v1/gated", &["{header:x-operation-id}"]),
    );
    Proxy::builder()
        .policy("shop", &provider.policy("shop", &routes))
        .config(&format!("[notify]\nwebhook = \"{hook}\"\n{extra}"))
}

async fn agent(proxy: &Proxy, path: &str, op: &str, amount: &str) -> Resp {
    let headers = [("x-operation-id", op), ("authorization", AUTH)];
    let body = format!("amount={amount}&note={NOTE}");
    send(Method::POST, &proxy.url(path), &headers, body)
        .await
        .expect("the proxy answers")
}

async fn admin_post(proxy: &Proxy, id: &str, action: &str, body: &str) {
    let url = proxy.admin_url(&format!("/ops/{}/{action}", id.replace('/', "%2F")));
    let headers = [("content-type", "application/json")];
    let resp = send(Method::POST, &url, &headers, body.to_string())
        .await
        .expect("admin answers");
    assert_eq!(resp.status, StatusCode::OK, "{action}: {}", resp.text());
}

/// Checks `Idem-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "t.body">`.
fn assert_signed(got: &Received) {
    let sig = got.header("idem-signature").expect("a signature");
    let (t, v1) = sig
        .strip_prefix("t=")
        .and_then(|rest| rest.split_once(",v1="))
        .unwrap_or_else(|| panic!("signature format: {sig}"));
    assert!(t.parse::<u64>().is_ok(), "{sig}");
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SECRET.as_bytes());
    let mut message = format!("{t}.").into_bytes();
    message.extend_from_slice(&got.body);
    let tag = hex::decode(v1).expect("hex");
    assert!(
        ring::hmac::verify(&key, &message, &tag).is_ok(),
        "bad signature {sig}"
    );
}

fn assert_no_request_values(got: &Received) {
    let mut all = String::from_utf8_lossy(&got.body).into_owned();
    for (name, value) in &got.headers {
        all.push_str(&format!(
            "\n{name}: {}",
            String::from_utf8_lossy(value.as_bytes())
        ));
    }
    for leak in [AMOUNT, NOTE, "TOPSECRET42", SECRET] {
        assert!(
            !all.contains(leak),
            "{leak} leaked into a notification:\n{all}"
        );
    }
}

#[tokio::test]
async fn each_event_that_needs_a_person_is_one_signed_notification_without_request_values() {
    let hook = FakeWebhook::start(Hook::Status(204)).await;
    let provider = FakeProvider::start(Behavior::echo().drop_first_response(1)).await;
    let secret = format!("secret_env = \"{SECRET_VAR}\"\n");
    let proxy = builder(&provider, &hook.url(), &secret)
        .env(SECRET_VAR, SECRET)
        .start()
        .await;

    let gated = agent(&proxy, "/shop/v1/gated", "g-1", AMOUNT).await;
    assert_eq!(gated.status, StatusCode::ACCEPTED, "{}", gated.text());
    let other = agent(&proxy, "/shop/v1/gated", "g-1", "5").await;
    assert_eq!(other.status, StatusCode::CONFLICT, "{}", other.text());
    let lost = agent(&proxy, "/shop/v1/things", "u-1", AMOUNT).await;
    assert_eq!(
        lost.header("idem-state"),
        Some("unknown"),
        "{}",
        lost.text()
    );
    admin_post(
        &proxy,
        "shop/gated/g-1",
        "approve",
        r#"{"reason":"looks right"}"#,
    )
    .await;
    // The operator follows the notice: its command, run as written (FILE: the provider's
    // object), settles the operation. Before 2026-12-03 it lacked --body-file and `ops`
    // refused it.
    let notice = hook.wait_for(3).await[2].json();
    assert_eq!(notice["event"], "needs_operator", "{notice}");
    run_the_suggested_resolve(&proxy, &notice).await;
    // A last one: the notifications arrive in order, so once it is here, every earlier one
    // is too, and none came twice.
    agent(&proxy, "/shop/v1/gated", "g-2", AMOUNT).await;

    let got = hook.wait_for(6).await;
    let seen: Vec<(String, String, String)> = got
        .iter()
        .map(|r| {
            let n = r.json();
            let text = |k: &str| n[k].as_str().unwrap_or_default().to_string();
            (text("event"), text("operation_id"), text("state"))
        })
        .collect();
    let want = [
        ("awaiting_approval", "shop/gated/g-1", "prepared"),
        ("parameter_mismatch", "shop/gated/g-1", "prepared"),
        ("needs_operator", "shop/create/u-1", "unknown"),
        ("approved", "shop/gated/g-1", "prepared"),
        ("resolved", "shop/create/u-1", "succeeded"),
        ("awaiting_approval", "shop/gated/g-2", "prepared"),
    ]
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()));
    assert_eq!(seen, want);
    for r in &got {
        assert_signed(r);
        assert_no_request_values(r);
        assert_eq!(r.header("content-type"), Some("application/json"));
        let n = r.json();
        let keys: Vec<&str> = n.as_object().unwrap().keys().map(String::as_str).collect();
        let members = [
            "event",
            "operation_id",
            "provider",
            "route",
            "state",
            "at",
            "detail",
        ];
        assert_eq!(keys, members, "{n}");
        assert_eq!(n["provider"], "shop");
        assert!(n["at"].as_str().is_some_and(|t| t.ends_with('Z')), "{n}");
    }
    let mismatch = got[1].json();
    assert!(
        mismatch["detail"].as_str().unwrap().contains("differing"),
        "{mismatch}"
    );
    // Counted once the webhook's answer is read, which may be just after it saw the last one.
    assert_eq!(wait_for_notifications(&proxy, "sent", 6).await, 6);
    assert!(
        !proxy.log_text().contains("T0K3N-in-path"),
        "the webhook's path may hold a token: never logged"
    );
}

/// Runs the `idemproxy ops resolve ... --succeeded ...` command a `needs_operator` notice
/// suggests, as an operator would: its words as given, `FILE` a file with the provider's
/// object, and the admin address of this proxy.
async fn run_the_suggested_resolve(proxy: &Proxy, notice: &serde_json::Value) {
    let detail = notice["detail"].as_str().expect("a detail");
    let command = detail
        .split('`')
        .find(|part| part.starts_with("idemproxy ops resolve") && part.contains("--succeeded"))
        .unwrap_or_else(|| panic!("no resolve command in {detail:?}"));
    let file = proxy.dir().path().join("refund.json");
    std::fs::write(&file, r#"{"id":"re_1","object":"refund"}"#).expect("body file");
    let file = file.to_str().expect("a UTF-8 path").to_string();
    let mut args: Vec<&str> = command
        .split_whitespace()
        .skip(1)
        .map(|word| if word == "FILE" { file.as_str() } else { word })
        .collect();
    let admin = proxy.admin_url("");
    args.extend(["--admin", &admin]);
    let (status, out, err) = proxy.run_cli(&args).await;
    assert!(status.success(), "{command}: {out}\n{err}");
}

/// The value of `idemproxy_notifications_total{outcome}`.
async fn notifications(proxy: &Proxy, outcome: &str) -> u64 {
    let text = send(Method::GET, &proxy.admin_url("/metrics"), &[], "")
        .await
        .expect("metrics")
        .text();
    let series = format!("idemproxy_notifications_total{{outcome=\"{outcome}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// Polls the metric until it reaches `n` (the notifier counts off the request path).
async fn wait_for_notifications(proxy: &Proxy, outcome: &str, n: u64) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let now = notifications(proxy, outcome).await;
        if now >= n || tokio::time::Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const REQUESTS: usize = 12;
const QUEUE: usize = 3;

#[tokio::test]
async fn a_hanging_webhook_never_slows_a_request_and_the_queue_drops_the_oldest() {
    let hook = FakeWebhook::start(Hook::Hang).await;
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = builder(&provider, &hook.url(), &format!("queue = {QUEUE}\n"))
        .start()
        .await;
    for i in 0..REQUESTS {
        let resp = agent(&proxy, "/shop/v1/gated", &format!("g-{i}"), "1").await;
        assert_eq!(resp.status, StatusCode::ACCEPTED, "{}", resp.text());
    }
    hook.wait_for(1).await;
    // One is being sent (and hangs), `QUEUE` wait; every other one was dropped.
    let least = (REQUESTS - QUEUE - 1) as u64;
    let dropped = wait_for_notifications(&proxy, "dropped", least).await;
    assert!(
        dropped >= least,
        "dropped {dropped}, at least {least} expected"
    );
    assert_eq!(notifications(&proxy, "sent").await, 0);
    let resp = agent(&proxy, "/shop/v1/things", "after", "1").await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
}

#[tokio::test]
async fn a_refusing_webhook_never_slows_a_request() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/hook", closed.local_addr().expect("addr"));
    drop(closed);
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = builder(&provider, &url, "").start().await;
    for i in 0..REQUESTS {
        let resp = agent(&proxy, "/shop/v1/gated", &format!("g-{i}"), "1").await;
        assert_eq!(resp.status, StatusCode::ACCEPTED, "{}", resp.text());
        let resp = agent(&proxy, "/shop/v1/things", &format!("t-{i}"), "1").await;
        assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    }
    assert_eq!(notifications(&proxy, "sent").await, 0);
}

#[tokio::test]
async fn the_summary_counts_what_still_waits() {
    let hook = FakeWebhook::start(Hook::Status(200)).await;
    let provider = FakeProvider::start(Behavior::echo().drop_first_response(1)).await;
    let proxy = builder(&provider, &hook.url(), "summary = \"1s\"\n")
        .start()
        .await;
    agent(&proxy, "/shop/v1/things", "u-1", "1").await;
    agent(&proxy, "/shop/v1/gated", "g-1", "1").await;
    let summary = loop {
        let got = hook.wait_for(hook.received().len() + 1).await;
        let summaries: Vec<_> = got
            .iter()
            .map(Received::json)
            .filter(|n| n["event"] == "summary")
            .filter(|n| n["waiting"]["awaiting_approval"]["count"] == 1)
            .collect();
        if let Some(last) = summaries.last() {
            break last.clone();
        }
    };
    assert_eq!(summary["waiting"]["unknown"]["count"], 1, "{summary}");
    assert_eq!(
        summary["waiting"]["needs_operator"]["count"], 1,
        "{summary}"
    );
    assert!(
        summary["waiting"]["unknown"]["oldest_age_seconds"].is_u64(),
        "{summary}"
    );
    assert_eq!(summary["operation_id"], serde_json::Value::Null);
    let detail = summary["detail"].as_str().unwrap_or_default();
    assert!(detail.starts_with("1 awaiting approval"), "{detail}");
}

#[tokio::test]
async fn check_warns_of_an_unset_secret_serve_refuses_it_and_a_bad_url_is_an_error() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let secret = format!("secret_env = \"{SECRET_VAR}\"\n");
    let dir = builder(&provider, "https://hooks.example.com/x", &secret).write();
    let config = dir.config_path();
    let config = config.to_str().expect("utf-8 path");
    let (status, _, err) = dir.run_cli(&["check", "-c", config]).await;
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning:") && err.contains("notify.secret_env"),
        "{err}"
    );
    let (status, log) = dir.start_expect_failure().await;
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(
        log.contains(&format!(
            "notify.secret_env: the environment variable {SECRET_VAR} is not set"
        )),
        "{log}"
    );

    let bad = builder(&provider, "ftp://hooks.example.com/x", "").write();
    let config = bad.config_path();
    let (status, _, err) = bad
        .run_cli(&["check", "-c", config.to_str().unwrap()])
        .await;
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("notify.webhook: the scheme `ftp` is not supported"),
        "{err}"
    );
    let typo = builder(&provider, "https://h/x", "secret = \"x\"\n").write();
    let config = typo.config_path();
    let (status, _, err) = typo
        .run_cli(&["check", "-c", config.to_str().unwrap()])
        .await;
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("notify"), "unknown key: {err}");
}
