//! Power loss, not only process death: the ledger on a FUSE file system that keeps every
//! write not yet synced in memory and drops it on command (`lazyfs`), proven by `fs`, and
//! the real proxy under concurrent load with its power cut at random moments (`power`).
//!
//! Needs `/dev/fuse` and `fusermount3` (Debian's `fuse3`), and root or a user FUSE lets
//! mount; without them the tests fail, saying so. `cargo test --test power` runs the area;
//! `IDEMPROXY_POWER_CUTS=200 cargo test --test power` the long form (see `power`).

#[path = "../common/mod.rs"]
mod common;

mod fs;
mod lazyfs;
mod power;
