//! Behaviour tests of forwarding: what crosses the proxy and how. Unguarded passthrough and
//! streaming, forward-proxy mode, routing and path spellings, header hygiene, upstream TLS,
//! `connect_to` and pooled connections, inbound limits and connections, guarded bodies under
//! pressure, HTTP/2 resets and an agent that gives up.
//!
//! One test binary for the area (the crate is linked once for all of them), one module per
//! subject, sharing the harness in `tests/common/`. `cargo test --test forwarding` runs the area;
//! `cargo test --test forwarding -- MODULE::` one subject.

#[path = "../common/mod.rs"]
mod common;

mod buffered;
mod connect_to;
mod connections;
mod disconnect;
mod forward_proxy;
mod h2_reset;
mod headers;
mod hygiene;
mod limits;
mod passthrough;
mod path_spellings;
mod routing;
mod streaming;
mod tls;
mod upstream_pool;
