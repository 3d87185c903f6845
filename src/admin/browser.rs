//! Why a web page cannot drive the admin API (docs/reference.md section 7), even on loopback without a
//! token: a request with a foreign `Origin` is refused (403), a `Host` other than an IP
//! literal or `localhost` is refused unless a token is set (421: DNS rebinding names the
//! attacker's host), and a POST must say `Content-Type: application/json`, which a page can
//! only send cross-origin after a CORS preflight this API never grants.
//!
//! Pure checks over request headers; it never reads a body, the ledger or the token itself.

use std::net::IpAddr;

use http::uri::Authority;
use http::{HeaderMap, Uri, header};

use super::error::AdminError;

/// The checks every admin call but `/healthz` passes before the token is even looked at.
/// `tokened`: a token is set, so the caller proves itself and any `Host` may be used.
pub fn check(headers: &HeaderMap, uri: &Uri, tokened: bool) -> Result<(), AdminError> {
    let host = request_host(headers, uri);
    let local_host = match &host {
        Ok(Some(host)) => local(host),
        Ok(None) => true,
        Err(()) => false,
    };
    if !tokened && !local_host {
        return Err(AdminError::ForeignHost);
    }
    let mut origins = headers.get_all(header::ORIGIN).iter();
    let Some(origin) = origins.next() else {
        return Ok(());
    };
    // Two: one reader would take the first, another the last.
    let single = origins.next().is_none();
    let own = single
        && origin
            .to_str()
            .ok()
            .and_then(origin_authority)
            .zip(host.ok().flatten())
            .is_some_and(|(origin, host)| same(&origin, &host));
    if own {
        Ok(())
    } else {
        Err(AdminError::ForeignOrigin)
    }
}

/// A POST's body must be declared `application/json` (parameters such as `charset` allowed).
pub fn json_body(headers: &HeaderMap) -> Result<(), AdminError> {
    let declared = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::trim);
    match declared {
        Some(media) if media.eq_ignore_ascii_case("application/json") => Ok(()),
        _ => Err(AdminError::NotJson),
    }
}

/// Where the request says it is going: its `Host`, else the URI's authority (h2); `Ok(None)`
/// when it names no host (no browser sends that), `Err` when its `Host` is unreadable: not an
/// authority, or with a port that is not a number up to 65535 (`localhost:abc` would
/// otherwise be taken for port 80).
fn request_host(headers: &HeaderMap, uri: &Uri) -> Result<Option<Authority>, ()> {
    match headers.get(header::HOST) {
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.parse::<Authority>().ok())
            .filter(readable_port)
            .map(Some)
            .ok_or(()),
        None => Ok(uri.authority().cloned()),
    }
}

/// Whether what follows the host is nothing, or `:` and a port `u16` reads (or no digit at
/// all, which RFC 3986 allows and means the default port).
fn readable_port(authority: &Authority) -> bool {
    let after_user = authority.as_str().rsplit('@').next().unwrap_or_default();
    match after_user.strip_prefix(authority.host()) {
        Some("") => true,
        Some(rest) => rest
            .strip_prefix(':')
            .is_some_and(|port| port.is_empty() || port.parse::<u16>().is_ok()),
        None => false,
    }
}

/// An IP literal or `localhost`, with no user info: no DNS name can rebind to it.
fn local(host: &Authority) -> bool {
    if host.as_str().contains('@') {
        return false;
    }
    let name = host.host().trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok()
}

/// The authority of an `http://host[:port]` origin (the scheme in any case, as the host);
/// `None` for `null`, another scheme, or anything with a path, query or user info.
fn origin_authority(origin: &str) -> Option<Authority> {
    const SCHEME: &str = "http://";
    let scheme = origin.get(..SCHEME.len())?;
    if !scheme.eq_ignore_ascii_case(SCHEME) {
        return None;
    }
    let rest = &origin[SCHEME.len()..];
    if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
        return None;
    }
    rest.parse().ok().filter(readable_port)
}

/// Whether two authorities name the same host and port (80 when absent), ignoring case.
fn same(a: &Authority, b: &Authority) -> bool {
    a.host().eq_ignore_ascii_case(b.host())
        && a.port_u16().unwrap_or(80) == b.port_u16().unwrap_or(80)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    fn status(pairs: &[(&'static str, &'static str)], tokened: bool) -> Option<u16> {
        let uri = Uri::from_static("/ops");
        check(&headers(pairs), &uri, tokened)
            .err()
            .map(|e| e.status().as_u16())
    }

    #[test]
    fn hosts_must_be_ip_literals_or_localhost_without_a_token() {
        for ok in [
            "127.0.0.1:9901",
            "[::1]:9901",
            "localhost",
            "LocalHost:1",
            "10.0.0.5",
            "localhost:",
            "[::1]:65535",
        ] {
            assert_eq!(status(&[("host", ok)], false), None, "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:9901",
            "127.0.0.1.nip.io",
            "u@127.0.0.1",
            "a b",
            "localhost:abc",
            "127.0.0.1:65536",
            "[::1]:1x",
        ] {
            assert_eq!(status(&[("host", bad)], false), Some(421), "{bad}");
            assert_eq!(status(&[("host", bad)], true), None, "{bad} with a token");
        }
        assert_eq!(status(&[], false), None, "no host at all is no browser");
    }

    #[test]
    fn only_the_listeners_own_origin_is_welcome() {
        let host = ("host", "127.0.0.1:9901");
        assert_eq!(
            status(&[host, ("origin", "http://127.0.0.1:9901")], false),
            None
        );
        let local = [
            ("host", "localhost:9901"),
            ("origin", "http://LOCALHOST:9901"),
        ];
        assert_eq!(status(&local, false), None);
        let upper = [host, ("origin", "HTTP://127.0.0.1:9901")];
        assert_eq!(status(&upper, false), None);
        assert_eq!(
            status(
                &[("host", "127.0.0.1"), ("origin", "http://127.0.0.1:80")],
                false
            ),
            None
        );
        for bad in [
            "null",
            "http://evil.example",
            "http://127.0.0.1:8080",
            "https://127.0.0.1:9901",
            "http://127.0.0.1:9901/",
            "http://localhost:9901",
            "http://127.0.0.1:9901x",
            "",
        ] {
            assert_eq!(status(&[host, ("origin", bad)], false), Some(403), "{bad}");
            assert_eq!(status(&[host, ("origin", bad)], true), Some(403), "{bad}");
        }
        assert_eq!(
            status(&[("origin", "http://127.0.0.1:9901")], false),
            Some(403)
        );
        let own = ("origin", "http://127.0.0.1:9901");
        assert_eq!(status(&[host, own, own], false), Some(403), "two origins");
        let unreadable = [("host", "127.0.0.1"), ("origin", "http://127.0.0.1:x")];
        assert_eq!(status(&unreadable, true), Some(403));
    }

    #[test]
    fn posts_must_declare_json() {
        for ok in ["application/json", "Application/JSON; charset=utf-8"] {
            assert!(json_body(&headers(&[("content-type", ok)])).is_ok(), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "application/jsonx",
            "",
        ] {
            assert!(
                json_body(&headers(&[("content-type", bad)])).is_err(),
                "{bad}"
            );
        }
        assert!(json_body(&HeaderMap::new()).is_err());
    }
}
