//! A lookup's request line: the first `reconcile.lookup` template whose parts are all
//! present, rendered with its values URL-escaped, as a URL under the upstream's base path.
//! `{json:...}`, `{form:...}` and `{query:...}` read the operation's kept first request,
//! parsed here as the guard parses a request. It never sends anything, never judges an
//! answer (the parent module does both) and never logs or keeps a value it renders.

use http::{HeaderMap, Method, Uri};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

use super::LookupError;
use crate::body::{self, Body};
use crate::kept::KeptRequest;
use crate::policy::{Captures, Provider, Reconcile};
use crate::template::{Escape, Part, Rendered, Sources};
use crate::upstream;

/// What a lookup may read of the operation's kept first request: its query and its body.
#[derive(Debug)]
pub(super) struct First {
    query: Option<String>,
    body: Body,
}

impl First {
    /// The kept request's raw query and its body, parsed by its content type.
    pub(super) fn of(kept: KeptRequest) -> First {
        let query = kept
            .path_and_query
            .split_once('?')
            .map(|(_, query)| query.to_owned());
        First {
            query,
            body: body::parse(kept.content_type.as_ref(), kept.body),
        }
    }
}

/// Whether some template of the rule reads the first request (`json`, `form`, `query`).
pub(super) fn reads_request(rule: &Reconcile) -> bool {
    rule.lookups.iter().any(|lookup| {
        lookup
            .target
            .parts()
            .iter()
            .any(|p| matches!(p, Part::Json(_) | Part::Form(_) | Part::Query(_)))
    })
}

/// The names a lookup template may read besides the captures.
pub(super) struct LookupVars<'a> {
    pub provider: &'a str,
    pub route: &'a str,
    pub id: &'a str,
    pub key: &'a str,
    pub fingerprint: &'a str,
    /// The answer a `reconcile` rule matched, for `{answer:/pointer}`.
    pub answer: Option<&'a serde_json::Value>,
    /// The kept first request, for `{json:...}`, `{form:...}` and `{query:...}`; `None`
    /// when none is kept (or no template reads it).
    pub first: Option<&'a First>,
}

/// Characters `http::Uri` refuses (or that end a query) in a literal part of the template;
/// `%` stays, so escapes already in the template or made by `Escape::Url` survive.
const NOT_IN_URI: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'<')
    .add(b'>')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// The lookup's method and URL: the first template whose parts are all present, rendered
/// (values URL-escaped) under the upstream's base. A template that reads a body field the
/// first request's body cannot give (another kind of body, an object where a scalar is
/// needed) does not render either: the next one is tried. The error names only the parts
/// that were absent, never a value.
pub(super) fn lookup_uri(
    provider: &Provider,
    rule: &Reconcile,
    captures: &Captures,
    names: &LookupVars,
) -> Result<(Method, Uri), LookupError> {
    let headers = HeaderMap::new();
    let inputs = Sources {
        headers: &headers,
        query: names.first.and_then(|f| f.query.as_deref()),
        body: names.first.map_or(&Body::Empty, |f| &f.body),
        captures,
        provider: names.provider,
        route: names.route,
        fingerprint: Some(names.fingerprint),
        key: Some(names.key),
        operation_id: Some(names.id),
        answer: names.answer,
    };
    let mut absent = Vec::new();
    for lookup in &rule.lookups {
        match lookup.target.render(&inputs, Escape::Url) {
            Ok(Rendered::Value(v)) => return Ok((lookup.method.clone(), target(provider, &v)?)),
            Ok(Rendered::Missing(parts)) => absent.push(parts.join(", ")),
            Err(e) => absent.push(e.0),
        }
    }
    let unkept = match names.first {
        None if reads_request(rule) => " (the operation's first request is not kept)",
        _ => "",
    };
    Err(LookupError::Template(format!(
        "absent: {}{unkept}",
        absent.join("; ")
    )))
}

/// A rendered lookup target as a URL under the upstream's base path.
fn target(provider: &Provider, rendered: &str) -> Result<Uri, LookupError> {
    let safe = utf8_percent_encode(rendered, NOT_IN_URI).to_string();
    let (path, query) = match safe.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (safe.as_str(), None),
    };
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    Ok(upstream::target_uri(provider, &path, query)?)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::template::Template;

    fn provider(base_path: &str) -> Provider {
        Provider::example("pay", "/pay", base_path)
    }

    fn rule(lookup: &str) -> Reconcile {
        rules(&[lookup])
    }

    fn rules(lookups: &[&str]) -> Reconcile {
        let lookups = lookups.iter().map(|l| crate::policy::Lookup {
            method: Method::GET,
            target: Template::parse(l).expect("test template parses"),
        });
        Reconcile {
            lookups: lookups.collect(),
            found: "/data/0".into(),
            not_found_final_after: Duration::from_secs(60),
        }
    }

    fn names<'a>(id: &'a str, key: &'a str) -> LookupVars<'a> {
        LookupVars {
            provider: "pay",
            route: "refund",
            id,
            key,
            fingerprint: "f00d",
            answer: None,
            first: None,
        }
    }

    fn uri(base: &str, lookup: &str, captures: &Captures, id: &str) -> Result<Uri, LookupError> {
        lookup_uri(&provider(base), &rule(lookup), captures, &names(id, "k3y")).map(|(_, u)| u)
    }

    #[test]
    fn the_first_lookup_that_renders_wins_and_answer_parts_read_the_answer() {
        let rule = rules(&[
            "/customers/{answer:/error/links/id}",
            "/customers?key={key}",
        ]);
        let answer = serde_json::json!({"error": {"links": {"id": "CU 1"}}});
        let with_answer = LookupVars {
            answer: Some(&answer),
            ..names("x", "k3y")
        };
        let p = provider("");
        let (_, got) = lookup_uri(&p, &rule, &vec![], &with_answer).expect("renders");
        assert_eq!(got.to_string(), "https://api.example.com/customers/CU%201");
        let (_, got) = lookup_uri(&p, &rule, &vec![], &names("x", "k3y")).expect("renders");
        assert_eq!(got.to_string(), "https://api.example.com/customers?key=k3y");
        let only_answer = rules(&["/customers/{answer:/error/links/id}"]);
        let err = lookup_uri(&p, &only_answer, &vec![], &names("x", "k3y")).unwrap_err();
        assert!(
            matches!(&err, LookupError::Template(m) if m.contains("answer:/error/links/id")),
            "{err}"
        );
    }

    #[test]
    fn lookup_renders_values_escaped_under_the_base_path() {
        let captures = vec![("charge".to_string(), "ch 1".to_string())];
        let got = uri(
            "/api",
            "/v1/refunds?charge={path:charge}&metadata[operation]={key}&op={operation_id}",
            &captures,
            "pay/refund/wf-1",
        )
        .expect("lookup URI");
        assert_eq!(
            got.to_string(),
            "https://api.example.com/api/v1/refunds?charge=ch%201\
             &metadata%5Boperation%5D=k3y&op=pay%2Frefund%2Fwf-1"
        );
    }

    #[test]
    fn lookup_without_leading_slash_or_query_still_lands_under_the_upstream() {
        let got = uri("", "v1/refunds/{key}", &vec![], "x").expect("lookup URI");
        assert_eq!(got.to_string(), "https://api.example.com/v1/refunds/k3y");
    }

    #[test]
    fn a_lookup_part_that_is_absent_is_a_template_error() {
        let err = uri("", "/v1/refunds/{path:missing}", &vec![], "x").unwrap_err();
        assert!(
            matches!(&err, LookupError::Template(m) if m.contains("path:missing")),
            "{err}"
        );
    }

    fn first(content_type: &'static str, body: &'static str) -> First {
        First::of(KeptRequest {
            method: Method::POST,
            path_and_query: "/v1/payments?channel=web+shop".into(),
            content_type: Some(http::HeaderValue::from_static(content_type)),
            body: bytes::Bytes::from_static(body.as_bytes()),
        })
    }

    #[test]
    fn lookups_read_the_kept_first_request_and_fall_through_what_it_lacks() {
        let rule = rules(&[
            "/payments?reference={json:/reference}&channel={query:channel}",
            "/payments?step={form:metadata[step]}",
            "/payments?key={key}",
        ]);
        let p = provider("");
        let render = |first: Option<&First>| {
            let names = LookupVars {
                first,
                ..names("x", "k3y")
            };
            lookup_uri(&p, &rule, &vec![], &names).map(|(_, u)| u.to_string())
        };
        let json = first("application/json", r#"{"reference":"ORD 1/2"}"#);
        assert_eq!(
            render(Some(&json)).expect("renders"),
            "https://api.example.com/payments?reference=ORD%201%2F2&channel=web%20shop"
        );
        let form = first(
            "application/x-www-form-urlencoded",
            "metadata%5Bstep%5D=s+2",
        );
        assert_eq!(
            render(Some(&form)).expect("a form is not JSON: the next template"),
            "https://api.example.com/payments?step=s%202"
        );
        let neither = first("application/json", r#"{"reference":null}"#);
        assert_eq!(
            render(Some(&neither)).expect("the last template"),
            "https://api.example.com/payments?key=k3y"
        );
        assert_eq!(
            render(None).expect("nothing kept: only {key} renders"),
            "https://api.example.com/payments?key=k3y"
        );
        assert!(reads_request(&rule));
        assert!(!reads_request(&rules(&["/payments?key={key}"])));
    }

    #[test]
    fn without_a_kept_request_no_body_template_renders_and_no_value_is_named() {
        let rule = rules(&["/payments?reference={json:/reference}"]);
        let p = provider("");
        let err = lookup_uri(&p, &rule, &vec![], &names("x", "k3y")).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("json:/reference"), "{text}");
        assert!(text.contains("not kept"), "{text}");
        let secret = first("application/json", r#"{"reference":{"card":"4242"}}"#);
        let names = LookupVars {
            first: Some(&secret),
            ..names("x", "k3y")
        };
        let text = lookup_uri(&p, &rule, &vec![], &names)
            .unwrap_err()
            .to_string();
        assert!(text.contains("an object"), "{text}");
        assert!(!text.contains("4242"), "{text}");
    }
}
