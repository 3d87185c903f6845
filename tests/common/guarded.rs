//! What the guarded-route behaviour tests share: one provider `pay` mounted at `/pay` with a
//! guarded route `create_refund` (`POST /v1/refunds`, operation ID from `X-Operation-Id`),
//! requests that carry an operation ID, problem+json checks, and the ledger read back from
//! its file once the proxy has stopped.
//!
//! Like `common`, it drives the proxy only through its files and its wire; the one look
//! inside is `ledger`, which opens the ledger (the redb file, or the PostgreSQL mode's
//! database) with the crate's own ledger API after the process is gone (a test's way to see
//! the state docs/reference.md section 5.2 names).
//!
//! Test modules reach it as `crate::common::guarded` and use only part of it.
#![allow(dead_code)]

use std::net::SocketAddr;

use http::Method;
use idemproxy::clock::Timestamp;
use idemproxy::ledger::{Ledger, LedgerOptions};
use idemproxy::operation::{Event, EventKind, Operation};
use sha2::{Digest, Sha256};

use crate::common::{FakeProvider, Proxy, ProxyBuilder, Resp, route, send};
#[allow(unused_imports)] // not every test file asserts a problem
pub use crate::common::{assert_next, problem};

/// The provider's name and mount (`/pay`).
pub const PROVIDER: &str = "pay";
/// The guarded route's name.
pub const ROUTE: &str = "create_refund";
/// The route's path below the mount.
pub const PATH: &str = "/pay/v1/refunds";
/// The header the route reads its operation ID from (a default control header).
pub const OP_HEADER: &str = "x-operation-id";
pub const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");
pub const JSON: (&str, &str) = ("content-type", "application/json");

/// The `create_refund` route, its operation ID from `X-Operation-Id`, plus `extra` keys
/// (`effect = ...`, `on_missing_id = ...`).
pub fn refund_route(extra: &str) -> String {
    let mut text = route(ROUTE, "POST /v1/refunds", &["{header:x-operation-id}"]);
    text.push_str(extra);
    text
}

/// A proxy builder with `policies/pay.toml` for `provider`: `provider_keys` are more
/// `[provider]` keys (`dedupe = "key"`), `routes` the `[[route]]` tables.
pub fn builder(provider: &FakeProvider, provider_keys: &str, routes: &str) -> ProxyBuilder {
    let text = provider.policy(PROVIDER, &format!("{provider_keys}\n{routes}"));
    Proxy::builder().policy(PROVIDER, &text)
}

/// A started proxy in front of `provider` with one guarded `create_refund` route.
pub async fn start(provider: &FakeProvider, provider_keys: &str) -> Proxy {
    builder(provider, provider_keys, &refund_route(""))
        .start()
        .await
}

/// The operation ID the proxy derives for `X-Operation-Id: rendered`.
pub fn op_id(rendered: &str) -> String {
    format!("{PROVIDER}/{ROUTE}/{rendered}")
}

/// The `opaque` key: lowercase hex sha256 of the operation ID's bytes.
pub fn opaque_key(operation_id: &str) -> String {
    hex::encode(Sha256::digest(operation_id.as_bytes()))
}

/// POSTs a form body to the guarded route with `X-Operation-Id: rendered`.
pub async fn refund(proxy: &Proxy, rendered: &str, body: &str) -> Resp {
    refund_with(proxy, &[(OP_HEADER, rendered), FORM], body).await
}

/// POSTs `body` to the guarded route with exactly these headers.
pub async fn refund_with(proxy: &Proxy, headers: &[(&str, &str)], body: &str) -> Resp {
    send(Method::POST, &proxy.url(PATH), headers, body.to_string())
        .await
        .expect("the proxy answers")
}

/// Sends the same refund from a task, for a request that must stay pending while the test
/// acts (a held provider, a crash).
pub fn refund_in_background(
    proxy: &Proxy,
    rendered: &str,
    body: &str,
) -> tokio::task::JoinHandle<Result<Resp, hyper_util::client::legacy::Error>> {
    let (url, rendered, body) = (proxy.url(PATH), rendered.to_string(), body.to_string());
    tokio::spawn(
        async move { send(Method::POST, &url, &[(OP_HEADER, &rendered), FORM], body).await },
    )
}

/// Asserts the three operation headers of docs/reference.md section 6.1 on a guarded answer.
pub fn assert_op_headers(resp: &Resp, encoded_id: &str, state: &str, replayed: bool) {
    assert_eq!(
        resp.header("idem-operation-id"),
        Some(encoded_id),
        "{resp:?}"
    );
    assert_eq!(resp.header("idem-state"), Some(state), "{resp:?}");
    let replayed = if replayed { "true" } else { "false" };
    assert_eq!(
        resp.header("idempotent-replayed"),
        Some(replayed),
        "{resp:?}"
    );
}

/// Asserts that a problem body names the operation, the provider, the route and the state.
pub fn assert_problem_context(body: &serde_json::Value, id: &str, state: &str) {
    assert_eq!(body["operation_id"], id, "{body}");
    assert_eq!(body["provider"], PROVIDER, "{body}");
    assert_eq!(body["route"], ROUTE, "{body}");
    assert_eq!(body["state"], state, "{body}");
}

/// An operation as the ledger file holds it, with its history.
pub struct Stored {
    pub op: Operation,
    pub events: Vec<Event>,
    /// How many operations opening the file turned from `in_flight` to `unknown`: 0 when the
    /// proxy that wrote it had already done so (or left none in flight).
    pub orphaned_on_open: usize,
}

impl Stored {
    pub fn has_event(&self, kind: EventKind) -> bool {
        self.events.iter().any(|e| e.kind == kind)
    }
}

/// Stops the proxy (SIGTERM) and reads operation `id` from its ledger (the file, or in the
/// PostgreSQL mode its database). The proxy can be `restart`ed afterwards.
pub async fn ledger(proxy: &mut Proxy, id: &str) -> Stored {
    if proxy.pid().is_some() {
        let status = proxy.terminate().await;
        assert!(status.success(), "graceful stop: {status:?}");
    }
    let (ledger, orphaned_on_open) = Ledger::open(
        proxy.ledger_at(),
        Timestamp::now(),
        LedgerOptions::default(),
    )
    .await
    .expect("open the ledger file");
    let op = ledger.get(id).await.expect("read the ledger");
    let op = op.unwrap_or_else(|| panic!("no operation {id} in the ledger"));
    let events = ledger.events(id).await.expect("read the events");
    drop(ledger);
    Stored {
        op,
        events,
        orphaned_on_open: orphaned_on_open.len(),
    }
}

/// An address on which nothing listens (bound, then released).
pub async fn closed_port() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    listener.local_addr().expect("local addr")
}

/// The hashes as versions before the installation secret computed them (plain sha256), for
/// tests that guess values back or write a ledger as those versions did.
pub mod unkeyed {
    use sha2::{Digest, Sha256};

    fn frame(out: &mut Vec<u8>, bytes: &[u8]) {
        out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
        out.extend_from_slice(bytes);
    }

    /// The first 16 hex of the sha256 of `bytes`: the `method` and `path` fields' hashes.
    pub fn short(bytes: &[u8]) -> String {
        hex::encode(&Sha256::digest(bytes)[..8])
    }

    /// A form field's hash: the first 16 hex of sha256 of its values as a JSON array.
    pub fn field(value: &str) -> String {
        short(serde_json::Value::from(vec![value]).to_string().as_bytes())
    }

    /// The fingerprint of a form request without query or fingerprint headers; `pairs`
    /// one value per name, sorted by name.
    pub fn fingerprint(method: &str, path: &str, pairs: &[(&str, &str)]) -> String {
        let mut query = b"pairs".to_vec();
        frame(&mut query, &0u64.to_be_bytes());
        let mut body = b"form".to_vec();
        frame(&mut body, &(pairs.len() as u64).to_be_bytes());
        for (name, value) in pairs {
            frame(&mut body, name.as_bytes());
            frame(
                &mut body,
                serde_json::Value::from(vec![*value]).to_string().as_bytes(),
            );
        }
        let mut canonical = Vec::new();
        for part in [
            &b"idemproxy-fingerprint/1"[..],
            method.as_bytes(),
            path.as_bytes(),
            &query,
            &body,
            &0u64.to_be_bytes(),
        ] {
            frame(&mut canonical, part);
        }
        hex::encode(Sha256::digest(&canonical))
    }
}
