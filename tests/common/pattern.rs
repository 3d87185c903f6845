//! A deterministic byte stream of any length, generated and checked chunk by chunk, so a
//! gigabyte can cross the proxy without either end holding it in memory.
//!
//! Byte `i` of every stream is `i % 251` (a prime, so chunk boundaries never line up with
//! the pattern and a dropped or repeated chunk is caught).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;

const PERIOD: usize = 251;
/// Size of the chunks a `PatternBody` yields.
pub const CHUNK: usize = 64 * 1024;

/// One buffer long enough that any chunk is a zero-copy slice of it.
static WINDOW: LazyLock<Bytes> =
    LazyLock::new(|| (0..CHUNK + PERIOD).map(|i| (i % PERIOD) as u8).collect());

/// The pattern bytes `[offset, offset + len)`, `len <= CHUNK`, without copying.
fn slice(offset: u64, len: usize) -> Bytes {
    let start = (offset % PERIOD as u64) as usize;
    WINDOW.slice(start..start + len)
}

/// A streaming body of `len` pattern bytes, in `CHUNK`-sized frames.
pub struct PatternBody {
    sent: u64,
    len: u64,
}

impl PatternBody {
    pub fn new(len: u64) -> Self {
        Self { sent: 0, len }
    }
}

impl http_body::Body for PatternBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let left = self.len - self.sent;
        if left == 0 {
            return Poll::Ready(None);
        }
        let n = left.min(CHUNK as u64) as usize;
        let chunk = slice(self.sent, n);
        self.sent += n as u64;
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.sent == self.len
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len - self.sent)
    }
}

/// Checks that `chunk`, found at `offset` of a stream, holds the pattern bytes.
pub fn matches(offset: u64, chunk: &[u8]) -> bool {
    chunk
        .chunks(CHUNK)
        .enumerate()
        .all(|(i, piece)| piece == slice(offset + (i * CHUNK) as u64, piece.len()).as_ref())
}

/// Drains `body`, returning how many bytes it held and whether they were all the pattern.
pub async fn drain<B>(mut body: B) -> Result<(u64, bool), B::Error>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    let (mut count, mut ok) = (0u64, true);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            ok &= matches(count, &data);
            count += data.len() as u64;
        }
    }
    Ok((count, ok))
}
