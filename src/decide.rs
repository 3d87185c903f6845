//! The state machine of docs/reference.md section 5.3, as one pure function.
//!
//! `decide` looks at what the ledger holds for an operation, the new request's fingerprint,
//! the route's rules and the time, and says what to do. It performs no I/O and reads no clock:
//! the caller runs it inside the ledger transaction and carries the decision out.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::clock::Timestamp;
use crate::fingerprint::{LEGACY, Legacy, differing_fields};
use crate::operation::{Approval, Operation, State};
use crate::policy::{ApprovalMode, Dedupe, Effect, Provider, Route};
use crate::problem::Unknown;

/// The rules of a route that the state machine needs.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    pub effect: Effect,
    pub dedupe: Dedupe,
    pub approval: ApprovalMode,
    pub key_retention: Duration,
    /// The provider's `timeout`: how long a re-send may take to reach it.
    pub timeout: Duration,
    pub reconcile: bool,
}

impl Rules {
    pub fn of(provider: &Provider, route: &Route) -> Rules {
        Rules {
            effect: route.effect,
            dedupe: provider.dedupe,
            approval: route.approval,
            key_retention: provider.key_retention,
            timeout: provider.timeout,
            reconcile: route.reconcile.is_some(),
        }
    }
}

/// The parameters of the request being decided.
#[derive(Debug, Clone, Copy)]
pub struct Intent<'a> {
    pub fingerprint: &'a str,
    pub fields: &'a BTreeMap<String, String>,
    /// The keyed hash of the caller's `principal_headers`.
    pub principal: &'a str,
    /// The same parameters fingerprinted the unkeyed way, for operations older versions
    /// recorded (their `fingerprint` starts with `fingerprint::LEGACY`).
    pub legacy: &'a Legacy,
}

/// What to do with a guarded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// New operation: record it `in_flight` (attempt 1) and send it.
    Create,
    /// New operation on a gated route: record it `prepared`; 202 `awaiting-approval`.
    Prepare,
    /// Same operation, other parameters: 409, nothing sent.
    Conflict(Vec<String>),
    /// `prepared` and not yet approved: 202 `awaiting-approval`.
    AwaitApproval,
    /// `succeeded`: answer the stored response.
    Replay,
    /// Rejected by an operator: 403 for good.
    Rejected,
    /// Send again with the same key, as the next attempt.
    Resend(Resend),
    /// `in_flight` under a live owner: wait for its result.
    Wait,
    /// `unknown` and not re-sendable: ask the provider (reconciliation).
    Reconcile,
    /// `unknown`, nothing may be sent: 202 `outcome-unknown`.
    Hold,
    /// Pruned, its tombstone remains (docs/reference.md section 5.8): 410 `operation-expired`, whatever the
    /// parameters; nothing is sent, ever.
    Expired,
    /// The operation is bound to another caller: 403, nothing replayed or sent, no field named.
    PrincipalMismatch,
}

impl Decision {
    /// Whether carrying this decision out claims an attempt (and so takes a fencing token).
    pub fn claims(&self) -> bool {
        matches!(self, Decision::Create | Decision::Resend(_))
    }
}

/// Why an existing operation may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// The provider said the effect did not happen (or an operator did).
    AfterFailure,
    /// An operator approved the prepared operation.
    Approved,
    /// Unknown, but the provider still remembers the key and deduplicates.
    WithinKeyRetention,
    /// Unknown, but the route's effect is idempotent.
    Idempotent,
}

/// Decides a guarded request (docs/reference.md section 5.3, step 2).
pub fn decide(
    existing: Option<&Operation>,
    intent: Intent<'_>,
    rules: Rules,
    now: Timestamp,
) -> Decision {
    let Some(op) = existing else {
        return match rules.approval {
            ApprovalMode::Required => Decision::Prepare,
            ApprovalMode::None => Decision::Create,
        };
    };
    // Before the fingerprint: any request for a tombstoned ID is refused the same way.
    if op.pruned_at.is_some() {
        return Decision::Expired;
    }
    // Before the fingerprint: another caller learns nothing of the parameters. An operation
    // bound to no one (older versions, or rebound by an operator) is adopted by this caller.
    if op
        .principal
        .as_deref()
        .is_some_and(|p| p != intent.principal)
    {
        return Decision::PrincipalMismatch;
    }
    let (fingerprint, fields) = if op.fingerprint.starts_with(LEGACY) {
        (intent.legacy.hex.as_str(), &intent.legacy.fields)
    } else {
        (intent.fingerprint, intent.fields)
    };
    if op.fingerprint != fingerprint {
        let mut differing = differing_fields(&op.fields, fields);
        if differing.is_empty() {
            // No parameter's hash differs: the body's kind does (none, `{}`, an empty form),
            // the one part of a request no field hash covers.
            differing.push("body".to_owned());
        }
        return Decision::Conflict(differing);
    }
    match op.state {
        State::Prepared if op.approval == Approval::Approved => Decision::Resend(Resend::Approved),
        State::Prepared => Decision::AwaitApproval,
        State::Succeeded => Decision::Replay,
        State::Failed if op.approval == Approval::Rejected => Decision::Rejected,
        State::Failed => Decision::Resend(Resend::AfterFailure),
        State::InFlight => Decision::Wait,
        State::Unknown => decide_unknown(op, rules, now),
    }
}

/// Whether `op` waits for a person: it is `unknown` and `decide` would hold the agent's next
/// request (no re-send allowed, no lookup), so neither that request, the settler nor a
/// reconciliation can settle it; only an operator can. Decided at `now`: a deduplicating
/// provider's window that is open now (a re-send may still settle it) can close later.
pub fn needs_person(op: &Operation, rules: Rules, now: Timestamp) -> bool {
    op.state == State::Unknown && decide_unknown(op, rules, now) == Decision::Hold
}

/// What the agent's next identical request for the `unknown` operation `op` will meet,
/// decided at `now`: the case its `outcome-unknown` answer is worded for.
pub fn unknown_next(op: &Operation, rules: Rules, now: Timestamp) -> Unknown {
    match decide_unknown(op, rules, now) {
        Decision::Resend(Resend::Idempotent) => Unknown::Idempotent,
        Decision::Resend(_) => Unknown::Deduplicated,
        Decision::Reconcile => Unknown::LookedUp,
        _ => Unknown::Held,
    }
}

fn decide_unknown(op: &Operation, rules: Rules, now: Timestamp) -> Decision {
    if rules.effect == Effect::Idempotent {
        return Decision::Resend(Resend::Idempotent);
    }
    // The key was first visible to the provider when the first claim was committed, and a
    // re-send decided now may take up to `timeout` to reach it: it must land inside the window.
    let first_seen = op.first_dispatched_at.unwrap_or(op.created_at);
    let lands_by = now.plus(rules.timeout);
    if rules.dedupe == Dedupe::Key && lands_by < first_seen.plus(rules.key_retention) {
        return Decision::Resend(Resend::WithinKeyRetention);
    }
    if rules.reconcile {
        Decision::Reconcile
    } else {
        Decision::Hold
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operation::Approval;

    const T0: Timestamp = Timestamp(1_000_000);

    fn rules() -> Rules {
        Rules {
            effect: Effect::Irreversible,
            dedupe: Dedupe::Key,
            approval: ApprovalMode::None,
            key_retention: Duration::from_secs(3600),
            timeout: Duration::from_secs(30),
            reconcile: false,
        }
    }

    fn fields(amount: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("amount".to_string(), amount.to_string()),
            ("currency".to_string(), "usd".to_string()),
        ])
    }

    fn op(state: State) -> Operation {
        Operation {
            fingerprint: "fp1".into(),
            fields: fields("100"),
            principal: Some("caller1".into()),
            ..Operation::example("p/r/x", state, T0)
        }
    }

    static NO_LEGACY: std::sync::LazyLock<Legacy> = std::sync::LazyLock::new(|| Legacy {
        hex: format!("{LEGACY}old"),
        fields: BTreeMap::new(),
    });

    fn same(f: &BTreeMap<String, String>) -> Intent<'_> {
        Intent {
            fingerprint: "fp1",
            fields: f,
            principal: "caller1",
            legacy: &NO_LEGACY,
        }
    }

    #[test]
    fn only_decisions_that_write_a_claim_take_a_fencing_token() {
        let claiming = [Decision::Create, Decision::Resend(Resend::AfterFailure)];
        assert!(claiming.iter().all(Decision::claims));
        let others = [
            Decision::Prepare,
            Decision::Conflict(vec![]),
            Decision::AwaitApproval,
            Decision::Replay,
            Decision::Rejected,
            Decision::Wait,
            Decision::Reconcile,
            Decision::Hold,
            Decision::Expired,
            Decision::PrincipalMismatch,
        ];
        assert!(
            !others.iter().any(Decision::claims),
            "replays take no token"
        );
    }

    #[test]
    fn none_creates_or_prepares() {
        let f = fields("100");
        assert_eq!(decide(None, same(&f), rules(), T0), Decision::Create);
        let gated = Rules {
            approval: ApprovalMode::Required,
            ..rules()
        };
        assert_eq!(decide(None, same(&f), gated, T0), Decision::Prepare);
    }

    #[test]
    fn other_parameters_conflict_in_every_state() {
        let f = fields("200");
        let intent = Intent {
            fingerprint: "fp2",
            fields: &f,
            ..same(&f)
        };
        for state in State::ALL {
            assert_eq!(
                decide(Some(&op(state)), intent, rules(), T0),
                Decision::Conflict(vec!["amount".into()]),
                "{state:?}"
            );
        }
    }

    #[test]
    fn prepared_waits_for_approval_then_sends() {
        let f = fields("100");
        let mut o = op(State::Prepared);
        o.approval = Approval::Pending;
        assert_eq!(
            decide(Some(&o), same(&f), rules(), T0),
            Decision::AwaitApproval
        );
        o.approval = Approval::Approved;
        assert_eq!(
            decide(Some(&o), same(&f), rules(), T0),
            Decision::Resend(Resend::Approved)
        );
    }

    #[test]
    fn only_an_unknown_that_would_be_held_needs_a_person() {
        let o = op(State::Unknown);
        let inside = T0.plus(Duration::from_secs(3569));
        let outside = T0.plus(Duration::from_secs(3570));
        assert!(
            !needs_person(&o, rules(), inside),
            "the settler may re-send"
        );
        assert!(needs_person(&o, rules(), outside), "the window has closed");
        let lookup = Rules {
            reconcile: true,
            ..rules()
        };
        assert!(!needs_person(&o, lookup, outside), "a lookup may settle it");
        let idempotent = Rules {
            effect: Effect::Idempotent,
            dedupe: Dedupe::None,
            ..rules()
        };
        assert!(!needs_person(&o, idempotent, outside));
        let no_dedupe = Rules {
            dedupe: Dedupe::None,
            ..rules()
        };
        assert!(needs_person(&o, no_dedupe, T0));
        for state in [State::Prepared, State::InFlight, State::Failed] {
            assert!(!needs_person(&op(state), no_dedupe, T0), "{state:?}");
        }
    }

    #[test]
    fn succeeded_replays() {
        let f = fields("100");
        assert_eq!(
            decide(Some(&op(State::Succeeded)), same(&f), rules(), T0),
            Decision::Replay
        );
    }

    #[test]
    fn failed_resends_unless_rejected() {
        let f = fields("100");
        let mut o = op(State::Failed);
        assert_eq!(
            decide(Some(&o), same(&f), rules(), T0),
            Decision::Resend(Resend::AfterFailure)
        );
        o.approval = Approval::Rejected;
        assert_eq!(decide(Some(&o), same(&f), rules(), T0), Decision::Rejected);
    }

    #[test]
    fn in_flight_waits() {
        let f = fields("100");
        assert_eq!(
            decide(Some(&op(State::InFlight)), same(&f), rules(), T0),
            Decision::Wait
        );
    }

    #[test]
    fn unknown_resends_only_if_it_lands_inside_key_retention() {
        let f = fields("100");
        let o = op(State::Unknown);
        // Retention 3600 s, timeout 30 s: a re-send decided at 3569 s lands by 3599 s.
        let inside = T0.plus(Duration::from_secs(3569));
        let outside = T0.plus(Duration::from_secs(3570));
        assert_eq!(
            decide(Some(&o), same(&f), rules(), inside),
            Decision::Resend(Resend::WithinKeyRetention)
        );
        assert_eq!(decide(Some(&o), same(&f), rules(), outside), Decision::Hold);
    }

    #[test]
    fn retention_counts_from_the_first_claim_not_the_last() {
        let f = fields("100");
        let mut o = op(State::Unknown);
        o.last_dispatched_at = Some(T0.plus(Duration::from_secs(3000)));
        let now = T0.plus(Duration::from_secs(3700));
        assert_eq!(decide(Some(&o), same(&f), rules(), now), Decision::Hold);
    }

    #[test]
    fn unknown_without_dedupe_holds() {
        let f = fields("100");
        let r = Rules {
            dedupe: Dedupe::None,
            ..rules()
        };
        assert_eq!(
            decide(Some(&op(State::Unknown)), same(&f), r, T0),
            Decision::Hold
        );
        let compensable = Rules {
            effect: Effect::Compensable,
            ..r
        };
        assert_eq!(
            decide(Some(&op(State::Unknown)), same(&f), compensable, T0),
            Decision::Hold
        );
    }

    #[test]
    fn unknown_idempotent_resends_even_without_dedupe() {
        let f = fields("100");
        let r = Rules {
            dedupe: Dedupe::None,
            effect: Effect::Idempotent,
            ..rules()
        };
        let late = T0.plus(Duration::from_secs(86_400 * 30));
        assert_eq!(
            decide(Some(&op(State::Unknown)), same(&f), r, late),
            Decision::Resend(Resend::Idempotent)
        );
    }

    #[test]
    fn a_tombstone_expires_every_request_first() {
        let other = fields("200");
        let intents = [
            same(&other),
            Intent {
                fingerprint: "fp2",
                fields: &other,
                principal: "someone else",
                legacy: &NO_LEGACY,
            },
        ];
        for state in [State::Succeeded, State::Failed] {
            let mut o = op(state);
            o.pruned_at = Some(T0);
            o.approval = Approval::Rejected;
            for intent in intents {
                assert_eq!(
                    decide(Some(&o), intent, rules(), T0),
                    Decision::Expired,
                    "{state:?}"
                );
            }
        }
    }

    #[test]
    fn unknown_with_reconcile_asks_the_provider() {
        let f = fields("100");
        let r = Rules {
            dedupe: Dedupe::None,
            reconcile: true,
            ..rules()
        };
        assert_eq!(
            decide(Some(&op(State::Unknown)), same(&f), r, T0),
            Decision::Reconcile
        );
        // Inside key retention a deduping provider is simply asked again.
        let k = Rules {
            reconcile: true,
            ..rules()
        };
        assert_eq!(
            decide(Some(&op(State::Unknown)), same(&f), k, T0),
            Decision::Resend(Resend::WithinKeyRetention)
        );
    }

    #[test]
    fn another_principal_is_refused_in_every_state_before_the_fingerprint() {
        let f = fields("200");
        for state in State::ALL {
            for fingerprint in ["fp1", "fp2"] {
                let intent = Intent {
                    fingerprint,
                    principal: "caller2",
                    ..same(&f)
                };
                assert_eq!(
                    decide(Some(&op(state)), intent, rules(), T0),
                    Decision::PrincipalMismatch,
                    "{state:?} {fingerprint}"
                );
            }
        }
    }

    #[test]
    fn an_unbound_operation_is_decided_as_if_bound_to_this_caller() {
        let f = fields("100");
        let unbound = Operation {
            principal: None,
            ..op(State::Succeeded)
        };
        let stranger = Intent {
            principal: "caller2",
            ..same(&f)
        };
        assert_eq!(
            decide(Some(&unbound), stranger, rules(), T0),
            Decision::Replay
        );
    }

    #[test]
    fn an_operation_older_versions_recorded_compares_with_the_unkeyed_fingerprint() {
        let f = fields("100");
        let legacy = Legacy {
            hex: format!("{LEGACY}aa"),
            fields: fields("100"),
        };
        let old = Operation {
            fingerprint: format!("{LEGACY}aa"),
            principal: None,
            ..op(State::Succeeded)
        };
        let intent = Intent {
            legacy: &legacy,
            ..same(&f)
        };
        assert_eq!(decide(Some(&old), intent, rules(), T0), Decision::Replay);
        let other = Legacy {
            hex: format!("{LEGACY}bb"),
            fields: fields("200"),
        };
        let intent = Intent {
            legacy: &other,
            ..same(&f)
        };
        assert_eq!(
            decide(Some(&old), intent, rules(), T0),
            Decision::Conflict(vec!["amount".into()])
        );
    }
}
