//! The redb side of `ledger copy`: a file dumped from one read snapshot (opened read-only, so
//! a proxy holding the file refuses the copy and no proxy can start on it meanwhile), and a
//! file loaded one page per durable commit through the same table code every write uses.
//!
//! Reading never writes the source, with one exception redb itself imposes: a file left by a
//! process that was killed needs redb's repair before it can be read, which rebuilds redb's
//! own page bookkeeping and changes no operation, event or counter (any later open of the
//! file would do the same). A file with an earlier build's write-ahead log beside it is
//! refused, as by a start (`redb::old_log`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ::redb::{Database, DatabaseError, Durability, ReadOnlyDatabase, ReadTransaction};
use ::redb::{ReadableDatabase, WriteTransaction};

use super::{old_log, old_log_reason};
use crate::ledger::copy::page::{
    BY_PROXY, CopyError, Entry, Header, LEFT_UNFINISHED, Live, MARKED, PAGE_BYTES, Position,
    UNFINISHED, stored_bytes,
};
use crate::ledger::fault::Fault;
use crate::ledger::redb::store::Tables;
use crate::ledger::redb::{counts, tombstone};
use crate::ledger::redb::{meta, query};

/// The page cache of either file; a copy reads and writes each page once.
const CACHE_BYTES: usize = 32 << 20;

/// The source file, open for reading, and where the dump stands.
pub(in crate::ledger) struct Reader {
    name: String,
    /// The snapshot every page is read from; it keeps `_db` open.
    txn: Arc<ReadTransaction>,
    _db: Held,
    at: Position,
}

/// The database handle behind a `Reader`: read-only, or writable after redb's repair.
enum Held {
    ReadOnly(ReadOnlyDatabase),
    Repaired(Database),
}

impl Reader {
    pub(in crate::ledger) async fn open(path: &Path) -> Result<Reader, CopyError> {
        let owned = path.to_path_buf();
        blocking(&name(path), move || open_source(&owned)).await
    }

    pub(in crate::ledger) async fn header(&self) -> Result<Header, CopyError> {
        let txn = Arc::clone(&self.txn);
        let name = self.name.clone();
        let (secret_check, epoch) = blocking(&self.name, move || {
            meta::heritage(&txn).map_err(|fault| CopyError::Read {
                ledger: name,
                reason: fault.to_string(),
            })
        })
        .await?;
        Ok(Header {
            secret_check,
            epoch,
        })
    }

    /// The next up to `max` entries; empty at the end.
    pub(in crate::ledger) async fn page(&mut self, max: usize) -> Result<Vec<Entry>, CopyError> {
        let txn = Arc::clone(&self.txn);
        let at = self.at.clone();
        let name = self.name.clone();
        let (entries, next) = blocking(&self.name, move || {
            read_page(&txn, at, max).map_err(|fault| CopyError::Read {
                ledger: name,
                reason: fault.to_string(),
            })
        })
        .await?;
        self.at = next;
        Ok(entries)
    }
}

fn open_source(path: &Path) -> Result<Reader, CopyError> {
    let name = name(path);
    let read_error = |reason: String| CopyError::Read {
        ledger: name.clone(),
        reason,
    };
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CopyError::Missing { ledger: name });
        }
        Err(e) => return Err(read_error(e.to_string())),
        Ok(_) => {}
    }
    if let Some(log) = old_log(path) {
        return Err(read_error(old_log_reason(&log)));
    }
    let mut builder = Database::builder();
    builder.set_cache_size(CACHE_BYTES);
    let held = match builder.open_read_only(path) {
        Ok(db) => Held::ReadOnly(db),
        // Left by a killed process: only redb's repair (a writable open) can read it.
        Err(DatabaseError::RepairAborted) => repaired(&builder, path, &name)?,
        Err(e) => return Err(open_error(&name, e)),
    };
    let txn = match &held {
        Held::ReadOnly(db) => db.begin_read(),
        Held::Repaired(db) => db.begin_read(),
    };
    let txn = txn.map_err(|e| read_error(e.to_string()))?;
    // A partial copy would be copied whole, and the mark that keeps it from opening lost.
    match meta::copy_unfinished_in(&txn) {
        Ok(false) => {}
        Ok(true) => return Err(read_error(UNFINISHED.to_owned())),
        Err(fault) => return Err(read_error(fault.to_string())),
    }
    Ok(Reader {
        name,
        txn: Arc::new(txn),
        _db: held,
        at: Position::Live(None),
    })
}

/// The file opened writable: redb repairs what a killed process left (what any later start
/// would do).
fn repaired(builder: &::redb::Builder, path: &Path, name: &str) -> Result<Held, CopyError> {
    let db = builder.open(path).map_err(|e| open_error(name, e))?;
    Ok(Held::Repaired(db))
}

fn open_error(name: &str, e: DatabaseError) -> CopyError {
    match e {
        DatabaseError::DatabaseAlreadyOpen => CopyError::InUse {
            ledger: name.to_owned(),
            by: BY_PROXY,
        },
        e => CopyError::Read {
            ledger: name.to_owned(),
            reason: e.to_string(),
        },
    }
}

/// One page from `at`, and where the next one starts.
fn read_page(
    txn: &ReadTransaction,
    at: Position,
    max: usize,
) -> Result<(Vec<Entry>, Position), Fault> {
    match at {
        Position::Live(after) => {
            let ops = query::ops_after(txn, after.as_deref(), max)?;
            let Some(first) = ops.first().map(|op| op.id.clone()) else {
                return read_page(txn, Position::Tombs(None), max);
            };
            let mut entries = Vec::with_capacity(ops.len());
            let (mut last, mut bytes) = (first, 0u64);
            for op in ops {
                last.clone_from(&op.id);
                let live = live(txn, op)?;
                bytes = bytes.saturating_add(stored_bytes(&live));
                entries.push(Entry::Live(Box::new(live)));
                if bytes >= PAGE_BYTES {
                    break;
                }
            }
            Ok((entries, Position::Live(Some(last))))
        }
        Position::Tombs(after) => {
            let tombs = tombstone::after(txn, after.as_deref(), max)?;
            let Some(last) = tombs.last().map(|op| op.id.clone()) else {
                return Ok((Vec::new(), Position::Done));
            };
            let entries = tombs
                .into_iter()
                .map(|t| Entry::Tombstone(Box::new(t)))
                .collect();
            Ok((entries, Position::Tombs(Some(last))))
        }
        Position::Done => Ok((Vec::new(), Position::Done)),
    }
}

/// `op` with everything kept beside it.
fn live(txn: &ReadTransaction, op: crate::operation::Operation) -> Result<Live, Fault> {
    let id = op.id.as_str();
    Ok(Live {
        events: query::events(txn, id)?,
        response: query::response(txn, id)?,
        request: query::kept_request(txn, id)?,
        replays: counts::get(txn, id)?,
        op,
    })
}

/// The destination file, open for writing.
pub(in crate::ledger) struct Loader {
    name: String,
    db: Arc<Database>,
}

impl Loader {
    /// Opens (or creates) the file and checks it is empty, writing nothing.
    pub(in crate::ledger) async fn open(path: &Path) -> Result<Loader, CopyError> {
        let owned = path.to_path_buf();
        blocking(&name(path), move || open_target(owned)).await
    }

    pub(in crate::ledger) async fn begin(&self, header: &Header) -> Result<(), CopyError> {
        let check = header.secret_check.clone();
        let epoch = header.epoch;
        self.write("", move |txn| {
            meta::mark_copying(txn, true)?;
            meta::inherit(txn, check.as_deref(), epoch)?;
            // Every table exists from the first commit on, as after a first open.
            Tables::open(txn)?.close()
        })
        .await
    }

    pub(in crate::ledger) async fn load(&self, page: Vec<Entry>) -> Result<(), CopyError> {
        self.write(MARKED, move |txn| {
            let mut tables = Tables::open(txn)?;
            for entry in page {
                match entry {
                    Entry::Live(live) => tables.load_live(*live)?,
                    Entry::Tombstone(tomb) => tables.load_tombstone(&tomb)?,
                }
            }
            tables.close()
        })
        .await
    }

    pub(in crate::ledger) async fn finish(&self) -> Result<(), CopyError> {
        self.write(MARKED, |txn| meta::mark_copying(txn, false))
            .await
    }

    /// Runs `f` in one durable write transaction; `after` says what a failure leaves.
    async fn write(
        &self,
        after: &'static str,
        f: impl FnOnce(&WriteTransaction) -> Result<(), Fault> + Send + 'static,
    ) -> Result<(), CopyError> {
        let db = Arc::clone(&self.db);
        let name = self.name.clone();
        blocking(&self.name, move || {
            commit(&db, f).map_err(|fault| CopyError::Write {
                ledger: name,
                reason: fault.to_string(),
                after,
            })
        })
        .await
    }
}

fn commit(
    db: &Database,
    f: impl FnOnce(&WriteTransaction) -> Result<(), Fault>,
) -> Result<(), Fault> {
    let mut txn = db.begin_write().map_err(Fault::from)?;
    txn.set_durability(Durability::Immediate)
        .map_err(Fault::from)?;
    match f(&txn) {
        Ok(()) => txn.commit().map_err(Fault::from),
        Err(fault) => {
            let _ = txn.abort();
            Err(fault)
        }
    }
}

fn open_target(path: PathBuf) -> Result<Loader, CopyError> {
    let name = name(&path);
    let write_error = |reason: String| CopyError::Write {
        ledger: name.clone(),
        reason,
        after: "",
    };
    if let Some(log) = old_log(&path) {
        return Err(write_error(old_log_reason(&log)));
    }
    // Looked at read-only first, so a refused destination keeps every byte.
    if path.exists() {
        let mut builder = Database::builder();
        builder.set_cache_size(CACHE_BYTES);
        match builder.open_read_only(&path) {
            Ok(db) => {
                let txn = db.begin_read().map_err(|e| write_error(e.to_string()))?;
                refuse_unless_empty(&name, &txn)?;
            }
            // Left by a killed process: looked at after the repair of the writable open.
            Err(DatabaseError::RepairAborted) => {}
            Err(DatabaseError::DatabaseAlreadyOpen) => {
                return Err(CopyError::InUse {
                    ledger: name,
                    by: BY_PROXY,
                });
            }
            Err(e) => return Err(write_error(e.to_string())),
        }
    } else if let Some(parent) = path.parent() {
        crate::durable::create_dir_all(parent).map_err(|e| write_error(e.to_string()))?;
    }
    let db = match super::create_database(&path) {
        Ok(db) => db,
        Err(DatabaseError::DatabaseAlreadyOpen) => {
            return Err(CopyError::InUse {
                ledger: name,
                by: BY_PROXY,
            });
        }
        Err(e) => return Err(write_error(e.to_string())),
    };
    let txn = db.begin_read().map_err(|e| write_error(e.to_string()))?;
    refuse_unless_empty(&name, &txn)?;
    drop(txn);
    Ok(Loader {
        name,
        db: Arc::new(db),
    })
}

/// `NotEmpty` unless the ledger holds no operation and no tombstone.
fn refuse_unless_empty(name: &str, txn: &ReadTransaction) -> Result<(), CopyError> {
    let looked = (|| {
        let empty = query::ops_after(txn, None, 1)?.is_empty()
            && tombstone::after(txn, None, 1)?.is_empty();
        Ok::<_, Fault>((empty, meta::copy_unfinished_in(txn)?))
    })();
    match looked {
        Ok((true, _)) => Ok(()),
        Ok((false, unfinished)) => Err(CopyError::NotEmpty {
            ledger: name.to_owned(),
            hint: if unfinished { LEFT_UNFINISHED } else { "" },
        }),
        Err(fault) => Err(CopyError::Write {
            ledger: name.to_owned(),
            reason: fault.to_string(),
            after: "",
        }),
    }
}

fn name(path: &Path) -> String {
    path.display().to_string()
}

/// Runs blocking redb work off the async workers.
async fn blocking<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> Result<T, CopyError> + Send + 'static,
) -> Result<T, CopyError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) => Err(CopyError::Read {
            ledger: name.to_owned(),
            reason: e.to_string(),
        }),
    }
}
