//! One batch of the writer (group commit): the jobs queued together, staged in order in one
//! write transaction and ended by one commit, durable if any of them changed a state.
//!
//! A job that fails or panics while staging is rolled back with the transaction and set aside
//! with its error; the batch then runs again without it, so the others still commit (redb's
//! savepoints cannot help: it takes one only before a transaction has written anything). A
//! failed commit fails every job of the batch. Nobody is answered here: the writer answers
//! the jobs once their fate is final.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use redb::{Database, Durability, WriteTransaction};

use super::LedgerError;
use super::store::{Fault, Tables};
use super::writer::{Job, Staged};

/// What the writer reports of each commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// How long the commit itself took.
    pub took: Duration,
    /// How many jobs (updates, prune batches, sweeps) it ended: their writes became durable
    /// together, and the reads among them saw what the jobs before them staged.
    pub jobs: usize,
    /// Whether it was a durable commit (`false`: history only, no fsync).
    pub durable: bool,
}

/// Called after each commit.
pub(super) type OnCommit = Arc<dyn Fn(Commit) + Send + Sync>;

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

/// A job and how it ended.
pub(super) type Settled = (Box<dyn Job>, Result<(), LedgerError>);

/// Stages `jobs` in one transaction and ends it as the heaviest staging says; a job that fails
/// to stage is set aside with its error and the rest run again without it. Returns every job
/// with its outcome, unanswered.
pub(super) fn run_batch(
    db: &Database,
    mut jobs: Vec<Box<dyn Job>>,
    on_commit: Option<&OnCommit>,
) -> Vec<Settled> {
    let mut settled = Vec::with_capacity(jobs.len());
    loop {
        match stage_all(db, &mut jobs) {
            Ok((txn, staged)) => {
                let outcome = end(txn, staged, jobs.len(), on_commit);
                settled.extend(jobs.into_iter().map(|job| (job, shared_outcome(&outcome))));
                return settled;
            }
            Err((Some(failed), e)) => settled.push((jobs.remove(failed), Err(e))),
            Err((None, e)) => {
                settled.extend(jobs.into_iter().map(|job| (job, Err(shared_error(&e)))));
                return settled;
            }
        }
    }
}

/// Stages every job in a new transaction, in order. On a failure the transaction is rolled
/// back and the error names the failing job (`None`: the transaction could not begin).
fn stage_all(
    db: &Database,
    jobs: &mut [Box<dyn Job>],
) -> Result<(WriteTransaction, Staged), (Option<usize>, LedgerError)> {
    let txn = begin(db).map_err(|e| (None, LedgerError::from(e)))?;
    match stage_in(&txn, jobs) {
        Ok(batch) => Ok((txn, batch)),
        Err(failed) => {
            // What the failed job left half-written goes with the transaction.
            let _ = txn.abort();
            Err(failed)
        }
    }
}

/// Stages every job through one set of open tables, closed again before the transaction
/// commits or aborts; the first failure names its job.
fn stage_in(
    txn: &WriteTransaction,
    jobs: &mut [Box<dyn Job>],
) -> Result<Staged, (Option<usize>, LedgerError)> {
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
    tables.close().map_err(|e| (None, LedgerError::from(e)))?;
    Ok(batch)
}

/// Ends a staged transaction: a durable commit if any job changed a state, a commit without
/// an fsync if they only appended history, else an abort.
fn end(
    mut txn: WriteTransaction,
    staged: Staged,
    jobs: usize,
    on_commit: Option<&OnCommit>,
) -> Result<(), LedgerError> {
    match staged {
        Staged::State => commit(txn, jobs, true, on_commit).map_err(LedgerError::from),
        Staged::History => txn
            .set_durability(Durability::None)
            .map_err(|e| Fault::new(e.to_string()))
            .and_then(|()| commit(txn, jobs, false, on_commit))
            .map_err(LedgerError::from),
        Staged::Nothing => {
            // Nothing was written: an abort cannot lose anything, so its error is moot.
            let _ = txn.abort();
            Ok(())
        }
    }
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
    txn.set_durability(Durability::Immediate)?;
    Ok(txn)
}

fn commit(
    txn: WriteTransaction,
    jobs: usize,
    durable: bool,
    on_commit: Option<&OnCommit>,
) -> Result<(), Fault> {
    let started = Instant::now();
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
