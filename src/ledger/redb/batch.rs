//! One batch of the writer (group commit): the jobs queued together, staged in order in one
//! write transaction and ended by one commit of redb's own: durable (`Durability::Immediate`,
//! one `fdatasync` of the file) if any of them changed a state, else without an fsync (only
//! history was appended; the next durable commit makes it durable). The writer answers no job
//! before that commit has returned, so every answer leaves after its write is on disk.
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

use crate::ledger::fault::Fault;
use crate::ledger::feed::Feed;
use crate::ledger::redb::recovery::DeadClaim;
use crate::ledger::redb::store::Tables;
use crate::ledger::{Commit, LedgerError, OnCommit};

/// What a job staged, which decides how its transaction ends. Ordered by weight: a batch ends
/// as its heaviest job says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(in crate::ledger) enum Staged {
    /// Nothing to commit.
    Nothing,
    /// Only history was appended (the operation and its response are unchanged): committed
    /// without an fsync, made durable by the next durable commit. A crash may lose such an
    /// event (a replay or a conflict noted), never a state.
    History,
    /// A state change: one durable commit.
    State,
}

/// A unit of work for the writer thread.
///
/// The writer stages every queued job in one transaction and commits once. When one of them
/// fails (or panics), the transaction is rolled back and the batch runs again without it: a
/// job that had staged is then staged again, in a fresh transaction that holds exactly what
/// the first one held before it. So `stage` may be called more than once before `finish`,
/// and each call must stage the same changes again (remember what the first call decided;
/// never consume shared input for good before `finish` says the commit stands).
pub(in crate::ledger) trait Job: Send {
    /// Stages this job's changes in the batch's transaction, through its tables (opened once
    /// per batch: opening redb's tables for every job cost more than most jobs' own writes).
    fn stage(&mut self, tables: &mut Tables<'_>) -> Result<Staged, LedgerError>;
    /// Answers the caller once the commit (or the failure) is final.
    fn finish(self: Box<Self>, outcome: Result<(), LedgerError>);
    /// The new claim this job staged, if any: when its commit fails it may still have landed,
    /// and nobody will send under it, so the next sweep makes it `unknown` if it did.
    fn claim(&self) -> Option<DeadClaim> {
        None
    }
    /// Publishes the events this job appended; called only once its commit stands.
    fn publish(&self, _feed: &Feed) {}
}

/// The most jobs one transaction stages; more wait for the next commit.
const MAX_BATCH: usize = 256;

/// The batch: `first` and every job already queued behind it, up to `MAX_BATCH`. Never waits
/// for more: a lone job commits at once.
pub(in crate::ledger) fn gather(
    first: Box<dyn Job>,
    queue: &Receiver<Box<dyn Job>>,
) -> Vec<Box<dyn Job>> {
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
pub(in crate::ledger) type Settled = (Box<dyn Job>, Result<(), LedgerError>);

/// How a batch ended.
pub(in crate::ledger) struct Ended {
    /// Every job with its outcome, unanswered.
    pub(in crate::ledger) settled: Vec<Settled>,
    /// The operations its commit stored or deleted (`Tables::take_written`).
    pub(in crate::ledger) written: Vec<String>,
    /// Why the commit failed, if it did: the database may then refuse writes until reopened.
    pub(in crate::ledger) broke: Option<String>,
}

/// Stages `jobs` in one transaction and ends it as the heaviest staging says; a job that fails
/// to stage is set aside with its error and the rest run again without it.
pub(in crate::ledger) fn run_batch(
    db: &Database,
    mut jobs: Vec<Box<dyn Job>>,
    on_commit: Option<&OnCommit>,
) -> Ended {
    let mut settled = Vec::with_capacity(jobs.len());
    loop {
        match stage_all(db, &mut jobs) {
            Ok((txn, staging)) => {
                if staging.staged != Staged::Nothing {
                    crate::crash_point!("ledger.staged");
                }
                let outcome = end(txn, staging.staged, jobs.len(), on_commit);
                let (written, broke) = match &outcome {
                    Ok(()) => (staging.written, None),
                    Err(e) => (Vec::new(), Some(e.to_string())),
                };
                settled.extend(jobs.into_iter().map(|job| (job, shared_outcome(&outcome))));
                return Ended {
                    settled,
                    written,
                    broke,
                };
            }
            Err((Some(failed), e)) => settled.push((jobs.remove(failed), Err(e))),
            Err((None, e)) => {
                settled.extend(jobs.into_iter().map(|job| (job, Err(shared_error(&e)))));
                return Ended {
                    settled,
                    written: Vec::new(),
                    broke: None,
                };
            }
        }
    }
}

/// Stages every job in a new transaction, in order. On a failure the transaction is rolled
/// back and the error names the failing job (`None`: the transaction could not begin).
fn stage_all(
    db: &Database,
    jobs: &mut [Box<dyn Job>],
) -> Result<(WriteTransaction, Staging), Failed> {
    let txn = db
        .begin_write()
        .map_err(|e| (None, LedgerError::from(Fault::from(e))))?;
    match stage_in(&txn, jobs) {
        Ok(batch) => Ok((txn, batch)),
        Err(failed) => {
            // What the failed job left half-written goes with the transaction.
            let _ = txn.abort();
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
fn stage_in(txn: &WriteTransaction, jobs: &mut [Box<dyn Job>]) -> Result<Staging, Failed> {
    let mut tables = Tables::open(txn).map_err(|e| (None, LedgerError::from(e)))?;
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

/// Ends a staged transaction: one durable commit if a state changed, one without an fsync if
/// only history was appended, an abort if nothing was written.
fn end(
    mut txn: WriteTransaction,
    staged: Staged,
    jobs: usize,
    on_commit: Option<&OnCommit>,
) -> Result<(), LedgerError> {
    let durable = match staged {
        Staged::State => true,
        Staged::History => false,
        Staged::Nothing => {
            // Nothing was written: an abort cannot lose anything, so its error is moot.
            let _ = txn.abort();
            return Ok(());
        }
    };
    let durability = if durable {
        Durability::Immediate
    } else {
        Durability::None
    };
    txn.set_durability(durability).map_err(Fault::from)?;
    commit(txn, Instant::now(), jobs, durable, on_commit)?;
    Ok(())
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
