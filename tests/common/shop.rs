//! A `shop` provider with one guarded route (`POST /v1/things`, operation ID from
//! `X-Operation-Id`), for the tests that drive the admin API and the `ops` CLI.

use http::Method;

use super::client::{Resp, send};
use super::files::route;
use super::provider::FakeProvider;
use super::proxy::Proxy;

/// A started proxy in front of `provider`; `extra` follows the route, `env` is set for it.
pub async fn start(provider: &FakeProvider, extra: &str, env: &[(&str, &str)]) -> Proxy {
    let create = route("create", "POST /v1/things", &["{header:x-operation-id}"]);
    let mut builder = Proxy::builder().policy(
        "shop",
        &provider.policy("shop", &format!("{create}{extra}")),
    );
    for (key, value) in env {
        builder = builder.env(key, value);
    }
    builder.start().await
}

/// The agent's request for operation `op`.
pub async fn agent(proxy: &Proxy, op: &str) -> Resp {
    let url = proxy.url("/shop/v1/things");
    send(Method::POST, &url, &[("x-operation-id", op)], "amount=5")
        .await
        .expect("proxy answers")
}
