//! The admin API (docs/reference.md section 7) on `admin_listen`: health, operations, operator decisions
//! (resolve, re-resolve, approve, reject, rebind), metrics, the live event stream and the operator's
//! console page.
//!
//! This module owns the admin routes, the bearer-token check, the refusal to expose the
//! API beyond loopback without a token, and (with `browser`) the refusal of web pages. It reaches the ledger only through its domain API and
//! never sends anything to a provider: an approval or a `failed` resolution only lets the
//! agent's next request through. It never logs or echoes the token.
//!
//! # Layout
//! - `error`: the admin refusals and their problem+json answers.
//! - `browser`: `Origin`, `Host` and `Content-Type` checks, so a web page cannot drive it.
//! - `view`: operations and events as JSON.
//! - `query`: the read-only calls (`/ops`, `/ops/{id}`, `/ops/{id}/response`, `/metrics`).
//! - `action`: the operator's writes (`resolve`, `re-resolve`, `approve`, `reject`, `rebind`),
//!   and `POST /admin/reload` (the reload itself is `reload`'s).
//! - `ui`: the operator's console (`GET /ui`), static files compiled in, over the calls above.
//! - `stream`: `GET /events`, the committed events as server-sent events.

mod action;
mod browser;
mod error;
mod query;
mod stream;
#[cfg(test)]
mod tests;
pub mod token;
mod ui;
mod view;

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body::Body;

pub use action::{MAX_REASON, Resolution};
/// The body parsers of the operator's calls, public for the fuzz targets in `fuzz/` only.
#[doc(hidden)]
pub use action::{parse_approve, parse_rebind, parse_reject, parse_resolution};
pub use error::AdminError;
pub use query::{DEFAULT_LIMIT, ListQuery, MAX_LIMIT, parse_list_query};
pub use stream::{EventFilter, KEEP_ALIVE, OPENING, parse_filter};
pub use token::{TOKEN_VAR, Token, check_exposure};

use crate::app::App;
use crate::reload::{Refused, Reloader, Trigger};
use crate::wire::{ProxyBody, Unbuffered, collect_limited, full};

/// Admin request bodies beyond `max_stored_response` (a resolve carries a whole response body,
/// JSON-escaped) by this much.
const BODY_SLACK: u64 = 64 * 1024;

/// Serves one admin request. Every call but `/healthz` must pass the browser checks (own
/// `Origin`; without a token, a loopback `Host`) and needs the token when one is set, except
/// the console's own files under `/ui`, which hold no data (the page asks for the token).
pub async fn handle<B>(
    app: Arc<App>,
    token: Option<Token>,
    reloader: Arc<Reloader>,
    req: Request<B>,
) -> Response<ProxyBody>
where
    B: Body<Data = Bytes>,
    B::Error: Into<crate::wire::BoxError>,
{
    let is_health = req.uri().path() == "/healthz";
    let tokened = token.is_some();
    if !is_health && let Err(e) = browser::check(req.headers(), req.uri(), tokened) {
        return e.into_response();
    }
    if ui::owns(req.uri().path()) {
        return ui::serve(req.method(), req.uri().path());
    }
    if let Some(token) = &token
        && !is_health
        && !token.admits(req.headers())
    {
        return AdminError::Unauthorized.into_response();
    }
    if req.uri().path() == "/admin/reload" {
        return match reload(&app, &reloader, req).await {
            Ok(resp) => resp,
            Err(e) => e.into_response(),
        };
    }
    match route(&app, req).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

/// An admin endpoint, from the method and the (still percent-encoded) path.
#[derive(Debug, PartialEq, Eq)]
enum Endpoint {
    Health,
    Metrics,
    Stats,
    Events,
    List,
    Show(String),
    Response(String),
    Resolve(String),
    ReResolve(String),
    Approve(String),
    Reject(String),
    Rebind(String),
}

impl Endpoint {
    /// The endpoint at `path`, or the refusal: an unknown path (404), a wrong method (405)
    /// or an ID that is not valid percent-encoded UTF-8 (400).
    fn of(method: &Method, path: &str) -> Result<Endpoint, AdminError> {
        let get = |e| {
            if method == Method::GET {
                Ok(e)
            } else {
                Err(AdminError::Method("GET"))
            }
        };
        let post = |e| {
            if method == Method::POST {
                Ok(e)
            } else {
                Err(AdminError::Method("POST"))
            }
        };
        match path {
            "/healthz" => return get(Endpoint::Health),
            "/metrics" => return get(Endpoint::Metrics),
            "/stats" => return get(Endpoint::Stats),
            "/events" => return get(Endpoint::Events),
            "/ops" | "/ops/" => return get(Endpoint::List),
            _ => {}
        }
        let no_path = || AdminError::NoPath(path.to_string());
        let rest = path.strip_prefix("/ops/").ok_or_else(no_path)?;
        let (encoded, action) = match rest.split_once('/') {
            Some((encoded, action)) => (encoded, Some(action)),
            None => (rest, None),
        };
        if encoded.is_empty() {
            return Err(no_path());
        }
        let id = crate::identity::decode(encoded).ok_or_else(|| {
            AdminError::BadRequest(
                "The operation ID in the path is not valid percent-encoded UTF-8.".into(),
            )
        })?;
        match action {
            None => get(Endpoint::Show(id)),
            Some("response") => get(Endpoint::Response(id)),
            Some("resolve") => post(Endpoint::Resolve(id)),
            Some("re-resolve") => post(Endpoint::ReResolve(id)),
            Some("approve") => post(Endpoint::Approve(id)),
            Some("reject") => post(Endpoint::Reject(id)),
            Some("rebind") => post(Endpoint::Rebind(id)),
            Some(_) => Err(no_path()),
        }
    }
}

async fn route<B>(app: &App, req: Request<B>) -> Result<Response<ProxyBody>, AdminError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<crate::wire::BoxError>,
{
    let endpoint = Endpoint::of(req.method(), req.uri().path())?;
    if let Endpoint::Resolve(id)
    | Endpoint::ReResolve(id)
    | Endpoint::Approve(id)
    | Endpoint::Reject(id)
    | Endpoint::Rebind(id) = &endpoint
        && let Some(gone) = query::expired(app, id).await?
    {
        return Ok(gone);
    }
    let query = req.uri().query().map(str::to_string);
    match endpoint {
        Endpoint::Health => health(app),
        Endpoint::Metrics => Ok(query::metrics(app).await),
        Endpoint::Stats => query::stats(app).await,
        Endpoint::Events => stream::events(app, query.as_deref()),
        Endpoint::List => query::list(app, query.as_deref()).await,
        Endpoint::Show(id) => query::show(app, &id).await,
        Endpoint::Response(id) => query::response(app, &id).await,
        Endpoint::Resolve(id) => {
            let body = read_body(app, req).await?;
            action::resolve_op(app, &id, &body).await
        }
        Endpoint::ReResolve(id) => {
            let body = read_body(app, req).await?;
            action::re_resolve_op(app, &id, &body).await
        }
        Endpoint::Approve(id) => {
            let body = read_body(app, req).await?;
            action::approve_op(app, &id, &body).await
        }
        Endpoint::Reject(id) => {
            let body = read_body(app, req).await?;
            action::reject_op(app, &id, &body).await
        }
        Endpoint::Rebind(id) => {
            let body = read_body(app, req).await?;
            action::rebind_op(app, &id, &body).await
        }
    }
}

/// `POST /admin/reload`: 200 with what changed, or 422 with every reason the running
/// configuration is kept. The call takes no arguments: its JSON body is read (as every
/// POST's, `application/json`) and not looked at.
async fn reload<B>(
    app: &App,
    reloader: &Reloader,
    req: Request<B>,
) -> Result<Response<ProxyBody>, AdminError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<crate::wire::BoxError>,
{
    if req.method() != Method::POST {
        return Err(AdminError::Method("POST"));
    }
    read_body(app, req).await?;
    match reloader.reload(Trigger::Admin).await {
        Ok(changes) => Ok(view::json_response(&serde_json::json!(changes))),
        Err(Refused(errors)) => Err(AdminError::Reload(errors)),
    }
}

/// 200 while the ledger can write; a 503 problem while it cannot (after a storage error,
/// until it has reopened itself).
fn health(app: &App) -> Result<Response<ProxyBody>, AdminError> {
    if app.ledger.writable() {
        return Ok(text(StatusCode::OK, "ok\n"));
    }
    Err(AdminError::Ledger(app.ledger.unwritable_reason().into()))
}

/// The whole request body of a POST declared `application/json`, up to `max_stored_response`
/// plus some slack for the JSON around it.
async fn read_body<B>(app: &App, req: Request<B>) -> Result<Bytes, AdminError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<crate::wire::BoxError>,
{
    browser::json_body(req.headers())?;
    let limit = app
        .config
        .limits
        .max_stored_response
        .saturating_add(BODY_SLACK);
    // Cut at the agents' body timeout: a call whose body never arrives must not hold its
    // connection forever.
    let after = app.config.limits.inbound.body_timeout;
    let read = tokio::time::timeout(after, collect_limited(req.into_body(), limit));
    match read.await {
        Err(_) => Err(AdminError::BodyTimeout(after)),
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(Unbuffered::TooLarge)) => Err(AdminError::TooLarge(limit)),
        Ok(Err(Unbuffered::Broken(why))) => Err(AdminError::BadRequest(format!(
            "The request body could not be read: {why}."
        ))),
    }
}

fn text(status: StatusCode, body: &str) -> Response<ProxyBody> {
    let mut resp = Response::new(full(body.to_string()));
    *resp.status_mut() = status;
    resp
}
