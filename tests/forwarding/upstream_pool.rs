//! The connections to a plain-`http` provider: kept alive and reused between requests, a new
//! one when the provider closes them, and never reused while an answer's body is unread (what
//! is left of it would be taken for the next answer).
//!
//! The provider here is a socket-level server that counts its connections and answers each
//! request head with a fixed answer, so what travels on each connection is known exactly.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::{Method, StatusCode};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::common::files::policy;
use crate::common::{self, Proxy, send};

/// A provider answering every request head with `answer(n)` (n counts the requests, from 0),
/// closing the connection after each answer when `close` says so; it counts connections.
struct Upstream {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl Upstream {
    async fn start(answer: fn(usize) -> Vec<u8>, close: bool) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let requests = requests.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = stream.read(&mut buf).await {
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            seen.drain(..end + 4);
                            let n = requests.fetch_add(1, Ordering::SeqCst);
                            if stream.write_all(&answer(n)).await.is_err() || close {
                                return;
                            }
                        }
                    }
                });
            }
        });
        Upstream { addr, connections }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    async fn proxy(&self) -> Proxy {
        let upstream = format!("http://{}", self.addr);
        Proxy::builder()
            .policy("plain", &policy("plain", &upstream, ""))
            .start()
            .await
    }
}

fn ok(n: usize) -> Vec<u8> {
    let body = format!("answer {n}");
    format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Each of the proxy's shards (one per core) keeps its own upstream connections, and the
/// agent's connections are handed to the shards in turn: consecutive requests use one
/// upstream connection per shard, kept alive.
#[tokio::test]
async fn one_connection_carries_consecutive_requests() {
    let upstream = Upstream::start(ok, false).await;
    let proxy = upstream.proxy().await;
    let shards = std::thread::available_parallelism().map_or(1, |n| n.get());
    let requests = 4 * shards + 1;
    for n in 0..requests {
        let resp = send(Method::GET, &proxy.url("/plain/v1/x"), &[], "")
            .await
            .expect("answer");
        assert_eq!(resp.status, StatusCode::OK);
        assert_eq!(resp.text(), format!("answer {n}"));
    }
    assert_eq!(
        upstream.connections(),
        shards,
        "one connection per shard, kept alive"
    );
}

#[tokio::test]
async fn a_provider_closing_after_each_answer_gets_a_new_connection_each_time() {
    fn closing(n: usize) -> Vec<u8> {
        let body = format!("answer {n}");
        format!(
            "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }
    let upstream = Upstream::start(closing, true).await;
    let proxy = upstream.proxy().await;
    for n in 0..3 {
        let resp = send(Method::GET, &proxy.url("/plain/v1/x"), &[], "")
            .await
            .expect("answer");
        assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
        assert_eq!(resp.text(), format!("answer {n}"));
        assert_eq!(resp.header("connection"), None, "hop-by-hop, not forwarded");
    }
    assert_eq!(upstream.connections(), 3);
}

/// The first answer announces 100 000 bytes and sends a few; the agent hangs up after them.
/// The rest of that body never comes, so its connection must not carry the next request.
#[tokio::test]
async fn a_connection_whose_answer_was_abandoned_is_not_reused() {
    fn first_unfinished(n: usize) -> Vec<u8> {
        match n {
            0 => b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\nthe start".to_vec(),
            n => ok(n),
        }
    }
    let upstream = Upstream::start(first_unfinished, false).await;
    let proxy = upstream.proxy().await;
    let client = common::client();
    let req = http::Request::get(proxy.url("/plain/v1/big"))
        .body(common::client::full(""))
        .expect("request");
    let resp = client.request(req).await.expect("answer head");
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let first = body.frame().await.expect("a frame").expect("bytes");
    assert_eq!(first.into_data().ok().as_deref(), Some(&b"the start"[..]));
    drop(body);
    drop(client);

    let resp = send(Method::GET, &proxy.url("/plain/v1/x"), &[], "")
        .await
        .expect("answer");
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    assert_eq!(resp.text(), "answer 1");
    assert_eq!(upstream.connections(), 2);
}
