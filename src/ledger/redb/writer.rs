//! The single writer: one OS thread that owns every write transaction of an open ledger, and
//! the jobs it runs (`update`, a batch of `prune`, a batch of `prune_tombstones`, the sweep).
//!
//! Callers hand it boxed `Job`s through a channel and await the answer on a oneshot. Group
//! commit (`batch`): the writer takes the first queued job and every job already queued behind
//! it (up to 256, never waiting for more), stages them in order in one write transaction,
//! commits once (redb's own durable commit), and only then answers each of them. So a job sees the writes of the jobs
//! staged before it (same operation or not), and no answer leaves before its write is
//! durable. A job that fails or panics while staging is rolled back with the transaction and
//! answered with its error; the others run again without it (see `Job`). A failed commit fails
//! every job of its batch. The writer never blocks an async worker and never dies of a job's
//! panic. After a storage error it refuses writes and brings the ledger back (see `recovery`).

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;

use redb::ReadableTable as _;
use tokio::sync::oneshot;

use crate::ledger::LedgerError;
use crate::ledger::OnCommit;
use crate::ledger::redb::batch::{Ended, Job, Settled, Staged, gather, run_batch};

use crate::clock::Timestamp;
use crate::handoff::{self, Inbox};
use crate::ledger::ReplayNote;
use crate::ledger::change::{self, Left, first_replay, merged, orphan_event};
use crate::ledger::fault::Fault;
use crate::ledger::feed::Feed;
use crate::ledger::redb::recovery::{DeadClaim, Recovery, Shared, refuses_writes, stage_sweep};
use crate::ledger::redb::store::{PruneBatch, Pruned, Tables};
use crate::operation::{Event, Operation, Write};

/// The handle to the writer thread; dropping it stops the thread after its queued jobs and
/// waits for it, so the database file is released when the last `Ledger` goes away.
pub(in crate::ledger) struct Writer {
    jobs: Option<Sender<Box<dyn Job>>>,
    thread: Option<JoinHandle<()>>,
    /// The answerer's thread: a job it answers may own the last handle.
    answerer: std::thread::ThreadId,
}

impl Writer {
    pub(in crate::ledger) fn start(
        shared: Arc<Shared>,
        on_commit: Option<OnCommit>,
        feed: Feed,
    ) -> Result<Writer, String> {
        let (jobs, queue) = channel::<Box<dyn Job>>();
        let answerer = Answerer::start(feed)?;
        let answerer_id = answerer.id();
        let hooks = Hooks { on_commit };
        let thread = std::thread::Builder::new()
            .name("idemproxy-ledger-writer".to_owned())
            .spawn(move || run(shared, answerer, &queue, &hooks))
            .map_err(|e| format!("cannot start the writer thread: {e}"))?;
        Ok(Writer {
            jobs: Some(jobs),
            thread: Some(thread),
            answerer: answerer_id,
        })
    }

    /// Queues a job; if the writer has stopped, the job is answered with `Unavailable`.
    pub(in crate::ledger) fn submit(&self, job: Box<dyn Job>) {
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
            // A job that owned the last handle would otherwise wait for itself (on the writer's
            // thread) or for the writer, which waits for the answerer (on the answerer's).
            let current = std::thread::current().id();
            if thread.thread().id() != current && self.answerer != current {
                let _ = thread.join();
            }
        }
    }
}

fn stopped() -> LedgerError {
    LedgerError::Unavailable("the ledger writer has stopped".to_owned())
}

/// What the writer tells the world after each commit.
struct Hooks {
    on_commit: Option<OnCommit>,
}

fn run(shared: Arc<Shared>, answerer: Answerer, queue: &Receiver<Box<dyn Job>>, hooks: &Hooks) {
    let mut recovery = Recovery::new(shared);
    loop {
        let job = if recovery.shared().writable() {
            match queue.recv() {
                Ok(job) => job,
                Err(_) => break,
            }
        } else if recovery.wait().is_zero() {
            // Checked before the queue, so a stream of refused jobs cannot starve recovery.
            recovery.attempt();
            continue;
        } else {
            match queue.recv_timeout(recovery.wait()) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        };
        serve(&mut recovery, &answerer, gather(job, queue), hooks);
    }
    drop(answerer);
    // Every batch answered; history committed without an fsync is made durable before the
    // file is released.
    recovery.settle();
}

/// Runs one batch, or refuses it while the ledger cannot write, then answers its jobs: its
/// commit has returned, so what it wrote is durable (or, for history alone, committed). The
/// answers kept for replays of the operations it wrote go first, before anyone is answered.
/// A failure after which the database refuses new transactions (or a failed commit, which
/// may have left the file and redb's view of it apart) breaks the ledger, so the callers of
/// later batches see `/healthz` at 503. Every job that failed leaves its claim for the sweep.
fn serve(recovery: &mut Recovery, answerer: &Answerer, batch: Vec<Box<dyn Job>>, hooks: &Hooks) {
    let db = match recovery.db() {
        Some(db) if recovery.shared().writable() => db,
        _ => {
            for job in batch {
                job.finish(Err(recovery.shared().refusal()));
            }
            return;
        }
    };
    let Ended {
        settled,
        written,
        broke,
    } = run_batch(&db, batch, hooks.on_commit.as_ref());
    if !written.is_empty() {
        recovery.shared().hot.forget(&written);
    }
    let failure = settled
        .iter()
        .find_map(|(_, outcome)| outcome.as_ref().err().map(ToString::to_string));
    if let Some(why) = failure {
        for (job, outcome) in &settled {
            if let (Err(_), Some(claim)) = (outcome, job.claim()) {
                recovery.shared().bury(claim);
            }
        }
        if broke.is_some() || refuses_writes(&db) {
            drop(db);
            recovery.broken(&why);
        }
    }
    answerer.answer(settled);
}

/// The thread that publishes the events of committed batches and answers their jobs, in
/// commit order, while the writer stages the next batch: every batch it is handed has already
/// committed (durably, if it changed a state), so an answer never leaves before its write is
/// on disk. Dropping it answers what is queued and stops the thread.
struct Answerer {
    queue: Option<Sender<Vec<Settled>>>,
    thread: Option<JoinHandle<()>>,
}

impl Answerer {
    fn start(feed: Feed) -> Result<Answerer, String> {
        let (queue, inbox) = channel::<Vec<Settled>>();
        let thread = std::thread::Builder::new()
            .name("idemproxy-ledger-answerer".to_owned())
            .spawn(move || {
                for settled in inbox {
                    settle(settled, &feed);
                }
            })
            .map_err(|e| format!("cannot start the answerer thread: {e}"))?;
        Ok(Answerer {
            queue: Some(queue),
            thread: Some(thread),
        })
    }

    fn id(&self) -> std::thread::ThreadId {
        self.thread
            .as_ref()
            .map_or_else(|| std::thread::current().id(), |t| t.thread().id())
    }

    fn answer(&self, settled: Vec<Settled>) {
        if let Some(queue) = &self.queue
            && let Err(returned) = queue.send(settled)
        {
            for (job, _) in returned.0 {
                job.finish(Err(stopped()));
            }
        }
    }
}

impl Drop for Answerer {
    fn drop(&mut self) {
        self.queue = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Publishes the events of the jobs that succeeded and answers every job.
fn settle(settled: Vec<Settled>, feed: &Feed) {
    for (job, outcome) in settled {
        if outcome.is_ok() {
            job.publish(feed);
        }
        job.finish(outcome);
    }
}

pub(in crate::ledger) fn injected() -> LedgerError {
    LedgerError::Unavailable("fault injection: ledger.commit fails".to_owned())
}

fn unanswered() -> LedgerError {
    LedgerError::Unavailable("the job produced no answer".to_owned())
}

/// Where a job's answer goes: to the task that submitted it, through its shard's inbox when
/// it runs on a shard (`handoff`), so that one wake-up of the shard serves a bunch of answers.
pub(in crate::ledger) struct Reply<T> {
    answer: oneshot::Sender<Result<T, LedgerError>>,
    home: Option<Arc<Inbox>>,
}

impl<T: Send + 'static> Reply<T> {
    /// A reply to the calling task, and the receiver it awaits.
    pub(in crate::ledger) fn new() -> (Reply<T>, oneshot::Receiver<Result<T, LedgerError>>) {
        let (answer, receiver) = oneshot::channel();
        let home = handoff::home();
        (Reply { answer, home }, receiver)
    }

    /// Answers. The caller may have gone away; what was written stands either way.
    pub(in crate::ledger) fn send(self, result: Result<T, LedgerError>) {
        let Reply { answer, home } = self;
        match home {
            Some(inbox) => inbox.deliver(Box::new(move || {
                let _ = answer.send(result);
            })),
            None => {
                let _ = answer.send(result);
            }
        }
    }
}

/// An `update` on its way through the writer.
pub(in crate::ledger) struct UpdateJob<T, F> {
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
    pub(in crate::ledger) fn new(
        id: &str,
        f: F,
        fail_writes: bool,
        reply: Reply<T>,
    ) -> UpdateJob<T, F> {
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
    T: Send + 'static,
{
    fn stage(&mut self, tables: &mut Tables<'_>) -> Result<Staged, LedgerError> {
        // The closure runs between redb calls, never inside one: its panic (caught by the
        // batch, which then aborts the transaction) cannot leave redb mid-change.
        let existing = tables.get_op_or_tombstone(&self.id)?;
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
        if let Some(fence) = change::new_claim(existing.as_ref(), write) {
            // Buried only if this job's commit fails: its caller is refused and sends nothing.
            self.claimed = Some(DeadClaim {
                id: self.id.clone(),
                fence,
                left: Left::never(existing.as_ref()),
            });
        }
        let changed = tables.apply(&self.id, existing.as_ref(), write)?;
        Ok(if changed {
            Staged::State
        } else {
            Staged::History
        })
    }

    fn finish(self: Box<Self>, outcome: Result<(), LedgerError>) {
        let job = *self;
        let answer = outcome.and_then(|()| job.value.ok_or_else(unanswered));
        job.reply.send(answer);
    }

    fn claim(&self) -> Option<DeadClaim> {
        self.claimed.clone()
    }

    fn publish(&self, feed: &Feed) {
        if let Some(write) = &self.write {
            feed.publish(&write.op, &write.events);
        }
    }
}

/// One batch of `prune` on its way through the writer.
pub(in crate::ledger) struct PruneJob {
    batch: PruneBatch,
    fail_writes: bool,
    result: Option<Pruned>,
    reply: Reply<Pruned>,
}

impl PruneJob {
    pub(in crate::ledger) fn new(
        batch: PruneBatch,
        fail_writes: bool,
        reply: Reply<Pruned>,
    ) -> PruneJob {
        PruneJob {
            batch,
            fail_writes,
            result: None,
            reply,
        }
    }
}

impl Job for PruneJob {
    fn stage(&mut self, tables: &mut Tables<'_>) -> Result<Staged, LedgerError> {
        if self.fail_writes {
            return Err(injected());
        }
        let pruned = tables.prune_batch(&self.batch)?;
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
        job.reply.send(answer);
    }
}

/// The sweep of dead claims (see `recovery`), queued when a caller abandons its claim.
pub(in crate::ledger) struct SweepJob {
    shared: Arc<Shared>,
    fail_writes: bool,
    /// The dead claims and the time taken at the first staging, kept for a batch run again.
    claims: Option<(Vec<DeadClaim>, Timestamp)>,
    /// The operations the last staging orphaned, for the feed.
    orphaned: Vec<Operation>,
}

impl SweepJob {
    pub(in crate::ledger) fn new(shared: Arc<Shared>, fail_writes: bool) -> SweepJob {
        SweepJob {
            shared,
            fail_writes,
            claims: None,
            orphaned: Vec::new(),
        }
    }
}

impl Job for SweepJob {
    fn stage(&mut self, tables: &mut Tables<'_>) -> Result<Staged, LedgerError> {
        if self.fail_writes {
            return Err(injected());
        }
        let shared = &self.shared;
        let (claims, now) = self
            .claims
            .get_or_insert_with(|| (shared.dead_claims(), Timestamp::now()));
        self.orphaned = stage_sweep(tables, claims, *now)?;
        Ok(if self.orphaned.is_empty() {
            Staged::Nothing
        } else {
            Staged::State
        })
    }

    fn publish(&self, feed: &Feed) {
        for op in &self.orphaned {
            feed.publish(op, &[orphan_event(op)]);
        }
    }

    fn finish(self: Box<Self>, outcome: Result<(), LedgerError>) {
        // Failed: the claims stay buried for the recovery sweep.
        if let (Ok(()), Some((claims, _))) = (outcome, &self.claims) {
            self.shared.swept(claims);
        }
    }
}

/// One batch of `prune_tombstones` on its way through the writer.
pub(in crate::ledger) struct TombJob {
    older_than: Timestamp,
    max: usize,
    fail_writes: bool,
    deleted: Option<usize>,
    reply: Reply<usize>,
}

impl TombJob {
    pub(in crate::ledger) fn new(
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
    fn stage(&mut self, tables: &mut Tables<'_>) -> Result<Staged, LedgerError> {
        if self.fail_writes {
            return Err(injected());
        }
        let deleted = tables.sweep_tombstones(self.older_than, self.max)?;
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
        job.reply.send(answer);
    }
}

/// Merges `notes` into the table; an operation's first replays also get their event.
/// Returns how many operations were noted (the others are gone), and each event appended
/// with its operation.
fn stage_notes(
    tables: &mut Tables<'_>,
    notes: &[ReplayNote],
) -> Result<(usize, Vec<(Operation, Event)>), Fault> {
    let mut noted = 0;
    let mut appended = Vec::new();
    for note in notes {
        let Some(op) = tables.get_op(&note.id)? else {
            continue;
        };
        let kept = tables.replays().get(note.id.as_str())?.map(|v| v.value());
        tables
            .replays()
            .insert(note.id.as_str(), merged(kept, note))?;
        if kept.is_none() {
            let event = first_replay(&op, note);
            tables.append_events(&note.id, std::slice::from_ref(&event))?;
            appended.push((op, event));
        }
        noted += 1;
    }
    Ok((noted, appended))
}

/// One batch of replay counts on its way through the writer.
pub(in crate::ledger) struct NoteJob {
    notes: Vec<ReplayNote>,
    fail_writes: bool,
    noted: Option<usize>,
    /// The `operation.replayed` events the last staging appended, for the feed.
    appended: Vec<(Operation, Event)>,
    reply: Reply<usize>,
}

impl NoteJob {
    pub(in crate::ledger) fn new(
        notes: Vec<ReplayNote>,
        fail_writes: bool,
        reply: Reply<usize>,
    ) -> NoteJob {
        NoteJob {
            notes,
            fail_writes,
            noted: None,
            appended: Vec::new(),
            reply,
        }
    }
}

impl Job for NoteJob {
    fn stage(&mut self, tables: &mut Tables<'_>) -> Result<Staged, LedgerError> {
        if self.fail_writes {
            return Err(injected());
        }
        let (noted, appended) = stage_notes(tables, &self.notes)?;
        self.noted = Some(noted);
        self.appended = appended;
        Ok(if noted == 0 {
            Staged::Nothing
        } else {
            Staged::History
        })
    }

    fn publish(&self, feed: &Feed) {
        for (op, event) in &self.appended {
            feed.publish(op, std::slice::from_ref(event));
        }
    }

    fn finish(self: Box<Self>, outcome: Result<(), LedgerError>) {
        let job = *self;
        let answer = outcome.map(|()| job.noted.unwrap_or_default());
        job.reply.send(answer);
    }
}
