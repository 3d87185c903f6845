//! `FakeProvider`: an in-process provider API on 127.0.0.1:0 (HTTP/1.1 and h2, plain or TLS)
//! that records every request, counts the effects it commits and behaves as told.
//!
//! It never inspects what the proxy does; it only sees the wire, like a real provider.
//! Besides the behaviour-driven answers it has two streaming endpoints that bypass them:
//! a path ending in `/download/N` answers N pattern bytes, a path ending in `/upload`
//! drains the body and answers `{"bytes": n, "pattern_ok": bool}` (see `pattern`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use super::behavior::{Answer, Behavior, Dedupe};
use super::behavior::{Stored, dedupe_key, lookup_answer, new_answer, respond};
use super::client::{Body, full};
use super::pattern::{PatternBody, drain};
use super::tls::TestPki;

/// How long `wait_for_*` waits before failing the test.
const WAIT: Duration = Duration::from_secs(20);

/// One request as the provider received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: Method,
    pub path_and_query: String,
    pub headers: HeaderMap,
    /// Empty for the streaming endpoints.
    pub body: Bytes,
    pub version: Version,
}

impl Recorded {
    /// The header's value as text, if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The effects side: committed once, under one lock, so counts are exact under concurrency.
#[derive(Default)]
struct Effects {
    count: usize,
    by_key: HashMap<String, Stored>,
    /// The first effect under each key, for a lookup (`Behavior::lookup_by_key`).
    looked_up: HashMap<String, Stored>,
    dropped: usize,
}

struct Shared {
    behavior: Mutex<Behavior>,
    requests: Mutex<Vec<Recorded>>,
    effects: Mutex<Effects>,
    received: watch::Sender<usize>,
    committed: watch::Sender<usize>,
    released: watch::Sender<bool>,
    uploaded: Mutex<u64>,
    /// False while TLS handshakes are held (`hold_handshakes`): connections are accepted,
    /// the server's side of the handshake waits.
    handshakes: watch::Sender<bool>,
    /// TCP connections accepted so far.
    accepted: watch::Sender<usize>,
}

/// A poisoned lock only means another test task panicked; the data is still what it was.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The fake provider; dropping it stops accepting connections.
pub struct FakeProvider {
    addr: SocketAddr,
    tls: Option<(TestPki, tempfile::TempDir)>,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl FakeProvider {
    /// Starts a plain-HTTP provider (HTTP/1.1 and h2c).
    pub async fn start(behavior: Behavior) -> Self {
        Self::launch(behavior, None).await
    }

    /// Starts an HTTPS provider (ALPN h2 and http/1.1) with a fresh test CA.
    pub async fn start_tls(behavior: Behavior) -> Self {
        let pki = TestPki::generate();
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("ca.pem"), &pki.ca_pem).expect("write CA");
        Self::launch(behavior, Some((pki, dir))).await
    }

    async fn launch(behavior: Behavior, tls: Option<(TestPki, tempfile::TempDir)>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            released: watch::Sender::new(!behavior.hold),
            behavior: Mutex::new(behavior),
            requests: Mutex::default(),
            effects: Mutex::default(),
            received: watch::Sender::new(0),
            committed: watch::Sender::new(0),
            uploaded: Mutex::new(0),
            handshakes: watch::Sender::new(true),
            accepted: watch::Sender::new(0),
        });
        let acceptor = tls
            .as_ref()
            .map(|(pki, _)| tokio_rustls::TlsAcceptor::from(pki.server_config()));
        let accept = tokio::spawn(accept_loop(listener, acceptor, shared.clone()));
        Self {
            addr,
            tls,
            shared,
            accept,
        }
    }

    /// From now on a TLS provider accepts connections but holds its side of each TLS
    /// handshake until `release_handshakes`: a client stays connecting, nothing of its
    /// request sent.
    pub fn hold_handshakes(&self) {
        self.shared.handshakes.send_replace(false);
    }

    /// Lets every held TLS handshake go on (see `hold_handshakes`).
    pub fn release_handshakes(&self) {
        self.shared.handshakes.send_replace(true);
    }

    /// Waits until at least `n` TCP connections were accepted (fails the test after 20 s).
    pub async fn wait_for_connections(&self, n: usize) {
        wait_for(&self.shared.accepted, n, "connections").await;
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL: `http://127.0.0.1:PORT`, or `https://localhost:PORT` (a name the
    /// certificate covers) for TLS.
    pub fn url(&self) -> String {
        match self.tls {
            Some(_) => format!("https://localhost:{}", self.addr.port()),
            None => format!("http://{}", self.addr),
        }
    }

    /// The test CA's PEM file, for a policy's `ca_file`. Panics for a plain provider.
    pub fn ca_file(&self) -> PathBuf {
        let (_, dir) = self.tls.as_ref().expect("only a TLS provider has a CA");
        dir.path().join("ca.pem")
    }

    /// The test PKI (for a client that trusts the CA). Panics for a plain provider.
    pub fn pki(&self) -> &TestPki {
        &self.tls.as_ref().expect("only a TLS provider has a CA").0
    }

    /// A policy file mounting this provider at `/{name}`, trusting its CA when TLS, with
    /// `extra` (more `[provider]` keys, then tables such as `[[route]]`) appended.
    pub fn policy(&self, name: &str, extra: &str) -> String {
        let ca = self.tls.as_ref().map(|_| self.ca_file());
        super::files::policy_with_ca(name, &self.url(), ca.as_deref(), extra)
    }

    /// Replaces the behaviour for requests arriving from now on; restarts the
    /// `drop_first_response` count and, if the new behaviour holds, closes the gate.
    pub fn set_behavior(&self, behavior: Behavior) {
        if behavior.hold {
            self.shared.released.send_replace(false);
        }
        *lock(&self.shared.behavior) = behavior;
        lock(&self.shared.effects).dropped = 0;
    }

    /// Tweaks the current behaviour in place (counters untouched).
    pub fn update(&self, change: impl FnOnce(&mut Behavior)) {
        change(&mut lock(&self.shared.behavior));
    }

    /// Opens the hold gate: every held request, and every later one, goes on.
    pub fn release(&self) {
        self.shared.released.send_replace(true);
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.requests).clone()
    }

    pub fn request_count(&self) -> usize {
        *self.shared.received.borrow()
    }

    /// The number of distinct effects committed (a deduplicated replay is not one).
    pub fn effects(&self) -> usize {
        lock(&self.shared.effects).count
    }

    /// Total body bytes drained by the `/upload` endpoint.
    pub fn uploaded_bytes(&self) -> u64 {
        *lock(&self.shared.uploaded)
    }

    /// Waits until at least `n` requests have been received (fails the test after 20 s).
    pub async fn wait_for_requests(&self, n: usize) {
        wait_for(&self.shared.received, n, "requests").await;
    }

    /// Waits until at least `n` effects have been committed (fails the test after 20 s).
    pub async fn wait_for_effects(&self, n: usize) {
        wait_for(&self.shared.committed, n, "effects").await;
    }
}

async fn wait_for(counter: &watch::Sender<usize>, n: usize, what: &str) {
    let mut rx = counter.subscribe();
    let reached = tokio::time::timeout(WAIT, rx.wait_for(|c| *c >= n)).await;
    if reached.is_err() {
        panic!(
            "fake provider: waited {WAIT:?} for {n} {what}, saw {}",
            *counter.borrow()
        );
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
) {
    while let Ok((tcp, _)) = listener.accept().await {
        shared.accepted.send_modify(|n| *n += 1);
        let (tls, shared) = (tls.clone(), shared.clone());
        tokio::spawn(async move {
            let mut handshakes = shared.handshakes.subscribe();
            if tls.is_some() && handshakes.wait_for(|go| *go).await.is_err() {
                return;
            }
            let service = hyper::service::service_fn(move |req| handle(shared.clone(), req));
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            // Connection errors are the point of some tests (dropped answers); ignore them.
            let _ = match tls {
                None => {
                    let io = hyper_util::rt::TokioIo::new(tcp);
                    builder.serve_connection(io, service).await
                }
                Some(acceptor) => match acceptor.accept(tcp).await {
                    Ok(stream) => {
                        let io = hyper_util::rt::TokioIo::new(stream);
                        builder.serve_connection(io, service).await
                    }
                    Err(_) => return,
                },
            };
        });
    }
}

/// A deliberately lost answer: returning it from the service makes hyper close the
/// connection (h1) or reset the stream (h2) without a response.
#[derive(Debug, thiserror::Error)]
#[error("fake provider dropped the response on purpose")]
struct Dropped;

type HandlerError = Box<dyn std::error::Error + Send + Sync>;

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, HandlerError> {
    let path = req.uri().path().to_string();
    if let Some(len) = download_len(&path) {
        shared.record(recorded(&req, Bytes::new()));
        let body = PatternBody::new(len).boxed();
        return Ok(Response::new(body));
    }
    if path.ends_with("/upload") {
        let record = recorded(&req, Bytes::new());
        let (bytes, pattern_ok) = drain(req.into_body()).await?;
        *lock(&shared.uploaded) += bytes;
        shared.record(record);
        let answer = serde_json::json!({ "bytes": bytes, "pattern_ok": pattern_ok });
        return Ok(Response::new(full(answer.to_string())));
    }
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    let request = recorded(&Request::from_parts(parts, ()), body);
    let behavior = lock(&shared.behavior).clone();
    shared.record(request.clone());
    if let Some(read) = behavior.read_for(&request) {
        return Ok(read);
    }
    if let Some(key) = behavior.looked_up(&request) {
        let effects = lock(&shared.effects);
        return Ok(lookup_answer(effects.looked_up.get(key)));
    }
    // The work runs in its own task, as at a real provider: once received, the effect
    // happens even if the caller's connection goes away meanwhile.
    let work = tokio::spawn(async move { shared.act(&behavior, &request).await });
    match work.await? {
        Some(response) => Ok(response),
        None => Err(Box::new(Dropped)),
    }
}

/// `N` when the path ends in `/download/N`.
fn download_len(path: &str) -> Option<u64> {
    let (rest, n) = path.rsplit_once('/')?;
    rest.ends_with("/download").then(|| n.parse().ok())?
}

fn recorded<B>(req: &Request<B>, body: Bytes) -> Recorded {
    Recorded {
        method: req.method().clone(),
        path_and_query: req
            .uri()
            .path_and_query()
            .map_or_else(|| req.uri().path().to_string(), |p| p.to_string()),
        headers: req.headers().clone(),
        body,
        version: req.version(),
    }
}

impl Shared {
    fn record(&self, request: Recorded) {
        let mut requests = lock(&self.requests);
        requests.push(request);
        self.received.send_replace(requests.len());
    }

    /// Gate, effect, delay, answer or drop (see `behavior`); `None` means drop.
    async fn act(&self, behavior: &Behavior, request: &Recorded) -> Option<Response<Body>> {
        if behavior.hold {
            let mut released = self.released.subscribe();
            // The sender lives in `self`, so this only ends once released.
            let _ = released.wait_for(|open| *open).await;
        }
        let (stored, replayed, drop) = self.commit(behavior, request);
        if !behavior.delay.is_zero() {
            tokio::time::sleep(behavior.delay).await;
        }
        (!drop).then(|| respond(&stored, replayed))
    }

    /// Commits a new effect or finds the one already made for this key, in one step.
    fn commit(&self, behavior: &Behavior, request: &Recorded) -> (Stored, bool, bool) {
        let mut effects = lock(&self.effects);
        let drop = effects.dropped < behavior.drop_first_response;
        effects.dropped += usize::from(drop);
        let key = behavior
            .dedupe
            .as_ref()
            .and_then(|d| dedupe_key(d, request));
        if let Some(stored) = key.as_ref().and_then(|k| effects.by_key.get(k)) {
            return (stored.clone(), true, drop);
        }
        effects.count += 1;
        let stored = new_answer(behavior, request, effects.count);
        if let Some(key) = key {
            effects.by_key.insert(key, stored.clone());
        }
        if let Some(key) = behavior.lookup_key(request) {
            effects
                .looked_up
                .entry(key)
                .or_insert_with(|| stored.clone());
        }
        self.committed.send_replace(effects.count);
        (stored, false, drop)
    }
}
