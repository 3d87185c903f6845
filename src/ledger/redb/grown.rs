//! The ledger file as redb's storage: redb's own `FileBackend` (its reads, writes, syncs and
//! file locks, so a second process is still refused), except that when redb grows the file it
//! writes zeros over the new range instead of leaving a hole.
//!
//! Why: redb grows the file with `set_len`, and a page later written into that hole makes
//! the commit's `fdatasync` also commit the file system's journal for the newly allocated
//! blocks; into blocks already written it does not, and costs about half
//! (docs/performance.md, "Written growth"). The zeros are what redb asks of new space anyway
//! ("new positions must be initialized to zero"), so nothing reads differently.
//!
//! It never changes what `len` reports (the file's length, exactly what redb set), never
//! writes below the old end of the file, and never syncs on its own: redb syncs the grown
//! file itself before its layout can reach the header. A shrink is redb's `set_len` as is.

use std::fs::File;
use std::io;
use std::ops::Bound;

use redb::backends::FileBackend;
use redb::{BackendError, DatabaseError, StorageBackend};

/// How many bytes of zeros one write puts down: growth is written in chunks of this size, so
/// a growth of hundreds of MiB never needs a buffer as large.
const CHUNK: usize = 1 << 20;

/// redb's file backend with written growth.
#[derive(Debug)]
pub(in crate::ledger) struct Grown {
    file: FileBackend,
}

impl Grown {
    pub(in crate::ledger) fn new(file: File) -> Result<Grown, DatabaseError> {
        Ok(Grown {
            file: FileBackend::new(file)?,
        })
    }

    /// Writes zeros over `from..to`, a range redb just added to the file.
    fn zero(&self, from: u64, to: u64) -> Result<(), io::Error> {
        let chunk = usize::try_from(to - from).map_or(CHUNK, |n| n.min(CHUNK));
        let zeros = vec![0u8; chunk];
        let mut at = from;
        while at < to {
            let n = usize::try_from(to - at).map_or(chunk, |n| n.min(chunk));
            self.file.write(at, &zeros[..n])?;
            at += n as u64;
        }
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

    /// redb's `set_len`; a growth then has its new range written with zeros. If that fails
    /// (a full disk), the file goes back to its old length, best effort, so the failed growth
    /// holds no space, and redb gets the error as from any failed resize.
    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let old = self.file.len()?;
        self.file.set_len(len)?;
        if len <= old {
            return Ok(());
        }
        self.zero(old, len).inspect_err(|_| {
            let _ = self.file.set_len(old);
        })
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
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
