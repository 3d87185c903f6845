//! The fingerprint canonicaliser over JSON, form, multipart and raw bodies: it never panics,
//! its fast form (`hex_only`) agrees with the full one, and what the reference calls
//! order-independent is: JSON object keys and the order of differently named query fields.
//!
//! Input: one byte choosing the content type and the method, the body, NUL, the query, NUL,
//! the path (so the seeds are the tests' bodies as they are written).
#![no_main]

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use idemproxy::body;
use idemproxy::fingerprint::{self, Inputs, Methods};
use idemproxy::secret::Secret;
use libfuzzer_sys::fuzz_target;

const TYPES: [&str; 6] = [
    "application/json",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=b",
    "text/plain",
    "application/vnd.api+json; charset=utf-8",
    "",
];

fuzz_target!(|data: &[u8]| {
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let mut pieces = rest.splitn(3, |&b| b == 0);
    let raw_body = pieces.next().unwrap_or_default();
    let query = pieces.next().map(String::from_utf8_lossy);
    let path = String::from_utf8_lossy(pieces.next().unwrap_or(b"/v1/refunds"));
    let method = [
        Method::POST,
        Method::PUT,
        Method::from_bytes(b"PURGE").expect("a token"),
    ][usize::from(choice >> 4) % 3]
        .clone();
    let ignore = vec![
        "metadata[trace_id]".to_string(),
        "note".to_string(),
        "/metadata/trace".to_string(),
    ];
    let secret = Secret::from_bytes([7; 32]);
    let methods = Methods::of(&secret);
    let ct = TYPES[usize::from(choice & 0x0f) % TYPES.len()];
    let ct = (!ct.is_empty()).then(|| HeaderValue::from_static(ct));
    let raw = Bytes::copy_from_slice(raw_body);
    let parsed = body::parse(ct.as_ref(), raw.clone());
    let _ = body::carries_method_field(ct.as_ref(), &raw);
    let _ = body::names_method_field(&raw);
    let _ = body::decode_pairs(&raw);
    let mut headers = HeaderMap::new();
    headers.insert("x-account", HeaderValue::from_static("acct_1"));
    headers.append("x-account", HeaderValue::from_static("acct_2"));
    headers.insert("x-bytes", HeaderValue::from_bytes(b"\xff").expect("opaque"));
    let fingerprint_headers = [
        HeaderName::from_static("x-account"),
        HeaderName::from_static("x-bytes"),
        HeaderName::from_static("x-absent"),
    ];
    let inputs = Inputs {
        method: &method,
        path: &path,
        query: query.as_deref(),
        body: &parsed,
        headers: &headers,
        fingerprint_headers: &fingerprint_headers,
        ignore: &ignore,
        key_field: Some("/idempotency_key"),
        secret: &secret,
        methods: Some(&methods),
    };
    let full = fingerprint::compute(&inputs);
    assert_eq!(
        fingerprint::hex_only(&inputs),
        full.hex,
        "hex_only disagrees with compute"
    );
    let without_methods = fingerprint::compute(&Inputs {
        methods: None,
        ..inputs
    });
    assert_eq!(without_methods.hex, full.hex);
    assert_eq!(
        without_methods.fields, full.fields,
        "the taken method hashes differ"
    );
    let completed = fingerprint::completed(&inputs, full.hex.clone());
    assert_eq!(completed.fields, full.fields);
    let again = fingerprint::differing_fields(&full.fields, &full.fields);
    assert!(
        again.is_empty(),
        "a fingerprint differs from itself: {again:?}"
    );

    // JSON: the same value with its object keys written in another order.
    if let body::Body::Json(value) = &parsed {
        let reversed = reverse_keys(value);
        let body = body::Body::Json(reversed);
        let other = fingerprint::compute(&Inputs {
            body: &body,
            ..inputs
        });
        assert_eq!(other.hex, full.hex, "key order changed a JSON fingerprint");
    }
    // Query: fields grouped by name, names sorted: reordering different names changes nothing.
    if let Some(query) = query.as_deref() {
        let mut pairs: Vec<&str> = query.split('&').collect();
        let names: Vec<&str> = pairs
            .iter()
            .map(|p| p.split('=').next().unwrap_or(""))
            .collect();
        let distinct = names
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            == names.len();
        let plain = names
            .iter()
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric()));
        // A query that is not UTF-8 once decoded is compared as raw text (order counts).
        let text = body::decode_pairs(query.as_bytes()).is_some();
        if distinct && plain && text && pairs.len() > 1 {
            pairs.reverse();
            let swapped = pairs.join("&");
            let other = fingerprint::compute(&Inputs {
                query: Some(&swapped),
                ..inputs
            });
            assert_eq!(
                other.hex, full.hex,
                "query field order changed the fingerprint"
            );
        }
    }
});

fn reverse_keys(value: &serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut out = serde_json::Map::new();
            for (k, v) in map.iter().rev() {
                out.insert(k.clone(), reverse_keys(v));
            }
            serde_json::Value::Object(out)
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.iter().map(reverse_keys).collect())
        }
        other => other.clone(),
    }
}
