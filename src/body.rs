//! A buffered request body, parsed once by its declared content type.
//!
//! This module owns the decision "what kind of body is this" (JSON, urlencoded form, raw
//! bytes) and the decoding of urlencoded text. It never enforces size limits (the caller
//! buffers under `max_request_body`) and never reads or stores values for anything but
//! the caller that asked: templates and the fingerprint read the parsed form.

use bytes::Bytes;
use http::HeaderValue;
use percent_encoding::percent_decode;

/// A request body, parsed once.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// No bytes at all, whatever the content type says.
    Empty,
    /// `application/json` or any `+json` type, parsed.
    Json(serde_json::Value),
    /// `application/x-www-form-urlencoded`, decoded, in the order the fields were sent.
    Form(Vec<(String, String)>),
    /// Any other content type, or none: compared as bytes.
    Bytes(Bytes),
    /// Declared JSON or form but does not parse.
    Malformed { kind: &'static str, bytes: Bytes },
}

impl Body {
    /// What kind of body this is, for messages to a person ("JSON", "a form", ...).
    pub fn describe(&self) -> &'static str {
        match self {
            Body::Empty => "empty",
            Body::Json(_) => "JSON",
            Body::Form(_) => "a urlencoded form",
            Body::Bytes(_) => "raw bytes: its Content-Type is neither JSON nor a urlencoded form",
            Body::Malformed { kind: "json", .. } => "declared JSON but does not parse",
            Body::Malformed { .. } => "declared a urlencoded form but does not decode as UTF-8",
        }
    }
}

/// Parses `bytes` according to `content_type`.
///
/// Empty bytes are always `Empty`. `application/json` and every `+json` type (parameters
/// such as `charset` ignored, case-insensitive) are JSON; `application/x-www-form-urlencoded`
/// is a form (`+` is a space, percent-escapes decoded, field order kept). A declared JSON
/// body that does not parse, or a form that does not decode to UTF-8, is `Malformed`;
/// anything else is `Bytes`. Never panics.
pub fn parse(content_type: Option<&HeaderValue>, bytes: Bytes) -> Body {
    if bytes.is_empty() {
        return Body::Empty;
    }
    match content_type.and_then(media_kind) {
        Some(Kind::Json) => match serde_json::from_slice(&bytes) {
            Ok(value) => Body::Json(value),
            Err(_) => Body::Malformed {
                kind: "json",
                bytes,
            },
        },
        Some(Kind::Form) => match decode_pairs(&bytes) {
            Some(pairs) => Body::Form(pairs),
            None => Body::Malformed {
                kind: "form",
                bytes,
            },
        },
        None => Body::Bytes(bytes),
    }
}

enum Kind {
    Json,
    Form,
}

/// The kind a `Content-Type` declares, from its essence (`type/subtype`, no parameters).
fn media_kind(value: &HeaderValue) -> Option<Kind> {
    let text = value.to_str().ok()?;
    let essence = text.split(';').next()?.trim().to_ascii_lowercase();
    let (kind, subtype) = essence.split_once('/')?;
    if essence == "application/json" || (!kind.is_empty() && subtype.ends_with("+json")) {
        Some(Kind::Json)
    } else if essence == "application/x-www-form-urlencoded" {
        Some(Kind::Form)
    } else {
        None
    }
}

/// Decodes `application/x-www-form-urlencoded` text (also a query string) into pairs.
///
/// `+` is a space and `%XX` a byte; empty `&&` segments are skipped and a name without `=`
/// has the empty value. `None` when a decoded name or value is not UTF-8: silently replacing
/// bytes would let two different requests look the same.
pub fn decode_pairs(raw: &[u8]) -> Option<Vec<(String, String)>> {
    raw.split(|&b| b == b'&')
        .filter(|segment| !segment.is_empty())
        .map(|segment| {
            let (name, value) = match segment.iter().position(|&b| b == b'=') {
                Some(i) => (&segment[..i], &segment[i + 1..]),
                None => (segment, &[][..]),
            };
            Some((decode_component(name)?, decode_component(value)?))
        })
        .collect()
}

fn decode_component(raw: &[u8]) -> Option<String> {
    let spaced: Vec<u8> = raw
        .iter()
        .map(|&b| if b == b'+' { b' ' } else { b })
        .collect();
    String::from_utf8(percent_decode(&spaced).collect()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ct(s: &str) -> HeaderValue {
        HeaderValue::from_str(s).expect("test header")
    }

    fn parse_str(content_type: &str, body: &str) -> Body {
        parse(Some(&ct(content_type)), Bytes::from(body.to_string()))
    }

    #[test]
    fn json_types_are_recognised_with_params_and_any_case() {
        let want = Body::Json(json!({"a": 1}));
        assert_eq!(parse_str("application/json", r#"{"a":1}"#), want);
        assert_eq!(
            parse_str("Application/JSON; charset=utf-8", r#"{"a":1}"#),
            want
        );
        assert_eq!(parse_str("application/vnd.api+json", r#"{"a":1}"#), want);
        assert_eq!(parse_str("application/problem+JSON", r#"{"a":1}"#), want);
    }

    #[test]
    fn forms_decode_plus_and_percent_and_keep_order() {
        let body = parse_str(
            "application/x-www-form-urlencoded; charset=utf-8",
            "b=x+y&a=%C3%A9&&metadata%5Bstep%5D=2&flag",
        );
        let want = [
            ("b", "x y"),
            ("a", "é"),
            ("metadata[step]", "2"),
            ("flag", ""),
        ];
        let want = want.map(|(k, v)| (k.to_string(), v.to_string())).to_vec();
        assert_eq!(body, Body::Form(want));
    }

    #[test]
    fn empty_bytes_are_empty_whatever_the_type() {
        assert_eq!(parse_str("application/json", ""), Body::Empty);
        assert_eq!(parse(None, Bytes::new()), Body::Empty);
    }

    #[test]
    fn undeclared_or_other_types_are_bytes() {
        let raw = Bytes::from_static(br#"{"a":1}"#);
        assert_eq!(parse(None, raw.clone()), Body::Bytes(raw.clone()));
        assert_eq!(
            parse(Some(&ct("text/plain")), raw.clone()),
            Body::Bytes(raw.clone())
        );
        assert_eq!(parse(Some(&ct("json")), raw.clone()), Body::Bytes(raw));
    }

    #[test]
    fn declared_but_unparsable_bodies_are_malformed() {
        assert!(matches!(
            parse_str("application/json", "{not json"),
            Body::Malformed { kind: "json", .. }
        ));
        assert!(matches!(
            parse_str("application/x-www-form-urlencoded", "a=%FF"),
            Body::Malformed { kind: "form", .. }
        ));
    }

    #[test]
    fn deep_json_nesting_is_malformed_not_a_crash() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert!(matches!(
            parse_str("application/json", &deep),
            Body::Malformed { kind: "json", .. }
        ));
    }
}
