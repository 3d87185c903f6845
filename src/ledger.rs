//! The durable ledger: operations, their events and their stored responses. It keeps the
//! values of the operation model (`crate::operation`) and never decides what they mean.
//!
//! This module is storage only. Its public surface is one type, `Ledger`, with a small
//! domain API (`open`, `update`, `get`, `replayable`, `events`, `response`, `list`, `prune`,
//! `stats`, `subscribe` to the events as they commit, the fences of claims, `abandon` for the
//! orphan sweep, the tombstones' `tombstone` and `prune_tombstones`, the replay counts'
//! `note_replays` and `replays`) that every backend implements with the same semantics; no
//! backend type ever leaves it, and no module above it names a backend. Two backends, each
//! in its own folder and neither importing the other: redb (`redb` and `redb/`: its tables
//! in `redb::store`, `redb::meta`, `redb::tombstone` and `redb::counts`, its queries in
//! `redb::query`, its single writer in `redb::writer` and `redb::batch` (group commit, one
//! durable redb commit per batch), its reopen after a storage error in `redb::recovery`), the
//! default, for one process; and PostgreSQL (`postgres` and `postgres/`), shared by several
//! replicas, each holding a lease. What both share lives above them: the storage rules
//! (`change`), the record bytes (`codec`), `fault`, `fence`, `feed` (the in-process broadcast of
//! committed events), `hot` (the replay answers kept in memory until their operation changes)
//! and `copy::page`; `copy` copies one ledger into another.
//!
//! `Ledger` dispatches to its backend through a private enum, not a trait object: every call
//! is a `match` the compiler inlines, so the hot path (`replayable`, a synchronous point read
//! on the calling thread) stays a plain call with no boxing, no vtable and no future, and
//! `update` keeps its generic closure (a trait with async, generic methods could not be a
//! `dyn` object without boxing both). A second backend is a second variant.
//!
//! Every state change is durable before anyone is told of it (redb: its batch's durable
//! commit returned; PostgreSQL: its transaction committed); writes queued together may
//! share one commit (group commit). A write that only appends history (the operation and its
//! response unchanged, e.g. a conflict noted, or a batch of replay counts) may commit without
//! waiting for the disk and becomes durable with the next durable one (in SQL terms: an
//! asynchronous commit); a crash may lose such an event, never a state. Callers pass a closure that sees the current
//! operation and says what to write. The ledger stores only what a `Write` carries, so never a
//! request header or body (docs/reference.md section 10). One storage error does not stop it:
//! it recovers by itself once the storage allows.

/// Runs each named `async fn(Kind)` of the current test module as two tests, `NAME::redb`
/// and `NAME::postgres` (see `tests::fresh`).
#[cfg(test)]
macro_rules! on_both_backends {
    ($($test:ident),* $(,)?) => {$(
        mod $test {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redb() {
                super::$test($crate::ledger::tests::Kind::Redb).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$test($crate::ledger::tests::Kind::Postgres).await
            }
        }
    )*};
}

mod backend;
mod change;
mod codec;
pub mod copy;
mod fault;
mod feed;
mod fence;
mod hot;
mod postgres;
mod redb;
#[doc(hidden)]
pub mod stored;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use self::backend::Backend;
use self::postgres::Postgres;
use self::redb::Redb;
use crate::clock::Timestamp;
pub use crate::config::{LedgerAt, PgUrl, SslMode};
use crate::operation::{Event, Operation, State, StoredResponse, Write};
pub use feed::Published;
pub use fence::Fences;

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

#[derive(Debug, Clone, thiserror::Error)]
pub enum LedgerError {
    #[error("the ledger at {path} cannot be opened: {reason}")]
    Open { path: String, reason: String },
    /// Another process (or handle) holds the ledger file open.
    #[error("another idemproxy is using this ledger ({path})")]
    InUse { path: String },
    #[error("the ledger cannot record: {0}")]
    Unavailable(String),
    #[error("invalid cursor")]
    BadCursor,
    /// `LedgerOptions::secret_check` differs from the check value the ledger keeps.
    #[error("the ledger at {path} was first used with another installation secret")]
    OtherSecret { path: String },
    /// The database holds a ledger schema newer than this binary knows.
    #[error(
        "the ledger at {path} has schema version {found}, newer than the {known} this idemproxy \
         knows (upgrade idemproxy on this replica)"
    )]
    NewerSchema {
        path: String,
        found: i64,
        known: i64,
    },
}

// The types every backend shares, above both.

/// What the writer reports of each commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// How long the commit itself took.
    pub took: Duration,
    /// How many jobs (updates, prune batches, sweeps) it ended: their writes became durable
    /// together, and the reads among them saw what the jobs before them staged.
    pub jobs: usize,
    /// Whether it was a durable commit (`false`: history only, no fsync; a durable one is
    /// made durable by its synced log frame).
    pub durable: bool,
}

/// Called after each commit.
pub(crate) type OnCommit = Arc<dyn Fn(Commit) + Send + Sync>;

/// Replays of one operation counted in memory, not yet written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayNote {
    pub id: String,
    pub count: u64,
    pub first: Timestamp,
    pub last: Timestamp,
}

/// What the ledger keeps of an operation's replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replays {
    pub count: u64,
    pub first_at: Timestamp,
    pub last_at: Timestamp,
}

/// What a replay reads: the operation (without its per-field hashes) and, for a `succeeded`
/// one, its stored response.
pub type Replayable = (Operation, Option<StoredResponse>);

/// How to open the ledger.
#[derive(Clone)]
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
    /// A shared ledger's lease (`[replicas] lease`): a replica that has not renewed it for
    /// this long is presumed dead. A file ledger ignores it.
    pub lease: Duration,
    /// This replica's name in a shared ledger (for operators reading its `replicas` table).
    pub replica: String,
    /// Called with each operation a shared ledger made `unknown` while running because its
    /// owner's lease lapsed (by the sweep, or on a request's arrival), once its commit stands.
    /// Those orphaned by `open` are returned by it instead. A file ledger never calls it.
    pub on_orphaned: Option<OnOrphaned>,
    /// How long after its claim an attempt may still reach its provider (the longest provider
    /// `timeout`, plus a second for the gap between `Ledger::may_send` and the first byte):
    /// a shared ledger that orphans a lapsed replica's claim marks it "may have taken effect"
    /// until its dispatch plus this, so a lookup's `not_found_final_after` counts from the
    /// last moment the old owner could still have sent it. A file ledger ignores it.
    pub attempt_reach: Duration,
}

/// See `LedgerOptions::on_orphaned`.
pub type OnOrphaned = Arc<dyn Fn(&Operation) + Send + Sync>;

impl Default for LedgerOptions {
    fn default() -> Self {
        LedgerOptions {
            on_commit: None,
            fail_writes: false,
            secret_check: None,
            lease: Duration::from_secs(10),
            replica: String::new(),
            on_orphaned: None,
            attempt_reach: Duration::from_secs(31),
        }
    }
}

impl fmt::Debug for LedgerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LedgerOptions")
            .field("on_commit", &self.on_commit.as_ref().map(|_| "Fn(Commit)"))
            .field("fail_writes", &self.fail_writes)
            .field("secret_check", &self.secret_check.is_some())
            .field("lease", &self.lease)
            .field("replica", &self.replica)
            .field("attempt_reach", &self.attempt_reach)
            .field(
                "on_orphaned",
                &self.on_orphaned.as_ref().map(|_| "Fn(&Operation)"),
            )
            .finish()
    }
}

/// What must still hold for a claimed attempt to be sent (`Ledger::permit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permit {
    /// Taken before the claim's transaction, so no later than the claim's `last_dispatched_at`:
    /// the attempt's deadline counts from here.
    pub since: std::time::Instant,
    /// The lease's epoch then: it moves on every lapse the replica learns of.
    lease: u64,
}

impl Permit {
    /// A permit taken now under no lease, for unit tests of the pure code that carries one.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Permit {
        Permit {
            since: std::time::Instant::now(),
            lease: 0,
        }
    }
}

/// `$body` with `$b` bound to the ledger's backend, whichever it is (`Backend`'s methods).
macro_rules! each {
    ($ledger:expr, $b:ident => $body:expr) => {
        match &$ledger.0 {
            Store::Redb($b) => $body,
            Store::Postgres($b) => $body,
        }
    };
}

/// A cheap `Clone` handle to the ledger, whichever backend holds it. The storage stays open
/// (a redb file stays locked against other processes) until the last clone is dropped; that
/// drop waits for the writes already queued.
#[derive(Clone)]
pub struct Ledger(Store);

/// The backend behind a `Ledger`; private, so nothing outside `ledger` can name one.
#[derive(Clone)]
enum Store {
    Redb(Redb),
    Postgres(Postgres),
}

/// What `Ledger::check` found at a ledger's location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// A ledger with this schema version, kept with the same secret (or none yet). A file
    /// answers `schema: 0` (its layout has no version number) and its secret is not compared.
    Ready { schema: i64 },
    /// Reachable, but no ledger yet: the first start creates it.
    Empty,
    /// A ledger an `idemproxy ledger copy` began filling and never finished: it holds only
    /// part of its source, and `serve` refuses to open it ([`Checked::UNFINISHED`] says why).
    Unfinished,
    /// A ledger file that cannot be looked at without changing it: a running process holds
    /// it, or a killed one left it for the next start to repair.
    NotRead,
}

impl Checked {
    /// Why an unfinished copy is refused, and what to do.
    pub const UNFINISHED: &str = copy::page::UNFINISHED;
}

impl Ledger {
    /// Opens the ledger at `at`, creating it on first use.
    ///
    /// A file (created with its parent directories): every `in_flight` operation left by an
    /// earlier process becomes `unknown` (fence 0, `updated_at = now`) with an
    /// `operation.orphaned` event, and the boot epoch behind `fence` is bumped, in one durable
    /// commit. A path that cannot be created, a file another process holds, or a corrupt file
    /// is `LedgerError::Open`.
    ///
    /// A PostgreSQL database: the schema is created (or checked: a newer one is
    /// `NewerSchema`), this replica registers and takes its lease (its database-issued ID is
    /// the epoch behind `fence`), and only the `in_flight` operations of replicas whose lease
    /// lapsed become `unknown`; a live replica's are left alone. A database that cannot be
    /// reached is `Open`. Background tasks renew the lease and sweep lapsed replicas'
    /// operations until the last clone of the `Ledger` is dropped.
    ///
    /// Either way, returns the orphaned operations as they now are; a ledger first used with
    /// another `secret_check` is `OtherSecret`, with nothing written.
    pub async fn open(
        at: impl Into<LedgerAt>,
        now: Timestamp,
        opts: LedgerOptions,
    ) -> Result<(Ledger, Vec<Operation>), LedgerError> {
        match at.into() {
            LedgerAt::File(path) => {
                let (redb, orphaned) = Redb::open(&path, now, opts).await?;
                Ok((Ledger(Store::Redb(redb)), orphaned))
            }
            LedgerAt::Postgres(url) => {
                let (pg, orphaned) = Postgres::open(&url, now, opts).await?;
                Ok((Ledger(Store::Postgres(pg)), orphaned))
            }
        }
    }

    /// Looks at a ledger without changing it (for `idemproxy check`). A PostgreSQL ledger:
    /// whether it can be reached, its schema is one this binary knows, it was first used with
    /// `secret_check`, and no copy into it was left unfinished. A file: whether a copy into
    /// it was left unfinished, read from a read-only open (`NotRead` while a process holds
    /// it, `Empty` when there is no file yet; its secret is not looked at).
    pub async fn check(at: &LedgerAt, secret_check: &str) -> Result<Checked, LedgerError> {
        match at {
            LedgerAt::File(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || redb::check(&path))
                    .await
                    .unwrap_or_else(|e| {
                        Err(LedgerError::Unavailable(format!("the check failed: {e}")))
                    })
            }
            LedgerAt::Postgres(url) => postgres::check(url, secret_check).await,
        }
    }

    /// Whether several processes share this ledger, so an operation may change without this
    /// process writing it (a duplicate waiting on it must poll).
    #[inline]
    pub fn shared(&self) -> bool {
        match &self.0 {
            Store::Redb(_) => false,
            Store::Postgres(_) => true,
        }
    }

    /// Follows the events committed from now on, each with its operation as that commit
    /// left it, in commit order (see `feed`). A subscriber that falls more than a few
    /// thousand events behind loses the oldest and is told how many (`Lagged`); it never
    /// slows the writes. The start-up orphaning happens before anyone can subscribe.
    #[inline]
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Published> {
        each!(self, b => b.subscribe())
    }

    /// A fresh fencing token (see `Fences::next`).
    #[inline]
    pub fn fence(&self) -> u64 {
        each!(self, b => b.fence())
    }

    /// The token source, for an `update` closure that takes a token only if it claims.
    #[inline]
    pub fn fences(&self) -> Fences {
        each!(self, b => b.fences())
    }

    /// Reads the operation `id` (for a pruned one, the operation rebuilt from its tombstone,
    /// `pruned_at` set), calls `f` with it and applies the `Write` it returns, in one
    /// write transaction made durable before this returns `f`'s
    /// value; a `Write` that leaves the operation and its response unchanged (history only)
    /// may commit without an fsync (see the module doc). `f` may run on another thread while
    /// the transaction is open (redb: the single writer thread; PostgreSQL: a spawned task
    /// holding the row lock of `id`): keep it cheap. Updates of one `id` are serialized, across
    /// replicas too: no other write of it happens between the read and the commit.
    /// PostgreSQL also orphans, first and in the same transaction, an `in_flight` operation
    /// whose owner's lease lapsed (so `f` sees it `unknown`), and refuses a new claim
    /// (`Unavailable`, nothing written) while this replica's own lease is not live.
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
        each!(self, b => b.update(id, f).await)
    }

    /// `update` for a decision that needs the history of `id` too: `f` sees the operation as
    /// `update` does and the events of `id`. The history is read first, then `f` runs in the
    /// update's transaction only if the operation is still exactly as it was when the history
    /// was read (else both are read again, a few times at most, then `Unavailable`). Every
    /// write that changes an operation's state changes its record, so `f` never decides on a
    /// history older than the state it sees; only events that add history without a change
    /// (`EventKind::settles` is false for them) may have been appended since. The same on
    /// every backend, through `get`, `events` and `update`. A pruned `id` reaches `f` as its
    /// tombstone with no events.
    pub async fn update_seeing_history<T, F>(&self, id: &str, f: F) -> Result<T, LedgerError>
    where
        F: Fn(Option<Operation>, &[Event]) -> (Option<Write>, T) + Clone + Send + 'static,
        T: Send + 'static,
    {
        const TRIES: usize = 4;
        for _ in 0..TRIES {
            let seen = self.get(id).await?;
            let events = self.events(id).await?;
            let f = f.clone();
            let decided = self
                .update(id, move |existing| {
                    let live = existing.as_ref().filter(|op| op.pruned_at.is_none());
                    if live != seen.as_ref() {
                        return (None, None);
                    }
                    let (write, value) = f(existing, &events);
                    (write, Some(value))
                })
                .await?;
            if let Some(value) = decided {
                return Ok(value);
            }
        }
        Err(LedgerError::Unavailable(format!(
            "operation {id} changed {TRIES} times while its history was read; try again"
        )))
    }

    /// Whether the ledger can write. redb: false from a storage error after which the
    /// database refused new transactions (every write then fails fast with `Unavailable`)
    /// until the ledger has reopened its file and committed the sweep of `abandon`ed claims.
    /// PostgreSQL: false while the database cannot be reached (from a failed connection or
    /// renewal until the next renewal succeeds) or once this replica's lease has lapsed by
    /// the local clock (new claims are refused then anyway, by the database's).
    #[inline]
    pub fn writable(&self) -> bool {
        each!(self, b => b.writable())
    }

    /// Taken before a claim, and checked by `may_send` right before the claimed attempt's
    /// first byte is written.
    pub fn permit(&self) -> Permit {
        let lease = each!(self, b => b.lease_epoch());
        Permit {
            since: std::time::Instant::now(),
            lease,
        }
    }

    /// Whether an attempt claimed under `permit` may still send its first byte: always for a
    /// file ledger (no other process can act on its operations while this one lives). A
    /// PostgreSQL replica: only while its lease has been live without a gap since the permit
    /// was taken, and stays live for a margin (a tenth of the lease) by its own monotonic clock, so
    /// no other replica can have orphaned the claim. `Err` says why not.
    pub fn may_send(&self, permit: &Permit) -> Result<(), &'static str> {
        each!(self, b => b.may_send(permit.lease))
    }

    /// Why `writable` is false, for `/healthz`: what an operator should look at.
    pub fn unwritable_reason(&self) -> &'static str {
        match &self.0 {
            Store::Redb(_) => {
                "it cannot write since a storage error (is its disk full?); new operations are \
                 refused until it reopens itself"
            }
            Store::Postgres(_) => {
                "the database cannot be reached or this replica's lease lapsed; new operations \
                 are refused until the lease is renewed"
            }
        }
    }

    /// Says that the holder of claim `fence` on `id` could not record its result and will
    /// not try again: the operation becomes `unknown` (an `operation.orphaned` event saying
    /// the result could not be recorded) if it is still `in_flight` under `fence`, at once
    /// if the ledger can write, else by the sweep that ends its recovery (PostgreSQL: a
    /// background task retrying every second until the database answers). Returns at once.
    pub fn abandon(&self, id: &str, fence: u64) {
        each!(self, b => b.abandon(id, fence))
    }

    /// Ends this process's hold on the ledger, at a graceful stop once its requests are done
    /// (or the grace ran out). A PostgreSQL replica's lease lapses now instead of a lease
    /// later: what it left in flight is the others' to orphan (at their next sweep, or when a
    /// request for it arrives), and `ledger copy` may run. A file ledger has nothing to end
    /// (its lock goes with the process). Reads still work afterwards; a PostgreSQL replica's
    /// new claims are refused.
    pub async fn release(&self) {
        each!(self, b => b.release().await)
    }

    /// The live operation stored under `id`, if any (never a tombstone: see `tombstone`).
    pub async fn get(&self, id: &str) -> Result<Option<Operation>, LedgerError> {
        each!(self, b => b.get(id).await)
    }

    /// The live operation `id` and, when it is `succeeded`, its stored response, read on one
    /// snapshot (what a replay needs, without the writer).
    ///
    /// This is the one read of every replay: redb answers it on the calling thread with no
    /// hop to another thread and nothing awaited; PostgreSQL with one query.
    #[inline]
    pub async fn replayable(&self, id: &str) -> Result<Option<Arc<Replayable>>, LedgerError> {
        match &self.0 {
            Store::Redb(redb) => redb.replayable(id).await,
            // Boxed: the database's query future is large, and inline it would make every
            // replay's future that large on redb too, where nothing is awaited.
            Store::Postgres(pg) => Box::pin(pg.replayable(id)).await,
        }
    }

    /// The history of `id`, in the order it was written (empty for an unknown ID).
    pub async fn events(&self, id: &str) -> Result<Vec<Event>, LedgerError> {
        each!(self, b => b.events(id).await)
    }

    /// The sealed first request kept for `id` (see `RequestChange`), if any.
    pub async fn kept_request(&self, id: &str) -> Result<Option<Vec<u8>>, LedgerError> {
        each!(self, b => b.kept_request(id).await)
    }

    /// The response stored for `id`, exactly as it will be replayed.
    pub async fn response(&self, id: &str) -> Result<Option<StoredResponse>, LedgerError> {
        each!(self, b => b.response(id).await)
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
        each!(self, b => b.list(filter, limit, after).await)
    }

    /// The operation rebuilt from the tombstone of `id` (`pruned_at` set), if `id` was pruned
    /// and its tombstone has not been swept yet. Holds no response and no per-field hashes.
    pub async fn tombstone(&self, id: &str) -> Result<Option<Operation>, LedgerError> {
        each!(self, b => b.tombstone(id).await)
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
        each!(self, b => b.prune(older_than, now, max).await)
    }

    /// Deletes the tombstones made (`pruned_at`) before `older_than`, oldest first, in
    /// transactions of at most `max.max(1)` deletions; their IDs are free again. Returns how
    /// many were deleted.
    pub async fn prune_tombstones(
        &self,
        older_than: Timestamp,
        max: usize,
    ) -> Result<usize, LedgerError> {
        each!(self, b => b.prune_tombstones(older_than, max).await)
    }

    /// Merges replay counts kept in memory into the ledger in one history-only write (no
    /// fsync of its own; see `replays`): per operation, the count grows by `count` and the
    /// times widen to `first` and `last`; an operation's first replays also append its one
    /// `operation.replayed` event. Notes for an operation that is gone are dropped. Returns
    /// how many operations were noted. On `Unavailable` nothing was written.
    pub async fn note_replays(&self, notes: Vec<ReplayNote>) -> Result<usize, LedgerError> {
        each!(self, b => b.note_replays(notes).await)
    }

    /// What the ledger keeps of the replays of `id` (`None`: none written yet).
    pub async fn replays(&self, id: &str) -> Result<Option<Replays>, LedgerError> {
        each!(self, b => b.replays(id).await)
    }

    /// Operation counts per state (every state present) and the `created_at` of the oldest
    /// `unknown` and `in_flight` operations, from counters and indexes (no scan).
    pub async fn stats(&self) -> Result<Stats, LedgerError> {
        each!(self, b => b.stats().await)
    }

    /// The PostgreSQL backend, for the unit tests that reach into its lease.
    #[cfg(test)]
    fn postgres(&self) -> &Postgres {
        match &self.0 {
            Store::Postgres(pg) => pg,
            Store::Redb(_) => panic!("not a PostgreSQL ledger"),
        }
    }

    /// The redb backend, for the unit tests that reach into its file.
    #[cfg(test)]
    fn redb(&self) -> &Redb {
        match &self.0 {
            Store::Redb(redb) => redb,
            Store::Postgres(_) => panic!("not a redb ledger"),
        }
    }
}

/// Whether `IDEMPROXY_FAIL` (a comma-separated list of fault points, a test hook) names
/// `point`: `ledger.commit` (every write fails, both backends).
fn fault_point(point: &str) -> bool {
    std::env::var("IDEMPROXY_FAIL").is_ok_and(|points| points.split(',').any(|p| p.trim() == point))
}
