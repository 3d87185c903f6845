//! `idemproxy check` and `serve` on good and broken configurations: `check` prints the
//! routes table and exits 0 on the shipped config; a broken config makes both commands exit
//! non-zero with the file, the key and the fix on stderr, and `serve` never starts.

use std::path::PathBuf;

use crate::common::files::route;
use crate::common::{self, Proxy};

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn broken(name: &str) -> String {
    repo(&format!("fixtures/config/broken/{name}/proxy.toml"))
        .to_string_lossy()
        .into_owned()
}

/// A line of `text` holding every one of `parts`.
fn assert_line(text: &str, parts: &[&str]) {
    let found = text.lines().any(|l| parts.iter().all(|p| l.contains(p)));
    assert!(found, "no line with {parts:?} in:\n{text}");
}

#[tokio::test]
async fn check_on_the_shipped_config_prints_the_routes_table() {
    let dir = Proxy::builder().write();
    let config = repo("proxy.toml").to_string_lossy().into_owned();
    let (status, stdout, stderr) = dir.run_cli(&["check", "-c", &config]).await;
    assert!(status.success(), "{status:?}\n{stderr}");
    assert_line(&stdout, &["stripe", "/stripe", "https://api.stripe.com"]);
    assert_line(
        &stdout,
        &["create_refund", "POST /v1/refunds", "irreversible"],
    );
    assert_line(
        &stdout,
        &["retrieve_refund", "GET /v1/refunds/{id}", "read_only"],
    );
    assert_line(&stdout, &["proxy.toml", "ok"]);
}

#[tokio::test]
async fn check_on_a_broken_policy_names_file_key_and_fix() {
    let dir = Proxy::builder().write();
    let config = broken("unknown_template_source");
    let (status, stdout, stderr) = dir.run_cli(&["check", "-c", &config]).await;
    assert!(!status.success(), "{status:?}\n{stdout}");
    let parts = [
        "policies/stripe.toml",
        "create_refund",
        "operation_id[1]",
        "hedaer",
        "expected header",
    ];
    assert_line(&stderr, &parts);
    assert!(
        !stdout.contains("ok"),
        "a broken config is not ok:\n{stdout}"
    );
}

#[tokio::test]
async fn check_on_a_broken_proxy_toml_names_file_key_and_fix() {
    let dir = Proxy::builder().write();
    let config = broken("unknown_key_proxy");
    let (status, _, stderr) = dir.run_cli(&["check", "-c", &config]).await;
    assert!(!status.success());
    assert_line(
        &stderr,
        &[
            "proxy.toml",
            "limits.max_body",
            "unknown key",
            "max_request_body",
        ],
    );
}

#[tokio::test]
async fn serve_with_a_broken_config_refuses_to_start_with_the_same_message() {
    let bad_route = route(
        "create_refund",
        "POST /v1/refunds",
        &["{hedaer:x-operation-id}"],
    );
    let policy = common::policy("stripe", "https://api.stripe.com", &bad_route);
    let dir = Proxy::builder().policy("stripe", &policy).write();
    let config = dir.config_path().to_string_lossy().into_owned();
    let (check_status, _, check_stderr) = dir.run_cli(&["check", "-c", &config]).await;
    let (status, stderr) = dir.start_expect_failure().await;
    assert!(!status.success(), "{status:?}");
    assert!(!check_status.success());
    let parts = [
        "policies/stripe.toml",
        "operation_id[0]",
        "hedaer",
        "expected header",
    ];
    assert_line(&stderr, &parts);
    assert_line(&check_stderr, &parts);
}

#[tokio::test]
async fn serve_on_a_port_in_use_exits_non_zero_naming_the_key() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let policy = common::policy("p", "https://api.example.com", "");
    let config =
        format!("listen = \"{addr}\"\nadmin_listen = \"127.0.0.1:0\"\nledger = \"ledger.redb\"\n");
    let (status, stderr) = Proxy::builder()
        .raw_config(&config)
        .policy("p", &policy)
        .start_expect_failure()
        .await;
    assert!(!status.success(), "{status:?}");
    assert_line(&stderr, &[&addr.to_string(), "listen"]);
}

/// `check` (the real binary) refuses the settings that would quietly weaken a guard: each
/// fixture's error line names the file, the key and the fix.
#[tokio::test]
async fn check_refuses_settings_that_weaken_a_guard() {
    let dir = Proxy::builder().write();
    let cases: [(&str, &[&str]); 6] = [
        (
            "approval_skipped",
            &[
                "policies/shop.toml",
                "route \"refund\": on_missing_id",
                "on_missing_id = \"reject\"",
            ],
        ),
        (
            "credential_in_identity",
            &[
                "policies/shop.toml",
                "operation_id[1]",
                "{header:authorization}",
                "credential",
            ],
        ),
        (
            "credential_in_identity",
            &[
                "policies/shop.toml",
                "fingerprint_headers[1]",
                "proxy-authorization",
            ],
        ),
        (
            "key_header_framing",
            &[
                "policies/a_shop.toml",
                "provider.key_header",
                "content-length",
                "Idempotency-Key",
            ],
        ),
        (
            "lookup_request_part",
            &[
                "policies/shop.toml",
                "route \"refund\": reconcile.lookup",
                "{header:x-workflow-id}",
                "{key}",
            ],
        ),
        (
            "zero_final_after",
            &[
                "policies/shop.toml",
                "reconcile.not_found_final_after",
                "at least 1ms",
            ],
        ),
    ];
    for (fixture, parts) in cases {
        let config = broken(fixture);
        let (status, stdout, stderr) = dir.run_cli(&["check", "-c", &config]).await;
        assert!(!status.success(), "{fixture}: {status:?}\n{stdout}");
        assert_line(&stderr, parts);
    }
}

/// A `settle_headers` value that does not parse is refused without being echoed: a literal
/// value there is a credential, and `check`'s output lands in CI logs. Before 2026-12-03 each
/// error quoted the whole value.
#[tokio::test]
async fn a_settle_headers_value_that_does_not_parse_is_refused_without_echoing_it() {
    let dir = Proxy::builder().write();
    let config = broken("settle_literal");
    let (status, _, stderr) = dir.run_cli(&["check", "-c", &config]).await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_line(&stderr, &["settle_headers.authorization", "`$`"]);
    assert_line(
        &stderr,
        &["settle_headers.x-one", "environment variable name"],
    );
    assert_line(&stderr, &["settle_headers.x-two", "not closed"]);
    for canary in ["CANARY1", "CANARY2", "CANARY3", "sk_live"] {
        assert!(!stderr.contains(canary), "{canary} echoed:\n{stderr}");
    }
}

/// Issue 31, item 7: a `match` with two mistakes is reported with both in one run, and a
/// template that uses a capture the match writes earns no follow-on "names no capture" error.
#[tokio::test]
async fn check_reports_every_mistake_of_a_match_and_no_follow_on_capture_error() {
    let mut text = route(
        "refund",
        "post /v1//charges/{charge}/refunds",
        &["{path:charge}:refund"],
    );
    text.push_str(
        "[route.reconcile]\nlookup = \"GET /v1/charges/{path:charge}\"\nfound = \"/id\"\n",
    );
    let policy = common::policy("pay", "https://pay.example.com", &text);
    let dir = Proxy::builder().policy("pay", &policy).write();
    let config = dir.config_path().to_string_lossy().into_owned();
    let (status, _, stderr) = dir.run_cli(&["check", "-c", &config]).await;
    assert!(!status.success(), "{stderr}");
    assert_line(
        &stderr,
        &["policies/pay.toml", "route \"refund\": match", "capitals"],
    );
    assert_line(
        &stderr,
        &[
            "policies/pay.toml",
            "route \"refund\": match",
            "empty path segment",
        ],
    );
    assert!(
        !stderr.contains("names no capture"),
        "a follow-on error:\n{stderr}"
    );
    // A capture the match does not write is still an error of its own.
    let wrong = route(
        "refund",
        "POST /v1/charges/{charge}/refunds",
        &["{path:chrage}"],
    );
    let policy = common::policy("pay", "https://pay.example.com", &wrong);
    let dir = Proxy::builder().policy("pay", &policy).write();
    let config = dir.config_path().to_string_lossy().into_owned();
    let (_, _, stderr) = dir.run_cli(&["check", "-c", &config]).await;
    assert_line(
        &stderr,
        &["{path:chrage} names no capture", "it has charge"],
    );
}
