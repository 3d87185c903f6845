//! One policy file into a `Provider`: the `[provider]` table, its outcomes and its key
//! placement, plus the routes (checked in `route`). Errors go to the caller's `Scope`; it never
//! compares one policy file with another (the parent module does).

use std::path::{Path, PathBuf};
use std::time::Duration;

use http::HeaderName;
use toml::Value;

use super::raw::{RawOutcomes, RawPolicy, RawProvider};
use super::route::routes;
use super::values::status_rule;
use super::values::{ca_file, header, json_pointer, mount, name, upstream};
use super::{Claim, ConfigError, MIN_WAIT, Scope, headers, read_toml, required};
use crate::policy::{
    Dedupe, EnvTemplate, KeyFormat, KeyPlacement, Outcomes, PathCase, Protocol, Provider, Route,
    StatusRule, Unmatched,
};

pub(super) fn load_policy(file: &Path, errors: &mut Vec<ConfigError>) -> (Claim, Option<Provider>) {
    let mut claim = Claim {
        file: file.to_path_buf(),
        name: None,
        mount: None,
    };
    let Some(raw) = read_toml::<RawPolicy>(file, errors) else {
        return (claim, None);
    };
    let mut scope = Scope::new(file, errors);
    let Some(provider) = raw.provider else {
        let fix = "every policy file describes one provider: name, upstream, mount";
        scope.push("provider", format!("missing [provider] table ({fix})"));
        return (claim, None);
    };
    let folder = file.parent().unwrap_or(Path::new(""));
    let head = self::provider(&mut scope.nested("provider."), provider, folder);
    let path_case = (head.rest.as_ref()).map_or(PathCase::Sensitive, |p| p.path_case);
    let routes = routes(
        &mut scope,
        raw.route,
        &head.redact,
        path_case,
        head.protocol,
    );
    claim.name = head.name.clone();
    claim.mount = head.mount.clone();
    let provider = routes.and_then(|routes| head.build(file, routes));
    (claim, provider)
}

/// The `[provider]` table, validated field by field; `None` where the field had an error.
pub(super) struct ProviderHead {
    name: Option<String>,
    mount: Option<String>,
    /// `redact_headers` as far as they parsed, for the routes' checks.
    redact: Vec<HeaderName>,
    /// `protocol` (`http` when it did not parse), for how routes are matched.
    protocol: Protocol,
    rest: Option<Provider>,
}

impl ProviderHead {
    fn build(self, file: &Path, routes: Vec<Route>) -> Option<Provider> {
        let mut provider = self.rest?;
        provider.file = file.to_path_buf();
        provider.routes = routes;
        Some(provider)
    }
}

pub(super) fn provider(s: &mut Scope, raw: RawProvider, folder: &Path) -> ProviderHead {
    let name = required(s, "name", raw.name, |v| name(v, "provider", true));
    let upstream = required(s, "upstream", raw.upstream, |v| upstream(&v));
    let mount = required(s, "mount", raw.mount, |v| mount(&v));
    let dedupe = s.choice("dedupe", raw.dedupe, Dedupe::None, DEDUPE);
    let key = key_placement(s, raw.key_header, raw.key_json_field);
    let key_format = s.choice("key_format", raw.key_format, KeyFormat::Opaque, KEY_FORMATS);
    let key_length = s.check(
        "key_length",
        key_length(raw.key_length.as_ref(), key_format),
    );
    let day = Duration::from_secs(24 * 3600);
    let retention = s.duration("key_retention", raw.key_retention.as_ref(), day, MIN_WAIT);
    let timeout = s.duration("timeout", raw.timeout.as_ref(), 30 * SECOND, MIN_WAIT);
    let ca_file = ca_file(raw.ca_file.as_deref().unwrap_or(""), folder);
    let ca_file = s.check("ca_file", ca_file);
    let connect_to = s.check("connect_to", connect_to(raw.connect_to.as_deref()));
    let request_id = match raw.request_id_header.as_deref() {
        None | Some("") => Some(None),
        Some(v) => s.check("request_id_header", header(v)).map(Some),
    };
    let control = headers(s, "control_headers", raw.control_headers, CONTROL_HEADERS);
    let redact = headers(s, "redact_headers", raw.redact_headers, &[]);
    let settle = settle_headers(s, raw.settle_headers.unwrap_or_default());
    let unmatched = s.choice("unmatched", raw.unmatched, Unmatched::Pass, UNMATCHED);
    let path_case = s.choice("path_case", raw.path_case, PathCase::Sensitive, PATH_CASES);
    let protocol = s.choice("protocol", raw.protocol, Protocol::Http, PROTOCOLS);
    let outcomes = outcomes(s, raw.outcomes.unwrap_or_default());
    let pending_status = s.check(
        "pending_status",
        pending_status(raw.pending_status.as_ref()),
    );
    let rules = super::rule::rules(s, raw.rule.unwrap_or_default());
    let answers = super::answer::answers(s, raw.answer.unwrap_or_default());
    let principal = principal_headers(s, raw.principal_headers);
    let rest = (|| {
        Some(Provider {
            name: name.clone()?,
            upstream: upstream?,
            mount: mount.clone()?,
            dedupe: dedupe?,
            key: key?,
            key_format: key_format?,
            key_length: key_length?,
            key_retention: retention?,
            timeout: timeout?,
            ca_file: ca_file?,
            connect_to: connect_to?,
            request_id_header: request_id?,
            control_headers: control?,
            redact_headers: redact.clone()?,
            settle_headers: settle?,
            unmatched: unmatched?,
            path_case: path_case?,
            protocol: protocol?,
            outcomes: outcomes?,
            pending_status: pending_status?,
            rules: rules?,
            answers: answers?,
            routes: Vec::new(),
            file: PathBuf::new(),
            principal_headers: principal?,
        })
    })();
    ProviderHead {
        name,
        mount,
        redact: redact.unwrap_or_default(),
        protocol: protocol.unwrap_or(Protocol::Http),
        rest,
    }
}

const SECOND: Duration = Duration::from_secs(1);

pub(super) const DEDUPE: &[(&str, Dedupe)] = &[("key", Dedupe::Key), ("none", Dedupe::None)];

pub(super) const KEY_FORMATS: &[(&str, KeyFormat)] =
    &[("opaque", KeyFormat::Opaque), ("plain", KeyFormat::Plain)];

pub(super) const UNMATCHED: &[(&str, Unmatched)] =
    &[("pass", Unmatched::Pass), ("reject", Unmatched::Reject)];

/// `protocol`: `"http"` (the default), or `"mcp"`: an MCP server whose routes name tools.
pub(super) const PROTOCOLS: &[(&str, Protocol)] =
    &[("http", Protocol::Http), ("mcp", Protocol::Mcp)];

pub(super) const PATH_CASES: &[(&str, PathCase)] = &[
    ("sensitive", PathCase::Sensitive),
    ("insensitive", PathCase::Insensitive),
];

pub(super) const CONTROL_HEADERS: &[&str] = &["x-operation-id", "x-workflow-id"];

/// `connect_to`: an IP address and a port, or `""` (none). Never a host name: the point is
/// to connect somewhere without resolving one.
fn connect_to(raw: Option<&str>) -> Result<Option<std::net::SocketAddr>, String> {
    match raw {
        None | Some("") => Ok(None),
        Some(text) => text.parse().map(Some).map_err(|_| {
            format!(
                "\"{text}\" is not an IP address and a port (write e.g. \"10.0.0.7:443\" or \
                 \"[::1]:8443\"; host names are not resolved)"
            )
        }),
    }
}

/// `key_length`: 32 to 64 characters of the opaque key (default 64, the whole hex sha256).
/// A plain key is the operation ID itself, up to 512 bytes: it cannot be cut without two
/// operations sharing a key, so with `key_format = "plain"` the key is refused altogether.
pub(super) fn key_length(raw: Option<&Value>, format: Option<KeyFormat>) -> Result<usize, String> {
    let fix = "give a whole number from 32 to 64 (the opaque key is 64 hex characters; shorter \
               keys still carry 128 bits or more)";
    let Some(raw) = raw else {
        return Ok(64);
    };
    if format == Some(KeyFormat::Plain) {
        return Err(
            "key_format = \"plain\" sends the operation ID itself (up to 512 bytes), \
                    which cannot be cut without two operations sharing a key; use \
                    key_format = \"opaque\" with key_length, or remove key_length"
                .into(),
        );
    }
    match raw {
        Value::Integer(n) if (32..=64).contains(n) => Ok(*n as usize),
        Value::Integer(n) => Err(format!("{n} is outside 32..64 ({fix})")),
        other => Err(format!("{other} is not a whole number ({fix})")),
    }
}

/// The statuses an answer meaning "not yet" may have: 202 (the default), or one an SDK
/// retries by itself or raises as an error, never a success object.
pub(super) const PENDING_STATUSES: [u16; 5] = [202, 409, 425, 429, 503];

/// `pending_status`: one of [`PENDING_STATUSES`].
pub(super) fn pending_status(raw: Option<&Value>) -> Result<u16, String> {
    let fix = "use 202 (the default), 409, 425, 429 or 503";
    match raw {
        None => Ok(202),
        Some(Value::Integer(n)) => match u16::try_from(*n) {
            Ok(code) if PENDING_STATUSES.contains(&code) => Ok(code),
            _ => Err(format!("{n} is not allowed ({fix})")),
        },
        Some(other) => Err(format!("{other} is not a status code ({fix})")),
    }
}

/// The warning a provider with guarded routes earns when its "not yet" answers stay at `202`:
/// SDKs that take any 2xx for success read the problem document as the object they asked for
/// (proven in tests/sdk; docs/policies.md, "What each SDK does with the proxy's answers").
/// An MCP provider's tool calls hear every problem as a tool error, whatever the status.
pub(super) fn pending_warning(file: &Path, provider: &Provider) -> Option<ConfigError> {
    let guarded =
        provider.protocol == Protocol::Http && provider.routes.iter().any(Route::is_guarded);
    (guarded && provider.pending_status == 202).then(|| ConfigError {
        file: file.to_path_buf(),
        key: "provider.pending_status".into(),
        message: "202 (the default) answers outcome-unknown, in-flight and awaiting-approval \
                  with a 2xx, which SDKs that take any 2xx for success return as the object \
                  they asked for (stripe-python, squareup, gocardless-pro and increase do; \
                  an agent then sees a refund that may not exist). Set pending_status = 503, \
                  as the shipped policies do: with its Retry-After, an SDK waits and retries \
                  through the proxy, which is safe"
            .into(),
    })
}

/// `key_json_field`, when set, replaces the header (docs/reference.md section 3.1).
pub(super) fn key_placement(
    s: &mut Scope,
    header_raw: Option<String>,
    json: Option<String>,
) -> Option<KeyPlacement> {
    let header_name = header_raw.as_deref().unwrap_or("Idempotency-Key");
    let header = s.check(
        "key_header",
        header(header_name).and_then(super::hazards::key_header),
    );
    match json {
        Some(pointer) => s
            .check("key_json_field", json_pointer(&pointer, false))
            .map(KeyPlacement::JsonField),
        None => header.map(KeyPlacement::Header),
    }
}

pub(super) fn outcomes(s: &mut Scope, raw: RawOutcomes) -> Option<Outcomes> {
    let defaults = Outcomes::default();
    let failed_given = raw.failed.is_some();
    let succeeded = status_rules(s, "outcomes.succeeded", raw.succeeded, defaults.succeeded);
    let failed = status_rules(s, "outcomes.failed", raw.failed, defaults.failed);
    let (succeeded, failed) = (succeeded?, failed?);
    let both: Vec<String> = succeeded
        .iter()
        .filter(|rule| failed.contains(rule))
        .map(|rule| rule_text(*rule))
        .collect();
    if !both.is_empty() {
        let hint = if failed_given {
            ""
        } else {
            "; failed defaults to [400, 401, 402, 403, 404, 405, 413, 415, 422, 429], so list it yourself"
        };
        let msg = format!(
            "{} in both succeeded and failed (a status has one meaning: remove it from one list{hint})",
            both.join(", ")
        );
        s.push("outcomes", msg);
        return None;
    }
    Some(Outcomes { succeeded, failed })
}

pub(super) fn status_rules(
    s: &mut Scope,
    key: &str,
    raw: Option<Vec<Value>>,
    default: Vec<StatusRule>,
) -> Option<Vec<StatusRule>> {
    let Some(raw) = raw else {
        return Some(default);
    };
    let rules: Vec<Option<StatusRule>> = raw
        .iter()
        .enumerate()
        .map(|(i, v)| s.check(&format!("{key}[{i}]"), status_rule(v)))
        .collect();
    rules.into_iter().collect()
}

pub(super) fn rule_text(rule: StatusRule) -> String {
    match rule {
        StatusRule::Exact(code) => code.to_string(),
        StatusRule::Class(class) => format!("\"{class}xx\""),
    }
}

/// `settle_headers`: header name -> value with `${VAR}` references to the environment, read
/// only when the settler sends (so the values are never in a file the proxy writes).
fn settle_headers(
    s: &mut Scope,
    raw: std::collections::BTreeMap<String, String>,
) -> Option<Vec<(HeaderName, EnvTemplate)>> {
    let checked: Vec<Option<(HeaderName, EnvTemplate)>> = raw
        .into_iter()
        .map(|(name, value)| {
            let key = format!("settle_headers.{name}");
            let name = s.check(&key, header(&name))?;
            let value = s.check(&key, EnvTemplate::parse(&value))?;
            Some((name, value))
        })
        .collect();
    checked.into_iter().collect()
}

/// `principal_headers`: `authorization` first, always (docs/reference.md section 3.1), then the listed others.
pub(super) fn principal_headers(
    s: &mut Scope,
    raw: Option<Vec<String>>,
) -> Option<Vec<HeaderName>> {
    let listed = headers(s, "principal_headers", raw, &[])?;
    let mut names = vec![http::header::AUTHORIZATION];
    for name in listed {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Some(names)
}
