//! Talking to providers: pooled connections per provider, TLS by rustls.
//!
//! A plain-`http` provider is reached through a lean pool of HTTP/1.1 connections (`pool`);
//! a TLS one through hyper-util's pooled client, which negotiates h2 or HTTP/1.1 by ALPN.
//! This module owns connection pooling, TLS trust (the bundled web roots plus a provider's
//! `ca_file`; verification is never switched off), a provider's `connect_to` address (TLS
//! still verifies the upstream's own name), ALPN (h2 or HTTP/1.1) and the header
//! hygiene of both directions (hop-by-hop headers, control headers, `Host`). It never decides
//! whether a request may be sent; `proxy` does, after the ledger has spoken.

use std::future::Future;
use std::io::BufReader;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::Either;
use http::header;
use http::uri::InvalidUri;
use http::{HeaderMap, HeaderValue, Request, Response, Uri, Version};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;

use crate::policy::Provider;
use crate::wire::{BoxError, ProxyBody};

mod gate;
mod pool;

pub(crate) use crate::wire::is_hop_by_hop;

pub use gate::{Gate, Gated, Refusal};
pub use pool::ProviderBody;

/// How long a pooled connection may sit idle before it is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A pooled HTTP/1.1 + h2 client over plain TCP or rustls.
pub type HttpClient = Client<Gated<HttpsConnector<Dial>>, ProxyBody>;

/// A client trusting the bundled web roots only, for calls that are not to a provider (the
/// notification webhook).
pub fn plain_client() -> Result<HttpClient, String> {
    Ok(client(tls_config(None)?, None))
}

/// Pooled clients, one per provider (each may trust its own extra CA).
#[derive(Clone)]
pub struct Upstreams {
    /// By provider name, in the config's order: found by comparing names, which for the few
    /// providers of a config is cheaper than hashing the name on every request.
    clients: Arc<[(String, ProviderClient)]>,
}

/// How one provider is reached: a plain-`http` upstream through the lean HTTP/1.1 pool, a TLS
/// one (which may speak h2) through hyper-util's client.
struct ProviderClient {
    client: HttpClient,
    pool: Option<Arc<pool::Pool>>,
    /// The upstream's scheme and authority, which make an origin-form target absolute for
    /// hyper-util's client.
    origin: Option<Uri>,
}

/// Why an exchange with a provider did not produce a response.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// No byte of the request left: the connection (or TLS handshake) never succeeded.
    #[error("could not connect: {0}")]
    Connect(String),
    /// The request may have reached the provider: its outcome is unknown.
    #[error("the exchange broke after the request was sent: {0}")]
    Lost(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

impl Upstreams {
    /// Builds a client per provider. Fails when a `ca_file` cannot be read.
    pub fn new(providers: &[Provider]) -> Result<Upstreams, String> {
        let mut clients = Vec::with_capacity(providers.len());
        for p in providers {
            let tls = tls_config(p.ca_file.as_deref())
                .map_err(|e| format!("{}: ca_file: {e}", p.file.display()))?;
            let origin = target_uri(p, "/", None).ok();
            let pool = origin
                .as_ref()
                .and_then(|base| pool::Pool::new(base, dial(p.connect_to), IDLE_TIMEOUT));
            let client = client(tls, p.connect_to);
            let upstream = ProviderClient {
                client,
                pool,
                origin,
            };
            clients.push((p.name.clone(), upstream));
        }
        Ok(Upstreams {
            clients: clients.into(),
        })
    }

    /// Sends a request (its URI absolute, headers already cleaned) and waits for the
    /// response head. Callers bound it with the provider's `timeout`.
    pub fn send(
        &self,
        provider: &str,
        req: Request<ProxyBody>,
    ) -> impl Future<Output = Result<Response<ProviderBody>, SendError>> {
        self.exchange(provider, req, None, None)
    }

    /// `send` for a guarded attempt: `gate` is checked once the connection is ready (after
    /// connecting and TLS, or on a pooled one) and before the request's first byte; if it
    /// refuses, nothing is written and the exchange fails as `SendError::Connect`.
    pub async fn send_gated(
        &self,
        provider: &str,
        req: Request<ProxyBody>,
        gate: Gate,
    ) -> Result<Response<ProviderBody>, SendError> {
        self.exchange(provider, req, None, Some(gate)).await
    }

    /// Sends a request (its URI absolute, or origin-form for the provider's own upstream;
    /// headers already cleaned) and waits at most `timeout` for the response head.
    ///
    /// Neither this nor `send` is an `async fn`: each would wrap the exchange's future in one
    /// of its own, and the request (a few hundred bytes) would be copied into both.
    pub fn send_within(
        &self,
        provider: &str,
        req: Request<ProxyBody>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Response<ProviderBody>, SendError>> {
        self.exchange(provider, req, Some(timeout), None)
    }

    /// Not an `async fn` either: a pooled exchange returns the pool's future as it is, so a
    /// pass-through carries no wrapper of its own around it (and no second copy of the
    /// request beside the pool's).
    fn exchange(
        &self,
        provider: &str,
        req: Request<ProxyBody>,
        within: Option<Duration>,
        gate: Option<Gate>,
    ) -> impl Future<Output = Result<Response<ProviderBody>, SendError>> {
        let upstream = self
            .clients
            .iter()
            .find(|(name, _)| name == provider)
            .map(|(_, upstream)| upstream);
        match upstream
            .and_then(|u| u.pool.as_ref())
            .filter(|p| p.takes(&req))
        {
            Some(pool) => Either::Left(pool.send(req, within, gate)),
            None => Either::Right(through_client(upstream, provider, req, within, gate)),
        }
    }
}

/// An exchange through hyper-util's client: a request the pool does not take (TLS, h2, another
/// host in absolute form), or a provider without an upstream (`None`: refused).
async fn through_client(
    upstream: Option<&ProviderClient>,
    provider: &str,
    mut req: Request<ProxyBody>,
    within: Option<Duration>,
    gate: Option<Gate>,
) -> Result<Response<ProviderBody>, SendError> {
    let Some(upstream) = upstream else {
        return Err(SendError::Connect(format!("no client for {provider}")));
    };
    if req.uri().scheme().is_none() {
        absolute(req.uri_mut(), upstream.origin.as_ref())?;
    }
    // Boxed, as the pool's connecting is: hyper-util's future is large, and inline it
    // would make every exchange's future that large, the pool's too.
    let sending = Box::pin(upstream.client.request(req));
    // A guarded exchange: a pooled connection is used at once, so it is checked here; a new
    // one is checked by the connector (`Gated`) once its TLS handshake is done.
    let sending = match gate {
        None => Either::Left(sending),
        Some(gate) => {
            gate::check(&gate)?;
            Either::Right(Box::pin(gate::scoped(gate, sending)))
        }
    };
    let sent = match within {
        None => sending.await,
        Some(within) => match tokio::time::timeout(within, sending).await {
            Ok(sent) => sent,
            Err(_) => return Err(SendError::Timeout(within)),
        },
    };
    match sent {
        Ok(resp) => Ok(resp.map(ProviderBody::unpooled)),
        Err(e) if e.is_connect() => Err(SendError::Connect(describe(&e))),
        Err(e) => Err(SendError::Lost(describe(&e))),
    }
}

/// An origin-form target made absolute at the upstream's `origin`, as `target_uri` would
/// have built it.
fn absolute(uri: &mut Uri, origin: Option<&Uri>) -> Result<(), SendError> {
    let unsent = |why: String| SendError::Connect(format!("the request could not be built: {why}"));
    let origin = origin.ok_or_else(|| unsent("the upstream URL is not valid".into()))?;
    let mut parts = http::uri::Parts::default();
    parts.scheme = origin.scheme().cloned();
    parts.authority = origin.authority().cloned();
    parts.path_and_query = uri.path_and_query().cloned();
    *uri = Uri::from_parts(parts).map_err(|e| unsent(e.to_string()))?;
    Ok(())
}

/// The error and its causes on one line, for logs and problem details.
fn describe(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

/// The TCP connector: to the URI's host and port, or to a provider's `connect_to` address.
/// TLS sits above it and takes the server name from the URI, so it still verifies the
/// upstream's own name.
#[derive(Clone)]
pub struct Dial {
    http: HttpConnector,
    to: Option<SocketAddr>,
}

type Dialing = Pin<Box<dyn Future<Output = Result<TokioIo<TcpStream>, BoxError>> + Send>>;

impl tower_service::Service<Uri> for Dial {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Dialing;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Dialing {
        let uri = match self.to {
            None => uri,
            Some(addr) => match Uri::try_from(format!("http://{addr}/")) {
                Ok(uri) => uri,
                Err(e) => return Box::pin(async move { Err(e.into()) }),
            },
        };
        let connecting = self.http.call(uri);
        Box::pin(async move {
            let io = connecting.await?;
            // Closed with a reset, never a FIN after what is still queued: request bytes the
            // kernel holds for an attempt given up on (timed out, or its process killed) must
            // not reach the provider after the attempt's deadline.
            io.inner().set_zero_linger()?;
            Ok(io)
        })
    }
}

/// The TCP connector of every upstream connection: no Nagle delay, 10 s to connect, closed
/// with a reset (`SO_LINGER` 0).
fn dial(connect_to: Option<SocketAddr>) -> Dial {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(10)));
    Dial {
        http,
        to: connect_to,
    }
}

fn client(tls: rustls::ClientConfig, connect_to: Option<SocketAddr>) -> HttpClient {
    let dial = dial(connect_to);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(dial);
    let https = Gated { inner: https };
    Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(IDLE_TIMEOUT)
        .build(https)
}

fn tls_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut added = 0;
        for cert in rustls_pemfile::certs(&mut BufReader::new(file)) {
            let cert = cert.map_err(|e| format!("{}: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            added += 1;
        }
        if added == 0 {
            return Err(format!("{} holds no PEM certificate", path.display()));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// Removes hop-by-hop headers, including every header `Connection` names.
///
/// This runs twice on every forwarded exchange (and most answers carry `Connection:
/// keep-alive`): one pass over the (few) headers present, then one removal per hop-by-hop
/// header found, allocating only for a message with several `Connection` lines.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    if headers.get_all(header::CONNECTION).iter().nth(1).is_none() {
        if let Some(connection) = headers.remove(header::CONNECTION) {
            remove_named(headers, &connection);
        }
    } else if let http::header::Entry::Occupied(entry) = headers.entry(header::CONNECTION) {
        let lines: Vec<HeaderValue> = entry.remove_entry_mult().1.collect();
        for connection in &lines {
            remove_named(headers, connection);
        }
    }
    while let Some(hop) = headers.keys().find(|k| is_hop_by_hop(k)).cloned() {
        headers.remove(hop);
    }
}

/// Removes the headers one `Connection` line names.
fn remove_named(headers: &mut HeaderMap, connection: &HeaderValue) {
    // Most answers' whole line: it names only what the fixed list removes anyway.
    if connection.as_bytes().eq_ignore_ascii_case(b"keep-alive") {
        return;
    }
    let Ok(tokens) = connection.to_str() else {
        return;
    };
    for name in tokens.split(',').map(str::trim) {
        if !name.is_empty() {
            headers.remove(name);
        }
    }
}

/// Cleans an agent's request headers for the provider: control headers and the agent's
/// `Host` go (the client sets the upstream's `Host` from the URI). Hop-by-hop headers went
/// before the request was routed (`proxy::routed`), so the guard reads what is sent.
pub fn outbound_headers(headers: &mut HeaderMap, provider: &Provider) {
    headers.remove(header::HOST);
    // One pass over the (few) headers present before any removal, which hashes each name.
    if headers
        .keys()
        .any(|name| provider.control_headers.contains(name))
    {
        for name in &provider.control_headers {
            headers.remove(name);
        }
    }
}

/// The request headers that change with what the proxy is, set before a request is handed
/// to `guard` or streamed: `Expect` goes (the proxy answers `100 Continue` itself when it
/// reads the body, and the upstream hop never waits for one), this proxy's `Via` entry is
/// appended, and a guarded request asks for `identity`, since its answer is stored and
/// replayed to agents that may not have asked for the encoding this one did.
pub fn forwarding_headers(headers: &mut HeaderMap, via: &Via, version: Version, guarded: bool) {
    // One pass over the (few) headers present, instead of a lookup by name for each.
    let (mut expect, mut has_via) = (false, false);
    for name in headers.keys() {
        expect |= *name == header::EXPECT;
        has_via |= *name == header::VIA;
    }
    if expect {
        headers.remove(header::EXPECT);
    }
    via.append(headers, version, has_via);
    if guarded {
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
}

/// This proxy's entry in `Via` (RFC 9110 7.6.3): `idemproxy-` and a keyed hash of a constant
/// under the installation secret, so it is the same for every process (and replica) of one
/// installation, differs between installations (two chained proxies are not a loop), and
/// reveals nothing about the host.
#[derive(Debug, Clone)]
pub struct Via {
    pseudonym: String,
    /// `1.1 idemproxy-XXXXXXXX` and `2 idemproxy-XXXXXXXX`, made once: most requests carry
    /// no `Via` of their own and get one of these as it is.
    http1: HeaderValue,
    http2: HeaderValue,
}

impl Via {
    pub fn of(secret: &crate::secret::Secret) -> Via {
        let tag = secret.mac_hex("via", b"idemproxy via pseudonym");
        let pseudonym = format!("idemproxy-{}", &tag[..8]);
        let entry = |protocol: &str| {
            HeaderValue::try_from(format!("{protocol} {pseudonym}"))
                .expect("a pseudonym of hex digits is a valid header value")
        };
        Via {
            http1: entry("1.1"),
            http2: entry("2"),
            pseudonym,
        }
    }

    /// Whether a request's `Via` already lists this proxy: it came back round a loop.
    pub fn seen_in(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(header::VIA)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|entry| entry.split_whitespace().nth(1))
            .any(|received_by| received_by.eq_ignore_ascii_case(&self.pseudonym))
    }

    /// Appends `PROTOCOL idemproxy-XXXXXXXX` to the request's `Via` (`present`: whether it
    /// has one), as one header line.
    fn append(&self, headers: &mut HeaderMap, version: Version, present: bool) {
        let own = match version {
            Version::HTTP_11 => Some(&self.http1),
            Version::HTTP_2 => Some(&self.http2),
            _ => None,
        };
        if let Some(own) = own.filter(|_| !present) {
            headers.insert(header::VIA, own.clone());
            return;
        }
        let protocol = match version {
            Version::HTTP_09 => "0.9",
            Version::HTTP_10 => "1.0",
            Version::HTTP_2 => "2",
            Version::HTTP_3 => "3",
            _ => "1.1",
        };
        let mut value = Vec::new();
        for earlier in headers.get_all(header::VIA) {
            value.extend_from_slice(earlier.as_bytes());
            value.extend_from_slice(b", ");
        }
        value.extend_from_slice(format!("{protocol} {}", self.pseudonym).as_bytes());
        if let Ok(value) = HeaderValue::from_bytes(&value) {
            headers.insert(header::VIA, value);
        }
    }
}

/// The provider URL for a route-relative path and query, built in one buffer (it is on
/// every forwarded request's path) and parsed without another copy.
pub fn target_uri(
    provider: &Provider,
    rel_path: &str,
    query: Option<&str>,
) -> Result<Uri, InvalidUri> {
    use std::fmt::Write as _;
    let up = &provider.upstream;
    let query_len = query.map_or(0, |q| q.len() + 1);
    let mut s = String::with_capacity(
        up.scheme.as_str().len()
            + up.host.len()
            + up.base_path.len()
            + rel_path.len()
            + query_len
            + 16,
    );
    s.push_str(up.scheme.as_str());
    s.push_str("://");
    if up.host.contains(':') {
        let _ = write!(s, "[{}]", up.host);
    } else {
        s.push_str(&up.host);
    }
    if up.explicit_port {
        let _ = write!(s, ":{}", up.port);
    }
    push_path(&mut s, &up.base_path, rel_path, query);
    Uri::try_from(s)
}

/// Appends the upstream's base path, the route-relative path and the query to a target. The
/// mount itself (`/`) is the base path itself: `/mcp/billing` under `upstream = "http://h/mcp"`
/// goes to `/mcp`, never `/mcp/` (a server may take that for another resource, or redirect).
fn push_path(s: &mut String, base_path: &str, rel_path: &str, query: Option<&str>) {
    s.push_str(base_path);
    if rel_path != "/" || base_path.is_empty() {
        s.push_str(rel_path);
    }
    if let Some(q) = query {
        s.push('?');
        s.push_str(q);
    }
}

/// The origin-form target (`/base/path?query`) at the provider's upstream of a route-relative
/// path and query: what a pass-through request sends. `Upstreams::send_within` takes it as
/// it is to a pooled plain-`http` upstream (which is sent nothing else) and makes it absolute
/// for hyper-util's client; it is `target_uri` without the scheme and authority that the pool
/// would cut off again. A target too long for an absolute URI is refused as `target_uri`
/// refuses it.
pub fn origin_target(
    provider: &Provider,
    rel_path: &str,
    query: Option<&str>,
) -> Result<Uri, InvalidUri> {
    let base_path = &provider.upstream.base_path;
    let query_len = query.map_or(0, |q| q.len() + 1);
    let len = base_path.len() + rel_path.len() + query_len;
    if len + ABSOLUTE_PREFIX > MAX_URI {
        return target_uri(provider, rel_path, query);
    }
    let mut s = String::with_capacity(len + 1);
    // An origin-form target starts with `/` even when both paths are empty.
    let rel_path = if base_path.is_empty() && rel_path.is_empty() {
        "/"
    } else {
        rel_path
    };
    push_path(&mut s, base_path, rel_path, query);
    Uri::try_from(s)
}

/// The longest URI `http` parses, and a bound on the length of an upstream's
/// `scheme://host:port` that no real one reaches: a target within both is as valid in origin
/// form as absolute, and one beyond goes the absolute way for the same answer.
const MAX_URI: usize = u16::MAX as usize - 1;
const ABSOLUTE_PREFIX: usize = 300;

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderName;

    #[test]
    fn strips_hop_by_hop_and_connection_named_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret-hop"),
        );
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert(
            header::PROXY_AUTHORIZATION,
            HeaderValue::from_static("Basic x"),
        );
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer x"));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        strip_hop_by_hop(&mut h);
        let mut left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        left.sort();
        assert_eq!(left, vec!["authorization", "content-type"]);
    }

    #[test]
    fn the_hop_by_hop_names_are_the_nine_of_rfc_9110_and_proxies() {
        let hop = [
            "Connection",
            "Keep-Alive",
            "Proxy-Connection",
            "TE",
            "Trailer",
            "Transfer-Encoding",
            "Upgrade",
            "Proxy-Authorization",
            "Proxy-Authenticate",
        ];
        for name in hop {
            let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
            assert!(is_hop_by_hop(&name), "{name}");
        }
        for name in [
            "x-connection",
            "keep-alives",
            "authorization",
            "host",
            "via",
            "close",
        ] {
            let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
            assert!(!is_hop_by_hop(&name), "{name}");
        }
    }

    #[test]
    fn every_connection_line_and_token_is_honoured_in_any_case() {
        let mut h = HeaderMap::new();
        h.append(header::CONNECTION, HeaderValue::from_static("close, X-One"));
        h.append(
            header::CONNECTION,
            HeaderValue::from_static(" x-two ,,bad name"),
        );
        h.insert("x-one", HeaderValue::from_static("1"));
        h.insert("x-two", HeaderValue::from_static("2"));
        h.insert(header::UPGRADE, HeaderValue::from_static("h2c"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert("x-kept", HeaderValue::from_static("3"));
        strip_hop_by_hop(&mut h);
        let left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, vec!["x-kept"]);
    }

    #[test]
    fn via_is_appended_and_recognised_when_it_comes_back() {
        let via = Via::of(&crate::secret::Secret::from_bytes([7; 32]));
        let mut h = HeaderMap::new();
        h.insert(header::VIA, HeaderValue::from_static("1.0 fred"));
        h.append(
            header::VIA,
            HeaderValue::from_static("1.1 p.example.net (Apache)"),
        );
        assert!(!via.seen_in(&h));
        via.append(&mut h, Version::HTTP_2, true);
        let value = h.get(header::VIA).unwrap().to_str().unwrap().to_string();
        assert!(value.starts_with("1.0 fred, 1.1 p.example.net (Apache), 2 idemproxy-"));
        assert_eq!(h.get_all(header::VIA).iter().count(), 1);
        assert!(via.seen_in(&h));
        let other = Via::of(&crate::secret::Secret::from_bytes([8; 32]));
        assert!(!other.seen_in(&h), "another installation is not a loop");
    }

    #[test]
    fn a_request_without_via_gets_the_one_entry_for_its_protocol() {
        let via = Via::of(&crate::secret::Secret::from_bytes([7; 32]));
        for (version, protocol) in [
            (Version::HTTP_10, "1.0"),
            (Version::HTTP_11, "1.1"),
            (Version::HTTP_2, "2"),
        ] {
            let mut h = HeaderMap::new();
            via.append(&mut h, version, false);
            let value = h.get(header::VIA).unwrap().to_str().unwrap().to_string();
            assert_eq!(value, format!("{protocol} {}", via.pseudonym));
            assert!(via.seen_in(&h));
        }
    }

    #[test]
    fn bundled_roots_load_and_a_missing_ca_file_is_an_error() {
        assert!(tls_config(None).is_ok());
        let err = tls_config(Some(Path::new("/nonexistent/ca.pem"))).unwrap_err();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
    }
}
