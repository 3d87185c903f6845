//! The budget of buffered request bytes, and reading one guarded body under it.
//!
//! Guarded routes buffer their body before anything is claimed. All of them together may hold
//! at most `max_buffered` bytes: a body's declared length is reserved before its first byte
//! is read, a chunked body's bytes as they arrive, and the reservation is given back when the
//! request is done with them. A body that does not fit, that is over `max_request_body`, or
//! that is not complete within `body_timeout` is refused; this module never answers, parses
//! or claims anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;

use crate::wire::BoxError;

/// The bytes all guarded bodies together may hold; cheap to share.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    used: AtomicU64,
}

impl Budget {
    pub fn new(limit: u64) -> Arc<Budget> {
        Arc::new(Budget {
            limit,
            used: AtomicU64::new(0),
        })
    }

    /// Bytes reserved right now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// Reserves `bytes`; `None` when they do not fit beside what is reserved already.
    pub fn reserve(self: &Arc<Self>, bytes: u64) -> Option<Reservation> {
        let mut held = Reservation {
            budget: self.clone(),
            held: 0,
        };
        held.grow_to(bytes).ok()?;
        if bytes > 0 {
            tracing::debug!(bytes, buffered = self.used(), "body bytes reserved");
        }
        Some(held)
    }

    fn take(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }
}

/// Bytes of the budget held for one request; given back on drop.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<Budget>,
    held: u64,
}

impl Reservation {
    /// Holds at least `total` bytes; Err(Unread::Overloaded) when the rest does not fit.
    fn grow_to(&mut self, total: u64) -> Result<(), Unread> {
        if total > self.held {
            if !self.budget.take(total - self.held) {
                return Err(Unread::Overloaded);
            }
            self.held = total;
        }
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.held, Ordering::AcqRel);
    }
}

/// Why a guarded body was not buffered.
#[derive(Debug, thiserror::Error)]
pub enum Unread {
    #[error("the body is longer than max_request_body")]
    TooLarge,
    #[error("the bytes buffered by all requests would go over max_buffered")]
    Overloaded,
    #[error("the body was not complete within body_timeout")]
    TimedOut,
    #[error("the body broke off before its end: {0}")]
    Broken(String),
}

/// The limits one guarded body is read under.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// The body's `Content-Length`, when it declared one (reserved before reading).
    pub declared: Option<u64>,
    /// `max_request_body`.
    pub max: u64,
    /// `body_timeout`.
    pub timeout: Duration,
}

/// Buffers a whole body under `budget` and `limits`; the bytes come with their reservation.
pub async fn read<B>(
    budget: &Arc<Budget>,
    body: B,
    limits: BodyLimits,
) -> Result<(Bytes, Reservation), Unread>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    if limits.declared.is_some_and(|len| len > limits.max) {
        return Err(Unread::TooLarge);
    }
    let mut held = budget
        .reserve(limits.declared.unwrap_or(0))
        .ok_or(Unread::Overloaded)?;
    let collect = collect(body, limits.max, &mut held);
    match tokio::time::timeout(limits.timeout, collect).await {
        // Shorter than declared: an HTTP/2 stream reset mid-body may read as a clean end.
        Ok(Ok(bytes)) if limits.declared.is_some_and(|len| len != bytes.len() as u64) => Err(
            Unread::Broken("the body ended before the length its Content-Length declares".into()),
        ),
        Ok(Ok(bytes)) => Ok((bytes, held)),
        Ok(Err(unread)) => Err(unread),
        Err(_) => Err(Unread::TimedOut),
    }
}

async fn collect<B>(body: B, max: u64, held: &mut Reservation) -> Result<Bytes, Unread>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut body = std::pin::pin!(body);
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Unread::Broken(e.into().to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let total = (buf.len() + data.len()) as u64;
        if total > max {
            return Err(Unread::TooLarge);
        }
        held.grow_to(total)?;
        buf.extend_from_slice(&data);
    }
    Ok(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Full, StreamBody};

    fn limits(declared: Option<u64>, max: u64) -> BodyLimits {
        BodyLimits {
            declared,
            max,
            timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn reservations_add_up_and_are_given_back() {
        let budget = Budget::new(10);
        let a = budget.reserve(6).expect("fits");
        assert!(budget.reserve(5).is_none(), "6 + 5 is over 10");
        let b = budget.reserve(4).expect("6 + 4 fits");
        assert_eq!(budget.used(), 10);
        drop((a, b));
        assert_eq!(budget.used(), 0);
    }

    #[tokio::test]
    async fn a_body_is_read_and_holds_its_bytes() {
        let budget = Budget::new(100);
        let body = Full::new(Bytes::from_static(b"amount=5"));
        let (bytes, held) = read(&budget, body, limits(None, 50)).await.expect("read");
        assert_eq!(&bytes[..], b"amount=5");
        assert_eq!(budget.used(), 8);
        drop(held);
        assert_eq!(budget.used(), 0);
    }

    #[tokio::test]
    async fn streamed_bytes_count_as_they_arrive() {
        let budget = Budget::new(10);
        let _other = budget.reserve(4).expect("fits");
        let chunks =
            ["abc", "defg"].map(|c| Ok::<_, BoxError>(http_body::Frame::data(Bytes::from(c))));
        let body = StreamBody::new(futures_util::stream::iter(chunks));
        let read = read(&budget, body, limits(None, 50)).await;
        assert!(matches!(read, Err(Unread::Overloaded)), "{read:?}");
        assert_eq!(budget.used(), 4, "a refused body gives its bytes back");
    }

    #[tokio::test]
    async fn a_body_shorter_than_declared_is_broken_and_holds_nothing() {
        let budget = Budget::new(100);
        let body = Full::new(Bytes::from_static(b"amount=10"));
        let short = read(&budget, body, limits(Some(24), 50)).await;
        assert!(matches!(short, Err(Unread::Broken(_))), "{short:?}");
        assert_eq!(budget.used(), 0);
    }

    #[tokio::test]
    async fn declared_and_actual_lengths_over_the_max_are_too_large() {
        let budget = Budget::new(100);
        let body = Full::new(Bytes::from_static(b"0123456789"));
        let declared = read(&budget, body.clone(), limits(Some(10), 5)).await;
        assert!(matches!(declared, Err(Unread::TooLarge)));
        let actual = read(&budget, body, limits(None, 5)).await;
        assert!(matches!(actual, Err(Unread::TooLarge)));
        assert_eq!(budget.used(), 0);
    }

    #[tokio::test]
    async fn a_body_that_never_ends_times_out() {
        let budget = Budget::new(100);
        let never = StreamBody::new(futures_util::stream::pending::<
            Result<http_body::Frame<Bytes>, BoxError>,
        >());
        let mut short = limits(None, 50);
        short.timeout = Duration::from_millis(10);
        assert!(matches!(
            read(&budget, never, short).await,
            Err(Unread::TimedOut)
        ));
    }
}
