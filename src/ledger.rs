//! The durable ledger: operations, their events and their stored responses, in redb.
//!
//! This module owns the on-disk layout and the single writer. Its public surface is a small
//! domain API (`open`, `update`, `get`, `events`, `response`, `list`, `prune`, `stats`) whose
//! semantics a SQL backend could match; no redb type ever leaves it. Every write is one durable
//! commit (`Durability::Immediate`) made by one writer thread fed by a channel, so that later
//! several queued writes can share one commit (group commit). It never decides what a request
//! means: callers pass a closure that sees the current operation and says what to write.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use http::HeaderMap;

use crate::clock::Timestamp;
use crate::policy::Effect;

/// The five states of SPEC section 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    Prepared,
    InFlight,
    Succeeded,
    Failed,
    Unknown,
}

impl State {
    pub const ALL: [State; 5] = [
        State::Prepared,
        State::InFlight,
        State::Succeeded,
        State::Failed,
        State::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Prepared => "prepared",
            State::InFlight => "in_flight",
            State::Succeeded => "succeeded",
            State::Failed => "failed",
            State::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<State> {
        State::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

/// Where an operation stands with respect to the human gate (`approval = "required"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approval {
    /// The route needs no approval.
    NotRequired,
    /// Waiting for an operator.
    Pending,
    Approved,
    /// Rejected by an operator: failed for good.
    Rejected,
}

/// Summary of the stored response, as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseMeta {
    pub status: u16,
    pub body_bytes: u64,
    pub body_sha256: String,
}

/// One operation: a business intent identified by its operation ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// `{provider}/{route}/{rendered}`; the ledger key.
    pub id: String,
    pub provider: String,
    pub route: String,
    pub effect: Effect,
    pub state: State,
    /// Hex sha256 of the canonical parameters.
    pub fingerprint: String,
    /// Field path -> short hash of its value, to name differing fields in a conflict.
    pub fields: BTreeMap<String, String>,
    pub idempotency_key: String,
    pub attempts: u32,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// When the first claim was committed: the earliest moment the provider could see the key.
    pub first_dispatched_at: Option<Timestamp>,
    pub last_dispatched_at: Option<Timestamp>,
    pub provider_request_id: Option<String>,
    pub response: Option<ResponseMeta>,
    pub error: Option<String>,
    /// Fencing token of the claim that owns this operation while `in_flight`; 0 for none.
    pub fence: u64,
    pub approval: Approval,
}

/// A response exactly as it will be replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    /// Already stripped of hop-by-hop, `set-cookie` and redacted headers.
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// The event kinds of SPEC section 7.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Prepared,
    Claimed,
    ProviderRequested,
    ProviderResponded,
    ResultPersisted,
    Replayed,
    Conflict,
    Orphaned,
    Unknown,
    ReconcileStarted,
    ReconcileFound,
    ReconcileNotFound,
    OperatorResolved,
    OperatorApproved,
    OperatorRejected,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Prepared => "operation.prepared",
            EventKind::Claimed => "operation.claimed",
            EventKind::ProviderRequested => "provider.requested",
            EventKind::ProviderResponded => "provider.responded",
            EventKind::ResultPersisted => "result.persisted",
            EventKind::Replayed => "operation.replayed",
            EventKind::Conflict => "operation.conflict",
            EventKind::Orphaned => "operation.orphaned",
            EventKind::Unknown => "operation.unknown",
            EventKind::ReconcileStarted => "reconcile.started",
            EventKind::ReconcileFound => "reconcile.found",
            EventKind::ReconcileNotFound => "reconcile.not_found",
            EventKind::OperatorResolved => "operator.resolved",
            EventKind::OperatorApproved => "operator.approved",
            EventKind::OperatorRejected => "operator.rejected",
        }
    }
}

/// One entry of an operation's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub at: Timestamp,
    pub kind: EventKind,
    pub attempt: u32,
    /// Words for a person; never a header value or a request body.
    pub detail: String,
}

/// What an `update` closure asks the ledger to write, atomically and durably.
#[derive(Debug, Clone)]
pub struct Write {
    /// The operation's new record (created if it did not exist).
    pub op: Operation,
    /// Appended to the operation's history, in order.
    pub events: Vec<Event>,
    /// Replaces the stored response when `Some`.
    pub response: Option<StoredResponse>,
}

/// Filters of `GET /ops`; `None` matches all.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub state: Option<State>,
    pub provider: Option<String>,
    pub route: Option<String>,
}

/// One page of `list`, newest first.
#[derive(Debug, Clone)]
pub struct Page {
    pub ops: Vec<Operation>,
    /// Opaque cursor for the next page; `None` at the end.
    pub next: Option<String>,
}

/// Counts for metrics, kept up to date by every write (no scan).
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub by_state: BTreeMap<&'static str, u64>,
    pub oldest_unknown: Option<Timestamp>,
    pub oldest_in_flight: Option<Timestamp>,
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("the ledger at {path} cannot be opened: {reason}")]
    Open { path: String, reason: String },
    #[error("the ledger cannot record: {0}")]
    Unavailable(String),
    #[error("invalid cursor")]
    BadCursor,
}

/// A cheap `Clone` handle to the ledger.
#[derive(Clone)]
pub struct Ledger {}

impl Ledger {
    /// Opens (or creates) the ledger; every `in_flight` operation left by an earlier process
    /// becomes `unknown` with an `operation.orphaned` event. Returns how many were orphaned.
    pub async fn open(_path: &Path, _now: Timestamp) -> Result<(Ledger, usize), LedgerError> {
        todo!()
    }
}
