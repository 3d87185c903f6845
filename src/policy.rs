//! Provider policies as the rest of the proxy sees them: validated, compiled, immutable.
//!
//! This module owns the domain types a policy file turns into (`Provider`, `Route`, their
//! enums), route matching and outcome classification. It never reads files or parses TOML;
//! `config` does that and builds these values only after every check has passed.

use std::path::PathBuf;
use std::time::Duration;

use http::{HeaderName, Method};

use crate::template::Template;

/// What a route does in the world; decides whether an unknown outcome may be re-sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// A read: forwarded unguarded.
    ReadOnly,
    /// Safe to repeat: may be re-sent after an unknown outcome whatever `dedupe` says.
    Idempotent,
    /// Can be undone by another call, but is never repeated blindly.
    Compensable,
    /// Cannot be undone: never repeated unless the provider deduplicates or reconciliation proves absence.
    Irreversible,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::ReadOnly => "read_only",
            Effect::Idempotent => "idempotent",
            Effect::Compensable => "compensable",
            Effect::Irreversible => "irreversible",
        }
    }
}

/// Whether the provider deduplicates requests that carry the same idempotency key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dedupe {
    Key,
    None,
}

/// How the idempotency key is derived from the operation ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFormat {
    /// Lowercase hex sha256 of the operation ID.
    Opaque,
    /// The operation ID itself.
    Plain,
}

/// Where the idempotency key is put on the outgoing request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPlacement {
    Header(HeaderName),
    /// A JSON pointer into the request body (e.g. `/idempotency_key`).
    JsonField(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmatched {
    Pass,
    Reject,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMissingId {
    Reject,
    Pass,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approval {
    None,
    Required,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// The provider's origin and base path: `https://api.example.com:8443/base`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub scheme: Scheme,
    /// Host name or IP literal, without brackets.
    pub host: String,
    /// The port, explicit or the scheme's default.
    pub port: u16,
    /// Whether the configured URL named the port (then `Host` names it too).
    pub explicit_port: bool,
    /// Base path without a trailing slash; empty for none.
    pub base_path: String,
}

impl Upstream {
    /// The `Host` header value for requests to this upstream.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.explicit_port {
            format!("{host}:{}", self.port)
        } else {
            host
        }
    }
}

/// One status rule of `[provider.outcomes]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusRule {
    Exact(u16),
    /// `2xx` is `Class(2)`.
    Class(u8),
}

/// How a provider's answer is classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcomes {
    pub succeeded: Vec<StatusRule>,
    pub failed: Vec<StatusRule>,
}

impl Default for Outcomes {
    fn default() -> Self {
        let failed = [400, 401, 402, 403, 404, 405, 413, 415, 422, 429];
        Outcomes {
            succeeded: vec![StatusRule::Class(2)],
            failed: failed.into_iter().map(StatusRule::Exact).collect(),
        }
    }
}

impl Outcomes {
    /// Classifies a status: an exact code in either list beats a class; no rule -> unknown.
    pub fn classify(&self, status: u16) -> Outcome {
        let exact = |rules: &[StatusRule]| rules.contains(&StatusRule::Exact(status));
        let class = |rules: &[StatusRule]| rules.contains(&StatusRule::Class((status / 100) as u8));
        if exact(&self.succeeded) {
            Outcome::Succeeded
        } else if exact(&self.failed) {
            Outcome::Failed
        } else if class(&self.succeeded) {
            Outcome::Succeeded
        } else if class(&self.failed) {
            Outcome::Failed
        } else {
            Outcome::Unknown
        }
    }
}

/// One segment of a compiled `match` path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Literal(String),
    /// `{name}`: exactly one non-empty segment.
    Capture(String),
    /// `{name*}`: the rest of the path (possibly empty); only last.
    Rest(String),
}

/// A compiled route `match`: method and path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    pub method: Method,
    pub segments: Vec<Segment>,
}

/// Captures from a matched path, in pattern order.
pub type Captures = Vec<(String, String)>;

impl Matcher {
    /// Matches a route-relative path (mount stripped, no query) and returns its captures.
    pub fn matches(&self, method: &Method, path: &str) -> Option<Captures> {
        if method != self.method {
            return None;
        }
        let mut rest = path.strip_prefix('/')?;
        let mut captures = Vec::new();
        for (i, segment) in self.segments.iter().enumerate() {
            if let Segment::Rest(name) = segment {
                captures.push((name.clone(), rest.to_string()));
                return Some(captures);
            }
            let (head, tail) = match rest.split_once('/') {
                Some((head, tail)) => (head, Some(tail)),
                None => (rest, None),
            };
            match segment {
                Segment::Literal(lit) if lit == head => {}
                Segment::Capture(name) if !head.is_empty() => {
                    captures.push((name.clone(), head.to_string()))
                }
                _ => return None,
            }
            let last = i + 1 == self.segments.len();
            match tail {
                Some(tail) if !last => rest = tail,
                // A trailing slash beyond the pattern is another resource.
                Some(_) => return None,
                None if last => return Some(captures),
                None => {
                    // Only a trailing `{rest*}` may match nothing.
                    return match &self.segments[i + 1..] {
                        [Segment::Rest(name)] => {
                            captures.push((name.clone(), String::new()));
                            Some(captures)
                        }
                        _ => None,
                    };
                }
            }
        }
        // An empty pattern (`/`) matches only the root.
        (rest.is_empty()).then_some(captures)
    }

    /// The capture names, in order.
    pub fn capture_names(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Capture(n) | Segment::Rest(n) => Some(n.as_str()),
            Segment::Literal(_) => None,
        })
    }
}

/// The form of a path that route matching sees: percent-encoded unreserved characters
/// decoded (RFC 3986 6.2.2.2), empty and `.` segments dropped, `..` resolved, no trailing
/// slash. Two spellings of one resource must meet the same route, or a guarded route could
/// be bypassed by writing its path differently.
pub fn normalize_path(path: &str) -> std::borrow::Cow<'_, str> {
    let plain =
        !path.contains(['%', '.']) && !path.contains("//") && (path == "/" || !path.ends_with('/'));
    if plain {
        return std::borrow::Cow::Borrowed(path);
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
    std::borrow::Cow::Owned(format!("/{}", segments.join("/")))
}

/// Decodes `%XX` only where XX is an unreserved character; other escapes stay (uppercased).
fn decode_unreserved(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%' && i + 2 < bytes.len())
            .then(|| std::str::from_utf8(&bytes[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match escaped {
            Some(c) if c.is_ascii_alphanumeric() || b"-._~".contains(&c) => out.push(c),
            Some(_) => out.extend(bytes[i..i + 3].to_ascii_uppercase()),
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

/// `[route.reconcile]`: how to ask the provider whether an effect happened.
#[derive(Debug, Clone)]
pub struct Reconcile {
    pub method: Method,
    /// Path and query template, relative to the upstream base path.
    pub lookup: Template,
    /// JSON pointer whose presence in a 200 answer proves the effect.
    pub found: String,
    pub not_found_final_after: Duration,
}

/// One `[[route]]` of a provider.
#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    /// The `match` string as written, for tables and logs.
    pub pattern: String,
    pub matcher: Matcher,
    pub effect: Effect,
    pub operation_id: Vec<Template>,
    pub on_missing_id: OnMissingId,
    pub approval: Approval,
    pub fingerprint_ignore: Vec<String>,
    pub fingerprint_headers: Vec<HeaderName>,
    pub reconcile: Option<Reconcile>,
}

impl Route {
    /// Whether requests on this route go through the ledger.
    pub fn is_guarded(&self) -> bool {
        self.effect != Effect::ReadOnly
    }
}

/// One provider policy file, validated.
#[derive(Debug, Clone)]
pub struct Provider {
    pub name: String,
    pub upstream: Upstream,
    /// Mount prefix without a trailing slash, e.g. `/stripe`.
    pub mount: String,
    pub dedupe: Dedupe,
    pub key: KeyPlacement,
    pub key_format: KeyFormat,
    pub key_retention: Duration,
    pub timeout: Duration,
    pub ca_file: Option<PathBuf>,
    pub request_id_header: Option<HeaderName>,
    pub control_headers: Vec<HeaderName>,
    pub redact_headers: Vec<HeaderName>,
    pub unmatched: Unmatched,
    pub outcomes: Outcomes,
    pub routes: Vec<Route>,
    /// The policy file this came from, for messages.
    pub file: PathBuf,
    /// Request headers whose keyed hash binds an operation to its caller; `authorization`
    /// first, always.
    pub principal_headers: Vec<HeaderName>,
}

impl Provider {
    /// A provider with every default, for unit tests of code that takes a `Provider`.
    #[cfg(test)]
    pub(crate) fn example(name: &str, mount: &str, base_path: &str) -> Provider {
        Provider {
            name: name.into(),
            upstream: Upstream {
                scheme: Scheme::Https,
                host: "api.example.com".into(),
                port: 443,
                explicit_port: false,
                base_path: base_path.into(),
            },
            mount: mount.into(),
            dedupe: Dedupe::None,
            key: KeyPlacement::Header(HeaderName::from_static("idempotency-key")),
            key_format: KeyFormat::Opaque,
            key_retention: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            ca_file: None,
            request_id_header: None,
            control_headers: vec![],
            redact_headers: vec![],
            unmatched: Unmatched::Pass,
            outcomes: Outcomes::default(),
            routes: vec![],
            file: PathBuf::new(),
            principal_headers: vec![http::header::AUTHORIZATION],
        }
    }

    /// The first route whose `match` accepts this request, with its captures.
    pub fn route_for(&self, method: &Method, path: &str) -> Option<(&Route, Captures)> {
        self.routes
            .iter()
            .find_map(|r| r.matcher.matches(method, path).map(|c| (r, c)))
    }

    /// The route-relative path of a request path under this mount, if it is under it.
    pub fn strip_mount<'a>(&self, path: &'a str) -> Option<&'a str> {
        let rest = path.strip_prefix(self.mount.as_str())?;
        if rest.is_empty() {
            Some("/")
        } else if rest.starts_with('/') {
            Some(rest)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(method: Method, segs: &[Segment]) -> Matcher {
        Matcher {
            method,
            segments: segs.to_vec(),
        }
    }

    fn lit(s: &str) -> Segment {
        Segment::Literal(s.into())
    }

    #[test]
    fn literal_and_captures() {
        let m = matcher(
            Method::POST,
            &[
                lit("v1"),
                lit("refunds"),
                Segment::Capture("id".into()),
                lit("cancel"),
            ],
        );
        assert_eq!(
            m.matches(&Method::POST, "/v1/refunds/re_1/cancel"),
            Some(vec![("id".into(), "re_1".into())])
        );
        assert_eq!(m.matches(&Method::GET, "/v1/refunds/re_1/cancel"), None);
        assert_eq!(m.matches(&Method::POST, "/v1/refunds//cancel"), None);
        assert_eq!(m.matches(&Method::POST, "/v1/refunds/re_1/cancel/"), None);
        assert_eq!(m.matches(&Method::POST, "/v1/refunds/re_1"), None);
    }

    #[test]
    fn rest_capture_takes_the_tail() {
        let m = matcher(Method::GET, &[lit("files"), Segment::Rest("p".into())]);
        assert_eq!(
            m.matches(&Method::GET, "/files/a/b/c"),
            Some(vec![("p".into(), "a/b/c".into())])
        );
        assert_eq!(
            m.matches(&Method::GET, "/files"),
            Some(vec![("p".into(), "".into())])
        );
        assert_eq!(m.matches(&Method::GET, "/filesx"), None);
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
            assert_eq!(normalize_path(raw), "/v1/refunds", "{raw}");
        }
        assert_eq!(normalize_path("/v1/refunds"), "/v1/refunds");
        assert!(matches!(
            normalize_path("/v1/refunds"),
            std::borrow::Cow::Borrowed(_)
        ));
        // Reserved escapes stay escaped: %2F is data, not a separator.
        assert_eq!(normalize_path("/v1/a%2fb"), "/v1/a%2Fb");
        assert_eq!(normalize_path("/../.."), "/");
        assert_eq!(normalize_path("/"), "/");
        assert_eq!(normalize_path("/v1/%"), "/v1/%");
        assert_eq!(normalize_path("/v1/%e2%82"), "/v1/%E2%82");
    }

    #[test]
    fn root_pattern_matches_only_root() {
        let m = matcher(Method::GET, &[]);
        assert!(m.matches(&Method::GET, "/").is_some());
        assert!(m.matches(&Method::GET, "/x").is_none());
    }

    #[test]
    fn exact_codes_beat_classes() {
        let o = Outcomes {
            succeeded: vec![StatusRule::Class(2)],
            failed: vec![StatusRule::Exact(202), StatusRule::Class(4)],
        };
        assert_eq!(o.classify(200), Outcome::Succeeded);
        assert_eq!(o.classify(202), Outcome::Failed);
        assert_eq!(o.classify(409), Outcome::Failed);
        assert_eq!(o.classify(500), Outcome::Unknown);
        let d = Outcomes::default();
        assert_eq!(d.classify(201), Outcome::Succeeded);
        assert_eq!(d.classify(409), Outcome::Unknown);
        assert_eq!(d.classify(429), Outcome::Failed);
        assert_eq!(d.classify(503), Outcome::Unknown);
    }

    #[test]
    fn mount_stripping_respects_segment_boundaries() {
        let p = Provider::example("s", "/stripe", "");
        assert_eq!(p.strip_mount("/stripe/v1/x"), Some("/v1/x"));
        assert_eq!(p.strip_mount("/stripe"), Some("/"));
        assert_eq!(p.strip_mount("/striper/v1"), None);
    }
}
