//! The inbound limits inside tunnels (docs/reference.md section 6.3): a client that never
//! starts TLS after the 200 is dropped after `header_timeout`, and a tunnel holds its
//! connection's place under `max_connections` for as long as it lives, and a request inside a
//! tunnel runs to its answer at a graceful stop.

use std::time::Duration;

use http::{Method, StatusCode};

use crate::common::raw::{closed_by_server, log_line};
use crate::common::tunnel::{Ca, Through, connect, intercepting, tls};
use crate::common::{Behavior, FakeProvider, Proxy, send};

async fn start(limits: &str) -> (FakeProvider, Proxy, Ca) {
    let ca = Ca::new();
    let provider = FakeProvider::start_tls(Behavior::echo()).await;
    let builder = Proxy::builder()
        .policy("pay", &provider.policy("pay", ""))
        .config(&format!("[limits]\n{limits}"));
    let proxy = intercepting(builder, &ca, &[]).start().await;
    (provider, proxy, ca)
}

#[tokio::test]
async fn a_client_that_never_sends_a_client_hello_is_dropped_after_the_handshake_timeout() {
    let (provider, proxy, _ca) = start("header_timeout = \"300ms\"\n").await;
    let target = format!("localhost:{}", provider.addr().port());
    let (status, head, mut stream) = connect(proxy.proxy_addr(), &target).await;
    assert_eq!(status, 200, "{head}");
    let sent = closed_by_server(&mut stream).await;
    assert!(
        sent.is_empty(),
        "nothing is sent to a silent client: {sent:?}"
    );
}

#[tokio::test]
async fn a_tunnel_holds_its_place_under_max_connections() {
    let (provider, proxy, ca) = start("max_connections = 1\nheader_timeout = \"60s\"\n").await;
    let target = format!("localhost:{}", provider.addr().port());
    let (status, _, stream) = connect(proxy.proxy_addr(), &target).await;
    assert_eq!(status, 200);
    let tunnel = tls(stream, "localhost", &ca, &[b"http/1.1"]).await;
    log_line(&proxy, "max_connections").await;
    let url = proxy.url("/pay/v1/refunds");
    let mut next = tokio::spawn(async move { send(Method::GET, &url, &[], "").await });
    // Not a timing assertion: only a broken limit could answer within this window.
    let early = tokio::time::timeout(Duration::from_millis(300), &mut next).await;
    assert!(early.is_err(), "served beside the open tunnel: {early:?}");
    drop(tunnel);
    let next = next
        .await
        .expect("task")
        .expect("served once the tunnel closed");
    assert_eq!(next.status, StatusCode::OK);
}

#[tokio::test]
async fn a_request_inside_a_tunnel_finishes_at_a_graceful_stop() {
    let ca = Ca::new();
    let provider = FakeProvider::start_tls(Behavior::echo().hold()).await;
    let builder = Proxy::builder()
        .policy("pay", &provider.policy("pay", ""))
        .config("[limits]\nshutdown_grace = \"20s\"\n");
    let mut proxy = intercepting(builder, &ca, &[]).start().await;
    let (addr, port) = (proxy.proxy_addr(), provider.addr().port());
    let pending = tokio::spawn(async move {
        let ca = ca;
        let client = Through {
            proxy: addr,
            ca: &ca,
            host: "localhost",
            port,
            h2: false,
        };
        client
            .send(Method::POST, "/v1/refunds", &[], "amount=1")
            .await
    });
    provider.wait_for_requests(1).await;
    proxy.signal("TERM");
    log_line(&proxy, "SIGTERM received").await;
    provider.release();
    let answer = pending
        .await
        .expect("the request inside the tunnel is answered");
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    assert!(proxy.exited().await.success());
}
