//! A lookup's request line: the first `reconcile.lookup` template whose parts are all
//! present, rendered with its values URL-escaped, as a URL under the upstream's base path.
//! It never sends anything and never judges an answer (the parent module does both).

use http::{HeaderMap, Method, Uri};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

use super::LookupError;
use crate::body::Body;
use crate::policy::{Captures, Provider, Reconcile};
use crate::template::{Escape, Inputs, Rendered};
use crate::upstream;

/// The names a lookup template may read besides the captures.
pub(super) struct Names<'a> {
    pub provider: &'a str,
    pub route: &'a str,
    pub id: &'a str,
    pub key: &'a str,
    pub fingerprint: &'a str,
    /// The answer a `reconcile` rule matched, for `{answer:/pointer}`.
    pub answer: Option<&'a serde_json::Value>,
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
/// (values URL-escaped) under the upstream's base.
pub(super) fn lookup_uri(
    provider: &Provider,
    rule: &Reconcile,
    captures: &Captures,
    names: &Names,
) -> Result<(Method, Uri), LookupError> {
    let headers = HeaderMap::new();
    let inputs = Inputs {
        headers: &headers,
        query: None,
        body: &Body::Empty,
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
            Err(e) => return Err(LookupError::Template(e.0)),
        }
    }
    Err(LookupError::Template(format!(
        "absent: {}",
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
    upstream::target_uri(provider, &path, query).map_err(LookupError::Uri)
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

    fn names<'a>(id: &'a str, key: &'a str) -> Names<'a> {
        Names {
            provider: "pay",
            route: "refund",
            id,
            key,
            fingerprint: "f00d",
            answer: None,
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
        let with_answer = Names {
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
}
