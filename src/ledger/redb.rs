//! The redb backend of the ledger: one database file, one writer thread fed by a channel
//! (group commit, see `writer` and `batch`) that answers each batch once redb's own durable
//! commit of it has returned, point reads on the calling thread.
//!
//! It owns opening the file (with a bounded page cache), the start-up recovery write (the
//! secret's check value, the boot epoch behind fences, the orphaning of what a dead process
//! left in flight) and the routing of each `Ledger` call to the writer or a read snapshot.
//! Its tables and their codec are `store`, `codec`, `tombstone` and `replays`; reopening
//! after a storage error is `recovery`. It never decides what a request means, and no redb
//! type leaves `ledger`.

pub(in crate::ledger) mod batch;
pub(in crate::ledger) mod copy;
pub(in crate::ledger) mod counts;

pub(in crate::ledger) mod meta;
pub(in crate::ledger) mod query;
pub(in crate::ledger) mod read;
pub(in crate::ledger) mod recovery;
pub(in crate::ledger) mod store;
pub(in crate::ledger) mod tombstone;
pub(in crate::ledger) mod writer;

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use redb::{Database, Durability, ReadTransaction, ReadableDatabase};

use self::batch::Job;
use self::recovery::{DeadClaim, Shared};
use self::store::{PruneBatch, Tables};
use self::writer::{NoteJob, PruneJob, Reply, SweepJob, TombJob, UpdateJob, Writer};
use super::Replayable;
use super::backend::Backend;
use super::change::Left;
use super::fault::Fault;
use super::feed::{Feed, Published};
use super::{Fences, Filter, LedgerError, LedgerOptions, Page, Stats, codec};
use super::{ReplayNote, Replays};
use crate::clock::Timestamp;
use crate::operation::{Event, Operation, State, StoredResponse, Write};

/// The redb ledger: a cheap `Clone` handle. The database file stays open (and locked against
/// other processes) until the last clone is dropped; that drop waits for the writer thread
/// to finish the writes already queued.
#[derive(Clone)]
pub struct Redb {
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

impl Redb {
    /// `Ledger::open` on this file.
    pub async fn open(
        path: &Path,
        now: Timestamp,
        opts: LedgerOptions,
    ) -> Result<(Redb, Vec<Operation>), LedgerError> {
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
            fences: Fences::from_epoch(epoch),
            fail_writes: opts.fail_writes || super::fault_point("ledger.commit"),
        };
        let ledger = Redb {
            inner: Arc::new(inner),
        };
        Ok((ledger, orphaned))
    }

    /// The database handle, for the unit tests that reach into the file.
    #[cfg(test)]
    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    async fn submit<T, J>(&self, job: impl FnOnce(Reply<T>) -> J) -> Result<T, LedgerError>
    where
        T: Send + 'static,
        J: Job + 'static,
    {
        let (reply, answer) = Reply::new();
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

impl Backend for Redb {
    /// `Ledger::subscribe` on this file.
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Published> {
        self.inner.feed.subscribe()
    }

    /// `Ledger::fence` on this file.
    fn fence(&self) -> u64 {
        self.inner.fences.next()
    }

    /// `Ledger::fences` on this file.
    fn fences(&self) -> Fences {
        self.inner.fences.clone()
    }

    /// `Ledger::update` on this file.
    async fn update<T, F>(&self, id: &str, f: F) -> Result<T, LedgerError>
    where
        F: FnOnce(Option<Operation>) -> (Option<Write>, T) + Send + 'static,
        T: Send + 'static,
    {
        let fail_writes = self.inner.fail_writes;
        self.submit(|reply| UpdateJob::new(id, f, fail_writes, reply))
            .await
    }

    /// `Ledger::writable` on this file.
    fn writable(&self) -> bool {
        self.inner.shared.writable()
    }

    /// `Ledger::abandon` on this file.
    fn abandon(&self, id: &str, fence: u64) {
        let shared = &self.inner.shared;
        shared.bury(DeadClaim {
            id: id.to_owned(),
            fence,
            left: Left::Maybe,
        });
        let sweep = SweepJob::new(Arc::clone(shared), self.inner.fail_writes);
        self.inner.writer.submit(Box::new(sweep));
    }

    /// `Ledger::get` on this file.
    async fn get(&self, id: &str) -> Result<Option<Operation>, LedgerError> {
        let id = id.to_owned();
        self.read(move |txn| query::get(txn, &id)).await
    }

    /// `Ledger::replayable` on this file. The operation comes without its per-field hashes
    /// (`fields` is empty): a replay's decision never reads them. A snapshot sees only
    /// committed batches, and a state change commits durably before anyone reads it.
    ///
    /// A final answer read once is kept in memory (`hot`) and answered from there until the
    /// writer changes its operation.
    async fn replayable(&self, id: &str) -> Result<Option<Arc<Replayable>>, LedgerError> {
        let shared = &self.inner.shared;
        // Taken before the snapshot begins (see `hot`).
        let epoch = shared.hot.epoch();
        if let Some(kept) = shared.hot.get(id) {
            return Ok(Some(kept));
        }
        self.read_here(|txn| {
            let read = query::replayable(txn, id)?;
            Ok(read.map(|kept| shared.hot.fill(id, epoch, kept)))
        })
    }

    /// `Ledger::events` on this file.
    async fn events(&self, id: &str) -> Result<Vec<Event>, LedgerError> {
        let id = id.to_owned();
        self.read(move |txn| query::events(txn, &id)).await
    }

    /// `Ledger::kept_request` on this file.
    async fn kept_request(&self, id: &str) -> Result<Option<Vec<u8>>, LedgerError> {
        let id = id.to_owned();
        self.read(move |txn| query::kept_request(txn, &id)).await
    }

    /// `Ledger::response` on this file.
    async fn response(&self, id: &str) -> Result<Option<StoredResponse>, LedgerError> {
        let id = id.to_owned();
        self.read(move |txn| query::response(txn, &id)).await
    }

    /// `Ledger::list` on this file.
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
        let filter = filter.clone();
        self.read(move |txn| query::list(txn, &filter, limit, after))
            .await
    }

    /// `Ledger::tombstone` on this file.
    async fn tombstone(&self, id: &str) -> Result<Option<Operation>, LedgerError> {
        let id = id.to_owned();
        self.read(move |txn| tombstone::get(txn, &id)).await
    }

    /// `Ledger::prune` on this file.
    async fn prune(
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

    /// `Ledger::prune_tombstones` on this file.
    async fn prune_tombstones(
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

    /// `Ledger::note_replays` on this file.
    async fn note_replays(&self, notes: Vec<ReplayNote>) -> Result<usize, LedgerError> {
        if notes.is_empty() {
            return Ok(0);
        }
        let fail_writes = self.inner.fail_writes;
        self.submit(|reply| NoteJob::new(notes, fail_writes, reply))
            .await
    }

    /// `Ledger::replays` on this file.
    async fn replays(&self, id: &str) -> Result<Option<Replays>, LedgerError> {
        let id = id.to_owned();
        self.read(move |txn| counts::get(txn, &id)).await
    }

    /// `Ledger::stats` on this file.
    async fn stats(&self) -> Result<Stats, LedgerError> {
        self.read(query::stats).await
    }
}

fn open_error(path: &Path, reason: impl fmt::Display) -> LedgerError {
    LedgerError::Open {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

type Opened = (Database, u64, Vec<Operation>);

/// Opens the file and makes the start-up write.
fn open_blocking(
    path: &Path,
    now: Timestamp,
    secret_check: Option<String>,
) -> Result<Opened, LedgerError> {
    if let Some(parent) = path.parent() {
        crate::durable::create_dir_all(parent).map_err(|e| open_error(path, e))?;
    }
    refuse_old_log(path)?;
    let db = create_database(path).map_err(|e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => LedgerError::InUse {
            path: path.display().to_string(),
        },
        e => open_error(path, e),
    })?;
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

/// The write-ahead log an earlier idemproxy kept beside its ledger (`<ledger>.wal`): its frames
/// may hold answered writes the file lacks, which this build cannot replay. Such a ledger is
/// refused, never opened without them (docs/decisions.md: "An earlier build's write-ahead
/// log"); the earlier build's graceful stop moves everything into the file.
pub(super) fn old_log(path: &Path) -> Option<std::path::PathBuf> {
    let mut name = path.as_os_str().to_owned();
    name.push(".wal");
    let log = std::path::PathBuf::from(name);
    log.exists().then_some(log)
}

fn refuse_old_log(path: &Path) -> Result<(), LedgerError> {
    match old_log(path) {
        Some(log) => Err(open_error(path, old_log_reason(&log))),
        None => Ok(()),
    }
}

/// Why a ledger with an earlier build's write-ahead log beside it is refused.
pub(super) fn old_log_reason(log: &Path) -> String {
    format!(
        "{} is the write-ahead log of an earlier idemproxy, which may hold answers the file \
         lacks: start that earlier version on this ledger once and stop it with SIGTERM (its \
         graceful stop writes everything into the file), then delete {}",
        log.display(),
        log.display()
    )
}

/// `Ledger::check` on a file: opened read-only (never created, repaired or locked against a
/// proxy), only to read the unfinished-copy mark.
pub(super) fn check(path: &Path) -> Result<super::Checked, LedgerError> {
    use super::Checked;
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Checked::Empty),
        Err(e) => return Err(open_error(path, e)),
        // An empty file is what the first start makes a ledger of.
        Ok(meta) if meta.len() == 0 => return Ok(Checked::Empty),
        Ok(_) => {}
    }
    let db = match Database::builder()
        .set_cache_size(CACHE_BYTES)
        .open_read_only(path)
    {
        Ok(db) => db,
        Err(redb::DatabaseError::DatabaseAlreadyOpen | redb::DatabaseError::RepairAborted) => {
            return Ok(Checked::NotRead);
        }
        Err(e) => return Err(open_error(path, e)),
    };
    let txn = db.begin_read().map_err(|e| open_error(path, e))?;
    match meta::copy_unfinished_in(&txn) {
        Ok(true) => Ok(Checked::Unfinished),
        Ok(false) => Ok(Checked::Ready { schema: 0 }),
        Err(fault) => Err(open_error(path, fault)),
    }
}

/// redb's page cache (read cache and write buffer together), bounded: it would otherwise grow
/// to 1 GiB with a large ledger, and the hot data of a guarded request (one operation, its
/// index entries, the right edges of the trees that new operations extend) is small. Under a
/// stream of writes it fills, and each cached 4 KiB page costs about 5 KiB of heap, so this is
/// most of what fresh operations add to the resident set: 12 MiB instead of 32 took about
/// 22 MiB off the peak RSS of fresh operations at 64 connections on a 1,000,000-operation
/// ledger, with fresh and replay throughput level, and 10 instead of 12 another 2.5 MiB at
/// 256 connections, where the peak had come within 0.1 MiB of the 64 MiB target
/// (`bench/ab.sh`, docs/performance.md).
const CACHE_BYTES: usize = 10 << 20;

/// Opens (or creates) the database file with the ledger's settings; start-up, the reopen
/// after a storage error and `ledger copy` use the same. A file it creates has its name made
/// durable (its folder synced) once redb has made it a database.
pub(crate) fn create_database(path: &Path) -> Result<Database, redb::DatabaseError> {
    let created = private_file(path).map_err(redb::StorageError::from)?;
    let db = Database::builder()
        .set_cache_size(CACHE_BYTES)
        .create(path)?;
    if created {
        crate::durable::sync_parent(path).map_err(redb::StorageError::from)?;
    }
    Ok(db)
}

/// Creates `path` empty and readable by its owner only (0600), unless it exists: the ledger
/// holds stored answers and kept requests, for this process's user alone. An
/// existing file keeps the mode it has. (redb initializes an empty file as a new database.)
/// Whether it created the file.
fn private_file(path: &Path) -> std::io::Result<bool> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// The start-up write: check (or keep) the secret's check value, bump the boot epoch and
/// orphan what a dead process left in flight, in one durable commit. `None`, with nothing
/// written, when the ledger keeps another check value.
fn recover(
    db: &Database,
    now: Timestamp,
    secret_check: Option<&str>,
) -> Result<Option<(u64, Vec<Operation>)>, Fault> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    if meta::copy_unfinished(&txn)? {
        txn.abort()?;
        return Err(Fault::new(super::copy::page::UNFINISHED.to_owned()));
    }
    if let Some(check) = secret_check
        && !meta::keep_secret_check(&txn, check)?
    {
        txn.abort()?;
        return Ok(None);
    }
    let epoch = meta::bump_epoch(&txn)?;
    let mut tables = Tables::open(&txn)?;
    let orphaned = tables.orphan_in_flight(now)?;
    tables.close()?;
    txn.commit()?;
    Ok(Some((epoch, orphaned)))
}
