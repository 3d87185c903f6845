//! Unguarded forwarding through a mount: what reaches the provider and what comes back.
//!
//! A request to `/<mount>/...` must arrive with the mount stripped and the upstream's base
//! path joined, method, query, headers and body unchanged, over h2 (ALPN) to a TLS provider
//! and HTTP/1.1 to a plain one; the provider's status, headers and body come back as sent,
//! to an HTTP/1.1 or an h2c agent.

use http::{Method, StatusCode, Version};

use crate::common::files::policy_with_ca;
use crate::common::{self, Behavior, FakeProvider, Proxy, Resp, problem, send, send_h2c};

/// A TLS provider mounted at `/pay` whose upstream URL carries the base path `/base`.
async fn tls_provider_with_base() -> (FakeProvider, Proxy) {
    let behavior = Behavior::fixed(201, "made it").header("x-provider-said", "hello");
    let provider = FakeProvider::start_tls(behavior).await;
    let upstream = format!("{}/base", provider.url());
    let policy = policy_with_ca("pay", &upstream, Some(&provider.ca_file()), "");
    let proxy = Proxy::builder().policy("pay", &policy).start().await;
    (provider, proxy)
}

/// The provider's answer as the agent must see it.
fn assert_answer_unchanged(resp: &Resp) {
    assert_eq!(resp.status, StatusCode::CREATED, "{}", resp.text());
    assert_eq!(resp.header("x-provider-said"), Some("hello"));
    assert_eq!(resp.header("x-fake-effect"), Some("1"));
    assert_eq!(resp.text(), "made it");
    // A forwarded unguarded request gets none of the guarded answer's headers.
    assert_eq!(resp.header("idem-state"), None);
    assert_eq!(resp.header("idem-operation-id"), None);
}

#[tokio::test]
async fn http1_agent_reaches_an_h2_tls_provider_through_the_mount() {
    let (provider, proxy) = tls_provider_with_base().await;
    let url = proxy.url("/pay/v1/items/it_1?expand=a&expand=b&q=x%20y");
    let headers = [("content-type", "text/plain"), ("x-agent-said", "hi")];
    let resp = send(Method::PATCH, &url, &headers, "the body")
        .await
        .expect("answer");
    assert_answer_unchanged(&resp);

    let got = &provider.requests()[0];
    assert_eq!(got.method, Method::PATCH);
    assert_eq!(
        got.path_and_query,
        "/base/v1/items/it_1?expand=a&expand=b&q=x%20y"
    );
    assert_eq!(&got.body[..], b"the body");
    assert_eq!(got.header("content-type"), Some("text/plain"));
    assert_eq!(got.header("x-agent-said"), Some("hi"));
    assert_eq!(got.version, Version::HTTP_2, "ALPN must pick h2 upstream");
}

#[tokio::test]
async fn h2c_agent_reaches_an_h2_tls_provider_through_the_mount() {
    let (provider, proxy) = tls_provider_with_base().await;
    let url = proxy.url("/pay/v1/items?limit=3");
    let resp = send_h2c(Method::POST, &url, &[("x-agent-said", "hi")], "h2c body")
        .await
        .expect("answer");
    assert_answer_unchanged(&resp);

    let got = &provider.requests()[0];
    assert_eq!(got.method, Method::POST);
    assert_eq!(got.path_and_query, "/base/v1/items?limit=3");
    assert_eq!(&got.body[..], b"h2c body");
    assert_eq!(got.header("x-agent-said"), Some("hi"));
    assert_eq!(got.version, Version::HTTP_2);
}

#[tokio::test]
async fn the_mount_itself_maps_to_the_base_path() {
    let (provider, proxy) = tls_provider_with_base().await;
    let resp = send(Method::GET, &proxy.url("/pay"), &[], "")
        .await
        .expect("answer");
    assert_eq!(resp.status, StatusCode::CREATED);
    assert_eq!(provider.requests()[0].path_and_query, "/base");
}

#[tokio::test]
async fn plain_http_provider_is_spoken_to_in_http1_with_its_own_host() {
    let provider = FakeProvider::start(Behavior::json(418, serde_json::json!({"tea": true}))).await;
    let proxy = Proxy::builder()
        .policy("plain", &provider.policy("plain", ""))
        .start()
        .await;
    let resp = send_h2c(Method::DELETE, &proxy.url("/plain/v1/x/y?z=1"), &[], "")
        .await
        .expect("answer");
    assert_eq!(resp.status, StatusCode::IM_A_TEAPOT);
    assert_eq!(resp.header("content-type"), Some("application/json"));
    assert_eq!(resp.json(), serde_json::json!({"tea": true}));

    let got = &provider.requests()[0];
    assert_eq!(got.method, Method::DELETE);
    assert_eq!(got.path_and_query, "/v1/x/y?z=1");
    assert_eq!(got.version, Version::HTTP_11);
    let host = provider.addr().to_string();
    assert_eq!(
        got.header("host"),
        Some(host.as_str()),
        "Host is the upstream's"
    );
}

#[tokio::test]
async fn a_path_under_no_mount_is_404_no_route() {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let proxy = Proxy::builder()
        .policy("plain", &provider.policy("plain", ""))
        .start()
        .await;
    for path in ["/nothing/here", "/plainer/v1", "/"] {
        let resp = send(Method::GET, &proxy.url(path), &[], "")
            .await
            .expect("answer");
        problem(&resp, StatusCode::NOT_FOUND, "no-route");
    }
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test]
async fn a_provider_that_cannot_be_reached_is_502_upstream_unreachable() {
    // A port that was free a moment ago: nothing listens there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let upstream = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let proxy = Proxy::builder()
        .policy("gone", &common::policy("gone", &upstream, ""))
        .start()
        .await;
    let resp = send(Method::GET, &proxy.url("/gone/v1/x"), &[], "")
        .await
        .expect("answer");
    let body = problem(&resp, StatusCode::BAD_GATEWAY, "upstream-unreachable");
    assert_eq!(body["provider"], "gone");
}

#[tokio::test]
async fn head_and_204_answers_pass_without_a_body() {
    let provider = FakeProvider::start(Behavior::fixed(200, "a body head must not carry")).await;
    let proxy = Proxy::builder()
        .policy("plain", &provider.policy("plain", ""))
        .start()
        .await;
    let resp = send(Method::HEAD, &proxy.url("/plain/v1/x"), &[], "")
        .await
        .expect("answer");
    assert_eq!(resp.status, StatusCode::OK);
    assert!(resp.body.is_empty());
    assert_eq!(provider.requests()[0].method, Method::HEAD);

    provider.set_behavior(Behavior::fixed(204, ""));
    let resp = send_h2c(Method::DELETE, &proxy.url("/plain/v1/x"), &[], "")
        .await
        .expect("answer");
    assert_eq!(resp.status, StatusCode::NO_CONTENT);
    assert!(resp.body.is_empty());
    // The proxy still serves the same agent afterwards.
    let resp = send(Method::GET, &proxy.url("/plain/v1/y"), &[], "")
        .await
        .expect("answer");
    assert_eq!(resp.status, StatusCode::NO_CONTENT);
}
