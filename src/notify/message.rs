//! Which committed events call for a person, and the notification each one makes. Pure.
//!
//! A notification is `{"event","operation_id","provider","route","state","at","detail"}`:
//! names from the policies, the operation's ID and state, the event's time and the words the
//! ledger keeps for a person. Never a request value, a header value or a secret: the ledger
//! holds none of them, and nothing else is read.

use serde_json::{Value, json};

use crate::clock::Timestamp;
use crate::decide::{Rules, needs_person};
use crate::ledger::Published;
use crate::operation::{EventKind, State};

/// One notification, ready to be sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// `awaiting_approval`, `needs_operator`, `parameter_mismatch`, `resolved`, `re_resolved`,
    /// `approved`, `rejected`, `succeeded` or `summary`.
    pub event: &'static str,
    pub operation_id: Option<String>,
    pub provider: Option<String>,
    pub route: Option<String>,
    pub state: Option<State>,
    pub at: Timestamp,
    pub detail: String,
    /// Only for `summary`: what still waits.
    pub waiting: Option<Value>,
}

impl Notice {
    /// The JSON body that is POSTed (and signed).
    pub fn body(&self) -> Vec<u8> {
        let mut value = json!({
            "event": self.event,
            "operation_id": self.operation_id,
            "provider": self.provider,
            "route": self.route,
            "state": self.state.map(State::as_str),
            "at": self.at.to_rfc3339(),
            "detail": self.detail,
        });
        if let (Some(waiting), Value::Object(map)) = (&self.waiting, &mut value) {
            map.insert("waiting".into(), waiting.clone());
        }
        value.to_string().into_bytes()
    }
}

/// The notification a committed event makes, if any. `rules` are those of the event's route
/// (`None`: the route is no longer configured), `now` the time of the decision:
///
/// - `operation.prepared`: `awaiting_approval`;
/// - `operation.unknown` or `operation.orphaned` leaving the operation `unknown` where
///   `decide::needs_person` says only an operator can settle it: `needs_operator`;
/// - `provider.answered_late` (a superseded attempt's answer): `needs_operator`, whatever
///   the route's rules;
/// - `operation.conflict`: `parameter_mismatch` (the detail names fields, never values);
/// - `operator.resolved`, `operator.re_resolved`, `operator.approved`, `operator.rejected`:
///   `resolved`, `re_resolved`, `approved`, `rejected`;
/// - `result.persisted` leaving it `succeeded` after an attempt that may have taken effect
///   (it had been `unknown`): `succeeded`.
pub fn notice(p: &Published, rules: Option<Rules>, now: Timestamp) -> Option<Notice> {
    let op = &p.op;
    let detail = p.event.detail.clone();
    let (event, detail) = match p.event.kind {
        EventKind::Prepared => ("awaiting_approval", approval_detail(&op.id)),
        EventKind::Unknown | EventKind::Orphaned
            if rules.is_some_and(|rules| needs_person(op, rules, now)) =>
        {
            ("needs_operator", operator_detail(&op.id, &detail))
        }
        // The provider may have acted on two attempts: only a person can tell.
        EventKind::AnsweredLate => ("needs_operator", detail),
        EventKind::Conflict => ("parameter_mismatch", detail),
        EventKind::OperatorResolved => ("resolved", detail),
        EventKind::OperatorReResolved => ("re_resolved", detail),
        EventKind::OperatorApproved => ("approved", detail),
        EventKind::OperatorRejected => ("rejected", detail),
        EventKind::ResultPersisted
            if op.state == State::Succeeded && op.maybe_effect_at.is_some() =>
        {
            (
                "succeeded",
                format!("settled after being unknown: {detail}"),
            )
        }
        _ => return None,
    };
    Some(Notice {
        event,
        operation_id: Some(op.id.clone()),
        provider: Some(op.provider.clone()),
        route: Some(op.route.clone()),
        state: Some(op.state),
        at: p.event.at,
        detail,
        waiting: None,
    })
}

fn approval_detail(id: &str) -> String {
    let id = crate::operation::command_word(id);
    format!(
        "waits for an operator's approval: `idemproxy ops approve {id}` lets the agent's next \
         request send it, `idemproxy ops reject {id} --reason ...` refuses it for good"
    )
}

fn operator_detail(id: &str, why: &str) -> String {
    let id = crate::operation::command_word(id);
    format!(
        "{why}. Only an operator can settle it: check with the provider, then run \
         `idemproxy ops resolve {id} --succeeded --body-file FILE` (FILE: the provider's \
         object, which every replay answers) or `--failed --reason ...`"
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::operation::{Event, Operation};
    use crate::policy::{ApprovalMode, Dedupe, Effect};

    const T0: Timestamp = Timestamp(1_800_000_000_000);

    fn rules(dedupe: Dedupe) -> Rules {
        Rules {
            effect: Effect::Irreversible,
            dedupe,
            approval: ApprovalMode::None,
            key_retention: Duration::from_secs(3600),
            timeout: Duration::from_secs(30),
            reconcile: false,
        }
    }

    fn published(state: State, kind: EventKind) -> Published {
        Published {
            op: Arc::new(Operation::example("shop/create/x", state, T0)),
            event: Event {
                at: T0,
                kind,
                attempt: 1,
                detail: "why".into(),
            },
        }
    }

    fn event_of(p: &Published, dedupe: Dedupe) -> Option<&'static str> {
        notice(p, Some(rules(dedupe)), T0).map(|n| n.event)
    }

    #[test]
    fn an_unknown_notifies_only_when_only_a_person_can_settle_it() {
        let unknown = published(State::Unknown, EventKind::Unknown);
        assert_eq!(event_of(&unknown, Dedupe::None), Some("needs_operator"));
        assert_eq!(
            event_of(&unknown, Dedupe::Key),
            None,
            "the settler re-sends"
        );
        let orphaned = published(State::Unknown, EventKind::Orphaned);
        assert_eq!(event_of(&orphaned, Dedupe::None), Some("needs_operator"));
        assert_eq!(notice(&unknown, None, T0), None, "no such route any more");
        let persisted = published(State::Unknown, EventKind::ResultPersisted);
        assert_eq!(
            event_of(&persisted, Dedupe::None),
            None,
            "one per transition"
        );
    }

    /// A superseded attempt's late answer needs a person whatever the route's rules: the
    /// provider may have acted on it as well as on the attempt that superseded it.
    #[test]
    fn a_late_answer_notifies_needs_operator_for_every_route() {
        for state in [State::Succeeded, State::Unknown] {
            let late = published(state, EventKind::AnsweredLate);
            for dedupe in [Dedupe::None, Dedupe::Key] {
                assert_eq!(event_of(&late, dedupe), Some("needs_operator"), "{state:?}");
            }
        }
    }

    #[test]
    fn each_kind_that_needs_or_settles_a_person_notifies_once() {
        let cases = [
            (
                State::Prepared,
                EventKind::Prepared,
                Some("awaiting_approval"),
            ),
            (
                State::Failed,
                EventKind::Conflict,
                Some("parameter_mismatch"),
            ),
            (
                State::Succeeded,
                EventKind::OperatorResolved,
                Some("resolved"),
            ),
            (
                State::Failed,
                EventKind::OperatorReResolved,
                Some("re_resolved"),
            ),
            (
                State::Prepared,
                EventKind::OperatorApproved,
                Some("approved"),
            ),
            (State::Failed, EventKind::OperatorRejected, Some("rejected")),
            (State::Succeeded, EventKind::ResultPersisted, None),
            (State::InFlight, EventKind::Claimed, None),
            (State::Succeeded, EventKind::Replayed, None),
        ];
        for (state, kind, want) in cases {
            assert_eq!(
                event_of(&published(state, kind), Dedupe::None),
                want,
                "{kind:?}"
            );
        }
        let mut settled = published(State::Succeeded, EventKind::ResultPersisted);
        Arc::make_mut(&mut settled.op).maybe_effect_at = Some(T0);
        assert_eq!(event_of(&settled, Dedupe::Key), Some("succeeded"));
    }

    #[test]
    fn the_body_has_the_documented_members_only() {
        let n = notice(&published(State::Prepared, EventKind::Prepared), None, T0).unwrap();
        let body: Value = serde_json::from_slice(&n.body()).unwrap();
        let keys: Vec<&str> = body
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "event",
                "operation_id",
                "provider",
                "route",
                "state",
                "at",
                "detail"
            ]
        );
        assert_eq!(body["state"], "prepared");
        assert_eq!(body["at"], T0.to_rfc3339());
    }
}
