//! The syncer: the thread that makes the writer's batches durable and only then answers their
//! jobs, so the writer can stage the next batch while the disk flushes the last one.
//!
//! The writer appends each batch's frame to the write-ahead log (`wal`), commits it without
//! an fsync and hands it here with its jobs. The syncer takes every batch that is waiting,
//! syncs the log once for all of them (one `fdatasync` covers every frame written before it),
//! then publishes their events and answers their jobs, in order. A batch staged on top of
//! another is never answered before it: the log is synced in order. If a sync fails, that
//! batch and every batch after it fail (each was staged on the ones before), their claims are
//! left for the sweep, and the writer is told to reopen the ledger (which replays the log as
//! the disk holds it) before it writes again; until then every batch handed here fails too.
//!
//! While a batch waits here its changes are visible to readers, so the operations it wrote
//! are held (`Shared::hold`): a replay of one of them is not answered from a read snapshot
//! but goes through the writer, whose answer waits for the sync. It never stages or commits.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use super::LedgerError;
use super::batch::Settled;
use super::feed::Feed;
use super::recovery::Shared;

/// A committed batch waiting for its sync.
pub(super) struct Pending {
    /// The sequence number of its log frame.
    pub(super) lsn: u64,
    /// Whether its frame must be synced before its jobs are answered (a state changed).
    pub(super) sync: bool,
    /// Its jobs and how their staging ended.
    pub(super) settled: Vec<Settled>,
}

enum Msg {
    Batch(Pending),
    /// The writer reopened the ledger after a failed sync: batches after this are synced
    /// again, and what the failed ones (frames up to this one) held is released.
    Reset(u64),
}

/// The handle the writer keeps; dropping it answers what is queued and stops the thread.
pub(super) struct Syncer {
    queue: Option<Sender<Msg>>,
    thread: Option<JoinHandle<()>>,
    /// Set by a failed sync, taken by the writer (`take_failure`).
    failed: Arc<AtomicBool>,
}

/// Wakes the writer (it may be waiting for a job) after a failed sync.
pub(super) type Wake = Box<dyn Fn() + Send>;

impl Syncer {
    pub(super) fn start(
        log: File,
        shared: Arc<Shared>,
        feed: Feed,
        wake: Wake,
    ) -> Result<Syncer, String> {
        let (queue, inbox) = channel();
        let failed = Arc::new(AtomicBool::new(false));
        let mut state = Thread {
            log: Log {
                file: log,
                fail: super::fault_point("ledger.sync"),
            },
            shared,
            feed,
            failed: Arc::clone(&failed),
            wake,
            broken: None,
        };
        let thread = std::thread::Builder::new()
            .name("idemproxy-ledger-syncer".to_owned())
            .spawn(move || state.run(&inbox))
            .map_err(|e| format!("cannot start the syncer thread: {e}"))?;
        Ok(Syncer {
            queue: Some(queue),
            thread: Some(thread),
            failed,
        })
    }

    /// Hands over a committed batch.
    pub(super) fn submit(&self, pending: Pending) {
        if let Some(queue) = &self.queue
            && let Err(returned) = queue.send(Msg::Batch(pending))
            && let Msg::Batch(pending) = returned.0
        {
            for (job, _) in pending.settled {
                job.finish(Err(LedgerError::Unavailable(
                    "the ledger syncer has stopped".to_owned(),
                )));
            }
        }
    }

    /// Whether a sync failed that the writer has not yet taken: the ledger must be reopened
    /// and the syncer `reset`. True once per failure (the syncer syncs nothing more until
    /// that reset, so it cannot fail again before).
    pub(super) fn take_failure(&self) -> bool {
        self.failed.swap(false, Ordering::AcqRel)
    }

    /// The ledger was reopened after a failed sync, with `last` the last frame appended
    /// before: batches handed over from now on are synced again.
    pub(super) fn reset(&self, last: u64) {
        if let Some(queue) = &self.queue {
            let _ = queue.send(Msg::Reset(last));
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.queue = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the syncer thread owns.
struct Thread {
    log: Log,
    shared: Arc<Shared>,
    feed: Feed,
    /// Tells the writer that a sync failed (`Syncer::take_failure`).
    failed: Arc<AtomicBool>,
    wake: Wake,
    /// Why a sync failed, from then until the writer's reset: every batch in between fails.
    broken: Option<String>,
}

impl Thread {
    fn run(&mut self, inbox: &Receiver<Msg>) {
        while let Ok(first) = inbox.recv() {
            let mut batches = Vec::new();
            let mut next = Some(first);
            while let Some(msg) = next {
                match msg {
                    Msg::Batch(pending) => batches.push(pending),
                    Msg::Reset(last) => {
                        // Batches before the reset were staged before the reopen: they end as
                        // the log did before it. The reopened ledger holds what the log holds,
                        // so what the failed batches held is released only now.
                        self.flush(std::mem::take(&mut batches));
                        self.shared.release_upto(last);
                        self.broken = None;
                    }
                }
                next = inbox.try_recv().ok();
            }
            self.flush(batches);
        }
    }

    /// Syncs the log once for `batches` (unless it is already broken), then answers them.
    fn flush(&mut self, batches: Vec<Pending>) {
        if batches.iter().any(|b| b.sync)
            && self.broken.is_none()
            && let Err(e) = self.log.sync()
        {
            tracing::warn!(error = %e, "the ledger's write-ahead log could not be synced");
            let why = format!("the ledger's write-ahead log could not be synced: {e}");
            // The failure is marked before writes stop, so a writer that finds the ledger
            // unwritable finds the failure too, and reopens the ledger before any recovery
            // (a recovery without that reopen would make durable what the log lost).
            self.failed.store(true, Ordering::Release);
            // Before anyone is answered: from now on `/healthz` is 503 and every write is
            // refused, until the writer has reopened the ledger and its recovery commits.
            self.shared.stop_writes(&why);
            self.broken = Some(why);
            (self.wake)();
        }
        // Durable now, all of them: what they wrote may be replayed from a snapshot, even by
        // the callers about to be answered. After a failed sync, replays of it wait for the
        // reopen (`Reset`).
        if self.broken.is_none()
            && let Some(last) = batches.iter().map(|b| b.lsn).max()
        {
            self.shared.release_upto(last);
        }
        for batch in batches {
            self.settle(batch);
        }
    }

    /// Answers the jobs of `batch`: with their own outcome if the log is sound, else with the
    /// failure (and their claims left for the sweep).
    fn settle(&self, batch: Pending) {
        for (job, outcome) in batch.settled {
            let outcome = match (&self.broken, outcome) {
                (Some(why), Ok(())) => {
                    if let Some(claim) = job.claim() {
                        self.shared.bury(claim);
                    }
                    Err(LedgerError::Unavailable(why.clone()))
                }
                (_, outcome) => outcome,
            };
            if outcome.is_ok() {
                job.publish(&self.feed);
            }
            job.finish(outcome);
        }
    }
}

/// The log, and whether its syncs fail as `IDEMPROXY_FAIL=ledger.sync` asks (a test hook).
struct Log {
    file: File,
    fail: bool,
}

impl Log {
    fn sync(&self) -> std::io::Result<()> {
        if self.fail {
            return Err(std::io::Error::other("fault injection: ledger.sync fails"));
        }
        self.file.sync_data()
    }
}
