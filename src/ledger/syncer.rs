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
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
use std::time::Duration;

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
        let mut state = Thread {
            log: Log {
                file: log,
                fail: super::fault_point("ledger.sync"),
                pause_after_failure: pause_after_failure(),
            },
            shared,
            feed,
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
                        self.shared.reset_done();
                    }
                }
                next = inbox.try_recv().ok();
            }
            self.flush(batches);
        }
    }

    /// Syncs the log once for `batches` (unless it is already broken), then answers them.
    fn flush(&mut self, batches: Vec<Pending>) {
        let synced = if batches.iter().any(|b| b.sync) && self.broken.is_none() {
            self.log.sync()
        } else {
            Ok(())
        };
        if let Err(e) = synced {
            tracing::warn!(error = %e, "the ledger's write-ahead log could not be synced");
            let why = format!("the ledger's write-ahead log could not be synced: {e}");
            // Their claims first, so the recovery that follows the failure sweeps them; then,
            // in one step and before anyone is answered, writes stop (`/healthz` is 503) and
            // the writer is told to reopen the ledger before any recovery.
            self.bury(&batches);
            self.shared.sync_failed(&why);
            if let Some(pause) = self.log.pause_after_failure {
                std::thread::sleep(pause);
            }
            (self.wake)();
            self.broken = Some(why);
        } else if self.broken.is_some() {
            self.bury(&batches);
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

    /// Leaves the claims `batches` made for the sweep: their log frames are not durable.
    fn bury(&self, batches: &[Pending]) {
        for (job, outcome) in batches.iter().flat_map(|b| &b.settled) {
            if outcome.is_ok()
                && let Some(claim) = job.claim()
            {
                self.shared.bury(claim);
            }
        }
    }

    /// Answers the jobs of `batch`: with their own outcome if the log is sound, else with the
    /// failure (their claims were left for the sweep in `flush`).
    fn settle(&self, batch: Pending) {
        for (job, outcome) in batch.settled {
            let outcome = match (&self.broken, outcome) {
                (Some(why), Ok(())) => Err(LedgerError::Unavailable(why.clone())),
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
    /// How long the syncer waits after a failed sync has stopped writes, before it wakes the
    /// writer and answers anyone, as `IDEMPROXY_SYNC_FAILURE_PAUSE_MS` asks (a test hook): it
    /// holds that window open so a test can send a write into it.
    pause_after_failure: Option<Duration>,
}

fn pause_after_failure() -> Option<Duration> {
    std::env::var("IDEMPROXY_SYNC_FAILURE_PAUSE_MS")
        .ok()
        .and_then(|ms| ms.trim().parse().ok())
        .map(Duration::from_millis)
}

impl Log {
    fn sync(&self) -> std::io::Result<()> {
        if self.fail {
            return Err(std::io::Error::other("fault injection: ledger.sync fails"));
        }
        self.file.sync_data()
    }
}
