//! The request path: from an agent's request to the provider and back.
//!
//! `handle` reads top to bottom: resolve the provider and route, then either stream the
//! request through unguarded (`passthrough`) or hand it to `guard` for the ledger protocol.
//! Unguarded traffic is never buffered, but for a form that could carry `_method` to a path a
//! guarded route takes under another method. This module never writes the ledger itself.
//! Every answer leaves through `handle`, where the proxy's own problem answers are shaped
//! for the provider's SDK (`shape`). Before either, it refuses what must not be forwarded at all: a request that looped back
//! to this proxy, and under a provider with guarded routes, spellings of a path or method
//! that a server could take for a guarded route (`path`).

use std::sync::Arc;
use std::time::Instant;

use http::{Method, Request, Response, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::app::{App, Forward};
use crate::guard::Target;
use crate::path;
use crate::policy::{Captures, PathCase, Provider, Route, Unmatched};
use crate::problem::{Context, Problem};
use crate::upstream;
use crate::wire::{BoxError, ProxyBody};

/// Marks a request that arrived inside an intercepted CONNECT tunnel to `host:port`: it is
/// routed to the provider whose upstream that is, as a forward-proxy request for
/// `https://host:port/path` would be, and refused (421) if it names another host.
#[derive(Debug, Clone)]
pub struct Intercepted {
    pub host: String,
    pub port: u16,
}

/// Serves one agent request.
pub async fn handle(app: Arc<App>, req: Request<Incoming>) -> Response<ProxyBody> {
    let started = Instant::now();
    let (target, method, req) = match routed(&app, req) {
        Ok(routed) => routed,
        Err((problem, provider)) => return refusal(&app, problem, provider),
    };
    let provider = target.provider.name.as_str();
    let mut route_name = target.route.as_ref().map(|(r, _)| r.name.as_str());
    let (mut resp, outcome) = match &target.route {
        // An MCP endpoint's route is named by the body: `mcp` reads it.
        None if target.provider.takes_tool_calls(&method, &target.rel_path) => {
            let (answer, tool) = Box::pin(crate::mcp::handle(&app, &target, req)).await;
            route_name = tool.map(|r| r.name.as_str());
            answer
        }
        None if target.provider.unmatched == Unmatched::Reject => {
            let ctx = Context {
                provider: Some(provider.to_string()),
                ..Context::default()
            };
            (Problem::RouteNotAllowed.into_response(&ctx), "rejected")
        }
        Some((route, captures)) if route.is_guarded() => {
            // Boxed: the guarded path's future is large, and unboxed it would make every
            // request's future that large, moved and zeroed on the pass-through path too.
            Box::pin(crate::guard::handle(&app, &target, route, captures, req)).await
        }
        _ => (passthrough(&app, &target, req).await, "passthrough"),
    };
    crate::shape::apply(target.provider, &mut resp);
    app.metrics
        .request(provider, route_name.unwrap_or(""), outcome);
    // The access log line: at `debug`, so the default filter (`info`) writes nothing per
    // request (a blocking write to stderr was ~5% of pass-through time); turn it on with
    // `IDEMPROXY_LOG=info,idemproxy::proxy=debug`. The operation ID is the answer's own
    // `Idem-Operation-Id` (percent-encoded, so no control character reaches the log), to
    // match the line with `idemproxy ops show`; the path is the route's, never the request's.
    tracing::debug!(
        provider,
        route = route_name.unwrap_or("-"),
        path = route_path(&target),
        operation = operation_of(&resp),
        %method,
        status = resp.status().as_u16(),
        outcome,
        ms = started.elapsed().as_millis() as u64,
        "request"
    );
    resp
}

/// Where `req` goes, its method (for the access log) and the request with the headers that
/// change with what the proxy is (`upstream::forwarding_headers`); or why it is refused.
/// Apart from `handle`, whose future every request's is: a request borrowed there would keep a
/// copy of itself in that future across every await.
fn routed(
    app: &App,
    mut req: Request<Incoming>,
) -> Result<(Target<'_>, Method, Request<Incoming>), Refused> {
    let method = req.method().clone();
    let target = resolve(app, &req).inspect_err(|(problem, _)| {
        tracing::info!(%method, status = problem.status().as_u16(), outcome = problem.kind(), "refused");
    })?;
    // An MCP endpoint's message may be a guarded tool call: its answer may be stored too.
    let guarded = target.route.as_ref().is_some_and(|(r, _)| r.is_guarded())
        || (target.provider).takes_tool_calls(&method, &target.rel_path);
    let version = req.version();
    // Hop-by-hop headers, and whatever `Connection` names, go first: what the guard reads
    // (body type, principal, templates) is what is sent, and nothing named there can strip
    // what the proxy sets next.
    upstream::strip_hop_by_hop(req.headers_mut());
    upstream::forwarding_headers(req.headers_mut(), &app.via, version, guarded);
    Ok((target, method, req))
}

/// The answer to a request refused before it was routed, shaped for its provider's SDK once
/// the provider is known.
fn refusal(app: &App, problem: Problem, provider: Option<String>) -> Response<ProxyBody> {
    let mut resp = problem.into_response(&Context {
        provider: provider.clone(),
        ..Context::default()
    });
    if let Some(provider) = provider.as_deref().and_then(|name| app.provider(name)) {
        crate::shape::apply(provider, &mut resp);
    }
    resp
}

/// The path of the route's `match` (`/v1/refunds/{id}`), or `-` for an unmatched request.
fn route_path<'a>(target: &'a Target<'_>) -> &'a str {
    target.route.as_ref().map_or("-", |(r, _)| {
        r.pattern
            .split_once(' ')
            .map_or(r.pattern.as_str(), |(_, path)| path)
    })
}

/// The answer's `Idem-Operation-Id` as sent (percent-encoded), or `-` when it has none.
fn operation_of(resp: &Response<ProxyBody>) -> &str {
    resp.headers()
        .get("idem-operation-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
}

/// A refusal before the request is routed, with the provider's name once it is known.
type Refused = (Problem, Option<String>);

/// Finds the provider and the route: refuses loops, then spellings that could reach a
/// guarded route unguarded (see `path`).
///
/// Every request is routed and sent in its normalized form (`path::normalize`), computed on
/// the whole path before the mount or base path is taken off, so `/mount/../x` is not under
/// the mount and no request leaves outside the upstream's base path.
fn resolve<'a>(app: &'a App, req: &Request<Incoming>) -> Result<Target<'a>, Refused> {
    if req.method() == Method::CONNECT {
        return Err((Problem::ConnectNotSupported, None));
    }
    if app.via.seen_in(req.headers()) {
        return Err((Problem::LoopDetected, None));
    }
    let raw = req.uri().path();
    let (provider, rel_path) = locate(app, req, &path::normalize(raw)).map_err(|p| (p, None))?;
    let refused = |problem| (problem, Some(provider.name.clone()));
    if provider.guards_routes() {
        screen(req, raw).map_err(refused)?;
    }
    let route = provider.route_for(req.method(), &rel_path);
    let rel_path = match (&route, provider.path_case) {
        (Some((r, captures)), PathCase::Insensitive) => r.matcher.spell(captures),
        _ => rel_path,
    };
    // The MCP endpoint itself is told apart by its body, not its spelling (`mcp`).
    if provider.guards_routes() && !provider.takes_tool_calls(req.method(), &rel_path) {
        near_guarded(provider, req.method(), &rel_path, route.as_ref()).map_err(refused)?;
    }
    Ok(Target {
        provider,
        rel_path,
        route,
    })
}

/// Refuses a request another server could take for a guarded route where the proxy sees it
/// reach none, or reach one with other captures: one that meets a guarded route with letter
/// case ignored (in the method and the literals), or whose loose reading
/// (`path::loose_reading`: decoded once more, trailing whitespace trimmed) does.
fn near_guarded(
    provider: &Provider,
    method: &Method,
    rel_path: &str,
    route: Option<&(&Route, Captures)>,
) -> Result<(), Problem> {
    if !route.is_some_and(|(r, _)| r.is_guarded())
        && let Some(guarded) = provider.guarded_ignoring_case(method, rel_path)
    {
        // Matched as written (any case is "as written" under `insensitive`): an unguarded
        // route listed before it took the request.
        if let Some((taken, _)) = route
            && (provider.path_case == PathCase::Insensitive
                || guarded.matcher.matches(method, rel_path).is_some())
        {
            return Err(Problem::ShadowedRoute {
                taken: taken.pattern.clone(),
                guarded: guarded.pattern.clone(),
            });
        }
        return Err(Problem::InvalidPath(format!(
            "differs only in letter case from the guarded route `{}`",
            guarded.pattern
        )));
    }
    if let Some(reading) = path::loose_reading(rel_path)
        && let Some(guarded) = provider.guarded_ignoring_case(method, &reading)
    {
        return Err(Problem::InvalidPath(format!(
            "reads as `{reading}`, a path of the guarded route `{}`, to a server that decodes \
             it once more or trims trailing whitespace",
            guarded.pattern
        )));
    }
    Ok(())
}

/// The provider of a request (by mount, or by host, port and base path for absolute-form
/// requests) and the route-relative rest of its normalized `path`.
fn locate<'a>(
    app: &'a App,
    req: &Request<Incoming>,
    path: &str,
) -> Result<(&'a Provider, String), Problem> {
    if let Some(tunnel) = req.extensions().get::<Intercepted>() {
        return intercepted(app, req, tunnel, path);
    }
    let uri = req.uri();
    // h2 requests always carry an authority; only HTTP/1 absolute-form means forward proxying.
    let forward = req.version() < Version::HTTP_2 && uri.authority().is_some();
    if !forward {
        return app.provider_for_path(path).ok_or(Problem::NoMount);
    }
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
    let host = uri.host().unwrap_or_default();
    match app.provider_for_host(host, uri.port_u16(), path) {
        Forward::To(provider, rel_path) => Ok((provider, rel_path)),
        Forward::Unknown => Err(Problem::NoHost(authority.to_string())),
        Forward::Ambiguous => Err(Problem::AmbiguousHost(host.to_string())),
    }
}

/// The provider of a request inside the tunnel to `tunnel`, after checking that the host it
/// names (its authority, else its `Host`) is the tunnel's: the tunnel's certificate covers
/// that host alone, and a request for another must not reach this one's provider.
fn intercepted<'a>(
    app: &'a App,
    req: &Request<Incoming>,
    tunnel: &Intercepted,
    path: &str,
) -> Result<(&'a Provider, String), Problem> {
    let named = match req.uri().authority() {
        Some(authority) => Some(authority.as_str()),
        None => req
            .headers()
            .get(http::header::HOST)
            .map(|h| h.to_str().unwrap_or("\u{fffd}")),
    };
    if let Some(named) = named
        && !names_host(named, &tunnel.host, tunnel.port)
    {
        return Err(Problem::Misdirected {
            tunnel: format!("{}:{}", tunnel.host, tunnel.port),
            named: named.chars().take(256).collect(),
        });
    }
    match app.provider_for_host(&tunnel.host, Some(tunnel.port), path) {
        Forward::To(provider, rel_path) => Ok((provider, rel_path)),
        Forward::Unknown => Err(Problem::NoHost(format!("{}:{}", tunnel.host, tunnel.port))),
        Forward::Ambiguous => Err(Problem::AmbiguousHost(tunnel.host.clone())),
    }
}

/// Whether an authority (`host[:port]`) names `host` and `port` (443, https's, when it names
/// none).
fn names_host(authority: &str, host: &str, port: u16) -> bool {
    let Ok(authority) = authority.parse::<http::uri::Authority>() else {
        return false;
    };
    let named = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    named.eq_ignore_ascii_case(host) && authority.port_u16().unwrap_or(443) == port
}

/// Headers that ask a server to act as another method than the request line's.
const METHOD_OVERRIDES: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Under a provider with guarded routes: a raw path another server could read as another
/// path, a method not in upper case (a server may fold it), or a method override header.
fn screen(req: &Request<Incoming>, raw: &str) -> Result<(), Problem> {
    if let Some(why) = path::ambiguity(raw) {
        return Err(Problem::InvalidPath(why.to_string()));
    }
    if (req.uri().query()).is_some_and(|q| crate::body::names_method_field(q.as_bytes())) {
        return Err(Problem::InvalidMethod(
            "is overridden by the `_method` query parameter".into(),
        ));
    }
    let method = req.method().as_str();
    if method.bytes().any(|b| b.is_ascii_lowercase()) {
        return Err(Problem::InvalidMethod(format!(
            "`{method}` is not in upper case"
        )));
    }
    // One pass over the headers present first: each lookup by name would parse and hash it.
    let overridden = req
        .headers()
        .keys()
        .any(|name| METHOD_OVERRIDES.contains(&name.as_str()));
    if !overridden {
        return Ok(());
    }
    match METHOD_OVERRIDES
        .iter()
        .find(|h| req.headers().contains_key(**h))
    {
        Some(name) => Err(Problem::InvalidMethod(format!(
            "is overridden by the `{name}` header"
        ))),
        None => Ok(()),
    }
}

/// Streams a request to the provider and its answer back, buffering neither body.
pub(crate) async fn passthrough(
    app: &App,
    target: &Target<'_>,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let provider = target.provider;
    let (parts, body) = req.into_parts();
    // Most pass-through requests carry no form: the header is looked at first.
    let body = if crate::body::may_carry_method_field(parts.headers.get(http::header::CONTENT_TYPE))
        && provider.guarded_under_another_method(&parts.method, &target.rel_path)
    {
        match Box::pin(without_method_field(app, &parts, body)).await {
            Ok(bytes) => crate::wire::full(bytes),
            Err(problem) => return problem.into_response(&Context::default()),
        }
    } else {
        body.map_err(BoxError::from).boxed()
    };
    let out = match outbound(target, parts, body) {
        Ok(out) => out,
        Err(problem) => return problem.into_response(&Context::default()),
    };
    crate::dispatch::stream(app, provider, out)
        .await
        .unwrap_or_else(|problem| {
            problem.into_response(&Context {
                provider: Some(provider.name.clone()),
                route: target.route.as_ref().map(|(r, _)| r.name.clone()),
                ..Context::default()
            })
        })
}

/// A form sent unguarded where a guarded route takes the same path under another method,
/// read (up to `max_request_body`) and refused if it carries `_method`, which a server could
/// act on as that method; else sent as it came. The only unguarded body ever buffered.
async fn without_method_field(
    app: &App,
    parts: &http::request::Parts,
    body: Incoming,
) -> Result<bytes::Bytes, Problem> {
    let limit = app.config.limits.max_request_body;
    let bytes = crate::wire::collect_limited(body, limit)
        .await
        .map_err(|unread| match unread {
            crate::wire::Unbuffered::TooLarge => Problem::BodyTooLarge { limit },
            crate::wire::Unbuffered::Broken(_) => {
                Problem::InvalidBody("the request body could not be read to its end".into())
            }
        })?;
    let content_type = parts.headers.get(http::header::CONTENT_TYPE);
    if crate::body::carries_method_field(content_type, &bytes) {
        return Err(Problem::InvalidMethod(
            crate::guard::OVERRIDDEN_BY_FORM.into(),
        ));
    }
    Ok(bytes)
}

/// The request a pass-through sends, or the problem refusing it. Apart from `passthrough`, so
/// that what it builds takes no room in the future of every pass-through (a local borrowed
/// inside an `async fn` keeps its room there across every await after it).
fn outbound(
    target: &Target<'_>,
    mut parts: http::request::Parts,
    body: ProxyBody,
) -> Result<Request<ProxyBody>, Problem> {
    let provider = target.provider;
    let uri = upstream::origin_target(provider, &target.rel_path, parts.uri.query())
        .map_err(|e| Problem::InvalidBody(format!("the request path is not valid: {e}")))?;
    upstream::outbound_headers(&mut parts.headers, provider);
    parts.uri = uri;
    parts.version = Version::HTTP_11;
    Ok(Request::from_parts(parts, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `f` returns (never called).
    fn future_of<'a, F, Fut>(_: F) -> usize
    where
        F: Fn(&'a App, &'a Target<'a>, Request<Incoming>) -> Fut,
    {
        size_of::<Fut>()
    }

    fn handler_future_of<F, Fut>(_: F) -> usize
    where
        F: Fn(Arc<App>, Request<Incoming>) -> Fut,
    {
        size_of::<Fut>()
    }

    #[test]
    fn a_tunnels_requests_name_its_host_and_port() {
        assert!(names_host("api.stripe.com", "api.stripe.com", 443));
        assert!(names_host("API.Stripe.com:443", "api.stripe.com", 443));
        assert!(names_host("[::1]:8443", "::1", 8443));
        assert!(!names_host("api.stripe.com", "api.stripe.com", 8443));
        assert!(!names_host("api.stripe.com:444", "api.stripe.com", 443));
        assert!(!names_host("evil.example", "api.stripe.com", 443));
        assert!(!names_host(
            "api.stripe.com.evil.example",
            "api.stripe.com",
            443
        ));
        assert!(!names_host("not a host", "api.stripe.com", 443));
    }

    /// hyper moves a request's future (the handler's) for every request, and builds the
    /// pass-through's inside it: `handle` holds the request it is given (its argument) and a
    /// few words beside the pass-through's future, and no second copy of the request.
    #[test]
    fn the_handlers_future_holds_the_pass_through_and_one_request() {
        let request = size_of::<Request<Incoming>>();
        let (handle, passthrough) = (handler_future_of(handle), future_of(passthrough));
        assert!(
            handle <= passthrough + request + 256,
            "handle's future is {handle} bytes: the pass-through's {passthrough}, the \
             request's {request}, and more"
        );
    }
}
