//! The demo's stage: a proxy configured in code, serving on loopback, with a temporary ledger.
//!
//! It owns the demo's configuration (two refund providers, one that deduplicates and one that
//! cannot) and the proxy's lifetime. It never reads a file, never listens beyond 127.0.0.1,
//! and leaves nothing on disk: the ledger lives in a temporary directory removed at the end.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method};
use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::DemoError;
use crate::app::App;
use crate::config::{Config, Limits, Retention};
use crate::policy::{
    ApprovalMode, BaseUrl, Dedupe, Effect, KeyFormat, KeyPlacement, Matcher, OnMissingId, Outcomes,
    Provider, Route, Scheme, Segment, Unmatched,
};
use crate::server::{Bound, Server, Services};
use crate::template::Template;

/// The route every demo provider guards, with the operation ID of docs/reference.md section 4.3.
pub const ROUTE: &str = "create_refund";
const OPERATION_ID: &str = "{header:x-workflow-id}:{form:charge}:refund:{form:metadata[step]}";

/// A fake provider as the proxy should see it.
#[derive(Debug, Clone)]
pub struct Upstreamed {
    /// Provider name, also its mount (`/{name}`).
    pub name: &'static str,
    pub addr: SocketAddr,
    pub dedupe: Dedupe,
}

/// The running proxy and what it needs to stop cleanly.
pub struct Stage {
    pub app: Arc<App>,
    pub bound: Bound,
    /// The admin API's token, if `IDEMPROXY_ADMIN_TOKEN` set one (the operator's calls carry it).
    pub admin_token: Option<crate::admin::token::Token>,
    shutdown: oneshot::Sender<()>,
    server: JoinHandle<()>,
    /// Removed on drop, after the ledger is closed.
    dir: TempDir,
}

impl Stage {
    /// Opens a fresh ledger in a temporary directory and serves the proxy and its admin API
    /// on free loopback ports.
    pub async fn start(providers: &[Upstreamed]) -> Result<Stage, DemoError> {
        let dir = tempfile::Builder::new()
            .prefix("idemproxy-demo-")
            .tempdir()
            .map_err(|e| DemoError::Setup(format!("cannot create a temporary directory: {e}")))?;
        let providers = providers
            .iter()
            .map(provider)
            .collect::<Result<Vec<_>, _>>()?;
        let config = config(dir.path(), providers);
        let services = Services::new(&config).map_err(DemoError::Setup)?;
        let admin_token = services.admin_token.clone();
        let (app, orphaned) = App::new(config).await.map_err(DemoError::Setup)?;
        services.opened(&app, &orphaned);
        let app = Arc::new(app);
        let server = Server::bind(app.clone())
            .await
            .map_err(|e| DemoError::Setup(e.to_string()))?;
        let bound = server.bound();
        let (shutdown, stop) = oneshot::channel::<()>();
        let server = tokio::spawn(server.run(services, async {
            let _ = stop.await;
        }));
        Ok(Stage {
            app,
            admin_token,
            bound,
            shutdown,
            server,
            dir,
        })
    }

    /// Stops serving, waits for the drain, closes the ledger and removes the directory.
    pub async fn stop(self) {
        let Stage {
            app,
            shutdown,
            server,
            dir,
            ..
        } = self;
        let _ = shutdown.send(());
        let _ = server.await;
        drop(app);
        drop(dir);
    }
}

/// The whole proxy configuration, built in code.
fn config(dir: &Path, providers: Vec<Provider>) -> Config {
    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    Config {
        file: PathBuf::from("(built into idemproxy demo)"),
        listen: loopback,
        admin_listen: loopback,
        ledger: dir.join("ledger.redb").into(),
        replicas: Default::default(),
        policies: dir.to_path_buf(),
        // The defaults of proxy.toml, but a short drain: the demo's exchanges are all done.
        limits: Limits {
            shutdown_grace: Duration::from_secs(2),
            ..Limits::default()
        },
        retention: Retention::default(),
        notify: None,
        intercept: None,
        providers,
        warnings: Vec::new(),
    }
}

/// A refund provider policy, as `policies/NAME.toml` would give it.
fn provider(up: &Upstreamed) -> Result<Provider, DemoError> {
    let header = HeaderName::from_static;
    Ok(Provider {
        name: up.name.to_string(),
        upstream: BaseUrl {
            scheme: Scheme::Http,
            host: up.addr.ip().to_string(),
            port: up.addr.port(),
            explicit_port: true,
            base_path: String::new(),
        },
        mount: format!("/{}", up.name),
        dedupe: up.dedupe,
        key: KeyPlacement::Header(header("idempotency-key")),
        key_format: KeyFormat::Opaque,
        key_length: 64,
        key_retention: Duration::from_secs(24 * 3600),
        timeout: Duration::from_secs(10),
        ca_file: None,
        connect_to: None,
        request_id_header: Some(header("request-id")),
        control_headers: vec![header("x-operation-id"), header("x-workflow-id")],
        redact_headers: vec![],
        settle_headers: vec![],
        unmatched: Unmatched::Pass,
        path_case: crate::policy::PathCase::Sensitive,
        protocol: crate::policy::Protocol::Http,
        outcomes: Outcomes::default(),
        pending_status: 202,
        rules: vec![],
        answers: vec![],
        routes: vec![refund_route()?],
        file: PathBuf::from(format!("(demo policy {})", up.name)),
        principal_headers: vec![header("authorization")],
    })
}

/// `POST /v1/refunds`, irreversible, identified by workflow, charge and step.
fn refund_route() -> Result<Route, DemoError> {
    let operation_id = Template::parse(OPERATION_ID)
        .map_err(|e| DemoError::Setup(format!("the demo's operation_id template: {e}")))?;
    Ok(Route {
        name: ROUTE.to_string(),
        pattern: "POST /v1/refunds".to_string(),
        tool: None,
        matcher: Matcher {
            method: Method::POST,
            segments: vec![
                Segment::Literal("v1".into()),
                Segment::Literal("refunds".into()),
            ],
        },
        effect: Effect::Irreversible,
        operation_id: vec![operation_id],
        on_missing_id: OnMissingId::Reject,
        approval: ApprovalMode::None,
        fingerprint_ignore: vec![],
        fingerprint_headers: vec![],
        approval_show: vec![],
        operator_show: vec![],
        reconcile: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_route_matches_refunds_only() {
        let route = refund_route().expect("the built-in template parses");
        assert!(
            route
                .matcher
                .matches(&Method::POST, "/v1/refunds")
                .is_some()
        );
        assert!(route.matcher.matches(&Method::GET, "/v1/refunds").is_none());
        assert!(
            route
                .matcher
                .matches(&Method::POST, "/v1/charges")
                .is_none()
        );
    }

    #[test]
    fn providers_are_mounted_at_their_name_on_loopback() {
        let up = Upstreamed {
            name: "payments",
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 4242)),
            dedupe: Dedupe::Key,
        };
        let p = provider(&up).expect("the built-in policy is valid");
        assert_eq!(p.strip_mount("/payments/v1/refunds"), Some("/v1/refunds"));
        assert_eq!(p.upstream.authority(), "127.0.0.1:4242");
        assert_eq!(p.dedupe, Dedupe::Key);
    }
}
