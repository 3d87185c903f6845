//! The two listeners (agents and admin), their connections, and graceful shutdown.
//!
//! Agents speak HTTP/1.1 or h2c (prior knowledge) to one listener; the admin API listens on
//! another, sharing the same `Live` app: each request takes the current `App` when it starts
//! and keeps it to its end, so a reload (SIGHUP, `reload`) reaches every later request, on
//! open connections too. On SIGTERM, SIGINT or SIGQUIT (each logged) both stop accepting, open
//! connections finish their requests, guarded exchanges already sent are recorded and the
//! replays counted are written (`replays`), all within `shutdown_grace`; then the shards stop.
//! The inbound limits (`header_timeout`, `max_connections`, the pause after a failed accept)
//! are applied here through `inbound`. Both listeners accept on the runtime that runs the
//! server; an agent's connection is then handed to the next shard (`shard`, one
//! single-threaded runtime per core) and served there, an operator's stays where it was
//! accepted. A CONNECT on the agents' listener goes to `intercept`, which keeps the
//! connection's permit for as long as the tunnel it makes lives.

use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use futures_util::future::Either;
use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::sync::OwnedSemaphorePermit;

use crate::admin::token::Token;
use crate::app::{App, Live};
use crate::config::Config;
use crate::drain::Drain;
use crate::inbound::{Acceptor, Answering, HeadTimeout, builder};
use crate::intercept::Held;
use crate::notify::notifier::Notifier;
use crate::operation::Operation;
use crate::reload::{Reloader, Trigger};
use crate::shard::Shards;
use crate::wire::ProxyBody;

/// The bound addresses, known once both listeners are up.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub proxy: SocketAddr,
    pub admin: SocketAddr,
}

/// Both listeners, bound and not yet serving.
pub struct Server {
    live: Arc<Live>,
    reloader: Arc<Reloader>,
    proxy: TcpListener,
    admin: TcpListener,
    bound: Bound,
    /// Where the agents' connections are served: one single-threaded runtime per core.
    shards: Shards,
}

impl Server {
    /// Binds `listen` and `admin_listen` (port 0 picks a free port).
    pub async fn bind(app: Arc<App>) -> std::io::Result<Server> {
        let proxy = bind(app.config.listen, "listen").await?;
        let admin = bind(app.config.admin_listen, "admin_listen").await?;
        let bound = Bound {
            proxy: proxy.local_addr()?,
            admin: admin.local_addr()?,
        };
        let shards = Shards::per_core()
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot start the shards: {e}")))?;
        let live = Arc::new(Live::new(app));
        let reloader = Arc::new(Reloader::new(live.clone()));
        Ok(Server {
            live,
            reloader,
            proxy,
            admin,
            bound,
            shards,
        })
    }

    pub fn bound(&self) -> Bound {
        self.bound
    }

    /// Reloads this server's configuration (SIGHUP, `POST /admin/reload`).
    pub fn reloader(&self) -> Arc<Reloader> {
        self.reloader.clone()
    }

    /// Serves both listeners until `shutdown` resolves, then drains within `shutdown_grace`;
    /// `services` go to the admin API and the notifier.
    pub async fn run(self, services: Services, shutdown: impl Future<Output = ()>) {
        let Services {
            admin_token,
            notifier,
        } = services;
        let Server {
            live,
            reloader,
            proxy,
            admin,
            shards,
            ..
        } = self;
        let app = live.current();
        let drain = Drain::new();
        let inbound = &app.config.limits.inbound;
        let builder = builder();
        let mut agents = Acceptor::limited("listen", inbound.max_connections);
        let mut operators = Acceptor::open("admin_listen");
        tokio::pin!(shutdown);
        // Pruning runs beside the listeners; dropping `stop_retention` ends it.
        let (stop_retention, retention_stopped) = tokio::sync::oneshot::channel::<()>();
        let retention = tokio::spawn(crate::retention::run(live.clone(), retention_stopped));
        let (stop_settler, settler_stopped) = tokio::sync::oneshot::channel::<()>();
        let settler = tokio::spawn(crate::settle::run(live.clone(), settler_stopped));
        // Subscribed here, before the first connection is accepted, so no event is missed.
        let (stop_notifier, notifier_stopped) = tokio::sync::oneshot::channel::<()>();
        let feed = app.ledger.subscribe();
        let notifier = tokio::spawn(crate::notify::run(
            live.clone(),
            notifier,
            feed,
            notifier_stopped,
        ));
        let operate = move |app, req| {
            crate::admin::handle::<Incoming>(app, admin_token.clone(), reloader.clone(), req)
        };
        // The replay counts are written until the connections have drained, then once more.
        let (stop_replays, replays_stopped) = tokio::sync::oneshot::channel::<()>();
        let replays = tokio::spawn(crate::tally::run(
            app.ledger.clone(),
            app.tally.clone(),
            replays_stopped,
        ));
        let replays_abort = replays.abort_handle();
        loop {
            tokio::select! {
                conn = agents.accept(&proxy) => {
                    let on = Some(shards.next());
                    serve_conn(&builder, &drain, conn, on, &live, true, crate::proxy::handle);
                },
                conn = operators.accept(&admin) => {
                    serve_conn(&builder, &drain, conn, None, &live, false, operate.clone());
                },
                () = &mut shutdown => break,
            }
        }
        drop((proxy, admin));
        // A reload during the loop left its app here: the stop follows its settings.
        let app = live.current();
        app.closing.cancel();
        drop((stop_retention, stop_settler, stop_notifier));
        // Their clones of the app (and the ledger) are gone before `run` returns.
        let _ = tokio::join!(retention, settler, notifier);
        let grace = app.config.limits.shutdown_grace;
        tracing::info!(grace_ms = grace.as_millis() as u64, "shutting down");
        let drained = async {
            drain.shutdown().await;
            app.background.close();
            app.background.wait().await;
            drop(stop_replays);
            let _ = replays.await;
        };
        if tokio::time::timeout(grace, drained).await.is_err() {
            replays_abort.abort();
            tracing::warn!("shutdown grace elapsed with requests still running");
        }
        // What still runs on them is past its grace: dropped with their runtimes.
        shards.stop().await;
        // Nothing of this process claims any more: a shared ledger need not wait a lease.
        app.ledger.release().await;
    }
}

/// What the server builds beside the `App` and hands to the services that need it, so the
/// shared state never imports its users: the admin API's token and the notifier.
pub struct Services {
    /// `IDEMPROXY_ADMIN_TOKEN`, read once at start; `None`: the admin API is open (loopback).
    pub admin_token: Option<Token>,
    /// `[notify]`'s webhook, queue and signing key; `None`: no notifications.
    pub notifier: Option<Notifier>,
}

impl Services {
    /// Reads the admin token (refusing an admin API reachable beyond loopback without one) and
    /// builds the notifier, before anything opens the ledger.
    pub fn new(config: &Config) -> Result<Services, String> {
        let admin_token = Token::from_env();
        crate::admin::token::check_exposure(config, admin_token.as_ref())?;
        let notifier = Notifier::new(config)?;
        Ok(Services {
            admin_token,
            notifier,
        })
    }

    /// Once the ledger is open: the notification counters start at 0, and the operations
    /// the previous process left in flight (`orphaned`, now `unknown`) are notified.
    pub fn opened(&self, app: &App, orphaned: &[Operation]) {
        let Some(notifier) = &self.notifier else {
            return;
        };
        for outcome in ["sent", "failed", "dropped"] {
            app.metrics.notifications(outcome, 0);
        }
        for op in orphaned {
            notifier.orphaned(app.rules(&op.provider, &op.route), &app.metrics, op);
        }
    }
}

/// `idemproxy serve`: binds, prints the ready line, serves until SIGTERM, SIGINT or SIGQUIT,
/// reloading on SIGHUP.
pub async fn serve(app: Arc<App>, services: Services) -> std::io::Result<()> {
    let server = Server::bind(app).await?;
    let shutdown = shutdown_signal();
    let reloads = tokio::spawn(reload_on_hangup(server.reloader()));
    announce(server.bound());
    server.run(services, shutdown).await;
    reloads.abort();
    let _ = reloads.await;
    Ok(())
}

/// Reloads on every SIGHUP, and logs (then ignores) SIGUSR1 and SIGUSR2, whose default would
/// end the process without a word. The handlers are installed when this is called, like
/// `shutdown_signal`'s.
#[cfg(unix)]
fn reload_on_hangup(reloader: Arc<Reloader>) -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let hangup = signal(SignalKind::hangup());
    let user1 = signal(SignalKind::user_defined1());
    let user2 = signal(SignalKind::user_defined2());
    async move {
        let (mut hangup, mut user1, mut user2) = match (hangup, user1, user2) {
            (Ok(h), Ok(u1), Ok(u2)) => (h, u1, u2),
            _ => {
                tracing::warn!("cannot install the SIGHUP handler; SIGHUP will stop the proxy");
                return std::future::pending().await;
            }
        };
        loop {
            tokio::select! {
                _ = hangup.recv() => {
                    let _ = reloader.reload(Trigger::Signal).await;
                }
                _ = user1.recv() => tracing::info!("SIGUSR1 received: ignored"),
                _ = user2.recv() => tracing::info!("SIGUSR2 received: ignored"),
            }
        }
    }
}

#[cfg(not(unix))]
fn reload_on_hangup(_: Arc<Reloader>) -> impl Future<Output = ()> + Send + 'static {
    std::future::pending()
}

async fn bind(addr: SocketAddr, key: &str) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr} ({key}): {e}")))
}

/// The one stdout line scripts and tests wait for; the crash points are armed just before it,
/// so a crash matrix's point is never reached while the proxy starts.
fn announce(bound: Bound) {
    crate::crash::arm();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "idemproxy ready proxy={} admin={}",
        bound.proxy, bound.admin
    );
    let _ = out.flush();
    tracing::info!(proxy = %bound.proxy, admin = %bound.admin, "listening");
}

/// Serves one accepted connection with `handler` on the runtime `on` (`None`: this one),
/// watched by the graceful shutdown; its permit (if any) is given back when it ends, or when
/// the tunnel a CONNECT made of it ends. `tunnels`: a CONNECT goes to `intercept` (the agents'
/// listener), else to `handler` like any request.
fn serve_conn<H, F>(
    builder: &auto::Builder<TokioExecutor>,
    drain: &Drain,
    (stream, permit): (tokio::net::TcpStream, Option<OwnedSemaphorePermit>),
    on: Option<&Handle>,
    live: &Arc<Live>,
    tunnels: bool,
    handler: H,
) where
    H: Fn(Arc<App>, Request<Incoming>) -> F + Clone + Send + 'static,
    F: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    let _ = stream.set_nodelay(true);
    // Moved to the shard's reactor, and its first-request timer made on the shard's clock.
    let (stream, _entered) = match on {
        None => (stream, None),
        Some(shard) => {
            let entered = shard.enter();
            match stream.into_std().and_then(tokio::net::TcpStream::from_std) {
                Ok(stream) => (stream, Some(entered)),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot hand a connection to a shard; closed");
                    return;
                }
            }
        }
    };
    let timeout = live.current().config.limits.inbound.header_timeout;
    let (io, phase) = HeadTimeout::new(TokioIo::new(stream), timeout);
    let permit: Held = permit.map(Arc::new);
    let (live, held, tunnel_drain) = (live.clone(), permit.clone(), drain.clone());
    let svc = service_fn(move |req: Request<Incoming>| {
        phase.begin(req.version());
        let connect = tunnels && req.method() == Method::CONNECT;
        let response = if connect {
            let tunnel =
                crate::intercept::connect(live.clone(), tunnel_drain.clone(), held.clone(), req);
            Either::Right(Box::pin(tunnel))
        } else {
            Either::Left(handler(live.current(), req))
        };
        Answering::new(response, phase.clone(), connect)
    });
    let conn = builder.serve_connection_with_upgrades(io, svc);
    let conn = drain.watch(conn.into_owned());
    let serving = async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "connection ended with an error");
        }
        drop(permit);
    };
    match on {
        Some(shard) => drop(shard.spawn(serving)),
        None => drop(tokio::spawn(serving)),
    }
}

/// Resolves on SIGTERM, Ctrl-C (SIGINT) or SIGQUIT, logging which. The handlers are
/// installed when this is called, not when the future is first polled: `serve` calls it before
/// printing the ready line, so a SIGTERM sent the moment a script sees that line is already a
/// graceful stop (until the handler exists, SIGTERM kills the process outright).
#[cfg(unix)]
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let interrupt = signal(SignalKind::interrupt());
    let quit = signal(SignalKind::quit());
    async move {
        // A handler that could not be installed never fires; the others still can.
        let wait = |s: std::io::Result<tokio::signal::unix::Signal>| async move {
            match s {
                Ok(mut s) => s.recv().await,
                Err(_) => std::future::pending().await,
            }
        };
        let name = tokio::select! {
            _ = wait(term) => "SIGTERM",
            _ = wait(interrupt) => "SIGINT",
            _ = wait(quit) => "SIGQUIT",
        };
        tracing::info!(signal = name, "{name} received: stopping gracefully");
    }
}

/// Resolves on Ctrl-C.
#[cfg(not(unix))]
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("Ctrl-C received: stopping gracefully");
    }
}
