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
//! A reopened file holds its last durable commit, which includes every batch anyone was
//! answered for (each was answered only after its durable commit returned).
//! This module never decides what a request means; it only settles dead claims
//! (`change::abandoned`: `unknown`, or `failed` when nothing of the operation was sent).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redb::{Database, Durability};

use crate::clock::Timestamp;
use crate::ledger::LedgerError;
use crate::ledger::change::Left;
use crate::ledger::fault::Fault;
use crate::ledger::hot::Hot;
use crate::ledger::redb::store::Tables;
use crate::operation::Operation;

/// What must be writable (and syncable) beside the ledger before it is trusted again.
const HEADROOM: usize = 1 << 20;
/// The first wait before a recovery attempt, doubled after each failed one up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// A claim (operation ID and fence) that nobody will finish: its result write failed, or the
/// commit that made it failed and may still have landed (`left` tells which).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::ledger) struct DeadClaim {
    pub(in crate::ledger) id: String,
    pub(in crate::ledger) fence: u64,
    pub(in crate::ledger) left: Left,
}

/// The state the writer thread and the readers share.
pub(in crate::ledger) struct Shared {
    path: PathBuf,
    /// `None` while a reopen has not yet succeeded.
    db: RwLock<Option<Arc<Database>>>,
    /// False from a storage error until the writer's recovery commits.
    writable: AtomicBool,
    dead: Mutex<Vec<DeadClaim>>,
    /// The final answers replays read, kept until the writer changes their operations.
    pub(in crate::ledger) hot: Hot,
}

impl Shared {
    pub(in crate::ledger) fn new(path: &Path, db: Database) -> Shared {
        Shared {
            path: path.to_path_buf(),
            db: RwLock::new(Some(Arc::new(db))),
            writable: AtomicBool::new(true),
            dead: Mutex::new(Vec::new()),
            hot: Hot::new(),
        }
    }

    /// The current database handle, for one read or one write.
    pub(in crate::ledger) fn db(&self) -> Result<Arc<Database>, LedgerError> {
        let slot = self.db.read().unwrap_or_else(PoisonError::into_inner);
        slot.clone().ok_or_else(|| {
            LedgerError::Unavailable(format!(
                "the ledger at {} is being reopened after a storage error",
                self.path.display()
            ))
        })
    }

    pub(in crate::ledger) fn writable(&self) -> bool {
        self.writable.load(Ordering::Acquire)
    }

    /// Stops every write (and turns `/healthz` 503) after a storage error, logged once until
    /// the writer's recovery makes it writable again.
    pub(in crate::ledger) fn stop_writes(&self, why: &str) {
        if self.writable.swap(false, Ordering::AcqRel) {
            self.stopped(why);
        }
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
    pub(in crate::ledger) fn refusal(&self) -> LedgerError {
        LedgerError::Unavailable(format!(
            "the ledger at {} cannot write since a storage error (is its disk full?); it \
             reopens itself once the disk allows",
            self.path.display()
        ))
    }

    /// Remembers a claim nobody will finish, for the next sweep.
    pub(in crate::ledger) fn bury(&self, claim: DeadClaim) {
        let mut dead = self.dead.lock().unwrap_or_else(PoisonError::into_inner);
        if !dead.contains(&claim) {
            dead.push(claim);
        }
    }

    pub(in crate::ledger) fn dead_claims(&self) -> Vec<DeadClaim> {
        self.dead
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Forgets the claims a committed sweep handled.
    pub(in crate::ledger) fn swept(&self, handled: &[DeadClaim]) {
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
pub(in crate::ledger) fn stage_sweep(
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
pub(in crate::ledger) fn refuses_writes(db: &Database) -> bool {
    match db.begin_write() {
        Ok(txn) => {
            let _ = txn.abort();
            false
        }
        Err(_) => true,
    }
}

/// The writer's side of recovery: its database handle and when to try again.
pub(in crate::ledger) struct Recovery {
    shared: Arc<Shared>,
    db: Option<Arc<Database>>,
    backoff: Duration,
    next_try: Instant,
}

impl Recovery {
    pub(in crate::ledger) fn new(shared: Arc<Shared>) -> Recovery {
        let db = shared.db().ok();
        Recovery {
            shared,
            db,
            backoff: FIRST_BACKOFF,
            next_try: Instant::now(),
        }
    }

    /// One empty durable commit, the last thing the writer does before it stops: history
    /// committed without an fsync since the last durable commit is then on disk too.
    pub(in crate::ledger) fn settle(&mut self) {
        let Some(db) = self.db.clone() else { return };
        if !self.shared.writable() {
            return;
        }
        let settled = (|| -> Result<(), Fault> {
            let mut txn = db.begin_write()?;
            txn.set_durability(Durability::Immediate)?;
            txn.commit()?;
            Ok(())
        })();
        if let Err(e) = settled {
            tracing::warn!(error = %e, "the ledger's last commit failed");
        }
    }

    pub(in crate::ledger) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The handle writes go to, when there is one.
    pub(in crate::ledger) fn db(&self) -> Option<Arc<Database>> {
        self.db.clone()
    }

    /// How long until the next recovery attempt is due.
    pub(in crate::ledger) fn wait(&self) -> Duration {
        self.next_try.saturating_duration_since(Instant::now())
    }

    /// A write failed and the database refuses new ones (or its commit failed): stop writing,
    /// reopen for the readers (the file's last durable commit), and try to recover after
    /// `FIRST_BACKOFF`.
    pub(in crate::ledger) fn broken(&mut self, why: &str) {
        self.shared.stop_writes(why);
        self.backoff = FIRST_BACKOFF;
        self.next_try = Instant::now() + self.backoff;
        if let Err(e) = self.reopen() {
            tracing::debug!(error = %e, "the ledger could not be reopened yet");
        }
    }

    /// One recovery attempt; on success the ledger is writable again.
    pub(in crate::ledger) fn attempt(&mut self) {
        match self.try_recover() {
            Ok(orphaned) => {
                self.shared.writable.store(true, Ordering::Release);
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
        if self.db.as_deref().is_none_or(refuses_writes) {
            self.reopen()?;
        }
        probe_headroom(&self.shared.path).map_err(|e| format!("no headroom on disk: {e}"))?;
        let db = self.db.clone().ok_or("no database handle")?;
        let claims = self.shared.dead_claims();
        let orphaned = sweep(&db, &claims).map_err(|e| e.to_string())?;
        self.shared.swept(&claims);
        Ok(orphaned)
    }

    /// Closes the current handle (readers' too) and opens the file again; redb repairs it
    /// before readers get it back.
    fn reopen(&mut self) -> Result<(), String> {
        self.shared.replace(None);
        self.db = None;
        let db =
            crate::ledger::redb::create_database(&self.shared.path).map_err(|e| e.to_string())?;
        let db = Arc::new(db);
        self.shared.replace(Some(Arc::clone(&db)));
        self.db = Some(db);
        Ok(())
    }
}

/// The recovery write: one durable commit of the sweep.
fn sweep(db: &Database, claims: &[DeadClaim]) -> Result<Vec<Operation>, Fault> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    let mut tables = Tables::open(&txn)?;
    let orphaned = stage_sweep(&mut tables, claims, Timestamp::now())?;
    tables.close()?;
    txn.commit()?;
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
