//! The claim: in one ledger transaction, read the operation, decide (docs/reference.md section 5.3, step 2)
//! and record the decision.
//!
//! A decision that writes nothing never waits for the writer: the guard first asks
//! `answer_from_snapshot`, and the replay of a `succeeded` operation (counted in memory, see
//! `replays`) or the refusal of a rejected one is answered from a read snapshot (`read_only`)
//! before any claim is prepared. Only an operation that must be brought up to date
//! (`is_stale`) takes these through the writer. The settler, which claims only `unknown`
//! operations, goes straight to the write.
//!
//! `claim` is the only place a new attempt is authorised: the operation is written
//! `in_flight` under a fresh fencing token before anything may be sent, and a new operation
//! is written together with its sealed first request (`kept`), so every later attempt can
//! repeat it exactly. `transition`, the write each decision makes, is pure and tested beside
//! it. Nothing here talks to a provider.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::app::App;
use crate::clock::Timestamp;
use crate::decide::{Decision, Intent, Resend, Rules, decide};
use crate::fingerprint::{Fingerprint, LEGACY, Legacy};
use crate::kept::KeptRequest;
use crate::ledger::Permit;
use crate::operation::{
    Approval, Event, EventKind, Operation, RequestChange, State, StoredResponse, Write,
};
use crate::policy::{Effect, KeyPlacement, Provider, Route};
use crate::problem::{Problem, Unknown};

/// Who asks for the claim: an agent's request, or the proxy's own settler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor {
    Agent,
    Settler,
}

/// What a guarded request asks the claim for.
pub struct Ask {
    pub id: String,
    /// The key and placement a new operation gets (from today's policy); an existing
    /// operation keeps its own.
    pub key: String,
    pub placement: KeyPlacement,
    pub fingerprint: Fingerprint,
    /// The keyed hash of the caller's `principal_headers` (`fingerprint::principal`).
    pub principal: String,
    /// The first attempt, kept (sealed) with a new operation; `None` for a claim that can
    /// never create one (the settler's).
    pub first: Option<KeptRequest>,
    pub actor: Actor,
}

/// An attempt the claim authorised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub fence: u64,
    /// Taken before the claim: what `dispatch` checks right before the first byte.
    pub permit: Permit,
    pub attempt: u32,
    /// The first attempt of a new operation: send the request as it came. Otherwise repeat
    /// the kept first request, with the operation's own key and placement.
    pub first: bool,
    pub key: String,
    pub placement: Option<KeyPlacement>,
}

/// What the claim transaction decided, as the handler carries it out.
pub enum Step {
    Dispatch(Claimed),
    Replay(StoredResponse),
    Wait,
    Reconcile,
    Refuse(Problem, State),
}

/// Step 2 (ledger): read the operation, decide, and record the decision, in one commit.
/// `now` is read inside the transaction, so no time passes between the decision and its write.
pub async fn claim(
    app: &App,
    provider: &Provider,
    route: &Route,
    ask: Ask,
) -> Result<Step, Problem> {
    let rules = Rules::of(provider, route);
    // A replay was answered before this (`answer_from_snapshot`, asked by the guard): sealing
    // and the writer are for decisions that write.
    let sealed = match &ask.first {
        Some(first) => first
            .seal(&app.secret, &ask.id)
            .map_err(|e| Problem::LedgerUnavailable(e.to_string()))?,
        None => Vec::new(),
    };
    let fences = app.ledger.fences();
    let permit = app.ledger.permit();
    let names = RouteRecord {
        provider: provider.name.clone(),
        route: route.name.clone(),
        effect: route.effect,
    };
    // Shared with the write, not copied: kept for `read_only`, should the claim's write fail.
    let ask = Arc::new(ask);
    let asked = Arc::clone(&ask);
    crate::crash_point!("claim.before_commit");
    let decided = app
        .ledger
        .update(&ask.id, move |existing| {
            let now = Timestamp::now();
            let fresh = fresh(&asked, names, now);
            let intent = Intent {
                fingerprint: &fresh.fingerprint,
                fields: &fresh.fields,
                principal: fresh.principal.as_deref().unwrap_or_default(),
                legacy: &asked.fingerprint.legacy,
            };
            let decision = decide(existing.as_ref(), intent, rules, now);
            let refused = matches!(
                decision,
                Decision::Conflict(_) | Decision::PrincipalMismatch
            );
            // Cloned only when there is something to bring up to date (this runs on the writer).
            let stale = existing
                .as_ref()
                .filter(|op| is_stale(op) && !refused)
                .map(|op| (op.clone(), fresh.clone()));
            let ticket = Ticket {
                fence: if decision.claims() { fences.next() } else { 0 },
                permit,
            };
            let (write, decided) =
                transition(existing, fresh, sealed, decision, ticket, asked.actor, now);
            (adopt(stale, write), decided)
        })
        .await;
    if let Ok(Decided::Step(Step::Dispatch(_))) = &decided {
        crate::crash_point!("claim.after_commit");
    }
    match decided {
        Ok(Decided::Step(step)) => Ok(step),
        Ok(Decided::Replay) => {
            let step = Box::pin(replay(app, &ask.id)).await?;
            if ask.actor == Actor::Agent {
                app.tally.note(&ask.id, Timestamp::now());
            }
            Ok(step)
        }
        Err(e) => {
            // A decision that needs no write is answered all the same, even for an operation
            // whose bringing up to date (`adopt`) could not be written; the rest needs its write.
            let fingerprint = &ask.fingerprint;
            let probe = Probe {
                id: &ask.id,
                fingerprint: &fingerprint.hex,
                fields: &fingerprint.fields,
                legacy: &fingerprint.legacy,
                principal: &ask.principal,
                actor: ask.actor,
            };
            let answered = Box::pin(read_only(app, &probe, rules, Fresh::OrStale)).await;
            answered.ok_or_else(|| Problem::LedgerUnavailable(e.to_string()))
        }
    }
}

/// An agent's request answered on a read snapshot, when it needs no write (`read_only`):
/// the guard asks this before it detaches the claim, so a replay costs one read and no task.
pub async fn answer_from_snapshot(
    app: &App,
    provider: &Provider,
    route: &Route,
    probe: &Probe<'_>,
) -> Option<Step> {
    read_only(app, probe, Rules::of(provider, route), Fresh::Only).await
}

/// What `read_only` needs of an `Ask`.
///
/// `fields` and `legacy` may be empty (`NO_FIELDS`, `NO_LEGACY`) when only the fingerprint's
/// hex is known: a request that matches its stored operation never looks at them, and one
/// that does not is no read-only decision, so the claim transaction decides it with them.
pub struct Probe<'a> {
    pub id: &'a str,
    pub fingerprint: &'a str,
    pub fields: &'a BTreeMap<String, String>,
    pub legacy: &'a Legacy,
    pub principal: &'a str,
    pub actor: Actor,
}

/// The fields of a `Probe` that knows only the fingerprint's hex.
pub static NO_FIELDS: BTreeMap<String, String> = BTreeMap::new();
/// The legacy form of a `Probe` that knows only the fingerprint's hex: it matches nothing.
pub static NO_LEGACY: Legacy = Legacy {
    hex: String::new(),
    fields: BTreeMap::new(),
};

/// Which operations `read_only` may answer for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fresh {
    /// Only those needing no bringing up to date (`is_stale`): the others go to the writer.
    Only,
    /// Any: their bringing up to date could not be written and waits for a later request.
    OrStale,
}

/// The decisions that write nothing, taken on a read snapshot without the writer: the replay
/// of a `succeeded` operation (its stored response; an agent's replay is counted in
/// `app.tally`) and the refusal of an operator-rejected one. `None`: the claim transaction
/// decides (another decision, no such live operation, a failed read, a stale operation).
/// The snapshot's operation may come without its per-field hashes: they only name the fields
/// of a conflict, which is no read-only decision.
async fn read_only(app: &App, probe: &Probe<'_>, rules: Rules, fresh: Fresh) -> Option<Step> {
    let read = app.ledger.replayable(probe.id).await.ok()??;
    let (op, stored) = &*read;
    if fresh == Fresh::Only && is_stale(op) {
        return None;
    }
    let intent = Intent {
        fingerprint: probe.fingerprint,
        fields: probe.fields,
        principal: probe.principal,
        legacy: probe.legacy,
    };
    let now = Timestamp::now();
    match decide(Some(op), intent, rules, now) {
        Decision::Replay => {
            // No stored response: the claim transaction's own read says what to answer.
            let stored = stored.clone()?;
            if probe.actor == Actor::Agent {
                app.tally.note(probe.id, now);
            }
            Some(Step::Replay(stored))
        }
        Decision::Rejected => {
            let reason = op.error.clone();
            Some(Step::Refuse(
                Problem::OperationRejected { reason },
                State::Failed,
            ))
        }
        _ => None,
    }
}

/// The stored response of a replay, read outside the write transaction.
async fn replay(app: &App, id: &str) -> Result<Step, Problem> {
    match app.ledger.response(id).await {
        Ok(Some(stored)) => Ok(Step::Replay(stored)),
        Ok(None) => Err(Problem::LedgerUnavailable(
            "the stored response is missing".into(),
        )),
        Err(e) => Err(Problem::LedgerUnavailable(e.to_string())),
    }
}

/// What a new operation records of its route.
struct RouteRecord {
    provider: String,
    route: String,
    effect: Effect,
}

/// The record of a new operation, before its first claim.
fn fresh(ask: &Ask, names: RouteRecord, now: Timestamp) -> Operation {
    Operation {
        id: ask.id.clone(),
        provider: names.provider,
        route: names.route,
        effect: names.effect,
        state: State::InFlight,
        fingerprint: ask.fingerprint.hex.clone(),
        fields: ask.fingerprint.fields.clone(),
        idempotency_key: ask.key.clone(),
        key_placement: Some(ask.placement.clone()),
        attempts: 0,
        created_at: now,
        updated_at: now,
        first_dispatched_at: None,
        last_dispatched_at: None,
        maybe_effect_at: None,
        provider_request_id: None,
        response: None,
        error: None,
        fence: 0,
        approval: Approval::NotRequired,
        pruned_at: None,
        principal: Some(ask.principal.clone()),
    }
}

enum Decided {
    Step(Step),
    /// Read the stored response outside the write transaction.
    Replay,
}

/// What a claim is made under: its fencing token (0 when the decision claims nothing) and the
/// permit taken before its transaction.
struct Ticket {
    fence: u64,
    permit: Permit,
}

/// The write a decision makes, and what the handler does next. Pure.
fn transition(
    existing: Option<Operation>,
    fresh: Operation,
    sealed: Vec<u8>,
    decision: Decision,
    ticket: Ticket,
    actor: Actor,
    now: Timestamp,
) -> (Option<Write>, Decided) {
    let Ticket { fence, permit } = ticket;
    let event = |kind, attempt, detail: String| Event {
        at: now,
        kind,
        attempt,
        detail,
    };
    let refuse = |problem, state| (None, Decided::Step(Step::Refuse(problem, state)));
    match (decision, existing) {
        (Decision::Create, _) => {
            let op = claimed(fresh, fence, now);
            let ev = event(EventKind::Claimed, 1, "attempt 1: new operation".into());
            let step = Step::Dispatch(Claimed {
                fence,
                permit,
                attempt: 1,
                first: true,
                key: op.idempotency_key.clone(),
                placement: op.key_placement.clone(),
            });
            (Some(keeping(op, ev, sealed)), Decided::Step(step))
        }
        (Decision::Prepare, _) => {
            let op = Operation {
                state: State::Prepared,
                approval: Approval::Pending,
                ..fresh
            };
            let ev = event(
                EventKind::Prepared,
                0,
                "waiting for an operator's approval".into(),
            );
            let step = Step::Refuse(Problem::AwaitingApproval, State::Prepared);
            (Some(keeping(op, ev, sealed)), Decided::Step(step))
        }
        (Decision::Conflict(fields), Some(op)) => {
            let state = op.state;
            let detail = format!(
                "request with other parameters refused; differing: {}",
                fields.join(", ")
            );
            let ev = event(EventKind::Conflict, op.attempts, detail);
            let problem = Problem::ParameterMismatch { fields };
            (
                Some(Write::of(op, vec![ev])),
                Decided::Step(Step::Refuse(problem, state)),
            )
        }
        // Counted in memory, not written here (`replays`).
        (Decision::Replay, Some(_)) => (None, Decided::Replay),
        (Decision::Resend(why), Some(op)) => {
            let attempt = op.attempts + 1;
            let by = match actor {
                Actor::Agent => "",
                Actor::Settler => " (by the settler)",
            };
            let detail = format!("attempt {attempt}{by}: {}", resend_reason(why));
            let op = claimed(op, fence, now);
            let ev = event(EventKind::Claimed, attempt, detail);
            let step = Step::Dispatch(Claimed {
                fence,
                permit,
                attempt,
                first: false,
                key: op.idempotency_key.clone(),
                placement: op.key_placement.clone(),
            });
            (Some(Write::of(op, vec![ev])), Decided::Step(step))
        }
        (Decision::AwaitApproval, _) => refuse(Problem::AwaitingApproval, State::Prepared),
        (Decision::Rejected, op) => {
            let reason = op.and_then(|op| op.error);
            refuse(Problem::OperationRejected { reason }, State::Failed)
        }
        (Decision::Wait, _) => (None, Decided::Step(Step::Wait)),
        (Decision::Reconcile, _) => (None, Decided::Step(Step::Reconcile)),
        (Decision::Hold, _) => refuse(Problem::OutcomeUnknown(Unknown::Held), State::Unknown),
        (Decision::Expired, Some(op)) => {
            let pruned_at = op.pruned_at.unwrap_or(now);
            refuse(Problem::OperationExpired { pruned_at }, op.state)
        }
        // Nothing written: a stranger's request leaves no trace with values in the history.
        (Decision::PrincipalMismatch, Some(op)) => refuse(Problem::PrincipalMismatch, op.state),
        // decide() only returns these for an existing operation.
        (
            Decision::Conflict(_)
            | Decision::Replay
            | Decision::Resend(_)
            | Decision::Expired
            | Decision::PrincipalMismatch,
            None,
        ) => refuse(
            Problem::LedgerUnavailable("inconsistent decision".into()),
            State::Unknown,
        ),
    }
}

/// A new operation's write, with its sealed first request kept beside it.
fn keeping(op: Operation, event: Event, sealed: Vec<u8>) -> Write {
    let request = match sealed.is_empty() {
        // Nothing to keep (a claim that brought no first request): later attempts are built
        // from the request that triggers them.
        true => RequestChange::Keep,
        false => RequestChange::Store(sealed),
    };
    Write {
        request,
        ..Write::of(op, vec![event])
    }
}

/// Whether `op` is bound to no caller (written by an older version, or rebound) or still
/// has the unkeyed hashes older versions recorded. Never a tombstone: it refuses every write,
/// and every request for it is refused 410 alike, so there is nothing to bring up to date.
fn is_stale(op: &Operation) -> bool {
    op.pruned_at.is_none() && (op.principal.is_none() || op.fingerprint.starts_with(LEGACY))
}

/// Brings a stale stored operation up to date with `current`, the operation as this request
/// would make it (`stale` holds both): bound to this caller's principal when it is bound to
/// no one, and its unkeyed hashes replaced by `current`'s keyed ones (they matched, or the
/// decision would be a conflict).
/// The decision's own write records it, or a write of its own when the decision writes
/// nothing. Without `stale`, the decision's write as it is. Pure.
fn adopt(stale: Option<(Operation, Operation)>, decided: Option<Write>) -> Option<Write> {
    let Some((op, current)) = stale else {
        return decided;
    };
    let mut fresh = decided.unwrap_or_else(|| Write::of(op, vec![]));
    if fresh.op.principal.is_none() {
        fresh.op.principal.clone_from(&current.principal);
    }
    if fresh.op.fingerprint.starts_with(LEGACY) {
        fresh.op.fingerprint.clone_from(&current.fingerprint);
        fresh.op.fields.clone_from(&current.fields);
    }
    Some(fresh)
}

fn resend_reason(why: Resend) -> &'static str {
    match why {
        Resend::AfterFailure => "the previous attempt definitively failed",
        Resend::Approved => "approved by an operator",
        Resend::WithinKeyRetention => "outcome unknown; the provider deduplicates on the same key",
        Resend::Idempotent => "outcome unknown; the route is idempotent",
    }
}

/// The operation claimed by `fence` for its next attempt.
pub fn claimed(op: Operation, fence: u64, now: Timestamp) -> Operation {
    Operation {
        state: State::InFlight,
        attempts: op.attempts + 1,
        fence,
        updated_at: now,
        first_dispatched_at: op.first_dispatched_at.or(Some(now)),
        last_dispatched_at: Some(now),
        error: None,
        ..op
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    const NOW: Timestamp = Timestamp(2_000_000);
    const EARLIER: Timestamp = Timestamp(1_000_000);

    fn fresh() -> Operation {
        Operation {
            fingerprint: "fp".into(),
            attempts: 0,
            first_dispatched_at: None,
            last_dispatched_at: None,
            ..Operation::example("p/r/x", State::InFlight, NOW)
        }
    }

    fn stored(state: State) -> Operation {
        Operation {
            state,
            attempts: 1,
            created_at: EARLIER,
            updated_at: EARLIER,
            first_dispatched_at: Some(EARLIER),
            last_dispatched_at: Some(EARLIER),
            error: Some("previous".into()),
            ..fresh()
        }
    }

    const SEALED: &[u8] = b"sealed first request";

    fn run(
        existing: Option<Operation>,
        decision: Decision,
        fence: u64,
    ) -> (Option<Write>, Decided) {
        let ticket = Ticket {
            fence,
            permit: Permit::for_tests(),
        };
        transition(
            existing,
            fresh(),
            SEALED.to_vec(),
            decision,
            ticket,
            Actor::Agent,
            NOW,
        )
    }

    fn kinds(write: &Write) -> Vec<EventKind> {
        write.events.iter().map(|e| e.kind).collect()
    }

    #[test]
    fn create_claims_attempt_one_under_the_fence() {
        let (write, decided) = run(None, Decision::Create, 42);
        let write = write.expect("a claim is written");
        assert_eq!(write.op.state, State::InFlight);
        assert_eq!((write.op.attempts, write.op.fence), (1, 42));
        assert_eq!(write.op.first_dispatched_at, Some(NOW));
        assert_eq!(kinds(&write), [EventKind::Claimed]);
        assert_eq!(
            write.request,
            RequestChange::Store(SEALED.to_vec()),
            "kept with the claim"
        );
        let Decided::Step(Step::Dispatch(claimed)) = decided else {
            panic!("a new operation is dispatched");
        };
        assert_eq!(
            (claimed.fence, claimed.attempt, claimed.first),
            (42, 1, true)
        );
    }

    #[test]
    fn prepare_records_a_pending_gate_and_sends_nothing() {
        let (write, decided) = run(None, Decision::Prepare, 42);
        let write = write.expect("the prepared operation is written");
        assert_eq!(
            (write.op.state, write.op.approval),
            (State::Prepared, Approval::Pending)
        );
        assert_eq!(write.op.fence, 0);
        assert_eq!(kinds(&write), [EventKind::Prepared]);
        assert_eq!(
            write.request,
            RequestChange::Store(SEALED.to_vec()),
            "kept for the approved send"
        );
        assert!(matches!(
            decided,
            Decided::Step(Step::Refuse(Problem::AwaitingApproval, State::Prepared))
        ));
    }

    #[test]
    fn resend_keeps_the_first_dispatch_and_counts_the_attempt() {
        let op = stored(State::Failed);
        let (write, decided) = run(Some(op), Decision::Resend(Resend::AfterFailure), 7);
        let write = write.expect("the new claim is written");
        assert_eq!(
            (write.op.state, write.op.attempts, write.op.fence),
            (State::InFlight, 2, 7)
        );
        assert_eq!(
            write.op.first_dispatched_at,
            Some(EARLIER),
            "key retention counts from here"
        );
        assert_eq!(write.op.last_dispatched_at, Some(NOW));
        assert_eq!(write.op.error, None);
        assert_eq!(write.events[0].attempt, 2);
        assert_eq!(
            write.request,
            RequestChange::Keep,
            "the first request stays as kept"
        );
        let Decided::Step(Step::Dispatch(claimed)) = decided else {
            panic!("a re-send is dispatched");
        };
        assert_eq!(
            (claimed.fence, claimed.attempt, claimed.first),
            (7, 2, false)
        );
        assert_eq!(
            claimed.key, "k",
            "the operation's own key, not today's policy's"
        );
    }

    #[test]
    fn a_conflict_only_adds_history_and_a_replay_writes_nothing() {
        let op = stored(State::Succeeded);
        let conflict = Decision::Conflict(vec!["amount".into()]);
        let (write, decided) = run(Some(op.clone()), conflict, 7);
        let write = write.expect("the conflict is noted");
        assert_eq!(write.op, op, "the operation itself is unchanged");
        assert_eq!(kinds(&write), [EventKind::Conflict]);
        assert!(write.events[0].detail.contains("amount"));
        assert!(matches!(
            decided,
            Decided::Step(Step::Refuse(
                Problem::ParameterMismatch { .. },
                State::Succeeded
            ))
        ));

        let (write, decided) = run(Some(op), Decision::Replay, 7);
        assert!(
            write.is_none(),
            "counted in memory (`replays`), not written here"
        );
        assert!(matches!(decided, Decided::Replay));
    }

    #[test]
    fn holding_waiting_and_refusing_write_nothing() {
        for decision in [
            Decision::Hold,
            Decision::Wait,
            Decision::AwaitApproval,
            Decision::Reconcile,
        ] {
            let (write, _) = run(Some(stored(State::Unknown)), decision.clone(), 7);
            assert!(write.is_none(), "{decision:?}");
        }
        let mut rejected = stored(State::Failed);
        rejected.error = Some("not this customer".into());
        let (write, decided) = run(Some(rejected), Decision::Rejected, 7);
        assert!(write.is_none());
        let Decided::Step(Step::Refuse(Problem::OperationRejected { reason }, State::Failed)) =
            decided
        else {
            panic!("a rejected operation is refused");
        };
        assert_eq!(reason.as_deref(), Some("not this customer"));
    }

    #[test]
    fn an_expired_operation_is_refused_with_its_final_state_and_writes_nothing() {
        let tomb = Operation {
            pruned_at: Some(NOW),
            ..stored(State::Succeeded)
        };
        let (write, decided) = run(Some(tomb), Decision::Expired, 7);
        assert!(write.is_none(), "a tombstone is never written back");
        assert!(matches!(
            decided,
            Decided::Step(Step::Refuse(
                Problem::OperationExpired { pruned_at: NOW },
                State::Succeeded
            ))
        ));
    }

    #[test]
    fn an_unbound_operation_is_adopted_by_the_caller_it_serves() {
        let unbound = stored(State::Succeeded);
        assert_eq!(unbound.principal, None);
        let current = Operation {
            principal: Some("caller".into()),
            ..fresh()
        };
        let (write, _) = run(Some(unbound.clone()), Decision::Replay, 7);
        let write = adopt(Some((unbound.clone(), current.clone())), write).expect("a write");
        assert_eq!(write.op.principal.as_deref(), Some("caller"));
        assert!(write.events.is_empty(), "a replay adds no event of its own");

        let (write, _) = run(Some(unbound.clone()), Decision::Hold, 7);
        let stale = Some((unbound.clone(), current.clone()));
        let write = adopt(stale, write).expect("a write of its own");
        assert_eq!(
            write.op,
            Operation {
                principal: Some("caller".into()),
                ..unbound
            }
        );
        assert!(write.events.is_empty());
        assert!(adopt(None, None).is_none(), "a bound one is left alone");
    }

    #[test]
    fn another_principal_is_refused_and_nothing_is_written() {
        let op = stored(State::Succeeded);
        let (write, decided) = run(Some(op), Decision::PrincipalMismatch, 7);
        assert!(write.is_none());
        assert!(matches!(
            decided,
            Decided::Step(Step::Refuse(Problem::PrincipalMismatch, State::Succeeded))
        ));
    }

    #[test]
    fn unkeyed_hashes_older_versions_recorded_are_replaced_by_keyed_ones() {
        let old = Operation {
            fingerprint: format!("{LEGACY}aa"),
            fields: [("amount".to_string(), "0123".to_string())].into(),
            ..stored(State::Succeeded)
        };
        assert!(is_stale(&old));
        let current = Operation {
            fingerprint: "keyed".into(),
            fields: [("amount".to_string(), "k1".to_string())].into(),
            principal: Some("caller".into()),
            ..fresh()
        };
        let (write, _) = run(Some(old.clone()), Decision::Replay, 7);
        let write = adopt(Some((old, current.clone())), write).expect("re-keyed");
        assert_eq!(write.op.fingerprint, "keyed");
        assert_eq!(write.op.fields, current.fields);
        assert_eq!(write.op.principal.as_deref(), Some("caller"));
    }
}
