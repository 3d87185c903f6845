//! `[[route]]` tables into `Route`s: the `match` compiled into a `Matcher`, the operation_id
//! and lookup templates parsed and checked against where they are used, `[route.reconcile]`.
//! It never decides anything about a request; it only builds what `policy` matches with.

use std::time::Duration;

use http::{HeaderName, Method};
use toml::Value;

use super::raw::{RawReconcile, RawRoute};
use super::values::{APPROVALS, EFFECTS, ON_MISSING_ID};
use super::values::{duration, json_pointer, name};
use super::{Scope, hazards};
use super::{headers, required};
use crate::fingerprint::QUERY_ONLY;
use crate::policy::field::Field;
use crate::policy::{
    ApprovalMode, Effect, Lookup, Matcher, OnMissingId, PathCase, Protocol, Reconcile, Route,
    Segment,
};
use crate::template::{Part, Template};

/// Every `[[route]]`, then the checks between routes of one provider. `redact` is the
/// provider's `redact_headers` (kept out of identities and fingerprints like credentials).
pub(super) fn routes(
    s: &mut Scope,
    raw: Vec<RawRoute>,
    redact: &[HeaderName],
    path_case: PathCase,
    protocol: Protocol,
) -> Option<Vec<Route>> {
    let ignoring_case = path_case == PathCase::Insensitive;
    let mut routes = Vec::new();
    let mut ok = true;
    for (i, raw) in raw.into_iter().enumerate() {
        let label = match raw.name.as_deref() {
            Some(n) if !n.is_empty() => format!("route \"{n}\": "),
            _ => format!("route[{i}]: "),
        };
        match route(&mut s.nested(&label), raw, redact, protocol) {
            Some(route) => routes.push(route),
            None => ok = false,
        }
    }
    for (i, later) in routes.iter().enumerate() {
        let mut scope = s.nested(&format!("route \"{}\": ", later.name));
        for earlier in &routes[..i] {
            if earlier.name == later.name {
                scope.push(
                    "name",
                    "another route already has this name (route names are unique per provider)",
                );
                ok = false;
            } else if earlier.tool == later.tool
                && earlier.matcher.same_requests(&later.matcher, ignoring_case)
            {
                let msg = format!(
                    "same match as route \"{}\", so this route would never be used (remove one)",
                    earlier.name
                );
                scope.push("match", msg);
                ok = false;
            } else if later.tool.is_none()
                && later.is_guarded()
                && !earlier.is_guarded()
                && earlier.matcher.covers(&later.matcher, ignoring_case)
            {
                // Routes are tried in file order: its guard would never run (its requests
                // would all be refused 400).
                let msg = format!(
                    "every request it matches goes to the earlier route \"{}\", which is not \
                     guarded, so this route's guard would never run (list this route before it)",
                    earlier.name
                );
                scope.push("match", msg);
                ok = false;
            }
        }
    }
    ok.then_some(routes)
}

pub(super) fn route(
    s: &mut Scope,
    raw: RawRoute,
    redact: &[HeaderName],
    protocol: Protocol,
) -> Option<Route> {
    let name = required(s, "name", raw.name, |v| self::name(v, "route", false));
    let pattern = raw.pattern.clone();
    // Every mistake of the match on one line, in one run.
    let matched = required(s, "match", raw.pattern, |v| match protocol {
        Protocol::Mcp => tool_matcher(&v).map(|(m, tool)| (m, Some(tool))),
        Protocol::Http => match v.split_whitespace().next() {
            Some("tools/call") => Err(format!(
                "\"{v}\" names an MCP tool, and this provider speaks plain HTTP (set protocol = \
                 \"mcp\" in [provider], or write \"METHOD /path\", e.g. \"POST /v1/refunds\")"
            )),
            _ => matcher(&v).map(|m| (m, None)).map_err(|e| e.join("; ")),
        },
    });
    let (matcher, tool) = match matched {
        Some((m, tool)) => (Some(m), tool),
        None => (None, None),
    };
    let effect = s.choice("effect", raw.effect, Effect::Irreversible, EFFECTS);
    let captures = match &matcher {
        Some(m) => m.capture_names().map(String::from).collect(),
        None => written_captures(pattern.as_deref().unwrap_or_default()),
    };
    let captures = captures.as_slice();
    let guarded = effect.is_some_and(|e| e != Effect::ReadOnly);
    let operation_id = operation_ids(s, raw.operation_id.as_ref(), guarded, captures, redact);
    let on_missing_id = s.choice(
        "on_missing_id",
        raw.on_missing_id,
        OnMissingId::Reject,
        ON_MISSING_ID,
    );
    let approval = s.choice("approval", raw.approval, ApprovalMode::None, APPROVALS);
    hazards::approval_skipped(s, approval, on_missing_id);
    let mut ignore = raw.fingerprint_ignore.unwrap_or_default();
    if protocol == Protocol::Mcp {
        // Pointers relative to the tool's arguments, in the fingerprint's own spelling.
        for entry in &mut ignore {
            *entry = argument_field(entry);
        }
    }
    let ignore_ok = fingerprint_ignore(s, &ignore);
    let fp_headers = headers(s, "fingerprint_headers", raw.fingerprint_headers, &[]);
    let (mut approval_shown, mut operator_shown) = (raw.approval_show, raw.operator_show);
    if protocol == Protocol::Mcp {
        // Fields of the tool's arguments, inside the kept JSON-RPC request.
        for list in [&mut approval_shown, &mut operator_shown]
            .into_iter()
            .flatten()
        {
            for entry in list.iter_mut() {
                *entry = argument_in_request(entry);
            }
        }
    }
    let approval_show = fields_shown(s, "approval_show", approval_shown);
    let operator_show = match operator_shown {
        Some(listed) => fields_shown(s, "operator_show", Some(listed)),
        None => approval_show.clone(),
    };
    hazards::fingerprint_headers(s, fp_headers.as_deref().unwrap_or_default(), redact);
    let listed = fp_headers.as_deref().unwrap_or_default();
    if protocol == Protocol::Mcp && listed.iter().any(|h| h == "mcp-session-id") {
        let why = "Mcp-Session-Id never counts: a call repeated from a new session is the same \
                   intent (remove it)";
        s.push("fingerprint_headers", why);
    }
    let reconcile = raw
        .reconcile
        .map(|r| reconcile(&mut s.nested("reconcile."), r, captures));
    if effect == Some(Effect::ReadOnly) {
        read_only_extras(s, approval, reconcile.is_some());
    } else if protocol == Protocol::Mcp && reconcile.is_some() {
        let why = "an MCP tool's effect cannot be looked up with an HTTP request (remove it: an \
                   unknown outcome waits for an operator, or a re-send where dedupe or the \
                   effect allow one)";
        s.push("reconcile", why);
    }
    Some(Route {
        name: name?,
        pattern: pattern?,
        matcher: matcher?,
        tool,
        effect: effect?,
        operation_id: operation_id?,
        on_missing_id: on_missing_id?,
        approval: approval?,
        fingerprint_ignore: ignore_ok.then_some(ignore)?,
        fingerprint_headers: fp_headers?,
        approval_show: approval_show?,
        operator_show: operator_show?,
        reconcile: reconcile.map_or(Some(None), |r| r.map(Some))?,
    })
}

/// `fingerprint_ignore`: body fields and query parameters, by bare name or path (both), or as
/// `query:NAME` (the query only). A header is in the fingerprint only when
/// `fingerprint_headers` lists it, so a `header:` entry, which could leave nothing out, is
/// refused rather than accepted and ignored.
fn fingerprint_ignore(s: &mut Scope, ignore: &[String]) -> bool {
    let mut ok = true;
    for (i, entry) in ignore.iter().enumerate() {
        let why = if entry.is_empty() {
            "empty field name (name body or query fields, e.g. \"metadata[trace_id]\")"
        } else if entry == QUERY_ONLY {
            "`query:` names no parameter (e.g. \"query:trace\")"
        } else if entry.starts_with("header:") {
            "headers are in the fingerprint only when fingerprint_headers lists them (remove \
             the header from fingerprint_headers instead)"
        } else {
            continue;
        };
        s.push(&format!("fingerprint_ignore[{i}]"), why);
        ok = false;
    }
    ok
}

/// `approval_show` or `operator_show` (`list`): field paths, each once. `approval_show` on a
/// route without approval is shown only as the default `operator_show`; when that is set
/// too, it shows nothing, and `check` warns (`rule::warnings`).
fn fields_shown(s: &mut Scope, list: &str, raw: Option<Vec<String>>) -> Option<Vec<Field>> {
    let raw = raw.unwrap_or_default();
    let mut fields: Vec<Field> = Vec::with_capacity(raw.len());
    let mut ok = true;
    for (i, text) in raw.iter().enumerate() {
        let key = format!("{list}[{i}]");
        match s.check(&key, Field::parse(text)) {
            Some(field) if fields.contains(&field) => {
                s.push(
                    &key,
                    format!("{text:?} is listed twice (list each field once)"),
                );
                ok = false;
            }
            Some(field) => fields.push(field),
            None => ok = false,
        }
    }
    ok.then_some(fields)
}

/// Settings that would promise a read_only route a protection it never gets.
pub(super) fn read_only_extras(s: &mut Scope, approval: Option<ApprovalMode>, reconcile: bool) {
    let why = "read_only routes are forwarded unguarded";
    if approval == Some(ApprovalMode::Required) {
        s.push(
            "approval",
            format!("{why}, so nobody would be asked (remove it or change the effect)"),
        );
    }
    if reconcile {
        s.push(
            "reconcile",
            format!("{why}, so there is nothing to reconcile (remove it or change the effect)"),
        );
    }
}

/// `operation_id`: a string or a list of strings, each a template over the request.
pub(super) fn operation_ids(
    s: &mut Scope,
    raw: Option<&Value>,
    guarded: bool,
    captures: &[String],
    redact: &[HeaderName],
) -> Option<Vec<Template>> {
    let sources: Vec<(String, &Value)> = match raw {
        None if guarded => {
            let fix = "required unless effect = \"read_only\"; e.g. operation_id = \"{header:x-operation-id}\"";
            s.push("operation_id", format!("missing ({fix})"));
            return None;
        }
        None => return Some(Vec::new()),
        Some(Value::Array(list)) if list.is_empty() => {
            s.push(
                "operation_id",
                "empty list (give at least one template, tried in order)",
            );
            return None;
        }
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("operation_id[{i}]"), v))
            .collect(),
        Some(v) => vec![("operation_id".to_string(), v)],
    };
    let templates: Vec<Option<Template>> = sources
        .into_iter()
        .map(|(key, v)| {
            let text = v
                .as_str()
                .ok_or_else(|| format!("{v} is not a string (write templates as strings)"));
            let checked = text.and_then(|t| template(t, captures, false));
            s.check(&key, checked.and_then(|t| hazards::identity(t, redact)))
        })
        .collect();
    templates.into_iter().collect()
}

/// Parses a template and checks its parts against where it is used.
pub(super) fn template(text: &str, captures: &[String], lookup: bool) -> Result<Template, String> {
    if text.is_empty() {
        return Err("empty template (e.g. \"{header:x-workflow-id}:{json:/order_id}\")".into());
    }
    let template = Template::parse(text).map_err(|e| e.to_string())?;
    for part in template.parts() {
        match part {
            Part::Path(name) if !captures.iter().any(|c| c == name) => {
                let have = if captures.is_empty() {
                    "it has none".to_string()
                } else {
                    format!("it has {}", captures.join(", "))
                };
                return Err(format!(
                    "{{path:{name}}} names no capture of the route's match ({have})"
                ));
            }
            Part::Key | Part::OperationId | Part::Answer(_) if !lookup => {
                return Err("{key}, {operation_id} and {answer:...} exist only in reconcile.lookup (build the operation ID from the request: header, json, form, query, path, fingerprint)".into());
            }
            _ if lookup => hazards::lookup_part(part)?,
            _ => {}
        }
    }
    Ok(template)
}

pub(super) fn reconcile(
    s: &mut Scope,
    raw: RawReconcile,
    captures: &[String],
) -> Option<Reconcile> {
    let lookups = lookups(s, raw.lookup.as_ref(), captures);
    let found = required(s, "found", raw.found, |v| json_pointer(&v, true));
    let raw_after = raw.not_found_final_after.as_ref();
    let after = s.check("not_found_final_after", final_after(raw_after));
    Some(Reconcile {
        lookups: lookups?,
        found: found?,
        not_found_final_after: after?,
    })
}

/// `lookup`: a template, or a non-empty list of them tried in order.
fn lookups(s: &mut Scope, raw: Option<&Value>, captures: &[String]) -> Option<Vec<Lookup>> {
    let items: Vec<(String, &Value)> = match raw {
        None => {
            s.push("lookup", "missing (this key is required)");
            return None;
        }
        Some(Value::Array(list)) if list.is_empty() => {
            let fix = "give at least one template, e.g. \"GET /v1/x?key={key}\"";
            s.push("lookup", format!("empty list ({fix})"));
            return None;
        }
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("lookup[{i}]"), v))
            .collect(),
        Some(v) => vec![("lookup".to_string(), v)],
    };
    let checked: Vec<Option<Lookup>> = items
        .into_iter()
        .map(|(key, v)| {
            let text = v
                .as_str()
                .ok_or_else(|| format!("{v} is not a string (write lookups as strings)"));
            let parsed = text.and_then(|t| lookup(t, captures));
            s.check(
                &key,
                parsed.map(|(method, target)| Lookup { method, target }),
            )
        })
        .collect();
    checked.into_iter().collect()
}

/// `not_found_final_after`: at least 1ms. Zero would let a lookup sent right after the
/// dispatch, before the provider can show the effect, prove "no effect" and re-send it.
fn final_after(raw: Option<&Value>) -> Result<Duration, String> {
    match duration(raw, Duration::from_secs(60), Duration::ZERO)? {
        d if d < Duration::from_millis(1) => Err(
            "must be at least 1ms: with 0s a not-found read right after a \
             dispatch, before the provider can show the effect, would count as \"no effect\" \
             and re-send it (give the provider's delay, e.g. \"60s\")"
                .into(),
        ),
        after => Ok(after),
    }
}

/// `"METHOD /path?query"`: a method and a template for the path and query.
pub(super) fn lookup(text: &str, captures: &[String]) -> Result<(Method, Template), String> {
    let fix = "write \"METHOD /path?query\", e.g. \"GET /v1/refunds?metadata[operation]={key}\"";
    let Some((method_text, target)) = text.trim().split_once(' ') else {
        return Err(format!("\"{text}\" is not a method and a path ({fix})"));
    };
    let method = method(method_text)?;
    let target = target.trim();
    if !target.starts_with('/') || target.contains('#') {
        return Err(format!(
            "\"{target}\" must start with \"/\" and have no fragment ({fix})"
        ));
    }
    Ok((method, template(target, captures, true)?))
}

/// `"METHOD /path"` with `{name}` and `{name*}` segments; every mistake in it, each with its
/// fix, so one `check` names them all.
pub(super) fn matcher(text: &str) -> Result<Matcher, Vec<String>> {
    let fix = "write \"METHOD /path\", e.g. \"POST /v1/refunds/{id}/cancel\"";
    let words: Vec<&str> = text.split_whitespace().collect();
    let [method_text, path] = words[..] else {
        return Err(vec![format!(
            "\"{text}\" is not a method and a path ({fix})"
        )]);
    };
    let mut errors = Vec::new();
    let method = method(method_text).map_err(|e| errors.push(e)).ok();
    if !path.starts_with('/') || path.contains(['?', '#']) {
        errors.push(format!(
            "path \"{path}\" must start with \"/\" and have no query or fragment ({fix})"
        ));
    }
    let segments = segments(path, fix, &mut errors);
    match method {
        Some(method) if errors.is_empty() => Ok(Matcher { method, segments }),
        _ => Err(errors),
    }
}

/// An MCP route's `match`: `tools/call NAME`, the tool's name as the server lists it. Its
/// matcher is the endpoint itself (`POST /`), the tool is told apart by the body.
fn tool_matcher(text: &str) -> Result<(Matcher, String), String> {
    let fix = "on an MCP provider (protocol = \"mcp\") a route names a tool: write \
               \"tools/call NAME\", e.g. \"tools/call refund\"";
    match text.split_whitespace().collect::<Vec<_>>()[..] {
        ["tools/call", name] if name.len() <= 128 => {
            let endpoint = Matcher {
                method: Method::POST,
                segments: Vec::new(),
            };
            Ok((endpoint, name.to_string()))
        }
        _ => Err(format!("\"{text}\" is not a tool ({fix})")),
    }
}

/// A `fingerprint_ignore` entry of an MCP route in the fingerprint's bracket spelling: a JSON
/// pointer relative to the arguments (`/metadata/trace_id`) becomes `metadata[trace_id]`;
/// anything else is taken as already so spelled.
fn argument_field(entry: &str) -> String {
    let Some(pointer) = entry.strip_prefix('/') else {
        return entry.to_string();
    };
    let mut parts = pointer
        .split('/')
        .map(|p| p.replace("~1", "/").replace("~0", "~"));
    let mut field = parts.next().unwrap_or_default();
    for part in parts {
        field.push('[');
        field.push_str(&part);
        field.push(']');
    }
    field
}

/// An `approval_show` or `operator_show` entry of an MCP route (an argument, by bracket path
/// or pointer) as a field of the JSON-RPC request: `amount` is `params[arguments][amount]`.
fn argument_in_request(entry: &str) -> String {
    crate::policy::argument_in_request(&argument_field(entry))
}

/// The segments of a match's path (its query or fragment, refused by the caller, left out);
/// each kind of mistake is added to `errors` once.
fn segments(path: &str, fix: &str, errors: &mut Vec<String>) -> Vec<Segment> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let mut segments = Vec::new();
    if path == "/" {
        return segments;
    }
    let mut add = |e: String| {
        if !errors.contains(&e) {
            errors.push(e);
        }
    };
    for raw in path.strip_prefix('/').unwrap_or(path).split('/') {
        if segments
            .last()
            .is_some_and(|s| matches!(s, Segment::Rest(_)))
        {
            add(format!(
                "a {{name*}} capture must be the last segment ({fix})"
            ));
        }
        match segment(raw, &segments) {
            Ok(segment) => segments.push(segment),
            Err(e) => add(e),
        }
    }
    segments
}

/// The capture names a match writes, `{name}` or `{name*}`, whether or not the match is
/// valid: a template's `{path:name}` is checked against them, so a mistake elsewhere in the
/// match earns no second error about its captures.
fn written_captures(text: &str) -> Vec<String> {
    text.split(|c: char| c == '/' || c.is_whitespace())
        .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| name.trim_end_matches('*').to_string())
        .collect()
}

pub(super) fn segment(raw: &str, before: &[Segment]) -> Result<Segment, String> {
    if raw.is_empty() {
        return Err("empty path segment (no \"//\" and no trailing \"/\")".into());
    }
    let Some(inner) = raw.strip_prefix('{').and_then(|r| r.strip_suffix('}')) else {
        if raw.contains(['{', '}']) {
            return Err(format!(
                "\"{raw}\": a capture is a whole segment, {{name}} or {{name*}}"
            ));
        }
        return Ok(Segment::Literal(raw.to_string()));
    };
    let (capture, rest) = match inner.strip_suffix('*') {
        Some(capture) => (capture, true),
        None => (inner, false),
    };
    let capture = name(capture.to_string(), "capture", false)?;
    let taken = before
        .iter()
        .any(|s| matches!(s, Segment::Capture(n) | Segment::Rest(n) if *n == capture));
    if taken {
        return Err(format!(
            "capture \"{capture}\" appears twice (capture names are unique)"
        ));
    }
    Ok(if rest {
        Segment::Rest(capture)
    } else {
        Segment::Capture(capture)
    })
}

pub(super) fn method(text: &str) -> Result<Method, String> {
    let upper = !text.bytes().any(|b| b.is_ascii_lowercase());
    match Method::from_bytes(text.as_bytes()) {
        Ok(method) if upper => Ok(method),
        _ => Err(format!(
            "\"{text}\" is not an HTTP method (write it in capitals, e.g. POST)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(s: &str) -> Segment {
        Segment::Literal(s.into())
    }

    #[test]
    fn a_tool_match_is_the_endpoint_and_a_name() {
        let (m, tool) = tool_matcher("tools/call  refund").unwrap();
        assert_eq!(
            (m.method, m.segments.len(), tool.as_str()),
            (Method::POST, 0, "refund")
        );
        for wrong in [
            "POST /refunds",
            "tools/call",
            "tools/call a b",
            "tools/list x",
        ] {
            let e = tool_matcher(wrong).unwrap_err();
            assert!(e.contains("tools/call NAME"), "{wrong}: {e}");
        }
    }

    #[test]
    fn argument_pointers_become_bracket_paths_in_the_request() {
        assert_eq!(argument_field("/metadata/trace~1id"), "metadata[trace/id]");
        assert_eq!(argument_field("/items/0/price"), "items[0][price]");
        assert_eq!(argument_field("note"), "note");
        assert_eq!(
            argument_in_request("/metadata/step"),
            "params[arguments][metadata][step]"
        );
        assert_eq!(argument_in_request("amount"), "params[arguments][amount]");
    }

    #[test]
    fn match_patterns_compile() {
        let m = matcher("POST /v1/refunds/{id}/cancel").unwrap();
        assert_eq!(m.method, Method::POST);
        let expected = [
            lit("v1"),
            lit("refunds"),
            Segment::Capture("id".into()),
            lit("cancel"),
        ];
        assert_eq!(m.segments, expected);
        let m = matcher("GET  /files/{path*}").unwrap();
        assert_eq!(m.segments, [lit("files"), Segment::Rest("path".into())]);
        assert!(matcher("GET /").unwrap().segments.is_empty());
        assert_eq!(matcher("PURGE /x").unwrap().method.as_str(), "PURGE");
    }

    #[test]
    fn match_patterns_refused() {
        let cases = [
            ("/v1/refunds", "a method and a path"),
            ("POST /v1 extra", "a method and a path"),
            ("post /v1", "capitals"),
            ("POST v1/refunds", "must start with"),
            ("POST /v1?x=1", "no query"),
            ("POST /v1//x", "empty path segment"),
            ("POST /v1/", "empty path segment"),
            ("POST /v1/re{id}", "whole segment"),
            ("POST /{a*}/b", "last segment"),
            ("POST /{a}/{a}", "appears twice"),
            ("POST /{Id}", "capture name"),
        ];
        for (text, why) in cases {
            let err = matcher(text).expect_err(text).join("; ");
            assert!(err.contains(why), "{text}: {err}");
        }
        let all = matcher("post /v1//{Id}/x?y").expect_err("four mistakes");
        assert_eq!(all.len(), 4, "{all:?}");
    }

    #[test]
    fn lookups_split_method_and_target() {
        let (method, template) = lookup("GET /v1/refunds?key={key}", &[]).unwrap();
        assert_eq!(method, Method::GET);
        assert_eq!(template.as_str(), "/v1/refunds?key={key}");
        assert!(lookup("GET", &[]).is_err());
        assert!(lookup("GET v1/refunds", &[]).is_err());
        assert!(lookup("get /v1", &[]).is_err());
    }

    #[test]
    fn empty_templates_are_refused() {
        assert!(
            template("", &[], false)
                .unwrap_err()
                .contains("empty template")
        );
    }
}
