//! `[[provider.answer]]` tables into `AnswerShape`s: which of the proxy's own problems they
//! shape, the headers and the body members they add, and the media type they are sent as. It
//! refuses whatever would change what the proxy promises (the RFC 9457 members and the proxy's
//! own, framing, hop-by-hop and `Idem-*` headers, any media type but the two JSON ones); it
//! never shapes an answer itself (that is `shape`).

use http::{HeaderName, HeaderValue, header};
use toml::{Table, Value};

use super::Scope;
use super::raw::RawAnswer;
use super::values;
use crate::policy::answer::{AnswerShape, Hole, MEDIA_TYPES, MediaType, Shaped, Text};
use crate::problem::{KEPT_MEMBERS, KINDS};

/// Every `[[provider.answer]]`, in order; `None` if any has an error.
pub(super) fn answers(s: &mut Scope, raw: Vec<RawAnswer>) -> Option<Vec<AnswerShape>> {
    let checked: Vec<Option<AnswerShape>> = raw
        .into_iter()
        .enumerate()
        .map(|(i, raw)| answer(&mut s.nested(&format!("answer[{i}].")), raw))
        .collect();
    checked.into_iter().collect()
}

fn answer(s: &mut Scope, raw: RawAnswer) -> Option<AnswerShape> {
    let problems = problems(s, raw.problems);
    let headers = headers(s, raw.headers.unwrap_or_default());
    let body = body(s, raw.body.unwrap_or_default());
    let content_type = s.choice(
        "content_type",
        raw.content_type,
        MediaType::ProblemJson,
        MEDIA_TYPES,
    );
    Some(AnswerShape {
        problems: problems?,
        headers: headers?,
        body: body?,
        content_type: content_type?,
    })
}

/// `problems`: short names of the proxy's problems, or `["*"]` for all of them.
fn problems(s: &mut Scope, raw: Option<Vec<String>>) -> Option<Option<Vec<String>>> {
    let fix = format!(
        "name problems like \"parameter-mismatch\", or \"*\" for all: {}",
        KINDS.join(", ")
    );
    let Some(names) = raw.filter(|n| !n.is_empty()) else {
        s.push("problems", format!("missing or empty ({fix})"));
        return None;
    };
    if names.iter().any(|n| n == "*") {
        return Some(None);
    }
    let mut ok = true;
    for (i, name) in names.iter().enumerate() {
        let short = name.strip_prefix("urn:idemproxy:").unwrap_or(name);
        if !KINDS.contains(&short) {
            s.push(
                &format!("problems[{i}]"),
                format!("unknown problem \"{name}\" ({fix})"),
            );
            ok = false;
        }
    }
    let short = names
        .iter()
        .map(|n| n.strip_prefix("urn:idemproxy:").unwrap_or(n).to_string());
    ok.then(|| Some(short.collect()))
}

/// `headers`: name = text with placeholders; never one the proxy owns or the message needs.
fn headers(s: &mut Scope, raw: Table) -> Option<Vec<(HeaderName, Text)>> {
    let checked: Vec<Option<(HeaderName, Text)>> = raw
        .into_iter()
        .map(|(name, value)| {
            let key = format!("headers.{name}");
            let name = s.check(&key, values::header(&name).and_then(owned_header))?;
            let text = match &value {
                Value::String(text) => header_text(text),
                other => Err(format!(
                    "{other} is not a string (write header values as strings)"
                )),
            };
            Some((name, s.check(&key, text)?))
        })
        .collect();
    checked.into_iter().collect()
}

/// Headers a policy may not set on the proxy's answers.
fn owned_header(name: HeaderName) -> Result<HeaderName, String> {
    let text = name.as_str();
    let framing = name == header::CONTENT_TYPE || name == header::CONTENT_LENGTH;
    let hop = crate::wire::is_hop_by_hop(&name);
    let proxy = text.starts_with("idem-") || text == "idempotent-replayed";
    match (framing, hop, proxy) {
        (true, _, _) => Err(format!(
            "\"{text}\" describes the problem+json body itself (remove it; `content_type` chooses the media type)"
        )),
        (_, true, _) => Err(format!(
            "\"{text}\" is a hop-by-hop header, not part of the answer (remove it)"
        )),
        (_, _, true) => Err(format!("\"{text}\" is the proxy's own header (remove it)")),
        _ => Ok(name),
    }
}

fn header_text(text: &str) -> Result<Text, String> {
    HeaderValue::from_str(text)
        .map_err(|_| format!("\"{text}\" is not a valid header value (visible ASCII only)"))?;
    Text::parse(text)
}

/// `body`: members added to the problem+json object; the kept members are refused.
fn body(s: &mut Scope, raw: Table) -> Option<Vec<(String, Shaped)>> {
    let checked: Vec<Option<(String, Shaped)>> = raw
        .into_iter()
        .map(|(name, value)| {
            let key = format!("body.{name}");
            if KEPT_MEMBERS.contains(&name.as_str()) {
                let msg = format!(
                    "\"{name}\" is a member the proxy always sends as it is (kept: {}); name another member",
                    KEPT_MEMBERS.join(", ")
                );
                s.push(&key, msg);
                return None;
            }
            Some((name, s.check(&key, shaped(&value))?))
        })
        .collect();
    checked.into_iter().collect()
}

/// A TOML value as a shaped JSON value: strings are texts with placeholders, and a string
/// that is exactly `{status}`, `{retry_after}` or `{retry_after_ms}` a number.
fn shaped(value: &Value) -> Result<Shaped, String> {
    Ok(match value {
        Value::String(text) => {
            let text = Text::parse(text)?;
            match text.only_hole() {
                Some(h @ (Hole::Status | Hole::RetryAfter | Hole::RetryAfterMs)) => {
                    Shaped::Number(h)
                }
                _ => Shaped::Text(text),
            }
        }
        Value::Integer(n) => Shaped::Literal(serde_json::Value::from(*n)),
        Value::Float(f) => Shaped::Literal(
            serde_json::Number::from_f64(*f)
                .map(serde_json::Value::Number)
                .ok_or_else(|| format!("{f} is not a JSON number"))?,
        ),
        Value::Boolean(b) => Shaped::Literal(serde_json::Value::from(*b)),
        Value::Array(items) => Shaped::Array(items.iter().map(shaped).collect::<Result<_, _>>()?),
        Value::Table(table) => Shaped::Object(
            table
                .iter()
                .map(|(k, v)| Ok((k.clone(), shaped(v)?)))
                .collect::<Result<_, String>>()?,
        ),
        Value::Datetime(d) => {
            return Err(format!(
                "{d} is a TOML date, which JSON has not (write it as a string)"
            ));
        }
    })
}
