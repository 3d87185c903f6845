//! `idemproxy ledger copy`: every operation, event, stored response, kept first request,
//! replay count and tombstone of one ledger, and the installation secret's check value,
//! copied into another (docs/reference.md section 9.2), whichever backend holds each.
//!
//! The copy goes through a backend-neutral record, `Entry`: each backend dumps its ledger as
//! pages of entries in ID order (live operations, then tombstones) from one read snapshot,
//! and loads a page in one transaction. The source is read raw, never through
//! `Ledger::open`, which would orphan its in-flight operations and bump its boot epoch: a
//! copy leaves its source exactly as it was. The destination must hold no operation and no
//! tombstone; it is marked unfinished by its first commit and complete by its last, and a
//! ledger so marked refuses to open, so a copy that stopped half way is never served. This
//! module copies values and never decides what they mean: an `in_flight` operation stays
//! `in_flight`, and the destination's first open orphans it as the source's would have.

mod redb;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};

use super::Replays;
use super::postgres::copy as postgres;
use crate::config::{LedgerAt, PgUrl};
use crate::operation::{Event, Operation, RequestChange, State, StoredResponse, Write};
use crate::secret::{SECRET_ENV, SECRET_FILE_ENV, Secret};

/// Entries per page: one read and one destination transaction each.
const PAGE: usize = 256;
/// A page also ends once its stored responses and kept requests reach this many bytes (a
/// response may be up to `max_stored_response`), so a copy's memory stays bounded.
pub(super) const PAGE_BYTES: u64 = 32 << 20;

/// The bytes of `live` that may be large: its stored response's body and its kept request.
pub(super) fn stored_bytes(live: &Live) -> u64 {
    let body = live.response.as_ref().map_or(0, |r| r.body.len());
    let request = live.request.as_ref().map_or(0, Vec::len);
    u64::try_from(body + request).unwrap_or(u64::MAX)
}

/// How many of the entries whose stored bytes are `sizes` (in order) one page takes: until
/// they reach `PAGE_BYTES`, the one that reaches it included, at least one.
pub(super) fn within_page(sizes: impl IntoIterator<Item = u64>) -> usize {
    let mut total = 0u64;
    let mut taken = 0;
    for size in sizes {
        taken += 1;
        total = total.saturating_add(size);
        if total >= PAGE_BYTES {
            break;
        }
    }
    taken
}

/// Why a ledger marked by an unfinished copy refuses to open.
pub(super) const UNFINISHED: &str = "an `idemproxy ledger copy` into it did not finish, so it \
    holds only part of its source; delete it and run the copy again";

/// One operation as a ledger holds it, whichever backend.
pub(super) enum Entry {
    Live(Box<Live>),
    /// A pruned operation's tombstone (`pruned_at` set).
    Tombstone(Box<Operation>),
}

/// A live operation with everything kept beside it.
pub(super) struct Live {
    pub(super) op: Operation,
    /// Its history, in the order it was written.
    pub(super) events: Vec<Event>,
    pub(super) response: Option<StoredResponse>,
    /// The sealed first request, kept while it may be re-sent.
    pub(super) request: Option<Vec<u8>>,
    pub(super) replays: Option<Replays>,
}

impl Live {
    /// The `Write` that creates this operation on the destination as its source held it
    /// (every backend's loader applies it with its own `apply`), and its replay count.
    pub(super) fn into_write(self) -> (Write, Option<Replays>) {
        let write = Write {
            op: self.op,
            events: self.events,
            response: self.response,
            request: self
                .request
                .map_or(RequestChange::Keep, RequestChange::Store),
        };
        (write, self.replays)
    }
}

/// Where a dump stands: live operations in ID order (after this ID), then tombstones in ID
/// order (bytewise, as both backends sort IDs).
#[derive(Clone)]
pub(super) enum Position {
    Live(Option<String>),
    Tombs(Option<String>),
    Done,
}

/// What a ledger holds besides its entries, and a copy inherits.
pub(super) struct Header {
    /// The installation secret's check value (never the secret).
    pub(super) secret_check: Option<String>,
    /// The highest fence epoch the ledger has issued, so the copy never issues one again.
    pub(super) epoch: u64,
}

/// Where a ledger is, as `--from` or `--to` names it: a PostgreSQL URL (`postgres://`,
/// `postgresql://`), else a redb file path.
pub fn parse(text: &str) -> Result<LedgerAt, CopyError> {
    if LedgerAt::is_postgres_url(text) {
        return PgUrl::parse(text)
            .map(LedgerAt::Postgres)
            .map_err(CopyError::Usage);
    }
    if text.is_empty() {
        return Err(CopyError::Usage(
            "an empty ledger path (give a redb file, e.g. \"data/ledger.redb\", or a \
             postgres:// URL)"
                .to_owned(),
        ));
    }
    Ok(LedgerAt::File(PathBuf::from(text)))
}

/// Why a copy did not happen (or did not finish); each names the ledger and what to do.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The command line names no ledger it could copy (exit 2).
    #[error("{0}")]
    Usage(String),
    #[error("the ledger {ledger} does not exist")]
    Missing { ledger: String },
    #[error(
        "the ledger {ledger} is in use {by}; stop it first (a copy needs a ledger nobody writes)"
    )]
    InUse {
        ledger: String,
        /// By what: `BY_PROXY` or `BY_REPLICA`.
        by: &'static str,
    },
    #[error(
        "the ledger {ledger} already holds operations or tombstones; copy into a new or empty \
         ledger (nothing was changed){hint}"
    )]
    NotEmpty { ledger: String, hint: &'static str },
    #[error("cannot read the ledger {ledger}: {reason}")]
    Read { ledger: String, reason: String },
    #[error("cannot write the ledger {ledger}: {reason}{after}")]
    Write {
        ledger: String,
        reason: String,
        /// What the failure left behind, once the copy had begun writing.
        after: &'static str,
    },
}

impl CopyError {
    /// The exit code of `idemproxy ledger copy` for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CopyError::Usage(_) => 2,
            _ => 1,
        }
    }
}

/// The `by` of `InUse` for a redb file (its lock is held).
pub(super) const BY_PROXY: &str = "by a running proxy";
/// The `by` of `InUse` for a database on which a replica's lease is live.
pub(super) const BY_REPLICA: &str = "by a replica whose lease is live (every replica must be \
    stopped; a stopped one's lease lapses within its `[replicas] lease`)";

/// The `hint` of `NotEmpty` for a destination an earlier copy left unfinished.
pub(super) const LEFT_UNFINISHED: &str =
    "; it holds an earlier copy that did not finish: delete it first";
/// The `after` of `Write` once the destination is marked unfinished.
pub(super) const MARKED: &str = "; it now holds part of the copy and refuses to open: delete it and run \
    the copy again";

/// What a copy copied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Copied {
    pub operations: u64,
    pub events: u64,
    pub tombstones: u64,
    pub responses: u64,
    /// Kept (sealed) first requests.
    pub requests: u64,
    /// Operations with a replay count.
    pub replays: u64,
    /// Operations copied `in_flight`: the destination's first open makes them `unknown`.
    pub in_flight: u64,
    /// Whether the source kept a secret check value (the destination now keeps it too).
    pub secret_check: bool,
}

impl Copied {
    fn count(&mut self, page: &[Entry]) {
        for entry in page {
            match entry {
                Entry::Live(live) => {
                    self.operations += 1;
                    self.events += live.events.len() as u64;
                    self.responses += u64::from(live.response.is_some());
                    self.requests += u64::from(live.request.is_some());
                    self.replays += u64::from(live.replays.is_some());
                    self.in_flight += u64::from(live.op.state == State::InFlight);
                }
                Entry::Tombstone(_) => self.tombstones += 1,
            }
        }
    }
}

impl fmt::Display for Copied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "copied {} operations, {} events, {} tombstones ({} stored responses, {} kept \
             requests, {} replay counts)",
            self.operations,
            self.events,
            self.tombstones,
            self.responses,
            self.requests,
            self.replays
        )
    }
}

/// What the operator should know after a copy: which secret the destination needs, and what
/// its first open does to the operations copied in flight.
pub fn notes(from: &LedgerAt, to: &LedgerAt, copied: &Copied) -> Vec<String> {
    let mut notes = Vec::new();
    if copied.secret_check {
        let how = match (from, to) {
            (_, LedgerAt::Postgres(_)) => {
                format!("set {SECRET_ENV} or {SECRET_FILE_ENV} to it on every replica")
            }
            (LedgerAt::Postgres(_), LedgerAt::File(_)) => {
                format!("set {SECRET_ENV} or {SECRET_FILE_ENV} to it")
            }
            (LedgerAt::File(from), LedgerAt::File(to)) => format!(
                "set {SECRET_ENV} (or {SECRET_FILE_ENV}) to it, or copy its file ({} unless \
                 {SECRET_FILE_ENV} named another) to {}",
                Secret::default_path(from).display(),
                Secret::default_path(to).display()
            ),
        };
        notes.push(format!(
            "{to} opens only with the installation secret {from} was used with: {how}"
        ));
    }
    if copied.in_flight > 0 {
        notes.push(format!(
            "{} operations were copied in flight; the first proxy to open {to} makes them \
             unknown (operation.orphaned), as it would have on {from}",
            copied.in_flight
        ));
    }
    notes
}

/// Copies the ledger at `from` into the ledger at `to`, which must hold no operation and no
/// tombstone (a file that does not exist is created). Reads `from` without changing it; a
/// redb file a running proxy holds is refused. On an error before the first write `to` is
/// unchanged; after it, `to` refuses to open until deleted (see the module doc).
pub async fn copy(from: &LedgerAt, to: &LedgerAt) -> Result<Copied, CopyError> {
    if same_place(from, to) {
        return Err(CopyError::Usage(format!(
            "--from and --to name the same ledger ({from})"
        )));
    }
    let mut source = Source::open(from).await?;
    let header = source.header().await?;
    let target = Target::open(to).await?;
    target.begin(&header).await?;
    let mut copied = Copied {
        secret_check: header.secret_check.is_some(),
        ..Copied::default()
    };
    loop {
        let page = source.page(PAGE).await?;
        if page.is_empty() {
            break;
        }
        copied.count(&page);
        target.load(page).await?;
    }
    target.finish().await?;
    Ok(copied)
}

/// Whether both name the same ledger (a file by its canonical path when it exists).
fn same_place(a: &LedgerAt, b: &LedgerAt) -> bool {
    match (a, b) {
        (LedgerAt::File(a), LedgerAt::File(b)) => canonical(a) == canonical(b),
        (a, b) => a == b,
    }
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The ledger being read, whichever backend.
enum Source {
    Redb(redb::Reader),
    Postgres(postgres::Reader),
}

impl Source {
    async fn open(at: &LedgerAt) -> Result<Source, CopyError> {
        match at {
            LedgerAt::File(path) => redb::Reader::open(path).await.map(Source::Redb),
            LedgerAt::Postgres(url) => postgres::Reader::open(url).await.map(Source::Postgres),
        }
    }

    async fn header(&self) -> Result<Header, CopyError> {
        match self {
            Source::Redb(reader) => reader.header().await,
            Source::Postgres(reader) => reader.header().await,
        }
    }

    /// The next up to `max` entries; empty at the end.
    async fn page(&mut self, max: usize) -> Result<Vec<Entry>, CopyError> {
        match self {
            Source::Redb(reader) => reader.page(max).await,
            Source::Postgres(reader) => reader.page(max).await,
        }
    }
}

/// The ledger being written, whichever backend.
enum Target {
    Redb(redb::Loader),
    Postgres(postgres::Loader),
}

impl Target {
    /// Opens (or creates) it and checks that it is empty; writes nothing but, for a
    /// PostgreSQL database without one, the empty schema.
    async fn open(at: &LedgerAt) -> Result<Target, CopyError> {
        match at {
            LedgerAt::File(path) => redb::Loader::open(path).await.map(Target::Redb),
            LedgerAt::Postgres(url) => postgres::Loader::open(url).await.map(Target::Postgres),
        }
    }

    /// The first commit: the mark of an unfinished copy and what the copy inherits.
    async fn begin(&self, header: &Header) -> Result<(), CopyError> {
        match self {
            Target::Redb(loader) => loader.begin(header).await,
            Target::Postgres(loader) => loader.begin(header).await,
        }
    }

    /// One page, in one transaction.
    async fn load(&self, page: Vec<Entry>) -> Result<(), CopyError> {
        match self {
            Target::Redb(loader) => loader.load(page).await,
            Target::Postgres(loader) => loader.load(page).await,
        }
    }

    /// The last commit: the copy is complete.
    async fn finish(&self) -> Result<(), CopyError> {
        match self {
            Target::Redb(loader) => loader.finish().await,
            Target::Postgres(loader) => loader.finish().await,
        }
    }
}
