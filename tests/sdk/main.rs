//! Behaviour tests as an agent's code sees them: the providers' official Python SDKs through
//! the real binary (the pytest files beside this one) and `idemproxy demo`.
//!
//! One test binary for the area, one module per subject; they need none of the harness in
//! `tests/common/`. `cargo test --test sdk` runs the area; `cargo test --test sdk --
//! MODULE::` one subject.

mod demo;
mod sdk;
