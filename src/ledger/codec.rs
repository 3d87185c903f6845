//! Byte encodings of what the ledger stores: operations, events, responses and list cursors.
//!
//! This file owns the on-disk value formats and nothing else: it never opens a table. Decoding
//! never panics; bytes it does not understand become a `Fault` naming what was corrupt.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

use super::fault::Fault;
use crate::clock::Timestamp;
use crate::fingerprint::LEGACY;
use crate::operation::{
    Approval, Event, EventKind, Operation, ResponseMeta, State, StoredResponse,
};
use crate::policy::{Effect, KeyPlacement};

mod compact;
mod fast;

use fast::Fields;

/// An operation as stored: enums as their names, so a reordered enum never changes meaning.
#[derive(Serialize, Deserialize)]
struct OpRecord {
    /// The record layout: absent (1) before `key_at` and `maybe_effect_at` existed.
    #[serde(default = "layout_1")]
    v: u8,
    id: String,
    provider: String,
    route: String,
    effect: String,
    state: String,
    fingerprint: String,
    #[serde(default)]
    fields: BTreeMap<String, String>,
    idempotency_key: String,
    /// `header:NAME` or `json:/pointer`; absent in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key_at: Option<String>,
    attempts: u32,
    created_at: i64,
    updated_at: i64,
    first_dispatched_at: Option<i64>,
    last_dispatched_at: Option<i64>,
    #[serde(default)]
    maybe_effect_at: Option<i64>,
    provider_request_id: Option<String>,
    response: Option<MetaRecord>,
    error: Option<String>,
    fence: u64,
    approval: String,
    /// Only in a tombstone's record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pruned_at: Option<i64>,
    /// Absent in records written before principals existed.
    #[serde(default)]
    principal: Option<String>,
    /// Whether `fingerprint` and `fields` are keyed; absent (false) in records written before
    /// hashes were keyed, which `decode_op` marks with `fingerprint::LEGACY`.
    #[serde(default)]
    keyed: bool,
}

#[derive(Serialize, Deserialize)]
struct MetaRecord {
    status: u16,
    body_bytes: u64,
    body_sha256: String,
}

#[derive(Serialize, Deserialize)]
struct EventRecord {
    at: i64,
    kind: String,
    attempt: u32,
    detail: String,
}

/// The layout `encode_op` writes.
const LAYOUT: u8 = 2;

fn layout_1() -> u8 {
    1
}

/// An operation's record as this build writes it: the compact layout (`compact`).
pub(super) fn encode_op(op: &Operation) -> Result<Vec<u8>, Fault> {
    Ok(compact::encode_op(op))
}

/// An operation's record as builds before the compact layout wrote it (JSON, layout 2): for
/// the tests that read what an older build left.
#[cfg(test)]
pub(super) fn encode_op_json(op: &Operation) -> Result<Vec<u8>, Fault> {
    let record = OpRecord {
        v: LAYOUT,
        id: op.id.clone(),
        provider: op.provider.clone(),
        route: op.route.clone(),
        effect: op.effect.as_str().to_owned(),
        state: op.state.as_str().to_owned(),
        fingerprint: legacy_free(&op.fingerprint).to_owned(),
        fields: op.fields.clone(),
        idempotency_key: op.idempotency_key.clone(),
        key_at: op.key_placement.as_ref().map(key_at_str),
        attempts: op.attempts,
        created_at: op.created_at.0,
        updated_at: op.updated_at.0,
        first_dispatched_at: op.first_dispatched_at.map(|t| t.0),
        last_dispatched_at: op.last_dispatched_at.map(|t| t.0),
        maybe_effect_at: op.maybe_effect_at.map(|t| t.0),
        provider_request_id: op.provider_request_id.clone(),
        response: op.response.as_ref().map(|m| MetaRecord {
            status: m.status,
            body_bytes: m.body_bytes,
            body_sha256: m.body_sha256.clone(),
        }),
        error: op.error.clone(),
        fence: op.fence,
        approval: approval_str(op.approval).to_owned(),
        pruned_at: op.pruned_at.map(|t| t.0),
        principal: op.principal.clone(),
        keyed: !op.fingerprint.starts_with(LEGACY),
    };
    serde_json::to_vec(&record).map_err(|e| Fault::new(format!("cannot encode {}: {e}", op.id)))
}

pub(super) fn decode_op(bytes: &[u8]) -> Result<Operation, Fault> {
    decode(bytes, Fields::Read)
}

/// `decode_op` without the per-field hashes (`fields` is empty): for the snapshot read of a
/// replay, whose decision never reads them (they only name the differing fields of a
/// conflict, which the claim transaction decides on its own full read).
pub(super) fn decode_op_for_replay(bytes: &[u8]) -> Result<Operation, Fault> {
    decode(bytes, Fields::Skipped)
}

fn decode(bytes: &[u8], read: Fields) -> Result<Operation, Fault> {
    let bytes = split_row(bytes)?.record;
    if bytes.first() == Some(&compact::VERSION) {
        return compact::decode_op(bytes, read)
            .ok_or_else(|| Fault::new("corrupt operation record".to_owned()));
    }
    // Records older builds wrote are JSON. The record as `encode_op` lays it out is scanned; anything else serde decodes.
    let r: OpRecord = match fast::op_record(bytes, read) {
        Some(r) => r,
        None => {
            let mut r: OpRecord = serde_json::from_slice(bytes)
                .map_err(|e| Fault::new(format!("corrupt operation record: {e}")))?;
            if read == Fields::Skipped {
                r.fields.clear();
            }
            r
        }
    };
    let corrupt = |what: &str| Fault::new(format!("operation {}: unknown {what}", r.id));
    let effect = parse_effect(&r.effect).ok_or_else(|| corrupt("effect"))?;
    let state = State::parse(&r.state).ok_or_else(|| corrupt("state"))?;
    let approval = parse_approval(&r.approval).ok_or_else(|| corrupt("approval"))?;
    let key_placement = match &r.key_at {
        Some(at) => Some(parse_key_at(at).ok_or_else(|| corrupt("key placement"))?),
        None => None,
    };
    // Records written before `maybe_effect_at` existed: an unknown one may have taken effect
    // as late as it became unknown.
    let maybe_effect_at = match (r.maybe_effect_at, state) {
        (None, State::Unknown) if r.v < LAYOUT => Some(Timestamp(r.updated_at)),
        (at, _) => at.map(Timestamp),
    };
    Ok(Operation {
        id: r.id,
        provider: r.provider,
        route: r.route,
        effect,
        state,
        fingerprint: if r.keyed {
            r.fingerprint
        } else {
            format!("{LEGACY}{}", r.fingerprint)
        },
        fields: r.fields,
        idempotency_key: r.idempotency_key,
        key_placement,
        attempts: r.attempts,
        created_at: Timestamp(r.created_at),
        updated_at: Timestamp(r.updated_at),
        first_dispatched_at: r.first_dispatched_at.map(Timestamp),
        last_dispatched_at: r.last_dispatched_at.map(Timestamp),
        maybe_effect_at,
        provider_request_id: r.provider_request_id,
        response: r.response.map(|m| ResponseMeta {
            status: m.status,
            body_bytes: m.body_bytes,
            body_sha256: m.body_sha256,
        }),
        error: r.error,
        fence: r.fence,
        approval,
        pruned_at: r.pruned_at.map(Timestamp),
        principal: r.principal,
    })
}

/// One event as this build writes it (a compact list of one).
pub(super) fn encode_event(event: &Event) -> Result<Vec<u8>, Fault> {
    Ok(compact::encode_events(std::slice::from_ref(event)))
}

/// One event as builds before the compact layout wrote it (JSON), for tests.
#[cfg(test)]
pub(super) fn encode_event_json(event: &Event) -> Result<Vec<u8>, Fault> {
    let record = EventRecord {
        at: event.at.0,
        kind: event.kind.as_str().to_owned(),
        attempt: event.attempt,
        detail: event.detail.clone(),
    };
    serde_json::to_vec(&record).map_err(|e| Fault::new(format!("cannot encode an event: {e}")))
}

pub(super) fn decode_event(bytes: &[u8]) -> Result<Event, Fault> {
    if bytes.first() == Some(&compact::VERSION) {
        return match compact::decode_events(bytes).as_deref() {
            Some([event]) => Ok(event.clone()),
            _ => Err(Fault::new("corrupt event record".to_owned())),
        };
    }
    let r: EventRecord = serde_json::from_slice(bytes)
        .map_err(|e| Fault::new(format!("corrupt event record: {e}")))?;
    let kind = EventKind::parse(&r.kind)
        .ok_or_else(|| Fault::new(format!("unknown event kind {:?}", r.kind)))?;
    Ok(Event {
        at: Timestamp(r.at),
        kind,
        attempt: r.attempt,
        detail: r.detail,
    })
}

pub(super) use compact::Row;

/// A redb `ops` value: an operation's record, kept request and history together
/// (`compact::encode_row`). `decode_op` reads the record of one as of a bare record.
pub(super) fn encode_row(row: &Row<'_>) -> Vec<u8> {
    compact::encode_row(row)
}

/// The parts of a redb `ops` value; a bare record has no kept request and no history.
pub(super) fn split_row(bytes: &[u8]) -> Result<Row<'_>, Fault> {
    compact::split_row(bytes).ok_or_else(|| Fault::new("corrupt operation row".to_owned()))
}

/// A row's history with `events` appended.
pub(super) fn append_history(history: &[u8], events: &[Event]) -> Result<Vec<u8>, Fault> {
    let last = decode_history(history)?.last().map_or(0, |e| e.at.0);
    let mut out = history.to_vec();
    compact::append_events(&mut out, last, events);
    Ok(out)
}

/// The events of a row's history, in order.
pub(super) fn decode_history(history: &[u8]) -> Result<Vec<Event>, Fault> {
    compact::decode_appended(history).ok_or_else(|| Fault::new("corrupt history".to_owned()))
}

/// Version tag of the first response format below, which older builds wrote.
const RESPONSE_V1: u8 = 1;

/// A stored response as this build writes it (`compact`).
pub(super) fn encode_response(response: &StoredResponse) -> Vec<u8> {
    compact::encode_response(response)
}

/// `[1][status u16][header count u32]([name len u32][name][value len u32][value])*[body]`,
/// integers big-endian. Binary rather than JSON because header values may be non-UTF-8 bytes
/// and bodies may be large. Older builds wrote it; kept for the tests that read their ledgers.
#[cfg(test)]
pub(super) fn encode_response_v1(response: &StoredResponse) -> Vec<u8> {
    let headers_len: usize = response
        .headers
        .iter()
        .map(|(n, v)| 8 + n.as_str().len() + v.len())
        .sum();
    let mut out = Vec::with_capacity(7 + headers_len + response.body.len());
    out.push(RESPONSE_V1);
    out.extend_from_slice(&response.status.to_be_bytes());
    out.extend_from_slice(&len_u32(response.headers.len()).to_be_bytes());
    for (name, value) in &response.headers {
        put_chunk(&mut out, name.as_str().as_bytes());
        put_chunk(&mut out, value.as_bytes());
    }
    out.extend_from_slice(&response.body);
    out
}

pub(super) fn decode_response(bytes: &[u8]) -> Result<StoredResponse, Fault> {
    let corrupt = || Fault::new("corrupt stored response".to_owned());
    if bytes.first() == Some(&compact::RESPONSE_VERSION) {
        return compact::decode_response(bytes).ok_or_else(corrupt);
    }
    // One copy of the stored bytes, which the header values and the body then share.
    let shared = Bytes::copy_from_slice(bytes);
    let mut input = Reader(&shared);
    if input.take(1).ok_or_else(corrupt)? != [RESPONSE_V1] {
        return Err(corrupt());
    }
    let status = u16::from_be_bytes(input.array().ok_or_else(corrupt)?);
    let count = u32::from_be_bytes(input.array().ok_or_else(corrupt)?);
    // Room for the headers a stored count names, within reason (it is read from the file),
    // and for the three `Idem-*` headers a replay adds, so the map is not grown for those.
    let mut headers = HeaderMap::with_capacity(count.min(64) as usize + 3);
    for _ in 0..count {
        let name = input.chunk().ok_or_else(corrupt)?;
        let value = input.chunk().ok_or_else(corrupt)?;
        let name = HeaderName::from_bytes(name).map_err(|_| corrupt())?;
        let value =
            HeaderValue::from_maybe_shared(shared.slice_ref(value)).map_err(|_| corrupt())?;
        headers.append(name, value);
    }
    Ok(StoredResponse {
        status,
        headers,
        body: shared.slice_ref(input.0),
    })
}

/// An opaque list cursor: hex of the last listed operation's `created_at` and ID.
pub(super) fn encode_cursor(created_at: i64, id: &str) -> String {
    let mut raw = created_at.to_be_bytes().to_vec();
    raw.extend_from_slice(id.as_bytes());
    hex::encode(raw)
}

/// The `(created_at, id)` a cursor points after, or `None` for anything `encode_cursor` did
/// not make.
pub(super) fn decode_cursor(cursor: &str) -> Option<(i64, String)> {
    let raw = hex::decode(cursor).ok()?;
    let (created, id) = raw.split_first_chunk::<8>()?;
    let id = String::from_utf8(id.to_vec()).ok()?;
    Some((i64::from_be_bytes(*created), id))
}

#[cfg(test)]
fn key_at_str(placement: &KeyPlacement) -> String {
    match placement {
        KeyPlacement::Header(name) => format!("header:{name}"),
        KeyPlacement::JsonField(pointer) => format!("json:{pointer}"),
    }
}

fn parse_key_at(s: &str) -> Option<KeyPlacement> {
    if let Some(name) = s.strip_prefix("header:") {
        return http::HeaderName::from_bytes(name.as_bytes())
            .ok()
            .map(KeyPlacement::Header);
    }
    s.strip_prefix("json:")
        .map(|pointer| KeyPlacement::JsonField(pointer.to_owned()))
}

#[cfg(test)]
/// A fingerprint as stored: without the in-memory `LEGACY` mark (`keyed` says it instead).
fn legacy_free(fingerprint: &str) -> &str {
    fingerprint.strip_prefix(LEGACY).unwrap_or(fingerprint)
}

fn approval_str(approval: Approval) -> &'static str {
    match approval {
        Approval::NotRequired => "not_required",
        Approval::Pending => "pending",
        Approval::Approved => "approved",
        Approval::Rejected => "rejected",
    }
}

fn parse_approval(s: &str) -> Option<Approval> {
    [
        Approval::NotRequired,
        Approval::Pending,
        Approval::Approved,
        Approval::Rejected,
    ]
    .into_iter()
    .find(|a| approval_str(*a) == s)
}

fn parse_effect(s: &str) -> Option<Effect> {
    [
        Effect::ReadOnly,
        Effect::Idempotent,
        Effect::Compensable,
        Effect::Irreversible,
    ]
    .into_iter()
    .find(|e| e.as_str() == s)
}

#[cfg(test)]
/// Header names and values are far below 4 GiB (hyper refuses much smaller ones), so the
/// saturation never happens in practice; it only keeps the conversion total.
fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

#[cfg(test)]
fn put_chunk(out: &mut Vec<u8>, chunk: &[u8]) {
    out.extend_from_slice(&len_u32(chunk.len()).to_be_bytes());
    out.extend_from_slice(chunk);
}

/// A cursor over bytes whose every read is bounds-checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn chunk(&mut self) -> Option<&'a [u8]> {
        let len = u32::from_be_bytes(self.array()?);
        self.take(usize::try_from(len).ok()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_round_trips_with_non_utf8_header_bytes() {
        let mut headers = HeaderMap::new();
        headers.append("x-raw", HeaderValue::from_bytes(b"caf\xe9").unwrap());
        headers.append("x-raw", HeaderValue::from_static("second"));
        headers.append("content-type", HeaderValue::from_static("application/json"));
        let response = StoredResponse {
            status: 201,
            headers,
            body: Bytes::from_static(b"{\"id\":\"re_1\"}"),
        };
        let decoded = decode_response(&encode_response(&response)).unwrap();
        assert_eq!(decoded, response);
        let old = decode_response(&encode_response_v1(&response)).unwrap();
        assert_eq!(old, response);
    }

    #[test]
    fn truncated_response_is_a_fault_not_a_panic() {
        let mut headers = HeaderMap::new();
        headers.append("x-a", HeaderValue::from_static("b"));
        let response = StoredResponse {
            status: 200,
            headers,
            body: Bytes::new(),
        };
        // Both formats have an empty body here, so every cut loses part of a header.
        for bytes in [encode_response(&response), encode_response_v1(&response)] {
            for cut in 0..bytes.len() {
                assert!(decode_response(&bytes[..cut]).is_err(), "cut at {cut}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn every_stored_response_round_trips(
            status in proptest::prelude::any::<u16>(),
            headers in proptest::collection::vec(
                ("[a-z][a-z0-9-]{0,12}", proptest::collection::vec(proptest::prelude::any::<u8>(), 0..16)),
                0..6,
            ),
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            let mut map = HeaderMap::new();
            for (name, value) in headers {
                if let Ok(value) = HeaderValue::from_bytes(&value) {
                    map.append(HeaderName::from_bytes(name.as_bytes()).expect("a token"), value);
                }
            }
            let response = StoredResponse { status, headers: map, body: Bytes::from(body) };
            proptest::prop_assert_eq!(decode_response(&encode_response_v1(&response)).ok(), Some(response.clone()));
            proptest::prop_assert_eq!(decode_response(&encode_response(&response)).ok(), Some(response));
        }

        #[test]
        fn every_cursor_round_trips(created_at in proptest::prelude::any::<i64>(), id in ".*") {
            proptest::prop_assert_eq!(decode_cursor(&encode_cursor(created_at, &id)), Some((created_at, id)));
        }
    }

    #[test]
    fn cursor_round_trips_and_rejects_garbage() {
        let cursor = encode_cursor(-5, "stripe/refund/é");
        assert_eq!(
            decode_cursor(&cursor),
            Some((-5, "stripe/refund/é".to_owned()))
        );
        assert_eq!(decode_cursor("zz"), None);
        assert_eq!(decode_cursor("0011"), None);
        assert_eq!(decode_cursor(""), None);
    }

    #[test]
    fn records_older_versions_wrote_are_marked_legacy_and_keep_their_format() {
        let old = br#"{"id":"p/r/x","provider":"p","route":"r","effect":"irreversible",
            "state":"succeeded","fingerprint":"ab12","fields":{"amount":"0123"},
            "idempotency_key":"k","attempts":1,"created_at":1,"updated_at":1,
            "first_dispatched_at":1,"last_dispatched_at":1,"provider_request_id":null,
            "response":null,"error":null,"fence":0,"approval":"not_required"}"#;
        let op = decode_op(old).unwrap();
        assert_eq!(op.fingerprint, format!("{LEGACY}ab12"));
        assert_eq!(op.principal, None);
        let again = encode_op_json(&op).unwrap();
        let text = String::from_utf8_lossy(&again);
        assert!(text.contains(r#""fingerprint":"ab12""#) && text.contains(r#""keyed":false"#));
        assert_eq!(decode_op(&again).unwrap(), op);
        // Rewritten in the compact layout, it stays legacy.
        assert_eq!(decode_op(&encode_op(&op).unwrap()).unwrap(), op);
        let keyed = Operation {
            fingerprint: "cd34".into(),
            ..op
        };
        assert_eq!(decode_op(&encode_op(&keyed).unwrap()).unwrap(), keyed);
    }
}
