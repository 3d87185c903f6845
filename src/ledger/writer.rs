//! The single writer: one OS thread that owns every write transaction of an open ledger, and
//! the jobs it runs (`update`, a batch of `prune`, a batch of `prune_tombstones`, the sweep).
//!
//! Callers hand it boxed `Job`s through a channel and await the answer on a oneshot. Group
//! commit: the writer takes the first queued job and every job already queued behind it (up
//! to `MAX_BATCH`, never waiting for more), stages them in order in one write transaction,
//! commits once, and only then answers each of them. So a job sees the writes of the jobs
//! staged before it (same operation or not), and no answer leaves before its write is
//! durable. A job that fails or panics while staging is rolled back with the transaction and
//! answered with its error; the others run again without it (see `Job`). A failed commit fails
//! every job of its batch. The writer never blocks an async worker and never dies of a job's
//! panic. After a storage error it refuses writes and brings the ledger back (see `recovery`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redb::{Database, Durability, WriteTransaction};

use tokio::sync::oneshot;

use super::recovery::{DeadClaim, Recovery, Shared, refuses_writes, stage_sweep};
use super::store::{Fault, PruneBatch, Pruned, Tables};
use super::{LedgerError, Operation, State, Write};
use crate::clock::Timestamp;

/// What a job staged, which decides how its transaction ends. Ordered by weight: a batch ends
/// as its heaviest job says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Staged {
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
pub(super) trait Job: Send {
    /// Stages this job's changes in `txn`.
    fn stage(&mut self, txn: &WriteTransaction) -> Result<Staged, LedgerError>;
    /// Answers the caller once the commit (or the failure) is final.
    fn finish(self: Box<Self>, outcome: Result<(), LedgerError>);
    /// The new claim this job staged, if any: when its commit fails it may still have landed,
    /// and nobody will send under it, so the next sweep makes it `unknown` if it did.
    fn claim(&self) -> Option<DeadClaim> {
        None
    }
}

/// What the writer reports of each commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// How long the commit itself took.
    pub took: Duration,
    /// How many jobs (updates, prune batches, sweeps) it made durable together.
    pub jobs: usize,
    /// Whether it was a durable commit (`false`: history only, no fsync).
    pub durable: bool,
}

/// Called after each commit.
pub(super) type OnCommit = Arc<dyn Fn(Commit) + Send + Sync>;

/// The most jobs one transaction stages; more wait for the next commit.
const MAX_BATCH: usize = 256;

/// The handle to the writer thread; dropping it stops the thread after its queued jobs and
/// waits for it, so the database file is released when the last `Ledger` goes away.
pub(super) struct Writer {
    jobs: Option<Sender<Box<dyn Job>>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    pub(super) fn start(
        shared: Arc<Shared>,
        on_commit: Option<OnCommit>,
    ) -> Result<Writer, String> {
        let (jobs, queue) = channel();
        let thread = std::thread::Builder::new()
            .name("idemproxy-ledger-writer".to_owned())
            .spawn(move || run(shared, &queue, on_commit.as_ref()))
            .map_err(|e| format!("cannot start the writer thread: {e}"))?;
        Ok(Writer {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// Queues a job; if the writer has stopped, the job is answered with `Unavailable`.
    pub(super) fn submit(&self, job: Box<dyn Job>) {
        let Some(jobs) = &self.jobs else {
            return job.finish(Err(stopped()));
        };
        if let Err(returned) = jobs.send(job) {
            returned.0.finish(Err(stopped()));
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the channel ends the loop once the queue is drained.
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            // A job that owned the last handle would otherwise wait for itself.
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

fn stopped() -> LedgerError {
    LedgerError::Unavailable("the ledger writer has stopped".to_owned())
}

fn run(shared: Arc<Shared>, queue: &Receiver<Box<dyn Job>>, on_commit: Option<&OnCommit>) {
    let mut recovery = Recovery::new(shared);
    loop {
        let job = if recovery.shared().writable() {
            match queue.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        } else if recovery.wait().is_zero() {
            // Checked before the queue, so a stream of refused jobs cannot starve recovery.
            recovery.attempt();
            continue;
        } else {
            match queue.recv_timeout(recovery.wait()) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        };
        serve(&mut recovery, gather(job, queue), on_commit);
    }
}

/// The batch: `first` and every job already queued behind it, up to `MAX_BATCH`. Never waits
/// for more: a lone job commits at once.
fn gather(first: Box<dyn Job>, queue: &Receiver<Box<dyn Job>>) -> Vec<Box<dyn Job>> {
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

/// Runs one batch, or refuses it while the ledger cannot write. A failure after which the
/// database refuses new transactions breaks the ledger before any job is answered, so the
/// callers already see `/healthz` at 503. Every job that failed leaves its claim for the sweep.
fn serve(recovery: &mut Recovery, batch: Vec<Box<dyn Job>>, on_commit: Option<&OnCommit>) {
    let db = match recovery.db() {
        Some(db) if recovery.shared().writable() => db,
        _ => {
            for job in batch {
                job.finish(Err(recovery.shared().refusal()));
            }
            return;
        }
    };
    let settled = run_batch(&db, batch, on_commit);
    let failure = settled
        .iter()
        .find_map(|(_, outcome)| outcome.as_ref().err());
    if let Some(e) = failure {
        for (job, outcome) in &settled {
            if let (Err(_), Some(claim)) = (outcome, job.claim()) {
                recovery.shared().bury(claim);
            }
        }
        if refuses_writes(&db) {
            let why = e.to_string();
            drop(db);
            recovery.broken(&why);
        }
    }
    for (job, outcome) in settled {
        job.finish(outcome);
    }
}

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
    let mut batch = Staged::Nothing;
    for (index, job) in jobs.iter_mut().enumerate() {
        let staged = match catch_unwind(AssertUnwindSafe(|| job.stage(&txn))) {
            Ok(staged) => staged,
            Err(_) => Err(LedgerError::Unavailable(
                "the update panicked; nothing was written".to_owned(),
            )),
        };
        match staged {
            Ok(staged) => batch = batch.max(staged),
            Err(e) => {
                // What the failed job left half-written goes with the transaction.
                let _ = txn.abort();
                return Err((Some(index), e));
            }
        }
    }
    Ok((txn, batch))
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

pub(super) fn injected() -> LedgerError {
    LedgerError::Unavailable("fault injection: ledger.commit fails".to_owned())
}

fn unanswered() -> LedgerError {
    LedgerError::Unavailable("the job produced no answer".to_owned())
}

/// Where a job's answer goes.
pub(super) type Reply<T> = oneshot::Sender<Result<T, LedgerError>>;

/// An `update` on its way through the writer.
pub(super) struct UpdateJob<T, F> {
    id: String,
    f: Option<F>,
    fail_writes: bool,
    value: Option<T>,
    /// What `f` asked to write, kept so that a batch run again stages the same.
    write: Option<Write>,
    claimed: Option<DeadClaim>,
    reply: Reply<T>,
}

impl<T, F> UpdateJob<T, F> {
    pub(super) fn new(id: &str, f: F, fail_writes: bool, reply: Reply<T>) -> UpdateJob<T, F> {
        UpdateJob {
            id: id.to_owned(),
            f: Some(f),
            fail_writes,
            value: None,
            write: None,
            claimed: None,
            reply,
        }
    }
}

impl<T, F> Job for UpdateJob<T, F>
where
    F: FnOnce(Option<Operation>) -> (Option<Write>, T) + Send,
    T: Send,
{
    fn stage(&mut self, txn: &WriteTransaction) -> Result<Staged, LedgerError> {
        // The closure runs with no table open, so its panic cannot leave redb mid-change.
        let existing = Tables::open(txn)?.get_op_or_tombstone(&self.id)?;
        // Staged again (its batch ran again without a failed job): the transaction holds what
        // it held the first time, so the closure's first decision still stands.
        if let Some(f) = self.f.take() {
            let (write, value) = f(existing.clone());
            self.value = Some(value);
            self.write = write;
        } else if self.value.is_none() {
            return Err(unanswered());
        }
        let Some(write) = &self.write else {
            return Ok(Staged::Nothing);
        };
        if self.fail_writes {
            return Err(injected());
        }
        let fence = write.op.fence;
        let claims = write.op.state == State::InFlight && fence != 0;
        if claims && existing.as_ref().is_none_or(|old| old.fence != fence) {
            self.claimed = Some(DeadClaim {
                id: self.id.clone(),
                fence,
            });
        }
        let changed = Tables::open(txn)?.apply(&self.id, existing.as_ref(), write)?;
        Ok(if changed {
            Staged::State
        } else {
            Staged::History
        })
    }

    fn finish(self: Box<Self>, outcome: Result<(), LedgerError>) {
        let job = *self;
        let answer = outcome.and_then(|()| job.value.ok_or_else(unanswered));
        // The caller may have gone away; the write stands either way.
        let _ = job.reply.send(answer);
    }

    fn claim(&self) -> Option<DeadClaim> {
        self.claimed.clone()
    }
}

/// One batch of `prune` on its way through the writer.
pub(super) struct PruneJob {
    batch: PruneBatch,
    fail_writes: bool,
    result: Option<Pruned>,
    reply: Reply<Pruned>,
}

impl PruneJob {
    pub(super) fn new(batch: PruneBatch, fail_writes: bool, reply: Reply<Pruned>) -> PruneJob {
        PruneJob {
            batch,
            fail_writes,
            result: None,
            reply,
        }
    }
}

impl Job for PruneJob {
    fn stage(&mut self, txn: &WriteTransaction) -> Result<Staged, LedgerError> {
        if self.fail_writes {
            return Err(injected());
        }
        let pruned = Tables::open(txn)?.prune_batch(&self.batch)?;
        let wrote = pruned.deleted > 0;
        self.result = Some(pruned);
        Ok(if wrote {
            Staged::State
        } else {
            Staged::Nothing
        })
    }

    fn finish(self: Box<Self>, outcome: Result<(), LedgerError>) {
        let job = *self;
        let answer = outcome.and_then(|()| job.result.ok_or_else(unanswered));
        let _ = job.reply.send(answer);
    }
}

/// The sweep of dead claims (see `recovery`), queued when a caller abandons its claim.
pub(super) struct SweepJob {
    shared: Arc<Shared>,
    fail_writes: bool,
    /// The dead claims and the time taken at the first staging, kept for a batch run again.
    claims: Option<(Vec<DeadClaim>, Timestamp)>,
}

impl SweepJob {
    pub(super) fn new(shared: Arc<Shared>, fail_writes: bool) -> SweepJob {
        SweepJob {
            shared,
            fail_writes,
            claims: None,
        }
    }
}

impl Job for SweepJob {
    fn stage(&mut self, txn: &WriteTransaction) -> Result<Staged, LedgerError> {
        if self.fail_writes {
            return Err(injected());
        }
        let shared = &self.shared;
        let (claims, now) = self
            .claims
            .get_or_insert_with(|| (shared.dead_claims(), Timestamp::now()));
        let orphaned = stage_sweep(txn, claims, *now)?;
        Ok(if orphaned.is_empty() {
            Staged::Nothing
        } else {
            Staged::State
        })
    }

    fn finish(self: Box<Self>, outcome: Result<(), LedgerError>) {
        // Failed: the claims stay buried for the recovery sweep.
        if let (Ok(()), Some((claims, _))) = (outcome, &self.claims) {
            self.shared.swept(claims);
        }
    }
}

/// One batch of `prune_tombstones` on its way through the writer.
pub(super) struct TombJob {
    older_than: Timestamp,
    max: usize,
    fail_writes: bool,
    deleted: Option<usize>,
    reply: Reply<usize>,
}

impl TombJob {
    pub(super) fn new(
        older_than: Timestamp,
        max: usize,
        fail_writes: bool,
        reply: Reply<usize>,
    ) -> TombJob {
        TombJob {
            older_than,
            max,
            fail_writes,
            deleted: None,
            reply,
        }
    }
}

impl Job for TombJob {
    fn stage(&mut self, txn: &WriteTransaction) -> Result<Staged, LedgerError> {
        if self.fail_writes {
            return Err(injected());
        }
        let deleted = Tables::open(txn)?.sweep_tombstones(self.older_than, self.max)?;
        self.deleted = Some(deleted);
        Ok(if deleted > 0 {
            Staged::State
        } else {
            Staged::Nothing
        })
    }

    fn finish(self: Box<Self>, outcome: Result<(), LedgerError>) {
        let job = *self;
        let answer = outcome.and_then(|()| job.deleted.ok_or_else(unanswered));
        let _ = job.reply.send(answer);
    }
}
