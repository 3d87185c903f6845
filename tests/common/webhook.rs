//! `FakeWebhook`: an in-process receiver of the proxy's notifications on 127.0.0.1:0 that
//! records every POST (headers and body) and answers as told: a status, or never (hang).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::client::{Body, full};

/// How long `wait_for` waits before failing the test.
const WAIT: Duration = Duration::from_secs(20);

/// How the receiver answers.
#[derive(Clone, Copy, Debug)]
pub enum Hook {
    Status(u16),
    /// Reads the request, records it, never answers.
    Hang,
}

/// One notification as received.
#[derive(Clone, Debug)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Received {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

struct Shared {
    hook: Hook,
    got: Mutex<Vec<Received>>,
    count: watch::Sender<usize>,
}

/// The receiver; dropping it stops accepting.
pub struct FakeWebhook {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Drop for FakeWebhook {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl FakeWebhook {
    pub async fn start(hook: Hook) -> FakeWebhook {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind webhook");
        let addr = listener.local_addr().expect("webhook addr");
        let shared = Arc::new(Shared {
            hook,
            got: Mutex::new(Vec::new()),
            count: watch::Sender::new(0),
        });
        let accept = tokio::spawn(accept(listener, shared.clone()));
        FakeWebhook {
            addr,
            shared,
            accept,
        }
    }

    /// The URL to configure, with a path that stands for a chat webhook's token.
    pub fn url(&self) -> String {
        format!("http://{}/hooks/T0K3N-in-path", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared
            .got
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until at least `n` notifications arrived; returns all of them.
    pub async fn wait_for(&self, n: usize) -> Vec<Received> {
        let mut count = self.shared.count.subscribe();
        let reached = tokio::time::timeout(WAIT, count.wait_for(|c| *c >= n)).await;
        assert!(
            reached.is_ok(),
            "{n} notifications expected within {WAIT:?}, got {:#?}",
            self.received()
                .iter()
                .map(|r| String::from_utf8_lossy(&r.body).into_owned())
                .collect::<Vec<_>>()
        );
        self.received()
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    while let Ok((stream, _)) = listener.accept().await {
        let shared = shared.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| receive(shared.clone(), req));
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, svc)
                .await;
        });
    }
}

async fn receive(
    shared: Arc<Shared>,
    req: http::Request<Incoming>,
) -> Result<Response<Body>, hyper::Error> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    shared
        .got
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Received {
            headers: parts.headers,
            body,
        });
    shared.count.send_modify(|c| *c += 1);
    match shared.hook {
        Hook::Status(status) => Ok(Response::builder()
            .status(status)
            .body(full(""))
            .expect("answer")),
        Hook::Hang => std::future::pending().await,
    }
}
