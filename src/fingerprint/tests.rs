use super::walk::json_section;
use super::*;
use bytes::Bytes;
use http::HeaderValue;
use serde_json::Value;
use serde_json::json;

/// One request's fingerprint inputs, owned.
struct Req {
    method: Method,
    path: String,
    query: Option<String>,
    body: Body,
    headers: HeaderMap,
    fingerprint_headers: Vec<HeaderName>,
    ignore: Vec<String>,
    key_field: Option<String>,
}

impl Req {
    fn new(body: Body) -> Req {
        Req {
            method: Method::POST,
            path: "/v1/refunds".into(),
            query: None,
            body,
            headers: HeaderMap::new(),
            fingerprint_headers: vec![],
            ignore: vec![],
            key_field: None,
        }
    }

    fn json(value: Value) -> Req {
        Req::new(Body::Json(value))
    }

    fn form(pairs: &[(&str, &str)]) -> Req {
        let pairs = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Req::new(Body::Form(pairs.collect()))
    }

    fn ignoring(mut self, fields: &[&str]) -> Req {
        self.ignore = fields.iter().map(|f| f.to_string()).collect();
        self
    }

    fn fp(&self) -> Fingerprint {
        self.fp_with(&Secret::from_bytes([7; 32]))
    }

    /// The full fingerprint; every test that computes one also checks that `hex_only`
    /// (what a replay computes) agrees with it, and `completed` (what a new operation
    /// computes after it) with both.
    fn fp_with(&self, secret: &Secret) -> Fingerprint {
        let inputs = Inputs {
            method: &self.method,
            path: &self.path,
            query: self.query.as_deref(),
            body: &self.body,
            headers: &self.headers,
            fingerprint_headers: &self.fingerprint_headers,
            ignore: &self.ignore,
            key_field: self.key_field.as_deref(),
            secret,
            methods: None,
        };
        let fp = compute(&inputs);
        let methods = Methods::of(secret);
        let taken = Inputs {
            methods: Some(&methods),
            ..inputs
        };
        assert_eq!(
            compute(&taken),
            fp,
            "the methods' hashes taken at start differ"
        );
        assert_eq!(hex_only(&inputs), fp.hex, "hex_only disagrees with compute");
        assert_eq!(
            completed(&inputs, hex_only(&inputs)),
            fp,
            "completed disagrees"
        );
        fp
    }
}

#[test]
fn the_methods_hashed_at_start_are_the_ones_hashed_each_time() {
    // `fp` compares them field by field; a body field named `method` shares the path and
    // changes its digest, so the hash taken at start must not be used for it.
    let clashing = Req::json(json!({"method": "card", "amount": 5}));
    let plain = Req::json(json!({"amount": 5}));
    assert_ne!(clashing.fp().fields["method"], plain.fp().fields["method"]);
    let mut unusual = Req::json(json!({"amount": 5}));
    unusual.method = Method::OPTIONS;
    assert_ne!(unusual.fp().fields["method"], plain.fp().fields["method"]);
}

#[test]
fn hex_only_is_the_fingerprint_of_every_kind_of_request() {
    let mut with_query = Req::json(json!({"amount": 100, "meta": {"a": [1, {"b": null}]}}));
    with_query.query = Some("expand[]=x&limit=3&expand[]=y".into());
    let mut with_header = Req::form(&[("charge", "ch_1"), ("metadata[step]", "2")]);
    with_header.fingerprint_headers = vec![HeaderName::from_static("stripe-account")];
    with_header
        .headers
        .insert("stripe-account", HeaderValue::from_static("acct_1"));
    let mut raw_query = Req::new(Body::Empty);
    raw_query.query = Some("q=%FF%FE".into());
    let mut keyed = Req::json(json!({"idempotency_key": "k", "amount": 5}));
    keyed.key_field = Some("/idempotency_key".into());
    let requests = [
        with_query,
        with_header,
        raw_query,
        keyed,
        Req::json(json!("a scalar")),
        Req::json(json!([1, 2, 3])),
        Req::new(Body::Bytes(Bytes::from_static(b"\x00\x01 raw"))),
        Req::json(json!({"metadata": {"trace_id": "t", "step": 1}}))
            .ignoring(&["metadata[trace_id]"]),
    ];
    let hexes: Vec<String> = requests.iter().map(|r| r.fp().hex).collect();
    let distinct: std::collections::BTreeSet<&String> = hexes.iter().collect();
    assert_eq!(
        distinct.len(),
        hexes.len(),
        "distinct requests, distinct fingerprints"
    );
}

fn diff(a: &Req, b: &Req) -> Vec<String> {
    differing_fields(&a.fp().fields, &b.fp().fields)
}

fn keys(fp: &Fingerprint) -> Vec<&str> {
    fp.fields.keys().map(String::as_str).collect()
}

#[test]
fn every_hash_depends_on_the_secret_and_no_field_hash_on_its_value_alone() {
    let req = Req::form(&[("card[cvc]", "123"), ("other_cvc", "123")]);
    let (a, b) = (req.fp(), req.fp_with(&Secret::from_bytes([8; 32])));
    assert_ne!(a.hex, b.hex);
    for (path, hash) in &a.fields {
        assert_ne!(Some(hash), b.fields.get(path), "{path}");
    }
    assert_eq!(a, req.fp(), "the same secret gives the same hashes");
    assert_ne!(
        a.fields["card[cvc]"], a.fields["other_cvc"],
        "the path is keyed in"
    );
    let unkeyed = hex::encode(&Sha256::digest(br#"["123"]"#)[..8]);
    assert!(!a.fields.values().any(|h| *h == unkeyed));
}

#[test]
fn json_fields_use_bracket_paths_for_top_level_and_leaves() {
    let req = Req::json(json!({
        "amount": 500, "metadata": {"step": "2", "tags": {}},
        "items": [{"price": 1}]
    }));
    let fp = req.fp();
    assert_eq!(fp.hex.len(), 64);
    assert!(
        fp.hex
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_eq!(
        keys(&fp),
        [
            "amount",
            "items",
            "items[0][price]",
            "metadata",
            "metadata[step]",
            "metadata[tags]",
            "method",
            "path"
        ]
    );
    assert!(fp.fields.values().all(|h| h.len() == 16));
}

#[test]
fn a_changed_nested_value_names_only_the_leaf() {
    let a = Req::json(json!({"amount": 500, "metadata": {"step": "2", "x": 1}}));
    let b = Req::json(json!({"amount": 500, "metadata": {"step": "3", "x": 1}}));
    assert_ne!(a.fp().hex, b.fp().hex);
    assert_eq!(diff(&a, &b), ["metadata[step]"]);
    let c = Req::json(json!({"amount": 500, "metadata": {"step": "2", "x": 1, "y": 0}}));
    assert_eq!(diff(&a, &c), ["metadata[y]"]);
    let d = Req::json(json!({"amount": 500, "metadata": "flat"}));
    assert_eq!(diff(&a, &d), ["metadata[step]", "metadata[x]"]);
}

#[test]
fn form_fields_are_named_as_sent_and_compare_as_sets_of_lists() {
    let a = Req::form(&[
        ("amount", "5"),
        ("metadata[step]", "2"),
        ("t", "1"),
        ("t", "2"),
    ]);
    let b = Req::form(&[
        ("t", "1"),
        ("metadata[step]", "2"),
        ("t", "2"),
        ("amount", "5"),
    ]);
    assert_eq!(a.fp().hex, b.fp().hex);
    assert_eq!(
        keys(&a.fp()),
        ["amount", "metadata[step]", "method", "path", "t"]
    );
    let swapped = Req::form(&[
        ("amount", "5"),
        ("metadata[step]", "2"),
        ("t", "2"),
        ("t", "1"),
    ]);
    assert_ne!(a.fp().hex, swapped.fp().hex);
    assert_eq!(diff(&a, &swapped), ["t"]);
    let json = Req::json(json!({"amount": "5", "metadata": {"step": "2"}}));
    assert!(json.fp().fields.contains_key("metadata[step]"));
}

#[test]
fn query_pairs_are_sorted_and_named_with_a_prefix() {
    let mut a = Req::new(Body::Empty);
    a.query = Some("b=1&a=2&b=3".into());
    let mut b = Req::new(Body::Empty);
    b.query = Some("a=2&b=1&b=3".into());
    assert_eq!(a.fp().hex, b.fp().hex);
    b.query = Some("a=2&b=3&b=1".into());
    assert_eq!(diff(&a, &b), ["query:b"]);
    b.query = None;
    assert_eq!(diff(&a, &b), ["query:a", "query:b"]);
    let mut c = Req::new(Body::Empty);
    c.query = Some(String::new());
    assert_eq!(b.fp(), c.fp());
}

#[test]
fn method_path_and_body_kinds_all_count() {
    let a = Req::json(json!({"amount": 5}));
    let mut b = Req::json(json!({"amount": 5}));
    b.path = "/v1/refunds/re_2".into();
    assert_eq!(diff(&a, &b), ["path"]);
    b.method = Method::PUT;
    assert_eq!(diff(&a, &b), ["method", "path"]);
    let form = Req::form(&[("amount", "5")]);
    assert_ne!(a.fp().hex, form.fp().hex);
    assert_eq!(diff(&a, &form), ["amount"]);
    let raw = Req::new(Body::Bytes(Bytes::from_static(b"<x/>")));
    let other = Req::new(Body::Bytes(Bytes::from_static(b"<y/>")));
    assert_eq!(diff(&raw, &other), ["body"]);
    let empty = Req::new(Body::Empty);
    assert_ne!(empty.fp().hex, Req::json(json!({})).fp().hex);
    assert_ne!(empty.fp().hex, raw.fp().hex);
}

#[test]
fn ignoring_a_field_drops_everything_under_it() {
    let a = Req::json(json!({"amount": 5, "metadata": {"trace_id": "t1", "step": 1}}));
    let b = Req::json(json!({"amount": 5, "metadata": {"trace_id": "t2", "step": 1}}));
    let ig = |r: Req, f: &[&str]| r.ignoring(f);
    let (a1, b1) = (
        ig(a, &["metadata[trace_id]"]),
        ig(b, &["metadata[trace_id]"]),
    );
    assert_eq!(a1.fp(), b1.fp());
    assert!(!a1.fp().fields.contains_key("metadata[trace_id]"));
    let c = Req::json(json!({"amount": 5, "metadata": {"x": [1, 2]}})).ignoring(&["metadata"]);
    let d = Req::json(json!({"amount": 5})).ignoring(&["metadata"]);
    assert_eq!(c.fp(), d.fp());
    let e = Req::form(&[("amount", "5"), ("metadata[trace_id]", "t1")]).ignoring(&["metadata"]);
    let f = Req::form(&[("amount", "5")]).ignoring(&["metadata"]);
    assert_eq!(e.fp().hex, f.fp().hex);
    // A prefix that is not a whole field name ignores nothing.
    let g = Req::form(&[("amount", "5"), ("metadatax", "1")]).ignoring(&["metadata"]);
    assert_ne!(g.fp().hex, f.fp().hex);
}

#[test]
fn ignoring_a_query_field_by_its_bare_name() {
    let mut a = Req::new(Body::Empty).ignoring(&["trace"]);
    a.query = Some("limit=1&trace=abc".into());
    let mut b = Req::new(Body::Empty).ignoring(&["trace"]);
    b.query = Some("limit=1&trace=def".into());
    assert_eq!(a.fp(), b.fp());
    b.query = Some("limit=2&trace=def".into());
    assert_eq!(diff(&a, &b), ["query:limit"]);
}

#[test]
fn ignored_array_items_keep_the_other_items_in_place() {
    let a = Req::json(json!({"l": [1, 2, 3]})).ignoring(&["l[1]"]);
    let b = Req::json(json!({"l": [1, 9, 3]})).ignoring(&["l[1]"]);
    let c = Req::json(json!({"l": [1, 3]})).ignoring(&["l[1]"]);
    assert_eq!(a.fp(), b.fp());
    assert_ne!(a.fp().hex, c.fp().hex);
}

#[test]
fn the_key_field_never_counts() {
    let mut a = Req::json(json!({"amount": 5, "meta": {"idem": "client-1"}}));
    a.key_field = Some("/meta/idem".into());
    let mut b = Req::json(json!({"amount": 5, "meta": {"idem": "client-2"}}));
    b.key_field = Some("/meta/idem".into());
    assert_eq!(a.fp(), b.fp());
    b.key_field = None;
    assert_ne!(a.fp().hex, b.fp().hex);
}

#[test]
fn only_configured_headers_count_and_absent_differs_from_empty() {
    let mut a = Req::new(Body::Empty);
    a.fingerprint_headers = vec![HeaderName::from_static("stripe-account")];
    a.headers.insert("x-other", HeaderValue::from_static("1"));
    let mut b = Req::new(Body::Empty);
    b.fingerprint_headers = a.fingerprint_headers.clone();
    assert_eq!(a.fp(), b.fp());
    b.headers
        .insert("stripe-account", HeaderValue::from_static(""));
    assert_eq!(diff(&a, &b), ["header:stripe-account"]);
    a.headers
        .insert("stripe-account", HeaderValue::from_static("acct_1"));
    assert_eq!(diff(&a, &b), ["header:stripe-account"]);
}

#[test]
fn colliding_paths_share_an_entry_and_still_differ() {
    let a = Req::json(json!({"path": "x"}));
    let b = Req::json(json!({"path": "y"}));
    assert_ne!(a.fp().hex, b.fp().hex);
    assert_eq!(diff(&a, &b), ["path"]);
}

#[test]
fn many_leaves_fall_back_to_top_level_then_coarse() {
    let leaves: serde_json::Map<String, Value> =
        (0..300).map(|i| (format!("k{i}"), json!(i))).collect();
    let nested = Req::json(json!({"a": Value::Object(leaves.clone()), "b": 1}));
    assert_eq!(keys(&nested.fp()), ["a", "b", "method", "path"]);
    let mut wide = Req::json(Value::Object(leaves.clone()));
    wide.query = Some("q=1".into());
    assert_eq!(keys(&wide.fp()), ["body", "method", "path", "query"]);
    let mut changed = leaves;
    changed.insert("k7".into(), json!("x"));
    let mut other = Req::json(Value::Object(changed));
    other.query = Some("q=1".into());
    assert_eq!(diff(&wide, &other), ["body"]);
}

#[test]
fn differing_fields_handles_one_sided_paths() {
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let stored = map(&[("a", "1"), ("a[x]", "2"), ("b", "3"), ("gone", "4")]);
    let new = map(&[("a", "1"), ("b", "5"), ("new", "6")]);
    // `a[x]` is only on one side, but `a` is unchanged: the new side kept less detail.
    assert_eq!(differing_fields(&stored, &new), ["b", "gone", "new"]);
    assert!(differing_fields(&stored, &stored).is_empty());
    let arr_a = map(&[("[0]", "1"), ("[0][p]", "2")]);
    let arr_b = map(&[("[0]", "9"), ("[0][p]", "8")]);
    assert_eq!(differing_fields(&arr_a, &arr_b), ["[0][p]"]);
}

#[test]
fn numbers_compare_as_written_after_parsing() {
    let parsed = |text: &str| {
        let ct = HeaderValue::from_static("application/json");
        Req::new(crate::body::parse(Some(&ct), Bytes::from(text.to_string())))
    };
    let big = parsed(r#"{"amount": 12345678901234567890123}"#);
    let next = parsed(r#"{"amount": 12345678901234567890124}"#);
    assert_ne!(big.fp().hex, next.fp().hex, "no rounding through f64");
    assert_eq!(diff(&big, &next), ["amount"]);
    assert_ne!(parsed(r#"{"n":1}"#).fp(), parsed(r#"{"n":1.0}"#).fp());
    assert_ne!(parsed(r#"{"n":1e2}"#).fp(), parsed(r#"{"n":100}"#).fp());
    assert_eq!(parsed(r#"{"n":1e2}"#).fp(), parsed(r#"{"n": 1E+2}"#).fp());
}

#[test]
fn non_utf8_queries_compare_as_raw_text() {
    let mut a = Req::new(Body::Empty);
    a.query = Some("a=%FF".into());
    let mut b = Req::new(Body::Empty);
    b.query = Some("a=%FE".into());
    assert_eq!(diff(&a, &b), ["query"]);
}

#[test]
fn the_anonymous_principal_is_the_principal_of_a_request_without_its_headers() {
    let secret = Secret::from_bytes([7; 32]);
    let mut provider = crate::policy::Provider::example("stripe", "/stripe", "");
    provider.principal_headers = vec![
        http::header::AUTHORIZATION,
        HeaderName::from_static("stripe-account"),
    ];
    let names = &provider.principal_headers;
    let anonymous = Anonymous::of(std::slice::from_ref(&provider), &secret);
    let mut headers = HeaderMap::new();
    headers.insert("x-other", HeaderValue::from_static("1"));
    let of = |headers: &HeaderMap| anonymous.principal(&provider, headers, &secret);
    assert_eq!(of(&headers), principal(&headers, names, &secret));
    headers.insert("stripe-account", HeaderValue::from_static("acct_1"));
    assert_eq!(of(&headers), principal(&headers, names, &secret));
    assert_ne!(
        of(&headers),
        of(&HeaderMap::new()),
        "a header carried counts"
    );
    let mut other = provider.clone();
    other.name = "other".into();
    let unknown = anonymous.principal(&other, &headers, &secret);
    assert_eq!(unknown, principal(&headers, names, &secret));
}

/// Fingerprints recorded by earlier versions must keep matching: the hex and the field
/// hashes (as one digest) of requests as the version before the one-pass body had them.
#[test]
fn fingerprints_stay_what_they_were() {
    let body = json!({
        "amount": 100, "currency": "usd", "z": [1.50, -0, 1e2, "12345678901234567890123"],
        "meta": {"é": "a\"b\\c\n\u{1}", "😀": [true, null, {}, []], "b": {"y": 2, "x": 1}},
    });
    let text = body
        .to_string()
        .replace("\"12345678901234567890123\"", "12345678901234567890123");
    let parsed: Value = serde_json::from_str(&text).expect("test JSON");
    let plain = Req::json(parsed.clone());
    let mut ignoring = Req::json(parsed).ignoring(&["meta[b][x]", "z[1]"]);
    ignoring.key_field = Some("/currency".into());
    ignoring.query = Some("expand[]=x&limit=3".into());
    let form = Req::form(&[("charge", "ch_1"), ("metadata[step]", "2")]);
    let pinned = [
        (
            plain,
            "b47c3e8e0540160a43264304c2023142cfa10be69fbd7173245a9000d0f7b814",
            "452ac498f48012759b9f0c4bc37038b449369a7ae031110326744fbf963e4b2f",
        ),
        (
            ignoring,
            "e88d9a8f2d43be95f60e001d2baf09376270b44c7164f7d0ea62e6cbd22cb3e4",
            "65d5e2609fe285b780b8f067dd59a97c7299f2274d1d5883532cf2ae645027f5",
        ),
        (
            form,
            "7bbb972acb25409c9c8c82a06b842a9b2ea0fd081367158f9cc7d845c4029e30",
            "af7d31cb40675d74daa66d87653b5392da5cae02644c0c28fa8e2c73f59b7315",
        ),
    ];
    for (req, hex, fields) in pinned {
        let fp = req.fp();
        assert_eq!(fp.hex, hex);
        assert_eq!(digest(format!("{:?}", fp.fields).as_bytes()), fields);
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;
    use std::collections::hash_map::DefaultHasher;
    use std::hash::{Hash, Hasher};

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1.0e6f64..1.0e6).prop_map(Value::from),
            "[a-z é\"\\\\]{0,6}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn arb_object() -> impl Strategy<Value = Value> {
        prop::collection::btree_map("[a-z]{1,6}", arb_json(), 1..6)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    /// The same value with every object's keys in a seed-dependent order.
    fn reorder(value: &Value, seed: u64) -> Value {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by_key(|(k, _)| {
                    let mut h = DefaultHasher::new();
                    (seed, k).hash(&mut h);
                    h.finish()
                });
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.clone(), reorder(v, seed)))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(|v| reorder(v, seed)).collect()),
            other => other.clone(),
        }
    }

    fn parsed(text: String, content_type: &'static str) -> Req {
        let ct = HeaderValue::from_static(content_type);
        Req::new(crate::body::parse(Some(&ct), Bytes::from(text)))
    }

    /// (bracket path, JSON pointer) of every scalar in `value`.
    fn scalars(value: &Value, path: &str, pointer: &str, out: &mut Vec<(String, String)>) {
        let children: Vec<(String, &Value)> = match value {
            Value::Object(m) => m.iter().map(|(k, v)| (k.clone(), v)).collect(),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .map(|(i, v)| (i.to_string(), v))
                .collect(),
            _ => return out.push((path.to_string(), pointer.to_string())),
        };
        for (token, child) in children {
            let child_path = if path.is_empty() {
                token.clone()
            } else {
                format!("{path}[{token}]")
            };
            scalars(child, &child_path, &format!("{pointer}/{token}"), out);
        }
    }

    fn changed(value: &Value) -> Value {
        match value {
            Value::Null => Value::Bool(false),
            Value::Bool(b) => Value::Bool(!b),
            Value::String(s) => Value::from(format!("{s}x")),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Value::from(i.wrapping_add(1)),
                None => Value::from(n.as_f64().unwrap_or(0.0) + 1.0),
            },
            other => other.clone(),
        }
    }

    proptest! {
        #[test]
        fn key_order_and_whitespace_never_matter(value in arb_object(), seed in any::<u64>()) {
            let compact = parsed(value.to_string(), "application/json");
            let shuffled = reorder(&value, seed);
            let pretty = serde_json::to_string_pretty(&shuffled).unwrap_or_default();
            let pretty = parsed(pretty, "application/json");
            prop_assert!(matches!(pretty.body, Body::Json(_)));
            prop_assert_eq!(compact.fp(), pretty.fp());
        }

        #[test]
        fn form_field_order_across_names_never_matters(
            fields in prop::collection::btree_map("[a-z\\[\\]]{1,5}", prop::collection::vec("[a-z0-9 &=+%é]{0,4}", 1..4), 1..5),
            picks in prop::collection::vec(any::<prop::sample::Index>(), 16),
        ) {
            let in_order: Vec<(&String, &String)> = fields.iter().flat_map(|(k, vs)| vs.iter().map(move |v| (k, v))).collect();
            // Interleave the fields in a random order, keeping each field's own values in order.
            let mut queues: Vec<Vec<&String>> = fields.values().map(|vs| vs.iter().rev().collect()).collect();
            let names: Vec<&String> = fields.keys().collect();
            let mut mixed = Vec::new();
            for pick in picks.iter().cycle() {
                let live: Vec<usize> = (0..queues.len()).filter(|&i| !queues[i].is_empty()).collect();
                if live.is_empty() { break; }
                let i = live[pick.index(live.len())];
                if let Some(v) = queues[i].pop() { mixed.push((names[i], v)); }
            }
            let encode = |pairs: &[(&String, &String)]| {
                form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs.iter().copied()).finish()
            };
            let a = parsed(encode(&in_order), "application/x-www-form-urlencoded");
            let b = parsed(encode(&mixed), "application/x-www-form-urlencoded");
            prop_assert_eq!(a.fp(), b.fp());
        }

        #[test]
        fn a_changed_scalar_changes_the_hex_and_is_named_exactly(value in arb_object(), pick in any::<prop::sample::Index>()) {
            let mut leaves = Vec::new();
            scalars(&value, "", "", &mut leaves);
            prop_assume!(!leaves.is_empty());
            let (path, pointer) = leaves[pick.index(leaves.len())].clone();
            let mut other = value.clone();
            if let Some(slot) = other.pointer_mut(&pointer) { *slot = changed(slot); }
            let (a, b) = (Req::json(value), Req::json(other));
            prop_assert_ne!(a.fp().hex, b.fp().hex);
            prop_assert_eq!(diff(&a, &b), vec![path]);
        }

        /// The canonical JSON is serde_json's spelling of every key and scalar, keys
        /// sorted, whether or not field paths are written on the way.
        #[test]
        fn the_canonical_json_is_serde_jsons_spelling_with_keys_sorted(value in arb_json()) {
            fn spelled(value: &Value) -> String {
                match value {
                    Value::Object(map) => {
                        let mut entries: Vec<_> = map.iter().collect();
                        entries.sort_by(|a, b| a.0.cmp(b.0));
                        let members: Vec<String> = entries
                            .into_iter()
                            .map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), spelled(v)))
                            .collect();
                        format!("{{{}}}", members.join(","))
                    }
                    Value::Array(items) => {
                        let items: Vec<String> = items.iter().map(spelled).collect();
                        format!("[{}]", items.join(","))
                    }
                    scalar => scalar.to_string(),
                }
            }
            let mut want = b"json".to_vec();
            frame(&mut want, spelled(&value).as_bytes());
            let nothing = Excluded::new(&[], None);
            for hashes in [Hashes::Kept, Hashes::Skipped] {
                prop_assert_eq!(&json_section(&value, &nothing, hashes).canonical, &want);
            }
        }

        #[test]
        fn ignored_fields_and_the_key_field_never_matter(
            value in arb_object(), pick in any::<prop::sample::Index>(),
            replacement in arb_json(), key in proptest::option::of("[a-z0-9]{0,12}"),
        ) {
            let Value::Object(map) = &value else { unreachable!("arb_object makes objects") };
            let ignored = map.keys().nth(pick.index(map.len())).cloned().unwrap_or_default();
            let mut other = value.clone();
            if let Value::Object(m) = &mut other {
                m.insert(ignored.clone(), replacement);
                match key { Some(k) => { m.insert("idem".into(), Value::from(k)); } None => { m.remove("idem"); } }
            }
            let mut a = Req::json(value).ignoring(&[&ignored]);
            let mut b = Req::json(other).ignoring(&[&ignored]);
            a.key_field = Some("/idem".into());
            b.key_field = Some("/idem".into());
            prop_assert_eq!(a.fp(), b.fp());
        }
    }
}
