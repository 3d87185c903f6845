//! Behaviour tests of unknown outcomes: how an operation becomes `unknown` and stays so, how
//! it is reconciled by a lookup or settled by the proxy itself, and when it escalates to a
//! person.
//!
//! One test binary for the area (the crate is linked once for all of them), one module per
//! subject, sharing the harness in `tests/common/`. `cargo test --test unknown` runs the area;
//! `cargo test --test unknown -- MODULE::` one subject.

#[path = "../common/mod.rs"]
mod common;

mod escalation;
mod reconcile;
mod settler;
mod unknown;
mod unknown_stays;
mod what_next;
