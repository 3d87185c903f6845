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

use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Map, Value};

use crate::policy::Provider;
use crate::policy::answer::{Hole, MediaType, Shaped};
use crate::problem::Own;
use crate::wire::{ProxyBody, full};

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
            Shaped::Text(text) => Value::from(text.render(|hole| self.text(hole))?),
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
                .render(|hole| values.text(hole))
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
    use crate::policy::answer::Text;

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
        let t = |s: &str| text(s).render(|hole| values.text(hole));
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
