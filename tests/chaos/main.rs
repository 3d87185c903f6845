//! Random kills, many: agents send distinct operations and duplicates through the real proxy
//! to providers that deduplicate, that can be looked up, and that can do neither, and the
//! proxy is SIGKILLed at random moments, restarted, and checked after every kill
//! (`common::chaos::check`): every `succeeded` answer replays unchanged, every operation took
//! effect at most once, an executed one is `succeeded` or `unknown`, and an `unknown` one
//! settles where its provider allows. `redb` on the file ledger; `postgres` on a private
//! PostgreSQL server with two replicas, the server crashed and restarted, and the replicas'
//! connections cut and delayed by a TCP relay.
//!
//! `cargo test --test chaos` runs the short form (`IDEMPROXY_KILLS`, default 50 kills per
//! ledger); `IDEMPROXY_KILLS=1000 cargo test --release --test chaos -- --nocapture` the long
//! one. `IDEMPROXY_KILLS_SEED` repeats a run's random choices (the load's interleaving is
//! not reproducible).

#[path = "../common/mod.rs"]
mod common;

mod postgres;
mod redb;

use std::time::Duration;

/// Agents sending at once.
const AGENTS: usize = 6;
/// The most answers a round waits for before its kill (at least one).
const MAX_ROUND: u64 = 40;
/// How long each provider takes to act: kills land inside requests, not only between them.
const PROVIDER_DELAY: Duration = Duration::from_millis(2);

/// The kills of one run (`IDEMPROXY_KILLS`, default 50).
fn kills() -> usize {
    common::chaos::env_number("IDEMPROXY_KILLS", 50) as usize
}
