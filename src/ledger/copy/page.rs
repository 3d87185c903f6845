//! What both backends' halves of `ledger copy` share (`copy`): the backend-neutral record a
//! ledger is dumped and loaded as (`Entry`), where a dump stands, what a ledger hands on to
//! its copy, how big a page may grow, and the errors and their words. It names no backend.

use super::super::Replays;
use crate::operation::{Event, Operation, RequestChange, StoredResponse, Write};

/// A page also ends once its stored responses and kept requests reach this many bytes (a
/// response may be up to `max_stored_response`), so a copy's memory stays bounded.
pub(in crate::ledger) const PAGE_BYTES: u64 = 32 << 20;

/// The bytes of `live` that may be large: its stored response's body and its kept request.
pub(in crate::ledger) fn stored_bytes(live: &Live) -> u64 {
    let body = live.response.as_ref().map_or(0, |r| r.body.len());
    let request = live.request.as_ref().map_or(0, Vec::len);
    u64::try_from(body + request).unwrap_or(u64::MAX)
}

/// How many of the entries whose stored bytes are `sizes` (in order) one page takes: until
/// they reach `PAGE_BYTES`, the one that reaches it included, at least one.
pub(in crate::ledger) fn within_page(sizes: impl IntoIterator<Item = u64>) -> usize {
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
pub(in crate::ledger) const UNFINISHED: &str = "an `idemproxy ledger copy` into it did not finish, so it \
    holds only part of its source; delete it and run the copy again";

/// One operation as a ledger holds it, whichever backend.
pub(in crate::ledger) enum Entry {
    Live(Box<Live>),
    /// A pruned operation's tombstone (`pruned_at` set).
    Tombstone(Box<Operation>),
}

/// A live operation with everything kept beside it.
pub(in crate::ledger) struct Live {
    pub(in crate::ledger) op: Operation,
    /// Its history, in the order it was written.
    pub(in crate::ledger) events: Vec<Event>,
    pub(in crate::ledger) response: Option<StoredResponse>,
    /// The sealed first request, kept while it may be re-sent.
    pub(in crate::ledger) request: Option<Vec<u8>>,
    pub(in crate::ledger) replays: Option<Replays>,
}

impl Live {
    /// The `Write` that creates this operation on the destination as its source held it
    /// (every backend's loader applies it with its own `apply`), and its replay count.
    pub(in crate::ledger) fn into_write(self) -> (Write, Option<Replays>) {
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
pub(in crate::ledger) enum Position {
    Live(Option<String>),
    Tombs(Option<String>),
    Done,
}

/// What a ledger holds besides its entries, and a copy inherits.
pub(in crate::ledger) struct Header {
    /// The installation secret's check value (never the secret).
    pub(in crate::ledger) secret_check: Option<String>,
    /// The highest fence epoch the ledger has issued, so the copy never issues one again.
    pub(in crate::ledger) epoch: u64,
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
pub(in crate::ledger) const BY_PROXY: &str = "by a running proxy";
/// The `by` of `InUse` for a database on which a replica's lease is live.
pub(in crate::ledger) const BY_REPLICA: &str = "by a replica whose lease is live (every replica must be \
    stopped; a stopped one's lease lapses within its `[replicas] lease`)";

/// The `hint` of `NotEmpty` for a destination an earlier copy left unfinished.
pub(in crate::ledger) const LEFT_UNFINISHED: &str =
    "; it holds an earlier copy that did not finish: delete it first";
/// The `after` of `Write` once the destination is marked unfinished.
pub(in crate::ledger) const MARKED: &str = "; it now holds part of the copy and refuses to open: delete it and run \
    the copy again";
