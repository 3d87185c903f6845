//! Graceful shutdown of the served connections: at a stop, each connection is told to finish
//! the request it is serving and close, and the server waits until all of them have.
//!
//! It does what hyper-util's `GracefulShutdown` does, without its cost on every request: that
//! one polls a `watch` channel's change on every poll of every connection, and tokio's
//! `Notify` under it takes one mutex, shared by all connections on all shards, to look at its
//! waker each time. Here a connection registers its waker once (again only if its task's
//! waker changes), and a poll reads one flag that nothing writes until the stop.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use hyper::body::{Body, Incoming};
use hyper::rt::{Read, Write};
use hyper::service::HttpService;
use hyper_util::server::conn::auto;
use tokio::sync::Notify;

use crate::wire::BoxError;

/// A connection that can be told to finish its current request and close.
pub trait Graceful: Future {
    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<I, S, E, B> Graceful for auto::Connection<'static, I, S, E>
where
    Self: Future,
    S: HttpService<Incoming, ResBody = B>,
    S::Error: Into<BoxError>,
    I: Read + Write + Unpin,
    B: Body + 'static,
    B::Error: Into<BoxError>,
    E: auto::HttpServerConnExec<S::Future, B>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        auto::Connection::graceful_shutdown(self);
    }
}

impl<I, S, E, B> Graceful for auto::UpgradeableConnection<'static, I, S, E>
where
    Self: Future,
    S: HttpService<Incoming, ResBody = B>,
    S::Error: Into<BoxError>,
    I: Read + Write + Unpin,
    B: Body + 'static,
    B::Error: Into<BoxError>,
    E: auto::HttpServerConnExec<S::Future, B>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        auto::UpgradeableConnection::graceful_shutdown(self);
    }
}

/// The served connections, for the stop; a clone watches for the same stop.
#[derive(Default, Clone)]
pub struct Drain {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// Set once, at the stop; read on every poll of every connection.
    stopping: AtomicBool,
    /// The wakers of the connections polled so far and not yet ended, by their keys.
    wakers: Mutex<HashMap<u64, Waker>>,
    /// The last key given to a connection.
    keys: AtomicU64,
    /// Connections watched and not yet ended. Its last decrement and the stop's check of it
    /// pair with `stopping` (each side writes one and reads the other), so all four accesses
    /// are `SeqCst`: with weaker orders both sides could miss the other's write, and the stop
    /// would wait out its whole grace for a notice nobody sends.
    open: AtomicUsize,
    /// Told when the last connection ends after the stop.
    ended: Notify,
}

impl Drain {
    pub fn new() -> Drain {
        Drain::default()
    }

    /// `conn`, told to finish and close at the stop.
    pub fn watch<C: Graceful>(&self, conn: C) -> Watched<C> {
        self.shared.open.fetch_add(1, Ordering::SeqCst);
        Watched {
            conn: Box::pin(conn),
            key: self.shared.keys.fetch_add(1, Ordering::Relaxed),
            shared: self.shared.clone(),
            waker: None,
            told: false,
        }
    }

    /// Tells every connection to finish and close, and waits until all have ended.
    pub async fn shutdown(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let wakers: Vec<Waker> = {
            let wakers = self.shared.lock();
            wakers.values().cloned().collect()
        };
        for waker in wakers {
            waker.wake();
        }
        loop {
            let ended = self.shared.ended.notified();
            if self.shared.open.load(Ordering::SeqCst) == 0 {
                return;
            }
            ended.await;
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waker>> {
        self.wakers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A connection being served, watched by its `Drain`. Boxed, so the (large) connection is not
/// moved with it.
pub struct Watched<C> {
    conn: Pin<Box<C>>,
    key: u64,
    shared: Arc<Shared>,
    /// The waker it registered under `key`, if it has been polled.
    waker: Option<Waker>,
    /// Whether the stop has reached it.
    told: bool,
}

impl<C: Graceful> Future for Watched<C> {
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = self.get_mut();
        if !this.told {
            if !this.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                // First poll, or another task's waker: registered under the lock before the
                // flag is read, so a stop either sees it or is seen.
                this.shared.lock().insert(this.key, cx.waker().clone());
                this.waker = Some(cx.waker().clone());
            }
            if this.shared.stopping.load(Ordering::SeqCst) {
                this.told = true;
                this.conn.as_mut().graceful_shutdown();
            }
        }
        this.conn.as_mut().poll(cx)
    }
}

impl<C> Drop for Watched<C> {
    fn drop(&mut self) {
        if self.waker.is_some() {
            self.shared.lock().remove(&self.key);
        }
        let left = self.shared.open.fetch_sub(1, Ordering::SeqCst) - 1;
        if left == 0 && self.shared.stopping.load(Ordering::SeqCst) {
            self.shared.ended.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that ends only once told to, counting its polls.
    struct Idle {
        told: bool,
        polls: Arc<AtomicUsize>,
    }

    impl Future for Idle {
        type Output = ();
        fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            if self.told {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
    }

    impl Graceful for Idle {
        fn graceful_shutdown(mut self: Pin<&mut Self>) {
            self.told = true;
        }
    }

    /// Idle connections (polled once, waiting for nothing) are woken, told and waited for;
    /// one watched after the stop began is told at its first poll.
    #[tokio::test]
    async fn the_stop_wakes_tells_and_waits_for_every_connection() {
        let drain = Drain::new();
        let polls = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let conn = drain.watch(Idle {
                told: false,
                polls: polls.clone(),
            });
            tasks.push(tokio::spawn(conn));
        }
        while polls.load(Ordering::Relaxed) < 3 {
            tokio::task::yield_now().await;
        }
        tokio::time::timeout(std::time::Duration::from_secs(5), drain.shutdown())
            .await
            .expect("every connection ended");
        for task in tasks {
            assert!(task.is_finished());
        }
        let late = drain.watch(Idle {
            told: false,
            polls: polls.clone(),
        });
        tokio::time::timeout(std::time::Duration::from_secs(5), late)
            .await
            .expect("told at its first poll");
        assert!(drain.shared.lock().is_empty());
        assert_eq!(drain.shared.open.load(Ordering::Acquire), 0);
    }
}
