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
use serde_json::Value;
use serde_json::map::Entry;

/// A request body, parsed once.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// No bytes at all, whatever the content type says.
    Empty,
    /// `application/json` or any `+json` type, parsed.
    Json(Value),
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
/// A JSON object naming a key twice is `Malformed` (see [`parse_checked`]).
///
/// Empty bytes are always `Empty`. `application/json` and every `+json` type (parameters
/// such as `charset` ignored, case-insensitive) are JSON; `application/x-www-form-urlencoded`
/// is a form (`+` is a space, percent-escapes decoded, field order kept). A declared JSON
/// body that does not parse, or a form that does not decode to UTF-8, is `Malformed`;
/// anything else is `Bytes`. Never panics.
pub fn parse(content_type: Option<&HeaderValue>, bytes: Bytes) -> Body {
    match parse_checked(content_type, bytes.clone()) {
        Ok(body) => body,
        Err(_) => Body::Malformed {
            kind: "json",
            bytes,
        },
    }
}

/// `parse`, or the first key some object of a declared-JSON body names twice (compared after
/// escapes are decoded, so `"b"` and `"\u0062"` are the same key), from one pass over the
/// bytes: the key, or the syntax error, that comes first in the text decides.
pub fn parse_checked(
    content_type: Option<&HeaderValue>,
    bytes: Bytes,
) -> Result<Body, RepeatedKey> {
    if bytes.is_empty() {
        return Ok(Body::Empty);
    }
    Ok(match content_type.and_then(media_kind) {
        Some(Kind::Json) => match json_once(&bytes)? {
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
    })
}

/// A declared-JSON body names this key twice in one object: refused as `invalid-body`, since
/// providers differ on which of the two values counts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", repeated_key_detail(.0))]
pub struct RepeatedKey(pub String);

/// The words of a 400 `invalid-body` for a body that repeats `key`.
pub fn repeated_key_detail(key: &str) -> String {
    format!(
        "the JSON body names the key {} more than once in one object, and providers differ on \
         which value counts (send each key once)",
        serde_json::Value::from(key)
    )
}

/// The JSON value of `bytes` (`None` when it does not parse), or `Err` with the first key an
/// object repeats: the value `serde_json::from_slice` makes of a text that repeats no key.
fn json_once(bytes: &[u8]) -> Result<Option<Value>, RepeatedKey> {
    use serde::de::DeserializeSeed;
    let found = std::cell::RefCell::new(Found::default());
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = Once(&found).deserialize(&mut de).and_then(|value| {
        de.end()?;
        Ok(value)
    });
    let found = found.into_inner();
    match (parsed, found.repeated) {
        (_, Some(key)) => Err(RepeatedKey(key)),
        (Ok(value), None) if !found.no_value => Ok(Some(value)),
        _ => Ok(None),
    }
}

/// How serde_json hands over a number under `arbitrary_precision`: a one-key map from this
/// key to the number's text. Its `Value` also reads an object whose first key this is as
/// that number (one member whose value is a string that parses as one), and fails on any
/// other object with that first key.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// What the walk found besides the value.
#[derive(Default)]
struct Found {
    /// The first key an object repeats (the walk stops there).
    repeated: Option<String>,
    /// An object serde_json's `Value` takes for a number but cannot read as one: the text
    /// has no `Value`, but the walk goes on, since a repeated key after it still counts.
    no_value: bool,
}

/// A JSON value built as serde_json's `Value` builds it, whose objects must not repeat a
/// key; the first repeated one is noted (and the walk stops with an error).
#[derive(Clone, Copy)]
struct Once<'a>(&'a std::cell::RefCell<Found>);

impl Once<'_> {
    fn repeated<E: serde::de::Error>(self, key: String) -> E {
        self.0.borrow_mut().repeated = Some(key);
        E::custom("repeated key")
    }

    /// The number an object of `NUMBER_TOKEN` stands for, as serde_json's `Value` reads it.
    fn number(self, object: serde_json::Map<String, Value>) -> Value {
        let mut members = object.into_iter();
        if let (Some((_, Value::String(text))), None) = (members.next(), members.next())
            && let Ok(number) = text.parse()
        {
            return Value::Number(number);
        }
        self.0.borrow_mut().no_value = true;
        Value::Null
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Once<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<Value, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Once<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    /// Also sees a number under `arbitrary_precision` (see [`NUMBER_TOKEN`]).
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match object.entry(key) {
                Entry::Occupied(named) => return Err(self.repeated(named.key().clone())),
                Entry::Vacant(slot) => {
                    slot.insert(map.next_value_seed(self)?);
                }
            }
        }
        match object.keys().next() {
            Some(first) if first == NUMBER_TOKEN => Ok(self.number(object)),
            _ => Ok(Value::Object(object)),
        }
    }
}

enum Kind {
    Json,
    Form,
}

/// The kind a `Content-Type` declares, from its essence (`type/subtype`, no parameters).
fn media_kind(value: &HeaderValue) -> Option<Kind> {
    // Compared without case rather than lowercased: this runs for every guarded request.
    let text = value.to_str().ok()?;
    let essence = text.split(';').next()?.trim();
    let (kind, subtype) = essence.split_once('/')?;
    let json_suffix = subtype
        .len()
        .checked_sub(5)
        .and_then(|at| subtype.as_bytes().get(at..))
        .is_some_and(|tail| tail.eq_ignore_ascii_case(b"+json"));
    if essence.eq_ignore_ascii_case("application/json") || (!kind.is_empty() && json_suffix) {
        Some(Kind::Json)
    } else if essence.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
        Some(Kind::Form)
    } else {
        None
    }
}

/// The field many web frameworks (Rails, Laravel, Symfony) read as the request's real method.
pub const METHOD_FIELD: &str = "_method";

impl Body {
    /// Whether this is a form carrying [`METHOD_FIELD`]: a server could act on it as another
    /// method than the request line's.
    pub fn overrides_method(&self) -> bool {
        matches!(self, Body::Form(pairs) if pairs.iter().any(|(name, _)| name == METHOD_FIELD))
    }
}

/// Whether a body of this `Content-Type`, as `bytes`, carries [`METHOD_FIELD`]: a field of an
/// urlencoded form, or a part of a `multipart/form-data` one.
pub fn carries_method_field(content_type: Option<&HeaderValue>, bytes: &[u8]) -> bool {
    match content_type.and_then(media_kind) {
        Some(Kind::Form) => names_method_field(bytes),
        _ => {
            let part = b"name=\"_method\"";
            bytes
                .windows(part.len())
                .any(|w| w.eq_ignore_ascii_case(part))
        }
    }
}

/// Whether a body of this `Content-Type` is a form a server could read [`METHOD_FIELD`] from:
/// urlencoded or `multipart/form-data`.
pub fn may_carry_method_field(content_type: Option<&HeaderValue>) -> bool {
    content_type.is_some_and(|value| {
        matches!(media_kind(value), Some(Kind::Form))
            || value.as_bytes().len() >= 19
                && value.as_bytes()[..19].eq_ignore_ascii_case(b"multipart/form-data")
    })
}

/// Whether a query string (or a form's bytes) names [`METHOD_FIELD`]; names that do not decode
/// to UTF-8 are not it.
pub fn names_method_field(raw: &[u8]) -> bool {
    raw.split(|&b| b == b'&')
        .map(|pair| pair.split(|&b| b == b'=').next().unwrap_or_default())
        .any(|name| decode_component(name).is_some_and(|n| n == METHOD_FIELD))
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

/// One form (or query) component: `+` a space, `%XX` a byte; `None` unless UTF-8 after that.
pub(crate) fn decode_component(raw: &[u8]) -> Option<String> {
    let spaced: Vec<u8> = raw
        .iter()
        .map(|&b| if b == b'+' { b' ' } else { b })
        .collect();
    String::from_utf8(percent_decode(&spaced).collect()).ok()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

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

    /// The key `parse_checked` refuses a declared-JSON `text` for.
    fn repeated(text: &str) -> Option<String> {
        parse_checked(Some(&ct("application/json")), Bytes::from(text.to_string()))
            .err()
            .map(|repeated| repeated.0)
    }

    #[test]
    fn repeated_keys_are_found_at_any_depth_and_make_json_malformed() {
        assert_eq!(repeated(r#"{"a":1,"a":2}"#).as_deref(), Some("a"));
        assert_eq!(repeated(r#"[{"m":{"k":1,"k":1}}]"#).as_deref(), Some("k"));
        assert_eq!(repeated(r#"{"b":1,"\u0062":2}"#).as_deref(), Some("b"));
        assert_eq!(repeated(r#"{"a":1,"b":{"a":1},"c":[{"a":2}]}"#), None);
        assert_eq!(repeated(r#"{"n":12345678901234567890123}"#), None);
        assert_eq!(repeated("{not json"), None);
        assert_eq!(
            repeated(r#"{"a":1,"a":2,"#).as_deref(),
            Some("a"),
            "before the error"
        );
        assert_eq!(repeated(r#"{"a":1,,"a":2}"#), None, "after the error");
        assert_eq!(
            repeated(r#"{"😀":{"$serde_json::private::Number":1e400},"😀":0}"#).as_deref(),
            Some("😀"),
            "after an object serde_json's Value takes for a number it cannot read"
        );
        assert_eq!(
            parse_checked(None, Bytes::from_static(br#"{"a":1,"a":2}"#)),
            Ok(Body::Bytes(Bytes::from_static(br#"{"a":1,"a":2}"#))),
            "not declared JSON"
        );
        assert!(matches!(
            parse_str("application/json", r#"{"a":1,"a":2}"#),
            Body::Malformed { kind: "json", .. }
        ));
        assert!(repeated_key_detail("a").contains(r#"key "a" more than once"#));
    }

    /// The two passes `parse_checked` replaced: the first repeated key (or none) from a walk
    /// that keeps nothing, then the value from `serde_json::from_slice`.
    mod two_passes {
        use std::cell::RefCell;
        use std::collections::HashSet;

        use serde::de::{DeserializeSeed, Error, MapAccess, SeqAccess, Visitor};

        pub fn parse(bytes: &[u8]) -> Result<Option<serde_json::Value>, String> {
            let found = RefCell::new(None);
            let mut de = serde_json::Deserializer::from_slice(bytes);
            let walked = Unique(&found).deserialize(&mut de).and_then(|()| de.end());
            match (walked, found.into_inner()) {
                (_, Some(key)) => Err(key),
                (Ok(()), None) => Ok(serde_json::from_slice(bytes).ok()),
                (Err(_), None) => Ok(None),
            }
        }

        #[derive(Clone, Copy)]
        struct Unique<'a>(&'a RefCell<Option<String>>);

        impl<'de> DeserializeSeed<'de> for Unique<'_> {
            type Value = ();
            fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
                de.deserialize_any(self)
            }
        }

        impl<'de> Visitor<'de> for Unique<'_> {
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
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
                while seq.next_element_seed(self)?.is_some() {}
                Ok(())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
                let mut seen = HashSet::new();
                while let Some(key) = map.next_key::<String>()? {
                    if !seen.insert(key.clone()) {
                        *self.0.borrow_mut() = Some(key);
                        return Err(A::Error::custom("repeated key"));
                    }
                    map.next_value_seed(self)?;
                }
                Ok(())
            }
        }
    }

    /// JSON-ish text: values of every kind, numbers in every spelling, escapes, unicode,
    /// keys drawn from a few (so objects repeat them), serde_json's number key, and damage.
    fn json_text() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            Just(r#""a""#.to_string()),
            Just(r#""b""#.to_string()),
            Just(r#""\u0061""#.to_string()),
            Just(r#""é""#.to_string()),
            Just(r#""\ud83d\ude00""#.to_string()),
            Just(r#""😀""#.to_string()),
            Just(r#""$serde_json::private::Number""#.to_string()),
            "\"[a-c]{0,2}\"",
        ];
        let number = prop_oneof![
            "-?(0|[1-9][0-9]{0,25})(\\.[0-9]{1,5})?([eE][+-]?[0-9]{1,3})?",
            Just("-0".to_string()),
            Just("01".to_string()),
            Just("1.".to_string()),
            Just("1e400".to_string()),
        ];
        let leaf = prop_oneof![
            number,
            Just("true".to_string()),
            Just("false".to_string()),
            Just("null".to_string()),
            r#""([a-zé😀 ]|\\[nt"\\/]|\\u00[0-9a-f]{2}|\\ud83d|\\ude00)*""#,
            Just(r#""12""#.to_string()),
            Just(r#""1e2""#.to_string()),
        ];
        let value = leaf.prop_recursive(4, 32, 4, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec((key.clone(), inner), 0..4).prop_map(|members| {
                    let members: Vec<String> = members
                        .into_iter()
                        .map(|(k, v)| format!("{k}:{v}"))
                        .collect();
                    format!("{{{}}}", members.join(","))
                }),
            ]
        });
        (
            value,
            prop_oneof![Just(""), Just(" "), Just(","), Just("}"), Just("x")],
            0..3usize,
        )
            .prop_map(|(text, tail, cut)| match cut {
                0 => format!(" {text}\n"),
                1 => format!("{text}{tail}"),
                _ => {
                    let mut end = text.len() / 2;
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    text[..end].to_string()
                }
            })
    }

    proptest::proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn one_pass_finds_what_the_two_passes_found(text in json_text()) {
            let one = parse_checked(Some(&ct("application/json")), Bytes::from(text.clone()));
            let two = two_passes::parse(text.as_bytes());
            let one = one
                .map(|body| match body {
                    Body::Json(value) => Some(value),
                    _ => None,
                })
                .map_err(|repeated| repeated.0);
            prop_assert_eq!(&one, &two, "{}", text);
            // The same value, down to how serde_json spells each number.
            if let (Ok(Some(a)), Ok(Some(b))) = (&one, &two) {
                prop_assert_eq!(a.to_string(), b.to_string());
            }
        }
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
