//! An HTTP/2 request body that a client resets with `RST_STREAM(NO_ERROR)` before its end is
//! a body that broke off (docs/reference.md section 5.3): nothing is recorded or sent. hyper
//! reads such a reset as the end of the body (it is how a server may stop an upload early),
//! so before 2026-12-03 the part that had arrived was recorded and sent as the whole request:
//! a refund of `amount=10` for one of `amount=1000`.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};

use crate::common::{self, Behavior, FakeProvider, Proxy, route};

async fn start() -> (FakeProvider, Proxy) {
    let provider = FakeProvider::start(Behavior::echo()).await;
    let refund = route(
        "create_refund",
        "POST /v1/refunds",
        &["{header:x-operation-id}"],
    );
    let proxy = Proxy::builder()
        .policy("acme", &provider.policy("acme", &refund))
        .start()
        .await;
    (provider, proxy)
}

/// Sends the head and `part` of a body over h2c, then resets the stream with `NO_ERROR`.
async fn reset_midway(proxy: &Proxy, op: &str, content_length: Option<usize>, part: &'static [u8]) {
    let tcp = tokio::net::TcpStream::connect(proxy.proxy_addr())
        .await
        .expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut client = client.ready().await.expect("ready");
    let mut head = Request::builder()
        .method(Method::POST)
        .uri(proxy.url("/acme/v1/refunds"))
        .header("x-operation-id", op)
        .header("content-type", "application/x-www-form-urlencoded");
    if let Some(n) = content_length {
        head = head.header("content-length", n);
    }
    let (_answer, mut stream) = client
        .send_request(head.body(()).expect("request"), false)
        .expect("send the head");
    stream.reserve_capacity(part.len());
    stream
        .send_data(Bytes::from_static(part), false)
        .expect("send a part of the body");
    // Let the part reach the proxy before the reset.
    tokio::time::sleep(Duration::from_millis(100)).await;
    stream.send_reset(h2::Reason::NO_ERROR);
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::test]
async fn a_body_reset_with_no_error_before_its_end_is_neither_recorded_nor_sent() {
    let (provider, proxy) = start().await;
    // Without a length the reset is the only sign; with one, the length says it too.
    for (op, length) in [("op-rst", None), ("op-rst-len", Some(24))] {
        reset_midway(&proxy, op, length, b"amount=10").await;
        let show = proxy.admin_url(&format!("/ops/acme%2Fcreate_refund%2F{op}"));
        let shown = common::send(Method::GET, &show, &[], "")
            .await
            .expect("admin answers");
        assert_eq!(
            shown.status,
            StatusCode::NOT_FOUND,
            "{op}: {}",
            shown.text()
        );
    }
    assert_eq!(provider.request_count(), 0, "nothing was sent");

    // The same request whole is taken as usual.
    let whole = common::send(
        Method::POST,
        &proxy.url("/acme/v1/refunds"),
        &[
            ("x-operation-id", "op-rst"),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        "amount=1000&currency=usd".to_string(),
    )
    .await
    .expect("the proxy answers");
    assert_eq!(whole.status, StatusCode::OK, "{}", whole.text());
    assert_eq!(provider.request_count(), 1);
}
