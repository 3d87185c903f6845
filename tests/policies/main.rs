//! Behaviour tests of the configuration and the shipped policies: loading and refusing
//! configurations, `idemproxy check`, the policy library's facts and the proxy's own answers
//! through each shipped policy.
//!
//! One test binary for the area (the crate is linked once for all of them), one module per
//! subject, sharing the harness in `tests/common/`. `cargo test --test policies` runs the area;
//! `cargo test --test policies -- MODULE::` one subject.

#[path = "../common/mod.rs"]
mod common;

mod check_cli;
mod config;
mod help;
mod policies;
mod shipped_answers;
