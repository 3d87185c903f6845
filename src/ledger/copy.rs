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

pub(in crate::ledger) mod page;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};

use super::postgres::copy as postgres;
use super::redb::copy as redb;
use crate::config::{LedgerAt, PgUrl};
use crate::operation::State;
use crate::secret::{SECRET_ENV, SECRET_FILE_ENV, Secret};
pub use page::CopyError;
use page::{Entry, Header};

/// Entries per page: one read and one destination transaction each.
const PAGE: usize = 256;
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
