//! What a provider's answer means: the ordered `[[provider.rule]]`s first, then the status
//! lists of `[provider.outcomes]`.
//!
//! A rule names a status (or a class), optionally a JSON pointer into the answer's body and
//! the value expected there, and what a matching answer means. This module owns the rule type
//! and the one pure classification every recorded answer goes through (an agent's attempt and
//! the settler's re-sends alike). It never reads the ledger, never sends anything and never
//! keeps the body it looks at.

use serde_json::Value;

use super::{Outcome, Outcomes, StatusRule};

/// What an answer means for the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Means {
    Succeeded,
    Failed,
    Unknown,
    /// The provider says a request with this key is still being processed: the effect may
    /// yet happen, so the operation is `unknown` (never `failed`) and the agent is told
    /// `in-flight`.
    Pending,
    /// Look the effect up at once with the route's lookup, this answer readable as
    /// `{answer:/pointer}`; found -> `succeeded`, else `unknown`.
    Reconcile,
}

impl Means {
    pub fn as_str(self) -> &'static str {
        match self {
            Means::Succeeded => "succeeded",
            Means::Failed => "failed",
            Means::Unknown => "unknown",
            Means::Pending => "pending",
            Means::Reconcile => "reconcile",
        }
    }
}

impl From<Outcome> for Means {
    fn from(outcome: Outcome) -> Means {
        match outcome {
            Outcome::Succeeded => Means::Succeeded,
            Outcome::Failed => Means::Failed,
            Outcome::Unknown => Means::Unknown,
        }
    }
}

/// One `[[provider.rule]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerRule {
    pub status: StatusRule,
    /// A JSON pointer into the answer's body; `None`: the status alone decides.
    pub pointer: Option<String>,
    /// The scalar expected at `pointer` (a string, number or boolean); `None`: the pointer
    /// must merely exist (and not be `null`).
    pub equals: Option<Value>,
    pub means: Means,
}

impl AnswerRule {
    fn status_matches(&self, status: u16) -> bool {
        match self.status {
            StatusRule::Exact(code) => code == status,
            StatusRule::Class(class) => u16::from(class) == status / 100,
        }
    }

    /// Whether the body (parsed once, by `body`, only if the status matched) satisfies it.
    fn body_matches(&self, body: Option<&Value>) -> bool {
        let Some(pointer) = &self.pointer else {
            return true;
        };
        let found = body
            .and_then(|b| b.pointer(pointer))
            .filter(|v| !v.is_null());
        match (found, &self.equals) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(found), Some(expected)) => same_scalar(found, expected),
        }
    }
}

/// Strings and booleans compare as they are; numbers by value (`1` equals `1.0`).
fn same_scalar(found: &Value, expected: &Value) -> bool {
    match (found, expected) {
        (Value::Number(a), Value::Number(b)) => match (a.as_i64(), b.as_i64()) {
            (Some(a), Some(b)) => a == b,
            _ => a.as_f64() == b.as_f64(),
        },
        _ => found == expected,
    }
}

/// What an answer means, and which rule said so (`None`: the status lists did).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    pub means: Means,
    pub rule: Option<usize>,
}

/// Classifies an answer: the first rule whose status and body match wins; else the status
/// lists. The body is parsed as JSON at most once, and only when a rule with a pointer
/// matched the status; a body that is not JSON matches no pointer. Pure.
pub fn classify(rules: &[AnswerRule], outcomes: &Outcomes, status: u16, body: &[u8]) -> Classified {
    let mut parsed: Option<Option<Value>> = None;
    for (i, rule) in rules.iter().enumerate() {
        if !rule.status_matches(status) {
            continue;
        }
        let json = match &rule.pointer {
            Some(_) => parsed
                .get_or_insert_with(|| serde_json::from_slice(body).ok())
                .as_ref(),
            None => None,
        };
        if rule.body_matches(json) {
            return Classified {
                means: rule.means,
                rule: Some(i),
            };
        }
    }
    Classified {
        means: outcomes.classify(status).into(),
        rule: None,
    }
}

/// Classifies an MCP tool's answer (`protocol = "mcp"`), `message` being the JSON-RPC
/// response (taken out of an event stream when the server streamed): the rules first, as for
/// any answer, with pointers into that response; then the response itself: a JSON-RPC
/// `error`, or a `result` with `isError: true`, is `failed` (the tool said it did not do it),
/// any other `result` `succeeded`; with no response, the status lists, where a success status
/// proves nothing (there is no result to replay): `unknown`. Pure.
pub fn classify_tool(
    rules: &[AnswerRule],
    outcomes: &Outcomes,
    status: u16,
    message: &[u8],
) -> Classified {
    let by_rules = classify(rules, outcomes, status, message);
    if by_rules.rule.is_some() {
        return by_rules;
    }
    let response: Option<Value> = serde_json::from_slice(message).ok();
    let means = match response.as_ref().filter(|r| r.get("jsonrpc").is_some()) {
        Some(r) if r.get("error").is_some() => Means::Failed,
        Some(r) => match r.get("result") {
            Some(result) if result.get("isError") == Some(&Value::Bool(true)) => Means::Failed,
            Some(_) => Means::Succeeded,
            None => Means::Unknown,
        },
        None => match Means::from(outcomes.classify(status)) {
            Means::Succeeded => Means::Unknown,
            means => means,
        },
    };
    Classified { means, rule: None }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(
        status: StatusRule,
        pointer: Option<&str>,
        equals: Option<Value>,
        means: Means,
    ) -> AnswerRule {
        AnswerRule {
            status,
            pointer: pointer.map(str::to_string),
            equals,
            means,
        }
    }

    fn means(rules: &[AnswerRule], status: u16, body: &str) -> (Means, Option<usize>) {
        let c = classify(rules, &Outcomes::default(), status, body.as_bytes());
        (c.means, c.rule)
    }

    #[test]
    fn the_first_matching_rule_wins_before_the_status_lists() {
        let rules = [
            rule(
                StatusRule::Exact(409),
                Some("/error/code"),
                Some(json!("idempotency_key_in_use")),
                Means::Pending,
            ),
            rule(
                StatusRule::Class(4),
                Some("/error/links/id"),
                None,
                Means::Reconcile,
            ),
            rule(StatusRule::Exact(409), None, None, Means::Failed),
        ];
        let in_use = r#"{"error":{"code":"idempotency_key_in_use"}}"#;
        assert_eq!(means(&rules, 409, in_use), (Means::Pending, Some(0)));
        let linked = r#"{"error":{"code":"conflict","links":{"id":"PM1"}}}"#;
        assert_eq!(means(&rules, 409, linked), (Means::Reconcile, Some(1)));
        assert_eq!(means(&rules, 422, linked), (Means::Reconcile, Some(1)));
        assert_eq!(means(&rules, 409, "not json"), (Means::Failed, Some(2)));
        assert_eq!(means(&rules, 422, "{}"), (Means::Failed, None), "the lists");
        assert_eq!(means(&rules, 500, in_use), (Means::Unknown, None));
        assert_eq!(means(&[], 201, ""), (Means::Succeeded, None));
    }

    #[test]
    fn equals_compares_strings_numbers_and_booleans_by_value() {
        let with = |v: Value| {
            [rule(
                StatusRule::Exact(400),
                Some("/x"),
                Some(v),
                Means::Pending,
            )]
        };
        assert_eq!(
            means(&with(json!(704)), 400, r#"{"x":704}"#).0,
            Means::Pending
        );
        assert_eq!(
            means(&with(json!(704)), 400, r#"{"x":704.0}"#).0,
            Means::Pending
        );
        assert_eq!(
            means(&with(json!(704)), 400, r#"{"x":"704"}"#).0,
            Means::Failed
        );
        assert_eq!(
            means(&with(json!(true)), 400, r#"{"x":true}"#).0,
            Means::Pending
        );
        assert_eq!(
            means(&with(json!("a")), 400, r#"{"x":"b"}"#).0,
            Means::Failed
        );
    }

    #[test]
    fn a_pointer_without_equals_must_exist_and_not_be_null() {
        let rules = [rule(
            StatusRule::Exact(409),
            Some("/id"),
            None,
            Means::Pending,
        )];
        assert_eq!(means(&rules, 409, r#"{"id":"x"}"#).0, Means::Pending);
        assert_eq!(means(&rules, 409, r#"{"id":null}"#).0, Means::Unknown);
        assert_eq!(means(&rules, 409, r#"{}"#).0, Means::Unknown);
    }

    #[test]
    fn a_tools_answer_is_classified_by_its_json_rpc_response() {
        let tool = |status, body: &str| {
            classify_tool(&[], &Outcomes::default(), status, body.as_bytes()).means
        };
        let ok = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
        assert_eq!(tool(200, ok), Means::Succeeded);
        let said_no = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}"#;
        assert_eq!(tool(200, said_no), Means::Failed);
        let error = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}"#;
        assert_eq!(tool(200, error), Means::Failed);
        assert_eq!(tool(404, error), Means::Failed);
        assert_eq!(
            tool(200, ""),
            Means::Unknown,
            "no response: nothing to replay"
        );
        assert_eq!(tool(500, "oops"), Means::Unknown);
        assert_eq!(tool(415, ""), Means::Failed);
        let rules = [rule(
            StatusRule::Class(2),
            Some("/result/structuredContent/pending"),
            Some(json!(true)),
            Means::Pending,
        )];
        let pending = r#"{"jsonrpc":"2.0","id":1,"result":{"structuredContent":{"pending":true}}}"#;
        let c = classify_tool(&rules, &Outcomes::default(), 200, pending.as_bytes());
        assert_eq!((c.means, c.rule), (Means::Pending, Some(0)));
    }
}
