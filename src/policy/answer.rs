//! A provider's `[[provider.answer]]`s: which of the proxy's own problem answers each one
//! shapes for the provider's SDK, and the headers and body members it adds, as placeholders
//! (`{detail}`, `{retry_after}`) not yet filled. The values and the shaping of an answer are
//! `shape`'s; this module owns only the validated model and its parser.

use http::{HeaderName, HeaderValue};
use serde_json::Value;

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
    pub fn header(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            MediaType::ProblemJson => "application/problem+json",
            MediaType::Json => "application/json",
        })
    }
}

impl AnswerShape {
    pub fn applies_to(&self, kind: &str) -> bool {
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

    /// The rendered text, each placeholder's value from `value`; `None` if one has none.
    pub fn render(&self, value: impl Fn(Hole) -> Option<String>) -> Option<String> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Piece::Literal(text) => out.push_str(text),
                Piece::Hole(hole) => out.push_str(&value(*hole)?),
            }
        }
        Some(out)
    }
}
