//! The crash matrix (docs/guarantees.md, "Every crash window"): every crash point of the
//! request path and the background work, on three kinds of provider, on both ledgers. In each
//! cell the real binary runs with one point armed (`FAILPOINTS`), dies there on its own
//! (SIGABRT: no destructor, nothing flushed), is started again unarmed and settled by the
//! agent's replays; then the invariants are checked at the provider and in the ledger.
//!
//! Built only with the crash points compiled in: `cargo test --features failpoints --test
//! crash` (`.ci/test` builds the whole suite with that feature). Its PostgreSQL cells need the
//! local server of tests/common/database.rs.

#[path = "../common/mod.rs"]
mod common;

mod cell;
mod matrix;
