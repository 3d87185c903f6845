//! Prometheus metrics (docs/reference.md section 8), kept in memory and rendered as text on scrape.
//!
//! Counters and histograms are updated on the request path; the gauges about operations
//! (`idemproxy_operations`, the oldest ages) are set from the ledger's counters at scrape time,
//! so scraping never scans the ledger. Labels are names from the policies, never request data.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::RwLock;
use std::time::Duration;

use fnv::FnvHasher;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    provider: String,
    route: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    provider: String,
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    provider: String,
    route: String,
    action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

type Seconds = Gauge<f64, AtomicU64>;

/// The `requests` counters counted so far, by a hash of their labels' text: one request is
/// counted without building the three label strings and hashing them with SipHash, as the
/// family's own lookup does. Each counter is the family's own (a clone shares its count), so
/// what is rendered is unchanged.
/// FNV-1a (the `fnv` crate), far cheaper than SipHash on a few short names: what it hashes
/// are the policies' names, never request data, so it need not resist chosen collisions (a
/// collision only costs a comparison: entries are matched by their text).
type Counted = HashMap<u64, Vec<(RequestLabels, Counter)>, BuildHasherDefault<FnvHasher>>;

/// The proxy's metrics; cheap to update from any task.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    counted: RwLock<Counted>,
    upstream: Family<ProviderLabels, Histogram>,
    commit: Histogram,
    commits: Counter,
    batch: Histogram,
    escalations: Family<RouteLabels, Counter>,
    settler: Family<ActionLabels, Counter>,
    notifications: Family<OutcomeLabels, Counter>,
    reloads: Family<OutcomeLabels, Counter>,
    operations: Family<StateLabels, Gauge>,
    oldest_unknown: Seconds,
    oldest_in_flight: Seconds,
}

fn latency_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let upstream = Family::<ProviderLabels, Histogram>::new_with_constructor(
            latency_buckets as fn() -> Histogram,
        );
        let commit = latency_buckets();
        let commits = Counter::default();
        let batch = Histogram::new(exponential_buckets(1.0, 2.0, 9));
        let escalations = Family::<RouteLabels, Counter>::default();
        let settler = Family::<ActionLabels, Counter>::default();
        let notifications = Family::<OutcomeLabels, Counter>::default();
        let reloads = Family::<OutcomeLabels, Counter>::default();
        for outcome in ["applied", "unchanged", "refused"] {
            let labels = OutcomeLabels {
                outcome: outcome.into(),
            };
            reloads.get_or_create(&labels).inc_by(0);
        }
        let operations = Family::<StateLabels, Gauge>::default();
        let oldest_unknown = Seconds::default();
        let oldest_in_flight = Seconds::default();
        registry.register(
            "idemproxy_requests",
            "Agent requests by provider, route and outcome",
            requests.clone(),
        );
        registry.register(
            "idemproxy_upstream_seconds",
            "Duration of exchanges with providers",
            upstream.clone(),
        );
        registry.register(
            "idemproxy_ledger_commit_seconds",
            "Duration of durable ledger commits",
            commit.clone(),
        );
        registry.register(
            "idemproxy_ledger_commits",
            "Ledger write transactions committed (group commit: one per batch of writes)",
            commits.clone(),
        );
        registry.register(
            "idemproxy_ledger_batch_size",
            "Writes (jobs) made durable together by one ledger commit",
            batch.clone(),
        );
        registry.register(
            "idemproxy_escalations",
            "Operations left unknown that only an operator can resolve",
            escalations.clone(),
        );
        registry.register(
            "idemproxy_settler_actions",
            "What the settler did with unknown operations (resent, reconciled)",
            settler.clone(),
        );
        registry.register(
            "idemproxy_notifications",
            "Notifications to the [notify] webhook: sent, failed (given up), dropped (queue full)",
            notifications.clone(),
        );
        registry.register(
            "idemproxy_reloads",
            "Configuration reloads (SIGHUP, POST /admin/reload): applied, unchanged, refused",
            reloads.clone(),
        );
        registry.register(
            "idemproxy_operations",
            "Operations in the ledger by state",
            operations.clone(),
        );
        registry.register(
            "idemproxy_oldest_unknown_age_seconds",
            "Age of the oldest unknown operation",
            oldest_unknown.clone(),
        );
        registry.register(
            "idemproxy_oldest_in_flight_age_seconds",
            "Age of the oldest in-flight operation",
            oldest_in_flight.clone(),
        );
        Metrics {
            registry,
            requests,
            counted: RwLock::default(),
            upstream,
            commit,
            commits,
            batch,
            escalations,
            settler,
            notifications,
            reloads,
            operations,
            oldest_unknown,
            oldest_in_flight,
        }
    }

    /// Counts one agent request. `outcome`: forwarded, replayed, conflict, pending, rejected, passthrough.
    pub fn request(&self, provider: &str, route: &str, outcome: &str) {
        let mut hasher = FnvHasher::default();
        for part in [provider, route, outcome] {
            // 0xff is in no UTF-8 text: the parts stay apart.
            hasher.write(part.as_bytes());
            hasher.write_u8(0xff);
        }
        let key = hasher.finish();
        let same = |(l, _): &&(RequestLabels, Counter)| {
            l.provider == provider && l.route == route && l.outcome == outcome
        };
        let counted = self.counted.read().unwrap_or_else(|e| e.into_inner());
        if let Some((_, counter)) = counted.get(&key).and_then(|v| v.iter().find(same)) {
            counter.inc();
            return;
        }
        drop(counted);
        let labels = RequestLabels {
            provider: provider.into(),
            route: route.into(),
            outcome: outcome.into(),
        };
        let counter = self.requests.get_or_create(&labels).clone();
        counter.inc();
        let mut counted = self.counted.write().unwrap_or_else(|e| e.into_inner());
        let entries = counted.entry(key).or_default();
        if !entries.iter().any(|entry| same(&entry)) {
            entries.push((labels, counter));
        }
    }

    pub fn upstream(&self, provider: &str, took: Duration) {
        let labels = ProviderLabels {
            provider: provider.into(),
        };
        self.upstream
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub fn commit(&self, took: Duration) {
        self.commit.observe(took.as_secs_f64());
    }

    /// Counts one ledger commit that made `jobs` writes durable together.
    pub fn batch(&self, jobs: usize) {
        self.commits.inc();
        self.batch.observe(jobs as f64);
    }

    pub fn escalation(&self, provider: &str, route: &str) {
        let labels = RouteLabels {
            provider: provider.into(),
            route: route.into(),
        };
        self.escalations.get_or_create(&labels).inc();
    }

    /// Counts `n` notifications by `outcome` (`sent`, `failed`, `dropped`); `n` = 0 makes the
    /// series appear at 0.
    pub fn notifications(&self, outcome: &str, n: u64) {
        let labels = OutcomeLabels {
            outcome: outcome.into(),
        };
        self.notifications.get_or_create(&labels).inc_by(n);
    }

    /// Counts one reload by `outcome` (`applied`, `unchanged`, `refused`).
    pub fn reload(&self, outcome: &str) {
        let labels = OutcomeLabels {
            outcome: outcome.into(),
        };
        self.reloads.get_or_create(&labels).inc();
    }

    /// Counts one settler action (`resent` or `reconciled`) on an unknown operation.
    pub fn settler(&self, provider: &str, route: &str, action: &str) {
        let labels = ActionLabels {
            provider: provider.into(),
            route: route.into(),
            action: action.into(),
        };
        self.settler.get_or_create(&labels).inc();
    }

    /// Sets the operation gauges from the ledger's counters.
    pub fn set_operations<'a>(
        &self,
        by_state: impl IntoIterator<Item = (&'a str, u64)>,
        oldest_unknown: Option<Duration>,
        oldest_in_flight: Option<Duration>,
    ) {
        for (state, n) in by_state {
            let labels = StateLabels {
                state: state.into(),
            };
            self.operations.get_or_create(&labels).set(n as i64);
        }
        self.oldest_unknown
            .set(oldest_unknown.map_or(0.0, |d| d.as_secs_f64()));
        self.oldest_in_flight
            .set(oldest_in_flight.map_or(0.0, |d| d.as_secs_f64()));
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_label_set_keeps_its_own_count() {
        let m = Metrics::new();
        for _ in 0..3 {
            m.request("ab", "c", "passthrough");
        }
        m.request("a", "bc", "passthrough");
        m.request("ab", "c", "rejected");
        let text = m.render();
        for (labels, n) in [
            (r#"provider="ab",route="c",outcome="passthrough""#, 3),
            (r#"provider="a",route="bc",outcome="passthrough""#, 1),
            (r#"provider="ab",route="c",outcome="rejected""#, 1),
        ] {
            let line = format!("idemproxy_requests_total{{{labels}}} {n}\n");
            assert!(text.contains(&line), "{line} in {text}");
        }
    }

    #[test]
    fn renders_the_named_metrics() {
        let m = Metrics::new();
        m.request("stripe", "create_refund", "forwarded");
        m.request("stripe", "create_refund", "forwarded");
        m.upstream("stripe", Duration::from_millis(20));
        m.commit(Duration::from_millis(2));
        m.batch(3);
        m.set_operations([("unknown", 3)], Some(Duration::from_secs(7)), None);
        let text = m.render();
        assert!(text.contains(r#"idemproxy_requests_total{provider="stripe",route="create_refund",outcome="forwarded"} 2"#), "{text}");
        assert!(
            text.contains("idemproxy_upstream_seconds_count{provider=\"stripe\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("idemproxy_ledger_commit_seconds_count 1"),
            "{text}"
        );
        assert!(text.contains("idemproxy_ledger_commits_total 1"), "{text}");
        assert!(text.contains("idemproxy_ledger_batch_size_sum 3"), "{text}");
        assert!(
            text.contains(r#"idemproxy_operations{state="unknown"} 3"#),
            "{text}"
        );
        assert!(
            text.contains("idemproxy_oldest_unknown_age_seconds 7"),
            "{text}"
        );
    }
}
