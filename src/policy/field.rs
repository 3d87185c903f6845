//! One `approval_show` entry (`amount`, `metadata[order]`, `query:expand`), parsed: which
//! field of a kept request the approver is shown. What is shown, and masked, is `shown`'s.

/// One `approval_show` entry, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The entry as written: the field's name in what the approver sees.
    pub text: String,
    /// `query:NAME`: only the query parameter `NAME`.
    pub(crate) query_only: bool,
    /// `items[0][price]` -> `items`, `0`, `price`; a `query:` entry is one segment.
    pub(crate) segments: Vec<String>,
}

impl Field {
    /// An entry such as `amount`, `metadata[order]`, `items[0][price]`, `[0]` (a top-level
    /// array's first item) or `query:expand`; the error says what is wrong and how to write it.
    pub fn parse(text: &str) -> Result<Field, String> {
        if let Some(name) = text.strip_prefix("query:") {
            if name.is_empty() {
                return Err("`query:` names no parameter (e.g. \"query:expand\")".into());
            }
            return Ok(Field {
                text: text.to_string(),
                query_only: true,
                segments: vec![name.to_string()],
            });
        }
        let segments = segments(text).ok_or_else(|| {
            format!(
                "{text:?} is not a field path (a body field in bracket notation such as \
                 \"amount\" or \"metadata[order]\", or a query parameter as \"query:NAME\")"
            )
        })?;
        Ok(Field {
            text: text.to_string(),
            query_only: false,
            segments,
        })
    }

    /// The name of the query parameter this field reads when it is found in the query.
    pub(crate) fn query_name(&self) -> &str {
        match self.query_only {
            true => &self.segments[0],
            false => &self.text,
        }
    }
}

/// `a[b][c]` -> `a`, `b`, `c`; `None` for an empty name or part, or stray brackets.
pub(crate) fn segments(text: &str) -> Option<Vec<String>> {
    let head_end = text.find('[').unwrap_or(text.len());
    let (head, mut rest) = text.split_at(head_end);
    if head.contains(']') || (head.is_empty() && rest.is_empty()) {
        return None;
    }
    let mut out: Vec<String> = Some(head.to_string())
        .filter(|h| !h.is_empty())
        .into_iter()
        .collect();
    while !rest.is_empty() {
        let inner = rest.strip_prefix('[')?;
        let close = inner.find(']')?;
        let part = &inner[..close];
        if part.is_empty() || part.contains('[') {
            return None;
        }
        out.push(part.to_string());
        rest = &inner[close + 1..];
    }
    Some(out)
}
