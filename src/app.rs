//! The shared, immutable state of a running proxy, built once at start.
//!
//! One `Arc<App>` is handed to every connection of both listeners. It holds the validated
//! configuration, the upstream clients, the ledger handle and the metrics; nothing in it is
//! reconfigured while serving.

use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::policy::Provider;
use crate::upstream::Upstreams;

pub struct App {
    pub config: Config,
    pub upstreams: Upstreams,
    pub metrics: Metrics,
    /// Exchanges that must finish even if their agent went away; drained at shutdown.
    pub background: TaskTracker,
}

impl App {
    /// Builds the state a server needs from a validated configuration.
    pub fn new(config: Config) -> Result<App, String> {
        let upstreams = Upstreams::new(&config.providers)?;
        Ok(App {
            config,
            upstreams,
            metrics: Metrics::new(),
            background: TaskTracker::new(),
        })
    }

    /// The provider mounted at the start of `path`, with the route-relative rest.
    pub fn provider_for_path(&self, path: &str) -> Option<(&Provider, String)> {
        self.config
            .providers
            .iter()
            .find_map(|p| p.strip_mount(path).map(|rest| (p, rest.to_string())))
    }

    /// The provider whose upstream is this host (and port, when the request names one).
    pub fn provider_for_host(&self, host: &str, port: Option<u16>) -> Option<&Provider> {
        self.config.providers.iter().find(|p| {
            p.upstream
                .host
                .eq_ignore_ascii_case(host.trim_start_matches('[').trim_end_matches(']'))
                && port.is_none_or(|port| port == p.upstream.port)
        })
    }
}
