//! A buffered request body, parsed once by its declared content type.
//!
//! This module owns the decision "what kind of body is this" (JSON, urlencoded form, raw
//! bytes) and the decoding of urlencoded text. It never enforces size limits (the caller
//! buffers under `max_request_body`) and never reads or stores values for anything but
//! the caller that asked: templates and the fingerprint read the parsed form.
//!
//! JSON numbers keep the digits they were sent with (serde_json's `arbitrary_precision`), so
//! no number is rounded to an f64 in a fingerprint or a template, and an object that names a key twice is not
//! JSON this module accepts: which of the two values counts differs between parsers, so the
//! proxy could fingerprint one request while the provider acts on another.

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
/// A JSON object naming a key twice is `Malformed` (see [`repeated_key`]).
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
        Some(Kind::Json) => match json_once(&bytes) {
            Some(value) => Body::Json(value),
            None => Body::Malformed {
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

/// The JSON value of `bytes` when it parses and no object in it repeats a key.
fn json_once(bytes: &[u8]) -> Option<serde_json::Value> {
    match repeats(bytes) {
        Ok(None) => serde_json::from_slice(bytes).ok(),
        Ok(Some(_)) | Err(_) => None,
    }
}

/// The first key some object of a declared-JSON body names twice (compared after escapes
/// are decoded, so `"b"` and `"\u0062"` are the same key); `None` for a body that is not
/// declared JSON, does not parse, or repeats no key.
pub fn repeated_key(content_type: Option<&HeaderValue>, bytes: &[u8]) -> Option<String> {
    match content_type.and_then(media_kind) {
        Some(Kind::Json) if !bytes.is_empty() => repeats(bytes).ok().flatten(),
        _ => None,
    }
}

/// The words of a 400 `invalid-body` for a body that repeats `key`.
pub fn repeated_key_detail(key: &str) -> String {
    format!(
        "the JSON body names the key {} more than once in one object, and providers differ on \
         which value counts (send each key once)",
        serde_json::Value::from(key)
    )
}

/// Walks a JSON text without keeping it: Ok(Some(key)) at the first repeated key.
fn repeats(bytes: &[u8]) -> Result<Option<String>, serde_json::Error> {
    use serde::de::DeserializeSeed;
    let found = std::cell::RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    match Unique(&found).deserialize(&mut de).and_then(|()| de.end()) {
        Ok(()) => Ok(None),
        Err(e) => match found.into_inner() {
            Some(key) => Ok(Some(key)),
            None => Err(e),
        },
    }
}

/// A JSON value whose objects must not repeat a key; the first repeated one is put in the
/// cell (and the walk stops with an error).
#[derive(Clone, Copy)]
struct Unique<'a>(&'a std::cell::RefCell<Option<String>>);

impl<'de> serde::de::DeserializeSeed<'de> for Unique<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Unique<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }

    /// Also sees a number under `arbitrary_precision` (a one-key map holding its text).
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                *self.0.borrow_mut() = Some(key);
                return Err(serde::de::Error::custom("repeated key"));
            }
            map.next_value_seed(self)?;
        }
        Ok(())
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
    fn numbers_keep_their_digits() {
        let text = r#"{"big":12345678901234567890123,"e":1e2,"f":-0.10,"i":[1.0,2E-3,-0]}"#;
        let Body::Json(value) = parse_str("application/json", text) else {
            panic!("JSON");
        };
        // serde_json spells exponents one way (`1e+2`); the digits are never rounded.
        let kept = r#"{"big":12345678901234567890123,"e":1e+2,"f":-0.10,"i":[1.0,2e-3,-0]}"#;
        assert_eq!(value.to_string(), kept);
    }

    #[test]
    fn repeated_keys_are_found_at_any_depth_and_make_json_malformed() {
        let ct = ct("application/json");
        let found = |text: &str| repeated_key(Some(&ct), text.as_bytes());
        assert_eq!(found(r#"{"a":1,"a":2}"#).as_deref(), Some("a"));
        assert_eq!(found(r#"[{"m":{"k":1,"k":1}}]"#).as_deref(), Some("k"));
        assert_eq!(found(r#"{"b":1,"\u0062":2}"#).as_deref(), Some("b"));
        assert_eq!(found(r#"{"a":1,"b":{"a":1},"c":[{"a":2}]}"#), None);
        assert_eq!(found(r#"{"n":12345678901234567890123}"#), None);
        assert_eq!(found("{not json"), None);
        assert_eq!(
            repeated_key(None, br#"{"a":1,"a":2}"#),
            None,
            "not declared JSON"
        );
        assert!(matches!(
            parse_str("application/json", r#"{"a":1,"a":2}"#),
            Body::Malformed { kind: "json", .. }
        ));
        assert!(repeated_key_detail("a").contains(r#"key "a" more than once"#));
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
