//! The compact binary layout (codec version 3) of operation records, events and stored
//! responses: what both backends write since the ledger's bytes per operation were cut
//! (docs/decisions.md, "A compact record encoding").
//!
//! Integers are LEB128 varints (signed ones zigzagged), strings a varint length then UTF-8
//! bytes, times other than `created_at` differences from it. Nothing is spelled twice: an ID
//! of the usual form `{provider}/{route}/{rest}` keeps only `rest`, a key equal to `rest` is a
//! flag, lowercase hex (fingerprints, hashes) is kept as its bytes, and an event's detail that
//! one of a few fixed sentences would rebuild is kept as that sentence's number. Enums are
//! kept as the numbers of the tables below, never their declaration order, so reordering an
//! enum changes no stored meaning; a new variant takes a new number at the end.
//!
//! This file owns the layouts of records and events and nothing else; `response` owns the
//! stored response's, `row` the redb `ops` value's. Decoding never panics: anything it does
//! not understand is `None`, which its caller turns into a `Fault`.

use std::collections::BTreeMap;

use http::HeaderName;

use crate::clock::Timestamp;
use crate::fingerprint::LEGACY;
use crate::operation::{Approval, Event, EventKind, Operation, ResponseMeta, State};
use crate::policy::{Effect, KeyPlacement};

use super::fast::Fields;

mod response;
mod row;

pub(super) use response::{decode_response, encode_response};
pub(in crate::ledger) use row::{Row, encode_row, split_row};

/// The first byte of every compact operation record and event list. JSON records begin with
/// `{`, the first stored-response format with 1.
pub(super) const VERSION: u8 = 3;

/// The first byte of a compact stored response.
pub(super) const RESPONSE_VERSION: u8 = 2;

const EFFECTS: [Effect; 4] = [
    Effect::ReadOnly,
    Effect::Idempotent,
    Effect::Compensable,
    Effect::Irreversible,
];

const STATES: [State; 5] = [
    State::Prepared,
    State::InFlight,
    State::Succeeded,
    State::Failed,
    State::Unknown,
];

const APPROVALS: [Approval; 4] = [
    Approval::NotRequired,
    Approval::Pending,
    Approval::Approved,
    Approval::Rejected,
];

const KINDS: [EventKind; 18] = [
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

/// The key header most providers name, kept as its code alone.
const IDEMPOTENCY_KEY: &str = "idempotency-key";

// Flags of an operation record: which optional parts follow, and what is left out.
const KEY_AT: u32 = 1;
const FIRST_DISPATCHED: u32 = 1 << 1;
const LAST_DISPATCHED: u32 = 1 << 2;
const MAYBE_EFFECT: u32 = 1 << 3;
const PROVIDER_REQUEST_ID: u32 = 1 << 4;
const RESPONSE: u32 = 1 << 5;
const ERROR: u32 = 1 << 6;
const PRUNED: u32 = 1 << 7;
const PRINCIPAL: u32 = 1 << 8;
const KEYED: u32 = 1 << 9;
/// The ID is `{provider}/{route}/{rest}`; only `rest` is kept.
const ID_SPLIT: u32 = 1 << 10;
/// The idempotency key is that `rest`, and not kept again.
const KEY_IS_REST: u32 = 1 << 11;

pub(super) fn encode_op(op: &Operation) -> Vec<u8> {
    let mut out = Out(Vec::with_capacity(160));
    out.0.push(VERSION);
    let rest = op
        .id
        .strip_prefix(op.provider.as_str())
        .and_then(|r| r.strip_prefix('/'))
        .and_then(|r| r.strip_prefix(op.route.as_str()))
        .and_then(|r| r.strip_prefix('/'));
    let keyed = !op.fingerprint.starts_with(LEGACY);
    let fingerprint = op
        .fingerprint
        .strip_prefix(LEGACY)
        .unwrap_or(&op.fingerprint);
    let flags = [
        (op.key_placement.is_some(), KEY_AT),
        (op.first_dispatched_at.is_some(), FIRST_DISPATCHED),
        (op.last_dispatched_at.is_some(), LAST_DISPATCHED),
        (op.maybe_effect_at.is_some(), MAYBE_EFFECT),
        (op.provider_request_id.is_some(), PROVIDER_REQUEST_ID),
        (op.response.is_some(), RESPONSE),
        (op.error.is_some(), ERROR),
        (op.pruned_at.is_some(), PRUNED),
        (op.principal.is_some(), PRINCIPAL),
        (keyed, KEYED),
        (rest.is_some(), ID_SPLIT),
        (rest == Some(op.idempotency_key.as_str()), KEY_IS_REST),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .fold(0, |flags, (_, bit)| flags | bit);
    out.uint(u64::from(flags));
    out.code(&EFFECTS, op.effect);
    out.code(&STATES, op.state);
    out.code(&APPROVALS, op.approval);
    out.text(&op.provider);
    out.text(&op.route);
    out.text(rest.unwrap_or(&op.id));
    if flags & KEY_IS_REST == 0 {
        out.hexish(&op.idempotency_key);
    }
    out.hexish(fingerprint);
    out.uint(op.fields.len() as u64);
    for (name, hash) in &op.fields {
        out.text(name);
        out.hexish(hash);
    }
    match &op.key_placement {
        Some(KeyPlacement::Header(name)) if name == IDEMPOTENCY_KEY => out.0.push(2),
        Some(KeyPlacement::Header(name)) => {
            out.0.push(0);
            out.text(name.as_str());
        }
        Some(KeyPlacement::JsonField(pointer)) => {
            out.0.push(1);
            out.text(pointer);
        }
        None => {}
    }
    out.uint(u64::from(op.attempts));
    let created = op.created_at.0;
    out.int(created);
    out.int(op.updated_at.0.wrapping_sub(created));
    for at in [
        op.first_dispatched_at,
        op.last_dispatched_at,
        op.maybe_effect_at,
    ]
    .into_iter()
    .flatten()
    {
        out.int(at.0.wrapping_sub(created));
    }
    if let Some(id) = &op.provider_request_id {
        out.text(id);
    }
    if let Some(meta) = &op.response {
        out.uint(u64::from(meta.status));
        out.uint(meta.body_bytes);
        out.hexish(&meta.body_sha256);
    }
    if let Some(error) = &op.error {
        out.text(error);
    }
    out.uint(op.fence);
    if let Some(at) = op.pruned_at {
        out.int(at.0.wrapping_sub(created));
    }
    if let Some(principal) = &op.principal {
        out.hexish(principal);
    }
    out.0
}

/// The operation in `bytes` (which begin with `VERSION`), or `None` if they are not one.
pub(super) fn decode_op(bytes: &[u8], read: Fields) -> Option<Operation> {
    let mut input = In(bytes);
    if input.byte()? != VERSION {
        return None;
    }
    let flags = u32::try_from(input.uint()?).ok()?;
    let on = |bit: u32| flags & bit != 0;
    let effect = input.code(&EFFECTS)?;
    let state = input.code(&STATES)?;
    let approval = input.code(&APPROVALS)?;
    let provider = input.text()?.to_owned();
    let route = input.text()?.to_owned();
    let tail = input.text()?;
    let id = match on(ID_SPLIT) {
        true => format!("{provider}/{route}/{tail}"),
        false => tail.to_owned(),
    };
    let idempotency_key = match (on(ID_SPLIT), on(KEY_IS_REST)) {
        (true, true) => tail.to_owned(),
        (false, true) => return None,
        (_, false) => input.hexish()?,
    };
    let fingerprint = input.hexish()?;
    let mut fields = BTreeMap::new();
    for _ in 0..input.uint()? {
        let name = input.text()?;
        let hash = input.hexish()?;
        if read == Fields::Read {
            fields.insert(name.to_owned(), hash);
        }
    }
    let key_placement = match on(KEY_AT) {
        true => Some(match input.byte()? {
            0 => KeyPlacement::Header(HeaderName::from_bytes(input.text()?.as_bytes()).ok()?),
            1 => KeyPlacement::JsonField(input.text()?.to_owned()),
            2 => KeyPlacement::Header(HeaderName::from_static(IDEMPOTENCY_KEY)),
            _ => return None,
        }),
        false => None,
    };
    let attempts = u32::try_from(input.uint()?).ok()?;
    let created = input.int()?;
    let at = |bit: u32, input: &mut In| -> Option<Option<Timestamp>> {
        match on(bit) {
            true => Some(Some(Timestamp(created.wrapping_add(input.int()?)))),
            false => Some(None),
        }
    };
    let updated_at = Timestamp(created.wrapping_add(input.int()?));
    let first_dispatched_at = at(FIRST_DISPATCHED, &mut input)?;
    let last_dispatched_at = at(LAST_DISPATCHED, &mut input)?;
    let maybe_effect_at = at(MAYBE_EFFECT, &mut input)?;
    let provider_request_id = input.text_if(on(PROVIDER_REQUEST_ID))?;
    let response = match on(RESPONSE) {
        true => Some(ResponseMeta {
            status: u16::try_from(input.uint()?).ok()?,
            body_bytes: input.uint()?,
            body_sha256: input.hexish()?,
        }),
        false => None,
    };
    let error = input.text_if(on(ERROR))?;
    let fence = input.uint()?;
    let pruned_at = at(PRUNED, &mut input)?;
    let principal = match on(PRINCIPAL) {
        true => Some(input.hexish()?),
        false => None,
    };
    if !input.0.is_empty() {
        return None;
    }
    Some(Operation {
        id,
        provider,
        route,
        effect,
        state,
        fingerprint: match on(KEYED) {
            true => fingerprint,
            false => format!("{LEGACY}{fingerprint}"),
        },
        fields,
        idempotency_key,
        key_placement,
        attempts,
        created_at: Timestamp(created),
        updated_at,
        first_dispatched_at,
        last_dispatched_at,
        maybe_effect_at,
        provider_request_id,
        response,
        error,
        fence,
        approval,
        pruned_at,
        principal,
    })
}

/// Events in order: `VERSION`, then per event its kind, attempt, time (a difference from the
/// event before; the first from 0) and detail. One event is the list of one.
pub(super) fn encode_events(events: &[Event]) -> Vec<u8> {
    let mut out = Out(Vec::with_capacity(1 + 8 * events.len()));
    out.0.push(VERSION);
    append_events(&mut out.0, 0, events);
    out.0
}

/// Appends `events` to an encoded list whose last event is at `last` (0 for an empty list).
pub(super) fn append_events(list: &mut Vec<u8>, mut last: i64, events: &[Event]) {
    let mut out = Out(std::mem::take(list));
    for event in events {
        out.code(&KINDS, event.kind);
        out.uint(u64::from(event.attempt));
        out.int(event.at.0.wrapping_sub(last));
        last = event.at.0;
        out.detail(event);
    }
    *list = out.0;
}

/// The events of a list `encode_events` wrote, or `None` if `bytes` are not one.
pub(super) fn decode_events(bytes: &[u8]) -> Option<Vec<Event>> {
    match bytes.split_first() {
        Some((&VERSION, events)) => decode_appended(events),
        _ => None,
    }
}

/// The events `append_events` wrote to an empty list, in order.
pub(super) fn decode_appended(bytes: &[u8]) -> Option<Vec<Event>> {
    let mut input = In(bytes);
    let mut events = Vec::new();
    let mut last = 0i64;
    while !input.0.is_empty() {
        let kind = input.code(&KINDS)?;
        let attempt = u32::try_from(input.uint()?).ok()?;
        let at = last.wrapping_add(input.int()?);
        last = at;
        let detail = input.detail(attempt)?;
        events.push(Event {
            at: Timestamp(at),
            kind,
            attempt,
            detail,
        });
    }
    Some(events)
}

/// The fixed sentences an event's detail may be kept as (its code), each rebuilt from the
/// event's attempt and, for some, one number.
const LITERAL: u8 = 0;
const NEW_OPERATION: u8 = 1;
const SENT: u8 = 2;
const SENT_BY_SETTLER: u8 = 3;
const STATUS: u8 = 4;
const STATE_NAME: u8 = 5;

fn sentence(code: u8, attempt: u32) -> Option<String> {
    match code {
        NEW_OPERATION => Some(format!("attempt {attempt}: new operation")),
        SENT => Some(format!("attempt {attempt} sent")),
        SENT_BY_SETTLER => Some(format!("attempt {attempt} sent by the settler")),
        _ => None,
    }
}

/// The output of an encoding.
struct Out(Vec<u8>);

impl Out {
    fn uint(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.0.push((n as u8) | 0x80);
            n >>= 7;
        }
        self.0.push(n as u8);
    }

    fn int(&mut self, n: i64) {
        self.uint(((n << 1) ^ (n >> 63)) as u64);
    }

    fn bytes(&mut self, b: &[u8]) {
        self.uint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn text(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    /// A string that is usually lowercase hex: its length doubled plus one and the bytes it
    /// spells when it is (non-empty, even length), else its length doubled and its text.
    fn hexish(&mut self, s: &str) {
        let hex = !s.is_empty()
            && s.len().is_multiple_of(2)
            && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        match hex.then(|| hex::decode(s).ok()).flatten() {
            Some(raw) => {
                self.uint(raw.len() as u64 * 2 + 1);
                self.0.extend_from_slice(&raw);
            }
            None => {
                self.uint(s.len() as u64 * 2);
                self.0.extend_from_slice(s.as_bytes());
            }
        }
    }

    fn code<T: PartialEq>(&mut self, table: &[T], value: T) {
        // Every variant is in its table (the tests say so); a missing one would be refused
        // on reading, never misread.
        let code = table.iter().position(|t| *t == value).unwrap_or(usize::MAX);
        self.uint(code as u64);
    }

    fn detail(&mut self, event: &Event) {
        let d = event.detail.as_str();
        for code in [NEW_OPERATION, SENT, SENT_BY_SETTLER] {
            if sentence(code, event.attempt).as_deref() == Some(d) {
                self.0.push(code);
                return;
            }
        }
        if let Some(n) = d
            .strip_prefix("status ")
            .and_then(|n| n.parse::<u16>().ok())
            && format!("status {n}") == d
        {
            self.0.push(STATUS);
            self.uint(u64::from(n));
            return;
        }
        if let Some(state) = State::parse(d) {
            self.0.push(STATE_NAME);
            self.code(&STATES, state);
            return;
        }
        self.0.push(LITERAL);
        self.text(d);
    }
}

/// The input of a decoding; every read is bounds-checked.
struct In<'a>(&'a [u8]);

impl<'a> In<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (first, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(*first)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn uint(&mut self) -> Option<u64> {
        let mut n: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            let bits = u64::from(b & 0x7f);
            if shift == 63 && bits > 1 {
                return None;
            }
            n |= bits << shift;
            if b & 0x80 == 0 {
                return Some(n);
            }
        }
        None
    }

    fn int(&mut self) -> Option<i64> {
        let z = self.uint()?;
        Some(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.uint()?).ok()?;
        self.take(len)
    }

    fn text(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }

    fn text_if(&mut self, present: bool) -> Option<Option<String>> {
        match present {
            true => Some(Some(self.text()?.to_owned())),
            false => Some(None),
        }
    }

    fn hexish(&mut self) -> Option<String> {
        let tagged = self.uint()?;
        let len = usize::try_from(tagged / 2).ok()?;
        let raw = self.take(len)?;
        match tagged % 2 {
            1 if len > 0 => Some(hex::encode(raw)),
            0 => std::str::from_utf8(raw).ok().map(str::to_owned),
            _ => None,
        }
    }

    fn code<T: Copy>(&mut self, table: &[T]) -> Option<T> {
        table.get(usize::try_from(self.uint()?).ok()?).copied()
    }

    fn detail(&mut self, attempt: u32) -> Option<String> {
        match self.byte()? {
            LITERAL => Some(self.text()?.to_owned()),
            STATUS => Some(format!("status {}", u16::try_from(self.uint()?).ok()?)),
            STATE_NAME => Some(self.code(&STATES)?.as_str().to_owned()),
            code => sentence(code, attempt),
        }
    }
}

#[cfg(test)]
mod tests;
