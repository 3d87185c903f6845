//! The durable ledger: operations, their events and their stored responses, in redb.
//! The values it stores are the operation model's (`crate::operation`); it only keeps them.
//!
//! This module owns the on-disk layout and the single writer. Its public surface is a small
//! domain API (`open`, `update`, `get`, `events`, `response`, `list`, `prune`, `stats`,
//! `subscribe` to the events as they commit, and
//! the tombstones' `tombstone` and `prune_tombstones`, the replay counts' `note_replays` and
//! `replays`) whose
//! semantics a SQL backend could match; no redb type ever leaves it. Every state change is one
//! durable commit (`Durability::Immediate`) made by one writer thread fed by a channel; the
//! writes queued together share one commit (group commit, see `writer`). A write that only
//! appends history (the operation and its response unchanged, e.g. a conflict noted, or a
//! batch of replay counts) commits without an fsync and becomes durable with the next durable
//! commit (in SQL terms: an asynchronous
//! commit); a crash may lose such an event, never a state. It never decides what a request
//! means: callers pass a closure that sees the current operation and says what to write.
//! It stores only what a `Write` carries, so never a request header or body (docs/reference.md section 10).
//! One storage error does not stop it: it reopens itself once the disk allows (`recovery`).

mod batch;
mod codec;
mod feed;
mod recovery;
mod replays;
mod store;
#[cfg(test)]
mod tests;
mod tombstone;
mod writer;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use recovery::{DeadClaim, Shared};
use redb::{Database, Durability, ReadTransaction, ReadableDatabase};

use crate::clock::Timestamp;
use crate::operation::{Event, Operation, State, StoredResponse, Write};
pub use batch::Commit;
use feed::Feed;
pub use feed::Published;
use store::{Fault, PruneBatch, Tables};
use writer::{Job, PruneJob, Reply, SweepJob, TombJob, UpdateJob, Writer};

pub use replays::{ReplayNote, Replays};

/// Filters of `GET /ops`; `None` matches all.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub state: Option<State>,
    pub provider: Option<String>,
    pub route: Option<String>,
}

/// One page of `list`, newest first.
#[derive(Debug, Clone)]
pub struct Page {
    pub ops: Vec<Operation>,
    /// Opaque cursor for the next page; `None` at the end.
    pub next: Option<String>,
}

/// Counts for metrics, kept up to date by every write (no scan).
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub by_state: BTreeMap<&'static str, u64>,
    pub oldest_unknown: Option<Timestamp>,
    pub oldest_in_flight: Option<Timestamp>,
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("the ledger at {path} cannot be opened: {reason}")]
    Open { path: String, reason: String },
    #[error("the ledger cannot record: {0}")]
    Unavailable(String),
    #[error("invalid cursor")]
    BadCursor,
    /// `LedgerOptions::secret_check` differs from the check value the ledger keeps.
    #[error("the ledger at {path} was first used with another installation secret")]
    OtherSecret { path: String },
}

/// How to open the ledger.
#[derive(Clone, Default)]
pub struct LedgerOptions {
    /// Called after each commit with its duration and how many jobs it made durable together
    /// (group commit; for the commit metrics).
    pub on_commit: Option<Arc<dyn Fn(Commit) + Send + Sync>>,
    /// Test-only fault injection: every write fails with `Unavailable` and writes nothing.
    /// `IDEMPROXY_FAIL=ledger.commit` in the environment sets it too. The recovery write of
    /// `open` is exempt, so a proxy under injection still starts.
    pub fail_writes: bool,
    /// The installation secret's `check_value()`: the first open keeps it, a later open with
    /// another is `OtherSecret` and changes nothing. `None` (tests reading a file) skips it.
    pub secret_check: Option<String>,
}

impl fmt::Debug for LedgerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LedgerOptions")
            .field("on_commit", &self.on_commit.as_ref().map(|_| "Fn(Commit)"))
            .field("fail_writes", &self.fail_writes)
            .field("secret_check", &self.secret_check.is_some())
            .finish()
    }
}

/// A cheap `Clone` handle to the ledger. The database file stays open (and locked against
/// other processes) until the last clone is dropped; that drop waits for the writer thread
/// to finish the writes already queued.
#[derive(Clone)]
pub struct Ledger {
    inner: Arc<Inner>,
}

struct Inner {
    /// The database handle, replaced by the writer when it reopens the file.
    shared: Arc<Shared>,
    writer: Writer,
    feed: Feed,
    fences: Fences,
    fail_writes: bool,
}

/// Issues fencing tokens; a cheap `Clone`, so an `update` closure can take a token only when
/// it writes a claim.
#[derive(Clone)]
pub struct Fences {
    inner: Arc<(u64, AtomicU64)>,
}

impl Fences {
    /// A source whose first token is `first` (epoch 0), for unit tests.
    #[cfg(test)]
    pub(crate) fn starting_at(first: u64) -> Fences {
        Fences {
            inner: Arc::new((0, AtomicU64::new(first))),
        }
    }

    /// A fresh, non-zero fencing token, unique across restarts: the boot epoch (persisted and
    /// bumped at every open) in the high 32 bits, an in-process counter in the low 32 bits.
    /// Unique for the first 2^32 tokens of a process; only written claims take one.
    pub fn next(&self) -> u64 {
        let (epoch, counter) = &*self.inner;
        let n = counter.fetch_add(1, Ordering::Relaxed);
        (epoch << 32) | (n & 0xFFFF_FFFF)
    }
}

/// The error and event detail of an operation found `in_flight` at start.
fn orphan_reason() -> &'static str {
    "the proxy stopped while this operation was in flight"
}

impl Ledger {
    /// Opens (or creates, with its parent directories) the ledger; every `in_flight`
    /// operation left by an earlier process becomes `unknown` (fence 0, `updated_at = now`)
    /// with an `operation.orphaned` event, and the boot epoch behind `fence` is bumped, in one
    /// durable commit. Returns the orphaned operations as they now are. A path that cannot be
    /// created, a file another process holds, or a corrupt file is `LedgerError::Open`.
    pub async fn open(
        path: &Path,
        now: Timestamp,
        opts: LedgerOptions,
    ) -> Result<(Ledger, Vec<Operation>), LedgerError> {
        let owned = path.to_path_buf();
        let check = opts.secret_check.clone();
        let (db, epoch, orphaned) =
            match tokio::task::spawn_blocking(move || open_blocking(&owned, now, check)).await {
                Ok(opened) => opened?,
                Err(e) => return Err(open_error(path, e)),
            };
        let shared = Arc::new(Shared::new(path, db));
        let feed = Feed::new();
        let writer = Writer::start(Arc::clone(&shared), opts.on_commit, feed.clone())
            .map_err(|reason| open_error(path, reason))?;
        let inner = Inner {
            shared,
            writer,
            feed,
            fences: Fences {
                inner: Arc::new((epoch, AtomicU64::new(1))),
            },
            fail_writes: opts.fail_writes || fault_injected(),
        };
        let ledger = Ledger {
            inner: Arc::new(inner),
        };
        Ok((ledger, orphaned))
    }

    /// Follows the events committed from now on, each with its operation as that commit
    /// left it, in commit order (see `feed`). A subscriber that falls more than a few
    /// thousand events behind loses the oldest and is told how many (`Lagged`); it never
    /// slows the writer. The start-up orphaning happens before anyone can subscribe.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Published> {
        self.inner.feed.subscribe()
    }

    /// A fresh fencing token (see `Fences::next`).
    pub fn fence(&self) -> u64 {
        self.inner.fences.next()
    }

    /// The token source, for an `update` closure that takes a token only if it claims.
    pub fn fences(&self) -> Fences {
        self.inner.fences.clone()
    }

    /// Reads the operation `id` (for a pruned one, the operation rebuilt from its tombstone,
    /// `pruned_at` set), calls `f` with it and applies the `Write` it returns, in one
    /// write transaction made durable (`Durability::Immediate`) before this returns `f`'s
    /// value; a `Write` that leaves the operation and its response unchanged (history only)
    /// commits without an fsync (see the module doc). `f` runs on the writer thread: keep
    /// it cheap. Updates are serialized: no other write happens between the read and the commit.
    /// If `f` returns no `Write`, nothing is written. On any storage failure, a `Write` whose
    /// `op.id` is not `id`, a `Write` for a tombstoned `id` (none may bring it back), or a
    /// panic in `f`, the answer is `Unavailable` and nothing is
    /// written. Once this future has been polled, the update runs to its end even if the
    /// future is dropped: a caller that goes away cannot leave a half-recorded outcome.
    pub async fn update<T, F>(&self, id: &str, f: F) -> Result<T, LedgerError>
    where
        F: FnOnce(Option<Operation>) -> (Option<Write>, T) + Send + 'static,
        T: Send + 'static,
    {
        let fail_writes = self.inner.fail_writes;
        self.submit(|reply| UpdateJob::new(id, f, fail_writes, reply))
            .await
    }

    /// Whether the ledger can write. False from a storage error after which the database
    /// refused new transactions (every write then fails fast with `Unavailable`) until the
    /// ledger has reopened its file and committed the sweep of `abandon`ed claims.
    pub fn writable(&self) -> bool {
        self.inner.shared.writable()
    }

    /// Says that the holder of claim `fence` on `id` could not record its result and will
    /// not try again: the operation becomes `unknown` (an `operation.orphaned` event saying
    /// the result could not be recorded) if it is still `in_flight` under `fence`, at once
    /// if the ledger can write, else by the sweep that ends its recovery. Returns at once.
    pub fn abandon(&self, id: &str, fence: u64) {
        let shared = &self.inner.shared;
        shared.bury(DeadClaim {
            id: id.to_owned(),
            fence,
        });
        let sweep = SweepJob::new(Arc::clone(shared), self.inner.fail_writes);
        self.inner.writer.submit(Box::new(sweep));
    }

    /// The live operation stored under `id`, if any (never a tombstone: see `tombstone`).
    pub async fn get(&self, id: &str) -> Result<Option<Operation>, LedgerError> {
        let id = id.to_owned();
        self.read(move |txn| store::get(txn, &id)).await
    }

    /// The live operation `id` and, when it is `succeeded`, its stored response, read on one
    /// snapshot (what a replay needs, without the writer).
    ///
    /// Read on the calling thread (see `read_here`): this is the one read of every replay.
    pub fn replayable(
        &self,
        id: &str,
    ) -> Result<Option<(Operation, Option<StoredResponse>)>, LedgerError> {
        self.read_here(|txn| {
            let Some(op) = store::get(txn, id)? else {
                return Ok(None);
            };
            let stored = match op.state {
                State::Succeeded => store::response(txn, id)?,
                _ => None,
            };
            Ok(Some((op, stored)))
        })
    }

    /// The history of `id`, in the order it was written (empty for an unknown ID).
    pub async fn events(&self, id: &str) -> Result<Vec<Event>, LedgerError> {
        let id = id.to_owned();
        self.read(move |txn| store::events(txn, &id)).await
    }

    /// The sealed first request kept for `id` (see `RequestChange`), if any.
    pub async fn kept_request(&self, id: &str) -> Result<Option<Vec<u8>>, LedgerError> {
        let id = id.to_owned();
        self.read(move |txn| store::kept_request(txn, &id)).await
    }

    /// The response stored for `id`, exactly as it will be replayed.
    pub async fn response(&self, id: &str) -> Result<Option<StoredResponse>, LedgerError> {
        let id = id.to_owned();
        self.read(move |txn| store::response(txn, &id)).await
    }

    /// Up to `limit` (at least 1) operations matching `filter`, newest first by `created_at`
    /// (ties by ID, descending), strictly after the cursor `after` from an earlier page.
    /// `next` is `None` on the last page. A cursor this ledger did not make is `BadCursor`.
    /// The scan uses the index of the filter term with the fewest operations.
    pub async fn list(
        &self,
        filter: &Filter,
        limit: usize,
        after: Option<&str>,
    ) -> Result<Page, LedgerError> {
        let after = match after {
            Some(cursor) => Some(codec::decode_cursor(cursor).ok_or(LedgerError::BadCursor)?),
            None => None,
        };
        let filter = filter.clone();
        self.read(move |txn| store::list(txn, &filter, limit, after))
            .await
    }

    /// The operation rebuilt from the tombstone of `id` (`pruned_at` set), if `id` was pruned
    /// and its tombstone has not been swept yet. Holds no response and no per-field hashes.
    pub async fn tombstone(&self, id: &str) -> Result<Option<Operation>, LedgerError> {
        let id = id.to_owned();
        self.read(move |txn| tombstone::get(txn, &id)).await
    }

    /// Deletes `succeeded` and `failed` operations last updated before `older_than`, with
    /// their events, responses and index entries, in transactions of at most `max.max(1)`
    /// deletions so other writes interleave; a succeeded or operator-rejected one leaves a
    /// tombstone with `pruned_at = now` in the same transaction (docs/reference.md section 5.8). Never touches
    /// `prepared`, `in_flight` or `unknown` operations. Returns how many were deleted.
    pub async fn prune(
        &self,
        older_than: Timestamp,
        now: Timestamp,
        max: usize,
    ) -> Result<usize, LedgerError> {
        let max = max.max(1);
        let fail_writes = self.inner.fail_writes;
        let mut total = 0;
        for state in [State::Succeeded, State::Failed] {
            let mut after = None;
            loop {
                let batch = PruneBatch {
                    state,
                    older_than,
                    after: after.take(),
                    max,
                    now,
                };
                let pruned = self
                    .submit(|reply| PruneJob::new(batch, fail_writes, reply))
                    .await?;
                total += pruned.deleted;
                match pruned.resume {
                    Some(position) => after = Some(position),
                    None => break,
                }
            }
        }
        Ok(total)
    }

    /// Deletes the tombstones made (`pruned_at`) before `older_than`, oldest first, in
    /// transactions of at most `max.max(1)` deletions; their IDs are free again. Returns how
    /// many were deleted.
    pub async fn prune_tombstones(
        &self,
        older_than: Timestamp,
        max: usize,
    ) -> Result<usize, LedgerError> {
        let max = max.max(1);
        let fail_writes = self.inner.fail_writes;
        let mut total = 0;
        loop {
            let deleted = self
                .submit(|reply| TombJob::new(older_than, max, fail_writes, reply))
                .await?;
            total += deleted;
            if deleted < max {
                return Ok(total);
            }
        }
    }

    /// Merges replay counts kept in memory into the ledger in one history-only write (no
    /// fsync of its own; see `replays`): per operation, the count grows by `count` and the
    /// times widen to `first` and `last`; an operation's first replays also append its one
    /// `operation.replayed` event. Notes for an operation that is gone are dropped. Returns
    /// how many operations were noted. On `Unavailable` nothing was written.
    pub async fn note_replays(&self, notes: Vec<ReplayNote>) -> Result<usize, LedgerError> {
        if notes.is_empty() {
            return Ok(0);
        }
        let fail_writes = self.inner.fail_writes;
        self.submit(|reply| replays::NoteJob::new(notes, fail_writes, reply))
            .await
    }

    /// What the ledger keeps of the replays of `id` (`None`: none written yet).
    pub async fn replays(&self, id: &str) -> Result<Option<Replays>, LedgerError> {
        let id = id.to_owned();
        self.read(move |txn| replays::get(txn, &id)).await
    }

    /// Operation counts per state (every state present) and the `created_at` of the oldest
    /// `unknown` and `in_flight` operations, from counters and indexes (no scan).
    pub async fn stats(&self) -> Result<Stats, LedgerError> {
        self.read(store::stats).await
    }

    async fn submit<T, J>(&self, job: impl FnOnce(Reply<T>) -> J) -> Result<T, LedgerError>
    where
        J: Job + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.inner.writer.submit(Box::new(job(reply)));
        answer.await.unwrap_or_else(|_| {
            Err(LedgerError::Unavailable(
                "the ledger writer stopped before answering".to_owned(),
            ))
        })
    }

    /// Runs `f` on a read snapshot on the calling thread, for the point reads of the request
    /// path: a few B-tree pages, almost always in the ledger's page cache, read in
    /// microseconds. Handing such a read to the blocking pool costs more than the read itself
    /// (two thread wake-ups; they were most of a replay's CPU time). Reads that may touch many
    /// pages (lists, histories, sweeps) use `read`.
    fn read_here<T>(
        &self,
        f: impl FnOnce(&ReadTransaction) -> Result<T, Fault>,
    ) -> Result<T, LedgerError> {
        let db = self.inner.shared.db()?;
        let txn = db.begin_read().map_err(Fault::from)?;
        f(&txn).map_err(LedgerError::from)
    }

    /// Runs `f` on a read snapshot, off the async workers.
    async fn read<T, F>(&self, f: F) -> Result<T, LedgerError>
    where
        F: FnOnce(&ReadTransaction) -> Result<T, Fault> + Send + 'static,
        T: Send + 'static,
    {
        let db = self.inner.shared.db()?;
        let joined = tokio::task::spawn_blocking(move || {
            let txn = db.begin_read()?;
            f(&txn)
        })
        .await;
        match joined {
            Ok(result) => result.map_err(LedgerError::from),
            Err(e) => Err(LedgerError::Unavailable(format!(
                "a ledger read failed: {e}"
            ))),
        }
    }
}

fn open_error(path: &Path, reason: impl fmt::Display) -> LedgerError {
    LedgerError::Open {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// Whether `IDEMPROXY_FAIL` (a comma-separated list of fault points) names `ledger.commit`.
fn fault_injected() -> bool {
    std::env::var("IDEMPROXY_FAIL")
        .is_ok_and(|points| points.split(',').any(|p| p.trim() == "ledger.commit"))
}

type Opened = (Database, u64, Vec<Operation>);

fn open_blocking(
    path: &Path,
    now: Timestamp,
    secret_check: Option<String>,
) -> Result<Opened, LedgerError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| open_error(path, e))?;
    }
    let db = create_database(path).map_err(|e| open_error(path, e))?;
    let (epoch, orphaned) = match recover(&db, now, secret_check.as_deref()) {
        Ok(Some(recovered)) => recovered,
        Ok(None) => {
            return Err(LedgerError::OtherSecret {
                path: path.display().to_string(),
            });
        }
        Err(fault) => return Err(open_error(path, fault)),
    };
    Ok((db, epoch, orphaned))
}

/// redb's page cache, bounded: it would otherwise grow to 1 GiB with a large ledger, and the
/// hot data of a guarded request (one operation, its index entries) is small.
const CACHE_BYTES: usize = 32 << 20;

/// Opens (or creates) the database file with the ledger's settings; start-up and the reopen
/// after a storage error use the same.
pub(crate) fn create_database(path: &Path) -> Result<Database, redb::DatabaseError> {
    Database::builder().set_cache_size(CACHE_BYTES).create(path)
}

/// The start-up write: check (or keep) the secret's check value, bump the boot epoch and
/// orphan what a dead process left in flight. `None`, with nothing written, when the ledger
/// keeps another check value.
fn recover(
    db: &Database,
    now: Timestamp,
    secret_check: Option<&str>,
) -> Result<Option<(u64, Vec<Operation>)>, Fault> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    if let Some(check) = secret_check
        && !store::keep_secret_check(&txn, check)?
    {
        txn.abort()?;
        return Ok(None);
    }
    let epoch = store::bump_epoch(&txn)?;
    let orphaned = Tables::open(&txn)?.orphan_in_flight(now)?;
    txn.commit()?;
    Ok(Some((epoch, orphaned)))
}
