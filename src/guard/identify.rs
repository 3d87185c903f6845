//! Step 2 of a guarded request: the body parsed once, the fingerprint (of an MCP tool call:
//! its name and arguments only), the operation ID, the key, and the request as it will be sent.

use bytes::Bytes;
use http::header;
use http::request::Parts;

use super::{Identified, Identity, OVERRIDDEN_BY_FORM, Requests, Target};
use crate::app::App;
use crate::body;
use crate::claim::{Actor, Ask};
use crate::fingerprint;
use crate::identity;
use crate::kept::{KeptRequest, Outgoing, place_key};
use crate::policy::{Captures, KeyPlacement, OnMissingId, Protocol, Provider, Route};
use crate::problem::Problem;
use crate::template::{self, render_first};
use crate::upstream;

/// Step 2: the body parsed (a JSON body must not repeat a key within an object), fingerprint,
/// operation ID, key, and the request as it will be sent.
pub(super) fn identify(
    app: &App,
    provider: &Provider,
    route: &Route,
    target: &Target<'_>,
    captures: &Captures,
    parts: Parts,
    bytes: Bytes,
) -> Result<Identity, Problem> {
    let secret = &app.secret;
    // A JSON body must not repeat a key within an object.
    let body = body::parse_checked(parts.headers.get(header::CONTENT_TYPE), bytes.clone())
        .map_err(|repeated| Problem::InvalidBody(repeated.to_string()))?;
    if body.overrides_method() {
        return Err(Problem::InvalidMethod(OVERRIDDEN_BY_FORM.into()));
    }
    let tool = ToolParams::of(provider, route, &body)?;
    // The fingerprint's hex alone: a replay needs nothing more (`Named::complete` adds the rest).
    let hex = fingerprint::hex_only(&fingerprint_inputs(
        app,
        provider,
        route,
        target,
        (&parts, &body),
        tool.as_ref(),
    ));
    let inputs = template::Sources {
        headers: &parts.headers,
        query: parts.uri.query(),
        body: &body,
        captures,
        provider: &provider.name,
        route: &route.name,
        fingerprint: Some(&hex),
        key: None,
        operation_id: None,
        answer: None,
    };
    let rendered = match render_first(&route.operation_id, &inputs) {
        Err(invalid) => return Err(Problem::InvalidBody(invalid.0)),
        Ok(Ok(rendered)) => rendered,
        Ok(Err(_)) if route.on_missing_id == OnMissingId::Pass => {
            let plain = outgoing(provider, target, parts, bytes)?;
            return Ok(Identity::Pass(Box::new(plain)));
        }
        Ok(Err(missing)) => return Err(Problem::MissingOperationId { missing }),
    };
    let id = identity::operation_id(&provider.name, &route.name, &rendered)
        .map_err(|e| Problem::InvalidOperationId { len: e.len })?;
    let principal = app.anonymous.principal(provider, &parts.headers, secret);
    Ok(Identity::Op(Box::new(Named {
        id,
        hex,
        principal,
        parts,
        body,
        bytes,
        tool,
    })))
}

/// What an MCP tool call's fingerprint covers instead of the request's path, query and body:
/// the tool's name and its arguments (never the JSON-RPC `id`, `params._meta` or a session).
struct ToolParams {
    /// `tools/call/NAME`, in the place of the path.
    path: String,
    /// `params.arguments`, in the place of the body.
    arguments: body::Body,
}

impl ToolParams {
    /// `None` for a provider that is not an MCP server.
    fn of(provider: &Provider, route: &Route, body: &body::Body) -> Result<Option<Self>, Problem> {
        if provider.protocol != Protocol::Mcp {
            return Ok(None);
        }
        let call = match body {
            body::Body::Json(value) => match crate::jsonrpc::message(value) {
                crate::jsonrpc::Message::ToolCall(call) => Some(call),
                _ => None,
            },
            _ => None,
        };
        let Some(call) = call else {
            return Err(Problem::InvalidBody(
                "the body is not a JSON-RPC tools/call request".into(),
            ));
        };
        Ok(Some(ToolParams {
            path: format!("tools/call/{}", route.tool.as_deref().unwrap_or_default()),
            arguments: body::Body::Json(call.arguments),
        }))
    }
}

fn fingerprint_inputs<'a>(
    app: &'a App,
    provider: &'a Provider,
    route: &'a Route,
    target: &'a Target<'_>,
    (parts, body): (&'a Parts, &'a body::Body),
    tool: Option<&'a ToolParams>,
) -> fingerprint::Inputs<'a> {
    let key_field = match &provider.key {
        KeyPlacement::JsonField(pointer) => Some(pointer.as_str()),
        KeyPlacement::Header(_) => None,
    };
    let (path, query, body, key_field) = match tool {
        None => (target.rel_path.as_str(), parts.uri.query(), body, key_field),
        // The key field, when it is among the arguments, relative to them.
        Some(tool) => (
            tool.path.as_str(),
            None,
            &tool.arguments,
            key_field
                .and_then(|p| p.strip_prefix("/params/arguments"))
                .filter(|p| p.starts_with('/')),
        ),
    };
    fingerprint::Inputs {
        method: &parts.method,
        path,
        query,
        body,
        headers: &parts.headers,
        fingerprint_headers: &route.fingerprint_headers,
        ignore: &route.fingerprint_ignore,
        key_field,
        secret: &app.secret,
        methods: Some(&app.methods),
    }
}

/// A guarded request whose operation ID is known: enough to answer a replay.
pub(super) struct Named {
    pub(super) id: String,
    /// The fingerprint's hex (`fingerprint::hex_only`).
    pub(super) hex: String,
    pub(super) principal: String,
    pub(super) parts: Parts,
    pub(super) body: body::Body,
    pub(super) bytes: Bytes,
    tool: Option<ToolParams>,
}

impl Named {
    /// Everything a claim needs: the full fingerprint, the key and the outgoing requests.
    pub(super) fn complete(
        self,
        app: &App,
        provider: &Provider,
        route: &Route,
        target: &Target<'_>,
    ) -> Result<Identified, Problem> {
        let inputs = fingerprint_inputs(
            app,
            provider,
            route,
            target,
            (&self.parts, &self.body),
            self.tool.as_ref(),
        );
        let fingerprint = fingerprint::completed(&inputs, self.hex);
        let key = identity::key(&self.id, provider.key_format, provider.key_length);
        let plain = outgoing(provider, target, self.parts, self.bytes)?;
        let first = place_key(plain.clone(), &key, &provider.key)
            .map_err(|e| Problem::InvalidBody(e.to_string()))?;
        let ask = Ask {
            id: self.id.clone(),
            key,
            placement: provider.key.clone(),
            fingerprint,
            principal: self.principal,
            first: Some(KeptRequest::of(&first)),
            actor: Actor::Agent,
        };
        let requests = Requests {
            id: self.id,
            plain,
            first,
        };
        Ok(Identified { ask, requests })
    }
}

/// Step 3 prepared in advance: the provider's URL, control and hop-by-hop headers removed.
fn outgoing(
    provider: &Provider,
    target: &Target<'_>,
    mut parts: Parts,
    bytes: Bytes,
) -> Result<Outgoing, Problem> {
    let uri = upstream::target_uri(provider, &target.rel_path, parts.uri.query())
        .map_err(|e| Problem::InvalidBody(format!("the request path is not valid: {e}")))?;
    upstream::outbound_headers(&mut parts.headers, provider);
    Ok(Outgoing {
        method: parts.method,
        uri,
        headers: parts.headers,
        body: bytes,
    })
}
