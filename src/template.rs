//! The template language of docs/reference.md section 4: literal text with `{source:argument}` parts.
//!
//! This module owns parsing templates (with messages that say what is wrong and how to fix
//! it) and rendering them against one request. It never decides what a missing part means
//! (`on_missing_id` is the caller's) and never checks which sources a given key may use
//! (config does that with [`Template::parts`] and [`Template::path_names`]).

use http::{HeaderMap, HeaderName};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use crate::body::Body;

/// One part of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Literal(String),
    /// `{header:NAME}`, case-insensitive.
    Header(HeaderName),
    /// `{json:/pointer}`.
    Json(String),
    /// `{form:field}`.
    Form(String),
    /// `{query:field}`.
    Query(String),
    /// `{path:name}`.
    Path(String),
    Fingerprint,
    Provider,
    Route,
    /// `{key}`: only in `reconcile.lookup`.
    Key,
    /// `{operation_id}`: only in `reconcile.lookup`.
    OperationId,
    /// `{answer:/pointer}`: a scalar of the provider's answer that triggered a
    /// `means = "reconcile"` rule; only in `reconcile.lookup`.
    Answer(String),
}

impl Part {
    /// How the part is named in messages and in a 422's `missing` list: `header:x-workflow-id`,
    /// `json:/amount`, `form:metadata[step]`, `path:id`, `fingerprint`; `None` for literals.
    pub fn label(&self) -> Option<String> {
        Some(match self {
            Part::Literal(_) => return None,
            Part::Header(name) => format!("header:{name}"),
            Part::Json(pointer) => format!("json:{pointer}"),
            Part::Form(field) => format!("form:{field}"),
            Part::Query(field) => format!("query:{field}"),
            Part::Path(name) => format!("path:{name}"),
            Part::Fingerprint => "fingerprint".into(),
            Part::Provider => "provider".into(),
            Part::Route => "route".into(),
            Part::Key => "key".into(),
            Part::OperationId => "operation_id".into(),
            Part::Answer(pointer) => format!("answer:{pointer}"),
        })
    }
}

/// Why a template does not parse; the message says what is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    source: String,
    parts: Vec<Part>,
}

const SOURCES: &str =
    "header, json, form, query, path, fingerprint, provider, route, key, operation_id, answer";

impl Template {
    /// Parses a template. `{{` and `}}` are literal braces; every other `{` opens a part that
    /// the next `}` closes. An empty template, an unknown source, a missing or empty argument,
    /// an argument where none is taken, an invalid header name or JSON pointer, an unclosed
    /// `{` and a stray `}` are errors.
    pub fn parse(source: &str) -> Result<Template, ParseError> {
        if source.is_empty() {
            return Err(ParseError(
                "empty template (write at least one part, like \"{header:x-operation-id}\")".into(),
            ));
        }
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = source;
        while let Some(c) = rest.chars().next() {
            let at = source.len() - rest.len();
            if rest.starts_with("{{") || rest.starts_with("}}") {
                literal.push(c);
                rest = &rest[2..];
            } else if c == '}' {
                return Err(ParseError(format!(
                    "stray \"}}\" at byte {at} (write \"}}}}\" for a literal brace)"
                )));
            } else if c == '{' {
                let Some(end) = rest.find('}') else {
                    return Err(unclosed(at));
                };
                let inner = &rest[1..end];
                if inner.contains('{') {
                    return Err(unclosed(at));
                }
                if !literal.is_empty() {
                    parts.push(Part::Literal(std::mem::take(&mut literal)));
                }
                parts.push(parse_part(inner)?);
                rest = &rest[end + 1..];
            } else {
                literal.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        Ok(Template {
            source: source.to_string(),
            parts,
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The parsed parts, literals merged, in order.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The `{path:NAME}` capture names this template reads, in order (config checks each
    /// against the route's `match`).
    pub fn path_names(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Path(name) => Some(name.as_str()),
            _ => None,
        })
    }

    /// Renders the template against one request.
    ///
    /// Every part is read: if any is absent or empty the answer is `Missing` with the labels
    /// of all of them, in order. A part that cannot be read from the body (wrong body kind,
    /// object or array where a scalar is needed) is an `InvalidBody` error, whatever the
    /// other parts say. With [`Escape::Url`] each substituted value (never a literal) is
    /// percent-encoded as a URL path or query component.
    pub fn render(&self, inputs: &Sources, escape: Escape) -> Result<Rendered, InvalidBody> {
        let mut out = String::new();
        let mut missing = Vec::new();
        for part in &self.parts {
            if let Part::Literal(text) = part {
                out.push_str(text);
                continue;
            }
            match value(part, inputs)? {
                Some(v) if !v.is_empty() => match escape {
                    Escape::None => out.push_str(&v),
                    Escape::Url => out.extend(utf8_percent_encode(&v, URL_COMPONENT)),
                },
                _ => missing.extend(part.label()),
            }
        }
        Ok(if missing.is_empty() {
            Rendered::Value(out)
        } else {
            Rendered::Missing(missing)
        })
    }
}

fn unclosed(at: usize) -> ParseError {
    ParseError(format!(
        "unclosed \"{{\" at byte {at} (write \"{{{{\" for a literal brace)"
    ))
}

/// Parses the inside of `{...}`.
fn parse_part(inner: &str) -> Result<Part, ParseError> {
    let (source, argument) = match inner.split_once(':') {
        Some((s, a)) => (s, Some(a)),
        None => (inner, None),
    };
    let bare = match source {
        "fingerprint" => Some(Part::Fingerprint),
        "provider" => Some(Part::Provider),
        "route" => Some(Part::Route),
        "key" => Some(Part::Key),
        "operation_id" => Some(Part::OperationId),
        "header" | "json" | "form" | "query" | "path" | "answer" => None,
        _ => {
            return Err(ParseError(format!(
                "unknown source \"{source}\" (expected {SOURCES})"
            )));
        }
    };
    match (bare, argument) {
        (Some(part), None) => Ok(part),
        (Some(_), Some(_)) => Err(ParseError(format!(
            "\"{{{inner}}}\": {source} takes no argument (write \"{{{source}}}\")"
        ))),
        (None, None) => Err(ParseError(format!(
            "\"{{{inner}}}\": {source} needs an argument (write \"{{{source}:NAME}}\")"
        ))),
        (None, Some("")) => Err(ParseError(format!(
            "\"{{{inner}}}\": empty argument (write what to read after \":\")"
        ))),
        (None, Some(arg)) => parse_argument(inner, source, arg),
    }
}

fn parse_argument(inner: &str, source: &str, arg: &str) -> Result<Part, ParseError> {
    match source {
        "header" => HeaderName::from_bytes(arg.as_bytes())
            .map(Part::Header)
            .map_err(|_| {
                ParseError(format!(
                    "\"{{{inner}}}\": \"{arg}\" is not a valid header name (letters, digits and !#$%&'*+-.^_`|~ only)"
                ))
            }),
        "json" => check_pointer(arg)
            .map(|()| Part::Json(arg.to_string()))
            .map_err(|why| ParseError(format!("\"{{{inner}}}\": {why}"))),
        "answer" => check_pointer(arg)
            .map(|()| Part::Answer(arg.to_string()))
            .map_err(|why| ParseError(format!("\"{{{inner}}}\": {why}"))),
        "form" => Ok(Part::Form(arg.to_string())),
        "query" => Ok(Part::Query(arg.to_string())),
        _ => Ok(Part::Path(arg.to_string())),
    }
}

/// Checks RFC 6901 syntax: a leading `/`, and `~` only as `~0` or `~1`.
pub fn check_pointer(pointer: &str) -> Result<(), String> {
    if !pointer.starts_with('/') {
        return Err("a JSON pointer starts with \"/\" (write \"/field\")".into());
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(
                "in a JSON pointer \"~\" must be \"~0\" (for \"~\") or \"~1\" (for \"/\")".into(),
            );
        }
    }
    Ok(())
}

/// What a template is rendered against: one request and the names around it.
#[derive(Debug, Clone, Copy)]
pub struct Sources<'a> {
    pub headers: &'a HeaderMap,
    /// The raw query string, without `?`.
    pub query: Option<&'a str>,
    pub body: &'a Body,
    /// Captures from the route's `match`, as they appear in the path (still percent-encoded).
    pub captures: &'a [(String, String)],
    pub provider: &'a str,
    pub route: &'a str,
    pub fingerprint: Option<&'a str>,
    pub key: Option<&'a str>,
    pub operation_id: Option<&'a str>,
    /// The answer that triggered a `means = "reconcile"` rule, for `{answer:/pointer}`.
    pub answer: Option<&'a serde_json::Value>,
}

/// How substituted values are written into the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escape {
    /// As they are (operation IDs).
    None,
    /// Percent-encoded as a URL path or query component (`reconcile.lookup`); everything but
    /// ASCII letters, digits and `-._~` is escaped. Literals are never escaped.
    Url,
}

/// A rendered template, or what it lacked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rendered {
    Value(String),
    /// The parts absent or empty, labelled like `header:x-workflow-id` or `json:/amount`.
    Missing(Vec<String>),
}

/// A part could not be read from the body; the message is for a person.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidBody(pub String);

/// Unreserved characters (RFC 3986) stay; everything else is escaped.
const URL_COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The first template whose parts are all present and non-empty wins; else the missing parts
/// of each template, in order.
///
/// Templates are tried in order and the search stops at the winner, so a later template is
/// never read. An `InvalidBody` from a template tried before the winner is returned as is:
/// the body contradicts what the policy expects, and that is the client's to fix.
pub fn render_first(
    templates: &[Template],
    inputs: &Sources,
) -> Result<Result<String, Vec<Vec<String>>>, InvalidBody> {
    let mut all_missing = Vec::new();
    for template in templates {
        match template.render(inputs, Escape::None)? {
            Rendered::Value(v) => return Ok(Ok(v)),
            Rendered::Missing(m) => all_missing.push(m),
        }
    }
    Ok(Err(all_missing))
}

/// The value of one non-literal part; `None` when absent.
fn value(part: &Part, inputs: &Sources) -> Result<Option<String>, InvalidBody> {
    Ok(match part {
        Part::Literal(text) => Some(text.clone()),
        // A value that is not UTF-8 cannot be part of an ID: it counts as absent.
        Part::Header(name) => inputs
            .headers
            .get(name)
            .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
            .map(str::to_string),
        Part::Json(pointer) => json_value(inputs.body, pointer)?,
        Part::Form(field) => form_value(inputs.body, field)?,
        Part::Query(field) => inputs.query.and_then(|q| query_value(q, field)),
        Part::Path(name) => inputs
            .captures
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| decode_capture(v)),
        Part::Fingerprint => inputs.fingerprint.map(str::to_string),
        Part::Provider => Some(inputs.provider.to_string()),
        Part::Route => Some(inputs.route.to_string()),
        Part::Key => inputs.key.map(str::to_string),
        Part::OperationId => inputs.operation_id.map(str::to_string),
        Part::Answer(pointer) => inputs.answer.and_then(|a| scalar(a.pointer(pointer)?)),
    })
}

/// The first value of the query parameter `field`, decoded like a form. A value that is not
/// UTF-8 once decoded counts as absent, as a header's does: decoded lossily, `%FF` and `%FE`
/// would both read U+FFFD, one operation ID for two intents.
fn query_value(query: &str, field: &str) -> Option<String> {
    let decode = |raw: &str| crate::body::decode_component(raw.as_bytes());
    query
        .split('&')
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
        .find(|(name, _)| decode(name).is_some_and(|name| name == field))
        .and_then(|(_, value)| decode(value))
}

/// A capture is read percent-decoded, so `ch%5F1` and `ch_1` name the same thing; a capture
/// whose escapes do not decode to UTF-8 is used as written.
fn decode_capture(raw: &str) -> String {
    percent_decode_str(raw)
        .decode_utf8()
        .map(|s| s.into_owned())
        .unwrap_or_else(|_| raw.to_string())
}

/// A string as is, a number or boolean as JSON text; anything else is absent.
fn scalar(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => Some(s.clone()),
        v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_)) => Some(v.to_string()),
        _ => None,
    }
}

fn json_value(body: &Body, pointer: &str) -> Result<Option<String>, InvalidBody> {
    let value = match body {
        Body::Empty => return Ok(None),
        Body::Json(v) => v,
        other => return Err(wrong_body(other, "JSON", &format!("json:{pointer}"))),
    };
    Ok(match value.pointer(pointer) {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
            Some(v.to_string())
        }
        Some(v) => {
            let kind = if v.is_object() {
                "an object"
            } else {
                "an array"
            };
            return Err(InvalidBody(format!(
                "the template reads \"json:{pointer}\", which is {kind} in the body; it must be a string, number or boolean"
            )));
        }
    })
}

fn form_value(body: &Body, field: &str) -> Result<Option<String>, InvalidBody> {
    match body {
        Body::Empty => Ok(None),
        Body::Form(pairs) => Ok(pairs
            .iter()
            .find(|(k, _)| k == field)
            .map(|(_, v)| v.clone())),
        other => Err(wrong_body(
            other,
            "a urlencoded form",
            &format!("form:{field}"),
        )),
    }
}

fn wrong_body(body: &Body, wanted: &str, label: &str) -> InvalidBody {
    InvalidBody(match body {
        Body::Malformed { .. } => format!(
            "the body is {}, but the template reads \"{label}\"",
            body.describe()
        ),
        _ => format!(
            "the body is not {wanted} (it is {}), but the template reads \"{label}\"",
            body.describe()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::HeaderValue;
    use serde_json::json;

    fn t(s: &str) -> Template {
        Template::parse(s).expect("template parses")
    }

    fn err(s: &str) -> String {
        Template::parse(s).expect_err("template is rejected").0
    }

    struct Req {
        headers: HeaderMap,
        query: Option<&'static str>,
        body: Body,
        captures: Vec<(String, String)>,
    }

    impl Req {
        fn new(body: Body) -> Req {
            Req {
                headers: HeaderMap::new(),
                query: None,
                body,
                captures: vec![],
            }
        }

        fn inputs(&self) -> Sources<'_> {
            Sources {
                headers: &self.headers,
                query: self.query,
                body: &self.body,
                captures: &self.captures,
                provider: "stripe",
                route: "create_refund",
                fingerprint: Some("abc123"),
                key: None,
                operation_id: None,
                answer: None,
            }
        }

        fn render(&self, template: &str) -> Result<Rendered, InvalidBody> {
            t(template).render(&self.inputs(), Escape::None)
        }
    }

    fn value(s: &str) -> Result<Rendered, InvalidBody> {
        Ok(Rendered::Value(s.to_string()))
    }

    fn missing(labels: &[&str]) -> Result<Rendered, InvalidBody> {
        Ok(Rendered::Missing(
            labels.iter().map(|s| s.to_string()).collect(),
        ))
    }

    fn form(pairs: &[(&str, &str)]) -> Body {
        Body::Form(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn parses_parts_and_literal_braces() {
        let parts = t("{{x}}:{header:X-Workflow-Id}:{form:metadata[step]}-{fingerprint}").parts;
        assert_eq!(
            parts,
            vec![
                Part::Literal("{x}:".into()),
                Part::Header(HeaderName::from_static("x-workflow-id")),
                Part::Literal(":".into()),
                Part::Form("metadata[step]".into()),
                Part::Literal("-".into()),
                Part::Fingerprint,
            ]
        );
        assert_eq!(t("a{key}").as_str(), "a{key}");
        assert_eq!(
            t("{json:/a~1b}{query:q}{path:id}{provider}{route}{operation_id}")
                .parts
                .len(),
            6
        );
    }

    #[test]
    fn parse_errors_say_what_and_how_to_fix() {
        assert_eq!(
            err("{hedaer:x}"),
            "unknown source \"hedaer\" (expected header, json, form, query, path, fingerprint, provider, route, key, operation_id, answer)"
        );
        assert_eq!(
            err("wf-{header:x}:{form:a"),
            "unclosed \"{\" at byte 14 (write \"{{\" for a literal brace)"
        );
        assert_eq!(
            err("a}b"),
            "stray \"}\" at byte 1 (write \"}}\" for a literal brace)"
        );
        assert_eq!(
            err("{json:x}"),
            "\"{json:x}\": a JSON pointer starts with \"/\" (write \"/field\")"
        );
        assert!(err("{json:/a~2}").contains("\"~0\""));
        assert!(err("{header:}").contains("empty argument"));
        assert!(err("{header}").contains("header needs an argument"));
        assert!(err("{fingerprint:x}").contains("takes no argument"));
        assert!(err("{header:x y}").contains("not a valid header name"));
        assert!(err("{a{header:x}}").contains("unclosed"));
        assert!(err("").contains("empty template"));
    }

    #[test]
    fn renders_every_source() {
        let mut req = Req::new(Body::Json(json!({
            "amount": 500, "live": true, "charge": "ch_1", "meta": {"step": 2.5}
        })));
        req.headers
            .insert("x-workflow-id", HeaderValue::from_static("wf-81"));
        req.query = Some("a=1&q=x+y%21&q=2");
        req.captures = vec![("id".into(), "re%5F1".into())];
        assert_eq!(
            req.render("{header:x-workflow-id}:{json:/charge}:{json:/amount}:{json:/live}:{json:/meta/step}"),
            value("wf-81:ch_1:500:true:2.5")
        );
        assert_eq!(
            req.render("{query:q}/{path:id}/{provider}/{route}/{fingerprint}"),
            value("x y!/re_1/stripe/create_refund/abc123")
        );
    }

    #[test]
    fn absent_empty_and_null_parts_are_missing_all_named() {
        let mut req = Req::new(Body::Json(json!({"amount": null, "empty": ""})));
        req.headers
            .insert("x-operation-id", HeaderValue::from_static(""));
        assert_eq!(
            req.render(
                "{header:x-operation-id}:{json:/amount}:{json:/empty}:{json:/nope}:{path:id}:{key}"
            ),
            missing(&[
                "header:x-operation-id",
                "json:/amount",
                "json:/empty",
                "json:/nope",
                "path:id",
                "key"
            ])
        );
        assert_eq!(
            Req::new(Body::Empty).render("{form:a}-{json:/a}"),
            missing(&["form:a", "json:/a"])
        );
    }

    #[test]
    fn non_utf8_header_counts_as_missing_but_utf8_is_read() {
        let mut req = Req::new(Body::Empty);
        let raw = HeaderValue::from_bytes(b"caf\xff").expect("opaque header");
        req.headers.insert("x-a", raw);
        let utf8 = HeaderValue::from_bytes("café".as_bytes()).expect("utf-8 header");
        req.headers.insert("x-b", utf8);
        assert_eq!(req.render("{header:x-a}"), missing(&["header:x-a"]));
        assert_eq!(req.render("{header:X-B}"), value("café"));
    }

    #[test]
    fn forms_read_the_first_value_of_the_exact_field() {
        let req = Req::new(form(&[("metadata[step]", "2"), ("a", "1"), ("a", "9")]));
        assert_eq!(req.render("{form:metadata[step]}:{form:a}"), value("2:1"));
        assert_eq!(req.render("{form:metadata}"), missing(&["form:metadata"]));
    }

    #[test]
    fn wrong_body_kinds_and_non_scalars_are_invalid_body() {
        let json_req = Req::new(Body::Json(json!({"o": {}, "a": [1]})));
        let e = json_req
            .render("{form:a}")
            .expect_err("json body read as form");
        assert!(e.0.contains("the body is not a urlencoded form"), "{e}");
        assert!(
            json_req
                .render("{json:/o}")
                .expect_err("object")
                .0
                .contains("an object")
        );
        assert!(
            json_req
                .render("{json:/a}")
                .expect_err("array")
                .0
                .contains("an array")
        );
        let form_req = Req::new(form(&[("amount", "5")]));
        let e = form_req
            .render("{header:x}{json:/amount}")
            .expect_err("form read as json");
        assert_eq!(
            e.0,
            "the body is not JSON (it is a urlencoded form), but the template reads \"json:/amount\""
        );
        let bytes_req = Req::new(Body::Bytes(Bytes::from_static(b"x")));
        assert!(bytes_req.render("{json:/a}").is_err());
        let bad = Req::new(Body::Malformed {
            kind: "json",
            bytes: Bytes::from_static(b"{"),
        });
        let e = bad.render("{json:/a}").expect_err("malformed");
        assert!(e.0.contains("declared JSON but does not parse"), "{e}");
    }

    #[test]
    fn url_escape_encodes_values_not_literals() {
        let mut req = Req::new(Body::Empty);
        req.headers
            .insert("x-id", HeaderValue::from_str("a b/c&d=é~").expect("header"));
        let inputs = req.inputs();
        let out = t("/v1/x?m[op]={header:x-id}&k={provider}").render(&inputs, Escape::Url);
        assert_eq!(out, value("/v1/x?m[op]=a%20b%2Fc%26d%3D%C3%A9~&k=stripe"));
    }

    #[test]
    fn first_complete_template_wins_else_all_missing() {
        let mut req = Req::new(form(&[("charge", "ch_1"), ("metadata[step]", "2")]));
        let templates = [
            t("{header:x-operation-id}"),
            t("{header:x-workflow-id}:{form:charge}:refund:{form:metadata[step]}"),
        ];
        assert_eq!(
            render_first(&templates, &req.inputs()),
            Ok(Err(vec![
                vec!["header:x-operation-id".to_string()],
                vec!["header:x-workflow-id".to_string()],
            ]))
        );
        req.headers
            .insert("x-workflow-id", HeaderValue::from_static("wf-81"));
        assert_eq!(
            render_first(&templates, &req.inputs()),
            Ok(Ok("wf-81:ch_1:refund:2".into()))
        );
        req.headers
            .insert("x-operation-id", HeaderValue::from_static("op-7"));
        assert_eq!(
            render_first(&templates, &req.inputs()),
            Ok(Ok("op-7".into()))
        );
    }

    #[test]
    fn a_winner_stops_the_search_before_a_body_error() {
        let mut req = Req::new(form(&[("a", "1")]));
        req.headers
            .insert("x-operation-id", HeaderValue::from_static("op-7"));
        let templates = [t("{header:x-operation-id}"), t("{json:/a}")];
        assert_eq!(
            render_first(&templates, &req.inputs()),
            Ok(Ok("op-7".into()))
        );
        let templates = [t("{json:/a}"), t("{header:x-operation-id}")];
        assert!(render_first(&templates, &req.inputs()).is_err());
    }

    #[test]
    fn path_names_lists_captures_read() {
        let names: Vec<_> = t("{path:id}-{header:x}-{path:sub}")
            .path_names()
            .map(String::from)
            .collect();
        assert_eq!(names, ["id", "sub"]);
    }

    #[test]
    fn answer_parts_read_scalars_of_the_answer_and_nothing_else() {
        assert_eq!(
            t("/p/{answer:/error/links/id}").parts()[1],
            Part::Answer("/error/links/id".into())
        );
        assert!(err("{answer:error}").contains("starts with"));
        let answer = json!({"error": {"links": {"id": "PM1"}, "n": 7, "list": [1]}});
        let req = Req::new(Body::Empty);
        let with = Sources {
            answer: Some(&answer),
            ..req.inputs()
        };
        let render = |text: &str, inputs: &Sources| t(text).render(inputs, Escape::None).unwrap();
        assert_eq!(
            render("/p/{answer:/error/links/id}", &with),
            value("/p/PM1").unwrap()
        );
        assert_eq!(render("{answer:/error/n}", &with), value("7").unwrap());
        let missing = |label: &str| Rendered::Missing(vec![label.to_string()]);
        assert_eq!(
            render("{answer:/error/list}", &with),
            missing("answer:/error/list")
        );
        assert_eq!(render("{answer:/nope}", &with), missing("answer:/nope"));
        assert_eq!(
            render("{answer:/error/n}", &req.inputs()),
            missing("answer:/error/n"),
            "no answer at hand"
        );
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_or_fails_without_panicking(text in "[a-z{}:/ ]{0,24}") {
            let _ = Template::parse(&text);
        }

        #[test]
        fn doubled_braces_always_render_the_text_itself(text in "[a-z{}:/é ]{1,24}") {
            let escaped = text.replace('{', "{{").replace('}', "}}");
            let req = Req::new(Body::Empty);
            proptest::prop_assert_eq!(req.render(&escaped), value(&text));
        }
    }
}
