//! The admin API (SPEC section 7) on `admin_listen` (stub: only `/healthz` so far).

use std::sync::Arc;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::app::App;
use crate::proxy::{ProxyBody, full};

pub async fn handle(app: Arc<App>, req: Request<Incoming>) -> Response<ProxyBody> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n"),
        (&Method::GET, "/metrics") => text(StatusCode::OK, &app.metrics.render()),
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn text(status: StatusCode, body: &str) -> Response<ProxyBody> {
    let mut resp = Response::new(full(body.to_string()));
    *resp.status_mut() = status;
    resp
}
