//! Provider policies as the rest of the proxy sees them: validated, compiled, immutable.
//!
//! This module owns the domain types a policy file turns into (`Provider`, `Route`, their
//! enums), route matching and outcome classification. It never reads files or parses TOML;
//! `config` does that and builds these values only after every check has passed. Its rooms:
//! `rule`, what a provider's answer means (`[[provider.rule]]`, then the status lists);
//! `answer`, how the proxy's own problem answers are shaped for a provider's SDK; `field`, an
//! `approval_show` entry.

pub mod answer;
pub mod field;
pub mod rule;

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

/// Whether the provider reads its paths' letter case (`path_case`). Under `insensitive`,
/// routes match whatever the case of their literal segments, and a matched request is sent
/// in the route's own spelling; under `sensitive` (the default), a request that differs
/// from a guarded route only in case is refused, since the provider might take it for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathCase {
    Sensitive,
    Insensitive,
}

/// How the provider is spoken to (`protocol`): plain HTTP requests matched by method and path,
/// or an MCP server whose routes name tools (`tools/call NAME`), matched by the JSON-RPC body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Mcp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMissingId {
    Reject,
    Pass,
}

/// Whether a route's requests wait for a person (`approval = "none" | "required"`); an
/// operation's own approval state is `operation::Approval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalMode {
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
pub struct BaseUrl {
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

impl BaseUrl {
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
        self.match_path(path, |literal, segment| literal == segment)
    }

    /// Whether `other` matches exactly the requests this matches: the same method and
    /// segments, whatever their captures are called (and, `ignoring_case`, whatever the
    /// letter case of their literal segments).
    pub fn same_requests(&self, other: &Matcher, ignoring_case: bool) -> bool {
        let same = |a: &Segment, b: &Segment| match (a, b) {
            (Segment::Literal(a), Segment::Literal(b)) => {
                a == b || (ignoring_case && a.eq_ignore_ascii_case(b))
            }
            (Segment::Capture(_), Segment::Capture(_)) | (Segment::Rest(_), Segment::Rest(_)) => {
                true
            }
            _ => false,
        };
        self.method == other.method
            && self.segments.len() == other.segments.len()
            && self
                .segments
                .iter()
                .zip(&other.segments)
                .all(|(a, b)| same(a, b))
    }

    /// Whether this matches every request `other` matches: tried on `other`'s own spelling,
    /// a stand-in (equal to no literal) for each capture, and its rest both empty and two
    /// segments long. Used to find a route that can never be reached.
    pub fn covers(&self, other: &Matcher, ignoring_case: bool) -> bool {
        const STAND_IN: &str = "\u{1}";
        let spell = |rest: &str| {
            let captures: Captures = (other.segments.iter())
                .filter_map(|segment| match segment {
                    Segment::Literal(_) => None,
                    Segment::Capture(name) => Some((name.clone(), STAND_IN.to_owned())),
                    Segment::Rest(name) => Some((name.clone(), rest.to_owned())),
                })
                .collect();
            other.spell(&captures)
        };
        ["", "\u{1}/\u{1}"].iter().all(|rest| {
            let path = spell(rest);
            let found = match ignoring_case {
                true => self.matches_ignoring_case(&other.method, &path),
                false => self.matches(&other.method, &path),
            };
            found.is_some()
        })
    }

    /// `matches` with letter case ignored, in the method and in the literal segments: what
    /// a case-insensitive server would take for this route.
    pub fn matches_ignoring_case(&self, method: &Method, path: &str) -> Option<Captures> {
        let same = |literal: &str, segment: &str| literal.eq_ignore_ascii_case(segment);
        if !same(self.method.as_str(), method.as_str()) {
            return None;
        }
        self.match_path(path, same)
    }

    /// The path this pattern spells with these captures (as `matches` returned them): the
    /// literals as the route writes them, the captured segments as the request wrote them.
    pub fn spell(&self, captures: &Captures) -> String {
        let mut values = captures.iter().map(|(_, v)| v.as_str());
        let mut out = String::new();
        for segment in &self.segments {
            let part = match segment {
                Segment::Literal(lit) => lit.as_str(),
                Segment::Capture(_) | Segment::Rest(_) => values.next().unwrap_or(""),
            };
            if !(part.is_empty() && matches!(segment, Segment::Rest(_))) {
                out.push('/');
                out.push_str(part);
            }
        }
        if out.is_empty() {
            out.push('/');
        }
        out
    }

    /// The captures of `path` against the segments, literals compared by `same`.
    fn match_path(&self, path: &str, same: impl Fn(&str, &str) -> bool) -> Option<Captures> {
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
                Segment::Literal(lit) if same(lit, head) => {}
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

/// One `reconcile.lookup` template: `GET /v1/x?key={key}`.
#[derive(Debug, Clone)]
pub struct Lookup {
    pub method: Method,
    /// Path and query template, relative to the upstream base path.
    pub target: Template,
}

/// `[route.reconcile]`: how to ask the provider whether an effect happened.
#[derive(Debug, Clone)]
pub struct Reconcile {
    /// Tried in order: the first whose parts are all present is sent.
    pub lookups: Vec<Lookup>,
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
    /// The MCP tool this route guards (`match = "tools/call NAME"`); its `matcher` is then the
    /// endpoint itself (`POST /`), and the route is found by the body (`Provider::tool_route`),
    /// never by `route_for`.
    pub tool: Option<String>,
    pub effect: Effect,
    pub operation_id: Vec<Template>,
    pub on_missing_id: OnMissingId,
    pub approval: ApprovalMode,
    pub fingerprint_ignore: Vec<String>,
    pub fingerprint_headers: Vec<HeaderName>,
    /// The fields of the kept first request shown to the person who approves (`approval_show`).
    pub approval_show: Vec<field::Field>,
    /// The fields of the kept first request shown to the operator who must decide an `unknown`
    /// or `in_flight` operation (`operator_show`; by default `approval_show`), masked alike.
    pub operator_show: Vec<field::Field>,
    pub reconcile: Option<Reconcile>,
}

impl Route {
    /// Whether requests on this route go through the ledger.
    pub fn is_guarded(&self) -> bool {
        self.effect != Effect::ReadOnly
    }

    /// `fingerprint_ignore` as fields of the kept request (what `approval_show` masks): on a
    /// tool route its entries name arguments, which the JSON-RPC request holds under
    /// `params[arguments]`.
    pub fn ignored_in_request(&self) -> std::borrow::Cow<'_, [String]> {
        match self.tool {
            None => std::borrow::Cow::Borrowed(&self.fingerprint_ignore),
            Some(_) => (self.fingerprint_ignore.iter())
                .map(|f| argument_in_request(f))
                .collect(),
        }
    }
}

/// An argument of an MCP tool call (a bracket path: `metadata[step]`) as a field of the
/// JSON-RPC request: `params[arguments][metadata][step]`.
pub fn argument_in_request(field: &str) -> String {
    let (head, rest) = field.split_at(field.find('[').unwrap_or(field.len()));
    format!("params[arguments][{head}]{rest}")
}

/// One provider policy file, validated.
/// The environment variable an `EnvTemplate` names that is unset or empty, by name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnsetVar(pub String);

/// A header value with `${VAR}` references, expanded from the environment when used, so a
/// credential it names lives only in the environment and in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvTemplate {
    parts: Vec<EnvPart>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum EnvPart {
    Text(String),
    Var(String),
}

impl EnvTemplate {
    /// Parses `Bearer ${STRIPE_API_KEY}`: `${NAME}` with NAME of letters, digits and `_`
    /// (not starting with a digit); `$$` is a literal `$`. An error names the place by its
    /// character position, never the text: a literal value here is a credential.
    pub fn parse(text: &str) -> Result<EnvTemplate, String> {
        let place = |rest: &str| text[..text.len() - rest.len()].chars().count() + 1;
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            literal.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            if let Some(tail) = after.strip_prefix('$') {
                literal.push('$');
                rest = tail;
                continue;
            }
            let at = place(&rest[at..]);
            let Some(inner) = after.strip_prefix('{') else {
                return Err(format!(
                    "the `$` at character {at} must start `${{VAR}}` (write `$$` for a literal `$`)"
                ));
            };
            let Some(end) = inner.find('}') else {
                return Err(format!("the `${{` at character {at} is not closed by `}}`"));
            };
            let name = &inner[..end];
            let valid = !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(format!(
                    "the `${{...}}` at character {at} does not hold an environment variable name \
                     (letters, digits and `_`, not starting with a digit)"
                ));
            }
            if !literal.is_empty() {
                parts.push(EnvPart::Text(std::mem::take(&mut literal)));
            }
            parts.push(EnvPart::Var(name.to_owned()));
            rest = &inner[end + 1..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(EnvPart::Text(literal));
        }
        Ok(EnvTemplate { parts })
    }

    /// The value with every variable read from the environment; `Err(NAME)` names the first
    /// variable that is unset or empty.
    pub fn expand(&self) -> Result<String, UnsetVar> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                EnvPart::Text(t) => out.push_str(t),
                EnvPart::Var(name) => match std::env::var(name) {
                    Ok(v) if !v.is_empty() => out.push_str(&v),
                    _ => return Err(UnsetVar(name.clone())),
                },
            }
        }
        Ok(out)
    }
}

#[derive(Debug, Clone)]
pub struct Provider {
    pub name: String,
    pub upstream: BaseUrl,
    /// Mount prefix without a trailing slash, e.g. `/stripe`.
    pub mount: String,
    pub dedupe: Dedupe,
    pub key: KeyPlacement,
    pub key_format: KeyFormat,
    /// How many characters of an opaque key are sent (32..=64); plain keys are never cut.
    pub key_length: usize,
    pub key_retention: Duration,
    pub timeout: Duration,
    pub ca_file: Option<PathBuf>,
    /// Connect here instead of resolving the upstream's host; TLS still verifies its name.
    pub connect_to: Option<std::net::SocketAddr>,
    pub request_id_header: Option<HeaderName>,
    pub control_headers: Vec<HeaderName>,
    pub redact_headers: Vec<HeaderName>,
    /// Headers the settler sends when it has no caller's headers in memory (docs/reference.md section 5.5).
    pub settle_headers: Vec<(HeaderName, EnvTemplate)>,
    pub unmatched: Unmatched,
    pub path_case: PathCase,
    pub protocol: Protocol,
    pub outcomes: Outcomes,
    /// The status of the `outcome-unknown`, `in-flight` and `awaiting-approval` answers.
    pub pending_status: u16,
    /// `[[provider.rule]]`, tried in order before `outcomes`.
    pub rules: Vec<crate::policy::rule::AnswerRule>,
    /// `[[provider.answer]]`: how the proxy's own problem answers are shaped, tried in order.
    pub answers: Vec<answer::AnswerShape>,
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
            upstream: BaseUrl {
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
            key_length: 64,
            key_retention: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            ca_file: None,
            connect_to: None,
            request_id_header: None,
            control_headers: vec![],
            redact_headers: vec![],
            settle_headers: vec![],
            unmatched: Unmatched::Pass,
            path_case: PathCase::Sensitive,
            protocol: Protocol::Http,
            outcomes: Outcomes::default(),
            pending_status: 202,
            rules: vec![],
            answers: vec![],
            routes: vec![],
            file: PathBuf::new(),
            principal_headers: vec![http::header::AUTHORIZATION],
        }
    }

    /// The first route whose `match` accepts this request (letter case ignored under
    /// `path_case = "insensitive"`), with its captures.
    pub fn route_for(&self, method: &Method, path: &str) -> Option<(&Route, Captures)> {
        self.routes
            .iter()
            .filter(|r| r.tool.is_none())
            .find_map(|r| {
                match self.path_case {
                    PathCase::Sensitive => r.matcher.matches(method, path),
                    PathCase::Insensitive => r.matcher.matches_ignoring_case(method, path),
                }
                .map(|c| (r, c))
            })
    }

    /// Whether this request is for an MCP provider's endpoint itself and may carry a JSON-RPC
    /// message (exactly the mount; `POST`, or any method that is not a body-less read or a
    /// session's `DELETE`, so that no other method carries a tool call past the guard): its
    /// route, if any, is named by its body (`tool_route`).
    pub fn takes_tool_calls(&self, method: &Method, path: &str) -> bool {
        self.protocol == Protocol::Mcp
            && path == "/"
            && ![Method::GET, Method::HEAD, Method::DELETE, Method::OPTIONS].contains(method)
    }

    /// The route of the MCP tool `name` (`match = "tools/call NAME"`).
    pub fn tool_route(&self, name: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.tool.as_deref() == Some(name))
    }

    /// Whether any route goes through the ledger; such a provider refuses ambiguous
    /// spellings of paths and methods (see `path`), since one could reach a guarded route.
    pub fn guards_routes(&self) -> bool {
        self.routes.iter().any(Route::is_guarded)
    }

    /// Whether a guarded route takes `path` under another method than `method`: a request
    /// there that a server could read as that method (`_method`) must be looked at.
    pub fn guarded_under_another_method(&self, method: &Method, path: &str) -> bool {
        self.routes.iter().any(|r| {
            r.is_guarded()
                && r.matcher.method != *method
                && r.matcher
                    .matches_ignoring_case(&r.matcher.method, path)
                    .is_some()
        })
    }

    /// A guarded route this request meets when letter case is ignored. A request that
    /// matches no guarded route exactly but one of these is a case-insensitive server's
    /// spelling of a guarded route; `path` may also be another server's reading of the
    /// request's path (`path::loose_reading`).
    pub fn guarded_ignoring_case(&self, method: &Method, path: &str) -> Option<&Route> {
        self.routes
            .iter()
            .find(|r| r.is_guarded() && r.matcher.matches_ignoring_case(method, path).is_some())
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
    fn matching_ignoring_case_compares_method_and_literals_only() {
        let m = matcher(
            Method::POST,
            &[lit("v1"), lit("refunds"), Segment::Capture("id".into())],
        );
        let captures = m.matches_ignoring_case(&Method::POST, "/V1/Refunds/Re_1");
        assert_eq!(captures, Some(vec![("id".into(), "Re_1".into())]));
        assert_eq!(m.spell(&captures.unwrap()), "/v1/refunds/Re_1");
        let lower = Method::from_bytes(b"post").unwrap();
        assert!(
            m.matches_ignoring_case(&lower, "/v1/refunds/RE_1")
                .is_some()
        );
        assert!(
            m.matches_ignoring_case(&Method::GET, "/v1/refunds/re_1")
                .is_none()
        );
        assert!(
            m.matches_ignoring_case(&Method::POST, "/v1/refund/re_1")
                .is_none()
        );
        assert_eq!(m.matches(&Method::POST, "/V1/refunds/re_1"), None);
    }

    #[test]
    fn spelling_a_match_gives_the_routes_literals_and_the_captures() {
        let m = matcher(Method::GET, &[lit("files"), Segment::Rest("p".into())]);
        assert_eq!(m.spell(&vec![("p".into(), "A/b".into())]), "/files/A/b");
        assert_eq!(m.spell(&vec![("p".into(), "".into())]), "/files");
        assert_eq!(matcher(Method::GET, &[]).spell(&vec![]), "/");
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
