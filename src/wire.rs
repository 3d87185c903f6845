//! The body plumbing every layer shares: the body type of each answer the proxy gives and each
//! request it sends, and the one bounded reader for the places that must buffer.
//!
//! It sits on the lowest floor: it knows nothing of providers, the ledger or the request path,
//! so `problem`, `upstream`, `dispatch`, `reconcile` and `admin` can use it without depending
//! on `proxy`. Unguarded traffic is not buffered; only what must be recorded or read is.

use bytes::Bytes;
use http::HeaderName;
use http::header;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body type of every answer the proxy gives and every request it sends.
pub type ProxyBody = BoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// Why a body could not be buffered.
#[derive(Debug, thiserror::Error)]
pub enum Unbuffered {
    #[error("the body is longer than the limit")]
    TooLarge,
    #[error("the body broke off before its end: {0}")]
    Broken(String),
}

/// Buffers a whole body of at most `limit` bytes (guarded requests, answers to record,
/// lookups, admin calls, and the one unguarded form that must be read for `_method`).
pub async fn collect_limited<B>(body: B, limit: u64) -> Result<Bytes, Unbuffered>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(Unbuffered::TooLarge),
        Err(e) => Err(Unbuffered::Broken(e.to_string())),
    }
}

/// The two hop-by-hop names `http` has no constant for.
static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Whether `name` describes one connection and is never forwarded (RFC 9110 7.6.1).
pub(crate) fn is_hop_by_hop(name: &HeaderName) -> bool {
    // All compare as constants: a standard name never equals a custom one, so neither needs
    // its text.
    *name == header::CONNECTION
        || *name == header::TE
        || *name == header::TRAILER
        || *name == header::TRANSFER_ENCODING
        || *name == header::UPGRADE
        || *name == header::PROXY_AUTHORIZATION
        || *name == header::PROXY_AUTHENTICATE
        || *name == KEEP_ALIVE
        || *name == PROXY_CONNECTION
}
