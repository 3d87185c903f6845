//! The behaviour-test harness shared by every test binary in `tests/`: a fake provider, a
//! launcher for the real `idemproxy` process, a small HTTP client and a notification receiver;
//! `guarded` (a guarded route and its ledger) and `raw` (a client at the socket level).
//!
//! Everything binds port 0 and lives in temp dirs, so tests run in parallel; waits are on
//! signals (ready line, request counters), never on sleeps. It must never depend on the
//! proxy's internals: it drives the binary only through its files, its wire and its CLI,
//! exactly as docs/reference.md describes them.
//!
//! Each area's binary (`tests/AREA/main.rs`) loads it with `#[path = "../common/mod.rs"] mod
//! common;`, and its modules reach it as `crate::common`. A binary uses only part of it, hence
//! the allows (dead code, and the re-exports below that a given binary does not use).
#![allow(dead_code)]

pub mod behavior;
pub mod chaos;
pub mod client;
pub mod cluster;
pub mod database;
pub mod files;
pub mod guarded;
pub mod pattern;
pub mod process;
pub mod provider;
pub mod proxy;
pub mod raw;
pub mod relay;
pub mod replicas;
pub mod shop;
pub mod tls;
pub mod tunnel;
pub mod webhook;

#[allow(unused_imports)]
pub use client::{
    Body, Resp, assert_next, client, download, h2c_client, problem, send, send_h2c, send_with,
    upload,
};
#[allow(unused_imports)]
pub use database::Database;
#[allow(unused_imports)]
pub use files::{policy, route};
#[allow(unused_imports)]
pub use provider::{Answer, Behavior, Dedupe, FakeProvider, Recorded};
#[allow(unused_imports)]
pub use proxy::{ConfigDir, Proxy, ProxyBuilder};
#[allow(unused_imports)]
pub use relay::Relay;
#[allow(unused_imports)]
pub use replicas::Replicas;

/// The warning a redb ledger logs once each time it breaks (stops writing after a storage
/// error or a failed sync of its log). Matched with its parenthesis: the debug line of a
/// recovery attempt that failed ("the ledger cannot write yet") is not a break.
#[allow(dead_code)]
pub const LEDGER_BROKE: &str = "the ledger cannot write (is its disk full?)";
