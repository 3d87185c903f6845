//! The notifier of a proxy with a `[notify] webhook`: its webhook, signing key, queue and
//! summary period, built once at start from the configuration. What is sent and when is
//! `notify`'s; this module never sees the running proxy.

use std::time::Duration;

use super::deliver::{Signer, Webhook};
use super::message::{Notice, notice};
use super::queue::Queue;
use crate::clock::Timestamp;
use crate::config::Config;
use crate::decide::Rules;
use crate::ledger::Published;
use crate::metrics::Metrics;
use crate::operation::Operation;

/// The notifier of a proxy with a `[notify] webhook`.
pub struct Notifier {
    pub(super) webhook: Webhook,
    pub(super) queue: Queue,
    pub(super) summary: Duration,
}

impl Notifier {
    /// The notifier `[notify]` asks for (`None`: off), with the signing secret read from its
    /// `secret_env`. An unset or blank variable refuses the start: a receiver that checks
    /// signatures would refuse every notification.
    pub fn new(config: &Config) -> Result<Option<Notifier>, String> {
        let Some(notify) = &config.notify else {
            return Ok(None);
        };
        let signer = match &notify.secret_env {
            Some(var) => match secret(var) {
                Some(secret) => Some(Signer::new(secret.as_bytes())),
                None => return Err(unset_secret(config, var)),
            },
            None => None,
        };
        let webhook = Webhook {
            uri: notify.webhook.clone(),
            host: notify.webhook_host(),
            signer,
            client: crate::upstream::plain_client()?,
        };
        Ok(Some(Notifier {
            webhook,
            queue: Queue::new(notify.queue),
            summary: notify.summary,
        }))
    }

    /// Queues `notice`, counting the one it may push out.
    pub fn push(&self, metrics: &Metrics, notice: Notice) {
        let dropped = self.queue.push(notice);
        if dropped > 0 {
            metrics.notifications("dropped", dropped);
        }
    }

    /// Queues the notification for an operation found `unknown` outside the feed (orphaned
    /// at start), when it is one only an operator can settle.
    /// `rules`: those of its route, if it still exists.
    pub fn orphaned(&self, rules: Option<Rules>, metrics: &Metrics, op: &Operation) {
        let Some(event) = op_event(op) else {
            return;
        };
        let published = Published {
            op: std::sync::Arc::new(op.clone()),
            event,
        };
        if let Some(n) = notice(&published, rules, Timestamp::now()) {
            self.push(metrics, n);
        }
    }
}

/// The `operation.orphaned` event an orphaned operation got (its error and update time).
fn op_event(op: &Operation) -> Option<crate::operation::Event> {
    Some(crate::operation::Event {
        at: op.updated_at,
        kind: crate::operation::EventKind::Orphaned,
        attempt: op.attempts,
        detail: op.error.clone()?,
    })
}

/// The secret in `var`, trimmed; `None` when unset or blank.
fn secret(var: &str) -> Option<String> {
    let value = std::env::var(var).ok()?;
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

fn unset_secret(config: &Config, var: &str) -> String {
    format!(
        "{}: notify.secret_env: the environment variable {var} is not set (or blank), so \
         notifications could not be signed; set it to the signing secret, or remove \
         secret_env to send them unsigned",
        config.file.display()
    )
}

/// For `idemproxy check`: a warning when `secret_env` names a variable that is not set here
/// (`serve` would refuse to start), else `None`.
pub fn secret_warning(config: &Config) -> Option<String> {
    let var = config.notify.as_ref()?.secret_env.as_ref()?;
    match secret(var) {
        Some(_) => None,
        None => Some(format!(
            "warning: {} (`serve` refuses to start without it)",
            unset_secret(config, var)
        )),
    }
}
