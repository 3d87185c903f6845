//! The demo's agent: an HTTP client that calls the provider through the proxy, as an SDK
//! pointed at the proxy's base URL would, and reads back what the story needs.
//!
//! It owns the wire format of the demo's requests (a Stripe-style urlencoded refund) and the
//! reading of answers. It never talks to a provider directly, and never retries by itself:
//! every retry is a step the story shows.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::DemoError;

/// No demo exchange takes long; a hung one is a failure, not a wait.
const TIMEOUT: Duration = Duration::from_secs(10);

/// One refund step of an agent's workflow.
#[derive(Debug, Clone)]
pub struct Refund {
    pub workflow: &'static str,
    pub charge: &'static str,
    /// In cents.
    pub amount: u64,
    pub step: u32,
}

impl Refund {
    /// The urlencoded body, as Stripe's API takes it.
    fn form(&self) -> String {
        form_urlencoded::Serializer::new(String::new())
            .append_pair("charge", self.charge)
            .append_pair("amount", &self.amount.to_string())
            .append_pair("currency", "usd")
            .append_pair("metadata[step]", &self.step.to_string())
            .finish()
    }
}

/// An answer as the agent saw it.
#[derive(Debug, Clone)]
pub struct Received {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The JSON body, or `Null` when it is not JSON.
    pub body: Value,
}

impl Received {
    /// A header's value, or `-` when absent or not text.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
    }

    /// The problem type without its `urn:idemproxy:` prefix, when the body is a problem.
    pub fn problem(&self) -> Option<&str> {
        let kind = self.body.get("type")?.as_str()?;
        Some(kind.strip_prefix("urn:idemproxy:").unwrap_or(kind))
    }

    /// The refund's `id`, when the body is a refund.
    pub fn refund_id(&self) -> Option<&str> {
        self.body.get("id")?.as_str()
    }

    /// A problem's `next`: what the agent does after it.
    pub fn next(&self) -> Option<&str> {
        self.body.get("next")?.as_str()
    }

    /// A 409's `differing_fields`.
    pub fn differing_fields(&self) -> Vec<String> {
        let fields = self.body.get("differing_fields").and_then(Value::as_array);
        fields
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str().map(str::to_string))
            .collect()
    }
}

/// A plain-HTTP client with its own connection pool.
pub struct Agent {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Default for Agent {
    fn default() -> Self {
        Agent::new()
    }
}

impl Agent {
    pub fn new() -> Agent {
        Agent {
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// Posts a refund to `http://{proxy}/{provider}/v1/refunds` with the workflow's headers.
    /// `sdk_key` is the `Idempotency-Key` the agent's SDK made up for this call; the proxy
    /// replaces it with the operation's own key.
    pub async fn refund(
        &self,
        proxy: SocketAddr,
        provider: &str,
        refund: &Refund,
        sdk_key: &str,
    ) -> Result<Received, DemoError> {
        let uri = format!("http://{proxy}/{provider}/v1/refunds");
        let req = Request::builder()
            .method(Method::POST)
            .uri(&uri)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header("x-workflow-id", refund.workflow)
            .header("idempotency-key", sdk_key)
            .body(Full::new(Bytes::from(refund.form())));
        self.send(&uri, req).await
    }

    /// Posts a JSON body to `uri` (the operator's admin call), with `Authorization: Bearer`
    /// when a token is given.
    pub async fn post_json(
        &self,
        uri: &str,
        token: Option<&str>,
        body: &Value,
    ) -> Result<Received, DemoError> {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(token) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let req = req.body(Full::new(Bytes::from(body.to_string())));
        self.send(uri, req).await
    }

    async fn send(
        &self,
        uri: &str,
        req: Result<Request<Full<Bytes>>, http::Error>,
    ) -> Result<Received, DemoError> {
        let broken = |why: String| DemoError::Exchange {
            uri: uri.to_string(),
            why,
        };
        let req = req.map_err(|e| broken(e.to_string()))?;
        let exchange = async {
            let resp = self.client.request(req).await.map_err(|e| e.to_string())?;
            let (parts, body) = resp.into_parts();
            let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
            Ok::<_, String>((parts, bytes))
        };
        let (parts, bytes) = tokio::time::timeout(TIMEOUT, exchange)
            .await
            .map_err(|_| broken(format!("no answer within {TIMEOUT:?}")))?
            .map_err(broken)?;
        Ok(Received {
            status: parts.status,
            headers: parts.headers,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(body: Value) -> Received {
        Received {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            body,
        }
    }

    #[test]
    fn the_refund_form_carries_what_the_operation_id_reads() {
        let refund = Refund {
            workflow: "wf-81",
            charge: "ch_1",
            amount: 500,
            step: 2,
        };
        let pairs: Vec<(String, String)> = form_urlencoded::parse(refund.form().as_bytes())
            .into_owned()
            .collect();
        let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("charge"), Some("ch_1"));
        assert_eq!(get("amount"), Some("500"));
        assert_eq!(get("metadata[step]"), Some("2"));
    }

    #[test]
    fn answers_are_read_without_trusting_their_shape() {
        let problem = answer(json!({
            "type": "urn:idemproxy:parameter-mismatch",
            "differing_fields": ["amount", 7],
        }));
        assert_eq!(problem.problem(), Some("parameter-mismatch"));
        assert_eq!(problem.differing_fields(), ["amount"]);
        assert_eq!(problem.refund_id(), None);
        assert_eq!(problem.header("idem-state"), "-");
        let odd = answer(json!([1, 2]));
        assert_eq!(odd.problem(), None);
        assert!(odd.differing_fields().is_empty());
        assert_eq!(answer(json!({"id": "re_1"})).refund_id(), Some("re_1"));
    }
}
