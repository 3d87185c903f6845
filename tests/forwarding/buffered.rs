//! Guarded bodies under pressure (issue 7 item 13): all guarded requests together buffer at
//! most `max_buffered` body bytes (a request that would go over is answered 503
//! `overloaded` with `Retry-After` at once, before its body is read, and nothing is claimed
//! or sent), and a body that stalls is cut at `body_timeout` (408 `body-timeout`, nothing
//! claimed or sent).

use crate::common::guarded::*;
use crate::common::raw::{
    self, chunk, chunked_refund_head, connect, log_line, read_answer, refund_head, write,
};
use crate::common::{Behavior, FakeProvider, Proxy};

async fn start_with(provider: &FakeProvider, limits: &str) -> Proxy {
    builder(provider, "", &refund_route(""))
        .config(&format!("[limits]\n{limits}"))
        .start()
        .await
}

const LEN: usize = 40_000;

fn assert_overloaded(resp: &raw::RawResp) {
    let body = resp.json();
    assert_eq!(resp.status, 503, "{body}");
    assert_eq!(body["type"], "urn:idemproxy:overloaded", "{body}");
    assert_eq!(
        resp.header("content-type"),
        Some("application/problem+json")
    );
    let retry: u64 = resp
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After in seconds");
    assert!(retry >= 1);
}

#[tokio::test]
async fn bodies_beyond_max_buffered_get_503_and_nothing_is_claimed() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done")).await;
    let limits = "max_request_body = \"64 KiB\"\nmax_buffered = \"64 KiB\"\n";
    let mut proxy = start_with(&provider, limits).await;
    let body = vec![b'a'; LEN];

    // A slow body holds 40 000 of the 65 536 bytes.
    let mut slow = connect(proxy.proxy_addr()).await;
    write(&mut slow, refund_head("wf-slow", LEN).as_bytes()).await;
    write(&mut slow, &body[..100]).await;
    log_line(&proxy, "reserved").await;

    // Another declared 40 000 does not fit: refused before its body is read.
    let mut declared = connect(proxy.proxy_addr()).await;
    write(&mut declared, refund_head("wf-declared", LEN).as_bytes()).await;
    write(&mut declared, &body[..100]).await;
    assert_overloaded(&read_answer(&mut declared).await);
    // A chunked body is counted as it arrives and refused once it would go over.
    let mut chunked = connect(proxy.proxy_addr()).await;
    write(&mut chunked, chunked_refund_head("wf-chunked").as_bytes()).await;
    write(&mut chunked, &chunk(&body[..30_000])).await;
    assert_overloaded(&read_answer(&mut chunked).await);
    assert_eq!(provider.request_count(), 0);

    // The slow body ends; it is sent, and its bytes are free again afterwards.
    write(&mut slow, &body[100..]).await;
    assert_eq!(read_answer(&mut slow).await.status, 200);
    let again = refund(&proxy, "wf-later", &"a".repeat(LEN)).await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(provider.request_count(), 2);
    let ids = [op_id("wf-declared"), op_id("wf-chunked")];
    raw::unclaimed(&mut proxy, &[&ids[0], &ids[1]]).await;
}

#[tokio::test]
async fn a_body_that_stalls_is_cut_at_body_timeout() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done")).await;
    let mut proxy = start_with(&provider, "body_timeout = \"300ms\"\n").await;
    let mut stalled = connect(proxy.proxy_addr()).await;
    write(&mut stalled, refund_head("wf-stall", 100).as_bytes()).await;
    write(&mut stalled, b"amount=5").await;
    let resp = read_answer(&mut stalled).await;
    let body = resp.json();
    assert_eq!(resp.status, 408, "{body}");
    assert_eq!(body["type"], "urn:idemproxy:body-timeout", "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("Nothing was sent")
    );
    assert_eq!(provider.request_count(), 0);
    // A body sent at a normal pace still goes through.
    let ok = refund(&proxy, "wf-fine", "amount=5").await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    raw::unclaimed(&mut proxy, &[&op_id("wf-stall")]).await;
}

/// The admin API cuts a stalled body at `body_timeout` too: a POST whose body never arrives
/// is answered `408` and its connection let go. Before 2026-12-03 it was held open forever.
#[tokio::test]
async fn an_admin_call_whose_body_stalls_is_cut_at_body_timeout() {
    let provider = FakeProvider::start(Behavior::fixed(200, "done")).await;
    let proxy = start_with(&provider, "body_timeout = \"300ms\"\n").await;
    let mut stalled = connect(proxy.admin_addr()).await;
    let head = "POST /ops/pay%2Fcreate_refund%2Fwf-x/approve HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"rea";
    write(&mut stalled, head.as_bytes()).await;
    let resp = read_answer(&mut stalled).await;
    let body = resp.json();
    assert_eq!(resp.status, 408, "{body}");
    assert_eq!(body["type"], "urn:idemproxy:body-timeout", "{body}");
}
