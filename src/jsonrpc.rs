//! JSON-RPC messages of MCP's streamable HTTP transport, as the proxy reads and writes them
//! for `protocol = "mcp"` providers (docs/reference.md section 13).
//!
//! This module owns what a message *is* (a `tools/call` request, anything else, a batch),
//! whether the routing headers of the single-exchange revision agree with the body, the
//! JSON-RPC response taken out of a `text/event-stream` answer, a stored response answered
//! under another request's `id`, and the tool error a problem becomes. It is pure: it never
//! reads a socket, the ledger or a policy, and it never decides what is guarded.

use bytes::Bytes;
use http::HeaderMap;
use serde_json::{Map, Value, json};

/// One POST body of an MCP endpoint, as far as routing needs it.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A `tools/call` request.
    ToolCall(ToolCall),
    /// Any other single message (initialize, tools/list, a notification, a response), by its
    /// `method` when it has one.
    Other { method: Option<String> },
    /// A JSON array of messages; `tool_calls`: whether any of them is a `tools/call`.
    Batch { tool_calls: bool },
}

/// A `tools/call` request.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The request's `id`; `None` for a call sent as a notification (no `id`).
    pub id: Option<Value>,
    /// `params.name`, when it is a string.
    pub name: Option<String>,
    /// `params.arguments` (`{}` when absent): the only parameters of the call's fingerprint.
    pub arguments: Value,
}

const TOOLS_CALL: &str = "tools/call";

/// What a parsed JSON body is.
pub fn message(body: &Value) -> Message {
    match body {
        Value::Array(items) => Message::Batch {
            tool_calls: items.iter().any(|m| method_of(m) == Some(TOOLS_CALL)),
        },
        single if method_of(single) == Some(TOOLS_CALL) => {
            let params = single.get("params");
            Message::ToolCall(ToolCall {
                id: single.get("id").cloned(),
                name: params
                    .and_then(|p| p.get("name"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
                arguments: params
                    .and_then(|p| p.get("arguments"))
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Map::new())),
            })
        }
        single => Message::Other {
            method: method_of(single).map(str::to_string),
        },
    }
}

fn method_of(message: &Value) -> Option<&str> {
    message.get("method")?.as_str()
}

/// The routing headers of revision 2026-07-28 (`Mcp-Method`, `Mcp-Name`) must say what the
/// body says, once each: a server that routes by a header must not be shown a `tools/call`
/// the proxy read as something else, or another tool. `Err` says how they disagree.
/// (`Mcp-Param-*` headers are the server's to check against the arguments.)
pub fn headers_agree(headers: &HeaderMap, message: &Message) -> Result<(), String> {
    let one = |name: &str| -> Result<Option<&str>, String> {
        let mut values = headers.get_all(name).iter();
        let Some(value) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(format!("the {name} header is sent more than once"));
        }
        value
            .to_str()
            .map(Some)
            .map_err(|_| format!("the {name} header is not visible ASCII"))
    };
    let (method, name) = (one("mcp-method")?, one("mcp-name")?);
    let (body_method, body_name) = match message {
        Message::ToolCall(call) => (Some(TOOLS_CALL), call.name.as_deref()),
        Message::Other { method } => (method.as_deref(), None),
        Message::Batch { .. } if method.is_some() || name.is_some() => {
            return Err(
                "routing headers (Mcp-Method, Mcp-Name) name one message, and the body \
                        is a batch"
                    .into(),
            );
        }
        Message::Batch { .. } => return Ok(()),
    };
    if let Some(method) = method
        && Some(method) != body_method
    {
        return Err(format!(
            "the Mcp-Method header says `{method}` and the body's method is {}",
            body_method.map_or("absent".into(), |m| format!("`{m}`"))
        ));
    }
    if let (Some(name), Some(TOOLS_CALL)) = (name, body_method)
        && Some(name) != body_name
    {
        return Err(format!(
            "the Mcp-Name header says `{name}` and the body calls {}",
            body_name.map_or("no named tool".into(), |n| format!("the tool `{n}`"))
        ));
    }
    Ok(())
}

/// The first protocol revision of the single-exchange form (no session; routing headers).
pub const SINGLE_EXCHANGE: &str = "2026-07-28";

/// Whether a request speaks the single-exchange form (revision 2026-07-28 or later), whose
/// results carry `resultType`: it says so in `MCP-Protocol-Version`, or sends `Mcp-Method`.
pub fn single_exchange(headers: &HeaderMap) -> bool {
    let version = headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok());
    version.is_some_and(|v| v >= SINGLE_EXCHANGE) || headers.contains_key("mcp-method")
}

/// A result as a client of the single-exchange form reads it: tagged `resultType: complete`
/// when untagged (a response stored from a session-based exchange, or an operator's).
fn tagged(result: &mut Value, single_exchange: bool) {
    if let (true, Value::Object(result)) = (single_exchange, result) {
        result
            .entry("resultType")
            .or_insert_with(|| Value::from("complete"));
    }
}

/// The `id` of a JSON-RPC request body, if it has one.
pub fn request_id(body: &[u8]) -> Option<Value> {
    let message: Value = serde_json::from_slice(body).ok()?;
    message.get("id").cloned()
}

/// Whether `message` is the JSON-RPC response to the request `id`.
fn answers(message: &Value, id: &Value) -> bool {
    message.get("method").is_none()
        && message.get("id") == Some(id)
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// Reads a `text/event-stream` answer as it arrives, until the JSON-RPC response to one
/// request: the events before it (progress and other notifications) are kept in the
/// transcript for the first caller, never in the stored response.
#[derive(Debug, Default)]
pub struct EventStream {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The `data` lines of the event being read.
    data: Vec<u8>,
    /// Every byte read so far.
    transcript: Vec<u8>,
    /// The last byte read was a `\r` (a `\n` right after it ends no second line).
    after_cr: bool,
}

impl EventStream {
    /// Feeds the next bytes of the stream; the JSON-RPC response to `id` once its event is
    /// complete (bytes after it in the same chunk are not read).
    pub fn feed(&mut self, chunk: &[u8], id: &Value) -> Option<Bytes> {
        for (i, &b) in chunk.iter().enumerate() {
            let after_cr = std::mem::replace(&mut self.after_cr, b == b'\r');
            if b == b'\n' && after_cr {
                continue;
            }
            if b != b'\n' && b != b'\r' {
                self.line.push(b);
                continue;
            }
            if let Some(found) = self.line_ended(id) {
                self.transcript.extend_from_slice(&chunk[..=i]);
                // An event's blank line spelled `\r\n`: its `\n` belongs to it.
                if b == b'\r' && chunk.get(i + 1) == Some(&b'\n') {
                    self.transcript.push(b'\n');
                }
                return Some(found);
            }
        }
        self.transcript.extend_from_slice(chunk);
        None
    }

    /// A line ended: a field of the event, or the blank line that dispatches it.
    fn line_ended(&mut self, id: &Value) -> Option<Bytes> {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            let data = std::mem::take(&mut self.data);
            let message: Value = serde_json::from_slice(&data).ok()?;
            return answers(&message, id).then(|| Bytes::from(data));
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(at) => (&line[..at], &line[at + 1..]),
            None => (&line[..], &[][..]),
        };
        if field == b"data" {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            if !self.data.is_empty() {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
        }
        None
    }

    /// Every byte read so far, the response's event included once it was found.
    pub fn transcript(self) -> Bytes {
        Bytes::from(self.transcript)
    }
}

/// A stored answer of a tool as the answer to the request `id`: a JSON-RPC response with its
/// `id` replaced (the same bytes when nothing changes); any other JSON object, as an operator
/// may resolve with, is the `result`; anything else is the text of the result. For a request
/// of the `single_exchange` form, a result is tagged as that form requires.
pub fn answer_for(body: &[u8], id: &Value, single_exchange: bool) -> Bytes {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let mut message = match parsed {
        Some(Value::Object(mut message)) if message.contains_key("jsonrpc") => {
            let untagged = (message.get("result"))
                .is_some_and(|r| r.is_object() && r.get("resultType").is_none());
            if message.get("id") == Some(id) && !(single_exchange && untagged) {
                return Bytes::copy_from_slice(body);
            }
            message.insert("id".into(), id.clone());
            Value::Object(message)
        }
        Some(result @ Value::Object(_)) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        _ => {
            let text = String::from_utf8_lossy(body);
            let result = json!({"content": [{"type": "text", "text": text}]});
            json!({"jsonrpc": "2.0", "id": id, "result": result})
        }
    };
    if let Some(result) = message.get_mut("result") {
        tagged(result, single_exchange);
    }
    Bytes::from(message.to_string())
}

/// A `text/event-stream` transcript whose responses answer the request `id`: each event whose
/// data is a JSON-RPC response is written again with that `id`; every other event as it came.
pub fn events_for(transcript: &[u8], id: &Value) -> Bytes {
    let text = String::from_utf8_lossy(transcript).replace("\r\n", "\n");
    let mut out = String::with_capacity(text.len());
    for event in text.split_inclusive("\n\n") {
        let data: Vec<&str> = (event.lines())
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|v| v.strip_prefix(' ').unwrap_or(v))
            .collect();
        let message: Option<Value> = serde_json::from_str(&data.join("\n")).ok();
        let Some(Value::Object(mut message)) = message else {
            out.push_str(event);
            continue;
        };
        if message.get("method").is_some() || message.get("id") == Some(id) {
            out.push_str(event);
            continue;
        }
        message.insert("id".into(), id.clone());
        for line in (event.lines()).filter(|l| !l.is_empty() && !l.starts_with("data:")) {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str(&format!("data: {}\n\n", Value::Object(message)));
    }
    Bytes::from(out)
}

/// A problem as the MCP tool error the model reads: the JSON-RPC response to `id` whose
/// `result` says `detail` and carries the problem object under `_meta.idemproxy`.
pub fn tool_error(id: &Value, problem: &Map<String, Value>, single_exchange: bool) -> Bytes {
    let detail = problem.get("detail").and_then(Value::as_str).unwrap_or("");
    let mut result = json!({
        "content": [{"type": "text", "text": detail}],
        "isError": true,
        "_meta": {"idemproxy": problem},
    });
    tagged(&mut result, single_exchange);
    Bytes::from(json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn call(name: &str) -> Value {
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
               "params": {"name": name, "arguments": {"invoice": "in_1"}, "_meta": {"t": 1}}})
    }

    #[test]
    fn a_tools_call_names_its_tool_and_arguments() {
        let Message::ToolCall(c) = message(&call("refund")) else {
            panic!("a tools/call")
        };
        assert_eq!(c.id, Some(json!(7)));
        assert_eq!(c.name.as_deref(), Some("refund"));
        assert_eq!(c.arguments, json!({"invoice": "in_1"}));
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        assert_eq!(
            message(&list),
            Message::Other {
                method: Some("tools/list".into())
            }
        );
        let batch = json!([list, call("refund")]);
        assert_eq!(message(&batch), Message::Batch { tool_calls: true });
    }

    #[test]
    fn routing_headers_must_say_what_the_body_says() {
        let refund = message(&call("refund"));
        let mut h = HeaderMap::new();
        assert_eq!(headers_agree(&h, &refund), Ok(()));
        h.insert("mcp-method", HeaderValue::from_static("tools/call"));
        h.insert("mcp-name", HeaderValue::from_static("refund"));
        assert_eq!(headers_agree(&h, &refund), Ok(()));
        h.insert("mcp-name", HeaderValue::from_static("lookup"));
        assert!(headers_agree(&h, &refund).unwrap_err().contains("`lookup`"));
        h.insert("mcp-method", HeaderValue::from_static("tools/list"));
        h.remove("mcp-name");
        assert!(
            headers_agree(&h, &refund)
                .unwrap_err()
                .contains("Mcp-Method")
        );
        let list = message(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
        assert_eq!(headers_agree(&h, &list), Ok(()));
        h.append("mcp-method", HeaderValue::from_static("tools/list"));
        assert!(
            headers_agree(&h, &list)
                .unwrap_err()
                .contains("more than once")
        );
    }

    #[test]
    fn the_response_is_taken_out_of_an_event_stream_in_any_chunking() {
        let stream = "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\r\n\r\n\
                      event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\r\n\r\n\
                      data: {\"jsonrpc\":\"2.0\",\"id\":7,\r\ndata: \"result\":{\"ok\":true}}\r\n\r\nafter";
        for size in [1, 2, 3, 7, 500] {
            let mut events = EventStream::default();
            let mut found = None;
            for chunk in stream.as_bytes().chunks(size) {
                if let Some(f) = events.feed(chunk, &json!(7)) {
                    found = Some(f);
                    break;
                }
            }
            let found = found.expect("the response to 7");
            let value: Value = serde_json::from_slice(&found).unwrap();
            assert_eq!(value["result"]["ok"], true, "chunks of {size}");
            let transcript = String::from_utf8(events.transcript().to_vec()).unwrap();
            assert!(
                transcript.contains("\"result\":{\"ok\":true}}\r\n\r"),
                "chunks of {size}"
            );
            assert!(!transcript.contains("after"), "chunks of {size}");
        }
    }

    #[test]
    fn a_stored_answer_answers_the_replaying_request() {
        let stored = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#;
        assert_eq!(&answer_for(stored, &json!(7), false)[..], &stored[..]);
        let replayed: Value =
            serde_json::from_slice(&answer_for(stored, &json!("b"), false)).unwrap();
        assert_eq!(replayed["id"], "b");
        assert_eq!(replayed["result"]["content"], json!([]));
        let resolved: Value =
            serde_json::from_slice(&answer_for(br#"{"content":[]}"#, &json!(3), true)).unwrap();
        assert_eq!(
            resolved["result"],
            json!({"content": [], "resultType": "complete"})
        );
        let text: Value = serde_json::from_slice(&answer_for(b"done", &json!(3), false)).unwrap();
        assert_eq!(text["result"]["content"][0]["text"], "done");
    }

    #[test]
    fn an_event_stream_answers_the_request_that_asked() {
        let stream = "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n\
                      event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n";
        let out = String::from_utf8(events_for(stream.as_bytes(), &json!(9)).to_vec()).unwrap();
        assert!(
            out.starts_with("data: {\"jsonrpc\":\"2.0\",\"method\""),
            "{out}"
        );
        assert!(
            out.contains("event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":9,"),
            "{out}"
        );
    }

    #[test]
    fn a_tool_error_carries_the_detail_and_the_problem() {
        let mut problem = Map::new();
        problem.insert("detail".into(), json!("Held."));
        problem.insert("type".into(), json!("urn:idemproxy:outcome-unknown"));
        let v: Value = serde_json::from_slice(&tool_error(&json!(4), &problem, false)).unwrap();
        assert_eq!(v["id"], 4);
        assert_eq!(v["result"]["isError"], true);
        assert_eq!(v["result"]["content"][0]["text"], "Held.");
        assert_eq!(
            v["result"]["_meta"]["idemproxy"]["type"],
            "urn:idemproxy:outcome-unknown"
        );
    }
}
