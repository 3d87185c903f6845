//! Limits on inbound connections, applied before hyper sees a request.
//!
//! `Acceptor` accepts from one listener: for the agents' listener it holds a permit per open
//! connection (at most `max_connections`; further connections wait in the listen backlog),
//! and after a failed `accept` (no file descriptors left, most often) it logs and pauses,
//! growing the pause while failures go on, instead of retrying in a hot loop. `HeadTimeout`
//! closes a connection that waits longer than `header_timeout` for a request head: from
//! accepting it, and on HTTP/1.1 from the end of each answer. It is the only header timer:
//! hyper's own starts only once it has told HTTP/1 from h2 (which a client that sends nothing
//! never lets it do), and it makes, registers and drops a new timer for every request, which
//! cost about 5% of a forwarded request's instructions; this one keeps one timer per
//! connection and moves its deadline on. `builder` is the one HTTP server configuration of
//! agents' connections (plain and inside an intercepted tunnel), `Answering` the future of
//! each request served on them. This module never reads or answers a request.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Response, Version};
use http_body::{Body, Frame, SizeHint};
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use crate::wire::{BoxError, ProxyBody};

/// Inbound protections: oversized headers, too many h2 streams (timeouts are configured).
/// The number of header lines is hyper's own limit (100; over it, 431): naming a limit of our
/// own would make hyper allocate and fill a header table for every request it parses.
/// The request head (HTTP/1.1) or header list (h2) may not exceed this; over it, 431.
const MAX_HEADER_BYTES: u32 = 64 * 1024;
const MAX_H2_STREAMS: u32 = 256;

/// The first pause after a failed accept, and the longest one.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// The accepting side of one listener.
pub struct Acceptor {
    /// The config key of the listener, for log lines.
    key: &'static str,
    permits: Option<(Arc<Semaphore>, usize)>,
    /// The pause after the last failed accept; `None` once one succeeds.
    pause: Option<Duration>,
    /// Whether "at the limit" has been logged since the last free permit.
    at_limit: bool,
}

impl Acceptor {
    /// A listener serving at most `max` connections at once.
    pub fn limited(key: &'static str, max: usize) -> Acceptor {
        Acceptor {
            permits: Some((Arc::new(Semaphore::new(max)), max)),
            ..Acceptor::open(key)
        }
    }

    /// A listener without a connection limit (the admin API: an operator can always get in).
    pub fn open(key: &'static str) -> Acceptor {
        Acceptor {
            key,
            permits: None,
            pause: None,
            at_limit: false,
        }
    }

    /// The next connection and its permit (held until the connection ends). Cancel-safe.
    pub async fn accept(
        &mut self,
        listener: &TcpListener,
    ) -> (TcpStream, Option<OwnedSemaphorePermit>) {
        let permit = self.permit().await;
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    self.pause = None;
                    return (stream, permit);
                }
                Err(e) => self.back_off(e).await,
            }
        }
    }

    async fn permit(&mut self) -> Option<OwnedSemaphorePermit> {
        let (permits, max) = self.permits.as_ref()?;
        if let Ok(permit) = permits.clone().try_acquire_owned() {
            self.at_limit = false;
            return Some(permit);
        }
        if !std::mem::replace(&mut self.at_limit, true) {
            tracing::warn!(
                max_connections = max,
                "connection limit reached: new connections wait until one closes"
            );
        }
        // The semaphore is never closed, so this only ends with a permit.
        permits.clone().acquire_owned().await.ok()
    }

    async fn back_off(&mut self, error: io::Error) {
        let pause = self
            .pause
            .map_or(FIRST_PAUSE, |p| (p * 2).min(LONGEST_PAUSE));
        self.pause = Some(pause);
        tracing::warn!(
            listener = self.key,
            %error,
            retry_ms = pause.as_millis() as u64,
            "cannot accept a connection (out of file descriptors? raise `ulimit -n` or lower \
             max_connections); retrying after a pause"
        );
        tokio::time::sleep(pause).await;
    }
}

/// Where a connection is, for its header timer: shared by its IO (`HeadTimeout`), the service
/// that takes its requests (`begin`) and the bodies of its answers (`AnswerBody`).
pub struct Phase {
    state: AtomicU8,
    /// When the current wait for a head began, in nanoseconds from `base`.
    since: AtomicU64,
    base: Instant,
}

/// Waiting for a request head: the timer runs.
const WAITING: u8 = 0;
/// An HTTP/1.1 request is being served, until its answer's body is dropped (hyper drops it
/// once it has written it, or given up on it): no timer.
const SERVING: u8 = 1;
/// h2: `header_timeout` bounds only the first request, so no timer from then on.
const MULTIPLEXED: u8 = 2;
/// A CONNECT was answered 2xx: the connection is a tunnel now, timed by whoever serves it.
const TUNNELLED: u8 = 3;

impl Phase {
    /// A request head arrived; its answer's body (wrapped by `answer`) ends the serving.
    pub fn begin(&self, version: Version) {
        if version == Version::HTTP_2 {
            self.state.store(MULTIPLEXED, Ordering::Release);
        } else {
            // Only a wait ends here (an HTTP/1.1 connection serves one request at a time).
            let _ =
                self.state
                    .compare_exchange(WAITING, SERVING, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// The connection was handed over to a tunnel: no request head is awaited on it any more.
    pub fn hand_over(&self) {
        self.state.store(TUNNELLED, Ordering::Release);
    }

    /// The answer's body, which ends the serving (HTTP/1.1) when it is dropped.
    pub fn answer(self: &Arc<Self>, body: ProxyBody) -> AnswerBody {
        AnswerBody {
            body,
            phase: self.clone(),
        }
    }

    /// When the current wait for a head began.
    fn waiting_since(&self) -> Instant {
        self.base + Duration::from_nanos(self.since.load(Ordering::Acquire))
    }
}

/// An answer's body: the body itself, and the connection's `Phase`, which waits for the next
/// head from when hyper drops the body.
pub struct AnswerBody {
    body: ProxyBody,
    phase: Arc<Phase>,
}

impl Body for AnswerBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for AnswerBody {
    fn drop(&mut self) {
        let phase = &self.phase;
        if phase.state.load(Ordering::Acquire) != SERVING {
            return;
        }
        let since = phase.base.elapsed().as_nanos();
        phase
            .since
            .store(u64::try_from(since).unwrap_or(u64::MAX), Ordering::Release);
        let _ = phase
            .state
            .compare_exchange(SERVING, WAITING, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// A connection's IO that fails reads once it has waited `timeout` for a request head (see
/// `Phase`): the wait starts at accept, and on HTTP/1.1 again when an answer's body is
/// dropped.
///
/// It keeps one timer for the connection's life and never cancels it: a wait for a head
/// moves its deadline later (one atomic write while it is registered), and a timer that
/// goes off while a request is served is registered again (at most once per `timeout`). So
/// the timer always wakes the connection by the end of the current wait, and the read hyper
/// makes then tells whether the wait has lasted `timeout`, even when hyper, having dropped
/// the answer's body, reads nothing until the agent sends more.
///
/// The only upgrade served is a CONNECT answered 2xx (`intercept`), whose answer ends the
/// timing for good (`Phase::hand_over`), as h2's first request does: the tunnel's reads pass
/// through here untimed, and the tunnel times its own TLS handshake and request heads.
pub struct HeadTimeout<I> {
    io: I,
    clock: Pin<Box<Sleep>>,
    timeout: Duration,
    /// Whether `clock` holds the deadline of the current wait.
    armed: bool,
    phase: Arc<Phase>,
}

impl<I> HeadTimeout<I> {
    /// Wraps `io`; the first wait starts now. The service tells the returned `Phase` of each
    /// request and wraps each answer's body with it.
    pub fn new(io: I, timeout: Duration) -> (HeadTimeout<I>, Arc<Phase>) {
        let phase = Arc::new(Phase {
            state: AtomicU8::new(WAITING),
            since: AtomicU64::new(0),
            base: Instant::now(),
        });
        let io = HeadTimeout {
            io,
            clock: Box::pin(tokio::time::sleep_until(phase.base + timeout)),
            timeout,
            armed: true,
            phase: phase.clone(),
        };
        (io, phase)
    }

    /// Err(TimedOut) once the current wait for a head has lasted `timeout`; keeps the timer
    /// registered to wake this connection.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        match self.phase.state.load(Ordering::Acquire) {
            WAITING => {
                if !self.armed {
                    let deadline = self.phase.waiting_since() + self.timeout;
                    self.clock.as_mut().reset(deadline);
                    self.armed = true;
                }
                if self.clock.as_mut().poll(cx).is_ready() {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no request head within header_timeout",
                    ));
                }
            }
            SERVING => {
                self.armed = false;
                if self.clock.is_elapsed() {
                    self.clock.as_mut().reset(Instant::now() + self.timeout);
                    let _ = self.clock.as_mut().poll(cx);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl<I: Read + Unpin> Read for HeadTimeout<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = this.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<I: Write + Unpin> Write for HeadTimeout<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}

/// hyper's HTTP/1.1 header timer is off: `HeadTimeout` times every wait for a head.
pub fn builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .header_read_timeout(None::<Duration>)
        // One buffer per write (the head and a small body copied together), not a queue of
        // buffers for `writev`: fewer instructions per answer, the same bytes.
        .writev(false)
        // hyper answers 431 once an unparsed head fills the read buffer; its default
        // (~400 KiB) would let a head far over the limit through. Bodies still stream.
        .max_buf_size(MAX_HEADER_BYTES as usize);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_H2_STREAMS)
        .max_header_list_size(MAX_HEADER_BYTES);
    builder
}

pin_project_lite::pin_project! {
    /// A request's future as hyper holds it: the handler's, with its answer's body handed to
    /// the connection's `Phase`. Not an `async` block, which would hold the handler's future
    /// twice (the one it captured and the one it awaits), and hyper moves the whole of it for
    /// every request.
    pub struct Answering<F> {
        #[pin]
        response: F,
        phase: Arc<Phase>,
        // A CONNECT: a 2xx answer hands the connection over to a tunnel.
        connect: bool,
    }
}

impl<F: Future<Output = Response<ProxyBody>>> Future for Answering<F> {
    type Output = Result<Response<AnswerBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let phase = this.phase;
        this.response.poll(cx).map(|resp| {
            if *this.connect && resp.status().is_success() {
                phase.hand_over();
            }
            Ok(resp.map(|body| phase.answer(body)))
        })
    }
}

impl<F> Answering<F> {
    /// The answer `response` will be to a request `Phase::begin` was told of; `connect` for a
    /// CONNECT, whose 2xx answer ends the connection's header timing for good.
    pub fn new(response: F, phase: Arc<Phase>, connect: bool) -> Answering<F> {
        Answering {
            response,
            phase,
            connect,
        }
    }
}
