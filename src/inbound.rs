//! Limits on inbound connections, applied before hyper sees a request.
//!
//! `Gate` accepts from one listener: for the agents' listener it holds a permit per open
//! connection (at most `max_connections`; further connections wait in the listen backlog),
//! and after a failed `accept` (no file descriptors left, most often) it logs and pauses,
//! growing the pause while failures go on, instead of retrying in a hot loop. `FirstRequest`
//! closes a connection whose first request head has not arrived within `header_timeout`
//! (hyper's own header timeout only starts once it has told HTTP/1 from h2, which a client
//! that sends nothing never lets it do). This module never reads or answers a request.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::rt::{Read, ReadBufCursor, Write};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

/// The first pause after a failed accept, and the longest one.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// The accepting side of one listener.
pub struct Gate {
    /// The config key of the listener, for log lines.
    key: &'static str,
    permits: Option<(Arc<Semaphore>, usize)>,
    /// The pause after the last failed accept; `None` once one succeeds.
    pause: Option<Duration>,
    /// Whether "at the limit" has been logged since the last free permit.
    at_limit: bool,
}

impl Gate {
    /// A listener serving at most `max` connections at once.
    pub fn limited(key: &'static str, max: usize) -> Gate {
        Gate {
            permits: Some((Arc::new(Semaphore::new(max)), max)),
            ..Gate::open(key)
        }
    }

    /// A listener without a connection limit (the admin API: an operator can always get in).
    pub fn open(key: &'static str) -> Gate {
        Gate {
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

/// A connection's IO that fails reads once `timeout` has passed without its first request
/// head, which the service reports through `started`.
pub struct FirstRequest<I> {
    io: I,
    deadline: Option<Pin<Box<Sleep>>>,
    started: Arc<AtomicBool>,
}

impl<I> FirstRequest<I> {
    /// Wraps `io`; the clock starts now. Set the returned flag when a request arrives.
    pub fn new(io: I, timeout: Duration) -> (FirstRequest<I>, Arc<AtomicBool>) {
        let started = Arc::new(AtomicBool::new(false));
        let io = FirstRequest {
            io,
            deadline: Some(Box::pin(tokio::time::sleep(timeout))),
            started: started.clone(),
        };
        (io, started)
    }

    /// Err(TimedOut) once the deadline passed with no request; arms the timer's wake-up.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let Some(deadline) = &mut self.deadline else {
            return Ok(());
        };
        if self.started.load(Ordering::Acquire) {
            self.deadline = None;
        } else if deadline.as_mut().poll(cx).is_ready() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no request head within header_timeout",
            ));
        }
        Ok(())
    }
}

impl<I: Read + Unpin> Read for FirstRequest<I> {
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

impl<I: Write + Unpin> Write for FirstRequest<I> {
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
