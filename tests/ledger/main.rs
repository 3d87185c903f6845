//! Behaviour tests of the ledger and the process that keeps it: crashes, a full disk, a ledger
//! that cannot write, group commit and a failed sync, a new ledger's names, the
//! installation secret, `ledger copy`, retention and tombstones, what it never holds, graceful
//! shutdown and huge pages.
//!
//! One test binary for the area (the crate is linked once for all of them), one module per
//! subject, sharing the harness in `tests/common/`. `cargo test --test ledger` runs the area;
//! `cargo test --test ledger -- MODULE::` one subject.

#[path = "../common/mod.rs"]
mod common;

mod crash;
mod disk_full;
mod failed_sync;
mod group_commit;
mod huge_pages;
mod in_use;
mod installation_secret;
mod ledger_copy;
mod ledger_down;
mod new_ledger;
mod retention;
mod secrets;
mod shutdown;
mod tombstones;
