//! The path normaliser and the route matcher: any path normalizes to a rooted form that is
//! its own normal form, `ambiguity`, `loose_reading` and `below` never panic, and a path a
//! route matches is spelled back from its captures as the same path.
//!
//! Input: the raw path, NUL, a `match` pattern as policies write it (`/v1/refunds/{id}`,
//! `{rest*}` last), NUL, the upstream's base path, NUL, the method.
#![no_main]

use http::Method;
use idemproxy::path;
use idemproxy::policy::{Matcher, Segment};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut pieces = data.splitn(4, |&b| b == 0).map(String::from_utf8_lossy);
    let raw = pieces.next().unwrap_or_default();
    let pattern = pieces.next().unwrap_or_default();
    let base = pieces.next().unwrap_or_default();
    let method_name = pieces.next().unwrap_or(std::borrow::Cow::Borrowed("POST"));
    let _ = path::ambiguity(&raw);
    let normal = path::normalize(&raw);
    assert!(normal.starts_with('/'), "{normal:?}");
    assert_eq!(
        path::normalize(&normal),
        normal,
        "normalize is not idempotent"
    );
    if let Some(loose) = path::loose_reading(&normal) {
        assert!(loose.starts_with('/'));
    }
    let Some(relative) = path::below(&normal, &base) else {
        return;
    };
    assert!(relative.starts_with('/'));
    let Ok(method) = Method::from_bytes(method_name.as_bytes()) else {
        return;
    };
    let parts: Vec<&str> = pattern.split('/').filter(|s| !s.is_empty()).collect();
    let count = parts.len();
    let segments = (parts.into_iter().enumerate())
        .map(
            |(i, part)| match part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                Some(name) if name.ends_with('*') && i + 1 == count => {
                    Segment::Rest(name.trim_end_matches('*').to_string())
                }
                Some(name) => Segment::Capture(name.to_string()),
                None => Segment::Literal(part.to_string()),
            },
        )
        .collect();
    let matcher = Matcher {
        method: method.clone(),
        segments,
    };
    if let Some(captures) = matcher.matches(&method, relative) {
        assert_eq!(
            matcher.spell(&captures),
            relative,
            "spelled back differently"
        );
        assert!(matcher.matches_ignoring_case(&method, relative).is_some());
    }
    let _ = matcher.matches_ignoring_case(&method, relative);
    let _ = matcher.same_requests(&matcher, true);
    let _ = matcher.covers(&matcher, false);
});
