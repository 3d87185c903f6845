//! What CONNECT is answered (docs/reference.md section 6.3): 501 without `[intercept]`; 403
//! `no-route` for a host no provider's https upstream names and no `tunnel` entry lists; an
//! opaque byte tunnel to a `tunnel` entry; and inside an intercepted tunnel, 421
//! `misdirected` for a request naming another host, nothing sent.

use std::sync::Arc;

use http::{Method, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::common::tls::TestPki;
use crate::common::tunnel::{Ca, Through, connect, intercepting, tls};
use crate::common::{Behavior, FakeProvider, Proxy, assert_next};

/// A TLS provider (`https://localhost:PORT`) behind a proxy with `[intercept]` and `tunnel`.
async fn start(ca: &Ca, tunnel: &[String]) -> (FakeProvider, Proxy) {
    let provider = FakeProvider::start_tls(Behavior::echo()).await;
    let builder = Proxy::builder().policy("pay", &provider.policy("pay", ""));
    let proxy = intercepting(builder, ca, tunnel).start().await;
    (provider, proxy)
}

/// The problem+json body of a refused CONNECT, after its status `status`.
fn refusal(head: &str, status: u16, kind: &str) -> serde_json::Value {
    assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{head}");
    let body = &head[head.find("\r\n\r\n").expect("a head") + 4..];
    let body: serde_json::Value = serde_json::from_str(body).expect("a problem body");
    assert_eq!(body["type"], format!("urn:idemproxy:{kind}"), "{body}");
    body
}

#[tokio::test]
async fn without_intercept_connect_is_501() {
    let provider = FakeProvider::start_tls(Behavior::echo()).await;
    let proxy = Proxy::builder()
        .policy("pay", &provider.policy("pay", ""))
        .start()
        .await;
    let target = format!("localhost:{}", provider.addr().port());
    let (status, head, _) = connect(proxy.proxy_addr(), &target).await;
    assert_eq!(status, 501);
    let body = refusal(&head, 501, "connect-not-supported");
    assert_next(&body, "fix_request", &["[intercept]"]);
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test]
async fn connect_to_a_host_nothing_names_is_403_no_route() {
    let ca = Ca::new();
    let (provider, proxy) = start(&ca, &[]).await;
    let other_port = format!("localhost:{}", provider.addr().port() ^ 1);
    for target in ["example.com:443", "127.0.0.1:22", other_port.as_str()] {
        let (status, head, _) = connect(proxy.proxy_addr(), target).await;
        assert_eq!(status, 403, "{target}: {head}");
        let body = refusal(&head, 403, "no-route");
        assert_next(&body, "stop", &["not an open proxy"]);
    }
    assert_eq!(provider.request_count(), 0);
}

/// A TLS echo server of its own test CA on 127.0.0.1: what a `tunnel` entry points at.
async fn tls_echo() -> (std::net::SocketAddr, TestPki) {
    let pki = TestPki::generate();
    let acceptor = tokio_rustls::TlsAcceptor::from(pki.server_config());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                while let Ok(n) = tls.read(&mut buf).await {
                    if n == 0 || tls.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, pki)
}

#[tokio::test]
async fn a_tunnel_entry_passes_bytes_untouched() {
    let (echo, pki) = tls_echo().await;
    let ca = Ca::new();
    let (_provider, proxy) = start(&ca, &[echo.to_string()]).await;
    let (status, head, stream) = connect(proxy.proxy_addr(), &echo.to_string()).await;
    assert_eq!(status, 200, "{head}");
    // The echo server's own certificate, trusted through its own CA: the proxy is not in
    // the TLS session at all.
    let connector = tokio_rustls::TlsConnector::from(Arc::new(pki.client_config()));
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let mut tls = connector
        .connect(name, stream)
        .await
        .expect("TLS end to end");
    for message in [&b"hello through the tunnel"[..], b"\x00\x01binary\xff"] {
        tls.write_all(message).await.expect("write");
        let mut back = vec![0u8; message.len()];
        tls.read_exact(&mut back).await.expect("echoed");
        assert_eq!(back, message);
    }
}

#[tokio::test]
async fn a_tunnel_entry_that_cannot_be_reached_is_502_not_200() {
    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let target = closed.local_addr().expect("addr").to_string();
    drop(closed);
    let ca = Ca::new();
    let (_provider, proxy) = start(&ca, std::slice::from_ref(&target)).await;
    let (status, head, _) = connect(proxy.proxy_addr(), &target).await;
    assert_eq!(status, 502, "{head}");
    refusal(&head, 502, "upstream-unreachable");
}

#[tokio::test]
async fn a_request_for_another_host_inside_the_tunnel_is_421_and_not_sent() {
    let ca = Ca::new();
    let (provider, proxy) = start(&ca, &[]).await;
    for h2 in [false, true] {
        let client = Through {
            proxy: proxy.proxy_addr(),
            ca: &ca,
            host: "localhost",
            port: provider.addr().port(),
            h2,
        };
        for other in ["api.other.example", "localhost:1"] {
            let resp = client
                .send_for(other, Method::POST, "/v1/refunds", &[], "amount=1")
                .await;
            let body =
                crate::common::problem(&resp, StatusCode::MISDIRECTED_REQUEST, "misdirected");
            assert_next(&body, "fix_request", &[other, "tunnel"]);
        }
        let ok = client.send(Method::GET, "/v1/refunds", &[], "").await;
        assert_eq!(ok.status, StatusCode::OK, "the tunnel's own host is served");
    }
    assert_eq!(
        provider.request_count(),
        2,
        "only the tunnel's own host was sent on"
    );
}

#[tokio::test]
async fn the_leaf_names_the_host_and_is_signed_by_the_ca() {
    let ca = Ca::new();
    let (provider, proxy) = start(&ca, &[]).await;
    let target = format!("localhost:{}", provider.addr().port());
    let (status, _, stream) = connect(proxy.proxy_addr(), &target).await;
    assert_eq!(status, 200);
    // `tls` trusts only the CA and verifies the name `localhost`; it fails the test otherwise.
    let tls = tls(stream, "localhost", &ca, &[b"h2", b"http/1.1"]).await;
    assert_eq!(
        tls.get_ref().1.alpn_protocol(),
        Some(&b"h2"[..]),
        "h2 offered first"
    );
}
