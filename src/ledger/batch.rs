//! One batch of the writer (group commit): the jobs queued together, staged in order in one
//! write transaction and ended by one commit, durable if any of them changed a state.
//!
//! A batch is made durable through the write-ahead log (`wal`): its redo records are appended
//! as one frame before the transaction commits (without an fsync of its own), so no reader
//! sees a change the log does not hold, and the syncer (`syncer`) syncs the frame before any
//! job is answered; until then the operations it wrote are held from replays. A batch that
//! only appended history is appended unsynced, like the commit without an fsync it had before
//! the log. A failed append or commit leaves the log and the database possibly apart: the
//! batch reports it, and the writer reopens the ledger (which replays the log) before writing
//! again.
//!
//! A job that fails or panics while staging is rolled back with the transaction and set aside
//! with its error; the batch then runs again without it, so the others still commit (redb's
//! savepoints cannot help: it takes one only before a transaction has written anything). A
//! failed commit fails every job of the batch. Nobody is answered here: the writer answers
//! the jobs once their fate is final.

use std::panic::{AssertUnwindSafe, catch_unwind};

use std::sync::mpsc::Receiver;
use std::time::Instant;

use redb::{Database, Durability, WriteTransaction};

use super::fault::Fault;
use super::recovery::Shared;
use super::redo::Redo;
use super::store::Tables;
use super::wal::Wal;
use super::writer::{Job, Staged};
use super::{Commit, LedgerError, OnCommit};

/// The most jobs one transaction stages; more wait for the next commit.
const MAX_BATCH: usize = 256;

/// The batch: `first` and every job already queued behind it, up to `MAX_BATCH`. Never waits
/// for more: a lone job commits at once.
pub(super) fn gather(first: Box<dyn Job>, queue: &Receiver<Box<dyn Job>>) -> Vec<Box<dyn Job>> {
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        match queue.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
    batch
}

/// Why a batch could not be staged: the job that failed (`None`: the transaction itself).
type Failed = (Option<usize>, LedgerError);

/// A job and how it ended.
pub(super) type Settled = (Box<dyn Job>, Result<(), LedgerError>);

/// How a batch ended.
pub(super) struct Ended {
    /// Every job with its outcome, unanswered.
    pub(super) settled: Vec<Settled>,
    /// The log frame of its commit and whether it must be synced before any job is answered
    /// (`None`: nothing was committed).
    pub(super) frame: Option<(u64, bool)>,
    /// Why the log or the commit failed, if it did: the database may then lack what the log
    /// holds (or the other way round), and must be reopened before it writes again.
    pub(super) broke: Option<String>,
}

/// Stages `jobs` in one transaction and ends it as the heaviest staging says; a job that fails
/// to stage is set aside with its error and the rest run again without it.
pub(super) fn run_batch(
    db: &Database,
    wal: &mut Wal,
    shared: &Shared,
    mut jobs: Vec<Box<dyn Job>>,
    on_commit: Option<&OnCommit>,
) -> Ended {
    let mut settled = Vec::with_capacity(jobs.len());
    loop {
        match stage_all(db, wal, &mut jobs) {
            Ok((txn, staging, mut frame)) => {
                let ending = Ending {
                    staged: staging.staged,
                    frame: &mut frame,
                    held: staging.written,
                    jobs: jobs.len(),
                };
                let outcome = end(txn, ending, wal, shared, on_commit);
                wal.recycle(frame);
                let (frame, broke) = match &outcome {
                    Ok(frame) => (*frame, None),
                    Err(e) => (None, Some(e.to_string())),
                };
                let outcome = outcome.map(|_| ());
                settled.extend(jobs.into_iter().map(|job| (job, shared_outcome(&outcome))));
                return Ended {
                    settled,
                    frame,
                    broke,
                };
            }
            Err((Some(failed), e)) => settled.push((jobs.remove(failed), Err(e))),
            Err((None, e)) => {
                settled.extend(jobs.into_iter().map(|job| (job, Err(shared_error(&e)))));
                return Ended {
                    settled,
                    frame: None,
                    broke: None,
                };
            }
        }
    }
}

/// Stages every job in a new transaction, in order, recording its changes. On a failure the
/// transaction is rolled back and the error names the failing job (`None`: the transaction
/// could not begin).
fn stage_all(
    db: &Database,
    wal: &mut Wal,
    jobs: &mut [Box<dyn Job>],
) -> Result<(WriteTransaction, Staging, Vec<u8>), Failed> {
    let txn = begin(db).map_err(|e| (None, LedgerError::from(e)))?;
    let redo = Redo::on(wal.scratch());
    let staged = stage_in(&txn, jobs, &redo);
    let frame = redo.take();
    match staged {
        Ok(batch) => Ok((txn, batch, frame)),
        Err(failed) => {
            // What the failed job left half-written goes with the transaction.
            let _ = txn.abort();
            wal.recycle(frame);
            Err(failed)
        }
    }
}

/// What staging every job of a batch did.
struct Staging {
    /// The heaviest staging (how the transaction ends).
    staged: Staged,
    /// The operations stored or deleted (`Tables::take_written`).
    written: Vec<String>,
}

/// Stages every job through one set of open tables, closed again before the transaction
/// commits or aborts; the first failure names its job.
fn stage_in(
    txn: &WriteTransaction,
    jobs: &mut [Box<dyn Job>],
    redo: &Redo,
) -> Result<Staging, Failed> {
    let mut tables = Tables::open(txn, redo).map_err(|e| (None, LedgerError::from(e)))?;
    let mut batch = Staged::Nothing;
    for (index, job) in jobs.iter_mut().enumerate() {
        let staged = match catch_unwind(AssertUnwindSafe(|| job.stage(&mut tables))) {
            Ok(staged) => staged,
            Err(_) => Err(LedgerError::Unavailable(
                "the update panicked; nothing was written".to_owned(),
            )),
        };
        match staged {
            Ok(staged) => batch = batch.max(staged),
            Err(e) => return Err((Some(index), e)),
        }
    }
    let written = tables.take_written();
    tables.close().map_err(|e| (None, LedgerError::from(e)))?;
    Ok(Staging {
        staged: batch,
        written,
    })
}

/// What a staged batch ends with.
struct Ending<'a> {
    staged: Staged,
    /// The log frame: room for its head, then the batch's redo records.
    frame: &'a mut [u8],
    /// The operations its jobs wrote (`Tables::take_written`), held from replays until its
    /// frame is synced.
    held: Vec<String>,
    jobs: usize,
}

/// Ends a staged transaction: its records appended to the log as one frame, the operations it
/// wrote held from replays, then a commit without an fsync (the syncer syncs the frame before
/// any job is answered); an abort if nothing was written. Returns the frame and whether it
/// must be synced.
fn end(
    txn: WriteTransaction,
    ending: Ending<'_>,
    wal: &mut Wal,
    shared: &Shared,
    on_commit: Option<&OnCommit>,
) -> Result<Option<(u64, bool)>, LedgerError> {
    let durable = match ending.staged {
        Staged::State => true,
        Staged::History => false,
        Staged::Nothing => {
            // Nothing was written: an abort cannot lose anything, so its error is moot.
            let _ = txn.abort();
            return Ok(None);
        }
    };
    let started = Instant::now();
    let lsn = match wal.append(ending.frame) {
        Ok(lsn) => lsn,
        Err(e) => {
            let _ = txn.abort();
            return Err(LedgerError::Unavailable(format!(
                "the ledger's write-ahead log could not be written: {e}"
            )));
        }
    };
    shared.hold(ending.held, lsn);
    if let Err(e) = commit(txn, started, ending.jobs, durable, on_commit) {
        shared.unhold(lsn);
        return Err(e.into());
    }
    Ok(Some((lsn, durable)))
}

/// The outcome of a shared commit, for one of its jobs.
fn shared_outcome(outcome: &Result<(), LedgerError>) -> Result<(), LedgerError> {
    outcome.as_ref().map(|_| ()).map_err(shared_error)
}

fn shared_error(e: &LedgerError) -> LedgerError {
    match e {
        LedgerError::Unavailable(why) => LedgerError::Unavailable(why.clone()),
        other => LedgerError::Unavailable(other.to_string()),
    }
}

fn begin(db: &Database) -> Result<WriteTransaction, Fault> {
    let mut txn = db.begin_write()?;
    // Durability comes from the log; the checkpoint commits durably.
    txn.set_durability(Durability::None)?;
    Ok(txn)
}

fn commit(
    txn: WriteTransaction,
    started: Instant,
    jobs: usize,
    durable: bool,
    on_commit: Option<&OnCommit>,
) -> Result<(), Fault> {
    txn.commit()?;
    if let Some(on_commit) = on_commit {
        let took = started.elapsed();
        let report = Commit {
            took,
            jobs,
            durable,
        };
        // A metrics hook that panics must not cost the callers their answers: the commit stands.
        let _ = catch_unwind(AssertUnwindSafe(|| on_commit(report)));
    }
    Ok(())
}
