//! The proxy's own problem answers, shaped for the provider's SDK where they leave the proxy.
//!
//! Official SDKs parse errors in their provider's envelope and decide retries from
//! provider-specific headers, and they take every 2xx for the object they asked for. A policy
//! may therefore answer the "not yet" problems (`outcome-unknown`, `in-flight`,
//! `awaiting-approval`) with its `pending_status` instead of 202, and add headers and body
//! members to chosen problems (`[[provider.answer]]`), or send them as `application/json` for
//! an SDK that reads no other media type. This module owns both, applied once, in
//! `proxy`, to every problem answer of a provider (found by the [`Own`] mark `problem` leaves
//! in its extensions). It never touches a provider's answer or a replay (they carry no mark),
//! never removes or changes an RFC 9457 member or one of the proxy's own (config refuses
//! them), never sends a media type but the two below, and knows no provider by name.

use http::{HeaderName, HeaderValue, Response, StatusCode, header};
use serde_json::{Map, Value};

use crate::policy::Provider;
use crate::problem::Own;
use crate::wire::{ProxyBody, full};

/// One `[[provider.answer]]`: which problems it shapes, and what it adds.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerShape {
    /// Short problem names (`parameter-mismatch`); `None`: every problem (`["*"]`).
    pub problems: Option<Vec<String>>,
    pub headers: Vec<(HeaderName, Text)>,
    /// Members added to the problem+json object, in order.
    pub body: Vec<(String, Shaped)>,
    pub content_type: MediaType,
}

/// The `Content-Type` of a shaped answer. The body is the same RFC 9457 object either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MediaType {
    /// `application/problem+json`, as every unshaped problem answer.
    #[default]
    ProblemJson,
    /// `application/json`, for SDKs that read no other media type.
    Json,
}

/// The media types by name.
pub const MEDIA_TYPES: &[(&str, MediaType)] = &[
    ("application/problem+json", MediaType::ProblemJson),
    ("application/json", MediaType::Json),
];

impl MediaType {
    fn header(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            MediaType::ProblemJson => "application/problem+json",
            MediaType::Json => "application/json",
        })
    }
}

impl AnswerShape {
    fn applies_to(&self, kind: &str) -> bool {
        self.problems
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == kind))
    }
}

/// A value of a shaped body.
#[derive(Debug, Clone, PartialEq)]
pub enum Shaped {
    /// A string with placeholders.
    Text(Text),
    /// A string that is exactly `{status}`, `{retry_after}` or `{retry_after_ms}`: a number.
    Number(Hole),
    /// A number, a boolean.
    Literal(Value),
    Object(Vec<(String, Shaped)>),
    Array(Vec<Shaped>),
}

/// A placeholder of a shaped header value or body string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hole {
    Detail,
    Title,
    /// The full URN.
    Type,
    /// The short name.
    Problem,
    Status,
    OperationId,
    /// Seconds.
    RetryAfter,
    RetryAfterMs,
}

/// The placeholders by name.
pub const HOLES: &[(&str, Hole)] = &[
    ("detail", Hole::Detail),
    ("title", Hole::Title),
    ("type", Hole::Type),
    ("problem", Hole::Problem),
    ("status", Hole::Status),
    ("operation_id", Hole::OperationId),
    ("retry_after", Hole::RetryAfter),
    ("retry_after_ms", Hole::RetryAfterMs),
];

/// Text with `{placeholder}`s; `{{` and `}}` are literal braces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text {
    parts: Vec<Piece>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(String),
    Hole(Hole),
}

impl Text {
    /// Parses `"{detail} (see {operation_id})"`. An unknown placeholder, an unclosed `{` or a
    /// stray `}` is an error naming the fix.
    pub fn parse(text: &str) -> Result<Text, String> {
        let names: Vec<&str> = HOLES.iter().map(|(n, _)| *n).collect();
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            if rest.starts_with("{{") || rest.starts_with("}}") {
                literal.push(c);
                rest = &rest[2..];
            } else if c == '}' {
                return Err(format!("\"{text}\": stray \"}}\" (write \"}}}}\")"));
            } else if c == '{' {
                let Some(end) = rest.find('}') else {
                    return Err(format!("\"{text}\": unclosed \"{{\" (write \"{{{{\")"));
                };
                let name = &rest[1..end];
                let Some((_, hole)) = HOLES.iter().find(|(n, _)| *n == name) else {
                    return Err(format!(
                        "\"{text}\": unknown placeholder {{{name}}} (expected {})",
                        names.join(", ")
                    ));
                };
                if !literal.is_empty() {
                    parts.push(Piece::Literal(std::mem::take(&mut literal)));
                }
                parts.push(Piece::Hole(*hole));
                rest = &rest[end + 1..];
            } else {
                literal.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
        if !literal.is_empty() {
            parts.push(Piece::Literal(literal));
        }
        Ok(Text { parts })
    }

    /// The text alone, if it is exactly one placeholder.
    pub fn only_hole(&self) -> Option<Hole> {
        match self.parts[..] {
            [Piece::Hole(hole)] => Some(hole),
            _ => None,
        }
    }

    /// The rendered text; `None` if a placeholder has no value for this answer.
    fn render(&self, values: &Values) -> Option<String> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Piece::Literal(text) => out.push_str(text),
                Piece::Hole(hole) => out.push_str(&values.text(*hole)?),
            }
        }
        Some(out)
    }
}

/// The placeholders' values for one answer.
struct Values<'a> {
    own: &'a Own,
    status: u16,
}

impl Values<'_> {
    fn member(&self, name: &str) -> Option<String> {
        self.own.body.get(name)?.as_str().map(str::to_string)
    }

    fn number(&self, hole: Hole) -> Option<u64> {
        let after = self.own.retry_after;
        match hole {
            Hole::Status => Some(u64::from(self.status)),
            Hole::RetryAfter => after.map(|d| d.as_secs()),
            Hole::RetryAfterMs => after.map(|d| d.as_millis() as u64),
            _ => None,
        }
    }

    fn text(&self, hole: Hole) -> Option<String> {
        match hole {
            Hole::Detail => self.member("detail"),
            Hole::Title => self.member("title"),
            Hole::Type => self.member("type"),
            Hole::Problem => Some(self.own.kind.to_string()),
            Hole::OperationId => self.member("operation_id"),
            Hole::Status | Hole::RetryAfter | Hole::RetryAfterMs => {
                self.number(hole).map(|n| n.to_string())
            }
        }
    }

    /// A body value; `None` (the member is left out) where a placeholder has no value.
    fn value(&self, shaped: &Shaped) -> Option<Value> {
        Some(match shaped {
            Shaped::Text(text) => Value::from(text.render(self)?),
            Shaped::Number(hole) => Value::from(self.number(*hole)?),
            Shaped::Literal(value) => value.clone(),
            Shaped::Object(members) => Value::Object(self.members(members)),
            Shaped::Array(items) => items.iter().filter_map(|i| self.value(i)).collect(),
        })
    }

    fn members(&self, members: &[(String, Shaped)]) -> Map<String, Value> {
        members
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), self.value(v)?)))
            .collect()
    }
}

/// Shapes `resp` for `provider` if it is one of the proxy's own problem answers: the pending
/// status first (so `{status}` is the one sent), then the first `[[provider.answer]]` that
/// names the problem.
pub fn apply(provider: &Provider, resp: &mut Response<ProxyBody>) {
    let Some(mut own) = resp.extensions_mut().remove::<Own>() else {
        return;
    };
    let mut changed = false;
    if own.pending
        && provider.pending_status != 202
        && let Ok(status) = StatusCode::from_u16(provider.pending_status)
    {
        *resp.status_mut() = status;
        own.body
            .insert("status".into(), Value::from(status.as_u16()));
        changed = true;
    }
    if let Some(shape) = provider.answers.iter().find(|a| a.applies_to(own.kind)) {
        let values = Values {
            own: &own,
            status: resp.status().as_u16(),
        };
        for (name, text) in &shape.headers {
            let value = text
                .render(&values)
                .and_then(|v| HeaderValue::from_str(&v).ok());
            if let Some(value) = value {
                resp.headers_mut().insert(name.clone(), value);
            }
        }
        if shape.content_type != MediaType::ProblemJson {
            let value = shape.content_type.header();
            resp.headers_mut().insert(header::CONTENT_TYPE, value);
        }
        let added = values.members(&shape.body);
        changed |= !added.is_empty();
        own.body.extend(added);
    }
    if changed {
        *resp.body_mut() = full(Value::Object(own.body).to_string());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn own(kind: &'static str, retry_after: Option<Duration>) -> Own {
        let mut body = Map::new();
        body.insert("type".into(), format!("urn:idemproxy:{kind}").into());
        body.insert("detail".into(), "Nothing was sent.".into());
        Own {
            kind,
            pending: retry_after.is_some(),
            body,
            retry_after,
        }
    }

    fn text(s: &str) -> Text {
        Text::parse(s).expect("parses")
    }

    #[test]
    fn placeholders_render_or_leave_the_member_out() {
        let own = own("in-flight", Some(Duration::from_secs(5)));
        let values = Values {
            own: &own,
            status: 503,
        };
        let t = |s: &str| text(s).render(&values);
        assert_eq!(
            t("{problem}: {detail}").as_deref(),
            Some("in-flight: Nothing was sent.")
        );
        assert_eq!(t("{type}").as_deref(), Some("urn:idemproxy:in-flight"));
        assert_eq!(t("{retry_after_ms}").as_deref(), Some("5000"));
        assert_eq!(t("{{{status}}}").as_deref(), Some("{503}"));
        assert_eq!(t("see {operation_id}"), None, "no operation ID known");
        let number = values.value(&Shaped::Number(Hole::RetryAfter));
        assert_eq!(number, Some(Value::from(5)));
        let shaped = Shaped::Object(vec![
            ("a".into(), Shaped::Text(text("{operation_id}"))),
            ("b".into(), Shaped::Number(Hole::Status)),
        ]);
        assert_eq!(values.value(&shaped), Some(serde_json::json!({"b": 503})));
    }

    #[test]
    fn text_parse_errors_name_the_fix() {
        assert!(
            Text::parse("{detial}")
                .unwrap_err()
                .contains("unknown placeholder")
        );
        assert!(Text::parse("{detail").unwrap_err().contains("unclosed"));
        assert!(Text::parse("a}").unwrap_err().contains("stray"));
        assert_eq!(text("{retry_after}").only_hole(), Some(Hole::RetryAfter));
        assert_eq!(text("{status} s").only_hole(), None);
    }
}
