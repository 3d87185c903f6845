//! Behaviour tests of what operators see and do: the admin API and its browser rules, the
//! `idemproxy ops` CLI, approvals, notifications, the live event stream, the console,
//! `/healthz` and the request logs.
//!
//! One test binary for the area (the crate is linked once for all of them), one module per
//! subject, sharing the harness in `tests/common/`. `cargo test --test operators` runs the area;
//! `cargo test --test operators -- MODULE::` one subject.

#[path = "../common/mod.rs"]
mod common;

mod admin;
mod admin_browser;
mod approval_show;
mod console;
mod console_page;
mod deploy;
mod events;
mod healthz;
mod logs;
mod notify;
mod operator_show;
mod ops_cli;
mod re_resolve;
mod reload;
