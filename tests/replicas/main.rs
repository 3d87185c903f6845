//! Behaviour tests of several replicas on one PostgreSQL ledger, and of `check` and `serve`
//! with a PostgreSQL ledger.
//!
//! One test binary for the area (the crate is linked once for all of them), one module per
//! subject, sharing the harness in `tests/common/`. `cargo test --test replicas` runs the area;
//! `cargo test --test replicas -- MODULE::` one subject.

#[path = "../common/mod.rs"]
mod common;

mod check_postgres;
mod kept_answers;
mod replicas;
