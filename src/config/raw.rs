//! The raw layer of the configuration: what the TOML files say, before anything means anything.
//!
//! This module owns the serde structs (every key optional, unknown keys rejected), the turning
//! of TOML and serde errors into a line, a key and a fix, and the scalar parsers for sizes and
//! durations. It never applies a default and never checks one value against another: that is
//! the validation layer's job in `config`.

use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use toml::Value;

/// `proxy.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProxy {
    pub listen: Option<String>,
    pub admin_listen: Option<String>,
    pub ledger: Option<String>,
    pub policies: Option<String>,
    pub limits: Option<RawLimits>,
    pub retention: Option<RawRetention>,
    pub notify: Option<RawNotify>,
    pub replicas: Option<RawReplicas>,
    pub intercept: Option<RawIntercept>,
}

/// `[intercept]`: HTTPS interception for clients that use `HTTPS_PROXY`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIntercept {
    pub ca_cert: Option<String>,
    pub ca_key: Option<String>,
    pub tunnel: Option<Vec<String>>,
}

/// `[replicas]`: only meaningful with a PostgreSQL ledger.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReplicas {
    pub lease: Option<Value>,
}

/// `[limits]`: sizes and durations stay `Value`s so their errors can name the key and the fix.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    pub max_request_body: Option<Value>,
    pub max_stored_response: Option<Value>,
    pub in_flight_wait: Option<Value>,
    pub shutdown_grace: Option<Value>,
    pub header_timeout: Option<Value>,
    pub body_timeout: Option<Value>,
    pub max_connections: Option<Value>,
    pub max_buffered: Option<Value>,
}

/// `[retention]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetention {
    pub completed: Option<Value>,
    pub tombstones: Option<Value>,
}

/// `[notify]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNotify {
    pub webhook: Option<String>,
    pub secret_env: Option<String>,
    pub queue: Option<Value>,
    pub summary: Option<Value>,
}

/// One policy file: `[provider]` and its `[[route]]`s.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
    pub provider: Option<RawProvider>,
    #[serde(default)]
    pub route: Vec<RawRoute>,
}

/// `[provider]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvider {
    pub name: Option<String>,
    pub upstream: Option<String>,
    pub mount: Option<String>,
    pub dedupe: Option<String>,
    pub key_header: Option<String>,
    pub key_json_field: Option<String>,
    pub key_format: Option<String>,
    /// An integer; a `Value` so a wrong type names the key and the fix.
    pub key_length: Option<Value>,
    pub key_retention: Option<Value>,
    pub timeout: Option<Value>,
    pub ca_file: Option<String>,
    pub connect_to: Option<String>,
    pub request_id_header: Option<String>,
    pub control_headers: Option<Vec<String>>,
    pub redact_headers: Option<Vec<String>>,
    pub settle_headers: Option<std::collections::BTreeMap<String, String>>,
    pub unmatched: Option<String>,
    pub path_case: Option<String>,
    /// Only `"http"`, the default, is built.
    pub protocol: Option<String>,
    pub principal_headers: Option<Vec<String>>,
    pub outcomes: Option<RawOutcomes>,
    /// An integer; a `Value` so a wrong type names the key and the fix.
    pub pending_status: Option<Value>,
    /// `[[provider.rule]]`.
    pub rule: Option<Vec<RawRule>>,
    /// `[[provider.answer]]`.
    pub answer: Option<Vec<RawAnswer>>,
}

/// One `[[provider.answer]]`: header values and body members stay TOML so their errors can
/// name the key.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAnswer {
    pub problems: Option<Vec<String>>,
    pub headers: Option<toml::Table>,
    pub body: Option<toml::Table>,
    pub content_type: Option<String>,
}

/// One `[[provider.rule]]`: `status` and `equals` stay `Value`s (a code or a class; a string,
/// number or boolean).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    pub status: Option<Value>,
    pub pointer: Option<String>,
    pub equals: Option<Value>,
    pub means: Option<String>,
}

/// `[provider.outcomes]`: entries are integers or class strings, so they stay `Value`s.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOutcomes {
    pub succeeded: Option<Vec<Value>>,
    pub failed: Option<Vec<Value>>,
}

/// One `[[route]]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    pub name: Option<String>,
    #[serde(rename = "match")]
    pub pattern: Option<String>,
    pub effect: Option<String>,
    /// A string or a list of strings.
    pub operation_id: Option<Value>,
    pub on_missing_id: Option<String>,
    pub approval: Option<String>,
    pub fingerprint_ignore: Option<Vec<String>>,
    pub fingerprint_headers: Option<Vec<String>>,
    pub approval_show: Option<Vec<String>>,
    pub operator_show: Option<Vec<String>>,
    pub reconcile: Option<RawReconcile>,
}

/// `[route.reconcile]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReconcile {
    /// A template or a list of templates.
    pub lookup: Option<Value>,
    pub found: Option<String>,
    pub not_found_final_after: Option<Value>,
}

/// A TOML or schema error located in its file: the key (with its line) and the message.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TomlError {
    pub key: String,
    pub message: String,
}

/// Parses TOML text into a raw struct. Syntax errors are told apart from schema errors (unknown
/// key, wrong type) because their fixes differ.
pub(super) fn parse_toml<T: DeserializeOwned>(text: &str) -> Result<T, TomlError> {
    if let Err(e) = text.parse::<toml::Table>() {
        return Err(TomlError {
            key: locate(text, e.span()),
            message: format!(
                "invalid TOML: {} (fix the syntax on this line)",
                e.message()
            ),
        });
    }
    toml::from_str(text).map_err(|e| TomlError {
        key: locate(text, e.span()),
        message: schema_message(e.message()),
    })
}

/// Rewrites serde's "unknown field" message into one that says what to do.
fn schema_message(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_string();
    };
    // rest is "x`, expected one of `a`, `b`": odd pieces after the first are the known keys.
    let mut pieces = rest.split('`');
    let unknown = pieces.next().unwrap_or_default();
    let known: Vec<&str> = pieces.skip(1).step_by(2).collect();
    format!(
        "unknown key \"{unknown}\" (remove it or check its spelling; known keys here: {})",
        known.join(", ")
    )
}

/// Names where a span points: `section.key (line N)` when the line is `key = ...`.
fn locate(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    let Some(span) = span else {
        return String::new();
    };
    let start = span.start.min(text.len());
    let line_index = text.as_bytes()[..start]
        .iter()
        .filter(|b| **b == b'\n')
        .count();
    let lines: Vec<&str> = text.lines().collect();
    let line = lines.get(line_index).map_or("", |l| l.trim());
    let section = lines
        .get(..line_index)
        .unwrap_or_default()
        .iter()
        .rev()
        .find_map(|l| table_name(l.trim()));
    let key = line
        .split_once('=')
        .map(|(k, _)| k.trim())
        .filter(|k| is_plain_key(k));
    let at = format!("line {}", line_index + 1);
    match (section, key) {
        (Some(section), Some(key)) => format!("{section}.{key} ({at})"),
        (None, Some(key)) => format!("{key} ({at})"),
        (Some(section), None) => format!("[{section}] ({at})"),
        (None, None) => at,
    }
}

/// `[a.b]` and `[[a]]` -> `a.b`, `a`.
fn table_name(line: &str) -> Option<&str> {
    let inner = line.strip_prefix('[')?;
    let inner = inner.strip_prefix('[').unwrap_or(inner);
    let end = inner.find(']')?;
    Some(inner[..end].trim())
}

fn is_plain_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '"' | ' '))
}

/// The fix appended to every size error.
const SIZE_FIX: &str = "write sizes as a whole number of bytes or a string like \"512 KiB\", \
                        \"1 MiB\", \"2 GiB\"; units: B, KiB, MiB, GiB";

/// Parses a size string: a whole number followed by `B`, `KiB`, `MiB` or `GiB` (space optional).
///
/// Only binary units exist, so `"1 MB"` is an error rather than a guess at 10^6 or 2^20. The
/// error is a message for a person, with the fix.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(digits_end);
    let unit = unit.trim_start();
    let multiplier: u64 = match unit {
        "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "" => return Err(format!("size \"{s}\" has no unit ({SIZE_FIX})")),
        other => {
            return Err(format!(
                "unknown size unit \"{other}\" in \"{s}\" ({SIZE_FIX})"
            ));
        }
    };
    let number: u64 = number
        .parse()
        .map_err(|_| format!("invalid size \"{s}\" ({SIZE_FIX})"))?;
    number
        .checked_mul(multiplier)
        .ok_or_else(|| format!("size \"{s}\" is too large ({SIZE_FIX})"))
}

/// The fix appended to every duration error.
pub(super) const DURATION_FIX: &str =
    "write durations like \"250ms\", \"30s\", \"5m\", \"24h\", \"30d\"";

/// The longest duration accepted: later code adds durations to timestamps, which must not overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Parses a duration string such as `"1ms"`, `"250ms"`, `"30s"`, `"5m"`, `"24h"`, `"30d"` (also
/// `"1h 30m"`; `m` is minutes). At most 100 years. The error is a message for a person, with the fix.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("invalid duration \"{s}\": {e} ({DURATION_FIX})"))?;
    if d > MAX_DURATION {
        return Err(format!(
            "duration \"{s}\" is longer than 100 years ({DURATION_FIX})"
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_binary_units() {
        assert_eq!(parse_size("0 B"), Ok(0));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("1 KiB"), Ok(1024));
        assert_eq!(parse_size("1 MiB"), Ok(1 << 20));
        assert_eq!(parse_size(" 8MiB "), Ok(8 << 20));
        assert_eq!(parse_size("2 GiB"), Ok(2 << 30));
    }

    #[test]
    fn sizes_reject_other_units_and_shapes() {
        for bad in [
            "1 MB", "1 kb", "1.5 MiB", "MiB", "", "-1 B", "1024", "1 MiB x",
        ] {
            let err = parse_size(bad).expect_err(bad);
            assert!(err.contains("KiB, MiB, GiB"), "{bad}: {err}");
        }
        assert!(
            parse_size("99999999999999 GiB")
                .unwrap_err()
                .contains("too large")
        );
    }

    #[test]
    fn durations_in_the_spec_forms() {
        assert_eq!(parse_duration("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn durations_reject_junk_with_a_fix() {
        for bad in ["30", "", "thirty seconds", "30x", "-5s", "200y"] {
            let err = parse_duration(bad).expect_err(bad);
            assert!(err.contains("write durations like"), "{bad}: {err}");
        }
    }

    #[test]
    fn unknown_keys_are_named_with_their_line_and_the_known_ones() {
        let err = parse_toml::<RawProxy>("listen = \"x\"\n[limits]\nmax_body = 1\n").unwrap_err();
        assert_eq!(err.key, "limits.max_body (line 3)");
        assert!(
            err.message.contains("unknown key \"max_body\""),
            "{}",
            err.message
        );
        assert!(
            err.message
                .contains("max_request_body, max_stored_response")
        );
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let err = parse_toml::<RawProxy>("listen = \"127.0.0.1:1\"\nledger = \n").unwrap_err();
        assert!(err.key.contains("line 2"), "{err:?}");
        assert!(err.message.starts_with("invalid TOML"), "{err:?}");
    }

    #[test]
    fn type_errors_name_the_key() {
        let err = parse_toml::<RawProxy>("listen = 8080\n").unwrap_err();
        assert_eq!(err.key, "listen (line 1)");
        assert!(err.message.contains("expected a string"), "{}", err.message);
    }
}
