//! Operations and events as the admin API shows them (docs/reference.md section 7), as JSON.
//!
//! Pure: it formats what the ledger returned and never reads or writes the ledger. The
//! per-field fingerprint hashes (`fields`) and the fencing token are internal and never shown.

use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::clock::Timestamp;
use crate::ledger::Replays;
use crate::operation::{Approval, Event, Operation};
use crate::wire::{ProxyBody, full};

/// The operation's fields of docs/reference.md section 7, plus `approval` (`not_required`, `pending`, `approved`,
/// `rejected`), which tells a waiting `prepared` operation from an approved one.
pub fn operation(op: &Operation) -> Value {
    let response = op.response.as_ref().map(|r| {
        json!({
            "status": r.status,
            "body_bytes": r.body_bytes,
            "body_sha256": r.body_sha256,
        })
    });
    json!({
        "operation_id": op.id,
        "provider": op.provider,
        "route": op.route,
        "effect": op.effect.as_str(),
        "state": op.state.as_str(),
        "approval": approval(op.approval),
        "fingerprint": op.fingerprint,
        "idempotency_key": op.idempotency_key,
        "attempts": op.attempts,
        "created_at": op.created_at.to_rfc3339(),
        "updated_at": op.updated_at.to_rfc3339(),
        "first_dispatched_at": op.first_dispatched_at.map(Timestamp::to_rfc3339),
        "provider_request_id": op.provider_request_id,
        "response": response,
        "error": op.error,
    })
}

/// `operation` with its history, oldest first, and its `replays` as written so far
/// (`count` 0 and null times when none is).
pub fn operation_with_events(op: &Operation, events: &[Event], replays: Option<Replays>) -> Value {
    let mut value = operation(op);
    if let Value::Object(map) = &mut value {
        let events: Vec<Value> = events.iter().map(event).collect();
        map.insert("events".into(), Value::Array(events));
        map.insert("replays".into(), replays_json(replays));
    }
    value
}

fn replays_json(replays: Option<Replays>) -> Value {
    json!({
        "count": replays.map_or(0, |r| r.count),
        "first_at": replays.map(|r| r.first_at.to_rfc3339()),
        "last_at": replays.map(|r| r.last_at.to_rfc3339()),
    })
}

pub fn event(e: &Event) -> Value {
    json!({
        "at": e.at.to_rfc3339(),
        "kind": e.kind.as_str(),
        "attempt": e.attempt,
        "detail": e.detail,
    })
}

pub fn approval(a: Approval) -> &'static str {
    match a {
        Approval::NotRequired => "not_required",
        Approval::Pending => "pending",
        Approval::Approved => "approved",
        Approval::Rejected => "rejected",
    }
}

/// A 200 `application/json` answer.
pub fn json_response(value: &Value) -> Response<ProxyBody> {
    let mut resp = Response::new(full(value.to_string()));
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operation::{EventKind, ResponseMeta, State};

    pub(crate) fn sample() -> Operation {
        Operation {
            fingerprint: "ab".repeat(32),
            fields: [("amount".to_string(), "h1".to_string())].into(),
            attempts: 2,
            updated_at: Timestamp(1_500),
            first_dispatched_at: Some(Timestamp(1)),
            last_dispatched_at: Some(Timestamp(2)),
            provider_request_id: Some("req_1".into()),
            response: Some(ResponseMeta {
                status: 200,
                body_bytes: 3,
                body_sha256: "cd".into(),
            }),
            fence: 77,
            ..Operation::example("stripe/create_refund/wf-81", State::Succeeded, Timestamp(0))
        }
    }

    #[test]
    fn operation_has_every_spec_field_and_no_internals() {
        let v = operation(&sample());
        let keys: Vec<&str> = v
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        assert_eq!(
            keys,
            [
                "operation_id",
                "provider",
                "route",
                "effect",
                "state",
                "approval",
                "fingerprint",
                "idempotency_key",
                "attempts",
                "created_at",
                "updated_at",
                "first_dispatched_at",
                "provider_request_id",
                "response",
                "error"
            ]
        );
        assert_eq!(v["updated_at"], "1970-01-01T00:00:01.500Z");
        assert_eq!(v["first_dispatched_at"], "1970-01-01T00:00:00.001Z");
        assert_eq!(v["response"]["body_bytes"], 3);
        assert_eq!(v["effect"], "irreversible");
        assert_eq!(v["error"], Value::Null);
    }

    #[test]
    fn missing_parts_are_null_and_events_keep_their_order() {
        let op = Operation {
            response: None,
            first_dispatched_at: None,
            state: State::Prepared,
            approval: Approval::Pending,
            ..sample()
        };
        let at = |ms, kind| Event {
            at: Timestamp(ms),
            kind,
            attempt: 0,
            detail: "d".into(),
        };
        let events = [
            at(5, EventKind::Prepared),
            at(9, EventKind::OperatorApproved),
        ];
        let v = operation_with_events(&op, &events, None);
        assert_eq!(
            v["replays"],
            json!({"count": 0, "first_at": null, "last_at": null})
        );
        assert_eq!(v["response"], Value::Null);
        assert_eq!(v["first_dispatched_at"], Value::Null);
        assert_eq!(v["approval"], "pending");
        assert_eq!(v["events"][0]["kind"], "operation.prepared");
        assert_eq!(v["events"][1]["kind"], "operator.approved");
        assert_eq!(v["events"][1]["at"], "1970-01-01T00:00:00.009Z");
    }

    #[test]
    fn replays_show_their_count_and_times() {
        let replays = Replays {
            count: 200,
            first_at: Timestamp(7),
            last_at: Timestamp(3_000),
        };
        let v = operation_with_events(&sample(), &[], Some(replays));
        assert_eq!(
            v["replays"],
            json!({
                "count": 200,
                "first_at": "1970-01-01T00:00:00.007Z",
                "last_at": "1970-01-01T00:00:03.000Z",
            })
        );
    }
}
