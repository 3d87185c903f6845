//! The endpoint of an MCP provider (`protocol = "mcp"`): every `POST` to exactly its mount,
//! routed by its JSON-RPC body (docs/reference.md section 13).
//!
//! `handle` reads the body (within `max_request_body`, as a guarded request's), reads what the
//! message is, refuses routing headers that disagree with it, and then either hands a
//! `tools/call` of a guarded tool to `guard` (the same ledger protocol as any guarded route)
//! or sends the buffered message on unguarded, its answer streamed back. What `guard`
//! answers is shaped for the MCP client: a problem becomes a tool error, a stored response
//! answers the request's own `id`. It never writes the ledger and never decides a state.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, Version, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;

use crate::app::App;
use crate::body::{self, Body};
use crate::guard::{self, Answer, Read, Target};
use crate::jsonrpc::{self, Message, ToolCall};
use crate::policy::{Route, Unmatched};
use crate::problem::{Context, Own, Problem};
use crate::upstream;
use crate::wire::{ProxyBody, full};

/// Serves one request to an MCP provider's endpoint that may carry a message (a `POST`, see
/// `Provider::takes_tool_calls`): the answer, its metrics outcome, and the route of the tool
/// it called, if a route names it.
pub async fn handle<'a>(
    app: &Arc<App>,
    target: &Target<'a>,
    req: Request<Incoming>,
) -> (Answer, Option<&'a Route>) {
    let provider = target.provider;
    let ctx = Context {
        provider: Some(provider.name.clone()),
        ..Context::default()
    };
    let read = match guard::read_body(app, req).await {
        Ok(read) => read,
        Err(problem) => return ((problem.into_response(&ctx), "rejected"), None),
    };
    let message = match read_message(&read) {
        Ok(message) => message,
        Err((why, None)) => {
            let problem = Problem::InvalidBody(why);
            return ((problem.into_response(&ctx), "rejected"), None);
        }
        // A tool call hears it as a tool error, like any other problem.
        Err((why, Some(id))) => {
            let problem = Problem::InvalidBody(why);
            let single = jsonrpc::single_exchange(&read.parts.headers);
            let resp = Box::pin(for_client(problem.into_response(&ctx), &id, single)).await;
            return ((resp, "rejected"), None);
        }
    };
    match message {
        Message::ToolCall(call) => Box::pin(tool_call(app, target, call, read, &ctx)).await,
        Message::Batch { tool_calls: true } => {
            let why = "a batch may not hold a tools/call (send each call in a request of its own)";
            let problem = Problem::InvalidBody(why.into());
            ((problem.into_response(&ctx), "rejected"), None)
        }
        _ => ((passthrough(app, target, read).await, "passthrough"), None),
    }
}

/// A `tools/call`: guarded when a guarded route names its tool, refused when none does and
/// the provider rejects what it does not name, else passed through.
async fn tool_call<'a>(
    app: &Arc<App>,
    target: &Target<'a>,
    call: ToolCall,
    read: Read,
    ctx: &Context,
) -> (Answer, Option<&'a Route>) {
    let single = jsonrpc::single_exchange(&read.parts.headers);
    let route = call
        .name
        .as_deref()
        .and_then(|n| target.provider.tool_route(n));
    let (resp, outcome) = match (route, &call.id) {
        (Some(route), Some(_)) if route.is_guarded() => {
            Box::pin(guard::handle_read(app, target, route, &Vec::new(), read)).await
        }
        (Some(route), None) if route.is_guarded() => {
            let why = "a tools/call of a guarded tool needs an id (it was sent as a notification)";
            let problem = Problem::InvalidBody(why.into());
            return ((problem.into_response(ctx), "rejected"), Some(route));
        }
        (None, _) if target.provider.unmatched == Unmatched::Reject => {
            (Problem::RouteNotAllowed.into_response(ctx), "rejected")
        }
        _ => return ((passthrough(app, target, read).await, "passthrough"), route),
    };
    let id = call.id.unwrap_or(Value::Null);
    let resp = match outcome {
        // `on_missing_id = "pass"`: sent unguarded, answered as it came.
        "passthrough" => resp,
        _ => Box::pin(for_client(resp, &id, single)).await,
    };
    ((resp, outcome), route)
}

/// What the buffered body is; a body that is not one JSON value (objects naming a key once),
/// or whose routing headers disagree with it, is refused: no server must read it otherwise.
/// The refusal is an `invalid-body` problem's detail; a refused tool call's `id` comes with it.
fn read_message(read: &Read) -> Result<Message, (String, Option<Value>)> {
    let json = HeaderValue::from_static("application/json");
    let parsed = body::parse_checked(Some(&json), read.bytes.clone())
        .map_err(|repeated| (repeated.to_string(), None))?;
    let Body::Json(value) = parsed else {
        let why = "the MCP endpoint takes JSON-RPC messages, and this body is not JSON";
        return Err((why.into(), None));
    };
    let message = jsonrpc::message(&value);
    if let Err(why) = jsonrpc::headers_agree(&read.parts.headers, &message) {
        let id = match message {
            Message::ToolCall(call) => call.id,
            _ => None,
        };
        return Err((why, id));
    }
    Ok(message)
}

/// A guarded answer as the MCP client of the request `id` reads it: a problem as a tool error
/// (HTTP 200, its `Idem-*` headers kept); a JSON-RPC response, stored or fresh, under `id`.
async fn for_client(resp: Response<ProxyBody>, id: &Value, single: bool) -> Response<ProxyBody> {
    let (mut parts, body) = resp.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        // The proxy's own bodies are in memory: they do not break.
        Err(_) => Bytes::new(),
    };
    let content_type = parts.headers.get(header::CONTENT_TYPE).cloned();
    let content_type = content_type.as_ref().and_then(|v| v.to_str().ok());
    let bytes = match parts.extensions.remove::<Own>() {
        Some(own) => {
            parts.status = StatusCode::OK;
            let json = HeaderValue::from_static("application/json");
            parts.headers.insert(header::CONTENT_TYPE, json);
            jsonrpc::tool_error(id, &own.body, single)
        }
        None if !parts.status.is_success() => bytes,
        None if content_type.is_some_and(|t| t.starts_with("text/event-stream")) => {
            jsonrpc::events_for(&bytes, id)
        }
        None => {
            // An operator's resolution may name no content type: the answer is JSON.
            let json = HeaderValue::from_static("application/json");
            parts.headers.insert(header::CONTENT_TYPE, json);
            jsonrpc::answer_for(&bytes, id, single)
        }
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, full(bytes))
}

/// Sends a buffered message that nothing guards, streaming the answer back.
async fn passthrough(app: &App, target: &Target<'_>, read: Read) -> Response<ProxyBody> {
    let provider = target.provider;
    let Read {
        mut parts, bytes, ..
    } = read;
    let uri = match upstream::origin_target(provider, &target.rel_path, parts.uri.query()) {
        Ok(uri) => uri,
        Err(e) => {
            let problem = Problem::InvalidBody(format!("the request path is not valid: {e}"));
            return problem.into_response(&Context::default());
        }
    };
    upstream::outbound_headers(&mut parts.headers, provider);
    parts.uri = uri;
    parts.version = Version::HTTP_11;
    let out = Request::from_parts(parts, full(bytes));
    crate::dispatch::stream(app, provider, out)
        .await
        .unwrap_or_else(|problem| {
            problem.into_response(&Context {
                provider: Some(provider.name.clone()),
                ..Context::default()
            })
        })
}
