//! `idemproxy ops` against a running proxy, through the real binary: every verb, the tables,
//! `--json`, and exit code 1 with the problem's detail when the admin API says no.

use crate::common::shop::{agent, start};

use http::StatusCode;
use serde_json::Value;

use crate::common::{self, Behavior, FakeProvider, Proxy};

/// An operation ID part that needs percent-encoding in a URL (space, `+`, `%`).
const ODD: &str = "op 1+x%y";

/// `idemproxy ops ARGS --admin URL`: (exit code, stdout, stderr).
async fn ops(proxy: &Proxy, args: &[&str]) -> (Option<i32>, String, String) {
    let admin = proxy.admin_url("");
    let mut all = vec!["ops"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--admin", &admin]);
    let (status, out, err) = proxy.run_cli(&all).await;
    (status.code(), out, err)
}

async fn ok(proxy: &Proxy, args: &[&str]) -> String {
    let (code, out, err) = ops(proxy, args).await;
    assert_eq!(code, Some(0), "ops {args:?}: stdout {out}\nstderr {err}");
    out
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The value of `field` in `ops show`'s table.
fn field<'a>(table: &'a str, field: &str) -> Option<&'a str> {
    table
        .lines()
        .find_map(|l| l.strip_prefix(field).filter(|rest| rest.starts_with(' ')))
        .map(str::trim)
}

#[tokio::test]
async fn list_prints_a_table_or_the_json_and_pages() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "", &[]).await;
    agent(&proxy, "op-a").await;
    agent(&proxy, ODD).await;

    let table = ok(&proxy, &["list"]).await;
    let lines: Vec<&str> = table.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["ID", "STATE", "ATTEMPTS", "UPDATED"]);
    assert!(
        lines[1].starts_with(&format!("shop/create/{ODD} ")),
        "{table}"
    );
    assert!(lines[2].starts_with("shop/create/op-a "), "{table}");
    assert!(
        lines[2].contains(" succeeded ") && lines[2].ends_with('Z'),
        "{table}"
    );
    assert_eq!(lines.len(), 3, "{table}");

    let listed = json(&ok(&proxy, &["list", "--json"]).await);
    assert_eq!(listed["ops"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        listed["ops"][0]["operation_id"],
        format!("shop/create/{ODD}")
    );

    // The next page's command repeats the filters and the limit given: run as printed, it
    // continues the same listing. Before 2026-12-04 it was `--after CURSOR` alone, which
    // listed the next 50 of every state.
    let admin = proxy.admin_url("");
    let first = ok(&proxy, &["list", "--state", "succeeded", "--limit", "1"]).await;
    let more = first
        .lines()
        .find_map(|l| l.strip_prefix("more: idemproxy "))
        .expect("a next-page line")
        .to_string();
    let words: Vec<&str> = more.split(' ').collect();
    let (cursor, given) = words.split_last().expect("words");
    assert_eq!(
        given,
        [
            "ops",
            "list",
            "--state",
            "succeeded",
            "--limit",
            "1",
            "--admin",
            &admin,
            "--after"
        ],
        "{more}"
    );
    let second = ok(
        &proxy,
        &[
            "list",
            "--state",
            "succeeded",
            "--limit",
            "1",
            "--after",
            cursor,
        ],
    )
    .await;
    assert!(
        second.contains("shop/create/op-a") && !second.contains("more:"),
        "{second}"
    );

    let none = ok(
        &proxy,
        &["list", "--state", "unknown", "--provider", "shop"],
    )
    .await;
    assert_eq!(none, "no operations\n");
    let (code, _, err) = ops(&proxy, &["list", "--state", "bogus"]).await;
    assert_eq!(code, Some(1));
    assert!(
        err.contains("unknown state") && err.contains("400"),
        "{err}"
    );
}

#[tokio::test]
async fn show_prints_fields_then_events_and_the_json() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done")).await;
    let proxy = start(&provider, "", &[]).await;
    agent(&proxy, ODD).await;
    let id = format!("shop/create/{ODD}");

    let table = ok(&proxy, &["show", &id]).await;
    assert_eq!(field(&table, "operation_id"), Some(id.as_str()));
    assert_eq!(field(&table, "state"), Some("succeeded"));
    assert_eq!(field(&table, "attempts"), Some("1"));
    assert!(
        field(&table, "response").is_some_and(|r| r.starts_with("status 200, 4 bytes")),
        "{table}"
    );
    let events = table.split("events:\n").nth(1).unwrap_or_default();
    let kinds: Vec<&str> = events
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert_eq!(
        kinds,
        [
            "operation.claimed",
            "provider.requested",
            "provider.responded",
            "result.persisted"
        ]
    );

    let shown = json(&ok(&proxy, &["show", &id, "--json"]).await);
    assert_eq!(shown["operation_id"], id.as_str());
    assert_eq!(shown["events"].as_array().map(Vec::len), Some(4));

    let (code, out, err) = ops(&proxy, &["show", "shop/create/missing"]).await;
    assert_eq!((code, out.as_str()), (Some(1), ""));
    assert!(
        err.contains("no operation shop/create/missing") && err.contains("404"),
        "{err}"
    );
}

/// Makes `op` unknown: the provider commits the effect and loses its answer.
async fn unknown(proxy: &Proxy, provider: &FakeProvider, op: &str) {
    provider.set_behavior(Behavior::fixed(200, "lost").drop_first_response(1));
    assert_eq!(agent(proxy, op).await.status, StatusCode::ACCEPTED);
}

/// `ops resolve --succeeded` with an empty body file is refused for a 2xx other than 204
/// (exit 1, the API's words) unless `--empty-body` says the provider answered with nothing.
#[tokio::test]
async fn resolve_with_an_empty_body_file_needs_empty_body() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "", &[]).await;
    unknown(&proxy, &provider, ODD).await;
    let id = format!("shop/create/{ODD}");
    let empty = proxy.dir().path().join("empty.json");
    std::fs::write(&empty, "").expect("write body");
    let empty = empty.to_string_lossy().into_owned();
    let args = ["resolve", &id, "--succeeded", "--body-file", &empty];
    let (code, out, err) = ops(&proxy, &args).await;
    assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
    assert!(err.contains("--empty-body"), "{err}");
    let with: Vec<&str> = args.iter().copied().chain(["--empty-body"]).collect();
    let out = ok(&proxy, &with).await;
    assert_eq!(field(&out, "state"), Some("succeeded"), "{out}");
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn resolve_succeeded_stores_the_body_and_a_second_resolve_fails_with_the_detail() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "", &[]).await;
    unknown(&proxy, &provider, ODD).await;
    let id = format!("shop/create/{ODD}");
    let body_file = proxy.dir().path().join("body.json");
    std::fs::write(&body_file, r#"{"id":"re_1"}"#).expect("write body");
    let body_arg = body_file.to_string_lossy().into_owned();

    let out = ok(
        &proxy,
        &[
            "resolve",
            &id,
            "--succeeded",
            "--status",
            "201",
            "--body-file",
            &body_arg,
            "--header",
            "content-type: application/json",
            "--reason",
            "seen at the provider",
        ],
    )
    .await;
    assert_eq!(field(&out, "state"), Some("succeeded"), "{out}");
    let replay = agent(&proxy, ODD).await;
    assert_eq!(
        (replay.status, replay.text()),
        (StatusCode::CREATED, r#"{"id":"re_1"}"#.into())
    );
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.header("content-type"), Some("application/json"));
    assert_eq!(provider.request_count(), 1);

    let (code, out, err) = ops(&proxy, &["resolve", &id, "--failed", "--reason", "x"]).await;
    assert_eq!((code, out.as_str()), (Some(1), ""));
    assert!(
        err.contains("only an unknown operation can be resolved") && err.contains("409"),
        "{err}"
    );
}

#[tokio::test]
async fn resolve_failed_lets_the_agent_send_again() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "", &[]).await;
    unknown(&proxy, &provider, "op-1").await;
    let out = ok(
        &proxy,
        &[
            "resolve",
            "shop/create/op-1",
            "--failed",
            "--reason",
            "not at the provider",
            "--json",
        ],
    )
    .await;
    let op = json(&out);
    assert_eq!(
        (op["state"].as_str(), op["error"].as_str()),
        (Some("failed"), Some("not at the provider"))
    );
    assert_eq!(agent(&proxy, "op-1").await.status, StatusCode::OK);
    assert_eq!(provider.request_count(), 2);

    // --failed without --reason is a usage error, caught before any call.
    let (code, _, err) = ops(&proxy, &["resolve", "shop/create/op-1", "--failed"]).await;
    assert_eq!(code, Some(2), "{err}");
}

/// `--succeeded` stores the response every later replay answers: without `--body-file` it
/// would be an empty 200 that breaks the SDK parsing it, so it is a usage error, the
/// operation untouched, and `--help` says so.
#[tokio::test]
async fn resolve_succeeded_requires_a_body_file() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "", &[]).await;
    unknown(&proxy, &provider, "op-1").await;
    let (code, _, err) = ops(&proxy, &["resolve", "shop/create/op-1", "--succeeded"]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--body-file"), "{err}");
    let out = ok(&proxy, &["show", "shop/create/op-1"]).await;
    assert_eq!(field(&out, "state"), Some("unknown"), "{out}");

    let (_, help, _) = ops(&proxy, &["resolve", "--help"]).await;
    assert!(
        help.contains("--body-file") && help.contains("Required with --succeeded"),
        "{help}"
    );
}

#[tokio::test]
async fn approve_and_reject_with_a_token() {
    let provider = FakeProvider::start(Behavior::fixed(200, "sent")).await;
    let token = [("IDEMPROXY_ADMIN_TOKEN", "cli-t0k")];
    let proxy = start(&provider, "approval = \"required\"", &token).await;
    assert_eq!(agent(&proxy, "op-1").await.status, StatusCode::ACCEPTED);
    assert_eq!(agent(&proxy, "op-2").await.status, StatusCode::ACCEPTED);

    let out = ok(
        &proxy,
        &["approve", "shop/create/op-1", "--reason", "checked"],
    )
    .await;
    assert_eq!(field(&out, "approval"), Some("approved"), "{out}");
    assert_eq!(provider.request_count(), 0);
    assert_eq!(agent(&proxy, "op-1").await.text(), "sent");
    assert_eq!(provider.request_count(), 1);

    let out = ok(
        &proxy,
        &["reject", "shop/create/op-2", "--reason", "duplicate order"],
    )
    .await;
    assert_eq!(field(&out, "state"), Some("failed"), "{out}");
    assert_eq!(field(&out, "error"), Some("duplicate order"), "{out}");
    assert_eq!(agent(&proxy, "op-2").await.status, StatusCode::FORBIDDEN);

    let (code, _, err) = ops(&proxy, &["approve", "shop/create/op-2"]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("409"), "{err}");
    let (code, _, err) = ops(&proxy, &["reject", "shop/create/op-1"]).await;
    assert_eq!(code, Some(2), "--reason is required: {err}");
}

/// A token read from a file often ends in a newline: `serve` and `ops` both ignore the
/// whitespace around it, so they agree on the token. Before 2026-12-03 `ops` sent the newline
/// and failed ("failed to parse header value").
#[tokio::test]
async fn a_token_with_a_trailing_newline_works_for_ops_as_for_serve() {
    let provider = FakeProvider::start(Behavior::fixed(200, "sent")).await;
    let token = [("IDEMPROXY_ADMIN_TOKEN", " cli-t0k\n")];
    let proxy = start(&provider, "", &token).await;
    // `ok` asserts exit 0: the API took the token.
    ok(&proxy, &["list"]).await;
    let unauthorized = common::send(http::Method::GET, &proxy.admin_url("/ops"), &[], "")
        .await
        .expect("admin answers");
    assert_eq!(
        unauthorized.status,
        StatusCode::UNAUTHORIZED,
        "the token is on"
    );
}

/// An `--admin` URL holding a password is refused without being echoed (the admin API takes
/// a bearer token, never user info). Before 2026-12-03 the URL, password included, was
/// printed in every error and by `ops tail`.
#[tokio::test]
async fn an_admin_url_with_a_password_is_refused_without_echoing_it() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "", &[]).await;
    let url = proxy
        .admin_url("")
        .replace("http://", "http://ops:Pw-CANARY-5@");
    for verb in [&["list"][..], &["tail"][..]] {
        let mut args = vec!["ops"];
        args.extend_from_slice(verb);
        args.extend_from_slice(&["--admin", &url]);
        let (status, out, err) = proxy.run_cli(&args).await;
        assert_eq!(status.code(), Some(2), "{verb:?}: {out}\n{err}");
        assert!(err.contains("IDEMPROXY_ADMIN_TOKEN"), "{err}");
        assert!(
            !format!("{out}{err}").contains("CANARY"),
            "{verb:?} echoed it: {err}"
        );
    }
}

#[tokio::test]
async fn an_unreachable_admin_api_is_exit_1_with_a_hint() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "", &[]).await;
    // A port nothing listens on: the fake provider's, once it is gone.
    let dead = format!("http://{}", provider.addr());
    drop(provider);
    let (status, _, err) = proxy.run_cli(&["ops", "list", "--admin", &dead]).await;
    assert_eq!(status.code(), Some(1));
    assert!(err.contains("cannot reach the admin API"), "{err}");
}
