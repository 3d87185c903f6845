//! Recovery from a storage error: the replaceable database handle, whether the ledger can
//! write, the claims whose result could not be recorded, and the reopen that brings the ledger
//! back once the disk allows.
//!
//! redb refuses every transaction after one I/O error ("Previous I/O error") until the
//! database is closed and reopened. So after a write fails and the database refuses a new
//! write transaction, the writer marks the ledger unwritable (writes then fail fast with
//! `Unavailable`: nothing is claimed, so nothing is sent), reopens the file at once (redb
//! repairs it on open) so reads go on from a sound handle, and then, with backoff, waits until
//! `HEADROOM` bytes can be written and synced beside the ledger, reopens again if needed and
//! commits the recovery sweep. Only when that commit stands is the ledger writable again.
//! Every reopen replays the write-ahead log (`wal`) onto the file before anyone reads it: a
//! reopened file holds only its last durable commit, the log the batches answered since.
//! This module never decides what a request means; it only settles dead claims
//! (`change::abandoned`: `unknown`, or `failed` when nothing of the operation was sent).

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redb::{Database, Durability};

use super::LedgerError;
use super::change::Left;
use super::fault::Fault;
use super::hot::Hot;
use super::redo::Redo;
use super::store::Tables;
use super::wal::Wal;
use crate::clock::Timestamp;
use crate::operation::Operation;

/// What must be writable (and syncable) beside the ledger before it is trusted again.
const HEADROOM: usize = 1 << 20;
/// The first wait before a recovery attempt, doubled after each failed one up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Whether the ledger can write (`Shared::state`). One atomic value, so that the syncer stops
/// writes and tells the writer why in one step: a writer that finds the ledger unwritable
/// finds a failed sync with it, and the syncer can never stop writes again after the writer
/// has taken its failure and recovered.
const WRITABLE: u8 = 0;
/// Stopped by a storage error; the writer's recovery makes it writable again.
const STOPPED: u8 = 1;
/// Stopped by a failed sync of the log that the writer has not yet taken: it must reopen the
/// ledger (which then holds what the log holds) before any recovery.
const SYNC_FAILED: u8 = 2;

/// A claim (operation ID and fence) that nobody will finish: its result write failed, or the
/// commit that made it failed and may still have landed (`left` tells which).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DeadClaim {
    pub(super) id: String,
    pub(super) fence: u64,
    pub(super) left: Left,
}

/// The state the writer thread and the readers share.
pub(super) struct Shared {
    path: PathBuf,
    /// `None` while a reopen has not yet succeeded.
    db: RwLock<Option<Arc<Database>>>,
    /// `WRITABLE`, `STOPPED` or `SYNC_FAILED`.
    state: AtomicU8,
    /// Set by the writer when it hands the syncer a reset after a failed sync, cleared by the
    /// syncer once every batch before that reset is answered (and its claims buried): no
    /// recovery sweeps before then, or it would miss their claims.
    resetting: AtomicBool,
    dead: Mutex<Vec<DeadClaim>>,
    /// The operations written by committed batches whose log frame is not yet synced, with
    /// the last such frame of each (see `syncer`).
    held: Mutex<HashMap<String, u64>>,
    /// The final answers replays read, kept until the writer changes their operations.
    pub(super) hot: Hot,
}

impl Shared {
    pub(super) fn new(path: &Path, db: Database) -> Shared {
        Shared {
            path: path.to_path_buf(),
            db: RwLock::new(Some(Arc::new(db))),
            state: AtomicU8::new(WRITABLE),
            resetting: AtomicBool::new(false),
            dead: Mutex::new(Vec::new()),
            held: Mutex::new(HashMap::new()),
            hot: Hot::new(),
        }
    }

    /// The current database handle, for one read or one write.
    pub(super) fn db(&self) -> Result<Arc<Database>, LedgerError> {
        let slot = self.db.read().unwrap_or_else(PoisonError::into_inner);
        slot.clone().ok_or_else(|| {
            LedgerError::Unavailable(format!(
                "the ledger at {} is being reopened after a storage error",
                self.path.display()
            ))
        })
    }

    pub(super) fn writable(&self) -> bool {
        self.state.load(Ordering::Acquire) == WRITABLE
    }

    /// Stops every write (and turns `/healthz` 503) after a storage error, logged once until
    /// the writer's recovery makes it writable again.
    pub(super) fn stop_writes(&self, why: &str) {
        if self
            .state
            .compare_exchange(WRITABLE, STOPPED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.stopped(why);
        }
    }

    /// The syncer's one step after a failed sync of the log: writes stop, and the writer is
    /// told to reopen the ledger before any recovery (`take_sync_failure`).
    pub(super) fn sync_failed(&self, why: &str) {
        if self.state.swap(SYNC_FAILED, Ordering::AcqRel) == WRITABLE {
            self.stopped(why);
        }
    }

    /// Whether a sync failed that the writer has not yet taken; true once per failure (the
    /// syncer syncs nothing more until the writer's reset, so it cannot fail again before).
    pub(super) fn take_sync_failure(&self) -> bool {
        self.state
            .compare_exchange(SYNC_FAILED, STOPPED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The writer is about to hand the syncer a reset (after a failed sync); until the syncer
    /// has answered every batch before it (`reset_done`), no recovery may sweep.
    pub(super) fn resetting(&self) {
        self.resetting.store(true, Ordering::Release);
    }

    pub(super) fn reset_done(&self) {
        self.resetting.store(false, Ordering::Release);
    }

    fn stopped(&self, why: &str) {
        tracing::warn!(
            ledger = %self.path.display(),
            error = %why,
            "the ledger cannot write (is its disk full?); new operations are refused with 503 \
             and /healthz answers 503 until it reopens itself"
        );
    }

    /// The error every write gets while the ledger is unwritable.
    pub(super) fn refusal(&self) -> LedgerError {
        LedgerError::Unavailable(format!(
            "the ledger at {} cannot write since a storage error (is its disk full?); it \
             reopens itself once the disk allows",
            self.path.display()
        ))
    }

    /// Remembers a claim nobody will finish, for the next sweep.
    pub(super) fn bury(&self, claim: DeadClaim) {
        let mut dead = self.dead.lock().unwrap_or_else(PoisonError::into_inner);
        if !dead.contains(&claim) {
            dead.push(claim);
        }
    }

    pub(super) fn dead_claims(&self) -> Vec<DeadClaim> {
        self.dead
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Holds `ids` from replays until the frame `lsn` is synced (or failed): called before
    /// the batch that wrote them commits.
    pub(super) fn hold(&self, ids: Vec<String>, lsn: u64) {
        if ids.is_empty() {
            return;
        }
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.extend(ids.into_iter().map(|id| (id, lsn)));
    }

    /// Releases what the batch of frame `lsn` held: its commit failed, so it holds nothing
    /// anyone can read.
    pub(super) fn unhold(&self, lsn: u64) {
        self.release(|at| at == lsn);
    }

    /// Releases everything held by frames up to `lsn`: they are synced (or, after a failed
    /// sync, the ledger was reopened from what the disk holds). An operation a later batch
    /// wrote again stays held by that batch's frame.
    pub(super) fn release_upto(&self, lsn: u64) {
        self.release(|at| at <= lsn);
    }

    /// Releases the operations held by the frames `released` names; their entries in `hot`
    /// are dropped before anyone can read them without the writer.
    fn release(&self, released: impl Fn(u64) -> bool) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.is_empty() {
            return;
        }
        let ids: Vec<String> = held
            .extract_if(|_, at| released(*at))
            .map(|(id, _)| id)
            .collect();
        if !ids.is_empty() {
            self.hot.forget(&ids);
        }
    }

    /// Whether a committed batch that is not yet durable wrote `id`.
    pub(super) fn held(&self, id: &str) -> bool {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        !held.is_empty() && held.contains_key(id)
    }

    /// Forgets the claims a committed sweep handled.
    pub(super) fn swept(&self, handled: &[DeadClaim]) {
        let mut dead = self.dead.lock().unwrap_or_else(PoisonError::into_inner);
        dead.retain(|claim| !handled.contains(claim));
    }

    fn replace(&self, db: Option<Arc<Database>>) {
        *self.db.write().unwrap_or_else(PoisonError::into_inner) = db;
        // A reopened file holds what the disk does; nothing read before is kept.
        self.hot.clear();
    }
}

/// Stages the sweep: every dead claim whose operation is still `in_flight` under its fence
/// becomes `unknown`, or `failed` if nothing of it can have taken effect
/// (`change::abandoned`), with an `operation.orphaned` event.
pub(super) fn stage_sweep(
    tables: &mut Tables<'_>,
    claims: &[DeadClaim],
    now: Timestamp,
) -> Result<Vec<Operation>, Fault> {
    let mut orphaned = Vec::new();
    for claim in claims {
        if let Some(op) = tables.orphan_claim(&claim.id, claim.fence, claim.left, now)? {
            orphaned.push(op);
        }
    }
    Ok(orphaned)
}

/// Whether `db` refuses new write transactions (redb after an I/O error).
pub(super) fn refuses_writes(db: &Database) -> bool {
    match db.begin_write() {
        Ok(txn) => {
            let _ = txn.abort();
            false
        }
        Err(_) => true,
    }
}

/// The writer's side of recovery: its database handle, the log and when to try again.
pub(super) struct Recovery {
    shared: Arc<Shared>,
    db: Option<Arc<Database>>,
    wal: Wal,
    backoff: Duration,
    next_try: Instant,
}

impl Recovery {
    pub(super) fn new(shared: Arc<Shared>, wal: Wal) -> Recovery {
        let db = shared.db().ok();
        Recovery {
            shared,
            db,
            wal,
            backoff: FIRST_BACKOFF,
            next_try: Instant::now(),
        }
    }

    /// The log the writer's batches are made durable by.
    pub(super) fn wal(&mut self) -> &mut Wal {
        &mut self.wal
    }

    /// The log and the shared state, for one batch.
    pub(super) fn for_batch(&mut self) -> (&mut Wal, &Shared) {
        (&mut self.wal, &self.shared)
    }

    /// How long the writer may wait for a job before a checkpoint is due (`None`: none is).
    pub(super) fn checkpoint_in(&self) -> Option<Duration> {
        if self.shared.writable() {
            self.wal.due_in()
        } else {
            None
        }
    }

    /// Checkpoints the log if it is due (see `wal`); a checkpoint that fails breaks the ledger
    /// like a failed write.
    pub(super) fn checkpoint_if_due(&mut self) {
        if self.checkpoint_in() == Some(Duration::ZERO) {
            self.checkpoint();
        }
    }

    /// Checkpoints what the log holds: the last thing the writer does before it stops, so a
    /// stopped ledger's file holds everything and its log nothing.
    pub(super) fn checkpoint(&mut self) {
        let Some(db) = self.db.clone() else { return };
        if !self.shared.writable() {
            return;
        }
        if let Err(e) = self.wal.checkpoint(&db) {
            drop(db);
            self.broken(&format!("a checkpoint failed: {e}"));
        }
    }

    pub(super) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The handle writes go to, when there is one.
    pub(super) fn db(&self) -> Option<Arc<Database>> {
        self.db.clone()
    }

    /// How long until the next recovery attempt is due.
    pub(super) fn wait(&self) -> Duration {
        self.next_try.saturating_duration_since(Instant::now())
    }

    /// A write failed and the database refuses new ones, or a sync failed (the syncer then
    /// stopped writes already): stop writing, reopen for the readers (what the log holds
    /// wins), and try to recover after `FIRST_BACKOFF`.
    pub(super) fn broken(&mut self, why: &str) {
        self.shared.stop_writes(why);
        self.backoff = FIRST_BACKOFF;
        self.next_try = Instant::now() + self.backoff;
        if let Err(e) = self.reopen() {
            tracing::debug!(error = %e, "the ledger could not be reopened yet");
        }
    }

    /// One recovery attempt; on success the ledger is writable again.
    pub(super) fn attempt(&mut self) {
        match self.try_recover() {
            Ok(orphaned) => {
                // Only from `STOPPED`: a sync that failed during the sweep is taken (and the
                // ledger reopened) first.
                if self
                    .shared
                    .state
                    .compare_exchange(STOPPED, WRITABLE, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    return;
                }
                tracing::info!(
                    ledger = %self.shared.path.display(),
                    orphaned = orphaned.len(),
                    "the ledger can write again; attempts whose result could not be recorded \
                     are now unknown, claims that never left failed"
                );
            }
            Err(e) => {
                tracing::debug!(error = %e, "the ledger cannot write yet");
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                self.next_try = Instant::now() + self.backoff;
            }
        }
    }

    fn try_recover(&mut self) -> Result<Vec<Operation>, String> {
        // A failed sync comes first: the writer reopens the ledger for it (then it holds what
        // the log holds), and the syncer answers the failed batches and leaves their claims
        // for this sweep. Checked here, by the one thing that makes the ledger writable.
        if self.shared.state.load(Ordering::Acquire) == SYNC_FAILED
            || self.shared.resetting.load(Ordering::Acquire)
        {
            return Err("a failed sync of the log is not yet handled".to_owned());
        }
        if self.db.as_deref().is_none_or(refuses_writes) {
            self.reopen()?;
        }
        probe_headroom(&self.shared.path).map_err(|e| format!("no headroom on disk: {e}"))?;
        let db = self.db.clone().ok_or("no database handle")?;
        let claims = self.shared.dead_claims();
        let orphaned = sweep(&db, &mut self.wal, &claims).map_err(|e| e.to_string())?;
        self.shared.swept(&claims);
        Ok(orphaned)
    }

    /// Closes the current handle (readers' too) and opens the file again; redb repairs it and
    /// the log's frames are replayed onto it before readers get it back.
    fn reopen(&mut self) -> Result<(), String> {
        self.shared.replace(None);
        self.db = None;
        let db = super::redb::create_database(&self.shared.path).map_err(|e| e.to_string())?;
        self.wal.recover(&db).map_err(|e| e.to_string())?;
        let db = Arc::new(db);
        self.shared.replace(Some(Arc::clone(&db)));
        self.db = Some(db);
        Ok(())
    }
}

/// The recovery write: one durable commit of the sweep, which checkpoints the log too.
fn sweep(db: &Database, wal: &mut Wal, claims: &[DeadClaim]) -> Result<Vec<Operation>, Fault> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    let mut tables = Tables::open(&txn, &Redo::off())?;
    let orphaned = stage_sweep(&mut tables, claims, Timestamp::now())?;
    tables.close()?;
    wal.commit_checkpoint(txn)?;
    Ok(orphaned)
}

/// Writes and syncs `HEADROOM` bytes beside the ledger, then removes them.
fn probe_headroom(ledger: &Path) -> std::io::Result<()> {
    let mut name = ledger.as_os_str().to_owned();
    name.push(".headroom");
    let path = PathBuf::from(name);
    let written = (|| {
        let mut file = std::fs::File::create(&path)?;
        file.write_all(&vec![0_u8; HEADROOM])?;
        file.sync_all()
    })();
    let removed = std::fs::remove_file(&path);
    written.and(removed)
}
