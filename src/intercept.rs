//! `CONNECT` on the agents' listener, for clients that only honour `HTTPS_PROXY`
//! (docs/reference.md section 6.3).
//!
//! With `[intercept]`, a CONNECT to a host and port a provider's https `upstream` names is
//! answered 200; the connection then becomes a TLS server (a leaf for that host signed by the
//! local CA, `authority`), and every request inside it is served by `proxy::handle`, the one
//! entry point of every agent request, marked with the tunnel's host (`proxy::Intercepted`) so
//! it is routed to that host's provider as a forward-proxy request would be. A CONNECT to a
//! `tunnel` entry is an opaque byte tunnel; anything else is 403 `no-route`, and without
//! `[intercept]` every CONNECT is 501. The inbound limits hold inside too: the TLS handshake
//! and each request head within `header_timeout`, and the connection's permit (its place
//! under `max_connections`) kept until the tunnel ends. This module never reads a request
//! body and never names the CA key.

use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use crate::app::{App, Live};
use crate::authority::Authority;
use crate::clock::Timestamp;
use crate::config::Intercept;
use crate::drain::Drain;
use crate::inbound::{Answering, HeadTimeout};
use crate::problem::{Context, Problem};
use crate::proxy::Intercepted;
use crate::wire::ProxyBody;

/// A connection's place under `max_connections`, shared by the connection and any tunnel
/// made of it: given back when the last of them ends.
pub type Held = Option<Arc<OwnedSemaphorePermit>>;

/// What a CONNECT becomes.
enum Way {
    /// TLS terminated here, requests served by the request path.
    Intercept(Arc<Authority>),
    /// Bytes passed to and from this upstream connection.
    Tunnel(TcpStream),
}

/// Answers a CONNECT: 200 and the tunnel served once the client's connection is handed over,
/// or the problem refusing it.
pub async fn connect(
    live: Arc<Live>,
    drain: Drain,
    held: Held,
    mut req: Request<Incoming>,
) -> Response<ProxyBody> {
    let app = live.current();
    let (host, port) = match target(&req) {
        Ok(target) => target,
        Err(problem) => return refused(problem),
    };
    let way = match way(&app, &host, port).await {
        Ok(way) => way,
        Err(problem) => {
            tracing::info!(%host, port, outcome = problem.kind(), "CONNECT refused");
            return refused(problem);
        }
    };
    let upgrade = hyper::upgrade::on(&mut req);
    let timeout = app.config.limits.inbound.header_timeout;
    match way {
        Way::Intercept(authority) => {
            tracing::debug!(%host, port, "CONNECT intercepted");
            let tunnel = Tunnel {
                live,
                drain,
                timeout,
                host,
                port,
            };
            tokio::spawn(async move {
                tunnel.serve(upgrade, &authority).await;
                drop(held);
            });
        }
        Way::Tunnel(upstream) => {
            tracing::debug!(%host, port, "CONNECT tunnelled");
            tokio::spawn(async move {
                pass(upgrade, upstream).await;
                drop(held);
            });
        }
    }
    let mut resp = Response::new(crate::wire::full(bytes::Bytes::new()));
    *resp.status_mut() = StatusCode::OK;
    resp
}

fn refused(problem: Problem) -> Response<ProxyBody> {
    problem.into_response(&Context::default())
}

/// The CONNECT's `host:port` (the host without IPv6 brackets; 443 when no port is named).
fn target(req: &Request<Incoming>) -> Result<(String, u16), Problem> {
    let Some(authority) = req.uri().authority() else {
        return Err(Problem::InvalidPath(
            "of a CONNECT must be `host:port` (e.g. CONNECT api.stripe.com:443)".into(),
        ));
    };
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    Ok((
        host.to_ascii_lowercase(),
        authority.port_u16().unwrap_or(443),
    ))
}

/// Intercepted when a provider's https upstream is `host:port`, tunnelled when `tunnel` lists
/// it (connected here, so a tunnel that cannot be opened is a 502, not a 200 that closes).
async fn way(app: &App, host: &str, port: u16) -> Result<Way, Problem> {
    let Some(intercept) = &app.config.intercept else {
        return Err(Problem::ConnectNotSupported);
    };
    if Intercept::intercepts(&app.config.providers, host, port) {
        return Ok(Way::Intercept(intercept.authority.clone()));
    }
    if !intercept.tunnels(host, port) {
        return Err(Problem::NoHost(format!("{host}:{port}")));
    }
    let timeout = app.config.limits.inbound.header_timeout;
    let unreachable = |why: String| Problem::UpstreamUnreachable(format!("{host}:{port}: {why}"));
    match tokio::time::timeout(timeout, TcpStream::connect((host, port))).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok(Way::Tunnel(stream))
        }
        Ok(Err(e)) => Err(unreachable(e.to_string())),
        Err(_) => Err(unreachable(format!("not connected within {timeout:?}"))),
    }
}

/// Copies bytes both ways until either side closes.
async fn pass(upgrade: OnUpgrade, mut upstream: TcpStream) {
    let Some(client) = upgraded(upgrade).await else {
        return;
    };
    let mut client = TokioIo::new(client);
    if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        tracing::debug!(error = %e, "tunnel ended with an error");
    }
}

async fn upgraded(upgrade: OnUpgrade) -> Option<Upgraded> {
    upgrade
        .await
        .inspect_err(|e| tracing::debug!(error = %e, "CONNECT: the connection was not handed over"))
        .ok()
}

/// An intercepted tunnel: the TLS server and the HTTP connection inside it.
struct Tunnel {
    live: Arc<Live>,
    drain: Drain,
    /// `header_timeout`: for the TLS handshake, and for each request head inside.
    timeout: Duration,
    host: String,
    port: u16,
}

impl Tunnel {
    async fn serve(self, upgrade: OnUpgrade, authority: &Authority) {
        let Some(client) = upgraded(upgrade).await else {
            return;
        };
        let now = Timestamp::now().to_datetime();
        let config = match authority.server_config(&self.host, now) {
            Ok(config) => config,
            Err(e) => {
                tracing::warn!(host = %self.host, error = %e, "CONNECT: no certificate; closed");
                return;
            }
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let handshake = acceptor.accept(TokioIo::new(client));
        let tls = match tokio::time::timeout(self.timeout, handshake).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                tracing::debug!(host = %self.host, error = %e, "CONNECT: TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(host = %self.host, "CONNECT: no TLS handshake within header_timeout; closed");
                return;
            }
        };
        let (io, phase) = HeadTimeout::new(TokioIo::new(tls), self.timeout);
        let (live, mark) = (
            self.live.clone(),
            Intercepted {
                host: self.host.clone(),
                port: self.port,
            },
        );
        let svc = service_fn(move |mut req: Request<Incoming>| {
            phase.begin(req.version());
            req.extensions_mut().insert(mark.clone());
            Answering::new(
                crate::proxy::handle(live.current(), req),
                phase.clone(),
                false,
            )
        });
        let builder = crate::inbound::builder();
        let conn = builder.serve_connection(io, svc).into_owned();
        if let Err(e) = self.drain.watch(conn).await {
            tracing::debug!(error = %e, "intercepted connection ended with an error");
        }
    }
}
