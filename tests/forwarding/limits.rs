//! Inbound limits: request headers over 64 KiB are refused (431, or the connection closed)
//! on HTTP/1.1 and h2c, never forwarded, and the proxy keeps serving afterwards; ordinary
//! large headers (16 KiB) still pass. More than 100 header fields on HTTP/1.1 are refused too.

use http::{Method, StatusCode};

use crate::common::{self, Behavior, FakeProvider, Proxy, send, send_h2c};

const KIB: usize = 1024;

async fn start() -> (FakeProvider, Proxy) {
    let provider = FakeProvider::start(Behavior::fixed(200, "ok")).await;
    let proxy = Proxy::builder()
        .policy("p", &provider.policy("p", ""))
        .start()
        .await;
    (provider, proxy)
}

/// Whether an answer (or its absence) is a refusal of oversized headers.
fn refused<E: std::fmt::Debug>(answer: &Result<common::Resp, E>) -> bool {
    match answer {
        Ok(resp) => resp.status == StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        Err(_) => true,
    }
}

async fn still_serving(proxy: &Proxy) {
    let resp = send(Method::GET, &proxy.url("/p/after"), &[], "")
        .await
        .expect("the proxy still answers");
    assert_eq!(resp.status, StatusCode::OK);
}

#[tokio::test]
async fn headers_over_64_kib_are_refused_over_http1() {
    let (provider, proxy) = start().await;
    let big = "a".repeat(100 * KIB);
    let answer = send(Method::GET, &proxy.url("/p/big"), &[("x-big", &big)], "").await;
    assert!(refused(&answer), "{answer:?}");
    // Many headers adding up to the same size are refused too.
    let piece = "b".repeat(4 * KIB);
    let names: Vec<String> = (0..25).map(|i| format!("x-part-{i}")).collect();
    let many: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), piece.as_str())).collect();
    let answer = send(Method::GET, &proxy.url("/p/many"), &many, "").await;
    assert!(refused(&answer), "{answer:?}");
    assert_eq!(
        provider.request_count(),
        0,
        "an oversized request is never forwarded"
    );
    still_serving(&proxy).await;
}

#[tokio::test]
async fn headers_over_64_kib_are_refused_over_h2c() {
    let (provider, proxy) = start().await;
    let big = "a".repeat(100 * KIB);
    let answer = send_h2c(Method::GET, &proxy.url("/p/big"), &[("x-big", &big)], "").await;
    assert!(refused(&answer), "{answer:?}");
    assert_eq!(provider.request_count(), 0);
    still_serving(&proxy).await;
}

#[tokio::test]
async fn a_16_kib_header_passes() {
    let (provider, proxy) = start().await;
    let large = "c".repeat(16 * KIB);
    for answer in [
        send(Method::GET, &proxy.url("/p/h1"), &[("x-large", &large)], "").await,
        send_h2c(Method::GET, &proxy.url("/p/h2"), &[("x-large", &large)], "").await,
    ] {
        assert_eq!(answer.expect("answer").status, StatusCode::OK);
    }
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests
            .iter()
            .all(|r| r.header("x-large") == Some(large.as_str()))
    );
}

/// At most 100 header fields per HTTP/1.1 request (hyper's own limit): 95 pass, 101 are
/// refused and never forwarded.
#[tokio::test]
async fn more_than_100_header_fields_are_refused_over_http1() {
    let (provider, proxy) = start().await;
    let names: Vec<String> = (0..101).map(|i| format!("x-field-{i}")).collect();
    let fields =
        |n: usize| -> Vec<(&str, &str)> { names[..n].iter().map(|k| (k.as_str(), "v")).collect() };
    let fine = send(Method::GET, &proxy.url("/p/fine"), &fields(95), "").await;
    assert_eq!(fine.expect("answer").status, StatusCode::OK);
    let answer = send(Method::GET, &proxy.url("/p/many"), &fields(101), "").await;
    assert!(refused(&answer), "{answer:?}");
    assert_eq!(
        provider.request_count(),
        1,
        "only the request within the limit was forwarded"
    );
    still_serving(&proxy).await;
}
