//! Reloading `proxy.toml` and the policies while serving (docs/reference.md, "Reload"), on
//! SIGHUP, `POST /admin/reload` or `idemproxy reload`.
//!
//! It owns the whole of one reload: reading the files as `check` does, refusing a
//! configuration that does not load or that changes what only a restart can apply (the
//! listeners, the ledger and what was built around them at start), and otherwise putting a new
//! `App` in the `Live` slot. `[intercept]` is reloaded whole (its CA files read again, its
//! tunnels): new CONNECTs follow it, tunnels already open keep what they were opened with. It never reopens a listener or the ledger and never touches an
//! operation: those already recorded keep the key and kept request stored with them, exactly
//! as across a restart. One reload runs at a time; each is logged and counted.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::Mutex;

use crate::app::{App, Live, attempt_reach};
use crate::config::{Config, Intercept, LedgerAt};

/// What asked for a reload, for its log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    Signal,
    Admin,
}

impl Trigger {
    fn name(self) -> &'static str {
        match self {
            Trigger::Signal => "SIGHUP",
            Trigger::Admin => "admin API",
        }
    }
}

/// What a reload changed, as `POST /admin/reload` answers it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Changes {
    /// `applied`, or `unchanged` when the files say what the running configuration says.
    pub outcome: &'static str,
    pub providers: ProviderChanges,
    /// The proxy.toml tables or keys whose values changed (`limits`, `retention`, `policies`).
    pub settings: Vec<&'static str>,
    /// What `check` would warn about in the new configuration.
    pub warnings: Vec<String>,
}

/// Providers by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProviderChanges {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
}

/// Why a reload was refused: every error, one line each, naming the file and the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub Vec<String>);

/// Reloads the configuration of the `Live` app it was made for.
pub struct Reloader {
    live: Arc<Live>,
    file: PathBuf,
    /// Reloads so far; held for a whole reload, so two never interleave.
    count: Mutex<u64>,
}

impl Reloader {
    /// A reloader of `live`'s configuration, read again from `live`'s own proxy.toml.
    pub fn new(live: Arc<Live>) -> Reloader {
        let file = live.current().config.file.clone();
        Reloader {
            live,
            file,
            count: Mutex::new(0),
        }
    }

    /// Reads the files again and applies them, or refuses them and keeps the running
    /// configuration. Logs one line either way and counts the outcome.
    pub async fn reload(&self, trigger: Trigger) -> Result<Changes, Refused> {
        let mut count = self.count.lock().await;
        *count += 1;
        let n = *count;
        let running = self.live.current();
        let file = self.file.clone();
        let loaded = tokio::task::spawn_blocking(move || crate::config::load(&file))
            .await
            .map_err(|e| Refused(vec![format!("the reload stopped: {e}")]))
            .and_then(|loaded| {
                loaded.map_err(|errors| Refused(errors.0.iter().map(|e| e.to_string()).collect()))
            });
        let outcome = loaded.and_then(|config| self.apply(&running, config));
        let metrics = &running.metrics;
        let by = trigger.name();
        match &outcome {
            Ok(changes) => {
                metrics.reload(changes.outcome);
                for warning in &changes.warnings {
                    tracing::warn!("reload #{n} ({by}): warning: {warning}");
                }
                tracing::info!("reload #{n} ({by}): {}", summary(changes));
            }
            Err(Refused(errors)) => {
                metrics.reload("refused");
                tracing::warn!(
                    "reload #{n} ({by}) refused; the running configuration is kept: {}",
                    errors.join("; ")
                );
            }
        }
        outcome
    }

    /// Puts `config` in place of `running`'s, unless it changes what needs a restart.
    fn apply(&self, running: &App, config: Config) -> Result<Changes, Refused> {
        let restart = needs_restart(&running.config, &config, running.attempt_reach);
        if !restart.is_empty() {
            return Err(Refused(restart));
        }
        let mut changes = changes(&running.config, &config);
        changes.warnings = config.warnings.iter().map(|w| w.to_string()).collect();
        if changes.outcome == "unchanged" {
            return Ok(changes);
        }
        let app = running.reloaded(config).map_err(|e| Refused(vec![e]))?;
        self.live.replace(app);
        Ok(changes)
    }
}

/// One line for the log and the CLI: what changed, or that nothing did.
pub fn summary(changes: &Changes) -> String {
    if changes.outcome == "unchanged" {
        return "configuration reloaded: nothing changed".into();
    }
    let mut parts = Vec::new();
    let p = &changes.providers;
    for (what, names) in [
        ("added", &p.added),
        ("removed", &p.removed),
        ("changed", &p.changed),
    ] {
        if !names.is_empty() {
            parts.push(format!("providers {what}: {}", names.join(", ")));
        }
    }
    if !changes.settings.is_empty() {
        parts.push(format!("settings changed: {}", changes.settings.join(", ")));
    }
    format!("configuration reloaded: {}", parts.join("; "))
}

/// The changes between `old` and `new` that a running proxy cannot take: one error for each
/// key, naming it. `reach` is the attempt reach the ledger was opened with.
fn needs_restart(old: &Config, new: &Config, reach: std::time::Duration) -> Vec<String> {
    let file = new.file.display();
    let mut errors = Vec::new();
    let mut refuse = |key: &str, what: String| {
        errors.push(format!(
            "{file}: {key}: restart to apply ({what}; a reload never reopens it)"
        ));
    };
    if old.listen != new.listen {
        refuse("listen", format!("the proxy listens on {}", old.listen));
    }
    if old.admin_listen != new.admin_listen {
        let was = old.admin_listen;
        refuse("admin_listen", format!("the admin API listens on {was}"));
    }
    if old.ledger != new.ledger {
        refuse("ledger", format!("the ledger open is {}", old.ledger));
    }
    if old.replicas != new.replicas {
        refuse(
            "replicas.lease",
            "the ledger's lease is set when it opens".into(),
        );
    }
    let (was, now) = (&old.limits.inbound, &new.limits.inbound);
    if was.max_connections != now.max_connections {
        refuse("limits.max_connections", "the listener's gate".into());
    }
    if was.max_buffered != now.max_buffered {
        refuse("limits.max_buffered", "the shared body budget".into());
    }
    if old.notify != new.notify {
        refuse("notify", "the notifier and its queue".into());
    }
    // A shared ledger marks a lapsed replica's attempts "may have taken effect" for this
    // long after their dispatch; a longer provider timeout would outlast the mark.
    if matches!(new.ledger, LedgerAt::Postgres(_)) && attempt_reach(&new.providers) > reach {
        refuse(
            "provider.timeout",
            "a PostgreSQL ledger's orphan sweep counts on the longest timeout it opened with"
                .into(),
        );
    }
    errors
}

/// What differs between `old` and `new`, both already past `needs_restart`.
fn changes(old: &Config, new: &Config) -> Changes {
    let mut providers = ProviderChanges::default();
    // `Provider` holds compiled matchers and templates: compared through their full debug
    // text, which shows every value a policy file sets.
    let text = |p: &crate::policy::Provider| format!("{p:?}");
    for p in &new.providers {
        match old.providers.iter().find(|o| o.name == p.name) {
            None => providers.added.push(p.name.clone()),
            Some(o) if text(o) != text(p) => providers.changed.push(p.name.clone()),
            Some(_) => {}
        }
    }
    for o in &old.providers {
        if !new.providers.iter().any(|p| p.name == o.name) {
            providers.removed.push(o.name.clone());
        }
    }
    let mut settings = Vec::new();
    if old.limits != new.limits {
        settings.push("limits");
    }
    if old.retention != new.retention {
        settings.push("retention");
    }
    if old.policies != new.policies {
        settings.push("policies");
    }
    if !same_intercept(old.intercept.as_ref(), new.intercept.as_ref()) {
        settings.push("intercept");
    }
    let same = settings.is_empty()
        && providers.added.is_empty()
        && providers.removed.is_empty()
        && providers.changed.is_empty();
    Changes {
        outcome: if same { "unchanged" } else { "applied" },
        providers,
        settings,
        warnings: Vec::new(),
    }
}

/// Whether `[intercept]` is the same: both off, or the same files, CA certificate (and so key,
/// which must match it) and tunnels.
fn same_intercept(old: Option<&Intercept>, new: Option<&Intercept>) -> bool {
    match (old, new) {
        (None, None) => true,
        (Some(o), Some(n)) => {
            o.ca_cert == n.ca_cert
                && o.ca_key == n.ca_key
                && o.tunnel == n.tunnel
                && o.authority.same_certificate(&n.authority)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{changes, needs_restart, summary};
    use crate::config::Config;

    /// A configuration loaded from files, with one provider `pay`.
    fn loaded() -> (tempfile::TempDir, Config) {
        let dir = tempfile::tempdir().expect("temp dir");
        let toml = "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
                    ledger = \"ledger.redb\"\npolicies = \"policies\"\n";
        std::fs::write(dir.path().join("proxy.toml"), toml).expect("proxy.toml");
        std::fs::create_dir(dir.path().join("policies")).expect("policies");
        let policy = "[provider]\nname = \"pay\"\nupstream = \"https://api.example.com\"\n\
                      mount = \"/pay\"\n";
        std::fs::write(dir.path().join("policies/pay.toml"), policy).expect("policy");
        let config = crate::config::load(&dir.path().join("proxy.toml")).expect("loads");
        (dir, config)
    }

    #[test]
    fn the_same_files_change_nothing() {
        let (_dir, config) = loaded();
        let reach = crate::app::attempt_reach(&config.providers);
        assert!(needs_restart(&config, &config.clone(), reach).is_empty());
        let same = changes(&config, &config.clone());
        assert_eq!(same.outcome, "unchanged");
        assert_eq!(summary(&same), "configuration reloaded: nothing changed");
    }

    #[test]
    fn listeners_and_the_ledger_need_a_restart_each_named() {
        let (_dir, old) = loaded();
        let mut new = old.clone();
        new.listen = "127.0.0.1:1".parse().unwrap();
        new.ledger = std::path::PathBuf::from("/elsewhere/ledger.redb").into();
        new.limits.inbound.max_connections += 1;
        let errors = needs_restart(&old, &new, Duration::from_secs(31)).join("\n");
        for key in ["listen:", "ledger:", "limits.max_connections:"] {
            assert!(
                errors.contains(&format!("{key} restart to apply")),
                "{errors}"
            );
        }
        assert!(!errors.contains("admin_listen"), "{errors}");
    }

    #[test]
    fn providers_added_removed_and_changed_are_named() {
        let (_dir, old) = loaded();
        let mut new = old.clone();
        let mut added = new.providers[0].clone();
        added.name = "mail".into();
        new.providers[0].timeout += Duration::from_secs(1);
        new.providers.push(added);
        new.limits.in_flight_wait += Duration::from_secs(1);
        let changed = changes(&old, &new);
        assert_eq!(changed.outcome, "applied");
        assert_eq!(changed.providers.added, ["mail"]);
        assert_eq!(changed.providers.changed, ["pay"]);
        assert_eq!(changed.settings, ["limits"]);
        let gone = changes(&new, &old);
        assert_eq!(gone.providers.removed, ["mail"]);
        assert_eq!(
            summary(&changed),
            "configuration reloaded: providers added: mail; providers changed: pay; \
             settings changed: limits"
        );
    }
}
