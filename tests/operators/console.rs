//! The operator's console (`GET /ui`) in a real browser: headless Chromium (Debian's
//! `/usr/bin/chromium`) driven by Playwright from `tests/console/test_console.py`, run with
//! the pinned `target/python-env` that `.ci/test` creates.
//!
//! The proxy runs with an admin token, so the page must ask for it. An `unknown` operation and
//! one awaiting approval are made through the proxy; the script finds both, approves one and
//! resolves the other by clicking (confirmations included), and writes screenshots to
//! `target/test-artifacts/`. This file then checks through the admin API and the agent's next
//! request that both decisions took effect.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::json;

use crate::common::process::run_to_end;
use crate::common::{Behavior, FakeProvider, Proxy, Resp, problem, route, send};

const TOKEN: &str = "console-t0k3n";
const CHROMIUM: &str = "/usr/bin/chromium";
/// How long the whole browser session may take before the test fails (it hangs otherwise).
const BROWSER_TIMEOUT: Duration = Duration::from_secs(240);
const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");
const PAYOUT: &str = "amount=1000&destination=acct_9&description=%3Ci%3EWeekly%3C%2Fi%3E&metadata[trace_id]=t-1&card[cvc]=123";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pinned Python with Playwright, and the system Chromium; a clear failure without them.
fn browser_tools() -> PathBuf {
    let python = repo().join("target/python-env/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `bash .ci/test` (or `bash .ci/python-env`) to create the pinned \
         Python environment with Playwright",
        python.display()
    );
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: install Debian's Chromium with `apt-get install chromium` \
         (the console test never downloads a browser)"
    );
    python
}

async fn start(provider: &FakeProvider) -> Proxy {
    let create = route("create", "POST /v1/things", &["{header:x-operation-id}"]);
    let payout = route("payout", "POST /v1/payouts", &["{header:x-operation-id}"]);
    let approval = "approval = \"required\"\nfingerprint_ignore = [\"metadata[trace_id]\"]\n\
                    approval_show = [\"amount\", \"destination\", \"description\", \
                    \"metadata[trace_id]\", \"card[cvc]\"]\n";
    Proxy::builder()
        .policy(
            "shop",
            &provider.policy("shop", &format!("{create}{payout}{approval}")),
        )
        .env("IDEMPROXY_ADMIN_TOKEN", TOKEN)
        .start()
        .await
}

async fn agent(proxy: &Proxy, path: &str, op: &str, body: &str) -> Resp {
    let headers = [("x-operation-id", op), FORM];
    send(Method::POST, &proxy.url(path), &headers, body.to_string())
        .await
        .expect("proxy answers")
}

async fn show(proxy: &Proxy, id: &str) -> serde_json::Value {
    let segment = percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC);
    let url = proxy.admin_url(&format!("/ops/{segment}"));
    let auth = format!("Bearer {TOKEN}");
    let resp = send(Method::GET, &url, &[("authorization", &auth)], "")
        .await
        .expect("admin answers");
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    resp.json()
}

/// Runs the browser script to its end; panics with its output unless it passed.
async fn drive_browser(python: &Path, args: serde_json::Value) -> String {
    let script = repo().join("tests/console/test_console.py");
    let mut command = Command::new(python);
    command
        .arg(script)
        .arg(args.to_string())
        .stdin(Stdio::null());
    let output = run_to_end(command, BROWSER_TIMEOUT, "the browser script").await;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "the browser script failed:\n{text}"
    );
    text
}

#[tokio::test]
async fn an_operator_approves_and_resolves_by_clicking_with_the_token_prompt() {
    let python = browser_tools();
    let provider = FakeProvider::start(Behavior::fixed(200, "made")).await;
    let proxy = start(&provider).await;

    // An unknown outcome: the provider makes the thing and its answer is lost.
    provider.set_behavior(Behavior::fixed(200, "made").drop_first_response(1));
    let op = "op-<em>1</em>";
    let lost = agent(&proxy, "/shop/v1/things", op, "amount=5").await;
    assert_eq!(
        lost.header("idem-state"),
        Some("unknown"),
        "{}",
        lost.text()
    );
    let unknown = format!("shop/create/{op}");
    // One awaiting approval, with a value that is markup and fields to mask.
    provider.set_behavior(Behavior::json(200, json!({"id": "po_1"})));
    let held = agent(&proxy, "/shop/v1/payouts", "payout-7", PAYOUT).await;
    problem(&held, StatusCode::ACCEPTED, "awaiting-approval");
    let prepared = "shop/payout/payout-7".to_string();
    assert_eq!(provider.request_count(), 1);

    let artifacts = repo().join("target/test-artifacts");
    let resolved_body = r#"{"id":"th_1","resolved":true}"#;
    let args = json!({
        "admin": proxy.admin_url(""),
        "token": TOKEN,
        "unknown": unknown,
        "prepared": prepared,
        "resolved_body": resolved_body,
        "artifacts": artifacts,
    });
    let output = drive_browser(&python, args).await;
    for shot in ["console-list.png", "console-operation.png"] {
        assert!(artifacts.join(shot).exists(), "{shot} missing:\n{output}");
    }

    // The approval took effect: still prepared, approved, nothing sent until the agent asks.
    let approved = show(&proxy, &prepared).await;
    assert_eq!(
        (&approved["state"], &approved["approval"]),
        (&json!("prepared"), &json!("approved"))
    );
    assert_eq!(provider.request_count(), 1, "approving sends nothing");
    let sent = agent(&proxy, "/shop/v1/payouts", "payout-7", PAYOUT).await;
    assert_eq!(sent.status, StatusCode::OK, "{}", sent.text());
    assert_eq!(sent.json(), json!({"id": "po_1"}));
    let requests = provider.requests();
    assert_eq!(requests.len(), 2, "the approved payout was sent once");
    assert_eq!(
        requests[1].body,
        PAYOUT.as_bytes(),
        "the request approved, as sent"
    );

    // The resolution took effect: the typed answer is what the agent now gets, nothing sent.
    let resolved = show(&proxy, &unknown).await;
    assert_eq!(resolved["state"], "succeeded", "{resolved}");
    assert_eq!(resolved["response"]["status"], 200);
    let replay = agent(&proxy, "/shop/v1/things", op, "amount=5").await;
    assert_eq!(replay.status, StatusCode::OK);
    assert_eq!(replay.text(), resolved_body);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.header("content-type"), Some("application/json"));
    assert_eq!(
        provider.request_count(),
        2,
        "a resolved operation is never sent again"
    );
}

/// The console's second session: "Loading…" until its first fetch answers; every time in UTC
/// (ISO 8601) in a browser whose zone is New York; an unknown operation's `operator_show`
/// fields, held retries and `ops resolve` commands; an empty `200` refused in the resolve
/// form with the API's words until the "empty body" box is ticked; then "Correct this
/// resolution", confirmed, replaces the empty answer. Before 2026-12-04 the form stored the
/// empty answer for good, times were half local, and the page was blank until it loaded.
#[tokio::test]
async fn an_operator_corrects_a_resolution_by_clicking() {
    let python = browser_tools();
    let provider = FakeProvider::start(Behavior::fixed(200, "made")).await;
    let create = route("create", "POST /v1/things", &["{header:x-operation-id}"]);
    let fields = "operator_show = [\"amount\", \"card[cvc]\"]\n";
    let proxy = Proxy::builder()
        .policy(
            "shop",
            &provider.policy("shop", &format!("{create}{fields}")),
        )
        .env("IDEMPROXY_ADMIN_TOKEN", TOKEN)
        .start()
        .await;
    provider.set_behavior(Behavior::fixed(200, "made").drop_first_response(1));
    let lost = agent(&proxy, "/shop/v1/things", "op-9", "amount=5&card[cvc]=123").await;
    assert_eq!(
        lost.header("idem-state"),
        Some("unknown"),
        "{}",
        lost.text()
    );
    let held = agent(&proxy, "/shop/v1/things", "op-9", "amount=5&card[cvc]=123").await;
    problem(&held, StatusCode::ACCEPTED, "outcome-unknown");
    let unknown = "shop/create/op-9".to_string();

    let corrected_body = r#"{"id":"th_9","corrected":true}"#;
    let args = json!({
        "scenario": "correct",
        "admin": proxy.admin_url(""),
        "token": TOKEN,
        "unknown": unknown,
        "corrected_body": corrected_body,
        "artifacts": repo().join("target/test-artifacts"),
    });
    drive_browser(&python, args).await;

    let op = show(&proxy, &unknown).await;
    let kinds: Vec<&str> = op["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["kind"].as_str())
        .filter(|k| k.starts_with("operator."))
        .collect();
    assert_eq!(kinds, ["operator.resolved", "operator.re_resolved"], "{op}");
    let replay = agent(&proxy, "/shop/v1/things", "op-9", "amount=5&card[cvc]=123").await;
    assert_eq!(
        (replay.status, replay.text()),
        (StatusCode::OK, corrected_body.to_owned())
    );
    assert_eq!(provider.request_count(), 1, "nothing was sent again");
}
