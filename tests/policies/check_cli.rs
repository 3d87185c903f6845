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

/// One broken fixture `check` (the real binary) refuses, and an error line it must print.
struct Refused {
    fixture: &'static str,
    /// One stderr line holds every part: the file, the key and the fix.
    line: &'static [&'static str],
    /// Text stdout must not hold.
    not_in_stdout: Option<&'static str>,
}

const REFUSED: &[Refused] = &[
    // A broken policy.
    Refused {
        fixture: "unknown_template_source",
        line: &[
            "policies/stripe.toml",
            "create_refund",
            "operation_id[1]",
            "hedaer",
            "expected header",
        ],
        // A broken config is not ok.
        not_in_stdout: Some("ok"),
    },
    // A broken proxy.toml.
    Refused {
        fixture: "unknown_key_proxy",
        line: &[
            "proxy.toml",
            "limits.max_body",
            "unknown key",
            "max_request_body",
        ],
        not_in_stdout: None,
    },
    // The settings that would quietly weaken a guard.
    Refused {
        fixture: "approval_skipped",
        line: &[
            "policies/shop.toml",
            "route \"refund\": on_missing_id",
            "on_missing_id = \"reject\"",
        ],
        not_in_stdout: None,
    },
    Refused {
        fixture: "credential_in_identity",
        line: &[
            "policies/shop.toml",
            "operation_id[1]",
            "{header:authorization}",
            "credential",
        ],
        not_in_stdout: None,
    },
    Refused {
        fixture: "credential_in_identity",
        line: &[
            "policies/shop.toml",
            "fingerprint_headers[1]",
            "proxy-authorization",
        ],
        not_in_stdout: None,
    },
    Refused {
        fixture: "key_header_framing",
        line: &[
            "policies/a_shop.toml",
            "provider.key_header",
            "content-length",
            "Idempotency-Key",
        ],
        not_in_stdout: None,
    },
    Refused {
        fixture: "lookup_request_part",
        line: &[
            "policies/shop.toml",
            "route \"refund\": reconcile.lookup",
            "{header:x-workflow-id}",
            "{key}",
        ],
        not_in_stdout: None,
    },
    Refused {
        fixture: "zero_final_after",
        line: &[
            "policies/shop.toml",
            "reconcile.not_found_final_after",
            "at least 1ms",
        ],
        not_in_stdout: None,
    },
];

/// `check` (the real binary) exits non-zero on each broken fixture of `REFUSED`, printing
/// the error line that names the file, the key and the fix (a broken policy, a broken
/// proxy.toml, and the settings that would quietly weaken a guard). Every row is run; a
/// failure names each row that failed.
#[tokio::test]
async fn check_on_a_broken_config_names_file_key_and_fix() {
    let dir = Proxy::builder().write();
    let mut failed = Vec::new();
    for row in REFUSED {
        let config = broken(row.fixture);
        let (status, stdout, stderr) = dir.run_cli(&["check", "-c", &config]).await;
        let mut wrong = Vec::new();
        if status.success() {
            wrong.push(format!("exited {status:?}"));
        }
        let parts = row.line;
        if !stderr.lines().any(|l| parts.iter().all(|p| l.contains(p))) {
            wrong.push(format!("no line with {parts:?}"));
        }
        if let Some(text) = row.not_in_stdout
            && stdout.contains(text)
        {
            wrong.push(format!("stdout holds {text:?}"));
        }
        if !wrong.is_empty() {
            failed.push(format!(
                "{}: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
                row.fixture,
                wrong.join("; ")
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} rows wrong:\n{}",
        failed.len(),
        REFUSED.len(),
        failed.join("\n")
    );
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
