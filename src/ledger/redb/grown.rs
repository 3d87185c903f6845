//! The ledger file as redb's storage: redb's own `FileBackend` (its reads, writes, syncs and
//! file locks, so a second process is still refused), except that no page is written into a
//! hole of the file: before a write that reaches past the part of the file already written,
//! that part is extended with zeros, a bounded step (`AHEAD`) beyond the write.
//!
//! Why: redb grows the file with `set_len`, which leaves the new range a hole, and a commit
//! whose pages land in a hole makes its `fdatasync` also commit the file system's journal
//! for the newly allocated blocks; into blocks already written it does not, and costs about
//! half (docs/performance.md, "Written growth"). Zeros are what redb asks of new space
//! ("new positions must be initialized to zero"), so nothing reads differently. The zeros go
//! down a step at a time, with the writes that need them, rather than over the whole growth
//! when the file grows: a large ledger doubles its length in one growth (gigabytes), and
//! neither the writer's pause nor the disk space of writing all of that at once is wanted.
//!
//! It never changes the file's length (`len` is exactly what redb set), never writes zeros
//! where anything was written since the file was opened, and never syncs on its own: the
//! zeros reach the disk with the commit whose pages needed them.

use std::fs::File;
use std::io;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use redb::backends::FileBackend;
use redb::{BackendError, DatabaseError, StorageBackend};

/// How far past a write that reaches the unwritten part of the file the zeros go: one step
/// serves the commits of many batches, and bounds what one write waits for.
const AHEAD: u64 = 4 << 20;
/// The bytes of zeros one system call writes: one page of redb's. The file system caches a
/// file in folios sized by the writes that made them, and writes a dirty folio back whole; so
/// zeros written a MiB at a time would make every later 4 KiB page that redb writes there
/// cost the sync a MiB.
const CHUNK: usize = 4096;

/// redb's file backend, with no page written into a hole.
#[derive(Debug)]
pub(in crate::ledger) struct Grown {
    file: FileBackend,
    /// Below this offset the file has no hole this backend knows of: at open, its length
    /// (what an earlier process left is taken as it is); then as far as zeros or pages have
    /// been written. Moves only with `ahead` held; read without it by the writes below it.
    written: AtomicU64,
    /// Held while the file's length or `written` changes, so a page never races the zeros.
    ahead: Mutex<()>,
}

impl Grown {
    pub(in crate::ledger) fn new(file: File) -> Result<Grown, DatabaseError> {
        let file = FileBackend::new(file)?;
        let written = file.len().map_err(redb::StorageError::from)?;
        Ok(Grown {
            file,
            written: AtomicU64::new(written),
            ahead: Mutex::new(()),
        })
    }

    /// Writes zeros from `written` to `AHEAD` past `end` (not past the file's end), unless
    /// another write has already done so.
    fn zero_up_to(&self, end: u64) -> Result<(), io::Error> {
        let _ahead = self.ahead.lock().unwrap_or_else(PoisonError::into_inner);
        let from = self.written.load(Ordering::Acquire);
        if end <= from {
            return Ok(());
        }
        let to = self.file.len()?.min(end.saturating_add(AHEAD)).max(from);
        let chunk = usize::try_from(to - from).map_or(CHUNK, |n| n.min(CHUNK));
        let zeros = vec![0u8; chunk];
        let mut at = from;
        while at < to {
            let n = usize::try_from(to - at).map_or(chunk, |n| n.min(chunk));
            self.file.write(at, &zeros[..n])?;
            at += n as u64;
        }
        // A write past the file's end extends it, and leaves no hole below its own end.
        self.written.store(to.max(end), Ordering::Release);
        Ok(())
    }
}

impl StorageBackend for Grown {
    fn len(&self) -> Result<u64, io::Error> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.file.read(offset, out)
    }

    /// redb's `set_len`, as is: a growth adds a hole, which later writes fill as they reach it.
    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let _ahead = self.ahead.lock().unwrap_or_else(PoisonError::into_inner);
        self.file.set_len(len)?;
        self.written.fetch_min(len, Ordering::AcqRel);
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let end = offset.saturating_add(data.len() as u64);
        if end > self.written.load(Ordering::Acquire) {
            self.zero_up_to(end)?;
        }
        self.file.write(offset, data)
    }

    fn close(&self) -> Result<(), io::Error> {
        self.file.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}
