//! The shared, immutable state of a running proxy, built once at start.
//!
//! One `Arc<App>` is handed to every request of both listeners. It holds the validated
//! configuration, the upstream clients, the ledger handle and the metrics; nothing in it
//! changes while serving. A reload (`reload`) builds a new `App` from a new configuration
//! around the same ledger, metrics and in-memory state (`App::reloaded`) and puts it in the
//! `Live` slot: a request holds the `App` it started with to its end, the next one takes the
//! new one.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::broadcast;
use tokio_util::task::TaskTracker;

use crate::clock::Timestamp;
use crate::config::Config;
use crate::decide::{Rules, needs_person};
use crate::ledger::{Commit, Ledger, LedgerError, LedgerOptions};
use crate::metrics::Metrics;
use crate::operation::Operation;
use crate::policy::Provider;
use crate::secret::Secret;
use crate::upstream::{Upstreams, Via};

/// Completions a slow waiter may fall behind by before it must re-read the ledger anyway.
const COMPLETIONS_BACKLOG: usize = 1024;

pub struct App {
    pub config: Config,
    pub upstreams: Upstreams,
    pub ledger: Ledger,
    pub metrics: Arc<Metrics>,
    /// Exchanges that must finish even if their agent went away; drained at shutdown.
    pub background: TaskTracker,
    /// The ID of every operation whose attempt was just recorded, so a duplicate waiting on
    /// it re-reads the ledger when (and only when) its own operation may have finished.
    pub completions: broadcast::Sender<Arc<str>>,
    /// The installation secret (keyed hashes, the kept request's encryption); never logged.
    pub secret: Arc<Secret>,
    /// The headers of each unknown operation's last request, for the settler; memory only.
    pub credentials: Arc<crate::kept::Credentials>,
    /// This proxy's `Via` entry, derived from the secret.
    pub via: Via,
    /// Each provider's principal of a request that carries none of its `principal_headers`.
    pub anonymous: crate::fingerprint::Anonymous,
    /// The usual methods' fingerprint field hashes, taken once under `secret`.
    pub methods: Arc<crate::fingerprint::Methods>,
    /// The request-body bytes all guarded requests together may buffer (`max_buffered`).
    pub budget: Arc<crate::budget::Budget>,
    /// Replays counted in memory until the next coalesced write (`tally`).
    pub tally: Arc<crate::tally::Tally>,
    /// The agents' requests for an `unknown` operation that were held (202 `outcome-unknown`,
    /// nothing sent), counted per operation in memory only, for the operator (`GET /ops/{id}`):
    /// never flushed, so counted since this process started.
    pub held: Arc<crate::tally::Tally>,
    /// Cancelled when the server starts to shut down: ends the live event streams, which
    /// would otherwise hold their connections open through the grace period.
    pub closing: tokio_util::sync::CancellationToken,
    /// The providers the ledger's hook escalates lapsed-lease orphans with (it runs outside
    /// any request); a reload replaces them.
    escalator: Arc<ArcSwap<Vec<Provider>>>,
    /// `LedgerOptions::attempt_reach` the ledger was opened with.
    pub attempt_reach: Duration,
}

/// The `App` new requests take: replaced whole by a reload, read without a lock.
pub struct Live(ArcSwap<App>);

impl Live {
    pub fn new(app: Arc<App>) -> Live {
        Live(ArcSwap::new(app))
    }

    /// The current `App`; the caller keeps it for as long as it holds the `Arc`.
    pub fn current(&self) -> Arc<App> {
        self.0.load_full()
    }

    /// Makes `app` the current one; requests that hold the old one finish with it.
    pub fn replace(&self, app: App) {
        app.escalator.store(Arc::new(app.config.providers.clone()));
        self.0.store(Arc::new(app));
    }
}

impl App {
    /// Builds the state a server needs: upstream clients and the opened ledger (whose
    /// operations left `in_flight` by an earlier process become `unknown`; they are returned,
    /// escalated already, for the notifier).
    pub async fn new(config: Config) -> Result<(App, Vec<Operation>), String> {
        let secret = Secret::load(&config.ledger.place()).map_err(|e| e.to_string())?;
        let upstreams = Upstreams::new(&config.providers)?;
        let metrics = Arc::new(Metrics::new());
        let observer = metrics.clone();
        let escalator = Arc::new(ArcSwap::from_pointee(config.providers.clone()));
        let hook = (escalator.clone(), metrics.clone());
        let reach = attempt_reach(&config.providers);
        // The ledger itself honours IDEMPROXY_FAIL=ledger.commit (a test hook).
        let options = LedgerOptions {
            on_commit: Some(Arc::new(move |done: Commit| {
                observer.commit(done.took);
                observer.batch(done.jobs);
            })),
            fail_writes: false,
            secret_check: Some(secret.check_value()),
            lease: config.replicas.lease,
            replica: replica_name(),
            // A replica whose lease lapsed left these: escalated like those orphaned at start.
            on_orphaned: Some(Arc::new(move |op: &Operation| {
                escalate(&hook.0.load(), &hook.1, op)
            })),
            attempt_reach: reach,
        };
        let (ledger, orphaned) = Ledger::open(&config.ledger, Timestamp::now(), options)
            .await
            .map_err(|e| match e {
                LedgerError::OtherSecret { .. } => {
                    Secret::other_secret(&config.ledger.place()).to_string()
                }
                e => e.to_string(),
            })?;
        if !orphaned.is_empty() {
            tracing::warn!(
                orphaned = orphaned.len(),
                "operations left in flight by the previous process are now unknown"
            );
        }
        let budget = crate::budget::Budget::new(config.limits.inbound.max_buffered);
        let anonymous = crate::fingerprint::Anonymous::of(&config.providers, &secret);
        let methods = Arc::new(crate::fingerprint::Methods::of(&secret));
        let app = App {
            anonymous,
            methods,
            budget,
            config,
            upstreams,
            ledger,
            metrics,
            background: TaskTracker::new(),
            completions: broadcast::Sender::new(COMPLETIONS_BACKLOG),
            via: Via::of(&secret),
            secret: Arc::new(secret),
            credentials: Default::default(),
            tally: Default::default(),
            held: Default::default(),
            closing: Default::default(),
            escalator,
            attempt_reach: reach,
        };
        for op in &orphaned {
            app.escalate(op);
        }
        Ok((app, orphaned))
    }

    /// This app with `config` in place of its own: new upstream clients and per-provider
    /// values for the new policies, everything else (the ledger, the metrics, the in-memory
    /// state, the secret) shared. `config` must keep the listeners and the ledger (`reload`
    /// refuses a change to either before calling this).
    pub fn reloaded(&self, config: Config) -> Result<App, String> {
        let upstreams = Upstreams::new(&config.providers)?;
        let anonymous = crate::fingerprint::Anonymous::of(&config.providers, &self.secret);
        Ok(App {
            config,
            upstreams,
            anonymous,
            ledger: self.ledger.clone(),
            metrics: self.metrics.clone(),
            background: self.background.clone(),
            completions: self.completions.clone(),
            secret: self.secret.clone(),
            credentials: self.credentials.clone(),
            via: self.via.clone(),
            methods: self.methods.clone(),
            budget: self.budget.clone(),
            tally: self.tally.clone(),
            held: self.held.clone(),
            closing: self.closing.clone(),
            escalator: self.escalator.clone(),
            attempt_reach: self.attempt_reach,
        })
    }

    /// The rules `decide` applies to operations of `provider`'s `route`, if both still exist.
    pub fn rules(&self, provider: &str, route: &str) -> Option<Rules> {
        let provider = self.provider(provider)?;
        let route = provider.routes.iter().find(|r| r.name == route)?;
        Some(Rules::of(provider, route))
    }

    /// An operation that became `unknown` and that only a person can settle
    /// (`decide::needs_person`: no re-send allowed, no lookup) gets one warning and a metric.
    pub fn escalate(&self, op: &Operation) {
        escalate(&self.config.providers, &self.metrics, op);
    }

    pub fn provider(&self, name: &str) -> Option<&Provider> {
        self.config.providers.iter().find(|p| p.name == name)
    }

    /// The provider mounted at the start of `path`, with the route-relative rest.
    pub fn provider_for_path(&self, path: &str) -> Option<(&Provider, String)> {
        self.config
            .providers
            .iter()
            .find_map(|p| p.strip_mount(path).map(|rest| (p, rest.to_string())))
    }

    /// The provider of an absolute-form request, with the route-relative rest of its
    /// (normalized) `path`: among the providers whose upstream is this host (and port, when
    /// the request names one) and whose base path holds `path`, the longest base path wins.
    /// `check` refuses two providers on one host, port and base path; what is left is a
    /// request naming no port where providers differ only by port: the one whose upstream
    /// names no port wins, if there is exactly one.
    pub fn provider_for_host(&self, host: &str, port: Option<u16>, path: &str) -> Forward<'_> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let mut best: Vec<(&Provider, &str)> = Vec::new();
        for p in &self.config.providers {
            let up = &p.upstream;
            if !up.host.eq_ignore_ascii_case(host) || port.is_some_and(|port| port != up.port) {
                continue;
            }
            let Some(rest) = crate::path::below(path, &up.base_path) else {
                continue;
            };
            match best.first() {
                Some((b, _)) if b.upstream.base_path.len() > up.base_path.len() => continue,
                Some((b, _)) if b.upstream.base_path.len() < up.base_path.len() => best.clear(),
                _ => {}
            }
            best.push((p, rest));
        }
        if best.len() > 1 {
            best.retain(|(p, _)| !p.upstream.explicit_port);
            if best.len() != 1 {
                return Forward::Ambiguous;
            }
        }
        match best.first() {
            Some((p, rest)) => Forward::To(p, rest.to_string()),
            None => Forward::Unknown,
        }
    }
}

/// `App::escalate` over `providers`, for the ledger's hook too (it runs before an `App` exists).
fn escalate(providers: &[Provider], metrics: &Metrics, op: &Operation) {
    let Some(provider) = providers.iter().find(|p| p.name == op.provider) else {
        return;
    };
    let Some(route) = provider.routes.iter().find(|r| r.name == op.route) else {
        return;
    };
    if needs_person(op, Rules::of(provider, route), Timestamp::now()) {
        metrics.escalation(&op.provider, &op.route);
        let word = crate::operation::command_word(&op.id);
        tracing::warn!(
            operation = %crate::operation::Logged(&op.id),
            "outcome unknown and only an operator can settle it: check with the provider, \
             then run `idemproxy ops resolve {word} --succeeded --body-file FILE` or `--failed --reason ...`"
        );
    }
}

/// How long after its claim an attempt of any provider may still reach it: the longest
/// `timeout` (it bounds connecting too, and `Ledger::may_send` is checked against it right
/// before the first byte), plus a second for the moments between that check and the write.
pub fn attempt_reach(providers: &[Provider]) -> Duration {
    let longest = providers
        .iter()
        .map(|p| p.timeout)
        .max()
        .unwrap_or_default();
    longest + Duration::from_secs(1)
}

/// How this process shows in a shared ledger's `replicas` table: host and process ID.
fn replica_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}

/// Where an absolute-form request goes (see `App::provider_for_host`).
pub enum Forward<'a> {
    /// This provider, with the route-relative path.
    To(&'a Provider, String),
    /// No provider's upstream holds this URL.
    Unknown,
    /// Several do, differing only by a port the request does not name.
    Ambiguous,
}
