use proptest::prelude::*;

use super::response::*;
use super::*;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, header};

use crate::operation::StoredResponse;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9/_:.-]{0,12}",
        "[0-9a-f]{0,16}",
        any::<String>(),
        Just("quote \" back \\ slash \n é ☃".to_owned()),
    ]
}

prop_compose! {
    fn operation()(
        provider in text(), route in text(), rest in text(), split in any::<bool>(),
        fingerprint in text(), key in text(), key_is_rest in any::<bool>(),
        fields in proptest::collection::btree_map(text(), text(), 0..4),
        placement in proptest::option::of(prop_oneof![
            Just(KeyPlacement::Header(HeaderName::from_static("idempotency-key"))),
            text().prop_map(KeyPlacement::JsonField),
        ]),
        attempts in any::<u32>(), times in any::<[i64; 6]>(), fence in any::<u64>(),
        optional in proptest::collection::vec(proptest::option::of(text()), 3),
        response in proptest::option::of((any::<u16>(), any::<u64>(), text())),
        set in any::<[bool; 4]>(), state in 0..STATES.len(), effect in 0..EFFECTS.len(),
        approval in 0..APPROVALS.len(), legacy in any::<bool>(),
    ) -> Operation {
        let at = |i: usize, on: bool| on.then_some(Timestamp(times[i]));
        let id = match split {
            true => format!("{provider}/{route}/{rest}"),
            false => rest.clone(),
        };
        Operation {
            id,
            provider,
            route,
            effect: EFFECTS[effect],
            state: STATES[state],
            fingerprint: match legacy {
                true => format!("{LEGACY}{fingerprint}"),
                false => fingerprint,
            },
            fields,
            idempotency_key: if key_is_rest { rest } else { key },
            key_placement: placement,
            attempts,
            created_at: Timestamp(times[0]),
            updated_at: Timestamp(times[1]),
            first_dispatched_at: at(2, set[0]),
            last_dispatched_at: at(3, set[1]),
            maybe_effect_at: at(4, set[2]),
            pruned_at: at(5, set[3]),
            provider_request_id: optional[0].clone(),
            error: optional[1].clone(),
            principal: optional[2].clone(),
            response: response.map(|(status, body_bytes, body_sha256)| ResponseMeta {
                status, body_bytes, body_sha256,
            }),
            fence,
            approval: APPROVALS[approval],
        }
    }
}

fn detail() -> impl Strategy<Value = String> {
    prop_oneof![
        text(),
        (0u32..4).prop_map(|a| format!("attempt {a}: new operation")),
        (0u32..4).prop_map(|a| format!("attempt {a} sent")),
        (0u32..4).prop_map(|a| format!("attempt {a} sent by the settler")),
        any::<u16>().prop_map(|s| format!("status {s}")),
        Just("status 070".to_owned()),
        Just("status 99999".to_owned()),
        (0..STATES.len()).prop_map(|s| STATES[s].as_str().to_owned()),
    ]
}

prop_compose! {
    fn event()(at in any::<i64>(), kind in 0..KINDS.len(), attempt in 0u32..4, detail in detail())
        -> Event {
        Event { at: Timestamp(at), kind: KINDS[kind], attempt, detail }
    }
}

proptest! {
    #[test]
    fn every_operation_round_trips(op in operation()) {
        prop_assert_eq!(decode_op(&encode_op(&op), Fields::Read), Some(op.clone()));
        let skipped = Operation { fields: BTreeMap::new(), ..op.clone() };
        prop_assert_eq!(decode_op(&encode_op(&op), Fields::Skipped), Some(skipped));
    }

    #[test]
    fn every_history_round_trips_and_appends(
        events in proptest::collection::vec(event(), 0..6), cut in any::<prop::sample::Index>(),
    ) {
        let bytes = encode_events(&events);
        prop_assert_eq!(decode_events(&bytes), Some(events.clone()));
        let (head, tail) = events.split_at(cut.index(events.len() + 1));
        let mut appended = encode_events(head);
        append_events(&mut appended, head.last().map_or(0, |e| e.at.0), tail);
        prop_assert_eq!(appended, bytes);
    }

    #[test]
    fn damaged_bytes_never_panic(op in operation(), event in event(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        for mut bytes in [encode_op(&op), encode_events(&[event])] {
            let i = at.index(bytes.len());
            bytes[i] = byte;
            let _ = decode_op(&bytes, Fields::Read);
            let _ = decode_events(&bytes);
            let _ = decode_response(&bytes);
            bytes.truncate(i);
            let _ = decode_op(&bytes, Fields::Read);
            let _ = decode_events(&bytes);
        }
    }

    #[test]
    fn every_response_round_trips(
        status in any::<u16>(),
        headers in proptest::collection::vec(
            (prop_oneof![Just("content-length".to_owned()), Just("date".to_owned()), "[a-z][a-z0-9-]{0,12}"],
             prop_oneof![
                 proptest::collection::vec(any::<u8>(), 0..16),
                 (0u64..4_000_000_000).prop_map(|s| date_text(s).unwrap().into_bytes()),
             ]),
            0..6,
        ),
        body in proptest::collection::vec(any::<u8>(), 0..64),
        with_length in any::<bool>(),
    ) {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            if let Ok(value) = HeaderValue::from_bytes(&value) {
                map.append(HeaderName::from_bytes(name.as_bytes()).expect("a token"), value);
            }
        }
        if with_length {
            map.append(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        }
        let response = StoredResponse { status, headers: map, body: Bytes::from(body) };
        prop_assert_eq!(decode_response(&encode_response(&response)), Some(response));
    }
}

#[test]
fn the_tables_name_every_variant() {
    assert!(State::ALL.iter().all(|s| STATES.contains(s)));
    assert!(EventKind::ALL.iter().all(|k| KINDS.contains(k)));
    assert_eq!(
        BODY_LENGTH,
        NAMES.len() as u64 + 1,
        "the code after the last name"
    );
    assert_eq!(DATE_SECONDS, BODY_LENGTH + 1);
}

#[test]
fn a_completed_operation_is_small() {
    let created = Timestamp(1_764_950_000_000);
    let op = Operation {
        fingerprint: "ab".repeat(32),
        idempotency_key: "fresh-123456".into(),
        key_placement: Some(KeyPlacement::Header(HeaderName::from_static(
            "idempotency-key",
        ))),
        response: Some(ResponseMeta {
            status: 200,
            body_bytes: 56,
            body_sha256: "cd".repeat(32),
        }),
        principal: Some("ef".repeat(16)),
        updated_at: Timestamp(created.0 + 3),
        ..Operation::example("bench/refund/fresh-123456", State::Succeeded, created)
    };
    let bytes = encode_op(&op);
    assert_eq!(decode_op(&bytes, Fields::Read), Some(op.clone()));
    assert!(bytes.len() < 140, "{} bytes", bytes.len());
    let event = |kind, detail: &str| Event {
        at: created,
        kind,
        attempt: 1,
        detail: detail.into(),
    };
    let history = encode_events(&[
        event(EventKind::Claimed, "attempt 1: new operation"),
        event(EventKind::ProviderRequested, "attempt 1 sent"),
        event(EventKind::ProviderResponded, "status 200"),
        event(EventKind::ResultPersisted, "succeeded"),
    ]);
    assert!(history.len() < 40, "{} bytes", history.len());
}

#[test]
fn a_date_in_the_http_form_is_kept_as_seconds_and_any_other_as_it_is() {
    for (value, compact) in [
        ("Sat, 05 Dec 2026 16:51:36 GMT", true),
        ("Thu, 01 Jan 1970 00:00:00 GMT", true),
        ("Sun, 05 Dec 2026 16:51:36 GMT", false),
        ("Sat, 5 Dec 2026 16:51:36 GMT", false),
        ("Saturday, 05-Dec-26 16:51:36 GMT", false),
        ("sat, 05 Dec 2026 16:51:36 GMT", false),
        ("yesterday", false),
    ] {
        assert_eq!(date_seconds(value.as_bytes()).is_some(), compact, "{value}");
        let mut headers = HeaderMap::new();
        headers.append(header::DATE, HeaderValue::from_static(value));
        headers.append(header::SERVER, HeaderValue::from_static("nginx"));
        let response = StoredResponse {
            status: 200,
            headers,
            body: Bytes::new(),
        };
        assert_eq!(decode_response(&encode_response(&response)), Some(response));
    }
}

#[test]
fn a_content_length_other_than_the_body_length_is_kept() {
    let mut headers = HeaderMap::new();
    headers.append(header::CONTENT_LENGTH, HeaderValue::from_static("07"));
    headers.append(header::DATE, HeaderValue::from_static("x"));
    headers.append(header::CONTENT_LENGTH, HeaderValue::from_static("7"));
    let response = StoredResponse {
        status: 200,
        headers,
        body: Bytes::from_static(b"1234567"),
    };
    assert_eq!(decode_response(&encode_response(&response)), Some(response));
}

proptest! {
    #[test]
    fn a_row_splits_into_its_parts(
        op in operation(), events in proptest::collection::vec(event(), 0..4),
        request in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
        response in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
    ) {
        let record = encode_op(&op);
        let history = encode_events(&events)[1..].to_vec();
        let row = Row {
            record: &record,
            request: request.as_deref(),
            response: response.as_deref(),
            history: &history,
        };
        let bytes = encode_row(&row);
        prop_assert_eq!(split_row(&bytes), Some(row));
        prop_assert_eq!(decode_appended(&history), Some(events));
        let bare = Row { record: &record, request: None, response: None, history: &[] };
        prop_assert_eq!(split_row(&record), Some(bare));
        for cut in 1..bytes.len().min(4) {
            prop_assert!(split_row(&bytes[..cut]).is_none_or(|r| r.record.len() < record.len()));
        }
    }
}
