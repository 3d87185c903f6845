//! The ledger's record codecs: any bytes decode or are refused as corrupt without a panic, and
//! every operation, event, stored response and list cursor round-trips through its encoding.
//!
//! Input: a 0 byte then bytes for every decoder (the seeds: records as stored), a 1 byte then a
//! list cursor, or anything else: a value built by `arbitrary` from the bytes, to round-trip.
#![no_main]

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Unstructured};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use idemproxy::clock::Timestamp;
use idemproxy::ledger::stored;
use idemproxy::operation::{
    Approval, Event, EventKind, Operation, ResponseMeta, State, StoredResponse,
};
use idemproxy::policy::{Effect, KeyPlacement};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Input<'a> {
    Op(Box<Op>),
    Event {
        at: i64,
        kind: u8,
        attempt: u32,
        detail: String,
    },
    Response {
        status: u16,
        headers: Vec<(&'a str, &'a [u8])>,
        body: &'a [u8],
    },
    Position {
        created_at: i64,
        id: String,
    },
}

#[derive(Arbitrary, Debug)]
struct Op {
    id: String,
    provider: String,
    route: String,
    effect: u8,
    state: u8,
    fingerprint: String,
    fields: BTreeMap<String, String>,
    idempotency_key: String,
    key_at: Option<(bool, String)>,
    attempts: u32,
    times: [i64; 2],
    dispatched: [Option<i64>; 4],
    provider_request_id: Option<String>,
    response: Option<(u16, u64, String)>,
    error: Option<String>,
    fence: u64,
    approval: u8,
    principal: Option<String>,
}

fn operation(o: Op) -> Option<Operation> {
    let key_placement = match o.key_at {
        None => None,
        Some((true, name)) => Some(KeyPlacement::Header(
            HeaderName::from_bytes(name.as_bytes()).ok()?,
        )),
        Some((false, pointer)) => Some(KeyPlacement::JsonField(pointer)),
    };
    let effects = [
        Effect::ReadOnly,
        Effect::Idempotent,
        Effect::Compensable,
        Effect::Irreversible,
    ];
    let approvals = [
        Approval::NotRequired,
        Approval::Pending,
        Approval::Approved,
        Approval::Rejected,
    ];
    let t = |v: Option<i64>| v.map(Timestamp);
    Some(Operation {
        id: o.id,
        provider: o.provider,
        route: o.route,
        effect: effects[usize::from(o.effect) % effects.len()],
        state: State::ALL[usize::from(o.state) % State::ALL.len()],
        fingerprint: o.fingerprint,
        fields: o.fields,
        idempotency_key: o.idempotency_key,
        key_placement,
        attempts: o.attempts,
        created_at: Timestamp(o.times[0]),
        updated_at: Timestamp(o.times[1]),
        first_dispatched_at: t(o.dispatched[0]),
        last_dispatched_at: t(o.dispatched[1]),
        maybe_effect_at: t(o.dispatched[2]),
        provider_request_id: o.provider_request_id,
        response: o
            .response
            .map(|(status, body_bytes, body_sha256)| ResponseMeta {
                status,
                body_bytes,
                body_sha256,
            }),
        error: o.error,
        fence: o.fence,
        approval: approvals[usize::from(o.approval) % approvals.len()],
        pruned_at: t(o.dispatched[3]),
        principal: o.principal,
    })
}

fuzz_target!(|data: &[u8]| match data.split_first() {
    None => {}
    Some((0, bytes)) => decode(bytes),
    Some((1, cursor)) => {
        let Ok(cursor) = std::str::from_utf8(cursor) else {
            return;
        };
        if let Some((created_at, id)) = stored::decode_cursor(cursor) {
            assert_eq!(
                stored::encode_cursor(created_at, &id),
                cursor.to_ascii_lowercase()
            );
        }
    }
    Some((_, rest)) => {
        if let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(rest)) {
            round_trip(input);
        }
    }
});

fn decode(bytes: &[u8]) {
    let full = stored::decode_op(bytes);
    let replay = stored::decode_op_for_replay(bytes);
    assert_eq!(
        full.is_ok(),
        replay.is_ok(),
        "the replay read disagrees: {full:?} {replay:?}"
    );
    let _ = stored::decode_event(bytes);
    if let Ok(response) = stored::decode_response(bytes) {
        // Header names are read case-insensitively: the second reading is the first.
        let again = stored::decode_response(&stored::encode_response(&response));
        assert_eq!(again.as_ref(), Ok(&response));
    }
}

fn round_trip(input: Input) {
    match input {
        Input::Position { created_at, id } => {
            let cursor = stored::encode_cursor(created_at, &id);
            assert_eq!(stored::decode_cursor(&cursor), Some((created_at, id)));
        }
        Input::Op(o) => {
            let Some(op) = operation(*o) else { return };
            let bytes = stored::encode_op(&op).expect("an operation encodes");
            let back = stored::decode_op(&bytes).expect("what encode_op wrote decodes");
            assert_eq!(back, op);
        }
        Input::Event {
            at,
            kind,
            attempt,
            detail,
        } => {
            let event = Event {
                at: Timestamp(at),
                kind: EventKind::ALL[usize::from(kind) % EventKind::ALL.len()],
                attempt,
                detail,
            };
            let bytes = stored::encode_event(&event).expect("an event encodes");
            let back = stored::decode_event(&bytes).expect("what encode_event wrote decodes");
            assert_eq!(back, event);
        }
        Input::Response {
            status,
            headers,
            body,
        } => {
            let mut map = HeaderMap::new();
            for (name, value) in headers {
                if let (Ok(n), Ok(v)) = (
                    HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_bytes(value),
                ) {
                    map.append(n, v);
                }
            }
            let response = StoredResponse {
                status,
                headers: map,
                body: Bytes::copy_from_slice(body),
            };
            let back =
                stored::decode_response(&stored::encode_response(&response)).expect("decodes");
            assert_eq!(back, response);
        }
    }
}
