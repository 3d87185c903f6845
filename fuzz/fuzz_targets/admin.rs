//! The admin API's inputs: the JSON bodies of resolve, approve, reject and rebind, and the
//! query strings of `GET /ops` and `GET /events`: any bytes are parsed or refused with a
//! message, never a panic.
#![no_main]

use http::HeaderName;
use idemproxy::admin::{Resolution, parse_approve, parse_rebind, parse_reject, parse_resolution};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let redact = [HeaderName::from_static("x-secret")];
    if let Ok(Resolution::Succeeded { response, .. }) = parse_resolution(bytes, &redact, 1 << 16) {
        assert!(response.body.len() <= 1 << 16);
        assert!(!response.headers.contains_key("x-secret"));
        assert!(!response.headers.contains_key(http::header::CONTENT_LENGTH));
    }
    let _ = parse_approve(bytes);
    let _ = parse_reject(bytes);
    let _ = parse_rebind(bytes);
    if let Ok(query) = std::str::from_utf8(bytes) {
        let _ = idemproxy::admin::parse_list_query(Some(query));
        let _ = idemproxy::admin::parse_filter(Some(query));
    }
});
