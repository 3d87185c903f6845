//! The request path's one spelling, and the spellings refused where routes are guarded.
//!
//! Servers read a path differently (case-insensitive routers, `;` parameters stripped, `%2F`
//! decoded, `..` resolved), so a guarded route could be reached under a spelling the proxy
//! does not recognise. This module owns two answers to that: `normalize`, the form every
//! request is matched in and sent in (so nothing leaves outside the upstream's base path),
//! `ambiguity`, what makes a path too ambiguous to forward under a provider that guards
//! routes, and `loose_reading`, the path a server that decodes once more or trims whitespace
//! takes it for. It never decides which route matches; `policy` does.

use std::borrow::Cow;

/// The form of a path that route matching sees and the provider receives: `%XX` escapes of
/// unreserved characters decoded (RFC 3986 6.2.2.2), other escapes uppercased, a `%` that
/// begins no escape written `%25`, empty and `.` segments dropped, `..` resolved (never above
/// the root), no trailing slash. It is its own normal form.
pub fn normalize(path: &str) -> Cow<'_, str> {
    if is_normal(path.as_bytes()) {
        return Cow::Borrowed(path);
    }
    let mut segments: Vec<String> = Vec::new();
    for raw in path.split('/') {
        let segment = decode_unreserved(raw);
        match segment.as_str() {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            _ => segments.push(segment),
        }
    }
    Cow::Owned(format!("/{}", segments.join("/")))
}

/// Whether `normalize` would give `path` back as it is: rooted, no escape, no dot, no empty
/// segment, no trailing slash. One pass over the bytes: the common case on every request
/// (a substring search for `//` costs more than the whole pass).
fn is_normal(path: &[u8]) -> bool {
    let [b'/', rest @ ..] = path else {
        return false;
    };
    let mut previous = b'/';
    for &b in rest {
        if matches!(b, b'%' | b'.') || (b == b'/' && previous == b'/') {
            return false;
        }
        previous = b;
    }
    rest.is_empty() || previous != b'/'
}

/// Decodes `%XX` only where XX is an unreserved character; other escapes stay (uppercased).
fn decode_unreserved(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match escaped(bytes, i) {
            Some(c) if c.is_ascii_alphanumeric() || b"-._~".contains(&c) => out.push(c),
            Some(_) => out.extend(bytes[i..i + 3].to_ascii_uppercase()),
            // A `%` that begins no escape is written as one: left bare, it could meet the
            // characters an escape decodes to (`%2%65` -> `%2e`), an escape the agent never
            // wrote, which the provider would decode.
            None if bytes[i] == b'%' => {
                out.extend_from_slice(b"%25");
                i += 1;
                continue;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
                continue;
            }
        }
        i += 3;
    }
    // URIs are ASCII; anything else was already in the input and is kept as is.
    String::from_utf8_lossy(&out).into_owned()
}

/// The byte a `%XX` escape at `i` stands for, if there is one.
fn escaped(bytes: &[u8], i: usize) -> Option<u8> {
    if bytes[i] != b'%' || i + 3 > bytes.len() {
        return None;
    }
    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
    u8::from_str_radix(hex, 16).ok()
}

/// Every byte of a segment with each `%XX` escape decoded.
fn decode_all(segment: &str) -> Vec<u8> {
    decode_bytes(segment.as_bytes())
}

/// `decode_all` over bytes (a segment decoded once already, to decode it again).
fn decode_bytes(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match escaped(bytes, i) {
            Some(c) => {
                out.push(c);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

/// Why a raw path (as the agent sent it, without the query) could mean another path to the
/// provider than to the proxy: an encoded `/` or `\`, a `;` parameter, a control character
/// or a dot segment, once decoded. `None`: its normalized form is the only reading.
pub fn ambiguity(raw: &str) -> Option<&'static str> {
    // Without an escape, a dot, a `;`, a `\` or a control character there is nothing to
    // find: the common case, checked in one pass with no allocation.
    let suspect = |b: u8| matches!(b, b'%' | b'.' | b';' | b'\\' | 0..0x20 | 0x7f);
    if !raw.bytes().any(suspect) {
        return None;
    }
    segment_ambiguity(raw)
}

/// `ambiguity` without its fast path: every segment decoded and looked at.
fn segment_ambiguity(raw: &str) -> Option<&'static str> {
    for segment in raw.split('/') {
        let decoded = decode_all(segment);
        if decoded == b"." || decoded == b".." {
            return Some("has a dot segment (`.` or `..`)");
        }
        for byte in decoded {
            match byte {
                b'/' | b'\\' => return Some("has an encoded `/` or a `\\`"),
                b';' => return Some("has a `;` parameter"),
                0..0x20 | 0x7f => return Some("has a control character"),
                _ => {}
            }
        }
    }
    None
}

/// The path a server that reads paths loosely could take a normalized, route-relative `path`
/// for, where the proxy reads each segment percent-decoded once: decoded once more (`%2520`
/// is a space, `%252F` a `/`, `%3F` a `?`), a `?` or `#` this reveals ending the path, `/`
/// and `\` separating segments, `;` starting a segment's parameters, trailing whitespace
/// (spaces, tabs, line breaks) trimmed from each segment, then empty and `.` segments dropped and `..` resolved.
/// `None` when that reading is the proxy's own. The caller asks whether it meets a guarded
/// route: a path that comes near none is sent as it is.
pub fn loose_reading(path: &str) -> Option<String> {
    // Without an escape, whitespace, a `;` or a `\` both readings are the path itself: the
    // common case, one pass with no allocation.
    if !path
        .bytes()
        .any(|b| matches!(b, b'%' | b' ' | b'\t' | b';' | b'\\'))
    {
        return None;
    }
    let own: Vec<Vec<u8>> = (path.split('/').filter(|s| !s.is_empty()))
        .map(decode_all)
        .collect();
    let again = decode_bytes(&own.join(&b'/'));
    let end = (again.iter())
        .position(|b| matches!(b, b'?' | b'#'))
        .unwrap_or(again.len());
    let mut loose: Vec<&[u8]> = Vec::new();
    for segment in again[..end].split(|b| matches!(b, b'/' | b'\\')) {
        let segment = segment.split(|&b| b == b';').next().unwrap_or_default();
        match segment.trim_ascii_end() {
            b"" | b"." => {}
            b".." => {
                loose.pop();
            }
            segment => loose.push(segment),
        }
    }
    if loose.iter().eq(own.iter()) {
        return None;
    }
    Some(format!("/{}", String::from_utf8_lossy(&loose.join(&b'/'))))
}

/// Whether `path` is `base` or lies below it, segment-wise (`/base` holds `/base/x`, not
/// `/basement`); the rest, relative to `base`, with a leading `/`.
pub fn below<'a>(path: &'a str, base: &str) -> Option<&'a str> {
    match path.strip_prefix(base)? {
        "" => Some("/"),
        rest if rest.starts_with('/') => Some(rest),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn the_fast_path_of_ambiguity_finds_what_the_full_scan_finds(raw in "(/|[a-z]{1,3}|%2[fFeE]|%3[bB]|%5[cC]|%00|\\.|;|\\\\|\\x7f|\\t|%7[eE]){0,12}") {
            proptest::prop_assert_eq!(ambiguity(&raw), segment_ambiguity(&raw));
        }

        #[test]
        fn a_path_left_as_it_is_is_its_own_normal_form(raw in "(/|[a-z]{1,3}|%7[eE]|\\.){0,12}") {
            let plain = is_normal(raw.as_bytes());
            if plain {
                proptest::prop_assert_eq!(&raw, &format!("/{}", segment_normal(&raw).join("/")));
            }
            // What the check was as substring searches.
            let searched = !raw.contains(['%', '.'])
                && !raw.contains("//")
                && (raw == "/" || !raw.ends_with('/'))
                && raw.starts_with('/');
            proptest::prop_assert_eq!(plain, searched);
        }
    }

    proptest::proptest! {
        #[test]
        fn a_normal_form_is_rooted_and_its_own_normal_form(raw in "(/|[a-zA-Z~]{1,3}|[0-9a-f]|%[0-9a-fA-F]{2}|%|\\.|;){0,16}") {
            let once = normalize(&raw);
            proptest::prop_assert!(once.starts_with('/'));
            proptest::prop_assert_eq!(normalize(&once), once.clone());
        }
    }

    /// The segments `normalize` keeps, without its fast path.
    fn segment_normal(path: &str) -> Vec<String> {
        let mut segments: Vec<String> = Vec::new();
        for raw in path.split('/') {
            match decode_unreserved(raw).as_str() {
                "" | "." => {}
                ".." => {
                    segments.pop();
                }
                segment => segments.push(segment.to_string()),
            }
        }
        segments
    }

    #[test]
    fn a_percent_that_begins_no_escape_is_escaped_and_decoding_makes_no_new_escape() {
        assert_eq!(normalize("/v1/a/%2%65"), "/v1/a/%252e");
        assert_eq!(normalize("/v1/%2%65%2%65"), "/v1/%252e%252e");
        assert_eq!(normalize("/v1/100%"), "/v1/100%25");
        assert_eq!(normalize("/v1/%zz%4"), "/v1/%25zz%254");
        for raw in ["/v1/a/%2%65", "/v1/%%34%31", "/v1/%2%2e"] {
            let once = normalize(raw);
            assert_eq!(normalize(&once), once, "{raw}");
        }
    }

    #[test]
    fn normalized_spellings_meet_the_same_route() {
        for raw in [
            "/v1/refunds/",
            "/v1//refunds",
            "/v1/x/../refunds",
            "/v1/%72efunds",
            "/./v1/refunds",
            "/v1/refunds/.",
        ] {
            assert_eq!(normalize(raw), "/v1/refunds", "{raw}");
        }
        assert_eq!(normalize("/v1/refunds"), "/v1/refunds");
        assert!(matches!(normalize("/v1/refunds"), Cow::Borrowed(_)));
        // Reserved escapes stay escaped: %2F is data, not a separator.
        assert_eq!(normalize("/v1/a%2fb"), "/v1/a%2Fb");
        assert_eq!(normalize("/../.."), "/");
        assert_eq!(normalize("/a/%2e%2e/%2E%2E/../b"), "/b");
        assert_eq!(normalize("/"), "/");
        assert_eq!(normalize(""), "/");
        // A `%` that begins no escape is written as one (`%25`).
        assert_eq!(normalize("/v1/%"), "/v1/%25");
        assert_eq!(normalize("/v1/%4"), "/v1/%254");
        assert_eq!(normalize("/v1/%e2%82"), "/v1/%E2%82");
    }

    #[test]
    fn ambiguous_spellings_are_named() {
        for (raw, why) in [
            ("/v1%2Frefunds", "`/`"),
            ("/v1%2frefunds", "`/`"),
            ("/v1/x/..%2Frefunds", "`/`"),
            ("/v1%5Crefunds", "`\\`"),
            ("/v1\\refunds", "`\\`"),
            ("/v1/refunds;jsessionid=1", "`;`"),
            ("/v1/refunds%3B", "`;`"),
            ("/v1/x/../refunds", "dot"),
            ("/v1/./refunds", "dot"),
            ("/v1/%2E%2e/refunds", "dot"),
            ("/v1/%2e", "dot"),
            ("/v1/refunds%00", "control"),
            ("/v1/refunds%7F", "control"),
            ("/v1/ref\tunds", "control"),
        ] {
            let got = ambiguity(raw).unwrap_or_else(|| panic!("{raw} passed"));
            assert!(got.contains(why), "{raw}: {got}");
        }
        for raw in [
            "/v1/refunds",
            "/v1//refunds/",
            "/v1/%72efunds",
            "/v1/a..b",
            "/%",
        ] {
            assert_eq!(ambiguity(raw), None, "{raw}");
        }
    }

    #[test]
    fn a_loose_reading_decodes_once_more_and_trims_trailing_whitespace() {
        for (path, reading) in [
            ("/v1/refunds%20", "/v1/refunds"),
            ("/v1/refunds%20%09%20", "/v1/refunds"),
            ("/v1/refunds%250A", "/v1/refunds"),
            ("/v1/refunds%2520", "/v1/refunds"),
            ("/v1/refunds%3F", "/v1/refunds"),
            ("/v1/refunds%3Fx=1/y", "/v1/refunds"),
            ("/v1/refunds%23top", "/v1/refunds"),
            ("/v1/refunds%252F", "/v1/refunds"),
            ("/v1%252Frefunds", "/v1/refunds"),
            ("/v1%255Crefunds", "/v1/refunds"),
            ("/v1/refunds%253Bx", "/v1/refunds"),
            ("/v1/x/%252E%252E/refunds", "/v1/refunds"),
            ("/v1/refunds/re_1%20", "/v1/refunds/re_1"),
            ("/v1/refunds%20/re_1", "/v1/refunds/re_1"),
            ("/v1/a%2541", "/v1/aA"),
        ] {
            assert_eq!(loose_reading(path).as_deref(), Some(reading), "{path}");
        }
        for path in [
            "/v1/refunds",
            "/v1/refunds%20x",
            "/v1/refunds/re%201",
            "/v1/a%2Cb",
            "/v1/%E2%82%AC",
            "/v1/100%25",
            "/",
        ] {
            assert_eq!(loose_reading(path), None, "{path}");
        }
    }

    #[test]
    fn below_respects_segment_boundaries() {
        assert_eq!(below("/base/v1", "/base"), Some("/v1"));
        assert_eq!(below("/base", "/base"), Some("/"));
        assert_eq!(below("/basement", "/base"), None);
        assert_eq!(below("/v1", ""), Some("/v1"));
        assert_eq!(below("/", ""), Some("/"));
    }
}
