//! The admin API cannot be driven by a web page (docs/reference.md section 7), against the real binary: a
//! POST needs `Content-Type: application/json` (a cross-origin form or `text/plain` POST needs
//! no preflight), a foreign `Origin` is 403, and without a token `Host` must be an IP literal
//! or `localhost` (DNS rebinding). `/healthz` stays open to any caller.

use crate::common::shop::{agent, start};

use http::{Method, StatusCode};
use serde_json::json;

use crate::common::{Behavior, FakeProvider, Proxy, Resp, problem, send};

const TOKEN: &str = "t0k-browser";

async fn admin(proxy: &Proxy, method: Method, path: &str, headers: &[(&str, &str)]) -> Resp {
    admin_body(proxy, method, path, headers, "").await
}

async fn admin_body(
    proxy: &Proxy,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
    send(method, &proxy.admin_url(path), headers, body.to_string())
        .await
        .expect("admin answers")
}

/// An `unknown` operation: the provider commits the effect and drops its answer.
async fn unknown_op(proxy: &Proxy, provider: &FakeProvider, op: &str) -> String {
    provider.set_behavior(Behavior::fixed(200, "made").drop_first_response(1));
    let resp = agent(proxy, op).await;
    assert_eq!(
        resp.header("idem-state"),
        Some("unknown"),
        "{}",
        resp.text()
    );
    format!("shop/create/{op}")
}

#[tokio::test]
async fn a_post_that_is_not_json_is_refused_and_the_operation_stays_unknown() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "", &[]).await;
    let id = unknown_op(&proxy, &provider, "op-1").await;
    let path = format!("/ops/{}/resolve", id.replace('/', "%2F"));
    let body = json!({"outcome": "failed", "reason": "a web page said so"}).to_string();

    // What a cross-origin <form> or fetch(..., {mode: "no-cors"}) can send without a preflight.
    for content_type in [
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonx"),
        None,
    ] {
        let headers: Vec<(&str, &str)> = content_type
            .iter()
            .map(|ct| ("content-type", *ct))
            .collect();
        let resp = admin_body(&proxy, Method::POST, &path, &headers, &body).await;
        let refused = problem(
            &resp,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
        );
        assert!(
            refused["detail"]
                .as_str()
                .is_some_and(|d| d.contains("application/json")),
            "{refused}"
        );
        assert_eq!(proxy.op_state(&id).await, "unknown", "{content_type:?}");
    }
    let replay = agent(&proxy, "op-1").await;
    assert_eq!(replay.status, StatusCode::ACCEPTED, "still held");
    assert_eq!(provider.request_count(), 1, "nothing was sent again");

    let json_type = [("content-type", "Application/JSON; charset=utf-8")];
    let resolved = admin_body(&proxy, Method::POST, &path, &json_type, &body).await;
    assert_eq!(resolved.status, StatusCode::OK, "{}", resolved.text());
    assert_eq!(proxy.op_state(&id).await, "failed");
}

#[tokio::test]
async fn a_foreign_origin_is_refused_even_with_the_token() {
    let provider = FakeProvider::start(Behavior::fixed(200, "sent")).await;
    let proxy = start(&provider, "approval = \"required\"\n", &[]).await;
    let pending = agent(&proxy, "op-1").await;
    assert_eq!(pending.status, StatusCode::ACCEPTED, "{}", pending.text());
    let port = proxy.admin_addr().port();
    let approve = "/ops/shop%2Fcreate%2Fop-1/approve";
    let json_type = ("content-type", "application/json");

    for origin in [
        "http://evil.example",
        "null",
        &format!("http://127.0.0.1:{}", proxy.proxy_addr().port()),
        &format!("https://127.0.0.1:{port}"),
        &format!("http://127.0.0.1:{port}.evil.example"),
    ] {
        let listed = admin(&proxy, Method::GET, "/ops", &[("origin", origin)]).await;
        problem(&listed, StatusCode::FORBIDDEN, "foreign-origin");
        let headers = [("origin", origin), json_type];
        let approved = admin_body(&proxy, Method::POST, approve, &headers, "{}").await;
        problem(&approved, StatusCode::FORBIDDEN, "foreign-origin");
    }
    assert_eq!(proxy.op_state("shop/create/op-1").await, "prepared");
    let shown = admin(&proxy, Method::GET, "/ops/shop%2Fcreate%2Fop-1", &[]).await;
    assert_eq!(
        shown.json()["approval"],
        "pending",
        "no approval went through"
    );

    // The listener's own origin (the console's page) is welcome, by address or by localhost.
    let own = format!("http://127.0.0.1:{port}");
    let listed = admin(&proxy, Method::GET, "/ops", &[("origin", &own)]).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text());
    let localhost = format!("localhost:{port}");
    let as_localhost = [
        ("host", localhost.as_str()),
        ("origin", &format!("http://{localhost}")),
    ];
    let listed = admin(&proxy, Method::GET, "/ops", &as_localhost).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text());
    let approved = admin_body(
        &proxy,
        Method::POST,
        approve,
        &[("origin", &own), json_type],
        "{}",
    )
    .await;
    assert_eq!(approved.status, StatusCode::OK, "{}", approved.text());

    let provider = FakeProvider::start(Behavior::echo()).await;
    let tokened = start(&provider, "", &[("IDEMPROXY_ADMIN_TOKEN", TOKEN)]).await;
    let bearer = format!("Bearer {TOKEN}");
    let headers = [
        ("authorization", bearer.as_str()),
        ("origin", "http://evil.example"),
    ];
    let listed = admin(&tokened, Method::GET, "/ops", &headers).await;
    problem(&listed, StatusCode::FORBIDDEN, "foreign-origin");
}

#[tokio::test]
async fn without_a_token_the_host_must_be_an_ip_literal_or_localhost() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "", &[]).await;
    let port = proxy.admin_addr().port();
    for host in [
        "evil.example".to_string(),
        format!("evil.example:{port}"),
        format!("127.0.0.1.evil.example:{port}"),
        format!("localhost.evil.example:{port}"),
    ] {
        let listed = admin(&proxy, Method::GET, "/ops", &[("host", &host)]).await;
        let refused = problem(&listed, StatusCode::MISDIRECTED_REQUEST, "misdirected");
        assert!(
            refused["detail"]
                .as_str()
                .is_some_and(|d| d.contains("IDEMPROXY_ADMIN_TOKEN")),
            "{refused}"
        );
        let metrics = admin(&proxy, Method::GET, "/metrics", &[("host", &host)]).await;
        problem(&metrics, StatusCode::MISDIRECTED_REQUEST, "misdirected");
    }
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
        format!("[::1]:{port}"),
        "localhost".to_string(),
    ] {
        let listed = admin(&proxy, Method::GET, "/ops", &[("host", &host)]).await;
        assert_eq!(listed.status, StatusCode::OK, "{host}: {}", listed.text());
    }

    // `idemproxy ops` reaches it by address or by `localhost`.
    for admin in [proxy.admin_url(""), format!("http://localhost:{port}")] {
        let (status, out, err) = proxy.run_cli(&["ops", "list", "--admin", &admin]).await;
        assert!(status.success(), "{admin}: {out}\n{err}");
    }

    let tokened = start(&provider, "", &[("IDEMPROXY_ADMIN_TOKEN", TOKEN)]).await;
    let bearer = format!("Bearer {TOKEN}");
    let named = [
        ("host", "admin.internal.example"),
        ("authorization", bearer.as_str()),
    ];
    let listed = admin(&tokened, Method::GET, "/ops", &named).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text());
    let anonymous = admin(&tokened, Method::GET, "/ops", &named[..1]).await;
    problem(&anonymous, StatusCode::UNAUTHORIZED, "unauthorized");
}

#[tokio::test]
async fn healthz_answers_any_host_and_origin() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "", &[]).await;
    let headers = [("host", "evil.example"), ("origin", "http://evil.example")];
    let health = admin(&proxy, Method::GET, "/healthz", &headers).await;
    assert_eq!(health.status, StatusCode::OK, "{}", health.text());
}

/// A `Host` whose port is not a number from 0 to 65535 cannot be read, and an unreadable
/// `Host` is misdirected without a token, as one that is no authority at all: its port
/// would otherwise be taken for 80 when the `Origin` is compared.
#[tokio::test]
async fn a_host_whose_port_cannot_be_read_is_misdirected() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "", &[]).await;
    for host in [
        "localhost:abc",
        "localhost:80x",
        "127.0.0.1:65536",
        "[::1]:99999",
        "a b",
    ] {
        let listed = admin(&proxy, Method::GET, "/ops", &[("host", host)]).await;
        problem(&listed, StatusCode::MISDIRECTED_REQUEST, "misdirected");
        let with_origin = [("host", host), ("origin", "http://localhost")];
        let listed = admin(&proxy, Method::GET, "/ops", &with_origin).await;
        problem(&listed, StatusCode::MISDIRECTED_REQUEST, "misdirected");
    }
    // With a token any `Host` is accepted, but an unreadable one is no page's own origin.
    let tokened = start(&provider, "", &[("IDEMPROXY_ADMIN_TOKEN", TOKEN)]).await;
    let bearer = format!("Bearer {TOKEN}");
    let unreadable = [
        ("host", "localhost:abc"),
        ("authorization", bearer.as_str()),
    ];
    let listed = admin(&tokened, Method::GET, "/ops", &unreadable).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text());
    let with_origin = [unreadable[0], unreadable[1], ("origin", "http://localhost")];
    let listed = admin(&tokened, Method::GET, "/ops", &with_origin).await;
    problem(&listed, StatusCode::FORBIDDEN, "foreign-origin");
}

/// The listener's own origin is compared in any case, its scheme as its host.
#[tokio::test]
async fn the_own_origin_is_welcome_in_any_case() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "", &[]).await;
    let port = proxy.admin_addr().port();
    for (host, origin) in [
        (
            format!("127.0.0.1:{port}"),
            format!("HTTP://127.0.0.1:{port}"),
        ),
        (
            format!("localhost:{port}"),
            format!("Http://LocalHost:{port}"),
        ),
        (
            format!("LOCALHOST:{port}"),
            format!("http://localhost:{port}"),
        ),
    ] {
        let headers = [("host", host.as_str()), ("origin", origin.as_str())];
        let listed = admin(&proxy, Method::GET, "/ops", &headers).await;
        assert_eq!(listed.status, StatusCode::OK, "{origin}: {}", listed.text());
    }
    let foreign = format!("HTTPS://127.0.0.1:{port}");
    let listed = admin(&proxy, Method::GET, "/ops", &[("origin", &foreign)]).await;
    problem(&listed, StatusCode::FORBIDDEN, "foreign-origin");
}

/// A request with two `Origin` headers is refused, whichever comes first: one reader would
/// take the first, another the last.
#[tokio::test]
async fn two_origins_are_refused() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = start(&provider, "", &[]).await;
    let own = format!("http://127.0.0.1:{}", proxy.admin_addr().port());
    for pair in [
        [own.as_str(), "http://evil.example"],
        ["http://evil.example", own.as_str()],
        [own.as_str(), own.as_str()],
    ] {
        let headers = [("origin", pair[0]), ("origin", pair[1])];
        let listed = admin(&proxy, Method::GET, "/ops", &headers).await;
        problem(&listed, StatusCode::FORBIDDEN, "foreign-origin");
    }
    let listed = admin(&proxy, Method::GET, "/ops", &[("origin", &own)]).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text());
}
