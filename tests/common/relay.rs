//! `Relay`: a loopback TCP relay that proxies reach PostgreSQL through, so a test can make
//! the database unreachable (`cut`: every connection dropped, every new one closed at once)
//! and reachable again (`restore`) without touching the server that other tests share, or
//! stall it: stop forwarding both ways with every connection left open (`stall_on`), as a
//! link that stops carrying packets does, until `unstall`, or slow it (`delay`: every chunk
//! waits before it is forwarded, both ways).
//!
//! It runs on a runtime of its own (one thread), so it keeps relaying while the test's own
//! runtime is busy or blocked (a process wait, a `psql` run).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running relay to `target`; dropping it closes every connection.
pub struct Relay {
    addr: SocketAddr,
    up: watch::Sender<bool>,
    stall: Arc<Stall>,
    runtime: Option<tokio::runtime::Runtime>,
}

/// When the relay stops forwarding (see `Relay::stall_on`).
#[derive(Default)]
struct Stall {
    /// Bytes that, once a client sends them inside a transaction, stall the relay.
    pattern: Mutex<Option<Vec<u8>>>,
    stalled: watch::Sender<bool>,
    /// How long each chunk waits before it is forwarded (see `Relay::delay`).
    delay: watch::Sender<Duration>,
}

impl Stall {
    /// Whether `chunk`, sent inside a transaction, holds the pattern; takes it if so.
    fn matches(&self, chunk: &[u8]) -> bool {
        let mut pattern = self.pattern.lock().unwrap_or_else(PoisonError::into_inner);
        let found = pattern.as_deref().is_some_and(|p| contains(chunk, p));
        if found {
            *pattern = None;
        }
        found
    }

    async fn until_flowing(&self) {
        let mut stalled = self.stalled.subscribe();
        let _ = stalled.wait_for(|stalled| !*stalled).await;
    }

    async fn delayed(&self) {
        let delay = *self.delay.borrow();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

impl Relay {
    /// Starts relaying 127.0.0.1:PORT (a free port) to `target`.
    pub fn start(target: SocketAddr) -> Relay {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("relay")
            .enable_all()
            .build()
            .expect("relay runtime");
        // Bound here (not inside the runtime) so the port is known before `start` returns;
        // `block_on` is not allowed inside the test's own runtime.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("relay address");
        let up = watch::Sender::new(true);
        let accepting = up.clone();
        let stall = Arc::new(Stall::default());
        let stalls = Arc::clone(&stall);
        runtime.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("relay listener");
            accept_loop(listener, target, accepting, stalls).await;
        });
        Relay {
            addr,
            up,
            stall,
            runtime: Some(runtime),
        }
    }

    /// Stalls the relay as soon as a client sends `pattern` (e.g. an operation ID, a
    /// statement's parameter) inside a transaction (after a `BEGIN`, before its `COMMIT` or
    /// `ROLLBACK`): that message reaches the server, and from then on nothing is forwarded
    /// either way, every connection left open, until `unstall`. The server has run the
    /// statement (took its locks) and its client never hears so.
    pub fn stall_on(&self, pattern: &str) {
        let mut held = self
            .stall
            .pattern
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *held = Some(pattern.as_bytes().to_vec());
    }

    /// Every chunk, either way, waits `delay` before it is forwarded (zero: none), on the
    /// connections open now and on new ones.
    pub fn delay(&self, delay: Duration) {
        self.stall.delay.send_replace(delay);
    }

    /// Whether the relay has stalled (see `stall_on`).
    pub fn stalled(&self) -> bool {
        *self.stall.stalled.borrow()
    }

    /// Forwarding goes on where it stopped (see `stall_on`).
    pub fn unstall(&self) {
        self.stall.stalled.send_replace(false);
    }

    /// Where clients connect instead of `target`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The database becomes unreachable: every relayed connection is closed now, and every
    /// new one is closed as soon as it is accepted, until `restore`.
    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    /// The database is reachable again (for new connections; cut ones stay closed).
    pub fn restore(&self) {
        self.up.send_replace(true);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.up.send_replace(false);
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    up: watch::Sender<bool>,
    stall: Arc<Stall>,
) {
    while let Ok((client, _)) = listener.accept().await {
        if !*up.borrow() {
            drop(client);
            continue;
        }
        tokio::spawn(relay(client, target, up.subscribe(), Arc::clone(&stall)));
    }
}

/// Copies both ways until either side closes or the relay is cut (then both sockets drop).
async fn relay(
    client: TcpStream,
    target: SocketAddr,
    mut up: watch::Receiver<bool>,
    stall: Arc<Stall>,
) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (from_client, to_client) = client.into_split();
    let (from_server, to_server) = server.into_split();
    tokio::select! {
        () = upstream(from_client, to_server, &stall) => {}
        () = downstream(from_server, to_client, &stall) => {}
        _ = up.wait_for(|up| !*up) => {}
    }
}

/// The client's bytes to the server, watching for the stall's pattern inside a transaction.
async fn upstream(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    stall: &Stall,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut in_transaction = false;
    loop {
        stall.until_flowing().await;
        let Ok(n) = from.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        let chunk = &buf[..n];
        if contains(chunk, b"BEGIN") {
            in_transaction = true;
        }
        if in_transaction && stall.matches(chunk) {
            // Stalled before this chunk goes: its answer is held with everything after it.
            stall.stalled.send_replace(true);
        } else {
            stall.until_flowing().await;
        }
        stall.delayed().await;
        // The statement's end (`READ COMMITTED` is no end).
        if contains(chunk, b"COMMIT\0") || contains(chunk, b"ROLLBACK\0") {
            in_transaction = false;
        }
        if to.write_all(chunk).await.is_err() {
            return;
        }
    }
}

/// The server's bytes to the client, held while the relay is stalled.
async fn downstream(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    stall: &Stall,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let Ok(n) = from.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        stall.until_flowing().await;
        stall.delayed().await;
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
