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
pub mod notifier;
mod queue;
mod summary;

use std::future::Future;

use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::{Instant, interval_at};

use crate::app::Live;
use crate::clock::Timestamp;
use crate::ledger::Published;

pub use deliver::{ATTEMPT_TIMEOUT, ATTEMPTS, FIRST_WAIT, SIGNATURE};
pub use message::{Notice, notice};
pub use notifier::{Notifier, secret_warning};
pub use summary::Waiting;

/// Follows `feed` into notifications, delivers them and sends the summaries, until `stop`.
/// `feed` is subscribed before the listeners serve, so no event is missed.
pub async fn run(
    live: std::sync::Arc<crate::app::Live>,
    notifier: Option<Notifier>,
    feed: Receiver<Published>,
    stop: impl Future,
) {
    let Some(notifier) = &notifier else {
        return;
    };
    let all = async {
        tokio::join!(
            watch(&live, notifier, feed),
            deliver_all(&live, notifier),
            summarize(&live, notifier),
        )
    };
    tokio::select! {
        _ = stop => {},
        _ = all => {},
    }
}

async fn watch(live: &Live, notifier: &Notifier, mut feed: Receiver<Published>) {
    loop {
        let received = feed.recv().await;
        let app = live.current();
        match received {
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

async fn deliver_all(live: &Live, notifier: &Notifier) {
    loop {
        let n = notifier.queue.pop().await;
        let app = live.current();
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

async fn summarize(live: &Live, notifier: &Notifier) {
    let every = notifier.summary;
    let mut ticker = interval_at(Instant::now() + every, every);
    loop {
        ticker.tick().await;
        let app = live.current();
        let now = Timestamp::now();
        match summary::waiting(&app, now).await {
            Ok(waiting) => {
                if let Some(n) = waiting.notice(now) {
                    notifier.push(&app.metrics, n);
                }
            }
            Err(e) => tracing::debug!(error = %e, "the summary could not read the ledger"),
        }
    }
}
