//! The template language of SPEC section 3 (stub: the parser and renderer are being written;
//! the signatures below are the contract).

use http::HeaderName;

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

impl Template {
    pub fn parse(source: &str) -> Result<Template, ParseError> {
        Ok(Template {
            source: source.to_string(),
            parts: vec![Part::Literal(source.to_string())],
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn parts(&self) -> &[Part] {
        &self.parts
    }
}
