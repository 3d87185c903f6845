//! The operation model: an operation, its state and approval, its history's events, its
//! stored response and the `Write` a decision asks the ledger for.
//!
//! These are the domain types that `decide`, `claim`, the admin API and every ledger backend
//! share; the decision depends on them, never on storage. This module must never do I/O or
//! know how a backend keeps these values: it holds plain data and the few pure helpers on it.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::HeaderMap;
use sha2::{Digest, Sha256};

use crate::clock::Timestamp;
use crate::policy::{Effect, KeyPlacement};

/// The five states of docs/reference.md section 5.2.
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
    /// Where the key travels, as the first attempt sent it (header or JSON body field);
    /// every re-send and lookup uses this, whatever the policy says today. `None` only for
    /// operations written before it was recorded.
    pub key_placement: Option<KeyPlacement>,
    pub attempts: u32,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// When the first claim was committed: the earliest moment the provider could see the key.
    pub first_dispatched_at: Option<Timestamp>,
    pub last_dispatched_at: Option<Timestamp>,
    /// Set once an attempt may have taken effect (it ended unknown, or its process died): the
    /// latest moment that attempt could have reached the provider (the later of the recorded
    /// unknown and its dispatch plus the provider's `timeout`; for an orphan, the orphaning).
    /// While set, a later attempt's failure proves nothing about the earlier one: the
    /// operation stays `unknown`. Cleared only when reconciliation proves absence.
    pub maybe_effect_at: Option<Timestamp>,
    pub provider_request_id: Option<String>,
    pub response: Option<ResponseMeta>,
    pub error: Option<String>,
    /// Fencing token of the claim that owns this operation while `in_flight`; 0 for none.
    pub fence: u64,
    pub approval: Approval,
    /// Set only on an operation rebuilt from its tombstone (docs/reference.md section 5.8): when retention pruned
    /// it. Such an operation is never written back; every request for it is refused (410).
    pub pruned_at: Option<Timestamp>,
    /// Keyed hash of the caller's `principal_headers` (docs/reference.md section 4); `None`: bound to no one yet
    /// (written by an older version, or rebound by an operator), adopted by the next caller.
    pub principal: Option<String>,
}

impl Operation {
    /// An operation with plain values, for unit tests: provider and route from the ID,
    /// attempt 1 created, updated and dispatched at `at`; tests override what they need.
    #[cfg(test)]
    pub(crate) fn example(id: &str, state: State, at: Timestamp) -> Operation {
        let mut parts = id.splitn(3, '/');
        Operation {
            id: id.to_owned(),
            provider: parts.next().unwrap_or_default().to_owned(),
            route: parts.next().unwrap_or_default().to_owned(),
            effect: Effect::Irreversible,
            state,
            fingerprint: "f00d".to_owned(),
            fields: BTreeMap::new(),
            idempotency_key: "k".to_owned(),
            key_placement: None,
            attempts: 1,
            created_at: at,
            updated_at: at,
            first_dispatched_at: Some(at),
            last_dispatched_at: Some(at),
            maybe_effect_at: None,
            provider_request_id: None,
            response: None,
            error: None,
            fence: 0,
            approval: Approval::NotRequired,
            pruned_at: None,
            principal: None,
        }
    }
}

/// A response exactly as it will be replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    /// Already stripped of hop-by-hop, `set-cookie` and redacted headers.
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl StoredResponse {
    /// The summary an `Operation` keeps of this response. Hashes the body: compute it before
    /// `Ledger::update`, not in its closure, which runs on the single writer thread.
    pub fn meta(&self) -> ResponseMeta {
        ResponseMeta {
            status: self.status,
            body_bytes: self.body.len() as u64,
            body_sha256: crate::secret::lower_hex(&Sha256::digest(&self.body)),
        }
    }
}

/// The event kinds of docs/reference.md section 8.2.
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
    OperatorRebound,
    AnsweredLate,
    /// An operator corrected an earlier operator's resolution (`POST /ops/{id}/re-resolve`).
    OperatorReResolved,
}

impl EventKind {
    pub const ALL: [EventKind; 18] = [
        EventKind::Prepared,
        EventKind::Claimed,
        EventKind::ProviderRequested,
        EventKind::ProviderResponded,
        EventKind::ResultPersisted,
        EventKind::Replayed,
        EventKind::Conflict,
        EventKind::Orphaned,
        EventKind::Unknown,
        EventKind::ReconcileStarted,
        EventKind::ReconcileFound,
        EventKind::ReconcileNotFound,
        EventKind::OperatorResolved,
        EventKind::OperatorApproved,
        EventKind::OperatorRejected,
        EventKind::OperatorRebound,
        EventKind::AnsweredLate,
        EventKind::OperatorReResolved,
    ];

    /// The kind named by `s` (as `as_str` spells it).
    pub fn parse(s: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

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
            EventKind::OperatorRebound => "operator.rebound",
            EventKind::AnsweredLate => "provider.answered_late",
            EventKind::OperatorReResolved => "operator.re_resolved",
        }
    }

    /// Whether an event of this kind says where the operation's state came from (a
    /// preparation, a claim, an answer recorded, an orphaning, a reconciliation's verdict, an
    /// operator's decision), rather than only adding to its history (a request or answer on
    /// its way, a replay, a conflict, a rebinding, a superseded attempt's late answer).
    pub fn settles(self) -> bool {
        !matches!(
            self,
            EventKind::ProviderRequested
                | EventKind::ProviderResponded
                | EventKind::Replayed
                | EventKind::Conflict
                | EventKind::ReconcileStarted
                | EventKind::OperatorRebound
                | EventKind::AnsweredLate
        )
    }

    /// The state an event of this kind left its operation in, when the write that appended
    /// it left the operation `after`: a request or answer on its way (recorded with the
    /// attempt's result) left it `in_flight`; `operation.unknown` and a reconciliation that
    /// began or found nothing left it `unknown` (a claim may follow in the same write); every
    /// other event, `after`.
    pub fn leaves(self, after: State) -> State {
        match self {
            EventKind::ProviderRequested | EventKind::ProviderResponded => State::InFlight,
            EventKind::Unknown | EventKind::ReconcileStarted | EventKind::ReconcileNotFound => {
                State::Unknown
            }
            _ => after,
        }
    }
}

/// The last event of `events` that settles its operation (`EventKind::settles`), if any: who
/// left the operation in the state it is in.
pub fn last_settling(events: &[Event]) -> Option<&Event> {
    events.iter().rev().find(|e| e.kind.settles())
}

/// Whether an operator's resolution (`operator.resolved` or `operator.re_resolved`) settled the
/// operation with history `events` last: only then may an operator correct it (re-resolve).
pub fn resolved_by_operator(events: &[Event]) -> bool {
    last_settling(events).is_some_and(|e| {
        matches!(
            e.kind,
            EventKind::OperatorResolved | EventKind::OperatorReResolved
        )
    })
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
    /// What happens to the kept first request (sealed; see `RequestChange`).
    pub request: RequestChange,
}

impl Write {
    /// A write of `op` and `events` that leaves the stored response and kept request as they are.
    pub fn of(op: Operation, events: Vec<Event>) -> Write {
        Write {
            op,
            events,
            response: None,
            request: RequestChange::Keep,
        }
    }
}

/// The kept first request of an operation: sealed bytes (method, URI, content type, body of
/// attempt 1, encrypted with the installation secret; never credentials), kept while the
/// operation may be sent again so that every re-send is byte-identical (docs/reference.md section 10).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RequestChange {
    /// Leave it as it is.
    #[default]
    Keep,
    /// Keep these sealed bytes (the first claim or preparation).
    Store(Vec<u8>),
    /// Erase it: the operation became final (succeeded, rejected, resolved).
    Erase,
}

/// An operation ID in a log line or a message: its control characters escaped (`\n`), so the
/// agent's text cannot start a forged line of its own.
pub struct Logged<'a>(pub &'a str);

impl std::fmt::Display for Logged<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write as _;
        for c in self.0.chars() {
            if c.is_control() {
                for escaped in c.escape_default() {
                    f.write_char(escaped)?;
                }
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

/// An operation ID as a word of a suggested `idemproxy ops` command: as it is when it holds
/// only plain characters, else in single quotes for a POSIX shell (`'` written `'\''`), so a
/// pasted command runs nothing the ID spells; control characters escaped as in [`Logged`].
pub fn command_word(id: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:@%+=,".contains(c);
    let shown = Logged(id).to_string();
    if !shown.is_empty() && shown.chars().all(plain) {
        return shown;
    }
    format!("'{}'", shown.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_in_a_command_is_one_word_that_runs_nothing_else() {
        assert_eq!(command_word("pay/refund/wf-9:ch_1"), "pay/refund/wf-9:ch_1");
        assert_eq!(command_word("pay/r/o; rm -rf ~ #"), "'pay/r/o; rm -rf ~ #'");
        assert_eq!(command_word("p/r/$(id)"), "'p/r/$(id)'");
        assert_eq!(command_word("p/r/it's"), r"'p/r/it'\''s'");
        assert_eq!(command_word("p/r/a\nb"), r"'p/r/a\nb'");
        assert_eq!(
            Logged("a\u{1b}]0;x\u{7}\nb").to_string(),
            r"a\u{1b}]0;x\u{7}\nb"
        );
    }

    fn at(kind: EventKind) -> Event {
        Event {
            at: Timestamp(1),
            kind,
            attempt: 1,
            detail: String::new(),
        }
    }

    /// One attempt's write appends its request, answer and verdict together; each event
    /// shows the state it left the operation in, not only the last one's.
    #[test]
    fn each_event_of_an_attempt_leaves_the_state_it_stood_for() {
        use EventKind::*;
        let attempt = [
            ProviderRequested,
            ProviderResponded,
            Unknown,
            ResultPersisted,
        ];
        let left: Vec<State> = attempt.iter().map(|k| k.leaves(State::Unknown)).collect();
        assert_eq!(
            left,
            [
                State::InFlight,
                State::InFlight,
                State::Unknown,
                State::Unknown
            ]
        );
        assert_eq!(ResultPersisted.leaves(State::Succeeded), State::Succeeded);
        assert_eq!(ReconcileNotFound.leaves(State::InFlight), State::Unknown);
        assert_eq!(Claimed.leaves(State::InFlight), State::InFlight);
        assert_eq!(OperatorReResolved.leaves(State::Failed), State::Failed);
    }

    #[test]
    fn the_last_settling_event_skips_what_only_adds_history() {
        use EventKind::*;
        let resolved = [Claimed, ProviderRequested, Unknown, OperatorResolved];
        let later = [Replayed, Conflict, OperatorRebound, AnsweredLate];
        let events: Vec<Event> = resolved.into_iter().chain(later).map(at).collect();
        assert_eq!(
            last_settling(&events).map(|e| e.kind),
            Some(OperatorResolved)
        );
        let retried: Vec<Event> = [OperatorResolved, Claimed, ProviderRequested]
            .into_iter()
            .map(at)
            .collect();
        assert_eq!(last_settling(&retried).map(|e| e.kind), Some(Claimed));
        assert_eq!(last_settling(&[at(Replayed)]), None);
        assert_eq!(
            EventKind::parse("operator.re_resolved"),
            Some(OperatorReResolved)
        );
    }
}
