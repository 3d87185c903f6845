//! Behaviour tests of the guarded protocol: replays, conflicts and concurrent duplicates, the
//! operation ID and its refusals, the idempotency key, principals, the `Idem-*` headers, the
//! "not yet" answers and their shaping, the provider's rules, lookups, re-sends and key
//! retention.
//!
//! One test binary for the area (the crate is linked once for all of them), one module per
//! subject, sharing the harness in `tests/common/`. `cargo test --test guarded` runs the area;
//! `cargo test --test guarded -- MODULE::` one subject.

#[path = "../common/mod.rs"]
mod common;

mod concurrency;
mod conflict;
mod identity_errors;
mod intercepted;
mod json_exact;
mod key_injection;
mod key_length;
mod lookup_fields;
mod op_headers;
mod pending_status;
mod principal;
mod replay;
mod replay_notes;
mod resend;
mod retention_key;
mod rules;
mod shaping;
mod what_next;
