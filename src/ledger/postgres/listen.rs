//! The replay answers a replica keeps in memory, and what keeps them true across replicas.
//!
//! A `succeeded` or `failed` operation's answer changes only when an operator rebinds or
//! resolves it again, or retention prunes it. Each replica keeps the answers it has read in a
//! bounded map (`hot`, the one redb keeps too) and answers replays from it without a query.
//! Every such change is announced, in the transaction that makes it, on the `CHANGED` channel
//! (`NOTIFY`, delivered by PostgreSQL to every listening session when it commits; the payload
//! is the operation's ID, or `*` after a prune); each replica's `listener` holds one
//! connection of its own that listens and drops what it hears of from its map. The replica
//! that made the change drops it itself before it answers.
//!
//! The map answers only while the listener is known to hear: from the moment its `LISTEN`
//! is in place (the map is emptied then, since what changed before may never be heard of) and
//! for as long as a ping on that connection, sent every `PING`, comes back within
//! `PING_TIMEOUT`. A listener that loses its connection or stops hearing back empties the map
//! and lets replays read the database until it listens again. A read fills the map only when
//! no change was heard of (and no emptying happened) since it began (`hot`'s epoch).
//!
//! What a replica can then miss is a change made on another replica in the moment before its
//! notification arrives (the delivery of one message, about a millisecond on one network);
//! docs/reference.md says so.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Core;
use super::connect;
use super::schema::CHANGED;

/// How often the listener checks that its connection still answers.
const PING: Duration = Duration::from_secs(1);
/// How long a ping may take before the map stops answering and the connection is dropped.
const PING_TIMEOUT: Duration = Duration::from_secs(1);
/// How long to wait before listening again after a failure.
const RETRY: Duration = Duration::from_millis(500);

/// Until when the map may answer: the listener's word, read by every replay.
pub(super) struct Hearing {
    base: Instant,
    /// Milliseconds after `base` until which the map may answer; 0: not now.
    until: AtomicU64,
}

impl Hearing {
    pub(super) fn new() -> Hearing {
        Hearing {
            base: Instant::now(),
            until: AtomicU64::new(0),
        }
    }

    /// Whether the listener was heard from recently enough for the map to answer.
    pub(super) fn live(&self) -> bool {
        let now = self.millis(Instant::now());
        now < self.until.load(Ordering::Acquire)
    }

    /// A ping sent at `sent` came back: the map may answer until a next one is overdue.
    fn heard(&self, sent: Instant) {
        let until = self.millis(sent + PING + PING_TIMEOUT);
        self.until.store(until, Ordering::Release);
    }

    fn deaf(&self) {
        self.until.store(0, Ordering::Release);
    }

    fn millis(&self, at: Instant) -> u64 {
        u64::try_from(at.duration_since(self.base).as_millis()).unwrap_or(u64::MAX)
    }
}

/// A listening connection and the task that drives it.
pub(super) type Listening = (tokio_postgres::Client, JoinHandle<()>);

/// Opens a listening connection (bounded by the connect timeout); once it returns, every
/// change committed from then on is heard of.
pub(super) async fn listen(core: &Core) -> Option<Listening> {
    let hot = Arc::clone(&core.hot);
    let heard = move |id: &str| match id {
        "*" => hot.clear(),
        id => hot.forget(&[id.to_owned()]),
    };
    let listening = connect::listen(&core.url, core.stall, CHANGED, heard);
    match tokio::time::timeout(connect::CONNECT_TIMEOUT, listening).await {
        Ok(Ok(listening)) => Some(listening),
        Ok(Err(fault)) => {
            tracing::debug!(error = %fault, "cannot listen for ledger changes");
            None
        }
        Err(_) => {
            tracing::debug!("cannot listen for ledger changes: no answer");
            None
        }
    }
}

/// A listening connection is in place: every change from here on is heard of, what changed
/// before may not be, so the map starts empty and may answer.
pub(super) fn hearing(core: &Core) {
    core.hot.clear();
    core.hearing.heard(Instant::now());
}

/// Listens for changes to kept answers until the ledger stops, on `first` (opened by the
/// ledger's open, so replays are answered from memory from the start) and then on a new
/// connection after every failure.
pub(super) async fn listener(core: Arc<Core>, mut first: Option<Listening>) {
    loop {
        // The open already called `hearing` for `first`.
        let (listening, opened) = match first.take() {
            Some(listening) => (Some(listening), true),
            None => tokio::select! {
                () = core.stop.cancelled() => return,
                listening = listen(&core) => (listening, false),
            },
        };
        if let Some((client, mut driver)) = listening {
            if !opened {
                hearing(&core);
            }
            let stopped = keep_hearing(&core, &client, &mut driver).await;
            driver.abort();
            if stopped {
                return;
            }
            tracing::warn!(
                "the ledger's change notifications stopped; replays read the database until they are back"
            );
        }
        core.hearing.deaf();
        core.hot.clear();
        tokio::select! {
            () = core.stop.cancelled() => return,
            () = tokio::time::sleep(RETRY) => {}
        }
    }
}

/// Pings `client` every `PING` while it answers within `PING_TIMEOUT` and its connection
/// (`driver`) lasts; `true` once the ledger stops, `false` when the connection failed.
async fn keep_hearing(
    core: &Core,
    client: &tokio_postgres::Client,
    driver: &mut JoinHandle<()>,
) -> bool {
    loop {
        tokio::select! {
            () = core.stop.cancelled() => return true,
            _ = &mut *driver => return false,
            () = tokio::time::sleep(PING) => {}
        }
        let sent = Instant::now();
        match tokio::time::timeout(PING_TIMEOUT, client.batch_execute("SELECT 1")).await {
            Ok(Ok(())) => core.hearing.heard(sent),
            _ => return false,
        }
    }
}
