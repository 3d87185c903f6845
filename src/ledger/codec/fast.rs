//! The fast path of `decode_op`: an operation record read by a scan that expects exactly the
//! JSON `encode_op` writes (its fields in their order, strings without escapes, integers).
//!
//! Every replay decodes one record, and serde's general decoding was a fifth of a replay's
//! work. This scan gives up (`None`) on anything it does not expect, and `decode_op` then
//! decodes the same bytes with serde: so for every input it accepts it must build the very
//! record serde would (the tests below hold it to that), and it never decides an error.

use std::collections::BTreeMap;

use super::{MetaRecord, OpRecord};

/// Whether the per-field hashes are read, or passed over (a replay's decision never reads
/// them).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Fields {
    Read,
    Skipped,
}

/// The record `serde_json::from_slice` would make of `bytes`, if `bytes` is laid out as
/// `encode_op` writes it (with no `fields` when they are `Skipped`); `None` for anything else
/// (decode it the general way).
pub(super) fn op_record(bytes: &[u8], read: Fields) -> Option<OpRecord> {
    // One check of the whole record rather than one per string: serde would refuse a record
    // that is not UTF-8, and every slice taken below ends at an ASCII byte.
    let mut s = Scan(std::str::from_utf8(bytes).ok()?);
    s.lit("{\"v\":")?;
    let v = u8::try_from(s.uint()?).ok()?;
    let id = s.field("id")?.string()?;
    let provider = s.field("provider")?.string()?;
    let route = s.field("route")?.string()?;
    let effect = s.field("effect")?.string()?;
    let state = s.field("state")?.string()?;
    let fingerprint = s.field("fingerprint")?.string()?;
    let fields = s.field("fields")?.map(read)?;
    let idempotency_key = s.field("idempotency_key")?.string()?;
    let key_at = match s.maybe_field("key_at") {
        true => Some(s.string()?),
        false => None,
    };
    let attempts = u32::try_from(s.field("attempts")?.uint()?).ok()?;
    let created_at = s.field("created_at")?.int()?;
    let updated_at = s.field("updated_at")?.int()?;
    let first_dispatched_at = s.field("first_dispatched_at")?.or_null(Scan::int)?;
    let last_dispatched_at = s.field("last_dispatched_at")?.or_null(Scan::int)?;
    let maybe_effect_at = s.field("maybe_effect_at")?.or_null(Scan::int)?;
    let provider_request_id = s.field("provider_request_id")?.or_null(Scan::string)?;
    let response = s.field("response")?.or_null(Scan::meta)?;
    let error = s.field("error")?.or_null(Scan::string)?;
    let fence = s.field("fence")?.uint()?;
    let approval = s.field("approval")?.string()?;
    let pruned_at = match s.maybe_field("pruned_at") {
        true => Some(s.int()?),
        false => None,
    };
    let principal = s.field("principal")?.or_null(Scan::string)?;
    let keyed = s.field("keyed")?.boolean()?;
    s.lit("}")?;
    if !s.0.is_empty() {
        return None;
    }
    Some(OpRecord {
        v,
        id,
        provider,
        route,
        effect,
        state,
        fingerprint,
        fields,
        idempotency_key,
        key_at,
        attempts,
        created_at,
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
        keyed,
    })
}

/// The text not yet read.
struct Scan<'a>(&'a str);

impl<'a> Scan<'a> {
    fn lit(&mut self, expected: &str) -> Option<()> {
        self.0 = self.0.strip_prefix(expected)?;
        Some(())
    }

    /// `,"NAME":`, the separator and key of the next member.
    fn field(&mut self, name: &str) -> Option<&mut Self> {
        self.lit(",\"")?;
        self.lit(name)?;
        self.lit("\":")?;
        Some(self)
    }

    /// Reads `,"NAME":` if it comes next (a member `encode_op` leaves out when empty).
    fn maybe_field(&mut self, name: &str) -> bool {
        let before = self.0;
        if self.field(name).is_some() {
            return true;
        }
        self.0 = before;
        false
    }

    fn or_null<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.0.starts_with("null") {
            self.0 = &self.0[4..];
            return Some(None);
        }
        read(self).map(Some)
    }

    /// A string without escapes or control characters (those go the general way).
    fn string(&mut self) -> Option<String> {
        self.text().map(str::to_owned)
    }

    fn text(&mut self) -> Option<&'a str> {
        self.lit("\"")?;
        let end = plain_len(self.0.as_bytes());
        if self.0.as_bytes().get(end) != Some(&b'"') {
            return None;
        }
        let text = &self.0[..end];
        self.0 = &self.0[end + 1..];
        Some(text)
    }

    /// A JSON integer without sign, as JSON spells it (no leading zero), within u64.
    fn uint(&mut self) -> Option<u64> {
        let digits = self.0.bytes().take_while(|b| b.is_ascii_digit()).count();
        let (number, rest) = self.0.split_at(digits);
        if digits == 0 || (digits > 1 && number.starts_with('0')) {
            return None;
        }
        if rest.starts_with(['.', 'e', 'E']) {
            return None;
        }
        let mut n: u64 = 0;
        for d in number.bytes() {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        }
        self.0 = rest;
        Some(n)
    }

    fn int(&mut self) -> Option<i64> {
        if self.0.starts_with('-') {
            self.0 = &self.0[1..];
            // serde_json reads `-0` as a float, which no integer field takes.
            let n = self.uint().filter(|n| *n != 0)?;
            return 0i64.checked_sub_unsigned(n);
        }
        i64::try_from(self.uint()?).ok()
    }

    fn boolean(&mut self) -> Option<bool> {
        if self.lit("true").is_some() {
            return Some(true);
        }
        self.lit("false").map(|()| false)
    }

    /// A JSON object of strings, as a `BTreeMap<String, String>` is written (checked but not
    /// kept when `Skipped`).
    fn map(&mut self, read: Fields) -> Option<BTreeMap<String, String>> {
        self.lit("{")?;
        let mut map = BTreeMap::new();
        if self.lit("}").is_some() {
            return Some(map);
        }
        loop {
            let key = self.text()?;
            self.lit(":")?;
            let value = self.text()?;
            if read == Fields::Read {
                map.insert(key.to_owned(), value.to_owned());
            }
            if self.lit("}").is_some() {
                return Some(map);
            }
            self.lit(",")?;
        }
    }

    fn meta(&mut self) -> Option<MetaRecord> {
        self.lit("{\"status\":")?;
        let status = u16::try_from(self.uint()?).ok()?;
        let body_bytes = self.field("body_bytes")?.uint()?;
        let body_sha256 = self.field("body_sha256")?.string()?;
        self.lit("}")?;
        Some(MetaRecord {
            status,
            body_bytes,
            body_sha256,
        })
    }
}

/// How many bytes lead `s` before its first `"`, `\\` or control character: eight at a time
/// (a record is mostly long hex strings), then byte by byte.
fn plain_len(s: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether a byte of `w` is zero (exact for the lowest such byte, which is all we need:
    // any hit sends the word to the byte loop).
    let zero_in = |w: u64| w.wrapping_sub(ONES) & !w & HIGH != 0;
    let mut i = 0;
    while let Some(chunk) = s.get(i..i + 8) {
        let w = u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8]));
        let quote = zero_in(w ^ u64::from_ne_bytes([b'"'; 8]));
        let backslash = zero_in(w ^ u64::from_ne_bytes([b'\\'; 8]));
        // A byte under 0x20: subtracting 0x20 borrows into its high bit (bytes of 0x80 and
        // over already have it, so they are masked out with `!w`).
        let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH != 0;
        if quote || backslash || control {
            break;
        }
        i += 8;
    }
    i + s[i..]
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .unwrap_or(s.len() - i)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::{decode_op, encode_op_json as encode_op};
    use super::*;
    use crate::clock::Timestamp;
    use crate::operation::{Operation, ResponseMeta, State};
    use crate::policy::KeyPlacement;

    /// The serde decoding of `bytes`, re-encoded: a stand-in for equality of `OpRecord`s.
    fn serde_view(bytes: &[u8]) -> Option<String> {
        let r: OpRecord = serde_json::from_slice(bytes).ok()?;
        serde_json::to_string(&r).ok()
    }

    fn fast_view(bytes: &[u8]) -> Option<String> {
        op_record(bytes, Fields::Read).map(|r| serde_json::to_string(&r).unwrap())
    }

    /// Anything the scan accepts, serde reads the same way.
    fn agrees(bytes: &[u8]) {
        if let Some(fast) = fast_view(bytes) {
            assert_eq!(
                Some(fast),
                serde_view(bytes),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        // Skipping the fields changes nothing else, and accepts the same records.
        let skipped = op_record(bytes, Fields::Skipped).map(|mut r| {
            assert!(r.fields.is_empty());
            r.fields = op_record(bytes, Fields::Read).unwrap().fields;
            serde_json::to_string(&r).unwrap()
        });
        assert_eq!(skipped, fast_view(bytes));
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z0-9/_:.-]{0,12}",
            any::<String>(),
            Just("quote \" back \\ slash \n é ☃".to_owned()),
        ]
    }

    prop_compose! {
        fn operation()(
            id in text(), fingerprint in text(), key in text(),
            fields in proptest::collection::btree_map(text(), text(), 0..4),
            placement in proptest::option::of(prop_oneof![
                Just(KeyPlacement::Header(http::HeaderName::from_static("idempotency-key"))),
                text().prop_map(KeyPlacement::JsonField),
            ]),
            attempts in any::<u32>(), times in any::<[i64; 6]>(), fence in any::<u64>(),
            optional in proptest::collection::vec(proptest::option::of(text()), 3),
            response in proptest::option::of((any::<u16>(), any::<u64>(), text())),
            set in any::<[bool; 4]>(), state in 0..State::ALL.len(),
        ) -> Operation {
            let at = |i: usize, on: bool| on.then_some(Timestamp(times[i]));
            Operation {
                fields,
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
                fingerprint,
                idempotency_key: key,
                ..Operation::example(&id, State::ALL[state], Timestamp(0))
            }
        }
    }

    proptest! {
        /// What `encode_op` writes, the scan reads as serde does (or leaves to serde: strings
        /// with escapes), and `decode_op` gives back the operation.
        #[test]
        fn the_scan_reads_what_encode_op_writes_as_serde_does(op in operation()) {
            let bytes = encode_op(&op).unwrap();
            agrees(&bytes);
            prop_assert_eq!(decode_op(&bytes).unwrap(), op.clone());
            let plain = op.id.bytes().all(|b| b.is_ascii_alphanumeric() || b"/_:.-".contains(&b));
            if plain && op.fields.is_empty() && op.error.is_none() && op.principal.is_none()
                && op.provider_request_id.is_none() && op.response.is_none()
                && op.fingerprint.is_ascii() && op.fingerprint.bytes().all(|b| b.is_ascii_alphanumeric())
                && op.idempotency_key.bytes().all(|b| b.is_ascii_alphanumeric())
                && !matches!(op.key_placement, Some(KeyPlacement::JsonField(_)))
            {
                prop_assert!(op_record(&bytes, Fields::Read).is_some(), "a plain record takes the fast path");
            }
        }

        /// Damaged or hand-written records: the scan accepts none that serde reads otherwise.
        #[test]
        fn the_scan_never_disagrees_with_serde_on_altered_bytes(
            op in operation(), at in any::<prop::sample::Index>(), byte in any::<u8>(),
            cut in any::<prop::sample::Index>(),
        ) {
            let bytes = encode_op(&op).unwrap();
            let mut changed = bytes.clone();
            let i = at.index(changed.len());
            changed[i] = byte;
            agrees(&changed);
            changed.insert(i, byte);
            agrees(&changed);
            agrees(&bytes[..cut.index(bytes.len())]);
        }
    }

    proptest! {
        #[test]
        fn plain_len_finds_the_first_quote_backslash_or_control_byte(s in any::<Vec<u8>>()) {
            let expected = s
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .unwrap_or(s.len());
            prop_assert_eq!(plain_len(&s), expected);
        }
    }

    #[test]
    fn plain_len_at_every_offset_and_byte() {
        for special in [b'"', b'\\', 0x00, 0x1f] {
            for at in 0..20 {
                for filler in [b'a', 0x20, 0x7f, 0x80, 0xff, 0x9f] {
                    let mut s = vec![filler; 20];
                    s[at] = special;
                    assert_eq!(plain_len(&s), at, "{special:#x} at {at} in {filler:#x}");
                }
            }
        }
        assert_eq!(plain_len(&[0x20; 19]), 19);
    }

    #[test]
    fn numbers_the_scan_leaves_to_serde() {
        let op = Operation::example("p/r/x", State::Succeeded, Timestamp(5));
        let good = String::from_utf8(encode_op(&op).unwrap()).unwrap();
        assert!(op_record(good.as_bytes(), Fields::Read).is_some(), "{good}");
        for (from, to) in [
            ("\"attempts\":1", "\"attempts\":01"),
            ("\"attempts\":1", "\"attempts\":1.0"),
            ("\"attempts\":1", "\"attempts\":1e0"),
            ("\"attempts\":1", "\"attempts\":-1"),
            ("\"attempts\":1", "\"attempts\":4294967296"),
            ("\"created_at\":5", "\"created_at\":-0"),
            ("\"created_at\":5", "\"created_at\":-9223372036854775808"),
            ("\"created_at\":5", "\"created_at\":9223372036854775808"),
            ("\"v\":2", "\"v\":256"),
            ("\"fence\":0", "\"fence\":18446744073709551616"),
            ("}", "} "),
            ("\"keyed\":true", "\"keyed\":true,\"extra\":1"),
        ] {
            let bent = good.replacen(from, to, 1);
            assert_ne!(bent, good, "{from}");
            agrees(bent.as_bytes());
        }
        let min = good.replacen("\"created_at\":5", "\"created_at\":-9223372036854775808", 1);
        assert_eq!(
            op_record(min.as_bytes(), Fields::Read).map(|r| r.created_at),
            Some(i64::MIN)
        );
    }
}
