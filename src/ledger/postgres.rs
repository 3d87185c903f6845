//! The PostgreSQL backend of the ledger: one database shared by every replica, each holding a
//! lease (docs/reference.md, several replicas).
//!
//! It owns opening the database (schema, secret check, this replica's registration, the
//! orphaning of what lapsed replicas left in flight), the background tasks of the lease, and
//! the routing of each `Ledger` call to a transaction or a plain statement. Its schema is
//! `schema`, connections and transactions `connect`, the locked write `update`, the reads
//! `read`, the batch writes `prune`, the leases `lease`. Records are the codec's bytes, so any
//! backend can load what another dumps. It never decides what a request means, and no
//! PostgreSQL type leaves `ledger`.
//!
//! Every call is bounded in time: a database that does not answer is `Unavailable` after
//! `OP_TIMEOUT`, never a hang. Writes run in spawned tasks, so a caller that goes away cannot
//! leave one half done; a transaction that fails or times out discards its connection.

mod connect;
pub(super) mod copy;
mod group;
mod lease;
mod listen;
mod prune;
mod read;
mod schema;
#[cfg(test)]
pub(super) mod tests;
mod update;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_util::sync::CancellationToken;

use self::connect::{Conn, Tx};
use self::group::Group;
use self::lease::Lease;
use self::listen::Hearing;
use self::update::Appended;
use super::Replayable;
use super::backend::Backend;
use super::change::Left;
use super::fault::Fault;
use super::feed::{Feed, Published};
use super::hot::Hot;
use super::{Checked, Fences, Filter, LedgerError, LedgerOptions, OnOrphaned, Page, Stats, codec};
use super::{Commit, OnCommit};
use super::{ReplayNote, Replays};
use crate::clock::Timestamp;
use crate::config::PgUrl;
use crate::operation::{Event, Operation, State, StoredResponse, Write};

/// The longest any one call may take before the ledger answers `Unavailable`.
const OP_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a graceful stop waits to end its lease.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// The PostgreSQL ledger: a cheap `Clone` handle. The lease's tasks stop when the last clone
/// is dropped.
#[derive(Clone)]
pub struct Postgres {
    inner: Arc<Inner>,
}

/// Held by the handles only: dropping the last stops the background tasks.
struct Inner {
    core: Arc<Core>,
    fences: Fences,
    /// The queue of updates; dropped with the last handle, which ends its task.
    group: Group,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.core.stop.cancel();
    }
}

/// What every call and background task shares.
pub(super) struct Core {
    pool: Pool,
    /// Where the database is, for the listener's own connection.
    url: PgUrl,
    /// `pool`'s stall bound (half a lease), for the listener's connection too.
    stall: Duration,
    /// The replay answers kept in memory (`listen`).
    hot: Arc<Hot>,
    /// Whether `hot` may answer now (`listen`).
    hearing: Hearing,
    /// This replica's ID: the owner of its claims and the epoch of its fences.
    me: i64,
    lease: Lease,
    /// `LedgerOptions::attempt_reach`.
    reach: Duration,
    feed: Feed,
    fail_writes: bool,
    on_commit: Option<OnCommit>,
    on_orphaned: Option<OnOrphaned>,
    stop: CancellationToken,
}

impl Core {
    /// Commits `tx` and tells `on_commit` (the commit metrics) how long it took: one job (a
    /// prune batch, a sweep's orphaning; updates are grouped by `group`).
    async fn commit(&self, tx: Tx, durable: bool) -> Result<(), Fault> {
        let started = std::time::Instant::now();
        tx.commit(durable).await?;
        self.committed(started, 1, durable);
        Ok(())
    }

    /// Tells `on_commit` of a commit of `jobs` jobs that began at `started` and has returned.
    fn committed(&self, started: std::time::Instant, jobs: usize, durable: bool) {
        if let Some(hook) = &self.on_commit {
            hook(Commit {
                took: started.elapsed(),
                jobs,
                durable,
            });
        }
    }

    async fn conn(&self) -> Result<Conn, Fault> {
        Conn::get(&self.pool)
            .await
            .inspect_err(|_| self.lease.unreachable())
    }

    async fn begin(&self) -> Result<Tx, Fault> {
        self.conn().await?.begin().await
    }

    /// `work`, or `Unavailable` once `OP_TIMEOUT` has passed (its connection is discarded).
    async fn timed<T>(&self, work: impl Future<Output = Result<T, Fault>>) -> Result<T, Fault> {
        match tokio::time::timeout(OP_TIMEOUT, work).await {
            Ok(result) => result,
            Err(_) => {
                self.lease.unreachable();
                Err(Fault::new(format!(
                    "PostgreSQL did not answer within {}s",
                    OP_TIMEOUT.as_secs()
                )))
            }
        }
    }

    /// Tells `on_orphaned` of operations orphaned while running.
    fn orphaned(&self, ops: &[Operation]) {
        if let Some(hook) = &self.on_orphaned {
            ops.iter().for_each(|op| hook(op));
        }
    }

    fn publish(&self, appended: &Appended) {
        for (op, events) in appended {
            self.feed.publish(op, events);
        }
    }
}

fn injected() -> LedgerError {
    LedgerError::Unavailable("fault injection: ledger.commit fails".to_owned())
}

fn open_error(url: &PgUrl, reason: impl std::fmt::Display) -> LedgerError {
    LedgerError::Open {
        path: url.to_string(),
        reason: reason.to_string(),
    }
}

/// `Ledger::check` on a database.
pub(super) async fn check(url: &PgUrl, secret_check: &str) -> Result<Checked, LedgerError> {
    let pool = connect::pool(url, None).map_err(|e| open_error(url, e))?;
    let shown = url.to_string();
    let checked = tokio::time::timeout(OP_TIMEOUT, schema::check(&pool, &shown, secret_check));
    checked
        .await
        .unwrap_or_else(|_| Err(open_error(url, "PostgreSQL did not answer")))
}

impl Postgres {
    /// `Ledger::open` on this database.
    pub async fn open(
        url: &PgUrl,
        _now: Timestamp,
        opts: LedgerOptions,
    ) -> Result<(Postgres, Vec<Operation>), LedgerError> {
        // Half a lease: a stalled replica's locks go before its lease would let another
        // replica orphan what it holds.
        let stall = opts.lease / 2;
        let pool = connect::pool(url, Some(stall)).map_err(|e| open_error(url, e))?;
        let started = tokio::time::Instant::now();
        let setup = async {
            let prepared = schema::prepare(&pool, opts.secret_check.as_deref()).await?;
            let me = match prepared {
                Ok(schema::Prepared::Ready) => {
                    let conn = Conn::get(&pool).await?;
                    Some(lease::register(&conn, &opts.replica, opts.lease).await?)
                }
                Ok(schema::Prepared::OtherSecret) => None,
                Err(found) => return Ok(Err(found)),
            };
            Ok::<_, Fault>(Ok(me))
        };
        let me = match tokio::time::timeout(OP_TIMEOUT, setup).await {
            Err(_) => return Err(open_error(url, "PostgreSQL did not answer")),
            Ok(Err(fault)) => return Err(open_error(url, fault)),
            Ok(Ok(Err(found))) => {
                return Err(LedgerError::NewerSchema {
                    path: url.to_string(),
                    found,
                    known: schema::VERSION,
                });
            }
            Ok(Ok(Ok(None))) => {
                return Err(LedgerError::OtherSecret {
                    path: url.to_string(),
                });
            }
            Ok(Ok(Ok(Some(me)))) => me,
        };
        let core = Arc::new(Core {
            pool,
            url: url.clone(),
            stall,
            hot: Arc::new(Hot::new()),
            hearing: Hearing::new(),
            me,
            lease: Lease::new(opts.lease, started),
            reach: opts.attempt_reach,
            feed: Feed::new(),
            fail_writes: opts.fail_writes || super::fault_point("ledger.commit"),
            on_commit: opts.on_commit,
            on_orphaned: opts.on_orphaned,
            stop: CancellationToken::new(),
        });
        let orphaned = core
            .timed(lease::sweep(&core))
            .await
            .map_err(|fault| open_error(url, fault))?;
        tokio::spawn(lease::heartbeat(Arc::clone(&core)));
        tokio::spawn(lease::sweeper(Arc::clone(&core)));
        // Listening before the open returns: replays are answered from memory from the start.
        let first = listen::listen(&core).await;
        if first.is_some() {
            listen::hearing(&core);
        }
        tokio::spawn(listen::listener(Arc::clone(&core), first));
        let epoch = u64::try_from(me).unwrap_or_default();
        let inner = Inner {
            group: Group::start(Arc::clone(&core)),
            core,
            fences: Fences::from_epoch(epoch),
        };
        Ok((
            Postgres {
                inner: Arc::new(inner),
            },
            orphaned,
        ))
    }

    fn core(&self) -> &Arc<Core> {
        &self.inner.core
    }

    /// How many updates wait for a batch (`group`), for the tests that fill one.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.inner.group.waiting()
    }

    /// Runs one read on a pooled connection, bounded in time.
    async fn read<'a, T, Fut>(&'a self, f: impl FnOnce(Conn) -> Fut) -> Result<T, LedgerError>
    where
        Fut: Future<Output = Result<T, Fault>> + 'a,
    {
        let core = self.core();
        let work = async {
            let conn = core.conn().await?;
            f(conn).await
        };
        core.timed(work).await.map_err(LedgerError::from)
    }
}

impl Backend for Postgres {
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Published> {
        self.core().feed.subscribe()
    }

    fn fence(&self) -> u64 {
        self.inner.fences.next()
    }

    fn fences(&self) -> Fences {
        self.inner.fences.clone()
    }

    /// `Ledger::update` on this database: queued for the next batch (`group`).
    async fn update<T, F>(&self, id: &str, f: F) -> Result<T, LedgerError>
    where
        F: FnOnce(Option<Operation>) -> (Option<Write>, T) + Send + 'static,
        T: Send + 'static,
    {
        self.inner.group.update(id, f).await
    }

    fn writable(&self) -> bool {
        self.core().lease.writable()
    }

    fn lease_epoch(&self) -> u64 {
        self.core().lease.epoch()
    }

    fn may_send(&self, epoch: u64) -> Result<(), &'static str> {
        self.core().lease.may_send(epoch)
    }

    fn abandon(&self, id: &str, fence: u64) {
        let core = Arc::clone(self.core());
        tokio::spawn(lease::abandon(core, id.to_owned(), (fence, Left::Maybe)));
    }

    /// `Ledger::release` on this database: the heartbeat and the sweep stop first, so
    /// nothing renews the lease after it ends.
    async fn release(&self) {
        let core = self.core();
        core.stop.cancel();
        // Bounded tighter than a call: an unreachable database must not hold up the exit.
        match tokio::time::timeout(RELEASE_TIMEOUT, lease::release(core)).await {
            Ok(Ok(())) => {}
            Ok(Err(fault)) => {
                tracing::warn!(error = %fault, "the ledger lease could not be ended; it lapses by itself");
            }
            Err(_) => {
                tracing::warn!("the ledger lease could not be ended in time; it lapses by itself")
            }
        }
    }

    async fn get(&self, id: &str) -> Result<Option<Operation>, LedgerError> {
        self.read(|c| async move { read::get(&c, id).await }).await
    }

    /// A final answer read once is kept in memory and answered from there while this replica
    /// hears of every change to it (`listen`).
    async fn replayable(&self, id: &str) -> Result<Option<Arc<Replayable>>, LedgerError> {
        let core = self.core();
        // Taken before the query's snapshot (see `hot`).
        let epoch = core.hot.epoch();
        if core.hearing.live()
            && let Some(kept) = core.hot.get(id)
        {
            return Ok(Some(kept));
        }
        let read = self
            .read(|c| async move { read::replayable(&c, id).await })
            .await?;
        Ok(read.map(|read| match core.hearing.live() {
            true => core.hot.fill(id, epoch, read),
            false => Arc::new(read),
        }))
    }

    async fn events(&self, id: &str) -> Result<Vec<Event>, LedgerError> {
        self.read(|c| async move { read::events(&c, id).await })
            .await
    }

    async fn kept_request(&self, id: &str) -> Result<Option<Vec<u8>>, LedgerError> {
        self.read(|c| async move { read::kept_request(&c, id).await })
            .await
    }

    async fn response(&self, id: &str) -> Result<Option<StoredResponse>, LedgerError> {
        self.read(|c| async move { read::response(&c, id).await })
            .await
    }

    async fn list(
        &self,
        filter: &Filter,
        limit: usize,
        after: Option<&str>,
    ) -> Result<Page, LedgerError> {
        let after = match after {
            Some(cursor) => Some(codec::decode_cursor(cursor).ok_or(LedgerError::BadCursor)?),
            None => None,
        };
        self.read(|c| async move { read::list(&c, filter, limit, after).await })
            .await
    }

    async fn tombstone(&self, id: &str) -> Result<Option<Operation>, LedgerError> {
        self.read(|c| async move { read::tombstone(&c, id).await })
            .await
    }

    async fn replays(&self, id: &str) -> Result<Option<Replays>, LedgerError> {
        self.read(|c| async move { read::replays(&c, id).await })
            .await
    }

    async fn stats(&self) -> Result<Stats, LedgerError> {
        self.read(|c| async move { read::stats(&c).await }).await
    }

    /// `Ledger::prune` on this database: batches of at most `max`, each its own transaction.
    async fn prune(
        &self,
        older_than: Timestamp,
        now: Timestamp,
        max: usize,
    ) -> Result<usize, LedgerError> {
        if self.core().fail_writes {
            return Err(injected());
        }
        let max = max.max(1);
        let mut total = 0;
        for state in [State::Succeeded, State::Failed] {
            loop {
                let core = self.core();
                let batch = prune::prune_batch(core, state, older_than, now, max);
                let (deleted, full) = core.timed(batch).await?;
                total += deleted;
                if !full {
                    break;
                }
            }
        }
        Ok(total)
    }

    async fn prune_tombstones(
        &self,
        older_than: Timestamp,
        max: usize,
    ) -> Result<usize, LedgerError> {
        if self.core().fail_writes {
            return Err(injected());
        }
        let max = max.max(1);
        let mut total = 0;
        loop {
            let core = self.core();
            let deleted = core
                .timed(prune::sweep_tombstones(core, older_than, max))
                .await?;
            total += deleted;
            if deleted < max {
                return Ok(total);
            }
        }
    }

    async fn note_replays(&self, notes: Vec<ReplayNote>) -> Result<usize, LedgerError> {
        if notes.is_empty() {
            return Ok(0);
        }
        if self.core().fail_writes {
            return Err(injected());
        }
        let core = self.core();
        let (noted, appended) = core.timed(prune::note_replays(core, notes)).await?;
        core.publish(&appended);
        Ok(noted)
    }
}
