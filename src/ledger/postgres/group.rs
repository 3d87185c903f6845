//! Group commit on PostgreSQL: the `update`s a replica has queued are run together, as the
//! redb writer's batches are, in one transaction of two round trips and one commit (one WAL
//! flush) for all of them.
//!
//! A batch (up to `MAX_JOBS` jobs, as many as were queued; up to `BATCHES` batches at once,
//! each on its own connection) sends `BEGIN` with `idemproxy_read_v1`, which takes the lock
//! rows of the batch's IDs in sorted order (so two batches, on this replica or another, wait
//! for each other without a circle) and reads each; orphans the operations of lapsed owners
//! (rare: statements of their own); runs each job's closure in queue order on what is stored,
//! a later job on an ID seeing what an earlier one in the batch wrote; and sends
//! `idemproxy_write_v1` with every write and the `COMMIT`. Nobody is answered before that
//! commit has returned.
//!
//! A job whose closure panics, or whose write is refused here (another ID, a tombstoned ID),
//! gets its error and writes nothing; the others go on. When the database refuses the batch's
//! read (an ID it cannot store), every job runs again alone. When it refuses the batch's
//! write (nothing is then committed: a lapsed lease with a new claim in the batch, or any
//! other error), every job runs again alone, in queue order, with the decision it made: it is
//! applied if the operation is still exactly what the job saw, and the job is answered
//! `Unavailable` otherwise (its closure has run; it cannot decide again). So one job never
//! fails its neighbours. A connection that fails fails the batch (the database is what they
//! share); a commit whose answer is lost fails every job of the batch, and each new claim in
//! it is abandoned (made `unknown` or `failed` by a sweep if it landed).

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use tokio::sync::{Semaphore, mpsc, oneshot};

use super::super::LedgerError;
use super::super::change::{self, Left};
use super::super::codec;
use super::super::fault::Fault;
use super::super::hot;
use super::connect::{Tx, WriteFailed, sqlstate};
use super::update::{Appended, Found, orphan};
use super::{Core, OP_TIMEOUT, lease, schema};
use crate::operation::{Operation, RequestChange, Write};

/// The most jobs one batch holds.
const MAX_JOBS: usize = 64;
/// The most batches running at once (each holds a connection while it runs).
pub(super) const BATCHES: usize = 4;

/// One `update`, type-erased for the queue.
pub(super) trait Job: Send {
    fn id(&self) -> &str;
    /// Runs the caller's decision on what is stored (at most once); its value is kept for
    /// `finish`. `Err` when it panicked.
    fn decide(&mut self, existing: Option<Operation>) -> Result<Option<Write>, LedgerError>;
    /// Answers the caller.
    fn finish(self: Box<Self>, outcome: Result<(), LedgerError>);
}

/// A job of `update::<T, F>`.
struct Typed<T, F> {
    id: String,
    f: Option<F>,
    value: Option<T>,
    reply: oneshot::Sender<Result<T, LedgerError>>,
}

impl<T, F> Job for Typed<T, F>
where
    F: FnOnce(Option<Operation>) -> (Option<Write>, T) + Send + 'static,
    T: Send + 'static,
{
    fn id(&self) -> &str {
        &self.id
    }

    fn decide(&mut self, existing: Option<Operation>) -> Result<Option<Write>, LedgerError> {
        let Some(f) = self.f.take() else {
            return Err(LedgerError::Unavailable(format!(
                "the update of {} was decided twice",
                self.id
            )));
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| f(existing))) {
            Ok((write, value)) => {
                self.value = Some(value);
                Ok(write)
            }
            Err(_) => Err(LedgerError::Unavailable(format!(
                "the update of {} panicked; nothing was written",
                self.id
            ))),
        }
    }

    fn finish(self: Box<Self>, outcome: Result<(), LedgerError>) {
        let this = *self;
        let answer = match (outcome, this.value) {
            (Ok(()), Some(value)) => Ok(value),
            (Ok(()), None) => Err(LedgerError::Unavailable(format!(
                "the update of {} was not decided",
                this.id
            ))),
            (Err(e), _) => Err(e),
        };
        // A caller that went away no longer needs its answer.
        let _ = this.reply.send(answer);
    }
}

/// A job that has decided in a batch that then failed, run again alone: its decision stands
/// only on what it saw.
struct Decided {
    job: Box<dyn Job>,
    saw: Option<Operation>,
    write: Option<Write>,
}

impl Job for Decided {
    fn id(&self) -> &str {
        self.job.id()
    }

    fn decide(&mut self, existing: Option<Operation>) -> Result<Option<Write>, LedgerError> {
        if existing != self.saw {
            let why = format!(
                "{} changed while its update was retried; nothing was written",
                self.job.id()
            );
            return Err(LedgerError::Unavailable(why));
        }
        Ok(self.write.take())
    }

    fn finish(self: Box<Self>, outcome: Result<(), LedgerError>) {
        self.job.finish(outcome)
    }
}

/// The queue of a replica's updates; dropping it ends the task that runs them.
pub(super) struct Group {
    queue: mpsc::UnboundedSender<Box<dyn Job>>,
    /// How many jobs are queued and not yet taken into a batch.
    waiting: Arc<AtomicUsize>,
}

impl Group {
    /// Starts the task that batches what is queued.
    pub(super) fn start(core: Arc<Core>) -> Group {
        let (queue, jobs) = mpsc::unbounded_channel();
        let waiting = Arc::new(AtomicUsize::new(0));
        tokio::spawn(batcher(core, jobs, Arc::clone(&waiting)));
        Group { queue, waiting }
    }

    /// How many updates wait for a batch (for tests that fill one on purpose).
    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// `Ledger::update`: queued, run in the next batch, answered once its commit returned.
    pub(super) async fn update<T, F>(&self, id: &str, f: F) -> Result<T, LedgerError>
    where
        F: FnOnce(Option<Operation>) -> (Option<Write>, T) + Send + 'static,
        T: Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Typed {
            id: id.to_owned(),
            f: Some(f),
            value: None,
            reply,
        };
        self.waiting.fetch_add(1, Ordering::AcqRel);
        if self.queue.send(Box::new(job)).is_err() {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(LedgerError::Unavailable(
                "the ledger has stopped".to_owned(),
            ));
        }
        // Dropped unanswered: its batch ran out of time (`OP_TIMEOUT`) or the ledger stopped.
        answer.await.unwrap_or_else(|_| {
            Err(LedgerError::Unavailable(format!(
                "PostgreSQL did not answer within {}s",
                OP_TIMEOUT.as_secs()
            )))
        })
    }
}

/// Takes what is queued, up to `MAX_JOBS` at a time, into batches, `BATCHES` at once at most:
/// while they run, the queue fills the next one.
async fn batcher(
    core: Arc<Core>,
    mut jobs: mpsc::UnboundedReceiver<Box<dyn Job>>,
    waiting: Arc<AtomicUsize>,
) {
    let running = Arc::new(Semaphore::new(BATCHES));
    loop {
        let Ok(permit) = Arc::clone(&running).acquire_owned().await else {
            return;
        };
        let Some(first) = jobs.recv().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_JOBS {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        waiting.fetch_sub(batch.len(), Ordering::AcqRel);
        let core = Arc::clone(&core);
        tokio::spawn(async move {
            run(&core, batch).await;
            drop(permit);
        });
    }
}

/// Runs `jobs` as one batch; when its write fails in the database, each alone (a batch of
/// one answers its job whatever happens).
async fn run(core: &Arc<Core>, jobs: Vec<Box<dyn Job>>) {
    let Some(again) = batch(core, jobs).await else {
        return;
    };
    for job in again {
        if let Some(left) = batch(core, vec![job]).await {
            for job in left {
                job.finish(Err(LedgerError::Unavailable(
                    "a ledger update failed".to_owned(),
                )));
            }
        }
    }
}

/// What one job of a batch decided.
struct Entry {
    job: Box<dyn Job>,
    saw: Option<Operation>,
    write: Option<Write>,
    notify: bool,
    claim: Option<u64>,
}

/// The columns of `idemproxy_write_v1`, one element per write.
#[derive(Default)]
struct Columns {
    ids: Vec<String>,
    records: Vec<Option<Vec<u8>>>,
    states: Vec<&'static str>,
    providers: Vec<String>,
    routes: Vec<String>,
    created: Vec<i64>,
    updated: Vec<i64>,
    fences: Vec<i64>,
    ev_ends: Vec<i32>,
    events: Vec<Vec<u8>>,
    responses: Vec<Option<Vec<u8>>>,
    requests: Vec<i16>,
    sealed: Vec<Option<Vec<u8>>>,
    claims: Vec<bool>,
    notify: Vec<bool>,
    durable: bool,
}

impl Columns {
    /// Adds `write` over `old`; whether it notifies. Nothing is added on an error.
    fn add(&mut self, id: &str, old: Option<&Operation>, write: &Write) -> Result<bool, Fault> {
        change::admissible(id, write, old.is_some_and(|o| o.pruned_at.is_some()))?;
        let op_changed = old != Some(&write.op);
        let record = match op_changed {
            true => Some(codec::encode_op(&write.op)?),
            false => None,
        };
        let fence = i64::try_from(write.op.fence)
            .map_err(|_| Fault::new(format!("fence {} of {id} is out of range", write.op.fence)))?;
        let events = write
            .events
            .iter()
            .map(codec::encode_event)
            .collect::<Result<Vec<_>, _>>()?;
        let (request, sealed) = match &write.request {
            RequestChange::Keep => (0, None),
            RequestChange::Store(sealed) => (1, Some(sealed.clone())),
            RequestChange::Erase => (2, None),
        };
        let ends = i32::try_from(self.events.len() + events.len())
            .map_err(|_| Fault::new("too many events in one batch".to_owned()))?;
        // What another replica may keep in memory for a replay changes (`hot`).
        let notify =
            old.is_some_and(|o| hot::kept(o.state)) && (op_changed || write.response.is_some());
        self.ids.push(id.to_owned());
        self.records.push(record);
        self.states.push(write.op.state.as_str());
        self.providers.push(write.op.provider.clone());
        self.routes.push(write.op.route.clone());
        self.created.push(write.op.created_at.0);
        self.updated.push(write.op.updated_at.0);
        self.fences.push(fence);
        self.events.extend(events);
        self.ev_ends.push(ends);
        self.responses
            .push(write.response.as_ref().map(codec::encode_response));
        self.requests.push(request);
        self.sealed.push(sealed);
        self.claims.push(change::new_claim(old, write).is_some());
        self.notify.push(notify);
        // Durable when the operation, its response or its kept request changes (an erased
        // request counts only when there was one: the function decides); else only history
        // was appended.
        self.durable |= op_changed || write.response.is_some() || request == 1;
        Ok(notify)
    }
}

/// Runs `jobs` in one transaction and answers them; returns the jobs to run again alone when
/// the batch's write failed in the database (nothing committed), with what each decided.
async fn batch(core: &Arc<Core>, jobs: Vec<Box<dyn Job>>) -> Option<Vec<Box<dyn Job>>> {
    let work = attempt(core, jobs);
    match tokio::time::timeout(OP_TIMEOUT, work).await {
        Ok(again) => again,
        Err(_) => {
            // The jobs went with the dropped attempt, unanswered: their callers hear
            // `Unavailable`; a staged claim was abandoned by `Staged`'s drop.
            core.lease.unreachable();
            None
        }
    }
}

/// The new claims of a batch whose `COMMIT` has been sent: dropped before `settle` (a
/// failed or lost commit, a timeout), each is abandoned, as it may have landed with nobody
/// to send it.
struct Staged {
    core: Arc<Core>,
    claims: Vec<(String, u64, Left)>,
}

impl Staged {
    fn settle(mut self) {
        self.claims.clear();
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        for (id, fence, left) in self.claims.drain(..) {
            tokio::spawn(lease::abandon(Arc::clone(&self.core), id, (fence, left)));
        }
    }
}

async fn attempt(core: &Arc<Core>, jobs: Vec<Box<dyn Job>>) -> Option<Vec<Box<dyn Job>>> {
    let alone = jobs.len() == 1;
    let mut ids: Vec<String> = jobs.iter().map(|j| j.id().to_owned()).collect();
    ids.sort_unstable();
    ids.dedup();
    let read = async {
        let conn = core.conn().await.map_err(WriteFailed::Before)?;
        let (tx, rows) = conn
            .begin_with(
                "SELECT op_id, op_record, op_lapsed, op_tomb FROM idemproxy_read_v1($1, $2)",
                &[&ids, &core.me],
            )
            .await?;
        let mut found = HashMap::with_capacity(rows.len());
        for row in &rows {
            found.insert(
                row.get::<_, String>(0),
                found_in(row).map_err(WriteFailed::Before)?,
            );
        }
        Ok::<_, WriteFailed>((tx, found))
    };
    let (tx, found) = match read.await {
        Ok(read) => read,
        // The database refused one of the IDs (one it cannot store): each alone, so only
        // that one fails. Nothing has decided yet.
        Err(WriteFailed::Statement(_)) if !alone => return Some(jobs),
        Err(failed) => {
            let error = LedgerError::from(failed.into_fault());
            for job in jobs {
                job.finish(Err(error.clone()));
            }
            return None;
        }
    };
    match decide_and_write(core, tx, found, jobs).await {
        Ok(()) => None,
        Err(again) if alone => {
            for job in again {
                job.finish(Err(LedgerError::Unavailable(
                    "a ledger update failed".to_owned(),
                )));
            }
            None
        }
        Err(again) => Some(again),
    }
}

/// The refusal of a claim while this replica's lease is not live in the database.
fn lease_lapsed() -> LedgerError {
    LedgerError::Unavailable("this replica's lease lapsed; it claims again once renewed".into())
}

/// What `idemproxy_read_v1` returned for one ID.
fn found_in(row: &tokio_postgres::Row) -> Result<Found, Fault> {
    if let Some(record) = row.get::<_, Option<&[u8]>>(1) {
        return Ok(Found {
            op: Some(codec::decode_op(record)?),
            lapsed: row.get::<_, Option<bool>>(2).unwrap_or(false),
        });
    }
    let op = match row.get::<_, Option<&[u8]>>(3) {
        Some(tomb) => Some(codec::decode_op(tomb)?),
        None => None,
    };
    Ok(Found { op, lapsed: false })
}

/// Orphans what must be, decides every job, writes and commits. `Err` with the jobs to run
/// again alone (each with its decision) when the write failed in the database.
async fn decide_and_write(
    core: &Arc<Core>,
    tx: Tx,
    found: HashMap<String, Found>,
    jobs: Vec<Box<dyn Job>>,
) -> Result<(), Vec<Box<dyn Job>>> {
    let mut appended: Appended = Vec::new();
    let mut orphaned = Vec::new();
    // What is stored under each ID as the batch goes on.
    let mut now: HashMap<String, Option<Operation>> = HashMap::with_capacity(found.len());
    for (id, found) in found {
        let op = match found.op {
            Some(old) if found.lapsed => match orphan(&tx, &old, core.reach).await {
                Ok((op, event)) => {
                    appended.push((op.clone(), vec![event]));
                    orphaned.push(op.clone());
                    Some(op)
                }
                Err(fault) => {
                    let error = LedgerError::from(fault);
                    jobs.into_iter().for_each(|j| j.finish(Err(error.clone())));
                    return Ok(());
                }
            },
            other => other,
        };
        now.insert(id, op);
    }
    let orphans = !appended.is_empty();
    let mut columns = Columns::default();
    let mut entries = Vec::with_capacity(jobs.len());
    for mut job in jobs {
        let id = job.id().to_owned();
        let saw = now.get(&id).cloned().flatten();
        let write = match job.decide(saw.clone()) {
            Ok(write) => write,
            Err(e) => {
                job.finish(Err(e));
                continue;
            }
        };
        let (notify, claim) = match &write {
            None => (false, None),
            Some(_) if core.fail_writes => {
                job.finish(Err(super::injected()));
                continue;
            }
            Some(write) => match columns.add(&id, saw.as_ref(), write) {
                Ok(notify) => (notify, change::new_claim(saw.as_ref(), write)),
                Err(fault) => {
                    job.finish(Err(fault.into()));
                    continue;
                }
            },
        };
        if let Some(write) = &write {
            now.insert(id, Some(write.op.clone()));
        }
        entries.push(Entry {
            job,
            saw,
            write,
            notify,
            claim,
        });
    }
    // The lock rows of IDs that hold nothing, and never did in this batch, would only take room.
    let unlock: Vec<&String> = now
        .iter()
        .filter(|(_, op)| op.is_none())
        .map(|(id, _)| id)
        .collect();
    let staged = Staged {
        core: Arc::clone(core),
        claims: entries
            .iter()
            .filter_map(|e| Some((e.job.id().to_owned(), e.claim?, Left::never(e.saw.as_ref()))))
            .collect(),
    };
    crate::crash_point!("ledger.staged");
    let durable = columns.durable || orphans;
    let started = Instant::now();
    let written = tx
        .execute_and_commit(
            "SELECT idemproxy_write_v1($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, \
             $13, $14, $15, $16, $17, $18)",
            &[
                &core.me,
                &columns.ids,
                &columns.records,
                &columns.states,
                &columns.providers,
                &columns.routes,
                &columns.created,
                &columns.updated,
                &columns.fences,
                &columns.ev_ends,
                &columns.events,
                &columns.responses,
                &columns.requests,
                &columns.sealed,
                &columns.claims,
                &columns.notify,
                &unlock,
                &durable,
            ],
        )
        .await;
    let forget: Vec<String> = entries
        .iter()
        .filter(|e| e.notify)
        .map(|e| e.job.id().to_owned())
        .collect();
    match written {
        Ok(()) => {
            staged.settle();
            core.committed(started, entries.len(), durable);
            // This replica's kept answers go before anyone is answered.
            core.hot.forget(&forget);
            // Published before anyone is answered: a caller that subscribed sees its events.
            let mut jobs = Vec::with_capacity(entries.len());
            for entry in entries {
                if let Some(write) = entry.write {
                    appended.push((write.op, write.events));
                }
                jobs.push(entry.job);
            }
            core.publish(&appended);
            core.orphaned(&orphaned);
            jobs.into_iter().for_each(|job| job.finish(Ok(())));
            Ok(())
        }
        Err(WriteFailed::Commit(fault)) => {
            // It may have landed: forget, fail everyone, abandon the claims (`staged`'s drop).
            core.hot.forget(&forget);
            let error = LedgerError::from(fault);
            for entry in entries {
                entry.job.finish(Err(error.clone()));
            }
            drop(staged);
            Ok(())
        }
        Err(failed) => {
            // Nothing was committed: no claim to abandon.
            staged.settle();
            let lapsed = matches!(&failed, WriteFailed::Statement(e)
                if sqlstate(e) == Some(schema::LEASE_LAPSED));
            if entries.len() == 1 {
                let error = match lapsed {
                    true => lease_lapsed(),
                    false => LedgerError::from(failed.into_fault()),
                };
                entries
                    .into_iter()
                    .for_each(|e| e.job.finish(Err(error.clone())));
                return Ok(());
            }
            let again = entries
                .into_iter()
                .map(|e| {
                    Box::new(Decided {
                        job: e.job,
                        saw: e.saw,
                        write: e.write,
                    }) as Box<dyn Job>
                })
                .collect();
            Err(again)
        }
    }
}
