//! The kept first request: what makes every re-send of an operation byte-identical to its
//! first attempt (docs/reference.md section 10).
//!
//! Providers that deduplicate on a key compare the parameters of a reused key (Stripe and
//! Square answer a 400 when they differ), so a re-send must carry the first attempt's method,
//! path, query and body, not the retry's (whose ignored fields, e.g. a trace id, may differ).
//! This module turns the first attempt into sealed bytes for the ledger and back into the
//! request of a later attempt. It holds no credentials: the content type is the only header
//! it keeps; each re-send carries the current caller's headers. It never reads the ledger.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Uri, header};

use crate::identity;
use crate::policy::{KeyPlacement, Provider};
use crate::secret::{Secret, SecretError};
use crate::template::InvalidBody;
use crate::wire::{ProxyBody, full};

/// A buffered request ready to be sent (and sent again, byte for byte).
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Outgoing {
    pub fn request(&self) -> Request<ProxyBody> {
        let mut req = Request::new(full(self.body.clone()));
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = self.headers.clone();
        req
    }
}

/// Version tag of the layout below.
const V1: u8 = 1;

/// The parts of the first attempt that a re-send repeats exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptRequest {
    pub method: Method,
    /// Path and query as first sent (the upstream's base path included).
    pub path_and_query: String,
    pub content_type: Option<HeaderValue>,
    /// The body as first sent, the key already in it when it travels in the body.
    pub body: Bytes,
}

impl KeptRequest {
    /// The first attempt as it is about to be sent.
    pub fn of(first: &Outgoing) -> KeptRequest {
        KeptRequest {
            method: first.method.clone(),
            path_and_query: first
                .uri
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |pq| pq.as_str().to_owned()),
            content_type: first.headers.get(header::CONTENT_TYPE).cloned(),
            body: first.body.clone(),
        }
    }

    /// Encrypted for the ledger, bound to the operation ID.
    pub fn seal(&self, secret: &Secret, operation_id: &str) -> Result<Vec<u8>, SecretError> {
        secret.seal(operation_id.as_bytes(), &self.encode())
    }

    /// The request `seal` made for this operation; `None` if it was sealed under another
    /// secret or for another operation, or is corrupt.
    pub fn open(secret: &Secret, operation_id: &str, sealed: &[u8]) -> Option<KeptRequest> {
        let plain = secret.open(operation_id.as_bytes(), sealed)?;
        KeptRequest::decode(&plain)
    }

    /// The request of a later attempt: this method, path, query, content type and body, sent
    /// to the provider's upstream with `headers` (the caller's, already cleaned of control and
    /// hop-by-hop headers) and the operation's own key where it first travelled.
    pub fn resend(
        self,
        provider: &Provider,
        mut headers: HeaderMap,
        key: &str,
        placement: Option<&KeyPlacement>,
    ) -> Result<Outgoing, Unbuildable> {
        let up = &provider.upstream;
        let uri = format!(
            "{}://{}{}",
            up.scheme.as_str(),
            up.authority(),
            self.path_and_query
        )
        .parse::<Uri>()?;
        headers.remove(header::CONTENT_LENGTH);
        match self.content_type {
            Some(ct) => headers.insert(header::CONTENT_TYPE, ct),
            None => headers.remove(header::CONTENT_TYPE),
        };
        // In the body, the key is already where the first attempt put it.
        if let Some(KeyPlacement::Header(name)) = placement.or(Some(&provider.key)) {
            let value = HeaderValue::from_str(key)?;
            headers.insert(name.clone(), value);
        }
        Ok(Outgoing {
            method: self.method,
            uri,
            headers,
            body: self.body,
        })
    }

    /// The plain bytes `seal` encrypts (public for the fuzz targets in `fuzz/` only).
    #[doc(hidden)]
    pub fn encode(&self) -> Vec<u8> {
        let ct = self
            .content_type
            .as_ref()
            .map_or(&b""[..], |v| v.as_bytes());
        let mut out =
            Vec::with_capacity(13 + self.path_and_query.len() + ct.len() + self.body.len());
        out.push(V1);
        put(&mut out, self.method.as_str().as_bytes());
        put(&mut out, self.path_and_query.as_bytes());
        out.push(u8::from(self.content_type.is_some()));
        put(&mut out, ct);
        out.extend_from_slice(&self.body);
        out
    }

    /// The request `encode` wrote; `None` for anything else (public for the fuzz targets in
    /// `fuzz/` only).
    #[doc(hidden)]
    pub fn decode(bytes: &[u8]) -> Option<KeptRequest> {
        let (&version, mut rest) = bytes.split_first()?;
        if version != V1 {
            return None;
        }
        let method = Method::from_bytes(take(&mut rest)?).ok()?;
        let path_and_query = String::from_utf8(take(&mut rest)?.to_vec()).ok()?;
        let (&has_ct, after) = rest.split_first()?;
        rest = after;
        let ct = take(&mut rest)?;
        // Only what `encode` writes: a flag of 0 or 1, and no content type behind a 0.
        let content_type = match (has_ct, ct) {
            (0, []) => None,
            (1, ct) => Some(HeaderValue::from_bytes(ct).ok()?),
            _ => return None,
        };
        Some(KeptRequest {
            method,
            path_and_query,
            content_type,
            body: Bytes::copy_from_slice(rest),
        })
    }
}

/// Why the request of an attempt cannot be built: nothing of it is sent (a first attempt is
/// refused as `invalid-body`; a re-send is recorded as never having reached the provider).
#[derive(Debug, thiserror::Error)]
pub enum Unbuildable {
    /// The kept path and query make no valid URI at the provider.
    #[error(transparent)]
    Uri(#[from] http::uri::InvalidUri),
    /// The operation's key is not a valid header value where its first attempt carried it.
    #[error(transparent)]
    KeyHeader(#[from] http::header::InvalidHeaderValue),
    /// The key is not a valid header value for a request that carries none yet.
    #[error("the idempotency key is not a valid header value")]
    KeyNotHeaderValue,
    #[error(
        "the provider takes its idempotency key in the JSON body at {pointer}, but the body is not JSON"
    )]
    BodyNotJson { pointer: String },
    /// The JSON body has no place for the key at its pointer.
    #[error(transparent)]
    KeyNotPlaced(#[from] InvalidBody),
    /// The kept first request was sealed under another secret, or is corrupt.
    #[error("the kept first request cannot be opened with this installation's secret")]
    Sealed,
}

/// The key placed on a request that has none yet (the first attempt, or a re-send of an
/// operation whose first request is no longer kept): as a header, or into the JSON body.
pub fn place_key(
    mut plain: Outgoing,
    key: &str,
    placement: &KeyPlacement,
) -> Result<Outgoing, Unbuildable> {
    match placement {
        KeyPlacement::Header(name) => {
            let value = HeaderValue::from_str(key).map_err(|_| Unbuildable::KeyNotHeaderValue)?;
            plain.headers.insert(name.clone(), value);
        }
        KeyPlacement::JsonField(pointer) => {
            if serde_json::from_slice::<serde::de::IgnoredAny>(&plain.body).is_err() {
                return Err(Unbuildable::BodyNotJson {
                    pointer: pointer.clone(),
                });
            }
            plain.body = identity::inject_json_key(&plain.body, pointer, key)?;
            plain.headers.remove(header::CONTENT_LENGTH);
        }
    }
    Ok(plain)
}

fn put(out: &mut Vec<u8>, chunk: &[u8]) {
    let len = u32::try_from(chunk.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(chunk);
}

fn take<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (len, after) = rest.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
    if after.len() < len {
        return None;
    }
    let (chunk, after) = after.split_at(len);
    *rest = after;
    Some(chunk)
}

/// Callers' headers kept in memory at most (the oldest are forgotten first).
const REMEMBERED: usize = 4096;

/// The headers of each unknown operation's last request, in memory only: the settler
/// re-sends with the credentials of the operation's own last caller, never another's.
#[derive(Default)]
pub struct Credentials {
    inner: Mutex<Remembered>,
}

#[derive(Default)]
struct Remembered {
    by_id: HashMap<String, (u64, HeaderMap)>,
    next: u64,
}

impl Credentials {
    /// Remembers the cleaned headers of the last request for `id` (forgetting the oldest
    /// entry when full).
    pub fn remember(&self, id: &str, headers: HeaderMap) {
        let mut r = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        r.next += 1;
        let n = r.next;
        r.by_id.insert(id.to_owned(), (n, headers));
        if r.by_id.len() > REMEMBERED {
            let oldest = r
                .by_id
                .iter()
                .min_by_key(|(_, (n, _))| *n)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                r.by_id.remove(&oldest);
            }
        }
    }

    pub fn get(&self, id: &str) -> Option<HeaderMap> {
        let r = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        r.by_id.get(id).map(|(_, h)| h.clone())
    }

    pub fn forget(&self, id: &str) {
        let mut r = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        r.by_id.remove(id);
    }

    /// Where the remembered headers stand now: what `keep_only` may forget is what was
    /// remembered up to this mark.
    pub fn mark(&self) -> Mark {
        Mark(
            self.inner
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .next,
        )
    }

    /// Forgets the headers remembered up to `since` of every operation `keep` says no to
    /// (those no longer unknown). Headers remembered after `since` stay whatever `keep` says:
    /// their operation turned unknown after the caller's listing was read.
    pub fn keep_only(&self, since: Mark, keep: impl Fn(&str) -> bool) {
        let mut r = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        r.by_id.retain(|id, (n, _)| *n > since.0 || keep(id));
    }
}

/// A point in the order `Credentials::remember` was called in (`Credentials::mark`).
#[derive(Debug, Clone, Copy)]
pub struct Mark(u64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_only_forgets_nothing_remembered_after_its_mark() {
        let credentials = Credentials::default();
        credentials.remember("settled", HeaderMap::new());
        credentials.remember("listed", HeaderMap::new());
        let mark = credentials.mark();
        credentials.remember("turned-unknown-later", HeaderMap::new());
        credentials.keep_only(mark, |id| id == "listed");
        assert!(credentials.get("settled").is_none());
        assert!(credentials.get("listed").is_some());
        assert!(credentials.get("turned-unknown-later").is_some());
        credentials.keep_only(credentials.mark(), |id| id == "listed");
        assert!(credentials.get("turned-unknown-later").is_none());
    }

    fn kept(ct: Option<&'static str>) -> KeptRequest {
        KeptRequest {
            method: Method::POST,
            path_and_query: "/base/v1/refunds?expand=charge".into(),
            content_type: ct.map(HeaderValue::from_static),
            body: Bytes::from_static(b"amount=500&metadata[trace_id]=t1"),
        }
    }

    #[test]
    fn round_trips_sealed_and_only_for_its_operation() {
        let secret = Secret::from_bytes([7; 32]);
        for request in [kept(Some("application/x-www-form-urlencoded")), kept(None)] {
            let sealed = request.seal(&secret, "p/r/1").expect("sealed");
            assert_eq!(KeptRequest::open(&secret, "p/r/1", &sealed), Some(request));
            assert_eq!(KeptRequest::open(&secret, "p/r/2", &sealed), None);
        }
    }

    proptest::proptest! {
        #[test]
        fn every_kept_request_round_trips_through_its_bytes(
            method in "[A-Z]{1,10}|[!#$%&'*+.^_`|~0-9a-z-]{1,12}",
            path_and_query in ".*",
            content_type in proptest::option::of("[ -~\t]*"),
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            let request = KeptRequest {
                method: Method::from_bytes(method.as_bytes()).expect("a token"),
                path_and_query,
                content_type: content_type.map(|ct| HeaderValue::from_str(&ct).expect("visible ASCII")),
                body: Bytes::from(body),
            };
            let bytes = request.encode();
            proptest::prop_assert_eq!(KeptRequest::decode(&bytes), Some(request));
        }

        #[test]
        fn bytes_that_decode_encode_back_to_themselves(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            if let Some(request) = KeptRequest::decode(&bytes) {
                proptest::prop_assert_eq!(request.encode(), bytes);
            }
        }
    }

    #[test]
    fn a_content_type_flag_encode_never_writes_decodes_to_nothing() {
        let bytes = kept(Some("text/plain")).encode();
        let flag = 1 + 4 + "POST".len() + 4 + kept(None).path_and_query.len();
        assert_eq!(bytes[flag], 1);
        let mut other = bytes.clone();
        other[flag] = b'x';
        assert_eq!(KeptRequest::decode(&other), None);
        // A 0 flag with a content type behind it.
        other[flag] = 0;
        assert_eq!(KeptRequest::decode(&other), None);
    }

    #[test]
    fn truncated_bytes_decode_to_nothing() {
        let bytes = kept(Some("text/plain")).encode();
        let body_starts = bytes.len() - kept(None).body.len();
        for cut in 0..body_starts {
            assert_eq!(KeptRequest::decode(&bytes[..cut]), None, "cut at {cut}");
        }
    }
}
