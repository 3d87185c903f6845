//! Checks of single values: names, upstream URLs, mounts, JSON pointers, header names, CA
//! files, addresses, sizes and durations. Each returns the domain value or a message for a
//! person that ends with the fix; none of them knows which file or key it is checking.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::HeaderName;
use toml::Value;

use super::raw::{self, parse_duration, parse_size};
use crate::policy::{ApprovalMode, BaseUrl, Effect, OnMissingId, Scheme, StatusRule};

/// Provider names `[a-z0-9_-]+`; route and capture names `[a-z0-9_]+`.
pub(super) fn name(text: String, what: &str, dash: bool) -> Result<String, String> {
    let ok = !text.is_empty()
        && text.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || (dash && b == b'-')
        });
    if ok {
        Ok(text)
    } else {
        let chars = if dash {
            "a-z, 0-9, _ and -"
        } else {
            "a-z, 0-9 and _"
        };
        Err(format!("invalid {what} name \"{text}\" (use only {chars})"))
    }
}

pub(super) fn upstream(text: &str) -> Result<BaseUrl, String> {
    let fix = "write scheme://host[:port][/base-path], e.g. \"https://api.stripe.com\"";
    let url = url::Url::parse(text).map_err(|e| format!("invalid URL \"{text}\": {e} ({fix})"))?;
    let scheme = match url.scheme() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => {
            return Err(format!(
                "scheme \"{other}\" is not supported (use http or https)"
            ));
        }
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "user info is not allowed in the upstream (send credentials as request headers)".into(),
        );
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "a query or fragment is not allowed in the upstream ({fix})"
        ));
    }
    let host = match url.host() {
        Some(url::Host::Domain(d)) if !d.is_empty() => d.to_string(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        _ => return Err(format!("\"{text}\" has no host ({fix})")),
    };
    Ok(BaseUrl {
        scheme,
        host,
        port: url
            .port_or_known_default()
            .unwrap_or(if scheme == Scheme::Https { 443 } else { 80 }),
        explicit_port: url.port().is_some(),
        base_path: url.path().trim_end_matches('/').to_string(),
    })
}

pub(super) fn mount(text: &str) -> Result<String, String> {
    let fix = "write a path like \"/stripe\": a leading \"/\", no trailing \"/\"";
    if text == "/" {
        return Err(format!(
            "the root cannot be a mount: it would swallow every path, including unknown ones that must answer 404 ({fix})"
        ));
    }
    let bad_char = text.contains(['?', '#', '{', '}']) || text.chars().any(char::is_whitespace);
    let bad_segment = |seg: &str| seg.is_empty() || seg == "." || seg == "..";
    match text.strip_prefix('/') {
        Some(rest) if !bad_char && !rest.split('/').any(bad_segment) => Ok(text.to_string()),
        _ => Err(format!(
            "invalid mount \"{text}\" (no ?, #, braces, spaces, empty or dot segments; {fix})"
        )),
    }
}

/// A JSON pointer (RFC 6901): `""` (the whole document, only where `root` is allowed) or `/...`,
/// checked as templates check `{json:...}`.
pub(super) fn json_pointer(text: &str, root: bool) -> Result<String, String> {
    if root && text.is_empty() {
        return Ok(String::new());
    }
    crate::template::check_pointer(text)
        .map(|()| text.to_string())
        .map_err(|why| format!("\"{text}\" is not a JSON pointer: {why}"))
}

pub(super) fn ca_file(text: &str, folder: &Path) -> Result<Option<PathBuf>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    let path = folder.join(text);
    let shown = path.display();
    let bytes = fs::read(&path).map_err(|e| {
        format!("cannot read {shown}: {e} (the path is relative to the policy file's folder; \"\" means none)")
    })?;
    let certs: Result<Vec<_>, _> = rustls_pemfile::certs(&mut &bytes[..]).collect();
    match certs {
        Err(e) => Err(format!("{shown} is not valid PEM: {e}")),
        Ok(certs) if certs.is_empty() => Err(format!(
            "{shown} holds no certificate (expected PEM blocks \"-----BEGIN CERTIFICATE-----\")"
        )),
        Ok(_) => Ok(Some(path)),
    }
}

pub(super) fn socket(raw: Option<&str>, default: &str) -> Result<SocketAddr, String> {
    let text = raw.unwrap_or(default);
    text.parse().map_err(|_| {
        format!("invalid address \"{text}\" (write an IP address and a port, e.g. \"{default}\"; host names are not resolved)")
    })
}

pub(super) fn header(text: &str) -> Result<HeaderName, String> {
    HeaderName::from_bytes(text.as_bytes())
        .map_err(|_| format!("\"{text}\" is not a valid header name (letters, digits and -, e.g. \"Idempotency-Key\")"))
}

pub(super) fn size(raw: Option<&Value>, default: u64) -> Result<u64, String> {
    let bytes = match raw {
        None => return Ok(default),
        Some(Value::Integer(n)) => u64::try_from(*n)
            .map_err(|_| format!("{n} is negative (a size is a number of bytes)"))?,
        Some(Value::String(s)) => parse_size(s)?,
        Some(other) => {
            return Err(format!(
                "{other} is not a size (write a number of bytes or a string like \"1 MiB\")"
            ));
        }
    };
    if bytes == 0 {
        return Err("a size of zero leaves no room (give at least 1 byte)".into());
    }
    Ok(bytes)
}

pub(super) fn duration(
    raw: Option<&Value>,
    default: Duration,
    min: Duration,
) -> Result<Duration, String> {
    let d = match raw {
        None => default,
        Some(Value::String(s)) => parse_duration(s)?,
        Some(other) => return Err(format!("{other} is not a duration ({})", raw::DURATION_FIX)),
    };
    if d < min {
        return Err(format!(
            "must be at least {} here ({})",
            humantime::format_duration(min),
            raw::DURATION_FIX
        ));
    }
    Ok(d)
}

/// One of a fixed set of strings.
pub(super) fn choice<T: Copy>(
    raw: Option<String>,
    default: T,
    options: &[(&str, T)],
) -> Result<T, String> {
    let Some(raw) = raw else {
        return Ok(default);
    };
    match options.iter().find(|(name, _)| *name == raw) {
        Some((_, value)) => Ok(*value),
        None => {
            let names: Vec<String> = options.iter().map(|(n, _)| format!("\"{n}\"")).collect();
            Err(format!(
                "unknown value \"{raw}\" (expected one of {})",
                names.join(", ")
            ))
        }
    }
}

pub(super) const EFFECTS: &[(&str, Effect)] = &[
    ("read_only", Effect::ReadOnly),
    ("idempotent", Effect::Idempotent),
    ("compensable", Effect::Compensable),
    ("irreversible", Effect::Irreversible),
];

pub(super) const ON_MISSING_ID: &[(&str, OnMissingId)] =
    &[("reject", OnMissingId::Reject), ("pass", OnMissingId::Pass)];

pub(super) const APPROVALS: &[(&str, ApprovalMode)] = &[
    ("none", ApprovalMode::None),
    ("required", ApprovalMode::Required),
];

pub(super) fn status_rule(v: &Value) -> Result<StatusRule, String> {
    let fix = "expected a status code from 100 to 599 or a class \"1xx\" to \"5xx\"";
    match v {
        Value::Integer(n) if (100..=599).contains(n) => u16::try_from(*n)
            .map(StatusRule::Exact)
            .map_err(|_| fix.to_string()),
        Value::String(s) => match s.to_ascii_lowercase().as_bytes() {
            [c @ b'1'..=b'5', b'x', b'x'] => Ok(StatusRule::Class(c - b'0')),
            _ => Err(format!("\"{s}\" is not a status class ({fix})")),
        },
        other => Err(format!("{other} is not a status rule ({fix})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_parts() {
        let u = upstream("https://api.example.com:8443/base/").unwrap();
        assert_eq!(
            (u.scheme, u.host.as_str()),
            (Scheme::Https, "api.example.com")
        );
        assert_eq!((u.port, u.explicit_port), (8443, true));
        assert_eq!(u.base_path, "/base");
        let u = upstream("http://[::1]").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.explicit_port),
            ("::1", 80, false)
        );
        assert_eq!(u.base_path, "");
    }

    #[test]
    fn upstream_rejects_what_a_proxy_cannot_use() {
        let cases = [
            ("ftp://x", "use http or https"),
            ("https://u:p@x", "user info"),
            ("https://x/?a=1", "query or fragment"),
            ("https://x/#f", "query or fragment"),
            ("api.stripe.com", "invalid URL"),
        ];
        for (text, why) in cases {
            let err = upstream(text).expect_err(text);
            assert!(err.contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn mounts() {
        assert_eq!(mount("/stripe").as_deref(), Ok("/stripe"));
        assert_eq!(mount("/a/b-c").as_deref(), Ok("/a/b-c"));
        for bad in [
            "/", "stripe", "/stripe/", "/a//b", "/a?b", "/{x}", "/a/../b", "/a b", "",
        ] {
            assert!(mount(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn json_pointers() {
        assert!(json_pointer("/data/0", false).is_ok());
        assert!(json_pointer("/a~0b~1c", false).is_ok());
        assert!(json_pointer("", true).is_ok());
        assert!(
            json_pointer("", false).is_err(),
            "the key cannot replace the whole body"
        );
        assert!(json_pointer("data", true).is_err());
        assert!(json_pointer("/a~2", true).is_err());
    }

    #[test]
    fn names_and_headers() {
        assert!(name("stripe-eu_2".into(), "provider", true).is_ok());
        assert!(name("stripe-eu".into(), "route", false).is_err());
        assert!(name(String::new(), "route", false).is_err());
        assert_eq!(header("Idempotency-Key").unwrap(), "idempotency-key");
        assert!(header("Idem Key").is_err());
    }

    #[test]
    fn sizes_and_durations_from_toml_values() {
        assert_eq!(size(None, 7), Ok(7));
        assert_eq!(size(Some(&Value::Integer(2048)), 7), Ok(2048));
        assert_eq!(size(Some(&Value::String("2 KiB".into())), 7), Ok(2048));
        assert!(size(Some(&Value::Integer(0)), 7).is_err());
        assert!(size(Some(&Value::Integer(-1)), 7).is_err());
        let ms = Duration::from_millis(1);
        assert_eq!(duration(None, ms, ms), Ok(ms));
        assert!(duration(Some(&Value::String("0s".into())), ms, ms).is_err());
        assert_eq!(
            duration(Some(&Value::String("0s".into())), ms, Duration::ZERO),
            Ok(Duration::ZERO)
        );
        assert!(
            duration(Some(&Value::Integer(30)), ms, ms)
                .unwrap_err()
                .contains("write durations like")
        );
    }
}
