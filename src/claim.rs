//! The claim: in one ledger transaction, read the operation, decide (SPEC section 5, step 2)
//! and record the decision.
//!
//! `claim` is the only place a new attempt is authorised: the operation is written
//! `in_flight` under a fresh fencing token before anything may be sent. `transition`, the
//! write each decision makes, is pure and tested beside it. Nothing here talks to a provider.

use crate::app::App;
use crate::clock::Timestamp;
use crate::decide::{Decision, Intent, Resend, Rules, decide};
use crate::fingerprint::{Fingerprint, LEGACY};
use crate::ledger::{Approval, Event, EventKind, Operation, State, StoredResponse, Write};
use crate::policy::{Provider, Route};
use crate::problem::Problem;

/// What the claim transaction decided, as the handler carries it out.
pub enum Step {
    Dispatch { fence: u64, attempt: u32 },
    Replay(StoredResponse),
    Wait,
    Reconcile,
    Refuse(Problem, State),
}

/// Step 2 (ledger): read the operation, decide, and record the decision, in one commit.
/// `principal` is the caller's keyed hash (`fingerprint::principal`).
pub async fn claim(
    app: &App,
    provider: &Provider,
    route: &Route,
    id: &str,
    key: &str,
    fingerprint: &Fingerprint,
    principal: &str,
) -> Result<Step, Problem> {
    let now = Timestamp::now();
    let fence = app.ledger.fence();
    let rules = Rules::of(provider, route);
    let fresh = Operation {
        id: id.to_string(),
        provider: provider.name.clone(),
        route: route.name.clone(),
        effect: route.effect,
        state: State::InFlight,
        fingerprint: fingerprint.hex.clone(),
        fields: fingerprint.fields.clone(),
        idempotency_key: key.to_string(),
        attempts: 0,
        created_at: now,
        updated_at: now,
        first_dispatched_at: None,
        last_dispatched_at: None,
        provider_request_id: None,
        response: None,
        error: None,
        fence: 0,
        approval: Approval::NotRequired,
        principal: Some(principal.to_string()),
    };
    let legacy = fingerprint.legacy.clone();
    let decided = app
        .ledger
        .update(id, move |existing| {
            let intent = Intent {
                fingerprint: &fresh.fingerprint,
                fields: &fresh.fields,
                principal: fresh.principal.as_deref().unwrap_or_default(),
                legacy: &legacy,
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
            let (write, decided) = transition(existing, fresh, decision, fence, now);
            (adopt(stale, write), decided)
        })
        .await
        .map_err(|e| Problem::LedgerUnavailable(e.to_string()))?;
    match decided {
        Decided::Step(step) => Ok(step),
        Decided::Replay => match app.ledger.response(id).await {
            Ok(Some(stored)) => Ok(Step::Replay(stored)),
            Ok(None) => Err(Problem::LedgerUnavailable(
                "the stored response is missing".into(),
            )),
            Err(e) => Err(Problem::LedgerUnavailable(e.to_string())),
        },
    }
}

enum Decided {
    Step(Step),
    /// Read the stored response outside the write transaction.
    Replay,
}

/// The write a decision makes, and what the handler does next. Pure.
fn transition(
    existing: Option<Operation>,
    fresh: Operation,
    decision: Decision,
    fence: u64,
    now: Timestamp,
) -> (Option<Write>, Decided) {
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
            (
                Some(write(op, vec![ev])),
                Decided::Step(Step::Dispatch { fence, attempt: 1 }),
            )
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
            (
                Some(write(op, vec![ev])),
                Decided::Step(Step::Refuse(Problem::AwaitingApproval, State::Prepared)),
            )
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
                Some(write(op, vec![ev])),
                Decided::Step(Step::Refuse(problem, state)),
            )
        }
        (Decision::Replay, Some(op)) => {
            let ev = event(
                EventKind::Replayed,
                op.attempts,
                "answered from the ledger".into(),
            );
            (Some(write(op, vec![ev])), Decided::Replay)
        }
        (Decision::Resend(why), Some(op)) => {
            let attempt = op.attempts + 1;
            let detail = format!("attempt {attempt}: {}", resend_reason(why));
            let op = claimed(op, fence, now);
            let ev = event(EventKind::Claimed, attempt, detail);
            (
                Some(write(op, vec![ev])),
                Decided::Step(Step::Dispatch { fence, attempt }),
            )
        }
        (Decision::AwaitApproval, _) => refuse(Problem::AwaitingApproval, State::Prepared),
        (Decision::Rejected, op) => {
            let reason = op.and_then(|op| op.error);
            refuse(Problem::OperationRejected { reason }, State::Failed)
        }
        (Decision::Wait, _) => (None, Decided::Step(Step::Wait)),
        (Decision::Reconcile, _) => (None, Decided::Step(Step::Reconcile)),
        (Decision::Hold, _) => refuse(Problem::OutcomeUnknown, State::Unknown),
        // Nothing written: a stranger's request leaves no trace with values in the history.
        (Decision::PrincipalMismatch, Some(op)) => refuse(Problem::PrincipalMismatch, op.state),
        // decide() only returns these for an existing operation.
        (
            Decision::Conflict(_)
            | Decision::Replay
            | Decision::Resend(_)
            | Decision::PrincipalMismatch,
            None,
        ) => refuse(
            Problem::LedgerUnavailable("inconsistent decision".into()),
            State::Unknown,
        ),
    }
}

/// Whether `op` is bound to no caller (written by an older version, or rebound) or still
/// has the unkeyed hashes older versions recorded.
fn is_stale(op: &Operation) -> bool {
    op.principal.is_none() || op.fingerprint.starts_with(LEGACY)
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
    let mut fresh = decided.unwrap_or_else(|| write(op, vec![]));
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

fn write(op: Operation, events: Vec<Event>) -> Write {
    Write {
        op,
        events,
        response: None,
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

    fn kinds(write: &Write) -> Vec<EventKind> {
        write.events.iter().map(|e| e.kind).collect()
    }

    #[test]
    fn create_claims_attempt_one_under_the_fence() {
        let (write, decided) = transition(None, fresh(), Decision::Create, 42, NOW);
        let write = write.expect("a claim is written");
        assert_eq!(write.op.state, State::InFlight);
        assert_eq!((write.op.attempts, write.op.fence), (1, 42));
        assert_eq!(write.op.first_dispatched_at, Some(NOW));
        assert_eq!(kinds(&write), [EventKind::Claimed]);
        assert!(matches!(
            decided,
            Decided::Step(Step::Dispatch {
                fence: 42,
                attempt: 1
            })
        ));
    }

    #[test]
    fn prepare_records_a_pending_gate_and_sends_nothing() {
        let (write, decided) = transition(None, fresh(), Decision::Prepare, 42, NOW);
        let write = write.expect("the prepared operation is written");
        assert_eq!(
            (write.op.state, write.op.approval),
            (State::Prepared, Approval::Pending)
        );
        assert_eq!(write.op.fence, 0);
        assert_eq!(kinds(&write), [EventKind::Prepared]);
        assert!(matches!(
            decided,
            Decided::Step(Step::Refuse(Problem::AwaitingApproval, State::Prepared))
        ));
    }

    #[test]
    fn resend_keeps_the_first_dispatch_and_counts_the_attempt() {
        let op = stored(State::Failed);
        let (write, decided) = transition(
            Some(op),
            fresh(),
            Decision::Resend(Resend::AfterFailure),
            7,
            NOW,
        );
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
        assert!(matches!(
            decided,
            Decided::Step(Step::Dispatch {
                fence: 7,
                attempt: 2
            })
        ));
    }

    #[test]
    fn conflicts_and_replays_only_add_history() {
        let op = stored(State::Succeeded);
        let conflict = Decision::Conflict(vec!["amount".into()]);
        let (write, decided) = transition(Some(op.clone()), fresh(), conflict, 7, NOW);
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

        let (write, decided) = transition(Some(op.clone()), fresh(), Decision::Replay, 7, NOW);
        let write = write.expect("the replay is noted");
        assert_eq!(write.op, op);
        assert_eq!(kinds(&write), [EventKind::Replayed]);
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
            let (write, _) = transition(
                Some(stored(State::Unknown)),
                fresh(),
                decision.clone(),
                7,
                NOW,
            );
            assert!(write.is_none(), "{decision:?}");
        }
        let mut rejected = stored(State::Failed);
        rejected.error = Some("not this customer".into());
        let (write, decided) = transition(Some(rejected), fresh(), Decision::Rejected, 7, NOW);
        assert!(write.is_none());
        let Decided::Step(Step::Refuse(Problem::OperationRejected { reason }, State::Failed)) =
            decided
        else {
            panic!("a rejected operation is refused");
        };
        assert_eq!(reason.as_deref(), Some("not this customer"));
    }

    #[test]
    fn an_unbound_operation_is_adopted_by_the_caller_it_serves() {
        let unbound = stored(State::Succeeded);
        assert_eq!(unbound.principal, None);
        let current = Operation {
            principal: Some("caller".into()),
            ..fresh()
        };
        let (write, _) = transition(Some(unbound.clone()), fresh(), Decision::Replay, 7, NOW);
        let write = adopt(Some((unbound.clone(), current.clone())), write).expect("a write");
        assert_eq!(write.op.principal.as_deref(), Some("caller"));
        assert_eq!(kinds(&write), [EventKind::Replayed]);

        let (write, _) = transition(Some(unbound.clone()), fresh(), Decision::Hold, 7, NOW);
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
        let (write, decided) = transition(Some(op), fresh(), Decision::PrincipalMismatch, 7, NOW);
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
        let (write, _) = transition(Some(old.clone()), fresh(), Decision::Replay, 7, NOW);
        let write = adopt(Some((old, current.clone())), write).expect("re-keyed");
        assert_eq!(write.op.fingerprint, "keyed");
        assert_eq!(write.op.fields, current.fields);
        assert_eq!(write.op.principal.as_deref(), Some("caller"));
    }
}
