//! Inbound connection limits (issue 7 item 13): a connection that sends nothing, or stops in
//! the middle of a request head, or idles after an answer, is closed after `header_timeout`;
//! at most `max_connections` agent connections are served at once (more wait in the listen
//! backlog until one closes); and when accepting fails (out of file descriptors) the proxy
//! logs it, backs off instead of spinning, and serves again once descriptors free up.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::common::raw::{closed_by_server, connect, log_line, read_answer, write};
use crate::common::{self, Behavior, FakeProvider, Proxy, send};

async fn start(limits: &str) -> (FakeProvider, Proxy) {
    let provider = FakeProvider::start(Behavior::fixed(200, "ok")).await;
    let proxy = Proxy::builder()
        .policy("p", &provider.policy("p", ""))
        .config(&format!("[limits]\n{limits}"))
        .start()
        .await;
    (provider, proxy)
}

async fn still_serving(proxy: &Proxy) {
    let resp = send(Method::GET, &proxy.url("/p/after"), &[], "")
        .await
        .expect("the proxy still answers");
    assert_eq!(resp.status, StatusCode::OK);
}

const GET: &[u8] = b"GET /p/x HTTP/1.1\r\nhost: proxy\r\n\r\n";

#[tokio::test]
async fn a_silent_connection_is_closed_after_header_timeout() {
    let (provider, proxy) = start("header_timeout = \"300ms\"\n").await;
    let mut silent = connect(proxy.proxy_addr()).await;
    let sent = closed_by_server(&mut silent).await;
    assert!(sent.is_empty(), "nothing to answer: {sent:?}");
    // One byte of what could be the h2 preface, then nothing.
    let mut started = connect(proxy.proxy_addr()).await;
    write(&mut started, b"P").await;
    closed_by_server(&mut started).await;
    assert_eq!(provider.request_count(), 0);
    still_serving(&proxy).await;
}

#[tokio::test]
async fn a_head_that_stops_midway_is_closed_after_header_timeout() {
    let (provider, proxy) = start("header_timeout = \"300ms\"\n").await;
    let mut partial = connect(proxy.proxy_addr()).await;
    write(&mut partial, b"GET /p/x HTTP/1.1\r\nhost: pro").await;
    closed_by_server(&mut partial).await;
    assert_eq!(provider.request_count(), 0);
    // An idle keep-alive connection is closed the same way after its answer.
    let mut idle = connect(proxy.proxy_addr()).await;
    write(&mut idle, GET).await;
    assert_eq!(read_answer(&mut idle).await.status, 200);
    closed_by_server(&mut idle).await;
    assert_eq!(provider.request_count(), 1);
}

/// Waiting for an answer, or for the rest of its body, is not waiting for a head: a slow
/// answer (its head and each half of its body later than `header_timeout`) is not cut, the
/// next request on the connection is served, and the wait after that answer is timed again.
#[tokio::test]
async fn a_slow_answer_is_not_cut_and_the_wait_after_it_is_timed_again() {
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = upstream.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = upstream.accept().await.unwrap();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let (mut buf, mut chunk) = (Vec::new(), [0u8; 4096]);
                loop {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.clear();
                    let pause = Duration::from_millis(500);
                    tokio::time::sleep(pause).await;
                    let head = b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nabc";
                    s.write_all(head).await.unwrap();
                    tokio::time::sleep(pause).await;
                    s.write_all(b"def").await.unwrap();
                }
            });
        }
    });
    let policy = common::files::policy_with_ca("p", &format!("http://{addr}"), None, "");
    let proxy = Proxy::builder()
        .policy("p", &policy)
        .config("[limits]\nheader_timeout = \"300ms\"\n")
        .start()
        .await;
    let mut conn = connect(proxy.proxy_addr()).await;
    for _ in 0..2 {
        write(&mut conn, GET).await;
        let answer = read_answer(&mut conn).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body, b"abcdef");
    }
    closed_by_server(&mut conn).await;
}

/// On h2, `header_timeout` bounds only the first request: a connection idle longer than it
/// afterwards stays open and serves the next request.
#[tokio::test]
async fn an_h2_connection_idle_after_its_first_request_stays_open() {
    let (provider, proxy) = start("header_timeout = \"300ms\"\n").await;
    let stream = tokio::net::TcpStream::connect(proxy.proxy_addr())
        .await
        .unwrap();
    let (mut h2, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake::<_, Full<Bytes>>(TokioIo::new(stream))
        .await
        .expect("an h2c connection");
    tokio::spawn(conn);
    for _ in 0..2 {
        let req = http::Request::get(proxy.url("/p/x"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = h2
            .send_request(req)
            .await
            .expect("served on the same connection");
        assert_eq!(resp.status(), StatusCode::OK);
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    assert_eq!(provider.request_count(), 2);
}

/// Decision: beyond `max_connections` a connection is not refused but left in the listen
/// backlog, answered as soon as a served one closes.
#[tokio::test]
async fn connections_beyond_max_connections_wait_for_a_free_one() {
    let (provider, proxy) = start("max_connections = 2\nheader_timeout = \"60s\"\n").await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut conn = connect(proxy.proxy_addr()).await;
        write(&mut conn, GET).await;
        assert_eq!(read_answer(&mut conn).await.status, 200);
        held.push(conn);
    }
    log_line(&proxy, "max_connections").await;
    let url = proxy.url("/p/third");
    let mut third = tokio::spawn(async move { send(Method::GET, &url, &[], "").await });
    // Not a timing assertion: only a broken limit could answer within this window.
    let early = tokio::time::timeout(Duration::from_millis(300), &mut third).await;
    assert!(early.is_err(), "the third connection was served: {early:?}");
    assert_eq!(provider.request_count(), 2);
    drop(held.pop());
    let third = third.await.expect("task").expect("the third is served");
    assert_eq!(third.status, StatusCode::OK);
    assert_eq!(provider.request_count(), 3);
}

/// The proxy runs with few file descriptors; connections beyond them make `accept` fail.
/// It logs that (instead of spinning silently) and serves again once they are closed.
#[tokio::test]
async fn accept_errors_are_logged_and_the_proxy_recovers() {
    let provider = FakeProvider::start(Behavior::fixed(200, "ok")).await;
    let bin = env!("CARGO_BIN_EXE_idemproxy");
    let proxy = Proxy::builder()
        .bin("sh", &["-c", "ulimit -n 48 && exec \"$0\" \"$@\"", bin])
        .policy("p", &provider.policy("p", ""))
        .config("[limits]\nheader_timeout = \"60s\"\n")
        .start()
        .await;
    still_serving(&proxy).await;
    let mut hogs = Vec::new();
    for _ in 0..64 {
        hogs.push(connect(proxy.proxy_addr()).await);
    }
    let log = log_line(&proxy, "cannot accept").await;
    assert!(log.contains("etry"), "the line says it retries: {log}");
    drop(hogs);
    still_serving(&proxy).await;
}
