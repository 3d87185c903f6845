//! The console's files on the admin listener, against the real binary: `GET /ui` and its
//! script and style are served without the token (they hold no data) with a
//! Content-Security-Policy and `X-Frame-Options: DENY`, while every data call still needs the
//! token; the browser rules (a foreign `Origin`, a host name without a token) hold for the
//! page as for every call; and `GET /stats` gives the summary the page shows.

use http::{Method, StatusCode};
use serde_json::json;

use crate::common::shop::{agent, start};
use crate::common::{Behavior, FakeProvider, Proxy, Resp, problem, send};

const TOKEN: &str = "t0k-console";

async fn get(proxy: &Proxy, path: &str, headers: &[(&str, &str)]) -> Resp {
    send(Method::GET, &proxy.admin_url(path), headers, "")
        .await
        .expect("admin answers")
}

#[tokio::test]
async fn the_page_needs_no_token_but_every_data_call_still_does() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "", &[("IDEMPROXY_ADMIN_TOKEN", TOKEN)]).await;

    let page = get(&proxy, "/ui", &[]).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text());
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let csp = page.header("content-security-policy").unwrap_or_default();
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
        "form-action 'none'",
    ] {
        assert!(csp.contains(directive), "{directive} in {csp}");
    }
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    let html = page.text();
    assert!(html.contains(r#"<script src="/ui/console.js""#), "{html}");
    assert!(!html.contains(TOKEN));

    let script = get(&proxy, "/ui/console.js", &[]).await;
    assert_eq!(script.status, StatusCode::OK);
    assert_eq!(
        script.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert_eq!(script.header("x-frame-options"), Some("DENY"));
    let style = get(&proxy, "/ui/console.css", &[]).await;
    assert_eq!(
        style.header("content-type"),
        Some("text/css; charset=utf-8")
    );
    problem(
        &get(&proxy, "/ui/nothing.js", &[]).await,
        StatusCode::NOT_FOUND,
        "not-found",
    );

    for data in ["/ops", "/stats", "/ops/shop%2Fcreate%2Fop-1", "/metrics"] {
        let refused = get(&proxy, data, &[]).await;
        problem(&refused, StatusCode::UNAUTHORIZED, "unauthorized");
    }
    let auth = format!("Bearer {TOKEN}");
    let listed = get(&proxy, "/ops", &[("authorization", &auth)]).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text());
}

#[tokio::test]
async fn the_page_keeps_the_browser_rules_and_only_its_own_origin_may_act() {
    let provider = FakeProvider::start(Behavior::fixed(200, "sent")).await;
    let proxy = start(
        &provider,
        "approval = \"required\"\n",
        &[("IDEMPROXY_ADMIN_TOKEN", TOKEN)],
    )
    .await;
    let pending = agent(&proxy, "op-1").await;
    assert_eq!(pending.status, StatusCode::ACCEPTED, "{}", pending.text());
    let own = format!("http://{}", proxy.admin_addr());
    let auth = format!("Bearer {TOKEN}");
    let approve = proxy.admin_url("/ops/shop%2Fcreate%2Fop-1/approve");
    let json_type = ("content-type", "application/json");

    for foreign in ["http://evil.example", "null", &proxy.url("")] {
        let page = get(&proxy, "/ui", &[("origin", foreign)]).await;
        problem(&page, StatusCode::FORBIDDEN, "foreign-origin");
        let headers = [("origin", foreign), ("authorization", &auth), json_type];
        let acted = send(Method::POST, &approve, &headers, "{}").await;
        let acted = acted.expect("admin answers");
        problem(&acted, StatusCode::FORBIDDEN, "foreign-origin");
    }
    let shown = get(
        &proxy,
        "/ops/shop%2Fcreate%2Fop-1",
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(
        shown.json()["approval"],
        "pending",
        "no foreign origin approved it"
    );
    assert_eq!(provider.request_count(), 0);

    // The page's own calls: its origin, the token, JSON.
    let page = get(&proxy, "/ui", &[("origin", &own)]).await;
    assert_eq!(page.status, StatusCode::OK);
    let headers = [
        ("origin", own.as_str()),
        ("authorization", &auth),
        json_type,
    ];
    let approved = send(Method::POST, &approve, &headers, "{}").await;
    let approved = approved.expect("admin answers");
    assert_eq!(approved.status, StatusCode::OK, "{}", approved.text());
    assert_eq!(approved.json()["approval"], "approved");
}

#[tokio::test]
async fn without_a_token_the_page_is_served_only_to_a_local_host_name() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "", &[]).await;
    for host in ["evil.example", "127.0.0.1.nip.io"] {
        let rebound = get(&proxy, "/ui", &[("host", host)]).await;
        problem(&rebound, StatusCode::MISDIRECTED_REQUEST, "misdirected");
        let script = get(&proxy, "/ui/console.js", &[("host", host)]).await;
        problem(&script, StatusCode::MISDIRECTED_REQUEST, "misdirected");
    }
    let port = proxy.admin_addr().port();
    let local = get(&proxy, "/ui", &[("host", &format!("localhost:{port}"))]).await;
    assert_eq!(local.status, StatusCode::OK);
    let posted = send(
        Method::POST,
        &proxy.admin_url("/ui"),
        &[("content-type", "application/json")],
        "{}",
    )
    .await
    .expect("admin answers");
    problem(
        &posted,
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
    );
}

#[tokio::test]
async fn stats_count_operations_by_state_with_the_oldest_unknown_age() {
    let provider = FakeProvider::start(Behavior::fixed(200, "made")).await;
    let proxy = start(&provider, "", &[]).await;
    let empty = get(&proxy, "/stats", &[]).await;
    assert_eq!(empty.status, StatusCode::OK, "{}", empty.text());
    let empty = empty.json();
    assert_eq!(empty["by_state"]["unknown"], 0);
    assert_eq!(empty["oldest_unknown"], json!(null));

    agent(&proxy, "op-1").await;
    provider.set_behavior(Behavior::fixed(200, "made").drop_first_response(1));
    let lost = agent(&proxy, "op-2").await;
    assert_eq!(
        lost.header("idem-state"),
        Some("unknown"),
        "{}",
        lost.text()
    );
    let stats = get(&proxy, "/stats", &[]).await.json();
    assert_eq!(
        stats["by_state"],
        json!({"prepared": 0, "in_flight": 0, "succeeded": 1, "failed": 0, "unknown": 1}),
        "{stats}"
    );
    let oldest = &stats["oldest_unknown"];
    assert!(
        oldest["age_seconds"].as_f64().is_some_and(|s| s >= 0.0),
        "{stats}"
    );
    let op = get(&proxy, "/ops/shop%2Fcreate%2Fop-2", &[]).await.json();
    assert_eq!(oldest["created_at"], op["created_at"]);
    assert_eq!(stats["oldest_in_flight"], json!(null));
}
