//! The HTTP/1.1 connection pool for a plain-`http` provider: idle keep-alive connections made
//! with `hyper::client::conn::http1`, reused last-in first-out.
//!
//! It does what hyper-util's pooled client does for such an upstream (the same `Host` and
//! origin-form request target, the same retry of a request a reused connection gave back
//! unsent, the same error kinds) with less work per request: no checkout racing a connect,
//! no task spawned to return a connection, no pool key built and hashed. A connection goes
//! back to the pool when its response body (`ProviderBody`) has been read to the end; a body dropped
//! before its end closes the connection, since what is left of it would otherwise be read as
//! the next response. Each connection keeps one timer for the wait for its answers' heads,
//! moved on for each request: pushing a registered deadline later is one atomic write, where
//! a timer per request is registered with the runtime's timer wheel and removed again. It
//! never decides whether a request may be sent.

use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::{Authority, PathAndQuery};
use http::{HeaderValue, Method, Request, Response, Uri, Version, header};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use tokio::task::AbortHandle;
use tokio::time::Sleep;
use tower_service::Service;

use super::{Dial, Gate, SendError, describe};
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
    /// The idle connections of each shard (`crate::shard`) apart, and one list for every
    /// other thread: a connection is driven by a task on the runtime that opened it, so a
    /// request reuses only a connection of its own shard and wakes no other thread.
    idle: Box<[Mutex<Vec<Idle>>]>,
    /// Whether the task closing connections idle past `idle_timeout` runs.
    reaping: std::sync::atomic::AtomicBool,
}

struct Idle {
    conn: Conn,
    since: Instant,
}

/// One upstream connection: its request sender, and the timer bounding the wait for each
/// response head on it (polled only by an exchange that has a timeout).
struct Conn {
    tx: SendRequest<ProxyBody>,
    clock: Pin<Box<Sleep>>,
    /// The idle list it goes back to: its task's runtime's.
    home: usize,
    /// The task driving the connection, to tear it down at once (`Abandon`).
    task: AbortHandle,
}

/// Held while an exchange waits for its answer's head: dropped before that (the exchange
/// abandoned, at its deadline or because its caller went away), it aborts the connection's
/// task, so the socket is closed without a shutdown and, with `SO_LINGER` 0, reset: request
/// bytes the kernel still queued are dropped, never sent after the attempt gave up.
struct Abandon(Option<AbortHandle>);

impl Abandon {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Abandon {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
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
            idle: (0..slots()).map(|_| Mutex::new(Vec::new())).collect(),
            reaping: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// Whether this pool sends `req`: HTTP/1.x, not CONNECT, to the pool's own authority (an
    /// origin-form target is the provider's own upstream).
    pub(super) fn takes(&self, req: &Request<ProxyBody>) -> bool {
        let uri = req.uri();
        let ours = match uri.scheme() {
            None => uri.authority().is_none(),
            Some(scheme) => {
                *scheme == http::uri::Scheme::HTTP
                    && uri.authority().is_some_and(|a| {
                        // The same bytes (`target_uri` made both) before the comparison
                        // ignoring case.
                        a.as_str() == self.authority.as_str() || *a == self.authority
                    })
            }
        };
        ours && matches!(req.version(), Version::HTTP_11 | Version::HTTP_10)
            && req.method() != Method::CONNECT
    }

    /// Sends `req` on an idle connection, or a new one, and waits for the response head, for
    /// at most `within` (connecting included) when it is given. `gate`, if given, is checked
    /// once the connection is ready, right before the request is handed to it.
    pub(super) async fn send(
        self: &Arc<Self>,
        mut req: Request<ProxyBody>,
        within: Option<Duration>,
        gate: Option<Gate>,
    ) -> Result<Response<ProviderBody>, SendError> {
        let deadline = within.map(|within| (tokio::time::Instant::now() + within, within));
        req.headers_mut()
            .entry(header::HOST)
            .or_insert_with(|| self.host.clone());
        if req.uri().scheme().is_some() {
            origin_form(req.uri_mut());
        }
        loop {
            let (mut conn, reused) = match self.checkout() {
                Some(conn) => (conn, true),
                // Boxed: connecting is rare and its future large; inline, every request's
                // future would carry (and move) it.
                None => match deadline {
                    None => (Box::pin(self.connect()).await?, false),
                    Some((at, within)) => {
                        match tokio::time::timeout_at(at, Box::pin(self.connect())).await {
                            Ok(conn) => (conn?, false),
                            Err(_) => return Err(SendError::Timeout(within)),
                        }
                    }
                },
            };
            if let Some(gate) = &gate
                && let Err(refused) = super::gate::check(gate)
            {
                // The connection is unused: back to the pool (or closed, if not ready).
                Pool::give_back(&Arc::downgrade(self), conn);
                return Err(refused);
            }
            let abandon = Abandon(Some(conn.task.clone()));
            let sending = conn.tx.try_send_request(req);
            let sent = match deadline {
                None => sending.await,
                Some((at, within)) => {
                    conn.clock.as_mut().reset(at);
                    tokio::select! {
                        biased;
                        sent = sending => sent,
                        () = conn.clock.as_mut() => return Err(SendError::Timeout(within)),
                    }
                }
            };
            match sent {
                Ok(resp) => {
                    abandon.disarm();
                    let pool = Arc::downgrade(self);
                    return Ok(resp.map(|inner| ProviderBody {
                        inner,
                        back: Some((conn, pool)),
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
    fn checkout(&self) -> Option<Conn> {
        let mut idle = self.idle[slot(self.idle.len())]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        while let Some(entry) = idle.pop() {
            if entry.conn.tx.is_ready() && entry.since.elapsed() < self.idle_timeout {
                return Some(entry.conn);
            }
        }
        None
    }

    async fn connect(self: &Arc<Self>) -> Result<Conn, SendError> {
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
        // One buffer per write, as the agents' side (`server`) writes.
        let (tx, conn) = http1::Builder::new()
            .writev(false)
            .handshake(io)
            .await
            .map_err(|e| SendError::Connect(describe(&e)))?;
        let task = tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        })
        .abort_handle();
        self.start_reaping();
        // Set by the first exchange with a timeout; until then not in the timer wheel.
        let clock = Box::pin(tokio::time::sleep(Duration::MAX));
        let home = slot(self.idle.len());
        Ok(Conn {
            tx,
            clock,
            home,
            task,
        })
    }

    /// Takes back a connection whose exchange is over, once it is ready for the next.
    fn give_back(pool: &Weak<Pool>, mut conn: Conn) {
        if conn.tx.is_ready() {
            if let Some(pool) = pool.upgrade() {
                pool.keep(conn);
            }
            return;
        }
        if conn.tx.is_closed() {
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
            if conn.tx.ready().await.is_ok()
                && let Some(pool) = pool.upgrade()
            {
                pool.keep(conn);
            }
        });
    }

    fn keep(&self, conn: Conn) {
        let mut idle = self.idle[conn.home]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(Idle {
                conn,
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
                for idle in &pool.idle {
                    let mut idle = idle.lock().unwrap_or_else(|e| e.into_inner());
                    idle.retain(|e| {
                        !e.conn.tx.is_closed() && e.since.elapsed() < pool.idle_timeout
                    });
                }
            }
        });
    }

    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.idle
            .iter()
            .map(|idle| idle.lock().unwrap().len())
            .sum()
    }
}

/// How many idle lists a pool keeps: one per shard that may run, and one for other threads.
fn slots() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()) + 1
}

/// The idle list of the calling thread, among `slots`: its shard's (shards past the count
/// share), else the last one.
fn slot(slots: usize) -> usize {
    match crate::shard::current() {
        Some(shard) => shard % (slots - 1).max(1),
        None => slots - 1,
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

/// A provider's response body: when it came from the pool and has been read to its end, its
/// connection goes back to the pool.
pub struct ProviderBody {
    inner: Incoming,
    back: Option<(Conn, Weak<Pool>)>,
}

impl ProviderBody {
    /// A body from a connection that is not pooled here (hyper-util's client).
    pub(super) fn unpooled(inner: Incoming) -> ProviderBody {
        ProviderBody { inner, back: None }
    }

    fn ended(&mut self) {
        if let Some((conn, pool)) = self.back.take() {
            Pool::give_back(&pool, conn);
        }
    }
}

impl http_body::Body for ProviderBody {
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

impl Drop for ProviderBody {
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
    use crate::upstream::Refusal;
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

    /// A gate that refuses once the connection is ready: nothing reaches the server, and the
    /// exchange is a connect error (never sent); a gate that lets it go sends it.
    #[tokio::test]
    async fn a_refusing_gate_sends_nothing_on_a_new_or_a_pooled_connection() {
        let (addr, heads, conns) = server(OK, false).await;
        let pool = pool_for(addr);
        let refuse: Gate = Arc::new(|| Err(Refusal::Ledger("the lease lapsed")));
        for _ in 0..2 {
            match pool.send(get(addr, "/"), None, Some(refuse.clone())).await {
                Err(SendError::Connect(why)) => assert!(why.contains("lease lapsed"), "{why}"),
                Err(other) => panic!("expected a connect error, got {other:?}"),
                Ok(_) => panic!("a refused exchange was sent"),
            }
        }
        assert!(heads.lock().unwrap().is_empty(), "nothing was written");
        let pass: Gate = Arc::new(|| Ok(()));
        let resp = pool.send(get(addr, "/"), None, Some(pass)).await.unwrap();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"ok");
        assert_eq!(heads.lock().unwrap().len(), 1);
        assert!(*conns.lock().unwrap() >= 1);
    }

    #[tokio::test]
    async fn a_connection_is_reused_once_its_body_is_read() {
        let (addr, heads, conns) = server(OK, false).await;
        let pool = pool_for(addr);
        for path in ["/a?x=1", "/", "/b"] {
            let resp = pool.send(get(addr, path), None, None).await.unwrap();
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

    /// Each shard reuses only the connections it opened, whose tasks run on its own thread.
    #[tokio::test]
    async fn a_shard_reuses_only_its_own_connections() {
        let (addr, _, conns) = server(OK, false).await;
        let pool = pool_for(addr);
        let shards = crate::shard::Shards::start(2).unwrap();
        let on = |handle: &tokio::runtime::Handle| {
            let pool = Arc::clone(&pool);
            handle.spawn(async move {
                let resp = pool.send(get(addr, "/"), None, None).await.unwrap();
                resp.into_body().collect().await.unwrap().to_bytes()
            })
        };
        let (first, second) = (shards.next().clone(), shards.next().clone());
        for handle in [&first, &second, &first, &second, &first] {
            assert_eq!(&on(handle).await.unwrap()[..], b"ok");
        }
        assert_eq!(*conns.lock().unwrap(), 2, "one connection per shard");
        assert_eq!(pool.idle_count(), 2);
        // A thread that is no shard has its own list.
        let resp = pool.send(get(addr, "/"), None, None).await.unwrap();
        resp.into_body().collect().await.unwrap();
        assert_eq!(*conns.lock().unwrap(), 3);
        shards.stop().await;
    }

    #[tokio::test]
    async fn an_empty_body_dropped_unread_gives_its_connection_back() {
        const EMPTY: &[u8] = b"HTTP/1.1 204 No Content\r\n\r\n";
        let (addr, _, conns) = server(EMPTY, false).await;
        let pool = pool_for(addr);
        for _ in 0..3 {
            let resp = pool.send(get(addr, "/"), None, None).await.unwrap();
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
        let resp = pool.send(get(addr, "/"), None, None).await.unwrap();
        drop(resp);
        assert_eq!(pool.idle_count(), 0);
        let resp = pool.send(get(addr, "/"), None, None).await.unwrap();
        drop(resp);
        assert_eq!(*conns.lock().unwrap(), 2);
    }

    /// An upstream that closes each connection after its answer, saying so (`Connection:
    /// close`) or not (the close reaches the idle connection): each request goes on a new
    /// connection instead of into the closed one, where it would be lost after it was sent.
    #[tokio::test]
    async fn an_upstream_that_closes_after_each_answer_gets_a_new_connection_each_time() {
        const CLOSE: &[u8] = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok";
        for answer in [CLOSE, OK] {
            let (addr, heads, conns) = server(answer, true).await;
            let pool = pool_for(addr);
            for _ in 0..3 {
                let resp = pool.send(get(addr, "/"), None, None).await.unwrap();
                let body = resp.into_body().collect().await.unwrap().to_bytes();
                assert_eq!(&body[..], b"ok");
                // An unannounced close reaches the idle connection.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert_eq!(*conns.lock().unwrap(), 3);
            assert_eq!(heads.lock().unwrap().len(), 3);
        }
    }

    #[tokio::test]
    async fn an_origin_form_target_goes_to_the_pools_upstream() {
        let (addr, heads, _) = server(OK, false).await;
        let pool = pool_for(addr);
        let mut req = get(addr, "/");
        *req.uri_mut() = "/o?y=2".parse().unwrap();
        assert!(pool.takes(&req));
        let resp = pool.send(req, None, None).await.unwrap();
        resp.into_body().collect().await.unwrap();
        let heads = heads.lock().unwrap();
        assert!(
            heads[0].starts_with("GET /o?y=2 HTTP/1.1\r\n"),
            "{}",
            heads[0]
        );
        assert!(
            heads[0]
                .to_ascii_lowercase()
                .contains(&format!("host: {addr}\r\n"))
        );
    }

    /// The connection's one timer bounds each exchange on it: the second request on the same
    /// connection, never answered, times out after its own `within`, not the first's.
    #[tokio::test]
    async fn each_exchange_on_a_reused_connection_gets_its_own_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).await.unwrap();
            assert!(chunk[..n].ends_with(b"\r\n\r\n"));
            s.write_all(OK).await.unwrap();
            // Reads the next request and never answers it.
            while s.read(&mut chunk).await.is_ok_and(|n| n > 0) {}
        });
        let pool = pool_for(addr);
        let within = Some(Duration::from_millis(300));
        let resp = pool.send(get(addr, "/"), within, None).await.unwrap();
        resp.into_body().collect().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(pool.idle_count(), 1);
        let started = Instant::now();
        match pool.send(get(addr, "/"), within, None).await {
            Err(SendError::Timeout(d)) => assert_eq!(Some(d), within),
            Err(other) => panic!("expected a timeout, got {other:?}"),
            Ok(_) => panic!("expected a timeout, got an answer"),
        }
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(290), "{took:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        assert_eq!(pool.idle_count(), 0, "a timed-out connection is not reused");
    }

    /// A body that arrives in pieces over time, with a length and chunked, is read to its end,
    /// and the connection is then reused.
    #[tokio::test]
    async fn a_body_that_arrives_in_pieces_is_read_to_its_end_and_its_connection_reused() {
        const PIECE: &[u8] = &[b'x'; 40_000];
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let conns = Arc::new(Mutex::new(0));
        let counted = conns.clone();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                *counted.lock().unwrap() += 1;
                tokio::spawn(async move {
                    let mut chunk = [0u8; 4096];
                    let mut chunked = false;
                    loop {
                        let n = s.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        let head = if chunked {
                            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_owned()
                        } else {
                            format!(
                                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
                                4 * PIECE.len()
                            )
                        };
                        s.write_all(head.as_bytes()).await.unwrap();
                        for _ in 0..4 {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            if chunked {
                                s.write_all(format!("{:x}\r\n", PIECE.len()).as_bytes())
                                    .await
                                    .unwrap();
                                s.write_all(PIECE).await.unwrap();
                                s.write_all(b"\r\n").await.unwrap();
                            } else {
                                s.write_all(PIECE).await.unwrap();
                            }
                        }
                        if chunked {
                            s.write_all(b"0\r\n\r\n").await.unwrap();
                        }
                        chunked = !chunked;
                    }
                });
            }
        });
        let pool = pool_for(addr);
        for _ in 0..4 {
            let resp = pool.send(get(addr, "/"), None, None).await.unwrap();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body.len(), 4 * PIECE.len());
            assert!(body.iter().all(|b| *b == b'x'));
        }
        assert_eq!(*conns.lock().unwrap(), 1);
    }

    /// A request body that is still being produced is sent while the exchange waits for the
    /// answer, and the answer comes once it has all arrived.
    #[tokio::test]
    async fn a_request_body_produced_over_time_is_sent_while_the_exchange_waits() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let kept = received.clone();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            // Chunked: the body ends with its zero-length chunk.
            while !buf.ends_with(b"0\r\n\r\n") {
                let n = s.read(&mut chunk).await.unwrap();
                assert!(n > 0, "the request ended early");
                buf.extend_from_slice(&chunk[..n]);
            }
            *kept.lock().unwrap() = buf;
            s.write_all(OK).await.unwrap();
            while s.read(&mut chunk).await.is_ok_and(|n| n > 0) {}
        });
        let pieces = futures_util::stream::unfold(0, |n| async move {
            if n == 3 {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
            let frame = Frame::data(Bytes::from(format!("piece{n};")));
            Some((Ok::<_, crate::wire::BoxError>(frame), n + 1))
        });
        let mut req = Request::new(http_body_util::BodyExt::boxed(
            http_body_util::StreamBody::new(pieces),
        ));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = format!("http://{addr}/slow").parse().unwrap();
        let pool = pool_for(addr);
        let within = Some(Duration::from_secs(5));
        let resp = pool.send(req, within, None).await.unwrap();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"ok");
        let received = String::from_utf8(received.lock().unwrap().clone()).unwrap();
        for n in 0..3 {
            assert!(received.contains(&format!("piece{n};")), "{received}");
        }
    }

    /// An exchange given up on (its deadline passed while the upstream held the request)
    /// closes its connection with a reset, not a FIN after whatever the kernel still queued:
    /// the upstream's read of it fails with `ECONNRESET` instead of seeing an orderly end.
    #[tokio::test]
    async fn an_abandoned_connection_is_reset_not_closed_in_order() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (ended, how) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            // Read the request, never answer, and see how the connection ends.
            let end = loop {
                match s.read(&mut buf).await {
                    Ok(0) => break "fin",
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break "reset",
                    Err(_) => break "other",
                }
            };
            let _ = ended.send(end);
        });
        let pool = pool_for(addr);
        let within = Some(Duration::from_millis(100));
        let sent = pool.send(get(addr, "/"), within, None).await;
        assert!(
            matches!(sent, Err(SendError::Timeout(_))),
            "{:?}",
            sent.err()
        );
        drop(pool);
        let end = tokio::time::timeout(Duration::from_secs(10), how).await;
        assert_eq!(end.expect("the connection ended").unwrap(), "reset");
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let pool = pool_for(addr);
        match pool.send(get(addr, "/"), None, None).await {
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
