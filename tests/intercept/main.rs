//! Behaviour tests of HTTPS interception for clients that only honour `HTTPS_PROXY`
//! (docs/reference.md sections 2, 6.3 and 9): what CONNECT is answered, the opaque tunnels,
//! requests for another host inside a tunnel, the inbound limits inside tunnels, `[intercept]`
//! refused when its CA is not usable, and `idemproxy ca init`. The guarded protocol through a
//! tunnel is `tests/guarded/intercepted.rs` (run on both ledgers); real Python clients are
//! `tests/sdk/test_intercept.py`.
//!
//! `cargo test --test intercept` runs the area; `cargo test --test intercept -- MODULE::` one
//! subject.

#[path = "../common/mod.rs"]
mod common;

mod ca_config;
mod ca_init;
mod connect;
mod limits;
mod reload;
