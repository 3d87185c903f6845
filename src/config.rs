//! Configuration: `proxy.toml` and the policy files (docs/reference.md sections 2 and 3), read and validated into
//! the domain types the proxy runs on.
//!
//! Two layers: `raw` says what the files say; this module gives it meaning (defaults, units,
//! compiled matchers, parsed templates) and collects every error it finds, each naming the
//! file, the key and the fix. It never opens a socket or the ledger, and never hands out a
//! half-checked value: a `Config` it returns needs no further validation downstream.

//!
//! # Layout
//! - `raw`: the serde structs, TOML error locations, size and duration parsing.
//! - `provider`: one policy file into a `Provider` (the `[provider]` table).
//! - `route`: `[[route]]` tables: matchers, templates, reconcile.
//! - `rule`: `[[provider.rule]]` tables, and the warnings rules earn against the routes.
//! - `answer`: `[[provider.answer]]` tables: the shaping of the proxy's own problem answers.
//! - `values`: checks of single values (names, URLs, mounts, headers, units).
//! - `hazards`: settings that parse but would weaken a guard (credentials in IDs, framing
//!   key headers, lookups reading a header, approvals `on_missing_id = "pass"` skips).
//! - `table`: the routes table of `idemproxy check`.
//! - `forward`: providers a forward-proxy request could not tell apart.
//! - `retention`: `[retention]` and its check against the providers.
//! - `notify`: `[notify]`, the webhook that tells a person when an operation needs one.
//! - `intercept`: `[intercept]`, the local CA and the tunnels of CONNECT (HTTPS_PROXY clients).

mod answer;
mod at;
mod forward;
mod hazards;
mod inbound;
mod intercept;
mod notify;
mod provider;
mod raw;
mod retention;
mod route;
mod rule;
mod table;
mod values;

use std::fmt;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::policy::Provider;
pub use at::{LedgerAt, PgUrl, SslMode};
use provider::load_policy;
use raw::{RawLimits, RawProxy};
use values::{duration, size, socket};

pub use hazards::{CREDENTIAL_HEADERS, FRAMING_HEADERS};
pub use inbound::Inbound;
pub use intercept::{HostPort, Intercept};
pub use notify::Notify;
pub use raw::{MAX_DURATION, parse_duration, parse_size};
pub use retention::Retention;

/// Everything the proxy runs on, validated.
#[derive(Debug, Clone)]
pub struct Config {
    /// The `proxy.toml` path as given.
    pub file: PathBuf,
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    /// The ledger: a file resolved against `proxy.toml`'s folder, or a PostgreSQL URL.
    pub ledger: LedgerAt,
    /// `[replicas]`: used with a PostgreSQL ledger only.
    pub replicas: Replicas,
    /// The policies folder, resolved against `proxy.toml`'s folder.
    pub policies: PathBuf,
    pub limits: Limits,
    pub retention: Retention,
    /// `[notify]` with a webhook; `None`: no notifications.
    pub notify: Option<Notify>,
    /// `[intercept]`; `None`: CONNECT is refused (501).
    pub intercept: Option<Intercept>,
    /// One per policy file, sorted by name.
    pub providers: Vec<Provider>,
    /// Settings that load but do less than they seem to; `check` prints them, `serve` logs
    /// them, neither refuses them.
    pub warnings: Vec<ConfigError>,
}

/// `[replicas]` of proxy.toml.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replicas {
    /// A replica that has not renewed its lease for this long is presumed dead.
    pub lease: Duration,
}

impl Default for Replicas {
    fn default() -> Self {
        Replicas {
            lease: Duration::from_secs(10),
        }
    }
}

/// The shortest lease: renewals every third of it must fit between two database round trips.
const MIN_LEASE: Duration = Duration::from_millis(500);

/// `[limits]` of proxy.toml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Guarded routes buffer at most this many body bytes; more is a 413.
    pub max_request_body: u64,
    pub max_stored_response: u64,
    /// How long a duplicate waits for the request in flight (at least 1ms).
    pub in_flight_wait: Duration,
    pub shutdown_grace: Duration,
    /// `header_timeout`, `body_timeout`, `max_connections`, `max_buffered`.
    pub inbound: Inbound,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_body: 1 << 20,
            max_stored_response: 8 << 20,
            in_flight_wait: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            inbound: Inbound::defaults(1 << 20),
        }
    }
}

/// One thing wrong in one file. `key` locates it (`limits.in_flight_wait`,
/// `route "create_refund": operation_id[1]`, `line 4`); `message` says what is wrong and how to
/// fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub file: PathBuf,
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(f, "{}: {}: {}", self.file.display(), self.key, self.message)
        }
    }
}

/// Every error found while loading, in file order; displayed one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

/// Loads `proxy.toml` and every `*.toml` of its policies folder (sorted, not recursive) and
/// validates them. Collects all errors it can find rather than stopping at the first; a file
/// whose TOML does not parse contributes its first error only.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let mut errors = Vec::new();
    let Some(raw) = read_toml::<RawProxy>(path, &mut errors) else {
        return Err(ConfigErrors(errors));
    };
    let base = path.parent().unwrap_or(Path::new("")).to_path_buf();
    let mut scope = Scope::new(path, &mut errors);
    let policies = scope.check("policies", folder_path(&base, raw.policies.as_deref()));
    // proxy.toml's own errors first, then the policy files' in file order.
    let config = settings(path, &base, raw, &mut errors);
    let mut warnings = Vec::new();
    let providers = match &policies {
        Some(folder) => load_policies(path, folder, &mut errors, &mut warnings),
        None => Vec::new(),
    };
    if let Some(config) = &config {
        retention::check(path, &config.retention, &providers, &mut errors);
        if let Some(intercept) = &config.intercept {
            intercept::check(path, intercept, &providers, &mut errors);
        }
    }
    let config = config.map(|mut config| {
        config.policies = policies.unwrap_or_default();
        config.providers = providers;
        config.warnings.extend(warnings);
        config
    });
    match config {
        Some(config) if errors.is_empty() => Ok(config),
        _ => Err(ConfigErrors(errors)),
    }
}

/// The `listen` address proxy.toml at `path` names, read without validating the rest (for
/// `idemproxy ca init`, which runs before `[intercept]` can load); the default when the file
/// or the key is absent or unreadable.
pub fn listen_of(path: &Path) -> String {
    const DEFAULT: &str = "127.0.0.1:8080";
    let text = fs::read_to_string(path).unwrap_or_default();
    let table: toml::Table = toml::from_str(&text).unwrap_or_default();
    match table.get("listen").and_then(|v| v.as_str()) {
        Some(listen) if listen.parse::<SocketAddr>().is_ok() => listen.to_string(),
        _ => DEFAULT.to_string(),
    }
}

/// Reads and parses one TOML file; a missing file or bad TOML becomes an error naming it.
fn read_toml<T: serde::de::DeserializeOwned>(
    path: &Path,
    errors: &mut Vec<ConfigError>,
) -> Option<T> {
    let mut scope = Scope::new(path, errors);
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            scope.push("", format!("cannot read this file: {e} (check the path)"));
            return None;
        }
    };
    raw::parse_toml(&text)
        .map_err(|e| scope.push(&e.key, e.message))
        .ok()
}

fn folder_path(base: &Path, raw: Option<&str>) -> Result<PathBuf, String> {
    match raw.unwrap_or("policies") {
        "" => Err("empty path (name the folder of policy files, e.g. \"policies\")".into()),
        folder => Ok(base.join(folder)),
    }
}

/// The proxy.toml keys other than `policies`; `policies` and `providers` are left empty.
fn settings(
    path: &Path,
    base: &Path,
    raw: RawProxy,
    errors: &mut Vec<ConfigError>,
) -> Option<Config> {
    let mut s = Scope::new(path, errors);
    let listen = s.check("listen", socket(raw.listen.as_deref(), "127.0.0.1:8080"));
    let admin = s.check(
        "admin_listen",
        socket(raw.admin_listen.as_deref(), "127.0.0.1:9901"),
    );
    if let (Some(a), Some(b)) = (listen, admin)
        && a == b
        && a.port() != 0
    {
        s.push(
            "admin_listen",
            "same address as listen (give the admin API its own port)",
        );
    }
    let ledger = match raw.ledger.as_deref().unwrap_or("data/ledger.redb") {
        "" => s.check(
            "ledger",
            Err("empty path (e.g. \"data/ledger.redb\")".into()),
        ),
        url if LedgerAt::is_postgres_url(url) => {
            s.check("ledger", PgUrl::parse(url)).map(LedgerAt::Postgres)
        }
        file => Some(LedgerAt::File(base.join(file))),
    };
    let intercept = raw
        .intercept
        .map(|raw| intercept::settings(&mut s.nested("intercept."), base, raw));
    let replicas_given = raw.replicas.is_some();
    let raw_replicas = raw.replicas.unwrap_or_default();
    let lease = s.duration(
        "replicas.lease",
        raw_replicas.lease.as_ref(),
        Replicas::default().lease,
        MIN_LEASE,
    );
    let limits = limits(&mut s.nested("limits."), raw.limits.unwrap_or_default());
    let raw_retention = raw.retention.unwrap_or_default();
    let retention = retention::settings(&mut s.nested("retention."), raw_retention);
    let notify = notify::settings(&mut s.nested("notify."), raw.notify.unwrap_or_default());
    let ledger = ledger?;
    let mut warnings = Vec::new();
    ledger_warnings(path, &ledger, replicas_given, &mut warnings);
    Some(Config {
        file: path.to_path_buf(),
        listen: listen?,
        admin_listen: admin?,
        ledger,
        replicas: Replicas { lease: lease? },
        policies: PathBuf::new(),
        limits: limits?,
        retention: retention?,
        notify: notify.ok()?,
        intercept: match intercept {
            None => None,
            Some(intercept) => Some(intercept?),
        },
        providers: Vec::new(),
        warnings,
    })
}

/// `[replicas]` beside a redb ledger, and a PostgreSQL connection that crosses a network in
/// the clear: both load, neither does what it may seem to.
fn ledger_warnings(
    path: &Path,
    ledger: &LedgerAt,
    replicas_given: bool,
    warnings: &mut Vec<ConfigError>,
) {
    let mut warn = |key: &str, message: String| {
        warnings.push(ConfigError {
            file: path.to_path_buf(),
            key: key.to_owned(),
            message,
        })
    };
    match ledger {
        LedgerAt::File(_) if replicas_given => warn(
            "replicas",
            "ignored: leases apply only to a PostgreSQL ledger (a file ledger serves one \
             process; remove [replicas] or set `ledger` to a postgres:// URL)"
                .to_owned(),
        ),
        LedgerAt::Postgres(url) if url.plain_over_network() => warn(
            "ledger",
            format!(
                "{url} is reached without TLS (add ?sslmode=require to encrypt the connection)"
            ),
        ),
        _ => {}
    }
}

/// The shortest duration where zero makes no sense (waits, timeouts, retentions).
const MIN_WAIT: Duration = Duration::from_millis(1);

fn limits(s: &mut Scope, raw: RawLimits) -> Option<Limits> {
    let d = Limits::default();
    let body = s.check(
        "max_request_body",
        size(raw.max_request_body.as_ref(), d.max_request_body),
    );
    let stored = size(raw.max_stored_response.as_ref(), d.max_stored_response);
    let stored = s.check("max_stored_response", stored);
    let wait = duration(raw.in_flight_wait.as_ref(), d.in_flight_wait, MIN_WAIT);
    let wait = s.check("in_flight_wait", wait);
    let grace = duration(
        raw.shutdown_grace.as_ref(),
        d.shutdown_grace,
        Duration::ZERO,
    );
    let grace = s.check("shutdown_grace", grace);
    let inbound = inbound::check(s, &raw, body);
    Some(Limits {
        max_request_body: body?,
        max_stored_response: stored?,
        in_flight_wait: wait?,
        shutdown_grace: grace?,
        inbound: inbound?,
    })
}

/// Every policy file of the folder, validated, then checked against each other; sorted by name.
/// A folder that cannot be read or holds no policy is an error of proxy.toml's `policies` key.
fn load_policies(
    proxy: &Path,
    folder: &Path,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<ConfigError>,
) -> Vec<Provider> {
    let mut scope = Scope::new(proxy, errors);
    let shown = folder.display();
    let entries = match fs::read_dir(folder) {
        Ok(entries) => entries,
        Err(e) => {
            let fix = "create it, or set `policies` in proxy.toml to the folder of policy files";
            scope.push(
                "policies",
                format!("cannot read folder {shown}: {e} ({fix})"),
            );
            return Vec::new();
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml") && p.is_file())
        .collect();
    files.sort();
    if files.is_empty() {
        let msg = format!("no policy files in {shown} (add one NAME.toml per provider)");
        scope.push("policies", msg);
    }
    let mut claims = Vec::new();
    let mut providers = Vec::new();
    for file in &files {
        let (claim, provider) = load_policy(file, errors);
        if let Some(provider) = &provider {
            warnings.extend(rule::warnings(file, provider));
            warnings.extend(provider::pending_warning(file, provider));
        }
        claims.push(claim);
        providers.extend(provider);
    }
    check_claims(&claims, errors);
    forward::check_forward(&providers, errors);
    forward::check_nested(&providers, errors);
    providers.sort_by(|a, b| a.name.cmp(&b.name));
    providers
}

/// What a policy file claims for itself, checked across files even when the rest has errors.
struct Claim {
    file: PathBuf,
    name: Option<String>,
    mount: Option<String>,
}

/// Provider names and mounts are unique, and no mount lies under another one.
fn check_claims(claims: &[Claim], errors: &mut Vec<ConfigError>) {
    for (i, later) in claims.iter().enumerate() {
        let mut scope = Scope::new(&later.file, errors);
        for earlier in &claims[..i] {
            let other = earlier.file.display();
            if let (Some(a), Some(b)) = (&earlier.name, &later.name)
                && a == b
            {
                let msg = format!(
                    "\"{b}\" is already the name of the provider in {other} (names must be unique)"
                );
                scope.push("provider.name", msg);
            }
            let (Some(a), Some(b)) = (&earlier.mount, &later.mount) else {
                continue;
            };
            if a == b {
                let msg = format!(
                    "\"{b}\" is already mounted by {other} (each provider needs its own mount)"
                );
                scope.push("provider.mount", msg);
            } else if under(a, b) || under(b, a) {
                let msg = format!(
                    "\"{b}\" and \"{a}\" of {other} are nested, so a request could match both \
                     (use mounts where neither is a path prefix of the other)"
                );
                scope.push("provider.mount", msg);
            }
        }
    }
}

/// Whether `inner` is `outer` followed by more path segments.
fn under(outer: &str, inner: &str) -> bool {
    inner
        .strip_prefix(outer)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// Header names under `key` (each checked), or `default` when absent.
fn headers(
    s: &mut Scope,
    key: &str,
    raw: Option<Vec<String>>,
    default: &[&str],
) -> Option<Vec<http::HeaderName>> {
    let raw = raw.unwrap_or_else(|| default.iter().map(|h| h.to_string()).collect());
    let names: Vec<Option<http::HeaderName>> = raw
        .iter()
        .enumerate()
        .map(|(i, h)| s.check(&format!("{key}[{i}]"), values::header(h)))
        .collect();
    names.into_iter().collect()
}

/// A key that must be present, then checked.
fn required<T>(
    s: &mut Scope,
    key: &str,
    raw: Option<String>,
    check: impl FnOnce(String) -> Result<T, String>,
) -> Option<T> {
    match raw {
        None => {
            s.push(key, "missing (this key is required)");
            None
        }
        Some(v) => s.check(key, check(v)),
    }
}

/// Collects errors for one file under a key prefix such as `provider.` or `route "x": `.
struct Scope<'a> {
    file: &'a Path,
    prefix: String,
    errors: &'a mut Vec<ConfigError>,
}

impl<'a> Scope<'a> {
    fn new(file: &'a Path, errors: &'a mut Vec<ConfigError>) -> Self {
        Scope {
            file,
            prefix: String::new(),
            errors,
        }
    }

    fn nested(&mut self, prefix: &str) -> Scope<'_> {
        Scope {
            file: self.file,
            prefix: format!("{}{prefix}", self.prefix),
            errors: self.errors,
        }
    }

    fn push(&mut self, key: &str, message: impl Into<String>) {
        let key = format!("{}{key}", self.prefix);
        self.errors.push(ConfigError {
            file: self.file.to_path_buf(),
            key: key.trim_end_matches(['.', ':', ' ']).to_string(),
            message: message.into(),
        });
    }

    /// One of a fixed set of strings, or `default` when absent.
    fn choice<T: Copy>(
        &mut self,
        key: &str,
        raw: Option<String>,
        default: T,
        options: &[(&str, T)],
    ) -> Option<T> {
        self.check(key, values::choice(raw, default, options))
    }

    /// A duration of at least `min`, or `default` when absent.
    fn duration(
        &mut self,
        key: &str,
        raw: Option<&toml::Value>,
        default: Duration,
        min: Duration,
    ) -> Option<Duration> {
        self.check(key, duration(raw, default, min))
    }

    /// Records the error of a failed check under `key`.
    fn check<T>(&mut self, key: &str, result: Result<T, String>) -> Option<T> {
        result.map_err(|message| self.push(key, message)).ok()
    }
}
