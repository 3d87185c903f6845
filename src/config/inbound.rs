//! The inbound keys of `[limits]`: how long a client may take to send its request head and a
//! guarded body, how many agent connections are served at once, and how many request-body
//! bytes all guarded requests together may hold buffered.
//!
//! Their defaults never bother a client that sends at a normal pace. This module validates
//! the values only; the server and the guard enforce them.

use std::time::Duration;

use super::raw::RawLimits;
use super::values::size;
use super::{MIN_WAIT, Scope};

/// The inbound part of `[limits]` of proxy.toml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inbound {
    /// From accepting a connection (or finishing a request on it) to a complete request head;
    /// a connection that sends nothing is closed after it.
    pub header_timeout: Duration,
    /// From a guarded request's head to the last byte of its body; over it, 408.
    pub body_timeout: Duration,
    /// Agent connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Body bytes all guarded requests together may hold buffered; over it, 503.
    pub max_buffered: u64,
}

/// `max_buffered` unless set: this much, or `max_request_body` when that is larger.
const DEFAULT_BUFFERED: u64 = 256 << 20;
/// The most `max_connections` may say (far beyond any file-descriptor limit).
const MAX_CONNECTIONS: i64 = 1 << 20;

impl Inbound {
    /// The defaults for a given `max_request_body`.
    pub fn defaults(max_request_body: u64) -> Inbound {
        Inbound {
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            max_connections: 1024,
            max_buffered: DEFAULT_BUFFERED.max(max_request_body),
        }
    }
}

impl Default for Inbound {
    fn default() -> Self {
        Inbound::defaults(super::Limits::default().max_request_body)
    }
}

/// Validates the inbound keys; `body` is the validated `max_request_body`, if it was valid.
pub(super) fn check(s: &mut Scope, raw: &RawLimits, body: Option<u64>) -> Option<Inbound> {
    let d = Inbound::defaults(body.unwrap_or_default());
    let header = s.duration(
        "header_timeout",
        raw.header_timeout.as_ref(),
        d.header_timeout,
        MIN_WAIT,
    );
    let body_timeout = s.duration(
        "body_timeout",
        raw.body_timeout.as_ref(),
        d.body_timeout,
        MIN_WAIT,
    );
    let connections = s.check("max_connections", connections(raw, d.max_connections));
    let buffered = size(raw.max_buffered.as_ref(), d.max_buffered).and_then(|b| match body {
        Some(body) if b < body => Err(format!(
            "{b} bytes is less than max_request_body ({body}), so a guarded body of the \
             allowed size could never be buffered (raise max_buffered or lower max_request_body)"
        )),
        _ => Ok(b),
    });
    let buffered = s.check("max_buffered", buffered);
    Some(Inbound {
        header_timeout: header?,
        body_timeout: body_timeout?,
        max_connections: connections?,
        max_buffered: buffered?,
    })
}

fn connections(raw: &RawLimits, default: usize) -> Result<usize, String> {
    match &raw.max_connections {
        None => Ok(default),
        Some(toml::Value::Integer(n)) if (1..=MAX_CONNECTIONS).contains(n) => {
            Ok(usize::try_from(*n).unwrap_or(default))
        }
        Some(other) => Err(format!(
            "{other} is not a connection count (write a whole number from 1 to {MAX_CONNECTIONS}, e.g. 1024)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigError;

    fn checked(text: &str, body: Option<u64>) -> Result<Inbound, Vec<ConfigError>> {
        let raw: RawLimits = toml::from_str(text).expect("raw limits");
        let mut errors = Vec::new();
        let path = std::path::Path::new("proxy.toml");
        let inbound = check(
            &mut Scope::new(path, &mut errors).nested("limits."),
            &raw,
            body,
        );
        match inbound {
            Some(inbound) if errors.is_empty() => Ok(inbound),
            _ => Err(errors),
        }
    }

    fn error(text: &str, body: Option<u64>) -> String {
        let errors = checked(text, body).expect_err("an error");
        assert_eq!(errors.len(), 1, "{errors:?}");
        errors[0].to_string()
    }

    #[test]
    fn defaults_follow_max_request_body() {
        assert_eq!(checked("", Some(1 << 20)), Ok(Inbound::default()));
        let big = checked("", Some(1 << 30)).expect("defaults");
        assert_eq!(big.max_buffered, 1 << 30);
        assert_eq!(big.max_connections, 1024);
    }

    #[test]
    fn values_are_taken_and_checked() {
        let text = "header_timeout = \"2s\"\nbody_timeout = \"3s\"\nmax_connections = 2\nmax_buffered = \"64 KiB\"";
        let inbound = checked(text, Some(1024)).expect("valid");
        assert_eq!(inbound.header_timeout, Duration::from_secs(2));
        assert_eq!(inbound.body_timeout, Duration::from_secs(3));
        assert_eq!((inbound.max_connections, inbound.max_buffered), (2, 65536));
        let zero = error("max_connections = 0", Some(1024));
        assert!(zero.contains("limits.max_connections") && zero.contains("whole number"));
        let text = error("max_connections = \"many\"", Some(1024));
        assert!(text.contains("e.g. 1024"), "{text}");
        let timeout = error("body_timeout = \"0s\"", Some(1024));
        assert!(timeout.contains("limits.body_timeout") && timeout.contains("at least 1ms"));
    }

    #[test]
    fn max_buffered_below_max_request_body_is_an_error() {
        let msg = error("max_buffered = 1000", Some(2048));
        assert!(
            msg.starts_with("proxy.toml: limits.max_buffered: 1000 bytes"),
            "{msg}"
        );
        assert!(
            msg.contains("raise max_buffered or lower max_request_body"),
            "{msg}"
        );
        // An invalid max_request_body is reported once, by its own key.
        assert!(checked("max_buffered = 1000", None).is_ok());
    }
}
