//! The demo's operator: the person who checks with the provider and resolves an operation the
//! proxy holds as `unknown`, through the admin API as `idemproxy ops resolve` does.
//!
//! It owns the one resolution the demo makes: `succeeded`, with the refund the provider really
//! made as the stored answer. It never writes the ledger itself: the admin API decides whether
//! the operation may be resolved (only from `unknown`).

use std::net::SocketAddr;

use serde_json::{Value, json};

use super::DemoError;
use super::agent::{Agent, Received};

/// `/ops/{id}/resolve` with the operation ID percent-encoded.
pub fn resolve_path(id: &str) -> String {
    format!("/ops/{}/resolve", crate::identity::path_segment(id))
}

/// The resolve body: `succeeded`, with the provider's refund as a 200 JSON answer.
pub fn resolve_body(refund: &Value, reason: &str) -> Value {
    json!({
        "outcome": "succeeded",
        "status": 200,
        "headers": {"content-type": "application/json"},
        "body": refund.to_string(),
        "reason": reason,
    })
}

/// `POST /ops/{id}/resolve` on the admin API at `admin`, with the bearer token when the proxy
/// has one (`IDEMPROXY_ADMIN_TOKEN`). The answer is the admin API's, whatever its status.
pub async fn resolve_succeeded(
    agent: &Agent,
    admin: SocketAddr,
    token: Option<&str>,
    id: &str,
    body: &Value,
) -> Result<Received, DemoError> {
    let uri = format!("http://{admin}{}", resolve_path(id));
    agent.post_json(&uri, token, body).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_escapes_the_slashes_of_the_operation_id() {
        assert_eq!(
            resolve_path("bank/create_refund/wf-82:ch_2:refund:2"),
            "/ops/bank%2Fcreate_refund%2Fwf-82:ch_2:refund:2/resolve"
        );
        assert_eq!(
            resolve_path("p/r/a b%?#é"),
            "/ops/p%2Fr%2Fa%20b%25%3F%23%C3%A9/resolve"
        );
        let decoded = crate::identity::decode("p%2Fr%2Fa%20b%25%3F%23%C3%A9");
        assert_eq!(decoded.as_deref(), Some("p/r/a b%?#é"));
    }

    #[test]
    fn the_body_carries_the_refund_as_the_answer_to_replay() {
        let refund = json!({"id": "re_1", "amount": 500});
        let body = resolve_body(&refund, "found it");
        assert_eq!(body["outcome"], "succeeded");
        assert_eq!(body["status"], 200);
        let stored: Value =
            serde_json::from_str(body["body"].as_str().expect("a string")).expect("JSON");
        assert_eq!(stored, refund);
    }
}
