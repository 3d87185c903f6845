//! Raw JSON-RPC on an MCP provider's endpoint, as no SDK would send it, against a fake server:
//! routing headers that disagree with the body, batches, an unnamed tool under `unmatched =
//! "reject"`, bodies that are not JSON, a replay under a new id and session, an event stream
//! read to the tool's response or lost before it.

use http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{Behavior, FakeProvider, Proxy, Resp, send};

const RESPONSE: &str =
    r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"refunded"}]}}"#;

fn call(id: Value, tool: &str, amount: u32) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": {"invoice": "in_1", "amount": amount},
                      "_meta": {"progressToken": id}}})
    .to_string()
}

async fn start(behavior: Behavior, extra: &str) -> (FakeProvider, Proxy) {
    let provider = FakeProvider::start(behavior).await;
    let policy = format!(
        "[provider]\nname = \"billing\"\nupstream = \"{}/mcp\"\nmount = \"/mcp/billing\"\n\
         protocol = \"mcp\"\n{extra}\n[[route]]\nname = \"refund\"\nmatch = \"tools/call refund\"\n\
         operation_id = \"{{header:x-workflow-id}}:{{json:/params/arguments/invoice}}\"\n",
        provider.url()
    );
    let proxy = Proxy::builder().policy("billing", &policy).start().await;
    (provider, proxy)
}

async fn post(proxy: &Proxy, headers: &[(&str, &str)], body: String) -> Resp {
    let mut all = vec![
        ("content-type", "application/json"),
        ("x-workflow-id", "wf-1"),
    ];
    all.extend_from_slice(headers);
    send(Method::POST, &proxy.url("/mcp/billing"), &all, body)
        .await
        .expect("answer")
}

/// A tool error's problem (`_meta.idemproxy`), after checking its shape.
fn tool_error(resp: &Resp, id: Value) -> Value {
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    assert_eq!(resp.header("content-type"), Some("application/json"));
    let message = resp.json();
    assert_eq!(message["id"], id, "{message}");
    assert_eq!(message["result"]["isError"], true, "{message}");
    let problem = message["result"]["_meta"]["idemproxy"].clone();
    assert_eq!(message["result"]["content"][0]["text"], problem["detail"]);
    problem
}

#[tokio::test]
async fn routing_headers_that_disagree_with_the_body_are_refused_and_nothing_is_sent() {
    let (provider, proxy) = start(Behavior::fixed(200, RESPONSE), "").await;
    for headers in [
        &[("mcp-method", "tools/list")][..],
        &[("mcp-method", "tools/call"), ("mcp-name", "lookup")][..],
        &[("mcp-method", "tools/call"), ("mcp-method", "tools/call")][..],
    ] {
        let resp = post(&proxy, headers, call(json!(1), "refund", 5)).await;
        let problem = tool_error(&resp, json!(1));
        assert_eq!(problem["type"], "urn:idemproxy:invalid-body", "{headers:?}");
        assert_eq!(problem["status"], 400, "{headers:?}");
    }
    // A body that is not a tool call, headers that say it is: a plain 400.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let resp = post(
        &proxy,
        &[("mcp-method", "tools/call"), ("mcp-name", "refund")],
        list,
    )
    .await;
    crate::common::problem(&resp, StatusCode::BAD_REQUEST, "invalid-body");
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test]
async fn batches_holding_a_tool_call_and_bodies_that_are_not_json_are_refused() {
    let (provider, proxy) = start(Behavior::fixed(200, RESPONSE), "").await;
    let batch = format!("[{}]", call(json!(1), "lookup", 5));
    let resp = post(&proxy, &[], batch).await;
    crate::common::problem(&resp, StatusCode::BAD_REQUEST, "invalid-body");
    let repeated = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call"}"#;
    for body in ["not json", repeated] {
        let resp = post(&proxy, &[], body.to_string()).await;
        crate::common::problem(&resp, StatusCode::BAD_REQUEST, "invalid-body");
    }
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test]
async fn unmatched_reject_answers_an_unnamed_tool_with_a_tool_error() {
    let (provider, proxy) = start(Behavior::fixed(200, RESPONSE), "unmatched = \"reject\"").await;
    let resp = post(&proxy, &[], call(json!("a"), "lookup", 5)).await;
    let problem = tool_error(&resp, json!("a"));
    assert_eq!(problem["type"], "urn:idemproxy:route-not-allowed");
    assert_eq!(provider.request_count(), 0);
    // Everything that is not a tool call still passes.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let resp = post(&proxy, &[], list).await;
    assert_eq!(resp.status, StatusCode::OK);
    assert_eq!(provider.request_count(), 1);
    assert_eq!(provider.requests()[0].path_and_query, "/mcp");
}

#[tokio::test]
async fn a_replay_answers_the_replaying_requests_id_without_the_original_session() {
    let behavior = Behavior::fixed(200, RESPONSE)
        .header("content-type", "application/json")
        .header("mcp-session-id", "s-1");
    let (provider, proxy) = start(behavior, "").await;
    let first_headers = [("mcp-session-id", "s-1"), ("accept-encoding", "gzip")];
    let first = post(&proxy, &first_headers, call(json!(1), "refund", 5)).await;
    assert_eq!(first.text(), RESPONSE);
    let sent = &provider.requests()[0];
    assert_eq!(
        sent.header("accept-encoding"),
        Some("identity"),
        "stored as sent"
    );
    assert_eq!(first.header("idempotent-replayed"), Some("false"));
    // A new id, a new session, other `_meta`: the same intent.
    let replay = post(
        &proxy,
        &[("mcp-session-id", "s-2")],
        call(json!("b"), "refund", 5),
    )
    .await;
    assert_eq!(replay.status, StatusCode::OK);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        replay.header("idem-operation-id"),
        Some("billing/refund/wf-1:in_1")
    );
    assert_eq!(replay.header("mcp-session-id"), None);
    assert_eq!(replay.header("content-type"), Some("application/json"));
    let message = replay.json();
    assert_eq!(message["id"], "b");
    assert_eq!(message["result"]["content"][0]["text"], "refunded");
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn an_event_stream_is_read_to_the_tools_response_and_a_lost_one_is_unknown() {
    let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#;
    let stream =
        format!("event: message\ndata: {progress}\n\nevent: message\ndata: {RESPONSE}\n\n");
    let behavior = Behavior::fixed(200, stream.clone()).header("content-type", "text/event-stream");
    let (provider, proxy) = start(behavior, "").await;
    let first = post(&proxy, &[], call(json!(1), "refund", 5)).await;
    assert_eq!(first.header("content-type"), Some("text/event-stream"));
    assert_eq!(
        first.text(),
        stream,
        "the first caller hears the notifications"
    );
    let replay = post(&proxy, &[], call(json!(2), "refund", 5)).await;
    assert_eq!(replay.header("content-type"), Some("application/json"));
    assert_eq!(replay.json()["id"], 2);
    assert_eq!(replay.json()["result"]["content"][0]["text"], "refunded");
    assert_eq!(provider.request_count(), 1);

    // The stream ends before the response: the tool may have run.
    let lost = format!("event: message\ndata: {progress}\n\n");
    provider.set_behavior(Behavior::fixed(200, lost).header("content-type", "text/event-stream"));
    let another = call(json!(3), "refund", 5).replace("in_1", "in_2");
    let resp = post(&proxy, &[], another).await;
    let problem = tool_error(&resp, json!(3));
    assert_eq!(problem["type"], "urn:idemproxy:outcome-unknown");
    assert_eq!(resp.header("idem-state"), Some("unknown"));
}

#[tokio::test]
async fn a_tool_call_under_another_method_is_still_guarded() {
    let behavior = Behavior::fixed(200, RESPONSE).header("content-type", "application/json");
    let (provider, proxy) = start(behavior, "").await;
    let headers = [
        ("content-type", "application/json"),
        ("x-workflow-id", "wf-1"),
    ];
    for (i, id) in [json!(1), json!(2)].into_iter().enumerate() {
        let body = call(id.clone(), "refund", 5);
        let resp = send(Method::PUT, &proxy.url("/mcp/billing"), &headers, body)
            .await
            .expect("answer");
        assert_eq!(
            resp.header("idem-operation-id"),
            Some("billing/refund/wf-1:in_1")
        );
        assert_eq!(
            resp.header("idempotent-replayed"),
            Some(["false", "true"][i])
        );
        assert_eq!(resp.json()["id"], id);
    }
    assert_eq!(provider.request_count(), 1);
}

/// `approval_show` names arguments (a bracket path or a pointer), and an argument
/// `fingerprint_ignore` leaves out is shown masked and is not a new intent.
#[tokio::test]
async fn approval_show_and_fingerprint_ignore_name_arguments() {
    let provider = FakeProvider::start(Behavior::fixed(200, RESPONSE)).await;
    let policy = format!(
        "[provider]\nname = \"billing\"\nupstream = \"{}/mcp\"\nmount = \"/mcp/billing\"\n\
         protocol = \"mcp\"\n[[route]]\nname = \"refund\"\nmatch = \"tools/call refund\"\n\
         operation_id = \"{{header:x-workflow-id}}\"\napproval = \"required\"\n\
         approval_show = [\"amount\", \"/note\"]\nfingerprint_ignore = [\"/note\"]\n",
        provider.url()
    );
    let proxy = Proxy::builder().policy("billing", &policy).start().await;
    let body = |note: &str| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "refund", "arguments": {"amount": 5, "note": note}}})
        .to_string()
    };
    for note in ["first", "second"] {
        let resp = post(&proxy, &[], body(note)).await;
        let problem = tool_error(&resp, json!(1));
        assert_eq!(problem["type"], "urn:idemproxy:awaiting-approval", "{note}");
    }
    let op = proxy.op_json("billing/refund/wf-1").await;
    let fields = &op["approval_request"]["fields"];
    assert_eq!(fields["params[arguments][amount]"], "5", "{op}");
    let masked = &op["approval_request"]["masked"];
    assert_eq!(masked, &json!(["params[arguments][note]"]), "{op}");
    assert_eq!(provider.request_count(), 0);
}

/// A tool that takes an idempotency argument gets the operation's key there, on every attempt,
/// whatever the caller put in it (left out of the fingerprint).
#[tokio::test]
async fn the_key_goes_into_the_tools_arguments_where_key_json_field_says() {
    let behavior = Behavior::fixed(500, "").header("content-type", "application/json");
    let extra = "key_json_field = \"/params/arguments/idempotency_key\"\ndedupe = \"key\"";
    let (provider, proxy) = start(behavior, extra).await;
    for (i, own_key) in ["mine", "another"].into_iter().enumerate() {
        let mut body: Value = serde_json::from_str(&call(json!(i), "refund", 5)).unwrap();
        body["params"]["arguments"]["idempotency_key"] = json!(own_key);
        // The server's own answer, which proves nothing: unknown, and re-sent next time.
        let resp = post(&proxy, &[], body.to_string()).await;
        assert_eq!(resp.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(resp.header("idem-state"), Some("unknown"));
    }
    let sent: Vec<Value> = (provider.requests().iter())
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(
        sent.len(),
        2,
        "re-sent under the same key (dedupe = \"key\")"
    );
    let key = &sent[0]["params"]["arguments"]["idempotency_key"];
    assert_eq!(key.as_str().map(str::len), Some(64), "{key}");
    assert_eq!(&sent[1]["params"]["arguments"]["idempotency_key"], key);
}
