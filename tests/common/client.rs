//! The agent's side in tests: a plain-HTTP client (HTTP/1.1 or h2c with prior knowledge)
//! and a `send` helper that returns the whole answer buffered.

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::rt::TokioExecutor;

/// Every request body in tests: buffered bytes or a streamed pattern.
pub type Body = BoxBody<Bytes, Infallible>;

/// A buffered body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// A fully read answer.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    /// The header's value as text, if present and visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the body in the message when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }
}

/// Asserts an RFC 9457 problem answer of this status and `urn:idemproxy:{kind}`; returns its
/// JSON body.
pub fn problem(resp: &Resp, status: StatusCode, kind: &str) -> serde_json::Value {
    let body = resp.json();
    assert_eq!(resp.status, status, "{body}");
    assert_eq!(
        resp.header("content-type"),
        Some("application/problem+json"),
        "{body}"
    );
    assert_eq!(body["type"], format!("urn:idemproxy:{kind}"), "{body}");
    assert_eq!(body["status"], status.as_u16(), "{body}");
    assert!(body["title"].is_string(), "{body}");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(detail.len() > 20, "detail is written for a person: {body}");
    body
}

/// Asserts a problem body's `next` (docs/reference.md section 6.2) and that its `detail` holds
/// each of `words`; returns the detail.
pub fn assert_next(body: &serde_json::Value, next: &str, words: &[&str]) -> String {
    assert_eq!(body["next"], next, "{body}");
    let detail = body["detail"].as_str().unwrap_or_default().to_owned();
    for w in words {
        assert!(detail.contains(w), "{w:?} not in the detail: {body}");
    }
    detail
}

/// An HTTP/1.1 client over plain TCP.
pub fn client() -> Client<HttpConnector, Body> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// An h2c client: HTTP/2 over plain TCP with prior knowledge, as agents reach the proxy.
pub fn h2c_client() -> Client<HttpConnector, Body> {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// Sends one request over HTTP/1.1 with a fresh client (no pooled connection survives a
/// proxy restart) and reads the whole answer.
pub async fn send(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Result<Resp, hyper_util::client::legacy::Error> {
    send_with(&client(), method, url, headers, full(body)).await
}

/// `send` over h2c.
pub async fn send_h2c(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Result<Resp, hyper_util::client::legacy::Error> {
    send_with(&h2c_client(), method, url, headers, full(body)).await
}

/// GETs `url` and drains the answer without holding it: (status, byte count, whether every
/// byte followed the `pattern`).
pub async fn download(url: &str) -> (StatusCode, u64, bool) {
    let request = Request::get(url)
        .body(full(""))
        .expect("valid test request");
    let response = client().request(request).await.expect("download answer");
    let status = response.status();
    let (count, ok) = super::pattern::drain(response.into_body())
        .await
        .expect("download body");
    (status, count, ok)
}

/// POSTs `len` pattern bytes to `url`, streamed, and reads the (small) answer.
pub async fn upload(url: &str, len: u64) -> Resp {
    let body = super::pattern::PatternBody::new(len).boxed();
    send_with(&client(), Method::POST, url, &[], body)
        .await
        .expect("upload answer")
}

/// Sends one request with the given client. Transport errors are returned (a test of a
/// dropped connection asserts on them); a body that breaks off mid-way panics.
pub async fn send_with<C>(
    client: &Client<C, Body>,
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Body,
) -> Result<Resp, hyper_util::client::legacy::Error>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    let mut request = Request::builder().method(method).uri(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(body).expect("valid test request");
    let response = client.request(request).await?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("answer body").to_bytes();
    Ok(Resp {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}
