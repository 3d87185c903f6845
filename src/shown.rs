//! What the person approving a `prepared` operation is shown: the fields a route lists in
//! `approval_show`, read from the operation's kept first request (`kept`), masked where the
//! route's `fingerprint_ignore` leaves them out or where their name looks like a secret.
//!
//! This module owns the syntax of an `approval_show` entry (the field paths of
//! `fingerprint_ignore`: a body field in bracket notation, a query parameter by its bare name
//! or as `query:NAME`) and the masking rule. It is pure: it reads a request the caller has
//! already opened, never the ledger, and never logs or keeps a value. Nothing but the listed
//! fields leaves it.

use serde_json::{Map, Value, json};

use crate::body::{Body, decode_pairs};
use crate::fingerprint::{ignores_body, ignores_query, is_under};
use crate::kept::KeptRequest;
use crate::policy::field::{Field, segments};

/// What a masked field shows instead of its value.
pub const MASK: &str = "[masked]";

/// The longest value shown, in characters; a longer one is cut and ends with `…`.
pub const MAX_VALUE: usize = 2000;

/// Name parts that mark a field as a secret (compared in lowercase without `-` and `_`).
const SECRET_PARTS: [&str; 13] = [
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "private",
    "credential",
    "cvc",
    "cvv",
    "iban",
    "accountnumber",
    "cardnumber",
];

/// Whole names that mark a field as a secret.
const SECRET_NAMES: [&str; 3] = ["pin", "ssn", "otp"];

/// What the approver is asked to approve, as JSON: `fields` (each listed field present in the
/// request, in the listed order, its value as text or [`MASK`]), `masked` (the listed fields
/// shown masked) and `missing` (the listed fields the request does not have).
pub fn approval_request(fields: &[Field], ignore: &[String], kept: &KeptRequest) -> Value {
    let body = crate::body::parse(kept.content_type.as_ref(), kept.body.clone());
    let query = kept
        .path_and_query
        .split_once('?')
        .and_then(|(_, q)| decode_pairs(q.as_bytes()))
        .unwrap_or_default();
    let masks = Masks { ignore };
    let (mut shown, mut masked, mut missing) = (Map::new(), Vec::new(), Vec::new());
    for field in fields {
        // Where it was found decides how `fingerprint_ignore` names it.
        let found = if field.query_only {
            pairs_named(&query, field.query_name()).map(|v| (v, true))
        } else {
            (in_body(&body, field, &masks).map(|v| (v, false)))
                .or_else(|| pairs_named(&query, &field.text).map(|v| (v, true)))
        };
        match found {
            None => missing.push(field.text.clone()),
            Some((_, in_query))
                if (in_query && ignores_query(ignore, field.query_name()))
                    || masks.masked(&field.text, &field.segments) =>
            {
                masked.push(field.text.clone());
                shown.insert(field.text.clone(), MASK.into());
            }
            Some((value, _)) => {
                shown.insert(field.text.clone(), text(value).into());
            }
        }
    }
    json!({ "fields": shown, "masked": masked, "missing": missing })
}

/// Which fields are masked: those `fingerprint_ignore` leaves out, and secret-looking names.
struct Masks<'a> {
    ignore: &'a [String],
}

impl Masks<'_> {
    /// Whether the body field at `path` is masked: left out of the fingerprint, or named like
    /// a secret.
    fn masked<S: AsRef<str>>(&self, path: &str, segments: &[S]) -> bool {
        ignores_body(self.ignore, path) || looks_secret(segments)
    }

    /// `value` at `path` with every masked field under it replaced by [`MASK`].
    fn scrub(&self, value: &Value, path: &str, segments: &mut Vec<String>) -> Value {
        let children: Vec<(String, &Value)> = match value {
            Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v)).collect(),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, v)| (i.to_string(), v))
                .collect(),
            scalar => return scalar.clone(),
        };
        let mut out = Vec::with_capacity(children.len());
        for (key, child) in children {
            let child_path = format!("{path}[{key}]");
            segments.push(key.clone());
            let shown = if self.masked(&child_path, segments) {
                Value::from(MASK)
            } else {
                self.scrub(child, &child_path, segments)
            };
            segments.pop();
            out.push((key, shown));
        }
        match value {
            Value::Array(_) => Value::Array(out.into_iter().map(|(_, v)| v).collect()),
            _ => Value::Object(out.into_iter().collect()),
        }
    }
}

/// Whether any part of a field's name looks like it holds a secret: a password, a token, a
/// card's number or CVC, a PIN.
fn looks_secret<S: AsRef<str>>(segments: &[S]) -> bool {
    let mut card = false;
    segments.iter().any(|segment| {
        let name: String = segment
            .as_ref()
            .chars()
            .filter(|c| !matches!(c, '-' | '_'))
            .map(|c| c.to_ascii_lowercase())
            .collect();
        let secret = SECRET_PARTS.iter().any(|part| name.contains(part))
            || SECRET_NAMES.contains(&name.as_str())
            || (card && name == "number");
        card |= name.contains("card");
        secret
    })
}

/// The field's value in a JSON or form body, masked fields under it scrubbed.
fn in_body(body: &Body, field: &Field, masks: &Masks) -> Option<Value> {
    match body {
        Body::Json(root) => {
            let mut value = root;
            for segment in &field.segments {
                value = match value {
                    Value::Object(map) => map.get(segment)?,
                    Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
                    _ => return None,
                };
            }
            let mut segments = field.segments.clone();
            Some(masks.scrub(value, &field.text, &mut segments))
        }
        Body::Form(pairs) => {
            pairs_named(pairs, &field.text).or_else(|| form_under(pairs, field, masks))
        }
        Body::Empty | Body::Bytes(_) | Body::Malformed { .. } => None,
    }
}

/// The values of the pairs named `name`: one as a string, several as an array.
fn pairs_named(pairs: &[(String, String)], name: &str) -> Option<Value> {
    let mut values: Vec<Value> = pairs
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| Value::from(v.as_str()))
        .collect();
    match values.len() {
        0 => None,
        1 => values.pop(),
        _ => Some(Value::Array(values)),
    }
}

/// Form fields named under `field` (`metadata[a]`, `metadata[b]` under `metadata`), as an
/// object of their full names, each masked on its own.
fn form_under(pairs: &[(String, String)], field: &Field, masks: &Masks) -> Option<Value> {
    let mut out = Map::new();
    for (name, _) in pairs.iter().filter(|(n, _)| is_under(n, &field.text)) {
        if out.contains_key(name) {
            continue;
        }
        let parts = segments(name).unwrap_or_else(|| vec![name.clone()]);
        let value = match masks.masked(name, &parts) {
            true => Value::from(MASK),
            false => pairs_named(pairs, name).unwrap_or(Value::Null),
        };
        out.insert(name.clone(), value);
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

/// A value as the approver reads it: a string as it is, anything else as compact JSON; cut
/// at [`MAX_VALUE`] characters.
fn text(value: Value) -> String {
    let full = match value {
        Value::String(s) => s,
        other => other.to_string(),
    };
    match full.char_indices().nth(MAX_VALUE) {
        Some((cut, _)) => format!("{}…", &full[..cut]),
        None => full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::{HeaderValue, Method};

    fn kept(content_type: &'static str, path: &str, body: &str) -> KeptRequest {
        KeptRequest {
            method: Method::POST,
            path_and_query: path.to_string(),
            content_type: Some(HeaderValue::from_static(content_type)),
            body: Bytes::from(body.to_string()),
        }
    }

    fn fields(list: &[&str]) -> Vec<Field> {
        list.iter().map(|f| Field::parse(f).expect(f)).collect()
    }

    #[test]
    fn entries_are_bracket_paths_or_query_parameters() {
        for ok in [
            "amount",
            "metadata[order]",
            "items[0][price]",
            "[0]",
            "query:expand",
            "a-b.c",
        ] {
            assert!(Field::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "a[", "a]", "a[]", "[]", "a[b]c", "a[b[c]]", "query:", "]",
        ] {
            assert!(Field::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn form_fields_are_shown_in_the_listed_order_and_absent_ones_named() {
        let request = kept(
            "application/x-www-form-urlencoded",
            "/v1/refunds?expand=charge",
            "charge=ch_1&amount=1000&metadata[order]=o-7&metadata[trace_id]=t1",
        );
        let list = fields(&["amount", "charge", "reason", "query:expand", "metadata"]);
        let ignore = ["metadata[trace_id]".to_string()];
        let shown = approval_request(&list, &ignore, &request);
        assert_eq!(
            shown,
            json!({
                "fields": {
                    "amount": "1000",
                    "charge": "ch_1",
                    "query:expand": "charge",
                    "metadata": "{\"metadata[order]\":\"o-7\",\"metadata[trace_id]\":\"[masked]\"}",
                },
                "masked": [],
                "missing": ["reason"],
            })
        );
        let keys: Vec<&String> = shown["fields"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.keys())
            .collect();
        assert_eq!(keys, ["amount", "charge", "query:expand", "metadata"]);
    }

    #[test]
    fn ignored_and_secret_looking_fields_are_masked_inside_json_too() {
        let request = kept(
            "application/json",
            "/v1/pay",
            r#"{"amount": 1000, "note": "hi", "card": {"number": "4242", "exp": "12/30", "cvc": "123"},
                "api_token": "tok", "items": [{"price": 5}], "flag": true}"#,
        );
        let list = fields(&[
            "amount",
            "note",
            "card",
            "card[cvc]",
            "api_token",
            "items[0][price]",
            "flag",
        ]);
        let shown = approval_request(&list, &["note".to_string()], &request);
        assert_eq!(shown["fields"]["amount"], "1000");
        assert_eq!(shown["fields"]["note"], MASK, "ignored in the fingerprint");
        assert_eq!(
            shown["fields"]["card"],
            r#"{"number":"[masked]","exp":"12/30","cvc":"[masked]"}"#
        );
        assert_eq!(shown["fields"]["card[cvc]"], MASK);
        assert_eq!(shown["fields"]["api_token"], MASK);
        assert_eq!(shown["fields"]["items[0][price]"], "5");
        assert_eq!(shown["fields"]["flag"], "true");
        assert_eq!(shown["masked"], json!(["note", "card[cvc]", "api_token"]));
        assert!(!shown.to_string().contains("4242") && !shown.to_string().contains("\"123\""));
    }

    #[test]
    fn a_bare_name_falls_back_to_the_query_and_long_values_are_cut() {
        let long = "x".repeat(MAX_VALUE + 5);
        let request = kept(
            "application/json",
            &format!("/v1/a?limit=3&long={long}"),
            r#"[1, 2]"#,
        );
        let shown = approval_request(&fields(&["limit", "long", "[1]", "[5]"]), &[], &request);
        assert_eq!(shown["fields"]["limit"], "3");
        assert_eq!(shown["fields"]["[1]"], "2");
        let cut = shown["fields"]["long"].as_str().unwrap_or_default();
        assert_eq!(cut.chars().count(), MAX_VALUE + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(shown["missing"], json!(["[5]"]));
    }

    #[test]
    fn secret_names_are_recognised_in_any_part() {
        for secret in [
            &["password"][..],
            &["user", "Pass-Phrase"],
            &["card", "number"],
            &["PIN"],
            &["client_secret"],
        ] {
            assert!(looks_secret(secret), "{secret:?}");
        }
        for plain in [
            &["amount"][..],
            &["number"],
            &["metadata", "pinned"],
            &["charge"],
        ] {
            assert!(!looks_secret(plain), "{plain:?}");
        }
    }
}
