//! The template language: any text parses or is refused with a message; a parsed template
//! renders against any request without panicking, and reads back as the same template.
//!
//! Input: templates one a line, then NUL, the JSON or form body, NUL, the query string (so the
//! seeds are the policies' templates and the tests' bodies as they are written).
#![no_main]

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use idemproxy::body;
use idemproxy::template::{Escape, Rendered, Sources, Template, render_first};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut pieces = data.splitn(3, |&b| b == 0);
    let text = String::from_utf8_lossy(pieces.next().unwrap_or_default());
    let raw_body = pieces.next().unwrap_or_default();
    let query = pieces.next().map(String::from_utf8_lossy);
    let mut templates = Vec::new();
    for source in text.split('\n') {
        match Template::parse(source) {
            Ok(t) => {
                assert_eq!(t.as_str(), source);
                assert_eq!(Template::parse(t.as_str()).as_ref(), Ok(&t));
                templates.push(t);
            }
            Err(e) => assert!(!e.0.is_empty()),
        }
    }
    let mut headers = HeaderMap::new();
    headers.insert("x-operation-id", HeaderValue::from_static("op-1"));
    headers.insert(
        "x-workflow-id",
        HeaderValue::from_bytes("wf/1 é".as_bytes()).expect("opaque"),
    );
    headers.insert("x-empty", HeaderValue::from_static(""));
    headers.insert(
        "x-bytes",
        HeaderValue::from_bytes(b"\xff\xfe").expect("opaque"),
    );
    let json = raw_body.first().is_some_and(|&b| b == b'{' || b == b'[');
    let ct = HeaderValue::from_static(if json {
        "application/json"
    } else {
        "application/x-www-form-urlencoded"
    });
    let body = body::parse(Some(&ct), Bytes::copy_from_slice(raw_body));
    let answer = match &body {
        body::Body::Json(value) => Some(value.clone()),
        _ => None,
    };
    let captures = vec![
        ("id".to_string(), "re_1%2F2".to_string()),
        ("rest".to_string(), String::new()),
    ];
    let sources = Sources {
        headers: &headers,
        query: query.as_deref(),
        body: &body,
        captures: &captures,
        provider: "p",
        route: "r",
        fingerprint: Some("abc123"),
        key: Some("k"),
        operation_id: Some("op"),
        answer: answer.as_ref(),
    };
    for t in &templates {
        let plain = t.render(&sources, Escape::None);
        let url = t.render(&sources, Escape::Url);
        // Escaping changes values, never whether they are there.
        match (&plain, &url) {
            (Ok(Rendered::Missing(a)), Ok(Rendered::Missing(b))) => assert_eq!(a, b),
            (Ok(Rendered::Value(_)), Ok(Rendered::Value(_))) => {}
            (Err(_), Err(_)) => {}
            other => panic!("escaping changed the outcome: {other:?}"),
        }
    }
    let _ = render_first(&templates, &sources);
});
