//! Header hygiene of a forwarded request, both directions: hop-by-hop headers (RFC 9110
//! 7.6.1) and the headers `Connection` names are dropped, control headers never leave,
//! `Host` is the upstream's, nothing is added but this proxy's `Via` on requests (no
//! `X-Forwarded-*`; `tests/forwarding/hygiene.rs` covers `Via`), and every end-to-end header
//! (`Authorization` included) passes unchanged.

use http::{Method, StatusCode};

use crate::common::{Behavior, FakeProvider, Proxy, send};

const HOP_BY_HOP_REQUEST: [(&str, &str); 8] = [
    ("connection", "x-named-hop, keep-alive"),
    ("x-named-hop", "must go"),
    ("keep-alive", "timeout=5"),
    ("proxy-connection", "keep-alive"),
    ("te", "trailers"),
    ("trailer", "x-checksum"),
    ("upgrade", "websocket"),
    ("proxy-authorization", "Basic cHJveHk6c2VjcmV0"),
];

const END_TO_END: [(&str, &str); 4] = [
    ("authorization", "Bearer sk_test_abc"),
    ("x-custom", "kept"),
    ("accept", "application/json"),
    ("stripe-version", "2024-06-20"),
];

#[tokio::test]
async fn request_headers_lose_hop_by_hop_and_control_headers_and_gain_nothing() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = Proxy::builder()
        .policy("plain", &provider.policy("plain", ""))
        .start()
        .await;
    let control = [("x-operation-id", "op-1"), ("x-workflow-id", "wf-1")];
    let headers: Vec<_> = HOP_BY_HOP_REQUEST
        .iter()
        .chain(&END_TO_END)
        .chain(&control)
        .copied()
        .collect();
    let resp = send(Method::POST, &proxy.url("/plain/v1/things"), &headers, "b")
        .await
        .expect("answer");
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());

    let got = &provider.requests()[0];
    for (name, _) in HOP_BY_HOP_REQUEST.iter().chain(&control) {
        assert_eq!(got.header(name), None, "{name} must not be forwarded");
    }
    for (name, value) in END_TO_END {
        assert_eq!(got.header(name), Some(value), "{name} must pass unchanged");
    }
    let host = provider.addr().to_string();
    assert_eq!(got.header("host"), Some(host.as_str()));
    let via = got.header("via").unwrap_or_default();
    assert!(
        via.starts_with("1.1 idemproxy-"),
        "only Via names the proxy: {via}"
    );
    for added in [
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
    ] {
        assert_eq!(
            got.header(added),
            None,
            "the proxy is transparent: no {added}"
        );
    }
}

#[tokio::test]
async fn response_headers_lose_hop_by_hop_and_keep_the_rest() {
    let behavior = Behavior::fixed(200, "ok")
        .header("connection", "x-resp-hop")
        .header("x-resp-hop", "must go")
        .header("keep-alive", "timeout=5")
        .header("proxy-authenticate", "Basic realm=\"provider\"")
        .header("upgrade", "h2c")
        .header("x-request-id", "req_123")
        .header("set-cookie", "a=b")
        .header("cache-control", "no-store");
    let provider = FakeProvider::start(behavior).await;
    let proxy = Proxy::builder()
        .policy("plain", &provider.policy("plain", ""))
        .start()
        .await;
    let resp = send(Method::GET, &proxy.url("/plain/v1/things"), &[], "")
        .await
        .expect("answer");
    assert_eq!(resp.status, StatusCode::OK);
    assert_eq!(resp.text(), "ok");
    for name in ["x-resp-hop", "keep-alive", "proxy-authenticate", "upgrade"] {
        assert_eq!(resp.header(name), None, "{name} must not reach the agent");
    }
    let connection = resp.header("connection").unwrap_or_default();
    assert!(
        !connection.contains("x-resp-hop"),
        "connection: {connection}"
    );
    for (name, value) in [
        ("x-request-id", "req_123"),
        ("set-cookie", "a=b"),
        ("cache-control", "no-store"),
    ] {
        assert_eq!(resp.header(name), Some(value), "{name} must pass unchanged");
    }
    assert_eq!(resp.header("via"), None);
}
