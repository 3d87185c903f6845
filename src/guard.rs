//! Guarded routes (stub: the ledger protocol is being written; for now they pass through).

use http::{Request, Response};
use hyper::body::Incoming;

use crate::app::App;
use crate::proxy::{ProxyBody, Target, passthrough};

pub async fn handle(
    app: &App,
    target: &Target<'_>,
    req: Request<Incoming>,
) -> (Response<ProxyBody>, &'static str) {
    (passthrough(app, target, req).await, "passthrough")
}
