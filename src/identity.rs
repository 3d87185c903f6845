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

/// The longest operation ID, in bytes (SPEC section 3).
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
    let id = format!("{provider}/{route}/{rendered}");
    if id.len() > MAX_OPERATION_ID {
        return Err(TooLong { len: id.len() });
    }
    Ok(id)
}

/// The idempotency key sent to the provider: `opaque` is the lowercase hex sha256 of the
/// operation ID's bytes, `plain` is the operation ID itself. Depends on the ID alone.
pub fn key(operation_id: &str, format: KeyFormat) -> String {
    match format {
        KeyFormat::Opaque => hex::encode(Sha256::digest(operation_id.as_bytes())),
        KeyFormat::Plain => operation_id.to_string(),
    }
}

/// Sets the key at a JSON pointer in a JSON object body, creating intermediate objects;
/// replaces any value the client sent. Err(InvalidBody) if the body is not a JSON object
/// (or the path crosses a non-object). Key order of the rest of the body is kept.
pub fn inject_json_key(body: &Value, pointer: &str, key: &str) -> Result<Bytes, InvalidBody> {
    let Some(path) = pointer.strip_prefix('/') else {
        return Err(InvalidBody(format!(
            "the key field \"{pointer}\" is not a JSON pointer"
        )));
    };
    let tokens: Vec<String> = path.split('/').map(unescape_token).collect();
    let mut body = body.clone();
    let mut node = &mut body;
    for (i, token) in tokens.iter().enumerate() {
        let Value::Object(map) = node else {
            let at = if i == 0 {
                "the body"
            } else {
                "a value on the way"
            };
            return Err(InvalidBody(format!(
                "the idempotency key goes into the JSON body at \"{pointer}\", but {at} is not a JSON object"
            )));
        };
        if i + 1 == tokens.len() {
            map.insert(token.clone(), Value::String(key.to_string()));
            break;
        }
        node = map
            .entry(token.clone())
            .or_insert_with(|| Value::Object(Default::default()));
    }
    serde_json::to_vec(&body)
        .map(Bytes::from)
        .map_err(|e| InvalidBody(format!("the JSON body cannot be written back: {e}")))
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
    let encoded = utf8_percent_encode(operation_id, HEADER_UNSAFE).to_string();
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
            key(SPEC_ID, KeyFormat::Opaque),
            "599c9bdd18d493e632bf230d8428d344ea2207d54521cfdb7f91371a11be3f2c"
        );
        assert_eq!(key(SPEC_ID, KeyFormat::Plain), SPEC_ID);
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
        let bytes = inject_json_key(&body, pointer, "k1")?;
        Ok(serde_json::from_slice(&bytes).expect("injected body is JSON"))
    }

    #[test]
    fn injection_replaces_the_clients_key_and_keeps_order() {
        let body = json!({"idempotency_key": "client", "amount": 5});
        let bytes = inject_json_key(&body, "/idempotency_key", "k1").expect("object body");
        assert_eq!(&bytes[..], br#"{"idempotency_key":"k1","amount":5}"#);
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
