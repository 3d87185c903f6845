//! Operation IDs, the idempotency keys derived from them, and the key's injection.
//!
//! This module owns the exact bytes of an operation ID (`{provider}/{route}/{rendered}`), the
//! key derived from it (so it is the same on every attempt and across restarts) and the
//! percent-encoding used when an ID travels in a header or a URL. It never reads the ledger
//! and never looks at what idempotency key the client sent: that one is always replaced.

use bytes::Bytes;
use http::HeaderValue;
use percent_encoding::{AsciiSet, CONTROLS, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::policy::KeyFormat;
use crate::template::InvalidBody;

/// The longest operation ID, in bytes (docs/reference.md section 4.3).
pub const MAX_OPERATION_ID: usize = 512;

/// The operation ID is over [`MAX_OPERATION_ID`] bytes (a 422 `invalid-operation-id`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the operation ID is {len} bytes, over the limit of {MAX_OPERATION_ID}; use shorter template parts (or {{fingerprint}})"
)]
pub struct TooLong {
    pub len: usize,
}

/// `{provider}/{route}/{rendered}`; Err if over 512 bytes.
pub fn operation_id(provider: &str, route: &str, rendered: &str) -> Result<String, TooLong> {
    let len = provider.len() + route.len() + rendered.len() + 2;
    if len > MAX_OPERATION_ID {
        return Err(TooLong { len });
    }
    // Joined by hand: `format!` costs several times as much, and this runs for every request.
    let mut id = String::with_capacity(len);
    for part in [provider, "/", route, "/", rendered] {
        id.push_str(part);
    }
    Ok(id)
}

/// The idempotency key sent to the provider: `opaque` is the lowercase hex sha256 of the
/// operation ID's bytes, cut to its first `length` characters (at most 64); `plain` is the
/// operation ID itself, never cut. Depends on the ID and the policy alone.
pub fn key(operation_id: &str, format: KeyFormat, length: usize) -> String {
    match format {
        KeyFormat::Opaque => {
            let mut hex = crate::secret::lower_hex(&Sha256::digest(operation_id.as_bytes()));
            hex.truncate(length);
            hex
        }
        KeyFormat::Plain => operation_id.to_string(),
    }
}

/// Sets the key at a JSON pointer in a JSON object body, creating intermediate objects;
/// replaces any value the client sent. Err(InvalidBody) if the body is not a JSON object
/// (or the path crosses a non-object).
///
/// The body is edited in place, not re-encoded: every byte outside the key's value is sent as
/// the agent wrote it (numbers such as `12345678901234567890123` or `1e2`, whitespace, key
/// order). A new key is appended at the end of its object. `body` must be valid JSON.
pub fn inject_json_key(body: &[u8], pointer: &str, key: &str) -> Result<Bytes, InvalidBody> {
    let Some(path) = pointer.strip_prefix('/') else {
        return Err(InvalidBody(format!(
            "the key field \"{pointer}\" is not a JSON pointer"
        )));
    };
    let tokens: Vec<String> = path.split('/').map(unescape_token).collect();
    let not_object = |i: usize| {
        let at = if i == 0 {
            "the body"
        } else {
            "a value on the way"
        };
        InvalidBody(format!(
            "the idempotency key goes into the JSON body at \"{pointer}\", but {at} is not a JSON object"
        ))
    };
    let mut out = body.to_vec();
    let mut object = raw_json::value_at(body, 0);
    for (i, token) in tokens.iter().enumerate() {
        let entries = raw_json::object(body, object.clone()).ok_or_else(|| not_object(i))?;
        let found = entries.members.iter().rev().find(|m| &m.key == token);
        match found {
            Some(member) if i + 1 < tokens.len() => object = member.value.clone(),
            Some(member) => {
                out.splice(member.value.clone(), json_string(key).into_bytes());
                break;
            }
            None => {
                let comma = if entries.members.is_empty() { "" } else { "," };
                let added = format!("{comma}{}", nested(&tokens[i..], key));
                out.splice(entries.close..entries.close, added.into_bytes());
                break;
            }
        }
    }
    Ok(Bytes::from(out))
}

/// `"a":{"b":"key"}` for the tokens `a`, `b`.
fn nested(tokens: &[String], key: &str) -> String {
    let (first, rest) = tokens.split_first().expect("at least one token");
    let value = if rest.is_empty() {
        json_string(key)
    } else {
        format!("{{{}}}", nested(rest, key))
    };
    format!("{}:{value}", json_string(first))
}

fn json_string(text: &str) -> String {
    Value::from(text).to_string()
}

/// Spans of valid JSON text, found without decoding it.
mod raw_json {
    use std::ops::Range;

    /// One `"key": value` of an object: the decoded key and the value's bytes.
    pub struct Member {
        pub key: String,
        pub value: Range<usize>,
    }

    /// An object's members and the offset of its closing `}`.
    pub struct Object {
        pub members: Vec<Member>,
        pub close: usize,
    }

    fn skip_ws(text: &[u8], mut at: usize) -> usize {
        while text.get(at).is_some_and(|b| b" \t\r\n".contains(b)) {
            at += 1;
        }
        at
    }

    /// The span of the value starting at (or after whitespace from) `at`.
    pub fn value_at(text: &[u8], at: usize) -> Range<usize> {
        let start = skip_ws(text, at);
        let end = match text.get(start) {
            Some(b'"') => string_end(text, start),
            Some(b'{' | b'[') => container_end(text, start),
            _ => (start..text.len())
                .find(|&i| b",}] \t\r\n".contains(&text[i]))
                .unwrap_or(text.len()),
        };
        start..end
    }

    /// Just past the closing quote of the string opening at `start`.
    fn string_end(text: &[u8], start: usize) -> usize {
        let mut at = start + 1;
        while let Some(&b) = text.get(at) {
            at += 1;
            match b {
                b'\\' => at += 1,
                b'"' => return at,
                _ => {}
            }
        }
        text.len()
    }

    /// Just past the bracket closing the object or array opening at `start`.
    fn container_end(text: &[u8], start: usize) -> usize {
        let (mut depth, mut at) = (0usize, start);
        while let Some(&b) = text.get(at) {
            match b {
                b'"' => {
                    at = string_end(text, at);
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return at + 1;
                    }
                }
                _ => {}
            }
            at += 1;
        }
        text.len()
    }

    /// The members of the object spanning `span`; `None` when it is not an object.
    pub fn object(text: &[u8], span: Range<usize>) -> Option<Object> {
        if text.get(span.start) != Some(&b'{') {
            return None;
        }
        let mut members = Vec::new();
        let mut at = skip_ws(text, span.start + 1);
        while text.get(at) == Some(&b'"') {
            let key = value_at(text, at);
            let name = serde_json::from_slice(&text[key.clone()]).ok()?;
            let colon = skip_ws(text, key.end);
            let value = value_at(text, colon + 1);
            at = skip_ws(text, value.end);
            members.push(Member { key: name, value });
            if text.get(at) == Some(&b',') {
                at = skip_ws(text, at + 1);
            }
        }
        (text.get(at) == Some(&b'}')).then_some(Object { members, close: at })
    }
}

/// RFC 6901: `~1` is `/`, `~0` is `~` (in that order, so `~01` is `~1`).
fn unescape_token(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// What `header_value` escapes: controls, space, `%` and (always, by the crate) non-ASCII.
const HEADER_UNSAFE: &AsciiSet = &CONTROLS.add(b' ').add(b'%');

/// Percent-encodes an operation ID for a header value: bytes outside visible ASCII
/// (0x21..=0x7E) and `%` become %XX.
pub fn header_value(operation_id: &str) -> HeaderValue {
    // Borrowed when nothing needs escaping (the usual ID), so no copy is made before the value's.
    let encoded: std::borrow::Cow<str> = utf8_percent_encode(operation_id, HEADER_UNSAFE).into();
    // Only visible ASCII is left, which is always a valid header value.
    HeaderValue::from_str(&encoded).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// What `path_segment` leaves as is: RFC 3986 unreserved characters and `:` (readable in
/// operation IDs, and legal in a path segment).
const SEGMENT_UNSAFE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b':');

/// An operation ID as one URL path segment, for the admin API's `{id}`: `/` becomes `%2F`,
/// and everything else but unreserved characters and `:` is escaped too.
pub fn path_segment(operation_id: &str) -> String {
    utf8_percent_encode(operation_id, SEGMENT_UNSAFE).to_string()
}

/// The inverse of `path_segment` (and of any percent-encoding), for the admin API's {id}.
///
/// `None` when a `%` is not followed by two hex digits or the bytes are not UTF-8. `+` is
/// not a space here: it is a literal character of an operation ID.
pub fn decode(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let well_formed = bytes.iter().enumerate().all(|(i, &b)| {
        b != b'%'
            || matches!(bytes.get(i + 1..i + 3), Some([h, l]) if h.is_ascii_hexdigit() && l.is_ascii_hexdigit())
    });
    if !well_formed {
        return None;
    }
    percent_encoding::percent_decode_str(encoded)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SPEC_ID: &str = "stripe/create_refund/wf-81:ch_1:refund:2";

    #[test]
    fn a_path_segment_escapes_everything_but_unreserved_and_colons() {
        assert_eq!(
            path_segment("stripe/create_refund/wf 81:é%+~._-?#"),
            "stripe%2Fcreate_refund%2Fwf%2081:%C3%A9%25%2B~._-%3F%23"
        );
        for id in [SPEC_ID, "a/b c%d+é", "p/r/a b%?#é"] {
            assert_eq!(decode(&path_segment(id)).as_deref(), Some(id));
        }
    }

    #[test]
    fn spec_example_id_and_keys() {
        let id = operation_id("stripe", "create_refund", "wf-81:ch_1:refund:2");
        assert_eq!(id.as_deref(), Ok(SPEC_ID));
        // printf %s 'stripe/create_refund/wf-81:ch_1:refund:2' | sha256sum
        assert_eq!(
            key(SPEC_ID, KeyFormat::Opaque, 64),
            "599c9bdd18d493e632bf230d8428d344ea2207d54521cfdb7f91371a11be3f2c"
        );
        assert_eq!(key(SPEC_ID, KeyFormat::Plain, 64), SPEC_ID);
    }

    #[test]
    fn a_short_opaque_key_is_the_start_of_the_long_one_and_plain_is_never_cut() {
        assert_eq!(
            key(SPEC_ID, KeyFormat::Opaque, 45),
            "599c9bdd18d493e632bf230d8428d344ea2207d54521c"
        );
        assert_eq!(key(SPEC_ID, KeyFormat::Opaque, 32).len(), 32);
        assert_eq!(key(SPEC_ID, KeyFormat::Plain, 32), SPEC_ID);
    }

    #[test]
    fn ids_up_to_512_bytes_pass_and_longer_fail() {
        // "p/r/" is 4 bytes.
        let fits = "x".repeat(MAX_OPERATION_ID - 4);
        assert_eq!(operation_id("p", "r", &fits).map(|s| s.len()), Ok(512));
        let over = "x".repeat(MAX_OPERATION_ID - 3);
        assert_eq!(operation_id("p", "r", &over), Err(TooLong { len: 513 }));
        // Bytes, not characters: 2-byte "é" pushes 255 characters over the limit.
        let wide = "é".repeat(255);
        assert_eq!(operation_id("p", "r", &wide), Err(TooLong { len: 514 }));
    }

    #[test]
    fn header_encoding_round_trips_spaces_utf8_and_percent() {
        let id = "acme/pay/wf 81:café:100%/ok\t~";
        let header = header_value(id);
        assert_eq!(
            header.to_str().ok(),
            Some("acme/pay/wf%2081:caf%C3%A9:100%25/ok%09~")
        );
        assert_eq!(
            decode(header.to_str().unwrap_or_default()).as_deref(),
            Some(id)
        );
        assert_eq!(header_value(SPEC_ID).to_str().ok(), Some(SPEC_ID));
    }

    #[test]
    fn decode_accepts_encoded_slashes_and_rejects_broken_escapes() {
        assert_eq!(
            decode("stripe%2Fcreate_refund%2Fwf-81").as_deref(),
            Some("stripe/create_refund/wf-81")
        );
        assert_eq!(decode("a+b").as_deref(), Some("a+b"));
        assert_eq!(decode("a%2"), None);
        assert_eq!(decode("a%zz"), None);
        assert_eq!(decode("%FF"), None);
    }

    fn injected(body: Value, pointer: &str) -> Result<Value, InvalidBody> {
        let bytes = inject_json_key(body.to_string().as_bytes(), pointer, "k1")?;
        Ok(serde_json::from_slice(&bytes).expect("injected body is JSON"))
    }

    #[test]
    fn injection_replaces_the_clients_key_and_keeps_order() {
        let body = json!({"idempotency_key": "client", "amount": 5}).to_string();
        let bytes = inject_json_key(body.as_bytes(), "/idempotency_key", "k1").expect("object");
        assert_eq!(&bytes[..], br#"{"idempotency_key":"k1","amount":5}"#);
    }

    #[test]
    fn injection_keeps_every_other_byte_as_sent() {
        let text = |body: &str, pointer: &str| {
            let bytes = inject_json_key(body.as_bytes(), pointer, "k1").expect("object body");
            String::from_utf8(bytes.to_vec()).expect("UTF-8")
        };
        assert_eq!(
            text(
                r#" { "amount" : 12345678901234567890123, "x": 1e2 } "#,
                "/k"
            ),
            r#" { "amount" : 12345678901234567890123, "x": 1e2 ,"k":"k1"} "#
        );
        assert_eq!(
            text(r#"{"s":"a,}\"b","k":{"old":[1,{"k":2}]},"n":-0.10}"#, "/k"),
            r#"{"s":"a,}\"b","k":"k1","n":-0.10}"#
        );
        assert_eq!(text(r#"{ }"#, "/m/k"), r#"{ "m":{"k":"k1"}}"#);
        assert_eq!(
            text(r#"{"m":{"a":1E+2}}"#, "/m/i/k"),
            r#"{"m":{"a":1E+2,"i":{"k":"k1"}}}"#
        );
        assert_eq!(text(r#"{"\u006b":true}"#, "/k"), r#"{"\u006b":"k1"}"#);
    }

    #[test]
    fn injection_creates_nested_objects_and_unescapes_pointers() {
        let out = injected(json!({"amount": 5, "meta": {"a": 1}}), "/meta/idem/k~1ey");
        assert_eq!(
            out,
            Ok(json!({"amount": 5, "meta": {"a": 1, "idem": {"k/ey": "k1"}}}))
        );
    }

    #[test]
    fn injection_rejects_non_objects() {
        assert!(injected(json!([1, 2]), "/k").is_err());
        assert!(injected(json!("s"), "/k").is_err());
        assert!(injected(json!({"meta": 3}), "/meta/k").is_err());
        assert!(injected(json!({"meta": [1]}), "/meta/0").is_err());
        assert!(injected(json!({}), "k").is_err());
    }
}
