//! The test harness's own tests (`tests/common/`): the fake provider, the process launcher,
//! the relay and the test database.
//!
//! One test binary for the area (the crate is linked once for all of them), one module per
//! subject, sharing the harness in `tests/common/`. `cargo test --test harness` runs the area;
//! `cargo test --test harness -- MODULE::` one subject.

#[path = "../common/mod.rs"]
mod common;

mod harness;
