//! Notifications (`[notify]`): a JSON POST to a webhook when an operation needs a person or
//! one is settled, and a periodic summary of what still waits.
//!
//! It follows the ledger's feed of committed events (`Ledger::subscribe`), so it sees exactly
//! what the ledger recorded and nothing of the request itself: no request value, header
//! value or secret can reach a notification. It never blocks the request path: the feed
//! never waits for it, the queue between the events and the webhook is bounded (the oldest
//! is dropped and counted), and one sender delivers them in order with retries. Queued
//! notifications live in memory only: a stop or a crash loses them.
//!
//! # Layout
//! - `message`: which events notify, and the notification's JSON (pure).
//! - `queue`: the bounded queue, dropping the oldest.
//! - `deliver`: the signed POST, retries and backoff.
//! - `summary`: what still waits, counted for the periodic summary.

mod deliver;
mod message;
mod queue;
mod summary;

use std::future::Future;
use std::time::Duration;

use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::{Instant, interval_at};

use crate::app::App;
use crate::clock::Timestamp;
use crate::config::Config;
use crate::ledger::Published;
use crate::metrics::Metrics;
use crate::operation::Operation;
use deliver::{Signer, Webhook};
use queue::Queue;

pub use deliver::{ATTEMPT_TIMEOUT, ATTEMPTS, FIRST_WAIT, SIGNATURE};
pub use message::{Notice, notice};
pub use summary::Waiting;

/// The notifier of a proxy with a `[notify] webhook`.
pub struct Notifier {
    webhook: Webhook,
    queue: Queue,
    summary: Duration,
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
    pub fn orphaned(&self, app: &App, op: &Operation) {
        let Some(event) = op_event(op) else {
            return;
        };
        let published = Published {
            op: std::sync::Arc::new(op.clone()),
            event,
        };
        let rules = app.rules(&op.provider, &op.route);
        if let Some(n) = notice(&published, rules, Timestamp::now()) {
            self.push(&app.metrics, n);
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

/// Follows `feed` into notifications, delivers them and sends the summaries, until `stop`.
/// `feed` is subscribed before the listeners serve, so no event is missed.
pub async fn run(app: std::sync::Arc<App>, feed: Receiver<Published>, stop: impl Future) {
    let Some(notifier) = &app.notifier else {
        return;
    };
    let all = async {
        tokio::join!(
            watch(&app, notifier, feed),
            deliver_all(&app, notifier),
            summarize(&app, notifier),
        )
    };
    tokio::select! {
        _ = stop => {},
        _ = all => {},
    }
}

async fn watch(app: &App, notifier: &Notifier, mut feed: Receiver<Published>) {
    loop {
        match feed.recv().await {
            Ok(p) => {
                let rules = app.rules(&p.op.provider, &p.op.route);
                if let Some(n) = notice(&p, rules, p.event.at) {
                    notifier.push(&app.metrics, n);
                }
            }
            Err(RecvError::Lagged(missed)) => {
                app.metrics.notifications("dropped", missed);
                tracing::warn!(
                    missed,
                    "the notifier fell behind the ledger's events; their notifications are lost"
                );
            }
            Err(RecvError::Closed) => return,
        }
    }
}

async fn deliver_all(app: &App, notifier: &Notifier) {
    loop {
        let n = notifier.queue.pop().await;
        match notifier.webhook.deliver(&n).await {
            Ok(()) => app.metrics.notifications("sent", 1),
            Err(why) => {
                app.metrics.notifications("failed", 1);
                tracing::warn!(
                    webhook = %notifier.webhook.host,
                    event = n.event,
                    operation = %crate::operation::Logged(n.operation_id.as_deref().unwrap_or("-")),
                    reason = %why,
                    "a notification could not be delivered"
                );
            }
        }
    }
}

async fn summarize(app: &App, notifier: &Notifier) {
    let every = notifier.summary;
    let mut ticker = interval_at(Instant::now() + every, every);
    loop {
        ticker.tick().await;
        let now = Timestamp::now();
        match summary::waiting(app, now).await {
            Ok(waiting) => {
                if let Some(n) = waiting.notice(now) {
                    notifier.push(&app.metrics, n);
                }
            }
            Err(e) => tracing::debug!(error = %e, "the summary could not read the ledger"),
        }
    }
}
