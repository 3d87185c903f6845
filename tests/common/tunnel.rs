//! An HTTPS_PROXY client in tests: a new local CA for the proxy's `[intercept]`, a `CONNECT`
//! on the proxy's listener, TLS inside it trusting only that CA, and one HTTP/1.1 or h2
//! request sent through it.
//!
//! Like the rest of `common`, it sees only the proxy's files and wire (the CA is made with the
//! crate's `authority::generate`, as `idemproxy ca init` makes it). Test modules reach it as
//! `crate::common::tunnel` and use only part of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use http::{Method, Request};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::common::client::full;
use crate::common::raw::WAIT;
use crate::common::{ProxyBuilder, Resp};

/// A local CA as `idemproxy ca init` makes it: the certificate and key in PEM.
pub struct Ca {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Ca {
    pub fn new() -> Ca {
        let now = idemproxy::clock::Timestamp::now().to_datetime();
        let ca = idemproxy::authority::generate(now).expect("a CA");
        Ca {
            cert_pem: ca.cert_pem,
            key_pem: ca.key_pem,
        }
    }

    /// The base64 body of the key's PEM, which must never appear in a log.
    pub fn key_body(&self) -> String {
        self.key_pem
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect()
    }
}

/// `builder` with `ca/ca.pem`, `ca/ca.key` and an `[intercept]` table naming them and the
/// `tunnel` entries.
pub fn intercepting(builder: ProxyBuilder, ca: &Ca, tunnel: &[String]) -> ProxyBuilder {
    let tunnel: Vec<String> = tunnel.iter().map(|t| format!("{t:?}")).collect();
    builder
        .file("ca/ca.pem", &ca.cert_pem)
        .file("ca/ca.key", &ca.key_pem)
        .config(&format!(
            "[intercept]\nca_cert = \"ca/ca.pem\"\nca_key = \"ca/ca.key\"\ntunnel = [{}]\n",
            tunnel.join(", ")
        ))
}

/// Sends `CONNECT target` on a new connection to the proxy; returns the answer's status and
/// head (with its body, for a refusal) and the connection, ready for the tunnel after a 200.
pub async fn connect(proxy: SocketAddr, target: &str) -> (u16, String, TcpStream) {
    let mut stream = TcpStream::connect(proxy)
        .await
        .expect("connect to the proxy");
    let head = format!("CONNECT {target} HTTP/1.1\r\nhost: {target}\r\n\r\n");
    stream.write_all(head.as_bytes()).await.expect("CONNECT");
    let answer = tokio::time::timeout(WAIT, read_head(&mut stream))
        .await
        .expect("an answer to CONNECT");
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    (status, answer, stream)
}

/// Reads up to the end of an answer's head, then whatever of its body has arrived with it
/// (the proxy's refusals are small and written at once). Never reads past a 200's head.
async fn read_head(stream: &mut TcpStream) -> String {
    let mut data = Vec::new();
    let mut byte = [0u8; 1];
    while !data.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).await.expect("read the answer");
        assert!(n > 0, "closed before a full answer head: {data:?}");
        data.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&data).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).await.expect("the answer body");
    head + &String::from_utf8_lossy(&body)
}

/// TLS on an open tunnel, trusting only `ca`, for the name `host`, offering `alpn`.
pub async fn tls(stream: TcpStream, host: &str, ca: &Ca, alpn: &[&[u8]]) -> TlsStream<TcpStream> {
    let mut roots = RootCertStore::empty();
    let der: CertificateDer<'static> = rustls_pemfile::certs(&mut ca.cert_pem.as_bytes())
        .next()
        .expect("a certificate")
        .expect("PEM");
    roots.add(der).expect("the CA as a root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let name = ServerName::try_from(host.to_string()).expect("a server name");
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, stream)
        .await
        .expect("a TLS handshake with the proxy's leaf, trusted through the CA")
}

/// One request through a new tunnel to `host:port`: CONNECT, TLS for `host`, then HTTP/1.1
/// (`h2` false) or h2 as ALPN agreed. `Host` (or `:authority`) is `authority`.
pub struct Through<'a> {
    pub proxy: SocketAddr,
    pub ca: &'a Ca,
    pub host: &'a str,
    pub port: u16,
    pub h2: bool,
}

impl Through<'_> {
    /// Sends `method path` with `headers` and `body` in a new tunnel; `Host` names the
    /// tunnel's host and port.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Resp {
        let authority = format!("{}:{}", self.host, self.port);
        self.send_for(&authority, method, path, headers, body).await
    }

    /// The same, with `Host`/`:authority` naming `authority`.
    pub async fn send_for(
        &self,
        authority: &str,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Resp {
        let target = format!("{}:{}", self.host, self.port);
        let (status, head, stream) = connect(self.proxy, &target).await;
        assert_eq!(status, 200, "CONNECT {target}: {head}");
        let alpn: &[&[u8]] = if self.h2 { &[b"h2"] } else { &[b"http/1.1"] };
        let tls = tls(stream, self.host, self.ca, alpn).await;
        let agreed = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        let io = TokioIo::new(tls);
        let mut request = if self.h2 {
            assert_eq!(agreed.as_deref(), Some(&b"h2"[..]), "ALPN h2");
            Request::builder().uri(format!("https://{authority}{path}"))
        } else {
            Request::builder().uri(path).header("host", authority)
        };
        request = request.method(method);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(full(body.to_string())).expect("a request");
        let response = if self.h2 {
            let (mut sender, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .expect("h2 handshake");
            tokio::spawn(conn);
            sender.send_request(request).await
        } else {
            let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .expect("HTTP/1.1 handshake");
            tokio::spawn(conn);
            sender.send_request(request).await
        };
        let (parts, body) = response.expect("an answer through the tunnel").into_parts();
        let body = body.collect().await.expect("the answer body").to_bytes();
        Resp {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }
}
