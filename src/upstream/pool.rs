//! The HTTP/1.1 connection pool for a plain-`http` provider: idle keep-alive connections made
//! with `hyper::client::conn::http1`, reused last-in first-out.
//!
//! It does what hyper-util's pooled client does for such an upstream (the same `Host` and
//! origin-form request target, the same retry of a request a reused connection gave back
//! unsent, the same error kinds) with less work per request: no checkout racing a connect,
//! no task spawned to return a connection, no pool key built and hashed. A connection goes
//! back to the pool when its response body has been read to the end (`Body`); a body dropped
//! before its end closes the connection, since what is left of it would otherwise be read as
//! the next response. It never decides whether a request may be sent.

use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::{Authority, PathAndQuery};
use http::{HeaderValue, Method, Request, Response, Uri, Version, header};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use tower_service::Service;

use super::{Dial, SendError, describe};
use crate::wire::ProxyBody;

/// Idle connections kept per provider; one returned beyond this is closed.
const MAX_IDLE: usize = 1024;

/// Pooled HTTP/1.1 connections to one plain-`http` upstream.
pub(super) struct Pool {
    /// The upstream's authority: a request to another (never made by the proxy) is not ours.
    authority: Authority,
    /// `Host` as hyper-util's client sets it: the host, and the port if not 80.
    host: HeaderValue,
    dial: Dial,
    idle_timeout: Duration,
    idle: Mutex<Vec<Idle>>,
    /// Whether the task closing connections idle past `idle_timeout` runs.
    reaping: std::sync::atomic::AtomicBool,
}

struct Idle {
    tx: SendRequest<ProxyBody>,
    since: Instant,
}

impl Pool {
    /// A pool for the upstream of `base` (any URI of it), or `None` unless it is plain `http`.
    pub(super) fn new(base: &Uri, dial: Dial, idle_timeout: Duration) -> Option<Arc<Pool>> {
        if base.scheme() != Some(&http::uri::Scheme::HTTP) {
            return None;
        }
        let authority = base.authority()?.clone();
        let host = match base.port_u16().filter(|p| *p != 80) {
            Some(port) => format!("{}:{port}", base.host()?),
            None => base.host()?.to_owned(),
        };
        Some(Arc::new(Pool {
            authority,
            host: HeaderValue::try_from(host).ok()?,
            dial,
            idle_timeout,
            idle: Mutex::new(Vec::new()),
            reaping: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// Whether this pool sends `req`: HTTP/1.x to the pool's own authority, not CONNECT.
    pub(super) fn takes(&self, req: &Request<ProxyBody>) -> bool {
        matches!(req.version(), Version::HTTP_11 | Version::HTTP_10)
            && req.method() != Method::CONNECT
            && req.uri().scheme() == Some(&http::uri::Scheme::HTTP)
            && req.uri().authority().is_some_and(|a| {
                // The same bytes (`target_uri` made both) before the comparison ignoring case.
                a.as_str() == self.authority.as_str() || *a == self.authority
            })
    }

    /// Sends `req` on an idle connection, or a new one, and waits for the response head.
    pub(super) async fn send(
        self: &Arc<Self>,
        mut req: Request<ProxyBody>,
    ) -> Result<Response<Body>, SendError> {
        req.headers_mut()
            .entry(header::HOST)
            .or_insert_with(|| self.host.clone());
        origin_form(req.uri_mut());
        loop {
            let (mut tx, reused) = match self.checkout() {
                Some(tx) => (tx, true),
                None => (self.connect().await?, false),
            };
            match tx.try_send_request(req).await {
                Ok(resp) => {
                    let pool = Arc::downgrade(self);
                    return Ok(resp.map(|inner| Body {
                        inner,
                        back: Some((tx, pool)),
                    }));
                }
                Err(mut e) => match e.take_message() {
                    // Given back unsent by a reused connection that closed: try another.
                    Some(unsent) if reused => req = unsent,
                    _ => return Err(SendError::Lost(describe(e.error()))),
                },
            }
        }
    }

    /// The most recently returned idle connection still open and ready; drops the rest it
    /// meets on the way (closed, or idle too long).
    fn checkout(&self) -> Option<SendRequest<ProxyBody>> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(entry) = idle.pop() {
            if entry.tx.is_ready() && entry.since.elapsed() < self.idle_timeout {
                return Some(entry.tx);
            }
        }
        None
    }

    async fn connect(self: &Arc<Self>) -> Result<SendRequest<ProxyBody>, SendError> {
        let uri = Uri::from_parts({
            let mut parts = http::uri::Parts::default();
            parts.scheme = Some(http::uri::Scheme::HTTP);
            parts.authority = Some(self.authority.clone());
            parts.path_and_query = Some(PathAndQuery::from_static("/"));
            parts
        })
        .map_err(|e| SendError::Connect(e.to_string()))?;
        let io = self
            .dial
            .clone()
            .call(uri)
            .await
            .map_err(|e| SendError::Connect(describe(&*e)))?;
        let (tx, conn) = http1::Builder::new()
            .handshake(io)
            .await
            .map_err(|e| SendError::Connect(describe(&e)))?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        self.start_reaping();
        Ok(tx)
    }

    /// Takes back a connection whose exchange is over, once it is ready for the next.
    fn give_back(pool: &Weak<Pool>, mut tx: SendRequest<ProxyBody>) {
        if tx.is_ready() {
            if let Some(pool) = pool.upgrade() {
                pool.keep(tx);
            }
            return;
        }
        if tx.is_closed() {
            return;
        }
        // Not ready yet (its connection has not yet asked for the next request, or the
        // request body is still being sent): returned once it is. A body dropped outside the
        // runtime (as it shuts down) closes its connection instead.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let pool = pool.clone();
        runtime.spawn(async move {
            if tx.ready().await.is_ok()
                && let Some(pool) = pool.upgrade()
            {
                pool.keep(tx);
            }
        });
    }

    fn keep(&self, tx: SendRequest<ProxyBody>) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(Idle {
                tx,
                since: Instant::now(),
            });
        }
    }

    /// Closes, now and then, connections idle past `idle_timeout`: without it a pool nobody
    /// sends through would hold its connections open for ever.
    fn start_reaping(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        if self.reaping.swap(true, Ordering::AcqRel) {
            return;
        }
        let pool = Arc::downgrade(self);
        let every = self.idle_timeout / 2;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(pool) = pool.upgrade() else { return };
                let mut idle = pool.idle.lock().unwrap_or_else(|e| e.into_inner());
                idle.retain(|e| !e.tx.is_closed() && e.since.elapsed() < pool.idle_timeout);
            }
        });
    }

    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.idle.lock().unwrap().len()
    }
}

/// `/path?query` from an absolute URI, as hyper-util's client sends it to an origin server.
fn origin_form(uri: &mut Uri) {
    *uri = match uri.path_and_query() {
        Some(path) if path.as_str() != "/" => {
            let mut parts = http::uri::Parts::default();
            parts.path_and_query = Some(path.clone());
            Uri::from_parts(parts).unwrap_or_default()
        }
        _ => Uri::default(),
    };
}

/// A response body from the pool: when it has been read to its end, its connection goes
/// back to the pool.
pub struct Body {
    inner: Incoming,
    back: Option<(SendRequest<ProxyBody>, Weak<Pool>)>,
}

impl Body {
    /// A body from a connection that is not pooled here (hyper-util's client).
    pub(super) fn unpooled(inner: Incoming) -> Body {
        Body { inner, back: None }
    }

    fn ended(&mut self) {
        if let Some((tx, pool)) = self.back.take() {
            Pool::give_back(&pool, tx);
        }
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &frame {
            None => this.ended(),
            Some(Ok(_)) if this.inner.is_end_stream() => this.ended(),
            // A broken body: its connection is not reused.
            Some(Err(_)) => this.back = None,
            Some(Ok(_)) => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Body {
    /// A body nobody read because it was empty (`HEAD`, `204`, `Content-Length: 0`) still
    /// gives its connection back; one dropped part-way closes it.
    fn drop(&mut self) {
        if http_body::Body::is_end_stream(&self.inner) {
            self.ended();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn pool_for(addr: std::net::SocketAddr) -> Arc<Pool> {
        let base: Uri = format!("http://{addr}/").parse().unwrap();
        Pool::new(&base, super::super::dial(None), Duration::from_secs(60)).unwrap()
    }

    fn get(addr: std::net::SocketAddr, path: &str) -> Request<ProxyBody> {
        let mut req = Request::new(crate::wire::full(Bytes::new()));
        *req.uri_mut() = format!("http://{addr}{path}").parse().unwrap();
        req
    }

    /// A server answering each request head on a connection with `answer`, counting the
    /// connections it accepted and recording each head it read.
    async fn server(
        answer: &'static [u8],
        close_after_each: bool,
    ) -> (
        std::net::SocketAddr,
        Arc<Mutex<Vec<String>>>,
        Arc<Mutex<usize>>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let conns = Arc::new(Mutex::new(0));
        let (h, c) = (heads.clone(), conns.clone());
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                *c.lock().unwrap() += 1;
                let h = h.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let Ok(n) = s.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head: Vec<u8> = buf.drain(..end + 4).collect();
                            h.lock()
                                .unwrap()
                                .push(String::from_utf8_lossy(&head).into());
                            s.write_all(answer).await.unwrap();
                            if close_after_each {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (addr, heads, conns)
    }

    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

    #[tokio::test]
    async fn a_connection_is_reused_once_its_body_is_read() {
        let (addr, heads, conns) = server(OK, false).await;
        let pool = pool_for(addr);
        for path in ["/a?x=1", "/", "/b"] {
            let resp = pool.send(get(addr, path)).await.unwrap();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"ok");
        }
        assert_eq!(*conns.lock().unwrap(), 1);
        let heads = heads.lock().unwrap();
        assert!(
            heads[0].starts_with("GET /a?x=1 HTTP/1.1\r\n"),
            "{}",
            heads[0]
        );
        assert!(heads[1].starts_with("GET / HTTP/1.1\r\n"), "{}", heads[1]);
        let host = format!("host: {addr}\r\n");
        assert!(heads.iter().all(|h| h.to_ascii_lowercase().contains(&host)));
    }

    #[tokio::test]
    async fn an_empty_body_dropped_unread_gives_its_connection_back() {
        const EMPTY: &[u8] = b"HTTP/1.1 204 No Content\r\n\r\n";
        let (addr, _, conns) = server(EMPTY, false).await;
        let pool = pool_for(addr);
        for _ in 0..3 {
            let resp = pool.send(get(addr, "/")).await.unwrap();
            assert_eq!(resp.status(), 204);
            drop(resp);
        }
        assert_eq!(*conns.lock().unwrap(), 1);
    }

    #[tokio::test]
    async fn a_body_dropped_part_way_closes_its_connection() {
        const LONG: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial";
        let (addr, _, conns) = server(LONG, false).await;
        let pool = pool_for(addr);
        let resp = pool.send(get(addr, "/")).await.unwrap();
        drop(resp);
        assert_eq!(pool.idle_count(), 0);
        let resp = pool.send(get(addr, "/")).await.unwrap();
        drop(resp);
        assert_eq!(*conns.lock().unwrap(), 2);
    }

    #[tokio::test]
    async fn an_upstream_that_closes_after_each_answer_gets_a_new_connection_each_time() {
        const CLOSE: &[u8] = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok";
        let (addr, heads, conns) = server(CLOSE, true).await;
        let pool = pool_for(addr);
        for _ in 0..3 {
            let resp = pool.send(get(addr, "/")).await.unwrap();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"ok");
        }
        assert_eq!(*conns.lock().unwrap(), 3);
        assert_eq!(heads.lock().unwrap().len(), 3);
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let pool = pool_for(addr);
        match pool.send(get(addr, "/")).await {
            Err(SendError::Connect(_)) => {}
            Err(other) => panic!("expected a connect error, got {other:?}"),
            Ok(_) => panic!("expected a connect error, got an answer"),
        }
    }

    #[test]
    fn host_and_authority_follow_the_upstream_url() {
        let dial = || super::super::dial(None);
        let idle = Duration::from_secs(1);
        let p = Pool::new(&"http://api.test/".parse().unwrap(), dial(), idle).unwrap();
        assert_eq!(p.host, "api.test");
        let p = Pool::new(&"http://api.test:80/".parse().unwrap(), dial(), idle).unwrap();
        assert_eq!(p.host, "api.test");
        let p = Pool::new(&"http://[::1]:8080/x".parse().unwrap(), dial(), idle).unwrap();
        assert_eq!(p.host, "[::1]:8080");
        assert!(Pool::new(&"https://api.test/".parse().unwrap(), dial(), idle).is_none());
        let mut other = get("127.0.0.1:1".parse().unwrap(), "/");
        assert!(!p.takes(&other));
        *other.uri_mut() = "http://[::1]:8080/y".parse().unwrap();
        assert!(p.takes(&other));
        *other.version_mut() = Version::HTTP_2;
        assert!(!p.takes(&other));
    }
}
